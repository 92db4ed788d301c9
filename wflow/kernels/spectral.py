r"""The kernel sums on :math:`S^1` and :math:`S^2` by spectral summation [model §2s].

For tokens :math:`x_i` with masses :math:`u_j \ge 0` (1 for particles) and one head
(:math:`c = \beta\lVert D\rVert_2`)

.. math::
    S^0_i = \sum_j u_j e^{\beta\langle x_i, D x_j\rangle},\qquad
    S^X_i = \sum_j u_j e^{\beta\langle x_i, D x_j\rangle}\, x_j,\qquad
    S^I_i = \sum_j u_j e^{\beta\langle x_i, D x_j\rangle}(1 + \langle x_i, x_j\rangle^2),

computed in :math:`O(n + L^2\log L)` (:math:`S^1`) and :math:`O(n + L^4)` (:math:`S^2`, the
kernel on a quadrature grid) instead of :math:`O(n^2)`:

- :math:`S^1`: the kernel's 2-D Fourier coefficients :math:`c_{kl}`, :math:`|k|, |l| \le L+2`, by
  one small FFT per head (any 2×2 D); the tokens' Fourier moments
  :math:`F_l = \sum_j u_j e^{il\varphi_j}` by a type-1 NUFFT (strengths the masses);
  :math:`S(\theta_i) = \sum_k e^{ik\theta_i} \sum_l c_{kl} F_l` by a type-2 NUFFT.
- :math:`S^2`: the tokens' spherical-harmonic moments to degree :math:`L_a = L + 2` (a type-1 NUFFT
  on the double Fourier sphere, then the Fourier–Legendre tables); the band-limited measure on a
  Gauss–Legendre grid of :math:`(L_a+1)(2L_a+2)` points; the kernel applied by the quadrature;
  the result's harmonic coefficients turned back into double-Fourier coefficients and
  synthesised at the tokens by a type-2 NUFFT.

The degree :math:`L` comes from the tail bounds (:func:`tail_s1`, :func:`tail_s2`, :func:`degree`);
:func:`indicator` is the per-target error bound; rows over the tolerance are recomputed by
:func:`direct_rows`.

*Determinism.* The work is cut into items fixed by the data (a path, a head, a block of
:data:`BLOCK` points): the NUFFTs of an item run single-threaded (:mod:`wflow.kernels.nufft`), BLAS
on one thread, the items on ``get_num_threads()`` Python threads, and the blocks' moments are
added in block order: the bits do not depend on the thread count.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.special import ive

from wflow.kernels import nufft
from wflow.kernels import nufft_es as _es
from wflow.kernels.pool import get_num_threads
from wflow.kernels.spectral_rows import combine_rows, grid_sums, sinhc_bound

__all__ = ["combine", "BLOCK", "L_MAX", "RHO2", "degree", "prepare", "tail_s1", "tail_s2",
           "bessel_tail", "sums", "Sums", "indicator", "library_term", "direct_rows", "head_norms"]

#: points per work item of the NUFFTs (moments added in block order)
BLOCK = 1 << 18
#: the largest degree L per sphere (d = 2, 3): beyond it the summation is refused
L_MAX = {2: 2048, 3: 96}
#: the library's term of the indicator, relative to the largest sum: on S¹ ρ₂ = 4(ε_lib + 8u); on S²
#: ρ₂ = 16u, the round-off of the tables, the FFTs and the interpolation, with the kernel's own
#: error for the width chosen as a term of its own (:func:`library_term`). The round-off term is
#: ρ₁A with ρ₁ = u(L+3) on S¹, 4u(L+3) on S² (measured constants with a margin ≥ 5,
#: docs/model.md §2s "The error bound")
RHO2 = {2: 4.0 * (nufft.EPS + 8.0 * np.finfo(float).eps), 3: 16.0 * np.finfo(float).eps}
_U = np.finfo(float).eps


def head_norms(D):
    """:math:`\\lVert D_h\\rVert_2` for D (..., d, d)."""
    return np.linalg.norm(np.asarray(D, dtype=float), ord=2, axis=(-2, -1))


def _bessel_row(c, K):
    r""":math:`e^{-c} I_k(c)`, k = 0..K (c ≥ 0)."""
    return ive(np.arange(K + 1), c) if c > 0 else (np.arange(K + 1) == 0).astype(float)


def bessel_tail(c, L):
    r"""The Chebyshev tail of :math:`e^{cs}` on [-1, 1], relative to :math:`e^c`:
    :math:`2e^{-c}\sum_{k>L} I_k(c)` (the sup error of the degree-L truncation)."""
    K = L + 64 + int(2 * c)
    return 2.0 * float(np.sum(_bessel_row(c, K)[L + 1:]))


def tail_s1(beta, D, L):
    r"""The sup error of the square Fourier truncation :math:`|k|, |l| \le L` of
    :math:`e^{\beta\langle x, Dy\rangle}` on :math:`S^1\times S^1`, relative to
    :math:`e^{\beta\lVert D\rVert}`:

    .. math::
        e^{-\beta\sigma_1}\sum_{|m| + |m'| > L} I_{|m|}(\beta p)\, I_{|m'|}(\beta q),\quad
        p = \tfrac{\sigma_1 + \sigma_2}{2},\ q = \tfrac{\sigma_1 - \sigma_2}{2}

    (:math:`\sigma_{1,2}` the singular values of D); for D = I, :math:`2e^{-\beta}\sum_{k>L} I_k(\beta)`.
    """
    s = np.linalg.svd(np.asarray(D, dtype=float), compute_uv=False)
    p, q = beta * (s[0] + s[1]) / 2, beta * (s[0] - s[1]) / 2
    K = L + 64 + int(2 * beta * s[0])
    a = _bessel_row(p, K)  # e^{-p} I_m(p)
    b = _bessel_row(q, K)
    a2 = np.concatenate([a[:0:-1], a])  # m = -K..K
    b2 = np.concatenate([b[:0:-1], b])
    m = np.abs(np.arange(-K, K + 1))
    out = (m[:, None] + m[None, :]) > L
    return float(np.sum(np.outer(a2, b2)[out]))


def tail_s2(beta, D, L):
    r"""The bound of the degree-L error on :math:`S^2` of the quadrature route, relative to
    :math:`e^{\beta\lVert D\rVert}`: :math:`((L+3)^2 + 1)\cdot 2e^{-c}\sum_{k>L} I_k(c)`,
    :math:`c = \beta\lVert D\rVert_2` (the Chebyshev tail times the Lebesgue bound of two
    projections to degree L + 2)."""
    c = beta * float(head_norms(D))
    return ((L + 3) ** 2 + 1) * bessel_tail(c, L)


def degree(beta, D, d, target, start=2):
    r"""The smallest L ≥ ``start`` with :math:`\mathrm{tail}_h(L) \le \mathrm{target}_h` for
    every head (tails relative to :math:`e^{\beta\lVert D_h\rVert}`, :func:`tail_s1` or
    :func:`tail_s2`), and the tails at it. The rule of [model §2s] is
    :math:`\mathrm{target} = \mathrm{tol}/(4n)`.

    Returns (L, tails (H,)); L > :data:`L_MAX` [d] means refused (the caller says so)."""
    tail = tail_s1 if d == 2 else tail_s2
    target = np.broadcast_to(np.asarray(target, dtype=float), (len(D),))
    tails = lambda L: np.array([tail(beta, Dh, L) for Dh in D])
    ok = lambda L: bool(np.all(tails(L) <= target))
    lo, hi = start - 1, start  # the tails decrease with L: ok(hi), not ok(lo)
    while not ok(hi):
        if hi > L_MAX[d]:
            return hi, tails(hi)
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return max(hi, start), tails(max(hi, start))


def indicator(S0, c, tails, d, L, mag, fmax, count=None, lib=None):
    r"""The per-target error bound of Z and of the attention average (relative; the average
    relative to the tokens' norm 1):

    .. math::
        \eta_{hi} = (1+\sqrt d)\,\frac{U e^{c_h}\tau_h + \rho_1 A_{hi} + \rho_2\max_x S^0_h(x)
        + E_h}{S^0_{hi}}

    (the truncation, the round-off of the terms summed, :math:`A` from :func:`sums`, the
    round-off of the transforms relative to the largest sum, and the interpolation kernel's
    error for the width chosen, :func:`library_term`). S0 (H, n) the sums, c (H,) the
    :math:`\beta\lVert D_h\rVert`, tails (H,) the tail bounds relative to :math:`e^{c_h}`, mag
    (H, n) the magnitudes A, fmax (H,) the largest sums over the sphere, lib (H,) the
    :math:`E_h` (None: 0) (:func:`sums`), count the total mass :math:`U = \sum_j\lvert
    u_j\rvert` of the points (None: n, unit masses); :math:`\rho_1 = u(L+3)` on S¹,
    :math:`4u(L+3)` on S²."""
    rho1 = _U * (L + 3) * (1.0 if d == 2 else 4.0)
    n = S0.shape[-1] if count is None else count
    H = S0.shape[0]
    c = np.broadcast_to(np.asarray(c, dtype=float), (H,))
    tails = np.broadcast_to(np.asarray(tails, dtype=float), (H,))
    extra = np.zeros(H) if lib is None else np.asarray(lib, dtype=float)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        const = (n * np.exp(c + np.log(tails)) + RHO2[d] * np.asarray(fmax, dtype=float) + extra)
    out = np.empty(np.shape(S0))
    k = 1.0 + np.sqrt(d)

    def head(h):  # elementwise: the same bits on any thread
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            out[h] = k * (const[h] + rho1 * mag[h]) / np.abs(S0[h])

    with ThreadPoolExecutor(max_workers=max(1, get_num_threads())) as pool:
        list(pool.map(head, range(H)))
    return out


def library_term(B, w, axes=2):
    r"""The interpolation kernel's error of a type-2 synthesis of width w, per function:
    :math:`\sum_k\lvert B_k\rvert\,e_k` with :math:`e_k` the per-mode error of the kernel
    (:func:`wflow.kernels.nufft.mode_error`), :math:`e_{k_1} + e_{k_2} + e_{k_1}e_{k_2}` on
    two axes. B (K, N[, N]) the coefficients; returns (K,)."""
    return _library_abs(np.abs(B), w, axes)


def _library_abs(a, w, axes=2):
    """:func:`library_term` from the moduli a = |B| (K, N[, N])."""
    e = nufft.mode_error(a.shape[1], w)
    if axes == 1:
        return a @ e
    return (a.sum(axis=2) + a.sum(axis=1)) @ e + np.einsum("kab,a,b->k", a, e, e)


# --------------------------------------------------------------------------------- S¹
def _s1_coefficients(beta, D, La):
    r"""The 2-D Fourier coefficients :math:`c_{kl}`, :math:`|k|,|l| \le L_a`, of the kernels
    :math:`K`, :math:`K\cos\varphi`, :math:`K\sin\varphi` and :math:`K(1 + \cos^2(\theta-\varphi))`,
    :math:`K = e^{\beta\langle x(\theta), D x(\varphi)\rangle}`: (4, 2La+1, 2La+1)."""
    N = 4 * (La + 1)
    t = 2 * np.pi * np.arange(N) / N
    ct, st = np.cos(t), np.sin(t)
    s = beta * (D[0, 0] * np.outer(ct, ct) + D[0, 1] * np.outer(ct, st)
                + D[1, 0] * np.outer(st, ct) + D[1, 1] * np.outer(st, st))
    K = np.exp(s)
    cos2 = np.cos(t[:, None] - t[None, :]) ** 2
    ker = np.stack([K, K * ct[None, :], K * st[None, :], K * (1.0 + cos2)])
    C = np.fft.fft2(ker) / (N * N)
    idx = np.arange(-La, La + 1) % N
    return C[:, idx][:, :, idx]


def _synthesis(points, B, n, pool, w=nufft.W):
    r"""Real functions with coefficients B (K, ...) at the points (K, n): two at a time, as the
    real and imaginary parts of one complex synthesis (each function is real at the points),
    with the kernel of width w."""
    K = B.shape[0]
    if K % 2:
        B = np.concatenate([B, np.zeros_like(B[:1])])
    C = B[0::2] + 1j * B[1::2]
    out = np.empty((C.shape[0] * 2, n))
    blocks = [(a, min(n, a + BLOCK)) for a in range(0, n, BLOCK)]
    C = nufft.upsample(C, +1, w)  # shared by the blocks

    def synth(b):
        f = nufft.type2(tuple(t[b[0]:b[1]] for t in points), C, +1)
        out[0::2, b[0]:b[1]] = f.real
        out[1::2, b[0]:b[1]] = f.imag

    list(pool.map(synth, blocks))
    return out[:K]


class Sums:
    """The kernel sums of one path (:func:`sums`).

    Attributes
    ----------
    S0 : (H, n); SX : (H, n, d): the sums at the points.
    ito : (H,) :math:`\\sum_i u_i S^I_{hi}` (None where not asked).
    mag : (H, n) the magnitudes A of the round-off term; fmax : (H,) the largest sums over the
        sphere; lib : (H,) the interpolation kernel's error E_h (:func:`library_term`).
    width : the kernel width of the synthesis.
    ito_size : (H,) the size :math:`\\sum\\lvert c\\rvert\\lvert\\hat a\\rvert` of the terms of
        the totals' coefficient sums (their round-off is relative to it).
    """

    def __init__(self, S0, SX, ito, mag, fmax, lib, width, ito_at, ito_size=None):
        self.S0, self.SX, self.ito, self.mag, self.fmax, self.lib = S0, SX, ito, mag, fmax, lib
        self.width = width
        self.ito_size = ito_size
        self._ito_at = ito_at

    def ito_at(self, rows):
        """:math:`S^I_{hi}` (H, m) at the points ``rows`` (m,), as the totals ``ito`` sum it."""
        return self._ito_at(np.asarray(rows))

    def __iter__(self):  # S0, SX, ito, mag, fmax
        return iter((self.S0, self.SX, self.ito, self.mag, self.fmax))


def _strengths(u, n):
    """The type-1 strengths (1, n): the masses u, or ones; and their ℓ¹ norm U (n for ones)."""
    if u is None:
        return np.ones((1, n), dtype=np.complex128), n
    return np.asarray(u, dtype=float).reshape(1, n).astype(np.complex128), float(np.sum(np.abs(u)))


def _s1_path(X, D, beta, L, pool, u=None, ito=True):
    """The :class:`Sums` of one path on S¹."""
    n = X.shape[0]
    H = D.shape[0]
    La = L + 2
    phi = np.arctan2(X[:, 1], X[:, 0])
    blocks = [(a, min(n, a + BLOCK)) for a in range(0, n, BLOCK)]
    strength, U = _strengths(u, n)
    F = sum(pool.map(lambda b: nufft.type1((phi[b[0]:b[1]],), strength[:, b[0]:b[1]], La, +1)[0],
                     blocks))
    coefs = list(pool.map(lambda h: _s1_coefficients(beta, D[h], La), range(H)))
    G = np.stack([C @ F for C in coefs])  # (H, 4, 2La+1): g_k = Σ_l c_kl F_l
    out = _synthesis((phi,), G[:, :3].reshape(3 * H, -1), n, pool).reshape(H, 3, n)
    mag = np.broadcast_to((U * np.exp(beta * head_norms(D)))[:, None], (H, n))
    N = 4 * (La + 1)  # S0 on a fine grid of the circle: its largest value
    g0 = np.zeros((H, N), dtype=np.complex128)
    g0[:, np.arange(-La, La + 1) % N] = G[:, 0]
    fmax = np.maximum(np.max(np.abs(np.fft.ifft(g0, axis=1).real * N), axis=1),
                      np.max(np.abs(out[:, 0]), axis=1))
    GI = G[:, 3]
    # Σ_i u_i S^I(θ_i) = Σ_k g^I_k Σ_i u_i e^{ikθ_i} = Σ_k g^I_k F_k
    tot = np.real(GI @ F) if ito else None
    at = lambda rows: nufft.type2((phi[rows],), GI, +1).real
    return Sums(out[:, 0], np.ascontiguousarray(out[:, 1:3].transpose(0, 2, 1)), tot, mag, fmax,
                np.zeros(H), nufft.W, at, np.abs(GI) @ np.abs(F) if ito else None)


# --------------------------------------------------------------------------------- S²
def _legendre(La, x, s):
    r"""Orthonormal associated Legendre functions :math:`\Lambda_{lm}` (with
    :math:`2\pi\int\Lambda_{lm}^2\sin\theta\,d\theta = 1`) at cos θ = x, sin θ = s (s signed: the
    double-Fourier-sphere extension), as a list over m = 0..La of (La+1-m, len(x)) arrays, in
    the precision of x (the recurrence's coefficients too)."""
    f = np.asarray(x).dtype.type
    out = []
    pmm = np.full_like(x, 1 / np.sqrt(4 * np.arccos(f(-1))))
    for m in range(La + 1):
        if m > 0:
            pmm = -np.sqrt(f(2 * m + 1) / f(2 * m)) * s * pmm
        rows = [pmm]
        if m < La:
            rows.append(np.sqrt(f(2 * m + 3)) * x * pmm)
        for ll in range(m + 2, La + 1):
            a = np.sqrt(f(4 * ll * ll - 1) / f(ll * ll - m * m))
            b = np.sqrt(f((ll - 1) ** 2 - m * m) / f(4 * (ll - 1) ** 2 - 1))
            rows.append(a * (x * rows[-1] - b * rows[-2]))
        out.append(np.array(rows))
    return out


@functools.lru_cache(maxsize=8)
def _s2_tables(La):
    """The tables of degree La: DFS coefficients t[m] (La+1-m, 2La+1) of Λ_lm(θ) on [0, 2π),
    the Gauss–Legendre grid (nodes, weights, Λ_lm at the nodes), the grid points and the
    azimuthal phases. Computed in extended precision (``np.longdouble``: the Legendre
    recurrence, the Newton-refined nodes and weights, the Fourier coefficients by a direct sum)
    and rounded to float64: their errors are systematic, and a float64 recurrence's
    (~ L u relative) would reach every target at the scale of the largest sum [model §2s]."""
    ld = np.longdouble
    c = np.complex128
    pi = np.arccos(ld(-1))
    Nt = 2 * La + 2
    th = 2 * pi * np.arange(Nt) / Nt
    k = np.arange(-La, La + 1)
    lam = _legendre(La, np.cos(th), np.sin(th))
    dft = np.exp(np.multiply.outer(th, k) * (-1j)) / Nt  # (Nt, 2La+1), extended precision
    T = [(v @ dft).astype(c) for v in lam]
    x01, w01 = _es._gauss_legendre(La + 1)
    xg, wg = 2 * x01 - 1, 2 * w01  # nodes and weights on [-1, 1]
    sg = np.sqrt((1 - xg) * (1 + xg))
    Lg = [v.astype(float) for v in _legendre(La, xg, sg)]
    Nphi = 2 * La + 2
    ph = 2 * pi * np.arange(Nphi) / Nphi
    Y = np.stack([np.outer(sg, np.cos(ph)), np.outer(sg, np.sin(ph)),
                  np.outer(xg, np.ones(Nphi, dtype=ld))], axis=-1).reshape(-1, 3).astype(float)
    omega = np.outer(wg, np.full(Nphi, 2 * pi / Nphi)).reshape(-1).astype(float)
    Em = np.exp(1j * np.multiply.outer(k, ph)).astype(c)  # (2La+1, Nphi)
    return T, wg.astype(float), Lg, Y, omega, Em


def prepare(d, L):
    """Build (and keep) the tables that the sums of degree ``L`` on :math:`S^{d-1}` use, ahead
    of a call that should not pay for them (a timing); S¹ has none. A sum builds them on its
    first call at a degree and keeps the last 8 degrees."""
    if d == 3:
        _s2_tables(L + 2)


def _s2_measure(F, La):
    """â_lm = Σ_k conj(t_lm[k]) F[k, m] (list over m = -La..La of (La+1-|m|,)) and the
    band-limited measure μ_L on the grid (G,)."""
    T, wg, Lg, Y, omega, Em = _s2_tables(La)
    ahat = [T[abs(m)].conj() @ F[:, m + La] for m in range(-La, La + 1)]
    Gm = np.zeros((La + 1, 2 * La + 1), dtype=np.complex128)
    for m in range(-La, La + 1):
        Gm[:, m + La] = ahat[m + La] @ Lg[abs(m)]
    mu = np.real(Gm @ Em).reshape(-1)
    return ahat, mu


def _s2_analysis(f, La):
    """Harmonic coefficients of grid functions f (K, G): list over m of (K, La+1-|m|)."""
    T, wg, Lg, Y, omega, Em = _s2_tables(La)
    K = f.shape[0]
    Nphi = Em.shape[1]
    Fphi = (f.reshape(K, La + 1, Nphi) @ Em.conj().T) * (2 * np.pi / Nphi)  # (K, La+1, 2La+1)
    return [(Fphi[:, :, m + La] * wg) @ Lg[abs(m)].T for m in range(-La, La + 1)]


def _s2_head(beta, Dh, mu, ahat, La, ito):
    """One head on the grid: the double-Fourier coefficients (4, 2La+1, 2La+1) of S0 and SX
    (3), those (2La+1, 2La+1) of S^I and :math:`\\sum_i u_i S^I(x_i)` (None without ``ito``),
    the largest and the smallest :math:`\\lvert S^0\\rvert` on the grid; ``ahat`` the
    measure's harmonic coefficients."""
    T, wg, Lg, Y, omega, Em = _s2_tables(La)
    G = Y.shape[0]
    wm = omega * mu
    iu = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    cols = [wm, wm[:, None] * Y] + ([wm * Y[:, a] * Y[:, b] for a, b in iu] if ito else [])
    Wt = np.ascontiguousarray(np.column_stack(cols).T)  # (4, G) or (10, G)
    Q = np.ascontiguousarray(beta * (Y @ Dh))  # s_gg' = β ⟨y_g, D y_g'⟩ = ⟨β Dᵀ y_g, y_g'⟩
    out = np.empty((G, Wt.shape[0]))
    grid_sums(Q, np.ascontiguousarray(Y), Wt, out)
    f0 = out[:, 0]
    fs = [out[:, :4].T]
    if ito:
        M = out[:, 4:10]
        fs.append((f0 + sum((1.0 if a == b else 2.0) * Y[:, a] * Y[:, b] * M[:, k]
                            for k, (a, b) in enumerate(iu)))[None])
    coef = _s2_analysis(np.vstack(fs), La)  # over m: (4 or 5, nl)
    B = np.zeros((len(coef[0]), 2 * La + 1, 2 * La + 1), dtype=np.complex128)
    for m in range(-La, La + 1):
        B[:, :, m + La] = coef[m + La] @ T[abs(m)]
    # Σ_i u_i P[f](x_i) = Σ_lm c_lm conj(â_lm): the total of S^I over the points, exactly
    tot = float(np.real(sum(coef[m + La][4] @ np.conj(ahat[m + La]) for m in range(-La, La + 1)))) \
        if ito else None
    size = float(sum(np.abs(coef[m + La][4]) @ np.abs(ahat[m + La]) for m in range(-La, La + 1))) \
        if ito else None
    return B[:4], (B[4] if ito else None), tot, float(np.max(np.abs(f0))), float(np.min(np.abs(f0))), \
        size


def _s2_magnitude(X, D, beta, L, mu, U, pool):
    r"""An upper bound of the magnitude :math:`A_{hi}` of the round-off term on S²: the kernel
    applied by the quadrature to :math:`\lvert\mu_L\rvert + (L_a+1)U/(4\pi)`,

    .. math::
        A_{hi} \le \Big(\max_g\lvert\mu_L(y_g)\rvert + \frac{(L_a+1)U}{4\pi}\Big)
        \Big(4\pi\,\frac{\sinh(\beta r)}{\beta r} + 8\pi e^{c_h}\tau^{\rm Ch}_L\Big),
        \qquad r = \lvert D_h^\top x_i\rvert

    (:math:`\int e^{\beta\langle x, Dy\rangle}d\sigma(y) = 4\pi\sinh(\beta r)/(\beta r)`; the
    quadrature is exact for the degree-L Chebyshev part of the kernel and errs by at most
    :math:`8\pi e^{c}\tau^{\rm Ch}_L` on the rest, :math:`\tau^{\rm Ch}_L` from
    :func:`bessel_tail`): (H, n), no synthesis."""
    La = L + 2
    top = float(np.max(np.abs(mu))) + (La + 1) * U / (4 * np.pi)
    c = beta * head_norms(D)
    out = np.empty((D.shape[0], X.shape[0]))
    Xc = np.ascontiguousarray(X)
    list(pool.map(lambda h: sinhc_bound(Xc, np.ascontiguousarray(D[h]), float(beta), top,
                                        8 * np.pi * np.exp(c[h]) * bessel_tail(float(c[h]), L), out[h]),
                  range(D.shape[0])))
    return out


def _s2_width(B, lo, d, tol):
    """The narrowest kernel whose error term stays below tol/8 of the indicator at the smallest
    sum on the grid, for every head: B (H, 4, N, N), lo (H,)."""
    H = B.shape[0]
    a = np.abs(B.reshape(4 * H, *B.shape[2:]))
    for w in nufft.WIDTHS:
        if w < 10:
            continue
        lib = _library_abs(a, w).reshape(H, 4).max(axis=1)
        if np.all((1 + np.sqrt(d)) * lib <= tol / 8 * lo):
            return w
    return nufft.W


def _s2_path(X, D, beta, L, pool, u=None, ito=True, tol=None, width=None):
    """The :class:`Sums` of one path on S²."""
    n = X.shape[0]
    H = D.shape[0]
    La = L + 2
    _s2_tables(La)
    theta = np.arccos(np.clip(X[:, 2], -1.0, 1.0))
    phi = np.arctan2(X[:, 1], X[:, 0])
    blocks = [(a, min(n, a + BLOCK)) for a in range(0, n, BLOCK)]
    strength, U = _strengths(u, n)
    F = sum(pool.map(lambda b: nufft.type1((theta[b[0]:b[1]], phi[b[0]:b[1]]),
                                           strength[:, b[0]:b[1]], La, -1)[0], blocks))
    ahat, mu = _s2_measure(F, La)
    res = list(pool.map(lambda h: _s2_head(beta, D[h], mu, ahat, La, ito), range(H)))
    B = np.stack([r[0] for r in res])  # (H, 4, N, N)
    hi = np.array([r[3] for r in res])
    w = width or (nufft.W if tol is None else _s2_width(B, np.array([r[4] for r in res]), 3, tol))
    out = _synthesis((theta, phi), B.reshape(4 * H, *B.shape[2:]), n, pool, w).reshape(H, 4, n)
    mag = np.maximum(_s2_magnitude(X, D, beta, L, mu, U, pool), np.abs(out[:, 0]))
    fmax = np.maximum(hi, np.max(np.abs(out[:, 0]), axis=1))
    lib = library_term(B.reshape(4 * H, *B.shape[2:]), w).reshape(H, 4).max(axis=1)
    tot = np.array([r[2] for r in res]) if ito else None
    BI = np.stack([r[1] for r in res]) if ito else None
    at = lambda rows: nufft.type2((theta[rows], phi[rows]), BI, +1).real
    return Sums(out[:, 0], np.ascontiguousarray(out[:, 1:4].transpose(0, 2, 1)), tot, mag, fmax,
                lib, w, at, np.array([r[5] for r in res]) if ito else None)


def sums(X, D, beta, L, u=None, ito=True, tol=None, width=None):
    r"""The kernel sums of one path by spectral summation at degree L.

    Parameters
    ----------
    X : (n, d) tokens, d = 2 or 3.
    D : (H, d, d) interaction matrices (any real).
    beta : β > 0.
    L : the degree (:func:`degree`).
    u : (n,) point masses :math:`u_j \ge 0` (the strengths of the type-1 transform), or None
        (:math:`u_j = 1`).
    ito : also the totals :math:`\sum_i u_i S^I_{hi}` (the Itô sum's).
    tol : the tolerance the kernel width of the synthesis on S² is chosen for (the narrowest
        whose error stays below tol/8 of the indicator at the smallest sum on the grid); None:
        the widest, :data:`wflow.kernels.nufft.W`.
    width : the kernel width on S² (:data:`wflow.kernels.nufft.WIDTHS`) in place of the choice
        by ``tol``.

    Returns
    -------
    :class:`Sums`: S0 (H, n) :math:`\sum_j u_j e^{s_{ij}}`, SX (H, n, d)
    :math:`\sum_j u_j e^{s_{ij}} x_j`, ito (H,) :math:`\sum_i u_i S^I_{hi}`,
    :math:`S^I_{hi} = \sum_j u_j e^{s_{ij}}(1 + \langle x_i, x_j\rangle^2)` (its values at
    chosen points by :meth:`Sums.ito_at`), the magnitude :math:`A_{hi}` (H, n) of the round-off
    term of :func:`indicator`: :math:`U e^{c_h}` on S¹ (:math:`U = \sum_j\lvert u_j\rvert`, n
    without masses); on S² the kernel applied to :math:`\lvert\mu_L\rvert + (L_a+1)U/(4\pi)`
    on the grid (the size of the terms summed there, and of the round-off of :math:`\mu_L`),
    bounded in closed form at the targets (:func:`_s2_magnitude`); the largest
    :math:`\lvert S^0_h(x)\rvert` (H,) over a grid of the sphere and the targets;
    and the kernel's error term :math:`E_h` (H,) of the synthesis
    (:func:`library_term`, the largest over the head's four functions; 0 on S¹, where the
    widest kernel's share is in :data:`RHO2`).
    """
    from threadpoolctl import threadpool_limits

    d = X.shape[1]
    with threadpool_limits(limits=1, user_api="blas"), \
            ThreadPoolExecutor(max_workers=max(1, get_num_threads())) as pool:
        if d == 2:
            return _s1_path(X, D, beta, L, pool, u, ito)
        return _s2_path(X, D, beta, L, pool, u, ito, tol, width)


def combine(X, D, V, S0, SX, lap, norm, general, summed, v, g, zbar, mbar):
    """The per-row combine (:func:`wflow.kernels.spectral_rows.combine_rows`) over blocks of
    :data:`BLOCK` rows on ``get_num_threads()`` threads."""
    n = X.shape[0]
    args = [np.ascontiguousarray(a, dtype=float) for a in (X, D, V, S0, SX)]
    lap = np.ascontiguousarray(lap, dtype=np.bool_)
    blocks = [(a, min(n, a + BLOCK)) for a in range(0, n, BLOCK)]
    with ThreadPoolExecutor(max_workers=max(1, get_num_threads())) as pool:
        list(pool.map(lambda b: combine_rows(*args, lap, int(norm), bool(general), bool(summed),
                                             b[0], b[1], v, g, zbar, mbar), blocks))


def direct_rows(X, D, beta, rows, u=None):
    r"""The direct sums at the target rows: :math:`S^0_i = \sum_j u_j e^{s_{ij}}`,
    :math:`S^X_i = \sum_j u_j e^{s_{ij}} x_j`, :math:`S^I_i = \sum_j u_j e^{s_{ij}}(1 +
    \langle x_i, x_j\rangle^2)` for i in ``rows`` ((m,) ints), every head: (H, m), (H, m, d),
    (H, m); ``u`` (n,) the point masses, or None (:math:`u_j = 1`). O(n) per row and head
    (NumPy, no BLAS)."""
    n, d = X.shape
    H = D.shape[0]
    m = len(rows)
    S0 = np.empty((H, m))
    SX = np.empty((H, m, d))
    SI = np.empty((H, m))
    step = max(1, (1 << 21) // n)
    c = beta * head_norms(D)
    w = None if u is None else np.asarray(u, dtype=float)[None, :]
    for h in range(H):
        Q = beta * X[rows] @ D[h]  # q_i = β Dᵀ x_i: s_ij = ⟨q_i, x_j⟩
        for a in range(0, m, step):
            q = Q[a:a + step]
            xr = X[rows[a:a + step]]
            s = q[:, :1] * X[None, :, 0]
            g = xr[:, :1] * X[None, :, 0]
            for k in range(1, d):
                s = s + q[:, k:k + 1] * X[None, :, k]
                g = g + xr[:, k:k + 1] * X[None, :, k]
            e = np.exp(s - c[h])
            if w is not None:
                e = e * w
            SI[h, a:a + step] = np.exp(c[h]) * (e * (1.0 + g * g)).sum(axis=1)
            S0[h, a:a + step] = np.exp(c[h]) * e.sum(axis=1)
            for k in range(d):
                SX[h, a:a + step, k] = np.exp(c[h]) * (e * X[None, :, k]).sum(axis=1)
    return S0, SX, SI
