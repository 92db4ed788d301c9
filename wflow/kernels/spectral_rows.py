r"""The per-row combine of the spectral summation [model §2s]: from the kernel sums of every
head at row i to the field there.

.. math::
    w_h = P_{x_i}\big(V_h \bar x_h\big)\ \text{or}\ P_{x_i}\big(V_h x_i - V_h\bar x_h\big),\quad
    \bar x_h = S^X_{hi}/S^0_{hi},\qquad
    g_i = P_{x_i}\tfrac{1}{Hn}\textstyle\sum_h D_h S^X_{hi},

v by the normalisation of §2, and per row :math:`\bar Z`, :math:`\bar m`, :math:`|v|^2` and
:math:`\langle g, v\rangle` for the means of §3–4. Each row is written by one call on its block
of rows, whatever the thread that ran it: the bits do not depend on the thread count.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from wflow.kernels.exp import _exp_fast
from wflow.kernels.target import _FM, _OPTS

__all__ = ["combine_rows", "grid_sums", "sinhc_bound"]


@njit(nogil=True, **_OPTS)
def combine_rows(X, D, V, S0, SX, lap, norm, general, summed, i0, i1, v, g, zbar, mbar):
    """Rows i0..i1 of v (n, d), g (n, d), Z̄ (n,) and m̄ = mean of 1/Z_h (n,); ``norm``:
    0 head, 1 joint, 2 none; ``summed``: the heads' outputs added (v = H·v_mean)."""
    n, d = X.shape
    H = D.shape[0]
    w = np.empty(d)
    a = np.empty(d)
    for i in range(i0, i1):
        for k in range(d):
            v[i, k] = 0.0
            g[i, k] = 0.0
        zs = 0.0
        ms = 0.0
        for h in range(H):
            s0 = S0[h, i]
            z = s0 / n
            for r in range(d):
                acc = 0.0
                for k in range(d):
                    acc += V[h, r, k] * SX[h, i, k]
                a[r] = acc / s0
            if lap[h]:
                for r in range(d):
                    acc = 0.0
                    for k in range(d):
                        acc += V[h, r, k] * X[i, k]
                    w[r] = acc - a[r]
            else:
                for r in range(d):
                    w[r] = a[r]
            p = 0.0
            for r in range(d):
                p += w[r] * X[i, r]
            c = 1.0 / H if norm == 0 else (z if norm == 1 else z / H)
            for r in range(d):
                v[i, r] += c * (w[r] - p * X[i, r])
            zs += z
            ms += 1.0 / z
            if not general:
                for r in range(d):
                    acc = 0.0
                    for k in range(d):
                        acc += D[h, r, k] * SX[h, i, k]
                    g[i, r] += acc
        if norm == 1:
            for r in range(d):
                v[i, r] /= zs
        if summed:
            for r in range(d):
                v[i, r] *= H
        zbar[i] = zs / H
        mbar[i] = ms / H
        if not general:
            p = 0.0
            for r in range(d):
                g[i, r] /= H * n
                p += g[i, r] * X[i, r]
            for r in range(d):
                g[i, r] -= p * X[i, r]


@njit(nogil=True, fastmath=_FM, **_OPTS)
def grid_sums(Q, Y, Wt, out):
    r"""The kernel applied on the quadrature grid [model §2s]:
    :math:`\mathrm{out}_{gc} = \sum_{g'} e^{\langle q_g, y_{g'}\rangle}\,W_{cg'}` (Q (G, 3) the
    rows :math:`\beta D^\top y_g`, Y (G, 3), Wt (C, G)), the exponentials by
    :func:`wflow.kernels.exp._exp_fast`. Each row is one call's fixed sequence of operations:
    the same bits whatever the thread that runs it."""
    G = Y.shape[0]
    C = Wt.shape[0]
    e = np.empty(G)
    for g in range(G):
        q0 = Q[g, 0]
        q1 = Q[g, 1]
        q2 = Q[g, 2]
        for k in range(G):
            e[k] = _exp_fast(q0 * Y[k, 0] + q1 * Y[k, 1] + q2 * Y[k, 2])
        for c in range(C):
            acc = 0.0
            w = Wt[c]
            for k in range(G):
                acc += e[k] * w[k]
            out[g, c] = acc


@njit(nogil=True, **_OPTS)
def sinhc_bound(X, Dh, beta, top, extra, out):
    r""":math:`\mathrm{out}_i = \mathrm{top}\cdot(4\pi\sinh(z_i)/z_i + \mathrm{extra})`,
    :math:`z_i = \beta\lvert D_h^\top x_i\rvert` (1 for :math:`z_i \le 10^{-8}`): the magnitude
    bound of :func:`wflow.kernels.spectral._s2_magnitude`."""
    n, d = X.shape
    for i in range(n):
        z2 = 0.0
        for b in range(d):
            acc = 0.0
            for a in range(d):
                acc += X[i, a] * Dh[a, b]
            z2 += acc * acc
        z = beta * np.sqrt(z2)
        s = np.sinh(z) / z if z > 1e-8 else 1.0
        out[i] = top * (4.0 * np.pi * s + extra)
