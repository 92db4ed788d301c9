r"""Finite volumes on the circle :math:`S^1` for the density representation [model §5b].

A uniform grid of N cells in angle, :math:`K_k = [kh, (k+1)h)`, :math:`h = 2\pi/N`, centres
:math:`\theta_k = (k + \tfrac12)h`, cell averages :math:`\rho_k` and masses
:math:`m_k = \rho_k h`. The continuity equation in angle,

.. math::
    \partial_t \rho + \partial_\theta(\rho\, a) = 0,\qquad a = \sigma\langle v, \tau\rangle,
    \quad \tau(\theta) = (-\sin\theta, \cos\theta),

is discretised conservatively,

.. math::
    \dot m_k = -(F_{k+1/2} - F_{k-1/2}),\qquad
    F_{k+1/2} = a^+_{k+1/2}\,\rho^L_{k+1/2} + a^-_{k+1/2}\,\rho^R_{k+1/2},

with the face speed :math:`a_{k+1/2} = (a_k + a_{k+1})/2` (the field is known at the centres)
and the MUSCL reconstruction :math:`\rho^L_{k+1/2} = \rho_k + s_k/2`,
:math:`\rho^R_{k+1/2} = \rho_{k+1} - s_{k+1}/2` with limited slopes :math:`s_k`. Every flux
leaves one cell and enters its neighbour: :math:`\sum_k m_k` is conserved to round-off.

*Positivity.* With a TVD limiter (``minmod``, ``van_leer``, ``mc``) both face values of cell k
lie in :math:`[0, 2\rho_k]`, so a forward Euler step keeps :math:`\rho \ge 0` when
:math:`\Delta t \max|a| / h \le 1/2`; SSP Runge–Kutta schemes are convex combinations of
Euler steps and inherit it (:func:`cfl_dt`).

*Discrete dissipation.* For an energy :math:`E(m)` with potential
:math:`\Phi_k = \partial E / \partial m_k`, summation by parts gives, exactly,

.. math::
    \frac{dE}{dt} = \sum_k \Phi_k \dot m_k = \sum_k F_{k+1/2}\,(\Phi_{k+1} - \Phi_k)
    =: \sigma\,\mathcal D_h ,

(:func:`discrete_dissipation`), the semi-discrete chain rule of [model §5b].

*Diffusion* (:math:`\nu\,\partial_\theta^2\rho`, [model §5b]) is one more flux through each
face, the central difference :math:`F^\nu_{k+1/2} = -\nu(\rho_{k+1} - \rho_k)/h`
(:func:`diffusion_flux`, second order), added to the transport flux; the chain rule above
then holds for the total flux. A forward Euler step of the sum keeps :math:`\rho \ge 0` when
:math:`\Delta t\,(2\max|a|/h + 2\nu/h^2) \le 1` (:func:`cfl_dt` with ``nu``).

Arrays carry a leading batch of paths: ``rho`` (P, N).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LIMITERS", "CircleGrid", "limited_slopes", "face_values", "face_speeds",
           "upwind_flux", "flux_divergence", "discrete_dissipation", "cfl_dt", "POSITIVE_CFL",
           "diffusion_flux"]

#: slope limiters; "none" is the unlimited central slope (second order, not positive)
LIMITERS = ("minmod", "van_leer", "mc", "none")
#: the Courant number below which a forward Euler stage keeps ρ ≥ 0 (TVD limiters)
POSITIVE_CFL = 0.5


@dataclass(frozen=True)
class CircleGrid:
    r"""The uniform grid of N cells on :math:`S^1`.

    .. math:: h = 2\pi/N,\quad \theta_k = (k+\tfrac12)h,\quad c_k = (\cos\theta_k, \sin\theta_k)
    """

    N: int

    def __post_init__(self):
        if int(self.N) < 4:
            raise ValueError(f"N = {self.N}: a circle grid needs at least 4 cells")

    @property
    def h(self) -> float:
        return 2.0 * np.pi / self.N

    @property
    def theta(self) -> np.ndarray:
        """Cell centres (N,) in angle."""
        return self.h * (np.arange(self.N) + 0.5)

    @property
    def centres(self) -> np.ndarray:
        """Cell centres (N, 2) on the unit circle."""
        th = self.theta
        return np.stack([np.cos(th), np.sin(th)], axis=-1)

    @property
    def tangents(self) -> np.ndarray:
        r"""Unit tangents (N, 2) at the centres, :math:`\tau_k = (-\sin\theta_k, \cos\theta_k)`."""
        th = self.theta
        return np.stack([-np.sin(th), np.cos(th)], axis=-1)

    def cell_averages(self, f, order: int = 8) -> np.ndarray:
        r"""Cell averages :math:`\frac1h\int_{K_k} f(\theta)\,d\theta` of a vectorised f of
        the angle, by Gauss–Legendre quadrature with ``order`` nodes per cell (exact for
        polynomials of degree 2·order − 1 on each cell)."""
        x, w = np.polynomial.legendre.leggauss(order)
        h = self.h
        th = self.h * np.arange(self.N)[:, None] + 0.5 * h * (x[None, :] + 1.0)
        return (f(th) * w[None, :]).sum(axis=1) / 2.0

    def masses(self, rho) -> np.ndarray:
        """Cell masses :math:`m_k = \\rho_k h`."""
        return np.asarray(rho) * self.h

    # the mesh protocol of the density model (shared with wflow.geometry.sphere_mesh.SphereMesh)
    def transport(self, rho, velocity, sigma, limiter="van_leer", cfl=0.4, nu=0.0):
        r"""``(flux, rate, max_dt)`` of the field ``velocity`` (P, N, 2) at the centres:
        :math:`a_k = \sigma\langle v_k, \tau_k\rangle`, face speeds, the MUSCL upwind flux
        plus, for ``nu`` > 0, the diffusive flux :math:`-\nu(\rho_{k+1} - \rho_k)/h`,
        :math:`\dot\rho` and the CFL step (P,) of the sum. ``nu`` is a number or one
        diffusivity per face (P, N) (the mobility-weighted diffusion)."""
        a = sigma * np.einsum("pka,ka->pk", velocity, self.tangents)
        af = face_speeds(a)
        flux = upwind_flux(rho, af, limiter)
        if np.any(nu):
            flux = flux + diffusion_flux(rho, self.h, nu)
        return flux, flux_divergence(flux, self.h), cfl_dt(af, self.h, cfl, nu)

    def face_mean(self, u) -> np.ndarray:
        r""":math:`\tfrac12(u_k + u_{k+1})` at the faces :math:`k + \tfrac12` (P, N)."""
        return face_speeds(u)

    def diffusion(self, rho, nu):
        r"""``(flux, rate)`` of the diffusion alone: :math:`F^\nu_{k+1/2}` and
        :math:`\dot\rho_k = \nu(\rho_{k+1} - 2\rho_k + \rho_{k-1})/h^2` (P, N) each."""
        flux = diffusion_flux(rho, self.h, nu)
        return flux, flux_divergence(flux, self.h)

    def diffusion_dt(self, nu, cfl=0.4) -> float:
        r"""The positive forward Euler step of the diffusion alone, scaled like the transport's:
        :math:`\Delta t = \mathrm{cfl}\,h^2/\nu` (``cfl`` = 1/2 is the bound
        :math:`\nu\Delta t/h^2 \le 1/2`)."""
        return cfl * self.h**2 / nu

    def dissipation(self, flux, Phi, sigma) -> np.ndarray:
        """The scheme's dissipation (:func:`discrete_dissipation`)."""
        return discrete_dissipation(flux, Phi, sigma)


def _minmod(a, b):
    return np.where(a * b > 0, np.sign(a) * np.minimum(np.abs(a), np.abs(b)), 0.0)


def _next(a):
    """``a[..., k + 1]`` periodic in the last axis (``np.roll(a, -1, axis=-1)``, without its
    overhead on the small arrays of a step)."""
    a = np.asarray(a)
    out = np.empty_like(a)
    out[..., :-1] = a[..., 1:]
    out[..., -1] = a[..., 0]
    return out


def _prev(a):
    """``a[..., k - 1]`` periodic in the last axis (``np.roll(a, 1, axis=-1)``)."""
    a = np.asarray(a)
    out = np.empty_like(a)
    out[..., 1:] = a[..., :-1]
    out[..., 0] = a[..., -1]
    return out


def limited_slopes(rho, limiter="van_leer") -> np.ndarray:
    r"""Limited slopes :math:`s_k` (per cell width) from :math:`\Delta^-_k = \rho_k - \rho_{k-1}`
    and :math:`\Delta^+_k = \rho_{k+1} - \rho_k` (periodic):

    .. math::
        \text{minmod: } \operatorname{mm}(\Delta^-, \Delta^+),\quad
        \text{van Leer: } \frac{\Delta^-|\Delta^+| + |\Delta^-|\Delta^+}{|\Delta^-| + |\Delta^+|},\quad
        \text{MC: } \operatorname{mm}\big(2\Delta^-, \tfrac12(\Delta^- + \Delta^+), 2\Delta^+\big),

    and ``none``: :math:`\tfrac12(\Delta^- + \Delta^+)`.
    """
    rho = np.asarray(rho, dtype=float)
    dp = _next(rho) - rho
    dm = _prev(dp)  # Δ⁻_k = Δ⁺_{k-1}
    if limiter == "minmod":
        return _minmod(dm, dp)
    if limiter == "van_leer":
        den = np.abs(dm) + np.abs(dp)
        num = dm * np.abs(dp) + np.abs(dm) * dp
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    if limiter == "mc":
        return _minmod(_minmod(2 * dm, 2 * dp), 0.5 * (dm + dp))
    if limiter == "none":
        return 0.5 * (dm + dp)
    raise ValueError(f"limiter = {limiter!r}: allowed values are {', '.join(LIMITERS)}")


def face_values(rho, limiter="van_leer"):
    r"""MUSCL face values at :math:`k + \tfrac12`: :math:`(\rho^L, \rho^R) = (\rho_k + s_k/2,\
    \rho_{k+1} - s_{k+1}/2)`, each (P, N)."""
    rho = np.asarray(rho, dtype=float)
    s = limited_slopes(rho, limiter)
    left = rho + 0.5 * s
    right = _next(rho - 0.5 * s)
    return left, right


def face_speeds(a) -> np.ndarray:
    r"""Face speeds :math:`a_{k+1/2} = (a_k + a_{k+1})/2` from the centre speeds (P, N)."""
    a = np.asarray(a, dtype=float)
    return 0.5 * (a + _next(a))


def upwind_flux(rho, a_face, limiter="van_leer") -> np.ndarray:
    r"""The upwind flux :math:`F_{k+1/2} = a^+\rho^L + a^-\rho^R` (P, N), density per unit time
    through face :math:`k + \tfrac12`."""
    left, right = face_values(rho, limiter)
    return np.maximum(a_face, 0.0) * left + np.minimum(a_face, 0.0) * right


def flux_divergence(F, h) -> np.ndarray:
    r""":math:`\dot\rho_k = -(F_{k+1/2} - F_{k-1/2})/h` (P, N)."""
    return -(F - _prev(F)) / h


def discrete_dissipation(F, Phi, sigma) -> np.ndarray:
    r"""The scheme's dissipation
    :math:`\mathcal D_h = \sigma\sum_k F_{k+1/2}(\Phi_{k+1} - \Phi_k)` (P,), so that
    :math:`\frac{d}{dt}E = \sum_k \Phi_k\dot m_k = \sigma\mathcal D_h` exactly (σ² = 1)."""
    dPhi = _next(Phi) - Phi
    return sigma * np.sum(F * dPhi, axis=-1)


def diffusion_flux(rho, h, nu) -> np.ndarray:
    r""":math:`F^\nu_{k+1/2} = -\nu\,(\rho_{k+1} - \rho_k)/h` (P, N): with
    :func:`flux_divergence`, :math:`\dot\rho_k = \nu(\rho_{k+1} - 2\rho_k + \rho_{k-1})/h^2`,
    the second-order Laplacian in angle."""
    rho = np.asarray(rho, dtype=float)
    return -nu * (_next(rho) - rho) / h


def cfl_dt(a_face, h, cfl=0.4, nu=0.0) -> np.ndarray:
    r"""The largest step with Courant number ``cfl``: :math:`\Delta t = \mathrm{cfl}\;h/\max|a|`
    per path (P,) (∞ where the field vanishes). ``cfl`` ≤ :data:`POSITIVE_CFL` keeps ρ ≥ 0.
    With diffusion ``nu`` > 0 (or its largest face value), :math:`\Delta t =
    \mathrm{cfl}/(\max|a|/h + \nu/h^2)`: at
    ``cfl`` = 1/2 the convex combination of an advection step at Courant number 1/2 and a
    diffusion step at :math:`\nu\Delta t/h^2 = 1/2`, both positive [model §5b]."""
    amax = np.max(np.abs(a_face), axis=-1)
    if np.any(nu):  # a diffusivity per face (P, N): its largest bounds the step
        numax = np.max(nu, axis=-1) if np.ndim(nu) else nu
        return cfl / (amax / h + numax / h**2)
    with np.errstate(divide="ignore"):
        return np.where(amax > 0, cfl * h / np.where(amax > 0, amax, 1.0), np.inf)
