r"""The density representation on :math:`S^1` (d = 2): the attention field of a density [model §5b].

The state is the vector of cell averages :math:`\rho_k` on a :class:`~wflow.geometry.circle_fv.CircleGrid`
(batch ``rho`` (P, N)); the field at the cell centres :math:`c_k` is the field of the
*weighted* point set :math:`\{(c_k, m_k)\}`, :math:`m_k = \rho_k h`, from the fused kernel
(:meth:`wflow.model.attention.AttentionModel.evaluate` with ``weights``). Then, with
:math:`a_k = \sigma\langle v_k, \tau_k\rangle` and the MUSCL upwind flux
:math:`F_{k+1/2}` of :mod:`wflow.geometry.circle_fv`,

.. math::
    \dot\rho_k = -\frac{F_{k+1/2} - F_{k-1/2}}{h},\qquad
    E(m; D) = \frac{1}{2\beta H}\sum_h\sum_{k,l} m_k m_l e^{\beta\langle c_k, D_h c_l\rangle},

    \Phi_k = \frac{\partial E}{\partial m_k} = \frac{1}{\beta H}\sum_h Z_h(c_k),\qquad
    \mathcal D_h = \sigma\sum_k F_{k+1/2}(\Phi_{k+1} - \Phi_k),

so that :math:`dE/dt = \sigma\mathcal D_h` exactly for frozen weights (the semi-discrete chain
rule): the ``dissipation`` of a density run is :math:`\mathcal D_h`, and the exact ledger of
[model §6] closes with it at the integrator's order. Every other field quantity (G², G²_hm,
b̂, ∂_D E, the Itô sum) is the kernel's, mass-weighted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wflow.errors import NumericalError
from wflow.geometry import circle_fv as fv
from wflow.model.attention import AttentionModel, Field

__all__ = ["DensityModel", "DensityField", "von_mises_density", "initial_density"]


@dataclass
class DensityField(Field):
    r""":class:`~wflow.model.attention.Field` at the cell centres, with ``dissipation`` the
    scheme's :math:`\mathcal D_h`, plus ``rate`` (P, N) :math:`\dot\rho` (σ included),
    ``flux`` (P, N) :math:`F_{k+1/2}`, ``max_dt`` (P,) the CFL step and ``dissipation_cells``
    (P,) the cell quadrature :math:`\sum_k m_k\langle g_k, v_k\rangle` (the kernel's 𝒟) and
    ``masses`` (P, N) :math:`m_k` (the point means of the series are mass-weighted)."""

    rate: np.ndarray | None = None
    flux: np.ndarray | None = None
    max_dt: np.ndarray | None = None
    dissipation_cells: np.ndarray | None = None
    masses: np.ndarray | None = None


def von_mises_density(theta, kappa, mu=0.0):
    r""":math:`\rho(\theta) = e^{\kappa\cos(\theta-\mu)} / (2\pi I_0(\kappa))` (a probability
    density in arc length), computed with the scaled Bessel function (no overflow)."""
    from scipy.special import i0e

    return np.exp(kappa * (np.cos(theta - mu) - 1.0)) / (2 * np.pi * i0e(kappa))


@dataclass(frozen=True)
class DensityModel:
    """The attention model acting on cell averages of a density on the circle.

    Parameters
    ----------
    model : the :class:`AttentionModel` (β, normalisation, sign, Laplacian heads, values,
        backend); the causal mask has no meaning for a density and is refused.
    grid : the :class:`~wflow.geometry.circle_fv.CircleGrid`.
    limiter : slope limiter of the MUSCL reconstruction (:data:`~wflow.geometry.circle_fv.LIMITERS`).
    cfl : Courant number of :attr:`DensityField.max_dt` (≤ 1/2 keeps ρ ≥ 0).
    """

    model: AttentionModel
    grid: fv.CircleGrid
    limiter: str = "van_leer"
    cfl: float = 0.4

    def __post_init__(self):
        if self.model.causal:
            raise ValueError("mask = 'causal': a density has no token order; the density "
                             "representation needs mask = 'none'")
        if self.limiter not in fv.LIMITERS:
            raise ValueError(f"limiter = {self.limiter!r}: allowed values are "
                             f"{', '.join(map(repr, fv.LIMITERS))}")
        if not 0 < self.cfl <= 1:
            raise ValueError(f"cfl = {self.cfl!r}: must be in (0, 1] (≤ 0.5 keeps rho >= 0)")

    @property
    def sigma(self) -> float:
        return self.model.sigma

    @property
    def beta(self) -> float:
        return self.model.beta

    @property
    def causal(self) -> bool:
        return False

    @property
    def normalization(self) -> str:
        return self.model.normalization

    def points(self, P: int) -> np.ndarray:
        """The cell centres as a batch of points (P, N, d)."""
        c = self.grid.centres
        return np.broadcast_to(c, (P, *c.shape)).copy()

    def evaluate(self, rho, D, want_ito=True) -> DensityField:
        """Every field quantity of the density ``rho`` (P, N) at weights D (P, H, d, d)."""
        rho = np.asarray(rho, dtype=float)
        if np.any(rho < 0):  # masses must be >= 0 (a stage of an unlimited or too long step)
            raise NumericalError(
                f"density: negative cell average {float(rho.min()):.3g}; limiter "
                f"{self.limiter!r} with cfl = {self.cfl} (positivity needs a TVD limiter "
                f"and cfl <= {fv.POSITIVE_CFL})")
        P = rho.shape[0]
        g = self.grid
        F = self.model.evaluate(self.points(P), D, want_ito=want_ito, weights=g.masses(rho))
        flux, rate, max_dt = g.transport(rho, F.velocity, self.sigma, self.limiter, self.cfl)
        Phi = F.partition.mean(axis=1) / self.beta
        kw = dict(F.__dict__)
        kw["dissipation"] = g.dissipation(flux, Phi, self.sigma)
        return DensityField(**kw, rate=rate, flux=flux, max_dt=max_dt,
                            dissipation_cells=F.dissipation, masses=g.masses(rho))

    def rate(self, rho, D) -> np.ndarray:
        r""":math:`\dot\rho` (P, N) at frozen weights D (the stages of a step)."""
        return self.evaluate(rho, D, want_ito=False).rate

    def velocity(self, rho, D) -> np.ndarray:
        """The σ-free field v at the cell centres (P, N, d)."""
        rho = np.asarray(rho, dtype=float)
        return self.model.velocity(self.points(rho.shape[0]), D,
                                   weights=self.grid.masses(rho))


def initial_density(init: dict, grid) -> np.ndarray:
    r"""Cell averages (N,) of the initial law of ``[init]``: ``uniform`` (:math:`1/2\pi`) or
    ``vmf`` (von Mises with concentration ``init.kappa`` about :math:`e_2`, the particle
    solver's mean direction, :math:`\mu = \pi/2`), by Gauss–Legendre quadrature per cell.
    On a :class:`~wflow.geometry.sphere_mesh.SphereMesh` (S²): uniform :math:`1/4\pi`, or the
    von Mises–Fisher density :math:`\propto e^{\kappa\langle e_3, x\rangle}` sampled at the
    centres and scaled to mass 1 (first order)."""
    kind = init["tokens"]
    if not isinstance(grid, fv.CircleGrid):
        if kind == "uniform":
            return np.full(grid.N, 1.0) / grid.areas.sum()
        if kind == "vmf":
            kappa = float(init["kappa"])
            return grid.cell_values(lambda x: np.exp(kappa * (x[:, -1] - 1.0)))
        raise ValueError(f"tokens = {kind!r}: a density starts from 'uniform' or 'vmf'")
    if kind == "uniform":
        return np.full(grid.N, 1.0 / (2 * np.pi))
    if kind == "vmf":
        kappa = float(init["kappa"])
        return grid.cell_averages(lambda th: von_mises_density(th, kappa, np.pi / 2))
    raise ValueError(f"tokens = {kind!r}: a density starts from 'uniform' or 'vmf'")
