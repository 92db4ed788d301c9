r"""The density representation on :math:`S^1` (d = 2): the attention field of a density [model §5b].

The state is the vector of cell averages :math:`\rho_k` on a :class:`~wflow.geometry.circle_fv.CircleGrid`
(batch ``rho`` (P, N)); the field at the cell centres :math:`c_k` is the field of the
*weighted* point set :math:`\{(c_k, m_k)\}`, :math:`m_k = \rho_k h`, from the fused kernel
(:meth:`wflow.model.attention.AttentionModel.evaluate` with ``weights``), or, for a model with
``summation = "spectral"``, from the spectral sums with the masses as strengths (S¹ and S²,
within the model's tolerance [model §2s]). Then, with
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

With diffusion :math:`\nu > 0` the flux is the total one (transport plus
:math:`-\nu\,\Delta\rho/\text{distance}` across each face), so the chain rule still reads
:math:`dE/dt = \sigma\mathcal D_h`, and the free energy of [model §5b],

.. math::
    \mathcal F_h = -\sigma E + \nu S_h,\qquad S_h = \sum_k m_k\log\rho_k,\qquad
    \frac{d\mathcal F_h}{dt} = -\mathcal D_h + \nu\sum_{\rm faces} F\,\Delta\log\rho,

is part of the field (``entropy``, ``free_energy``, ``free_energy_rate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wflow.errors import NumericalError
from wflow.geometry import circle_fv as fv
from wflow.model.attention import AttentionModel, Field

__all__ = ["DensityModel", "DensityField", "von_mises_density", "initial_density",
           "real_harmonic", "perturbation", "NOISE_STREAM", "DIFFUSION_SCHEMES",
           "DIFFUSION_MOBILITIES"]

#: how the diffusion is stepped [model §5b]
DIFFUSION_SCHEMES = ("explicit", "split")
#: the mobility of the diffusion: 1 (ν Δ_S ρ) or the field's b̂ (ν div(b̂ ∇ρ)) [model §5b]
DIFFUSION_MOBILITIES = ("one", "b_hat")


@dataclass
class DensityField(Field):
    r""":class:`~wflow.model.attention.Field` at the cell centres, with ``dissipation`` the
    scheme's :math:`\mathcal D_h`, plus ``rate`` (P, N) :math:`\dot\rho` (σ included),
    ``flux`` (P, N) :math:`F_{k+1/2}`, ``max_dt`` (P,) the CFL step and ``dissipation_cells``
    (P,) the cell quadrature :math:`\sum_k m_k\langle g_k, v_k\rangle` (the kernel's 𝒟) and
    ``masses`` (P, N) :math:`m_k` (the point means of the series are mass-weighted); with
    diffusion :math:`\nu > 0` also ``entropy`` :math:`S_h`, ``free_energy``
    :math:`\mathcal F_h` and ``free_energy_rate`` :math:`d\mathcal F_h/dt` (P,) each, and with
    the split diffusion ``transport_rate`` (P, N), the transport's part of ``rate``."""

    rate: np.ndarray | None = None
    flux: np.ndarray | None = None
    max_dt: np.ndarray | None = None
    dissipation_cells: np.ndarray | None = None
    masses: np.ndarray | None = None
    entropy: np.ndarray | None = None
    free_energy: np.ndarray | None = None
    free_energy_rate: np.ndarray | None = None
    transport_rate: np.ndarray | None = None


def von_mises_density(theta, kappa, mu=0.0):
    r""":math:`\rho(\theta) = e^{\kappa\cos(\theta-\mu)} / (2\pi I_0(\kappa))` (a probability
    density in arc length), computed with the scaled Bessel function (no overflow)."""
    from scipy.special import i0e

    return np.exp(kappa * (np.cos(theta - mu) - 1.0)) / (2 * np.pi * i0e(kappa))


@dataclass(frozen=True)
class DensityModel:
    r"""The attention model acting on cell averages of a density on the circle or the sphere.

    Parameters
    ----------
    model : the :class:`AttentionModel` (β, normalisation, sign, Laplacian heads, values,
        backend, summation: the direct weighted pass or the spectral sums [model §2s]); the
        causal mask has no meaning for a density and is refused.
    grid : the :class:`~wflow.geometry.circle_fv.CircleGrid`.
    limiter : slope limiter of the MUSCL reconstruction (:data:`~wflow.geometry.circle_fv.LIMITERS`).
    cfl : Courant number of :attr:`DensityField.max_dt` (≤ 1/2 keeps ρ ≥ 0).
    nu : diffusion ν ≥ 0 (the term ν Δ_S ρ) [model §5b].
    diffusion_scheme : ``"explicit"``: the diffusive flux joins the transport's in every stage
        and the Courant condition of the sum sets the substeps; ``"split"``: Strang splitting,
        each substep of the transport (its own Courant condition) between two half-steps of
        the diffusion alone (:meth:`diffuse`, sub-cycled SSP-RK3). The field's ``rate``,
        ``flux`` and dissipation are the whole PDE's either way; ``max_dt`` is the step of
        the scheme.
    diffusion_mobility : ``"one"``: :math:`\nu\Delta_S\rho` (the gradient flow of the free
        energy for `none`); ``"b_hat"``: :math:`\nu\operatorname{div}(\hat b\nabla\rho)`,
        face diffusivity :math:`\nu(\hat b_i + \hat b_j)/2` from the field's
        :math:`\hat b = 1/\bar Z` (the gradient flow for `joint`); explicit scheme only.
    """

    model: AttentionModel
    grid: fv.CircleGrid
    limiter: str = "van_leer"
    cfl: float = 0.4
    nu: float = 0.0
    diffusion_scheme: str = "explicit"
    diffusion_mobility: str = "one"

    def __post_init__(self):
        if self.model.causal:
            raise ValueError("mask = 'causal': a density has no token order; the density "
                             "representation needs mask = 'none'")
        if self.limiter not in fv.LIMITERS:
            raise ValueError(f"limiter = {self.limiter!r}: allowed values are "
                             f"{', '.join(map(repr, fv.LIMITERS))}")
        if not 0 < self.cfl <= 1:
            raise ValueError(f"cfl = {self.cfl!r}: must be in (0, 1] (≤ 0.5 keeps rho >= 0)")
        if not self.nu >= 0:
            raise ValueError(f"nu = {self.nu!r}: the diffusion must be >= 0")
        if self.diffusion_scheme not in DIFFUSION_SCHEMES:
            raise ValueError(f"diffusion_scheme = {self.diffusion_scheme!r}: allowed values are "
                             f"{', '.join(map(repr, DIFFUSION_SCHEMES))}")
        if self.diffusion_mobility not in DIFFUSION_MOBILITIES:
            raise ValueError(f"diffusion_mobility = {self.diffusion_mobility!r}: allowed values "
                             f"are {', '.join(map(repr, DIFFUSION_MOBILITIES))}")
        if self.diffusion_mobility == "b_hat" and self.split:
            raise ValueError("diffusion_mobility = 'b_hat': the mobility-weighted diffusion "
                             "needs the field in every stage: allowed with "
                             "diffusion_scheme = 'explicit' only")

    @property
    def split(self) -> bool:
        """Strang splitting of the diffusion (``diffusion_scheme = "split"`` and ν > 0)."""
        return bool(self.nu) and self.diffusion_scheme == "split"

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
        transport_rate = None
        if self.split:  # the transport's own step; the flux and rate of the whole PDE
            flux, transport_rate, max_dt = g.transport(rho, F.velocity, self.sigma,
                                                       self.limiter, self.cfl)
            flux_nu, rate_nu = g.diffusion(rho, self.nu)
            flux, rate = flux + flux_nu, transport_rate + rate_nu
        elif self.nu:
            nu = (self.nu * g.face_mean(F.b_hat) if self.diffusion_mobility == "b_hat"
                  else self.nu)
            flux, rate, max_dt = g.transport(rho, F.velocity, self.sigma, self.limiter,
                                             self.cfl, nu=nu)
        else:
            flux, rate, max_dt = g.transport(rho, F.velocity, self.sigma, self.limiter,
                                             self.cfl)
        Phi = F.partition.mean(axis=1) / self.beta
        kw = dict(F.__dict__)
        report = kw.pop("spectral", None)  # the spectral summation's report, if any [model §2s]
        kw["dissipation"] = g.dissipation(flux, Phi, self.sigma)
        out = DensityField(**kw, rate=rate, flux=flux, max_dt=max_dt,
                           dissipation_cells=F.dissipation, masses=g.masses(rho),
                           transport_rate=transport_rate)
        if report is not None:
            out.spectral = report
        if self.nu:
            self._free_energy(out, rho)
        return out

    def _free_energy(self, out: DensityField, rho):
        r"""Fill ``entropy`` :math:`S_h = \sum_k m_k\log\rho_k` (0 log 0 = 0),
        ``free_energy`` :math:`-\sigma E + \nu S_h` and ``free_energy_rate``
        :math:`-\mathcal D_h + \nu\sum F\,\Delta\log\rho` (NaN if a cell is empty: the
        entropy's rate is then unbounded) [model §5b]."""
        pos = rho > 0
        logr = np.log(np.where(pos, rho, 1.0))
        out.entropy = np.sum(out.masses * logr, axis=-1)
        out.free_energy = -self.sigma * out.energy + self.nu * out.entropy
        dS = self.grid.dissipation(out.flux, logr, 1.0)
        out.free_energy_rate = np.where(pos.all(axis=-1), -out.dissipation + self.nu * dS,
                                        np.nan)

    def rate(self, rho, D) -> np.ndarray:
        r""":math:`\dot\rho` (P, N) at frozen weights D (the stages of a step): the whole
        PDE's, or the transport's alone when the diffusion is split."""
        F = self.evaluate(rho, D, want_ito=False)
        return F.transport_rate if self.split else F.rate

    def diffuse(self, rho, tau) -> np.ndarray:
        r""":math:`\rho` after a time τ of the diffusion alone, :math:`\dot\rho = \nu L_h\rho`,
        by :math:`m = \lceil\tau/\Delta t_\nu\rceil` equal SSP-RK3 substeps
        (:math:`\Delta t_\nu` the grid's ``diffusion_dt`` at ``cfl``): positive and
        conservative, time error :math:`O(\tau\,(\tau/m)^3)` (the half-steps of the split
        scheme, [model §5b])."""
        g = self.grid
        m = max(1, math.ceil(tau / g.diffusion_dt(self.nu, self.cfl) * (1 - 1e-12)))
        k = tau / m

        def L(r):
            return g.diffusion(r, self.nu)[1]

        for _ in range(m):
            r1 = rho + k * L(rho)
            r2 = 0.75 * rho + 0.25 * (r1 + k * L(r1))
            rho = rho / 3.0 + (2.0 / 3.0) * (r2 + k * L(r2))
        return rho

    def velocity(self, rho, D) -> np.ndarray:
        """The σ-free field v at the cell centres (P, N, d)."""
        rho = np.asarray(rho, dtype=float)
        return self.model.velocity(self.points(rho.shape[0]), D,
                                   weights=self.grid.masses(rho))


#: the seed stream of ``init.tokens = "uniform_noise"`` [model §5b]
NOISE_STREAM = (7,)


def real_harmonic(ell: int, m: int, x) -> np.ndarray:
    r"""The real spherical harmonic of mean square 1 over :math:`S^2` at points x (M, 3):

    .. math::
        \tilde Y_{\ell 0} = \sqrt{2\ell+1}\,P_\ell(z),\qquad
        \tilde Y_{\ell m} = \sqrt{2(2\ell+1)\tfrac{(\ell-|m|)!}{(\ell+|m|)!}}\,
        P_\ell^{|m|}(z)\,\{\cos m\varphi \ (m > 0),\ \sin|m|\varphi \ (m < 0)\},

    so :math:`\frac{1}{4\pi}\int\tilde Y_{\ell m}\tilde Y_{\ell' m'} = \delta\delta` and
    :math:`\Delta_S\tilde Y_{\ell m} = -\ell(\ell+1)\tilde Y_{\ell m}`."""
    from scipy.special import gammaln, lpmv

    x = np.asarray(x, dtype=float)
    z = np.clip(x[..., 2], -1.0, 1.0)
    phi = np.arctan2(x[..., 1], x[..., 0])
    a = abs(int(m))
    P = lpmv(a, int(ell), z)
    if a == 0:
        return np.sqrt(2 * ell + 1.0) * P
    c = np.sqrt(2 * (2 * ell + 1.0) * np.exp(gammaln(ell - a + 1) - gammaln(ell + a + 1)))
    return c * P * (np.cos(a * phi) if m > 0 else np.sin(a * phi))


def perturbation(init: dict, d: int):
    r"""The relative perturbation :math:`\xi` of ``init.tokens = "uniform_mode"`` or
    ``"uniform_noise"`` as a function of the angle (S¹, ``d`` = 2) or of points (S²), so that
    :math:`\rho_0 = \bar\rho(1 + \xi)` [model §5b]:

    .. math::
        \text{mode: } \xi = \varepsilon\cos k\theta \ \text{or}\ \varepsilon\tilde Y_{\ell m};
        \qquad
        \text{noise: } \xi = \sum_{k=1}^{K}(a_k\cos k\theta + b_k\sin k\theta)
        \ \text{or}\ \sum_{\ell=1}^{L}\sum_{m=-\ell}^{\ell} c_{\ell m}\tilde Y_{\ell m},

    coefficients iid :math:`N(0, s^2)`, :math:`s = \varepsilon/\sqrt K` resp.
    :math:`\varepsilon/\sqrt{(L+1)^2 - 1}` (pointwise standard deviation ε), drawn in that
    order from ``SeedSequence(init.seed, spawn_key=(7,))``: independent of the mesh."""
    eps = float(init["amplitude"])
    kind = init["tokens"]
    if kind == "uniform_mode":
        k, m = int(init["mode"]), int(init["mode_m"])
        if d == 2:
            return lambda th: eps * np.cos(k * th)
        return lambda x: eps * real_harmonic(k, m, x)
    K = int(init["noise_modes"])
    rng = np.random.default_rng(np.random.SeedSequence(int(init["seed"]),
                                                       spawn_key=NOISE_STREAM))
    if d == 2:
        ab = rng.standard_normal((K, 2)) * (eps / np.sqrt(K))
        ks = np.arange(1, K + 1)

        def xi(th):
            th = np.asarray(th, dtype=float)[..., None]
            return np.sum(ab[:, 0] * np.cos(ks * th) + ab[:, 1] * np.sin(ks * th), axis=-1)
        return xi
    lm = [(ell, m) for ell in range(1, K + 1) for m in range(-ell, ell + 1)]
    c = rng.standard_normal(len(lm)) * (eps / np.sqrt(len(lm)))
    return lambda x: sum(ci * real_harmonic(ell, m, x) for ci, (ell, m) in zip(c, lm))


def initial_density(init: dict, grid) -> np.ndarray:
    r"""Cell averages (N,) of the initial law of ``[init]``: ``uniform`` (:math:`1/2\pi`) or
    ``vmf`` (von Mises with concentration ``init.kappa`` about :math:`e_2`, the particle
    solver's mean direction, :math:`\mu = \pi/2`), by Gauss–Legendre quadrature per cell.
    On a :class:`~wflow.geometry.sphere_mesh.SphereMesh` (S²): uniform :math:`1/4\pi`, or the
    von Mises–Fisher density :math:`\propto e^{\kappa\langle e_3, x\rangle}` sampled at the
    centres and scaled to mass 1 (first order). ``uniform_mode`` and ``uniform_noise``:
    :math:`\bar\rho(1 + \xi)` with :math:`\xi` of :func:`perturbation` (a negative cell
    average is a :class:`~wflow.errors.ConfigError` naming ``init.amplitude``)."""
    kind = init["tokens"]
    s2 = not isinstance(grid, fv.CircleGrid)
    if kind in ("uniform_mode", "uniform_noise"):
        xi = perturbation(init, 3 if s2 else 2)
        rho = (grid.cell_values(lambda x: 1.0 + xi(x)) if s2
               else grid.cell_averages(lambda th: (1.0 + xi(th)) / (2 * np.pi)))
        if np.any(rho < 0):
            from wflow.errors import ConfigError

            raise ConfigError(f"init.amplitude = {init['amplitude']!r}: the perturbed start "
                              f"{kind!r} has a negative cell average ({rho.min():.3g}); "
                              "a density needs a smaller amplitude")
        return rho
    if s2:
        if kind == "uniform":
            return np.full(grid.N, 1.0) / grid.areas.sum()
        if kind == "vmf":
            kappa = float(init["kappa"])
            return grid.cell_values(lambda x: np.exp(kappa * (x[:, -1] - 1.0)))
        raise ValueError(f"tokens = {kind!r}: a density starts from 'uniform', 'vmf', "
                         "'uniform_mode' or 'uniform_noise'")
    if kind == "uniform":
        return np.full(grid.N, 1.0 / (2 * np.pi))
    if kind == "vmf":
        kappa = float(init["kappa"])
        return grid.cell_averages(lambda th: von_mises_density(th, kappa, np.pi / 2))
    raise ValueError(f"tokens = {kind!r}: a density starts from 'uniform', 'vmf', "
                     "'uniform_mode' or 'uniform_noise'")
