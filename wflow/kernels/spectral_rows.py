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

from wflow.kernels.target import _OPTS

__all__ = ["combine_rows"]


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
