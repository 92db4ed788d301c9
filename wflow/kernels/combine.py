"""The per-row combines and the reductions [model §2–4, §6].

From the pair sums S0, SX, SI (and the row shift) of each (path, head, row): the partition
Z_h(x_i) = e^{c} S0 / n, the head's terms of the velocity (V_h SX), the gradient (D_h SX)
and the scalar diagnostics in per-row accumulators, and the tile's partial sum of ∂_D E
(:func:`_head_epilogue`, every head of a d = 3 tile in one call: :func:`_head_epilogue3`);
then the per-row outputs (:func:`_rows_epilogue`: normalisation head / joint / none, the
velocity, gradient, b̂ and the row terms of 𝒟, G², G²_hm, E and the Itô sum). The symmetric
pass combines with explicit vectors (:func:`_sym_epilogue3`). :func:`_finish` sums rows and
tiles in a fixed order on one thread. :func:`_radial_rows` forms, on request, the radial part
ρ of the output before the projection [model §1c] from the row sums a pass leaves.

Shapes: X (P, n, d), D and V (P, H, d, d); S0, SI, RS (P, H, n), SX (P, H, n, d); outputs
vel, grad (P, n, d), part (P, H, n), bhat (P, n), er (5, P, n) row terms, dEp
(P, tiles, H, d, d) partial sums, energy … ito_sum (P,), dEdD (P, H, d, d).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from wflow.kernels.simd import (
    _vadd_rounded,
    _vbcast,
    _vdiv,
    _vhsum,
    _vload,
    _vload3,
    _vmul_rounded,
    _vsplat,
    _vstore,
    _vsub,
    _vzero,
)
from wflow.kernels.target import _FM, _NOALIAS, _OPTS, _VQ


@njit(inline="always", **_OPTS)
def _sym_combine_vec(Xf, xo, S0f, SXf, SIf, so, Pf, A, ao, hc):
    r"""One vector of rows of :func:`_sym_epilogue3`: the rows' components at ``Xf[xo:]``,
    ``SXf[xo:]`` (flat (rows, 3)), their S0, SI at ``so``, Z into ``Pf[so:]`` and the
    increments into the accumulators ``A[k, ao:]``; ``hc`` the head's constants
    (V9, D9, es, zn, izn, one, lp, head) of :func:`_sym_epilogue3`. Returns the six products
    :math:`x_a\,SX_b` (a ≤ b) of the ∂_D E block sums. Every operation rounded on its own,
    in the scalar code's order (lane by lane the bits of a scalar loop)."""
    V9, D9, es, zn, izn, one, lp, head = hc
    x0, x1, x2 = _vload3(Xf, xo)
    sx0, sx1, sx2 = _vload3(SXf, xo)
    s0 = _vload(S0f, so)
    rs = _vdiv(one, s0)
    Z = _vmul_rounded(zn, s0)
    _vstore(Pf, so, Z)
    _vstore(A[6], ao, _vadd_rounded(_vload(A[6], ao), Z))
    _vstore(A[7], ao, _vadd_rounded(_vload(A[7], ao), _vmul_rounded(izn, rs)))
    y0 = _vmul_rounded(sx0, rs)
    y1 = _vmul_rounded(sx1, rs)
    y2 = _vmul_rounded(sx2, rs)
    w0 = _vadd_rounded(_vadd_rounded(_vmul_rounded(V9[0], y0), _vmul_rounded(V9[1], y1)),
                       _vmul_rounded(V9[2], y2))
    w1 = _vadd_rounded(_vadd_rounded(_vmul_rounded(V9[3], y0), _vmul_rounded(V9[4], y1)),
                       _vmul_rounded(V9[5], y2))
    w2 = _vadd_rounded(_vadd_rounded(_vmul_rounded(V9[6], y0), _vmul_rounded(V9[7], y1)),
                       _vmul_rounded(V9[8], y2))
    if lp:
        w0 = _vsub(_vadd_rounded(_vadd_rounded(_vmul_rounded(V9[0], x0),
                                               _vmul_rounded(V9[1], x1)),
                                 _vmul_rounded(V9[2], x2)), w0)
        w1 = _vsub(_vadd_rounded(_vadd_rounded(_vmul_rounded(V9[3], x0),
                                               _vmul_rounded(V9[4], x1)),
                                 _vmul_rounded(V9[5], x2)), w1)
        w2 = _vsub(_vadd_rounded(_vadd_rounded(_vmul_rounded(V9[6], x0),
                                               _vmul_rounded(V9[7], x1)),
                                 _vmul_rounded(V9[8], x2)), w2)
    xw = _vadd_rounded(_vadd_rounded(_vmul_rounded(w0, x0), _vmul_rounded(w1, x1)),
                       _vmul_rounded(w2, x2))
    om = one if head else Z
    _vstore(A[0], ao, _vadd_rounded(_vload(A[0], ao),
                                    _vmul_rounded(om, _vsub(w0, _vmul_rounded(xw, x0)))))
    _vstore(A[1], ao, _vadd_rounded(_vload(A[1], ao),
                                    _vmul_rounded(om, _vsub(w1, _vmul_rounded(xw, x1)))))
    _vstore(A[2], ao, _vadd_rounded(_vload(A[2], ao),
                                    _vmul_rounded(om, _vsub(w2, _vmul_rounded(xw, x2)))))
    _vstore(A[3], ao, _vadd_rounded(_vload(A[3], ao), _vmul_rounded(es, _vadd_rounded(
        _vadd_rounded(_vmul_rounded(D9[0], sx0), _vmul_rounded(D9[1], sx1)),
        _vmul_rounded(D9[2], sx2)))))
    _vstore(A[4], ao, _vadd_rounded(_vload(A[4], ao), _vmul_rounded(es, _vadd_rounded(
        _vadd_rounded(_vmul_rounded(D9[3], sx0), _vmul_rounded(D9[4], sx1)),
        _vmul_rounded(D9[5], sx2)))))
    _vstore(A[5], ao, _vadd_rounded(_vload(A[5], ao), _vmul_rounded(es, _vadd_rounded(
        _vadd_rounded(_vmul_rounded(D9[6], sx0), _vmul_rounded(D9[7], sx1)),
        _vmul_rounded(D9[8], sx2)))))
    _vstore(A[8], ao, _vadd_rounded(_vload(A[8], ao), _vmul_rounded(es, _vload(SIf, so))))
    return (_vmul_rounded(x0, sx0), _vmul_rounded(x0, sx1), _vmul_rounded(x0, sx2),
            _vmul_rounded(x1, sx1), _vmul_rounded(x1, sx2), _vmul_rounded(x2, sx2))


@njit(**_OPTS)
def _sym_combine_tail(Xp, S0h, SXh, SIh, Ph, acc, r, k, hc, tl):
    """:func:`_sym_combine_vec` for the last k < lanes rows from r: on zero-padded copies
    in the scratch ``tl`` (≥ :data:`_SYM_TAIL` floats; S0 = 1: finite lanes, whose products
    are zeros), the k rows' outputs copied back."""
    L = _VQ
    tl[:_SYM_TAIL] = 0.0
    tX = tl[:3 * L]
    tSX = tl[3 * L:6 * L]
    tS0 = tl[6 * L:7 * L]
    tSI = tl[7 * L:8 * L]
    tP = tl[8 * L:9 * L]
    tA = tl[9 * L:18 * L].reshape((9, L))
    tS0[:] = 1.0
    for q in range(3 * k):
        tX[q] = Xp[3 * r + q]
        tSX[q] = SXh[3 * r + q]
    for q in range(k):
        tS0[q] = S0h[r + q]
        tSI[q] = SIh[r + q]
        for c in range(9):
            tA[c, q] = acc[c, r + q]
    t = _sym_combine_vec(tX, 0, tS0, tSX, tSI, 0, tP, tA, 0, hc)
    for q in range(k):
        Ph[r + q] = tP[q]
        for c in range(9):
            acc[c, r + q] = tA[c, q]
    return t


#: Floats of the scratch of :func:`_sym_combine_tail`.
_SYM_TAIL = 18 * _VQ


@njit(**_OPTS, **_NOALIAS)
def _sym_epilogue3(X, D, V, lap, norm, p, h, i0, i1, R, sums, dest, tl):
    r"""Head h's combine of rows i0..i1−1 of path p after the symmetric pass (d = 3, fixed
    shift :math:`c_h`, uniform masses, no mask): with :math:`\bar y = SX/S0`,

    .. math::
        Z = \tfrac{e^{c}}{n} S0,\quad v \mathrel{+}= \omega\,P_x(V_h\bar y \text{ or }
        V_h x - V_h\bar y),\quad g \mathrel{+}= e^{c} D_h SX,\quad
        \partial_D E_{\text{block}} \mathrel{+}= e^{c} \textstyle\sum_{i} x_i SX_i^\top

    (ω = 1 for the head normalisation, Z otherwise), and Σ_h Z, Σ_h 1/Z, the Itô row term
    :math:`e^{c} SI` into the row accumulators ``acc[:, i − i0]`` (component-major, (9, rows));
    the ∂_D E partial of every block of R rows it covers into ``dEp[p, block, h]`` (written,
    not added: every pass writes each block of each head once). ``sums``: the head's row sums
    (S0, SX, SI, RS), ``dest``: (part, dEp, acc).
    :math:`e^{c}` once per head, 1/S0 once per row. The fused per-path form calls it for all
    rows, the unfused form for one block (i0 a multiple of R): the same arithmetic for every
    row and block (the same bits).

    One loop over vectors of rows (:func:`_sym_combine_vec`, explicit vectors of
    :mod:`wflow.kernels.simd`; a last partial vector runs on zero-padded copies), each
    operation rounded on its own: the row terms have the bits of the scalar loop. The
    partial sums of ∂_D E add each block's products lane by lane over its vectors (R rows,
    :data:`_SYM_BLOCK_ROWS`, a multiple of the vector), then across lanes by
    :func:`_vhsum`'s fixed tree (not row after row: scalar chains and a stride-3 vectorised
    loop are slower; see benchmarks/).

    The tile sums take the six entries a ≤ b and mirror them:
    :math:`\sum_i x_i SX_i^\top = \sum_{i,j} e_{ij} x_i x_j^\top` is symmetric (e_ij = e_ji),
    so the sum over tiles of the mirrored upper triangles is that matrix up to rounding, and
    exactly symmetric. Compiled with noalias pointer arguments (the arrays it writes,
    ``part``, ``dEp``, ``acc`` and the tail's scratch ``tl``, share no memory with any
    other)."""
    S0r, SXr, SIr, RSr = sums
    part, dEp, acc = dest
    n = X.shape[1]
    lp = lap[h]
    V9 = (_vbcast(V[p, h, 0], 0), _vbcast(V[p, h, 0], 1), _vbcast(V[p, h, 0], 2),
          _vbcast(V[p, h, 1], 0), _vbcast(V[p, h, 1], 1), _vbcast(V[p, h, 1], 2),
          _vbcast(V[p, h, 2], 0), _vbcast(V[p, h, 2], 1), _vbcast(V[p, h, 2], 2))
    D9 = (_vbcast(D[p, h, 0], 0), _vbcast(D[p, h, 0], 1), _vbcast(D[p, h, 0], 2),
          _vbcast(D[p, h, 1], 0), _vbcast(D[p, h, 1], 1), _vbcast(D[p, h, 1], 2),
          _vbcast(D[p, h, 2], 0), _vbcast(D[p, h, 2], 1), _vbcast(D[p, h, 2], 2))
    es = math.exp(RSr[i0])
    ves = _vsplat(es)
    zn = _vsplat(es / n)
    izn = _vsplat(n / es)
    one = _vsplat(1.0)
    head = norm == 0
    m = i1 - i0
    # flat views: element (r, k) at 3r + k
    Xp = X[p, i0:i1].reshape(3 * m)
    S0h = S0r[i0:i1]
    SXh = SXr[i0:i1].reshape(3 * m)
    SIh = SIr[i0:i1]
    Ph = part[p, h, i0:i1]
    hc = (V9, D9, ves, zn, izn, one, lp, head)  # (the head's constants)
    mv = (m // _VQ) * _VQ
    b = i0 // R  # the block and the row within it (i0 is a block's first row)
    pos = i0 - b * R
    e00 = e01 = e02 = e11 = e12 = e22 = _vzero()
    for r in range(0, m, _VQ):
        if r < mv:
            t00, t01, t02, t11, t12, t22 = _sym_combine_vec(
                Xp, 3 * r, S0h, SXh, SIh, r, Ph, acc, r, hc)
        else:  # the last rows (fewer than a vector)
            t00, t01, t02, t11, t12, t22 = _sym_combine_tail(
                Xp, S0h, SXh, SIh, Ph, acc, r, m - r, hc, tl)
        if pos == 0:  # a block's first vector
            e00, e01, e02, e11, e12, e22 = t00, t01, t02, t11, t12, t22
        else:
            e00 = _vadd_rounded(e00, t00)
            e01 = _vadd_rounded(e01, t01)
            e02 = _vadd_rounded(e02, t02)
            e11 = _vadd_rounded(e11, t11)
            e12 = _vadd_rounded(e12, t12)
            e22 = _vadd_rounded(e22, t22)
        pos += _VQ
        if pos == R or r + _VQ >= m:  # the block's last vector: its partial of ∂_D E
            f00, f01, f02 = es * _vhsum(e00), es * _vhsum(e01), es * _vhsum(e02)
            f11, f12, f22 = es * _vhsum(e11), es * _vhsum(e12), es * _vhsum(e22)
            dEp[p, b, h, 0, 0] = f00
            dEp[p, b, h, 0, 1] = f01
            dEp[p, b, h, 0, 2] = f02
            dEp[p, b, h, 1, 0] = f01
            dEp[p, b, h, 1, 1] = f11
            dEp[p, b, h, 1, 2] = f12
            dEp[p, b, h, 2, 0] = f02
            dEp[p, b, h, 2, 1] = f12
            dEp[p, b, h, 2, 2] = f22
            b += 1
            pos = 0


@njit(**_OPTS)
def _head_epilogue3(X, D, V, lap, norm, no_energy, p, b, h0, h1, i0, i1, sums, dest, U):
    """:func:`_head_epilogue` for d = 3 and the heads h0..h1−1 in order, in scalars (V_h, D_h
    and the ∂_D E partial in registers). Every sum is written in the order of the generic loops,
    ``((0 + a) + b) + c``, and the module compiles it without fast-math flags. ``no_energy``:
    without the terms of g, the Itô sum and ∂_D E (a causal mask, or a general pass, which
    reports none of them), whose accumulators then stay 0. ``sums``: (S0, SX, SI, RS),
    ``dest``: (part, dEp, acc)."""
    S0, SX, SI, RS = sums
    part, dEp, acc = dest
    n = X.shape[1]
    for h in range(h0, h1):
        lp = lap[h]
        v00, v01, v02 = V[p, h, 0, 0], V[p, h, 0, 1], V[p, h, 0, 2]
        v10, v11, v12 = V[p, h, 1, 0], V[p, h, 1, 1], V[p, h, 1, 2]
        v20, v21, v22 = V[p, h, 2, 0], V[p, h, 2, 1], V[p, h, 2, 2]
        d00, d01, d02 = D[p, h, 0, 0], D[p, h, 0, 1], D[p, h, 0, 2]
        d10, d11, d12 = D[p, h, 1, 0], D[p, h, 1, 1], D[p, h, 1, 2]
        d20, d21, d22 = D[p, h, 2, 0], D[p, h, 2, 1], D[p, h, 2, 2]
        e00 = e01 = e02 = e10 = e11 = e12 = e20 = e21 = e22 = 0.0
        c_last = np.nan
        es = 1.0
        for i in range(i0, i1):
            r = i - i0
            x0, x1, x2 = X[p, i, 0], X[p, i, 1], X[p, i, 2]
            c = RS[p, h, i]
            if c != c_last:  # NaN never equal: recomputed
                es = math.exp(c)
                c_last = c
            s0 = S0[p, h, i]
            Z = es * s0 / n
            part[p, h, i] = Z
            acc[r, 6] += Z
            acc[r, 7] += 1.0 / Z
            sx0, sx1, sx2 = SX[p, h, i, 0], SX[p, h, i, 1], SX[p, h, i, 2]
            y0 = sx0 / s0
            y1 = sx1 / s0
            y2 = sx2 / s0
            w0 = ((0.0 + v00 * y0) + v01 * y1) + v02 * y2
            w1 = ((0.0 + v10 * y0) + v11 * y1) + v12 * y2
            w2 = ((0.0 + v20 * y0) + v21 * y1) + v22 * y2
            if lp:
                w0 = (((0.0 + v00 * x0) + v01 * x1) + v02 * x2) - w0
                w1 = (((0.0 + v10 * x0) + v11 * x1) + v12 * x2) - w1
                w2 = (((0.0 + v20 * x0) + v21 * x1) + v22 * x2) - w2
            xw = ((0.0 + w0 * x0) + w1 * x1) + w2 * x2
            if norm == 0:
                acc[r, 0] += w0 - xw * x0
                acc[r, 1] += w1 - xw * x1
                acc[r, 2] += w2 - xw * x2
            else:
                acc[r, 0] += Z * (w0 - xw * x0)
                acc[r, 1] += Z * (w1 - xw * x1)
                acc[r, 2] += Z * (w2 - xw * x2)
            if not no_energy:
                acc[r, 3] += es * (((0.0 + d00 * sx0) + d01 * sx1) + d02 * sx2)
                acc[r, 4] += es * (((0.0 + d10 * sx0) + d11 * sx1) + d12 * sx2)
                acc[r, 5] += es * (((0.0 + d20 * sx0) + d21 * sx1) + d22 * sx2)
                xa0 = es * x0
                xa1 = es * x1
                xa2 = es * x2
                if U.shape[1] > 0:
                    xa0 *= U[p, i]
                    xa1 *= U[p, i]
                    xa2 *= U[p, i]
                e00 += xa0 * sx0
                e01 += xa0 * sx1
                e02 += xa0 * sx2
                e10 += xa1 * sx0
                e11 += xa1 * sx1
                e12 += xa1 * sx2
                e20 += xa2 * sx0
                e21 += xa2 * sx1
                e22 += xa2 * sx2
                acc[r, 8] += es * SI[p, h, i]
        if not no_energy:  # the tile's partial (dEp starts at 0: the same sums as in place)
            dEp[p, b, h, 0, 0] += e00
            dEp[p, b, h, 0, 1] += e01
            dEp[p, b, h, 0, 2] += e02
            dEp[p, b, h, 1, 0] += e10
            dEp[p, b, h, 1, 1] += e11
            dEp[p, b, h, 1, 2] += e12
            dEp[p, b, h, 2, 0] += e20
            dEp[p, b, h, 2, 1] += e21
            dEp[p, b, h, 2, 2] += e22


@njit(fastmath=_FM, **_OPTS)
def _head_epilogue(X, D, V, lap, norm, causal, p, b, h, i0, i1, sums, dest, scratch, U):
    r"""Head h's part of the per-row outputs of rows i0..i1−1 of path p, from their row sums.

    Writes the partition ``part[p, h, i]``, adds the head's terms to the row accumulators
    ``acc[i − i0]`` (columns: v (d), g (d), Σ_h Z, Σ_h 1/Z, Itô), and writes the tile's
    partial :math:`\sum_{i \in \text{tile}} e^{c_{hi}} u_i x_i\, SX_{hi}^\top` into
    ``dEp[p, b, h]`` (rows in increasing order). Called for h = 0, 1, … in order, so every
    row accumulates its heads in the same order as a row-by-row loop (the same bits).
    ``e^{c}`` is computed once per run of rows with the same shift (the fixed shift: once
    per tile and head). ``sums``: (S0, SX, SI, RS); ``dest``: (part, dEp, acc); ``scratch``:
    (ybar, w), (d,) each. U (P, ≥n) relative masses, or (P, 0) for uniform masses.
    """
    n, d = X.shape[1], X.shape[2]
    if d == 3:
        _head_epilogue3(X, D, V, lap, norm, causal, p, b, h, h + 1, i0, i1, sums, dest, U)
        return
    S0, SX, SI, RS = sums
    part, dEp, acc = dest
    ybar, w = scratch
    c_last = np.nan
    es = 1.0
    for i in range(i0, i1):
        r = i - i0
        x = X[p, i]
        c = RS[p, h, i]
        if c != c_last:  # NaN never equal: recomputed
            es = math.exp(c)
            c_last = c
        s0 = S0[p, h, i]
        Z = es * s0 / n
        part[p, h, i] = Z
        acc[r, 2 * d] += Z
        acc[r, 2 * d + 1] += 1.0 / Z
        for a in range(d):
            ybar[a] = SX[p, h, i, a] / s0
        # w = V ybar  (attention output a_h), or V x − a_h (Laplacian head)
        for a in range(d):
            t = 0.0
            for bb in range(d):
                t += V[p, h, a, bb] * ybar[bb]
            w[a] = t
        if lap[h]:
            for a in range(d):
                t = 0.0
                for bb in range(d):
                    t += V[p, h, a, bb] * x[bb]
                w[a] = t - w[a]
        xw = 0.0
        for a in range(d):
            xw += w[a] * x[a]
        if norm == 0:
            for a in range(d):
                acc[r, a] += w[a] - xw * x[a]
        else:
            for a in range(d):
                acc[r, a] += Z * (w[a] - xw * x[a])
        if not causal:
            # Σ_j e^{s_ij} D_h x_j = e^{shift} D_h SX;  ∂_D E: e^{shift} x_i SX_iᵀ
            for a in range(d):
                t = 0.0
                for bb in range(d):
                    t += D[p, h, a, bb] * SX[p, h, i, bb]
                acc[r, d + a] += es * t
                xa = es * x[a]
                if U.shape[1] > 0:
                    xa *= U[p, i]
                for bb in range(d):
                    dEp[p, b, h, a, bb] += xa * SX[p, h, i, bb]
            acc[r, 2 * d + 2] += es * SI[p, h, i]


@njit(**_OPTS)
def _rows_epilogue(X, H, norm, causal, p, i0, i1, acc, vel, grad, bhat, er, v, g):
    """The per-row outputs of rows i0..i1−1 of path p from the row accumulators ``acc``
    filled by :func:`_head_epilogue` for every head: velocity, gradient, b̂ and the row terms
    ``er[:, p, i]`` of 𝒟, G², G²_hm, E and the Itô sum (summed over rows later)."""
    n, d = X.shape[1], X.shape[2]
    for i in range(i0, i1):
        r = i - i0
        x = X[p, i]
        for a in range(d):
            v[a] = acc[r, a]
            g[a] = acc[r, d + a]
        zsum = acc[r, 2 * d]
        minv = acc[r, 2 * d + 1]
        ito = acc[r, 2 * d + 2]
        if norm == 1:
            scale = 1.0 / zsum
        else:
            scale = 1.0 / H
        v2 = 0.0
        for a in range(d):
            v[a] *= scale
            vel[p, i, a] = v[a]
            v2 += v[a] * v[a]
        if causal:
            continue
        xg = 0.0
        for a in range(d):
            g[a] /= H * n
            xg += g[a] * x[a]
        gv = 0.0
        for a in range(d):
            g[a] -= xg * x[a]
            grad[p, i, a] = g[a]
            gv += g[a] * v[a]
        bhat[p, i] = H / zsum
        er[0, p, i] = gv
        er[1, p, i] = v2 * (H / minv)
        er[2, p, i] = v2 * (zsum / H)
        er[3, p, i] = zsum
        er[4, p, i] = ito


@njit(**_OPTS)
def _finish(er, dEp, beta, H, want_ito, energy, diss, G2, G2hm, ito_sum, dEdD, U):
    r"""Sums over rows (and over tiles for ∂_D E) in a fixed sequential order; with relative
    row masses U (P, ≥n) the row terms are weighted, :math:`\frac1n\sum_i u_i(\cdot)`;
    U of shape (P, 0) means uniform masses. Path by path: :func:`_finish_path`."""
    for p in range(er.shape[1]):
        _finish_path(er, dEp, beta, H, want_ito, energy, diss, G2, G2hm, ito_sum, dEdD, U, p)


@njit(**_OPTS)
def _finish_path(er, dEp, beta, H, want_ito, energy, diss, G2, G2hm, ito_sum, dEdD, U, p):
    """:func:`_finish` of path p alone (the symmetric pass's fused and chained forms run it
    in the item that completes the path). ∂_D E: every entry sums its tiles in tile order
    from zero; the loop runs over the tiles outside and the (H, d, d) entries inside
    (contiguous: LLVM vectorises it across entries, each lane the same sequence of
    additions)."""
    n = er.shape[2]
    nt, d = dEp.shape[1], dEp.shape[3]
    f = 1.0 / (2.0 * H * n * n)
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    s4 = 0.0
    s5 = 0.0
    if U.shape[1] == 0:
        for i in range(n):
            s1 += er[0, p, i]
            s2 += er[1, p, i]
            s3 += er[2, p, i]
            s4 += er[3, p, i]
            s5 += er[4, p, i]
    else:
        for i in range(n):
            ui = U[p, i]
            s1 += ui * er[0, p, i]
            s2 += ui * er[1, p, i]
            s3 += ui * er[2, p, i]
            s4 += ui * er[3, p, i]
            s5 += ui * er[4, p, i]
    diss[p] = s1 / n
    G2[p] = s2 / n
    G2hm[p] = s3 / n
    energy[p] = s4 / (2.0 * beta * H * n)
    ito_sum[p] = s5 / (2.0 * H * n * n) if want_ito else np.nan
    m = H * d * d
    out = dEdD[p].reshape(m)
    out[:] = 0.0
    for b in range(nt):
        t = dEp[p, b].reshape(m)
        for k in range(m):
            out[k] += t[k]
    for k in range(m):
        out[k] *= f


@njit(**_OPTS)
def _radial_rows(X, V, lap, norm, S0, SX, part, rho):
    r"""The radial part of the combined output before the tangent projection [model §1c],
    from the row sums of a pass:

    .. math::
        \rho_i = \langle x_i, u_i\rangle = \sum_h c_h\,\rho_{hi},\qquad
        \rho_{hi} = \frac{\langle x_i, V_h SX_{hi}\rangle}{S0_{hi}}\ \text{or}\
        \langle x_i, V_h x_i\rangle - \frac{\langle x_i, V_h SX_{hi}\rangle}{S0_{hi}}
        \ (h \in L),

    with :math:`c_h = 1/H` (head), :math:`Z_h/\sum_k Z_k` (joint), :math:`Z_h/H` (none) and
    :math:`Z_h` = ``part[p, h, i]`` (the masses and the mask are already in S0, SX, Z). Into
    ``rho`` (P, n), before the sign and before ``head_combine``. Rows one after the other,
    heads in order, without fast-math: the bits depend on the inputs only. Cost
    :math:`P H n d^2` (the pass costs :math:`P H n^2 d`)."""
    P, n, d = X.shape
    H = V.shape[1]
    for p in range(P):
        for i in range(n):
            acc = 0.0
            zsum = 0.0
            for h in range(H):
                t = 0.0  # ⟨x_i, V_h SX⟩
                for a in range(d):
                    va = 0.0
                    for b in range(d):
                        va += V[p, h, a, b] * SX[p, h, i, b]
                    t += X[p, i, a] * va
                r = t / S0[p, h, i]
                if lap[h]:  # ⟨x_i, V_h x_i⟩ − r
                    tx = 0.0
                    for a in range(d):
                        vx = 0.0
                        for b in range(d):
                            vx += V[p, h, a, b] * X[p, i, b]
                        tx += X[p, i, a] * vx
                    r = tx - r
                Z = part[p, h, i]
                zsum += Z
                acc += r if norm == 0 else Z * r
            rho[p, i] = acc / zsum if norm == 1 else acc / H
