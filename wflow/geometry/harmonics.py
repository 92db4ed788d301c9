r"""Band-limited functions on :math:`S^1` and :math:`S^2` on dealiased quadrature grids
[model §5b, "The spectral representation"].

*S¹* (:class:`CircleHarmonics`): Fourier modes :math:`|k| \le K` on :math:`N` equispaced
angles :math:`\theta_j = 2\pi j/N`, :math:`N` the even number in :math:`\{3K+1, 3K+2\}`
(the 3/2 rule: the product of two functions of degree K is analysed exactly onto
:math:`|k| \le K`), weights :math:`\omega_j = 2\pi/N`.

*S²* (:class:`SphereHarmonics`): spherical harmonics to degree L on the Gauss–Legendre grid of
degree :math:`M = \lceil 3L/2\rceil`: :math:`M + 1` nodes :math:`\cos\theta_j` (the
Gauss–Legendre nodes, no pole) times :math:`2M + 2` equispaced azimuths, weights
:math:`\omega_{jk} = w_j\,2\pi/(2M+2)`; the quadrature is exact for polynomials of degree
:math:`2M + 1 \ge 3L + 1` on the sphere, so the analysis onto degree L of any polynomial of
degree :math:`\le 2L` (a product of two degree-L functions) is exact. The basis is
:math:`\Lambda_{\ell m}(\theta)e^{im\varphi}` with the orthonormal associated Legendre
functions of :func:`wflow.kernels.spectral._legendre` (Condon–Shortley phase,
:math:`\int\lvert\Lambda_{\ell m}e^{im\varphi}\rvert^2 = 1`); a real function keeps
:math:`m \ge 0`, coefficients ``(..., L+1, L+1)`` indexed ``[ℓ, m]`` (zero for m > ℓ).

The divergence of a tangent field :math:`F` is computed in the weak form,

.. math::
    \big(\operatorname{div}_S F\big)_{\ell m} = -\int_{S^2}\big\langle F,
    \nabla_S\overline{Y_{\ell m}}\big\rangle
    = -\sum_{j,k}\omega_{jk}\Big[F_\theta\,\partial_\theta\Lambda_{\ell m}
      - \frac{im}{\sin\theta_j}F_\varphi\,\Lambda_{\ell m}\Big]e^{-im\varphi_k},

with :math:`\sin\theta\,\partial_\theta\Lambda_{\ell m} = \ell c_{\ell+1,m}\Lambda_{\ell+1,m}
- (\ell+1)c_{\ell m}\Lambda_{\ell-1,m}`, :math:`c_{\ell m} = \sqrt{(\ell^2-m^2)/(4\ell^2-1)}`:
no pole is touched, and the result is the exact projection :math:`P_L\operatorname{div}_S F`
for Cartesian components of degree :math:`\le 2L`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from wflow.kernels.spectral import _legendre

__all__ = ["CircleHarmonics", "SphereHarmonics", "harmonics", "circle_nodes", "sphere_grid_degree"]


def circle_nodes(K: int) -> int:
    """The even number N of nodes of degree K on S¹: 3K + 2 (K even) or 3K + 1 (K odd)."""
    return 2 * ((3 * int(K) + 2) // 2)


def sphere_grid_degree(L: int) -> int:
    r"""The grid degree :math:`M = \lceil 3L/2\rceil` of degree L on S²."""
    return (3 * int(L) + 1) // 2


@dataclass(frozen=True)
class CircleHarmonics:
    r"""Fourier modes :math:`|k| \le K` on the N equispaced angles of :func:`circle_nodes`.

    Grid functions carry a leading batch: ``f`` (..., N)."""

    K: int

    def __post_init__(self):
        if int(self.K) < 1:
            raise ValueError(f"degree = {self.K!r}: the Fourier degree K must be >= 1")

    d = 2

    @property
    def degree(self) -> int:
        return int(self.K)

    @property
    def N(self) -> int:
        return circle_nodes(self.K)

    @functools.cached_property
    def theta(self) -> np.ndarray:
        """The nodes (N,) in angle."""
        return 2.0 * np.pi * np.arange(self.N) / self.N

    @functools.cached_property
    def centres(self) -> np.ndarray:
        """The nodes (N, 2) on the circle."""
        th = self.theta
        return np.stack([np.cos(th), np.sin(th)], axis=-1)

    @functools.cached_property
    def tangents(self) -> np.ndarray:
        r""":math:`\tau_j = (-\sin\theta_j, \cos\theta_j)` (N, 2)."""
        th = self.theta
        return np.stack([-np.sin(th), np.cos(th)], axis=-1)

    @functools.cached_property
    def weights(self) -> np.ndarray:
        r""":math:`\omega_j = 2\pi/N` (N,)."""
        return np.full(self.N, 2.0 * np.pi / self.N)

    @functools.cached_property
    def eigenvalues(self) -> np.ndarray:
        r""":math:`k^2`, k = 0..K (minus the Laplacian's eigenvalues)."""
        return np.arange(self.K + 1, dtype=float) ** 2

    def masses(self, rho) -> np.ndarray:
        r""":math:`m_j = \omega_j\rho_j`."""
        return np.asarray(rho) * self.weights

    def analysis(self, f) -> np.ndarray:
        r""":math:`\hat f_k = \frac1N\sum_j f_j e^{-ik\theta_j}`, k = 0..K (..., K+1) complex."""
        return np.fft.rfft(np.asarray(f, dtype=float), axis=-1)[..., : self.K + 1] / self.N

    def synthesis(self, c) -> np.ndarray:
        r""":math:`f_j = \hat f_0 + 2\operatorname{Re}\sum_{k=1}^K \hat f_k e^{ik\theta_j}` (..., N)."""
        c = np.asarray(c)
        full = np.zeros(c.shape[:-1] + (self.N // 2 + 1,), dtype=complex)
        full[..., : self.K + 1] = c
        return np.fft.irfft(full * self.N, n=self.N, axis=-1)

    def project(self, f) -> np.ndarray:
        """:math:`P_K f` at the nodes."""
        return self.synthesis(self.analysis(f))

    def values(self, f) -> np.ndarray:
        r""":math:`P_K f` at the nodes of a vectorised function f of the angle, analysed on a
        grid of :math:`8(K+1)` angles (so the aliasing of a smooth f is that of its tail)."""
        fine = CircleHarmonics(4 * self.K + 4)
        c = fine.analysis(f(fine.theta))[..., : self.K + 1]
        return self.synthesis(c)

    def flux_divergence(self, F) -> np.ndarray:
        r"""Coefficients of :math:`P_K\,\partial_\theta F` of the grid function F (..., N)
        (the tangential component of a flux): :math:`ik\hat F_k`."""
        return 1j * np.arange(self.K + 1) * self.analysis(F)

    def gradient(self, c) -> np.ndarray:
        r""":math:`\nabla_S f = f'(\theta)\,\tau` at the nodes (..., N, 2) of the function with
        coefficients c."""
        df = self.synthesis(1j * np.arange(self.K + 1) * np.asarray(c))
        return df[..., None] * self.tangents

    def speed_bound(self, speed) -> np.ndarray:
        r""":math:`K\max_j\lvert a_j\rvert` per path: the largest transport rate of the
        resolved modes."""
        return self.K * np.max(np.abs(speed), axis=-1)


@functools.lru_cache(maxsize=8)
def _sphere_tables(L: int):
    """Nodes, weights and the Legendre tables of degree L on its grid (see SphereHarmonics)."""
    M = sphere_grid_degree(L)
    xg, wg = np.polynomial.legendre.leggauss(M + 1)
    xg, wg = xg[::-1].copy(), wg[::-1].copy()  # θ increasing from the north
    sg = np.sqrt(1.0 - xg * xg)
    lam = _legendre(L + 1, xg, sg)  # over m = 0..L+1: (L+2-m, M+1)
    Lam = np.zeros((L + 1, L + 1, M + 1))  # [m, ℓ, j]
    dLam = np.zeros((L + 1, L + 1, M + 1))  # sin θ ∂_θ Λ_ℓm
    for m in range(L + 1):
        rows = lam[m]  # ℓ = m..L+1
        for ll in range(m, L + 1):
            Lam[m, ll] = rows[ll - m]
            c1 = math.sqrt(((ll + 1) ** 2 - m * m) / (4.0 * (ll + 1) ** 2 - 1.0))
            term = ll * c1 * rows[ll + 1 - m]
            if ll > m:
                c0 = math.sqrt((ll * ll - m * m) / (4.0 * ll * ll - 1.0))
                term = term - (ll + 1) * c0 * rows[ll - 1 - m]
            dLam[m, ll] = term
    Nphi = 2 * M + 2
    phi = 2.0 * np.pi * np.arange(Nphi) / Nphi
    return M, xg, wg, sg, Lam, dLam, phi


@dataclass(frozen=True)
class SphereHarmonics:
    r"""Spherical harmonics to degree L on the Gauss–Legendre grid of degree
    :math:`M = \lceil 3L/2\rceil` (:func:`sphere_grid_degree`): :math:`(M+1)(2M+2)` nodes,
    θ-major (node ``j * (2M+2) + k`` is :math:`(\theta_j, \varphi_k)`).

    Grid functions carry a leading batch: ``f`` (..., G); coefficients (..., L+1, L+1)."""

    L: int

    def __post_init__(self):
        if int(self.L) < 1:
            raise ValueError(f"degree = {self.L!r}: the harmonic degree L must be >= 1")

    d = 3

    @property
    def degree(self) -> int:
        return int(self.L)

    @property
    def _t(self):
        return _sphere_tables(int(self.L))

    @property
    def shape(self) -> tuple[int, int]:
        """(polar, azimuthal) nodes: (M + 1, 2M + 2)."""
        M = self._t[0]
        return M + 1, 2 * M + 2

    @property
    def N(self) -> int:
        a, b = self.shape
        return a * b

    @functools.cached_property
    def centres(self) -> np.ndarray:
        """The nodes (G, 3)."""
        _, xg, _, sg, _, _, phi = self._t
        return np.stack([np.outer(sg, np.cos(phi)), np.outer(sg, np.sin(phi)),
                         np.outer(xg, np.ones_like(phi))], axis=-1).reshape(-1, 3)

    @functools.cached_property
    def frames(self) -> tuple[np.ndarray, np.ndarray]:
        r"""The unit vectors :math:`\hat e_\theta`, :math:`\hat e_\varphi` (G, 3) each."""
        _, xg, _, sg, _, _, phi = self._t
        one = np.ones_like(phi)
        et = np.stack([np.outer(xg, np.cos(phi)), np.outer(xg, np.sin(phi)),
                       np.outer(-sg, one)], axis=-1).reshape(-1, 3)
        ep = np.stack([np.outer(np.ones_like(xg), -np.sin(phi)),
                       np.outer(np.ones_like(xg), np.cos(phi)),
                       np.zeros((len(xg), len(phi)))], axis=-1).reshape(-1, 3)
        return et, ep

    @functools.cached_property
    def weights(self) -> np.ndarray:
        r""":math:`\omega_{jk} = w_j\,2\pi/(2M+2)` (G,), summing to :math:`4\pi`."""
        _, _, wg, _, _, _, phi = self._t
        return np.outer(wg, np.full(len(phi), 2.0 * np.pi / len(phi))).reshape(-1)

    @functools.cached_property
    def eigenvalues(self) -> np.ndarray:
        r""":math:`\ell(\ell+1)` as (L+1, 1) (minus the Laplacian's eigenvalues, by ℓ)."""
        ell = np.arange(self.L + 1, dtype=float)
        return (ell * (ell + 1))[:, None]

    def masses(self, rho) -> np.ndarray:
        r""":math:`m_g = \omega_g\rho_g`."""
        return np.asarray(rho) * self.weights

    def _fourier(self, f) -> np.ndarray:
        r""":math:`\frac{2\pi}{N_\varphi}\sum_k f_{jk}e^{-im\varphi_k}`, m = 0..L: (..., M+1, L+1)."""
        a, b = self.shape
        f = np.asarray(f, dtype=float).reshape(np.shape(f)[:-1] + (a, b))
        return np.fft.rfft(f, axis=-1)[..., : self.L + 1] * (2.0 * np.pi / b)

    def analysis(self, f) -> np.ndarray:
        r""":math:`\hat f_{\ell m} = \sum_g\omega_g f_g\Lambda_{\ell m}(\theta_g)e^{-im\varphi_g}`
        (..., L+1, L+1) ``[ℓ, m]``."""
        _, _, wg, _, Lam, _, _ = self._t
        Fm = self._fourier(f) * wg[:, None]
        return np.einsum("mlj,...jm->...lm", Lam, Fm)

    def synthesis(self, c) -> np.ndarray:
        r""":math:`f = \sum_\ell\big[\hat f_{\ell 0}\Lambda_{\ell 0} + 2\operatorname{Re}
        \sum_{m\ge1}\hat f_{\ell m}\Lambda_{\ell m}e^{im\varphi}\big]` at the nodes (..., G)."""
        _, _, _, _, Lam, _, _ = self._t
        a, b = self.shape
        Gm = np.einsum("mlj,...lm->...jm", Lam, np.asarray(c, dtype=complex))
        full = np.zeros(Gm.shape[:-1] + (b // 2 + 1,), dtype=complex)
        full[..., : self.L + 1] = Gm
        f = np.fft.irfft(full * b, n=b, axis=-1)
        return f.reshape(f.shape[:-2] + (a * b,))

    def project(self, f) -> np.ndarray:
        """:math:`P_L f` at the nodes."""
        return self.synthesis(self.analysis(f))

    def values(self, f) -> np.ndarray:
        r""":math:`P_L f` at the nodes of a function f of points (M, 3), analysed on the grid of
        degree 4L + 4 (so the aliasing of a smooth f is that of its tail)."""
        fine = SphereHarmonics(4 * self.L + 4)
        c = fine.analysis(np.asarray(f(fine.centres), dtype=float))
        return self.synthesis(c[..., : self.L + 1, : self.L + 1])

    def flux_divergence(self, F) -> np.ndarray:
        r"""Coefficients (..., L+1, L+1) of :math:`P_L\operatorname{div}_S F` of a tangent field
        F (..., G, 3) given by its Cartesian components at the nodes (the weak form of the
        module's docstring)."""
        _, _, wg, sg, Lam, dLam, _ = self._t
        et, ep = self.frames
        Ft = self._fourier(np.einsum("...ga,ga->...g", F, et)) * (wg / sg)[:, None]
        Fp = self._fourier(np.einsum("...ga,ga->...g", F, ep)) * (wg / sg)[:, None]
        m = np.arange(self.L + 1)
        return -(np.einsum("mlj,...jm->...lm", dLam, Ft)
                 - 1j * m * np.einsum("mlj,...jm->...lm", Lam, Fp))

    def gradient(self, c) -> np.ndarray:
        r""":math:`\nabla_S f = \sum_{\ell m}\hat f_{\ell m}\big[\partial_\theta\Lambda_{\ell m}
        \hat e_\theta + \frac{im}{\sin\theta}\Lambda_{\ell m}\hat e_\varphi\big]e^{im\varphi}`
        at the nodes (..., G, 3) of the real function with coefficients c."""
        _, _, _, sg, Lam, dLam, _ = self._t
        a, b = self.shape
        c = np.asarray(c, dtype=complex)
        m = np.arange(self.L + 1)

        def synth(table, cc):
            Gm = np.einsum("mlj,...lm->...jm", table, cc) / sg[:, None]
            full = np.zeros(Gm.shape[:-1] + (b // 2 + 1,), dtype=complex)
            full[..., : self.L + 1] = Gm
            f = np.fft.irfft(full * b, n=b, axis=-1)
            return f.reshape(f.shape[:-2] + (a * b,))

        et, ep = self.frames
        return (synth(dLam, c)[..., None] * et + synth(Lam, 1j * m * c)[..., None] * ep)

    def speed_bound(self, speed) -> np.ndarray:
        r""":math:`L\max_g\lvert v_g\rvert` per path (speed (..., G))."""
        return self.L * np.max(np.abs(speed), axis=-1)


def harmonics(d: int, degree: int):
    """The band-limited space of ``degree`` on S¹ (d = 2) or S² (d = 3)."""
    if d == 2:
        return CircleHarmonics(int(degree))
    if d == 3:
        return SphereHarmonics(int(degree))
    raise ValueError(f"d = {d}: the spectral representation is on S^1 (d = 2) or S^2 (d = 3)")
