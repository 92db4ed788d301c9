r"""wflow's non-uniform FFTs: the exponential-of-semicircle kernel, spreading and interpolation in
numba, the uniform FFTs by ``scipy.fft`` [model §2s].

.. math::
    \varphi(z) = e^{\beta(\sqrt{1 - z^2} - 1)},\quad \lvert z\rvert \le 1,\qquad
    \hat\varphi(\xi) = \int_{-1}^{1}\varphi(z)\cos(\xi z)\,dz .

On the grid of :math:`n_f \ge \sigma N` points per axis (:math:`h = 2\pi/n_f`, N = 2L + 1 modes,
upsampling :math:`\sigma = 2`), a point t at grid coordinate :math:`x = t/h` touches the w grid
points l with :math:`\lvert l - x\rvert \le w/2`, with weight :math:`\varphi(2(l - x)/w)`. By
Poisson summation :math:`\sum_l \varphi(2(x - l)/w)\,e^{iskhl} \approx \tfrac w2\,
\hat\varphi(\pi k w/n_f)\, e^{iskt}`, so

- type 1: :math:`F_k = \sum_j c_j e^{is\langle k, t_j\rangle}` is the FFT (sign s) of the spread
  grid :math:`b_l = \sum_j c_j \prod_a\varphi(2(x_{ja} - l_a)/w)`, divided by
  :math:`\prod_a \tfrac w2\hat\varphi(\pi k_a w/n_f)`;
- type 2: :math:`f(t_i) = \sum_k F_k e^{is\langle k, t_i\rangle}` is the grid
  :math:`u_l = \sum_k F_k / \prod_a(\tfrac w2\hat\varphi_{k_a})\, e^{is\langle k, hl\rangle}`
  interpolated with the same weights.

The kernel values of a point (w per axis) are computed once and used for all K strength vectors
or coefficient arrays: the K loop is the inner one, over contiguous memory. The points are
visited in the order of a counting sort by grid cell (cache locality; the order depends on the
points only). Each call is single-threaded (``nogil``, no ``parallel``): the same input gives
the same bits whatever the caller's thread count. ``scipy.fft`` (pocketfft, BSD-3-Clause) runs
the uniform FFTs with ``workers=1``.

With w = 16, :math:`\beta = 2.30\,w`, :math:`\sigma = 2`, the relative :math:`\ell^2` error of a
transform against direct sums is at most 2.1e-15 at degree ≤ 5 and beyond it that of the sums'
conditioning in the angles, about :math:`uL\max\lvert t\rvert/\pi` (:data:`wflow.kernels.nufft.EPS`;
``tests/test_nufft.py``). A type-2 transform may take a narrower kernel (``w=``, :data:`WIDTHS`,
shape parameter 2.30 w each); :func:`mode_error` gives its error per mode.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import scipy.fft
from numba import njit

__all__ = ["W", "BETA", "SIGMA", "WIDTHS", "fine_size", "phi", "phihat", "deconvolution", "horner_table",
           "mode_error", "type1", "type2", "upsample", "Upsampled"]

#: kernel width (grid points per axis touched by a point)
W = 16
#: the kernel's shape parameter β = 2.30 w
BETA = 2.30 * W
#: the widths a type-2 transform may take (``w=``; shape parameter 2.30 w each)
WIDTHS = tuple(range(6, W + 1))
#: upsampling factor of the fine grid
SIGMA = 2.0
#: cells per bin of the counting sort, per axis
_BIN = 16


def fine_size(N):
    """The fine grid per axis: the smallest even fast size of ``scipy.fft`` (11-smooth)
    ≥ max(σN, 2w)."""
    m = max(int(math.ceil(SIGMA * N)), 2 * W)
    while True:
        m = scipy.fft.next_fast_len(m, real=False)
        if m % 2 == 0:
            return m
        m += 1


def phi(z, beta=BETA):
    r""":math:`\varphi(z) = e^{\beta(\sqrt{1 - z^2} - 1)}` on [-1, 1], 0 outside."""
    z = np.asarray(z, dtype=float)
    with np.errstate(invalid="ignore"):
        z2 = z * z
        return np.where(z2 < 1.0, np.exp(-beta * z2 / (1.0 + np.sqrt(np.maximum(1.0 - z2, 0.0)))), 0.0)


def _gauss_legendre(q):
    """Gauss–Legendre nodes and weights on [0, 1] in extended precision (``np.longdouble``):
    the float64 nodes refined by three Newton steps on :math:`P_q`, weights
    :math:`1/((1 - x^2)P_q'(x)^2)` (x on [-1, 1])."""
    x = np.polynomial.legendre.leggauss(q)[0].astype(np.longdouble)
    for _ in range(3):
        p0, p1 = np.ones_like(x), x.copy()
        for k in range(2, q + 1):  # P_k = ((2k-1) x P_{k-1} - (k-1) P_{k-2}) / k
            p0, p1 = p1, ((2 * k - 1) * x * p1 - (k - 1) * p0) / k
        dp = q * (x * p1 - p0) / (x * x - 1)
        x = x - p1 / dp
    return (x + 1) / 2, 1 / ((1 - x * x) * dp * dp)


def phihat(xi, w=None, beta=None):
    r""":math:`\hat\varphi(\xi) = \int_{-1}^{1}\varphi(z)\cos(\xi z)\,dz` by Gauss–Legendre
    quadrature on [0, 1] (φ is even) with :math:`2 + 3w` nodes, in extended precision (the
    integral is a cancellation at large ξ): φ is analytic inside [-1, 1] and its endpoint
    singularity has the size :math:`e^{-\beta}`."""
    w = W if w is None else w
    beta = BETA if beta is None else beta
    z, wt = _gauss_legendre(2 + 3 * w)
    xi = np.asarray(xi, dtype=np.longdouble)
    z2 = z * z
    f = np.exp(-np.longdouble(beta) * z2 / (1 + np.sqrt(1 - z2)))
    return (2 * np.cos(np.multiply.outer(xi, z)) @ (wt * f)).astype(np.float64)


def _width(w):
    w = W if w is None else int(w)
    if w not in WIDTHS:
        raise ValueError(f"w = {w}: the kernel width must be one of {WIDTHS[0]}..{WIDTHS[-1]}")
    return w


@functools.lru_cache(maxsize=64)
def deconvolution(N, nf, w=W):
    r"""The factors :math:`1/(\tfrac w2\hat\varphi(\pi k w/n_f))`, k = -L..L (N = 2L + 1), for
    the kernel of width w (shape parameter 2.30 w)."""
    w = _width(w)
    L = (N - 1) // 2
    k = np.arange(-L, L + 1)
    out = 1.0 / (0.5 * w * phihat(np.pi * k * w / nf, w, 2.30 * w))
    out.setflags(write=False)
    return out


# ----------------------------------------------------------------------------- numba kernels
@functools.lru_cache(maxsize=16)
def horner_table(w=W):
    r"""The kernel values of a point as polynomials: with :math:`u = l_0 - x + w/2 \in [0, 1)`
    (x the point's grid coordinate, :math:`l_0` its first grid point),

    .. math::
        \varphi\big((2(a + u) - w)/w\big) \approx \sum_{d=0}^{p} P_{da}\,(u - \tfrac12)^{p-d},
        \qquad a = 0,\dots,w-1,\ p = w + 2,

    the Chebyshev interpolants of degree p in extended precision, turned into monomials in
    :math:`u - \tfrac12` (Horner's rule, one vector operation per degree for the w values).
    (p + 1, w) float64, for the kernel of width w (shape parameter 2.30 w)."""
    w = _width(w)
    ld = np.longdouble
    p = w + 2
    k = np.arange(p + 1)
    s = np.cos(np.arccos(ld(-1)) * (k + ld(0.5)) / (p + 1))  # Chebyshev nodes; u - 1/2 = s/2
    T = np.cos(np.outer(k, np.arccos(s)))
    out = np.empty((p + 1, w))
    for a in range(w):
        z = (2 * (a + s / 2 + ld(0.5)) - w) / w
        z2 = z * z
        f = np.where(z2 < 1, np.exp(-ld(2.30 * w) * z2 / (1 + np.sqrt(np.maximum(1 - z2, 0)))), 0)
        c = (2 / ld(p + 1)) * (T @ f)
        c[0] /= 2
        mono = np.zeros(p + 1, dtype=ld)
        pm = np.polynomial.chebyshev.cheb2poly(c)
        mono[:len(pm)] = pm
        out[:, a] = (mono * ld(2) ** k)[::-1].astype(np.float64)
    out.setflags(write=False)
    return out


@njit(nogil=True, cache=True)
def _weights(t, nf, w, P, vals, idx):
    """The w kernel values (Horner's rule on the table P, :func:`horner_table`) and wrapped grid
    indices of the angle t on a grid of nf points."""
    x = t * (nf / (2.0 * np.pi))
    x = x - nf * np.floor(x / nf)
    if x >= nf:
        x -= nf
    l0 = int(np.ceil(x - 0.5 * w))
    u = (l0 - x + 0.5 * w) - 0.5
    for a in range(w):
        vals[a] = P[0, a]
    for d in range(1, P.shape[0]):
        for a in range(w):
            vals[a] = vals[a] * u + P[d, a]
    for a in range(w):
        i = l0 + a
        if i < 0:
            i += nf
        elif i >= nf:
            i -= nf
        idx[a] = i


@njit(nogil=True, cache=True)
def _cell(t, nf):
    x = t * (nf / (2.0 * np.pi))
    x = x - nf * np.floor(x / nf)
    c = int(x)
    return c if c < nf else nf - 1


@njit(nogil=True, cache=True)
def _order(t1, t2, nf1, nf2, nb):
    """A counting sort of the points by bin of nb × nb grid cells (stable: the order depends on
    the points only). t2 of length 0 means 1-D."""
    n = t1.shape[0]
    m1 = (nf1 + nb - 1) // nb
    m2 = (nf2 + nb - 1) // nb if t2.shape[0] else 1
    key = np.empty(n, dtype=np.int64)
    count = np.zeros(m1 * m2 + 1, dtype=np.int64)
    for j in range(n):
        k = _cell(t1[j], nf1) // nb
        if t2.shape[0]:
            k = k * m2 + _cell(t2[j], nf2) // nb
        key[j] = k
        count[k + 1] += 1
    for b in range(m1 * m2):
        count[b + 1] += count[b]
    order = np.empty(n, dtype=np.int64)
    for j in range(n):
        order[count[key[j]]] = j
        count[key[j]] += 1
    return order


@njit(nogil=True, cache=True)
def _spread1(t, c, order, nf, w, P, grid):
    """grid (nf, R) += Σ_j c[j] φ-weights (R = 2K reals: re/im of K strengths)."""
    R = c.shape[1]
    v = np.empty(w)
    ix = np.empty(w, dtype=np.int64)
    for jj in range(order.shape[0]):
        j = order[jj]
        _weights(t[j], nf, w, P, v, ix)
        for a in range(w):
            va = v[a]
            g = grid[ix[a]]
            for r in range(R):
                g[r] += va * c[j, r]


@njit(nogil=True, cache=True)
def _spread2(t1, t2, c, order, nf1, nf2, w, P, grid):
    """grid (nf1, nf2, R) += Σ_j c[j] (φ-weights ⊗ φ-weights)."""
    R = c.shape[1]
    v1 = np.empty(w)
    v2 = np.empty(w)
    i1 = np.empty(w, dtype=np.int64)
    i2 = np.empty(w, dtype=np.int64)
    cv = np.empty(R)
    for jj in range(order.shape[0]):
        j = order[jj]
        _weights(t1[j], nf1, w, P, v1, i1)
        _weights(t2[j], nf2, w, P, v2, i2)
        if R == 2:  # one strength vector: the K loop unrolled
            for a in range(w):
                ia = i1[a]
                xr = v1[a] * c[j, 0]
                xi = v1[a] * c[j, 1]
                for b in range(w):
                    ib = i2[b]
                    grid[ia, ib, 0] += v2[b] * xr
                    grid[ia, ib, 1] += v2[b] * xi
            continue
        for a in range(w):
            for r in range(R):
                cv[r] = v1[a] * c[j, r]
            row = grid[i1[a]]
            for b in range(w):
                vb = v2[b]
                g = row[i2[b]]
                for r in range(R):
                    g[r] += vb * cv[r]


@njit(nogil=True, cache=True)
def _interp1(t, grid, order, nf, w, P, out):
    """out[j] = Σ_l φ-weights grid[l] (R reals per point)."""
    R = grid.shape[1]
    v = np.empty(w)
    ix = np.empty(w, dtype=np.int64)
    acc = np.empty(R)
    for jj in range(order.shape[0]):
        j = order[jj]
        _weights(t[j], nf, w, P, v, ix)
        acc[:] = 0.0
        for a in range(w):
            va = v[a]
            g = grid[ix[a]]
            for r in range(R):
                acc[r] += va * g[r]
        out[j] = acc


@njit(nogil=True, cache=True)
def _interp2(t1, t2, grid, order, nf1, nf2, w, P, out):
    """out[j] = Σ_{l1,l2} φ-weights ⊗ φ-weights grid[l1, l2] (R reals per point)."""
    R = grid.shape[2]
    v1 = np.empty(w)
    v2 = np.empty(w)
    i1 = np.empty(w, dtype=np.int64)
    i2 = np.empty(w, dtype=np.int64)
    acc = np.empty(R)
    tmp = np.empty(R)
    for jj in range(order.shape[0]):
        j = order[jj]
        _weights(t1[j], nf1, w, P, v1, i1)
        _weights(t2[j], nf2, w, P, v2, i2)
        if R == 2:  # one coefficient array: the K loop unrolled
            sr = 0.0
            si = 0.0
            for a in range(w):
                ia = i1[a]
                tr = 0.0
                ti = 0.0
                for b in range(w):
                    ib = i2[b]
                    tr += v2[b] * grid[ia, ib, 0]
                    ti += v2[b] * grid[ia, ib, 1]
                sr += v1[a] * tr
                si += v1[a] * ti
            out[j, 0] = sr
            out[j, 1] = si
            continue
        acc[:] = 0.0
        for a in range(w):
            row = grid[i1[a]]
            tmp[:] = 0.0
            for b in range(w):
                vb = v2[b]
                g = row[i2[b]]
                for r in range(R):
                    tmp[r] += vb * g[r]
            va = v1[a]
            for r in range(R):
                acc[r] += va * tmp[r]
        out[j] = acc


# ----------------------------------------------------------------------------- transforms
def _points(points):
    pts = [np.ascontiguousarray(t, dtype=np.float64) for t in points]
    if len(pts) not in (1, 2) or any(t.shape != pts[0].shape or t.ndim != 1 for t in pts):
        raise ValueError("points: a tuple of 1 or 2 arrays (n,) of one length")
    return pts


def _fft(grid, axes, isign):
    """Σ_l grid_l e^{i·isign·k l h} over the axes (unnormalised), one worker."""
    if isign < 0:
        return scipy.fft.fftn(grid, axes=axes, workers=1, overwrite_x=True)
    return scipy.fft.ifftn(grid, axes=axes, norm="forward", workers=1, overwrite_x=True)


def type1(points, c, L, isign):
    r""":math:`F_k = \sum_j c_j e^{i\,\mathrm{isign}\langle k, t_j\rangle}`, :math:`|k_a| \le L`:
    (K, 2L+1) or (K, 2L+1, 2L+1) from c (K, n) (see :func:`wflow.kernels.nufft.type1`)."""
    pts = _points(points)
    m = len(pts)
    c = np.asarray(c, dtype=np.complex128)
    K, n = c.shape
    N = 2 * L + 1
    nf = fine_size(N)
    cv = np.ascontiguousarray(c.T).view(np.float64)  # (n, 2K)
    empty = np.empty(0)
    order = _order(pts[0], pts[1] if m == 2 else empty, nf, nf, _BIN if m == 2 else 4 * _BIN)
    grid = np.zeros((nf,) * m + (K,), dtype=np.complex128)
    gv = grid.view(np.float64)
    if m == 1:
        _spread1(pts[0], cv, order, nf, W, horner_table(W), gv)
    else:
        _spread2(pts[0], pts[1], cv, order, nf, nf, W, horner_table(W), gv)
    G = _fft(grid, tuple(range(m)), isign)
    idx = np.arange(-L, L + 1) % nf
    dec = deconvolution(N, nf)
    if m == 1:
        out = G[idx] * dec[:, None]
        return np.ascontiguousarray(out.T)
    out = G[idx][:, idx] * (dec[:, None, None] * dec[None, :, None])
    return np.ascontiguousarray(out.transpose(2, 0, 1))


class Upsampled:
    """The deconvolved, upsampled grid of coefficients F (K, N[, N]) for sign isign and kernel
    width w: the part of a type-2 transform shared by every set of points (:func:`upsample`)."""

    __slots__ = ("grid", "m", "nf", "K", "isign", "w")

    def __init__(self, grid, m, nf, K, isign, w=W):
        self.grid, self.m, self.nf, self.K, self.isign, self.w = grid, m, nf, K, isign, w


def upsample(F, isign, w=W):
    """The fine grid (nf[, nf], K) of :math:`\\sum_k F_k/\\prod_a(\\tfrac w2\\hat\\varphi_{k_a})
    e^{i\\,\\mathrm{isign}\\langle k, hl\\rangle}` (:class:`Upsampled`) for the kernel of width w."""
    w = _width(w)
    F = np.asarray(F, dtype=np.complex128)
    m = F.ndim - 1
    if m not in (1, 2) or any(s != F.shape[1] or s % 2 == 0 for s in F.shape[1:]):
        raise ValueError(f"F: (K, N) or (K, N, N) with N = 2L + 1 odd (got shape {F.shape})")
    K, N = F.shape[0], F.shape[1]
    L = (N - 1) // 2
    nf = fine_size(N)
    dec = deconvolution(N, nf, w)
    idx = np.arange(-L, L + 1) % nf
    grid = np.zeros((nf,) * m + (K,), dtype=np.complex128)
    if m == 1:
        grid[idx] = (F * dec).T
    else:
        grid[np.ix_(idx, idx)] = (F * (dec[:, None] * dec[None, :])).transpose(1, 2, 0)
    grid = np.ascontiguousarray(_fft(grid, tuple(range(m)), isign))
    return Upsampled(grid, m, nf, K, int(isign), w)


def type2(points, F, isign, w=W):
    r""":math:`f_i = \sum_k F_k e^{i\,\mathrm{isign}\langle k, t_i\rangle}` at the points: (K, n),
    F (K, N[, N]) or an :class:`Upsampled` grid of the same sign (see
    :func:`wflow.kernels.nufft.type2`); w the kernel width (an :class:`Upsampled` grid
    carries its own)."""
    pts = _points(points)
    up = F if isinstance(F, Upsampled) else upsample(F, isign, w)
    if up.isign != isign or up.m != len(pts):
        raise ValueError("type2: the upsampled grid has another sign or dimension")
    n = pts[0].shape[0]
    gv = up.grid.view(np.float64)
    out = np.empty((n, 2 * up.K))
    P = horner_table(up.w)
    if up.m == 1:
        order = _order(pts[0], np.empty(0), up.nf, up.nf, 4 * _BIN)
        _interp1(pts[0], gv, order, up.nf, up.w, P, out)
    else:
        order = _order(pts[0], pts[1], up.nf, up.nf, _BIN)
        _interp2(pts[0], pts[1], gv, order, up.nf, up.nf, up.w, P, out)
    return np.ascontiguousarray(out.view(np.complex128).T)


@functools.lru_cache(maxsize=64)
def mode_error(N, w=W):
    r"""The kernel's error per mode of a type-2 transform of N = 2L + 1 modes on its fine grid
    (:func:`fine_size`):

    .. math::
        e_k = \max_x\Big\lvert\frac{1}{\psi_k}\sum_l\varphi\big(2(x - l)/w\big)\,e^{ikh(l - x)}
        - 1\Big\rvert,\qquad \psi_k = \tfrac w2\hat\varphi(\pi kw/n_f),

    k = -L..L, with the tabulated weights of width w (:func:`horner_table`) over 256 offsets x
    of a grid cell (the error is periodic in x): a one-axis transform of coefficients F errs by
    at most :math:`\sum_k\lvert F_k\rvert e_k` apart from the round-off, a two-axis one by
    :math:`\sum_{k_1k_2}\lvert F_{k_1k_2}\rvert(e_{k_1} + e_{k_2} + e_{k_1}e_{k_2})`. At
    σ = 2, :math:`e_k \approx 10^{-(w-1)}` at low modes, a few times more near
    :math:`\lvert k\rvert = n_f/4`. (N,) read-only."""
    w = _width(w)
    nf = fine_size(N)
    L = (N - 1) // 2
    k = np.arange(-L, L + 1)
    dec = deconvolution(N, nf, w)
    P = horner_table(w)
    x = np.arange(256) / 256.0 + 37.0
    l0 = np.ceil(x - 0.5 * w)
    u = (l0 - x + 0.5 * w) - 0.5
    vals = np.zeros((x.size, w))
    for d in range(P.shape[0]):
        vals = vals * u[:, None] + P[d][None, :]
    ll = l0[:, None] + np.arange(w)[None, :]  # (x, a)
    ph = np.exp(1j * (2 * np.pi / nf) * np.multiply.outer(ll - x[:, None], k))  # (x, a, k)
    out = np.max(np.abs(np.einsum("xa,xak->xk", vals, ph) * dec[None, :] - 1.0), axis=0)
    out.setflags(write=False)
    return out
