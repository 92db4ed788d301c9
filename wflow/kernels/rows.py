"""The row pass [model §2–4]: for each work item (path p, tile of R rows) the pair sums of
its rows for every head, then the combine (:mod:`.combine`).

The logit is ``s_ij = ⟨q_i, x_j⟩`` with ``q_i = β D_h x_i`` computed once per row, so the
loop over the columns j only reads the tokens, stored as structure of arrays ``(d, n_pad)``
zero-padded to a multiple of the vector length: the loop runs over whole vectors and the
padded (or causally masked) weights are set to 0 by a select. d = 3 has one fused loop per
row (:func:`_row_sums3`; with uniform masses, the polynomial exponential and the fixed shift
every head of a tile in one call, :func:`_tile_sums3_fixed`, and there without a mask the
non-symmetric heads take the tile's rows across the lanes of one vector, :func:`_rows3_lanes`);
other d use chunks of
:data:`_CH` columns (logits, exponentials, then the sums). float32 tokens with d = 3 run the
loop in float32 (:func:`_tile_sums32`: sums over chunks of :data:`_CH` columns, then
float64); everything after the pair loop is float64.

Shapes: Xt (P, d, n_pad) columns, X (P, n, d), D and V (P, H, d, d), shift and rowmax
(P, H), U (P, n_pad) relative masses u_j = n w_j or (P, 0) for uniform masses (one compiled
form serves both; multiplying by the masses happens after the exponential); the row sums
S0, SI, RS (P, H, n) and SX (P, H, n, d).

*Stabilisation* [model §2]: the fixed shift c_h = β‖D_h‖₂ where 2 c_h is below the route's
limit (no row can underflow), else each row's maximum (a first pass over the row).

*Determinism.* The threads take items from the job's atomic counter (a dynamic schedule);
every row's sums are computed by the same code whatever thread runs its item, every row adds
its heads in the order h = 0, 1, …, and the sums over rows and tiles run afterwards on the
calling thread in a fixed order (:func:`~.combine._finish`). The tile height R is a function
of d only (:func:`~.routing.tile_rows`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from wflow.kernels.combine import _finish, _head_epilogue, _head_epilogue3, _rows_epilogue
from wflow.kernels.exp import (
    _E1,
    _E2,
    _E3,
    _E4,
    _E5,
    _E6,
    _E7,
    _E8,
    _E9,
    _E10,
    _F0,
    _LOG2E,
    _ROUND_MAGIC,
    _exp_fast,
    _exp_fast32,
    _exp_shifted,
)
from wflow.kernels.pool import _enter, _fetch_add, _item_done, _leave, _wait_done
from wflow.kernels.simd import vector_ops
from wflow.kernels.target import _ALIGNED, _FM, _OPTS, _VQ, _VW, _VW32, _unowned

#: Column chunk of the pair loop (fixed: the rounding of the row sums depends on it).
_CH = 512

#: Rows per vector of :func:`_rows3_lanes`: the tile height of d = 3 (:func:`~.routing.tile_rows`),
#: whatever the target's registers (LLVM splits the vector where they are narrower): the same
#: lane arithmetic on every target.
_LANES3 = 8
_L = vector_ops(_LANES3, _ROUND_MAGIC, (_E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9, _E10))
_lload, _lstore, _lsplat, _lbcast, _lzero = _L.load, _L.store, _L.splat, _L.bcast, _L.zero
_ladd, _lmul, _lfma, _lexp2 = _L.add, _L.mul, _L.fma, _L.exp2


# ---------------------------------------------------------------------------------------------
# Pair pass
# ---------------------------------------------------------------------------------------------
@njit(fastmath=_FM, **_OPTS)
def _logits(Xp, q, j0, m, buf):
    """buf[:m] = ⟨q, x_j⟩ for j = j0..j0+m−1 (Xp is (d, n))."""
    d = Xp.shape[0]
    x = Xp[0, j0:j0 + m]  # views indexed from 0: contiguous vector loads (no wraparound)
    qa = q[0]
    for j in range(m):
        buf[j] = qa * x[j]
    for a in range(1, d):
        x = Xp[a, j0:j0 + m]
        qa = q[a]
        for j in range(m):
            buf[j] += qa * x[j]


@njit(fastmath=_FM, **_OPTS)
def _row_max(Xp, q, jend, buf):
    mx = -np.inf
    for j0 in range(0, jend, _CH):
        m = min(_CH, jend - j0)
        _logits(Xp, q, j0, m, buf)
        for j in range(m):
            if buf[j] > mx:
                mx = buf[j]
    return mx


@njit(fastmath=_FM, **_OPTS)
def _row_sums(Xp, q, xi, c, jend, want_ito, fast, buf, cbuf, sx, u):
    """Sums of one row over j < jend: returns (S0, SI) and writes SX into sx.

    ``u`` (n_pad,) relative column masses :math:`u_j = n w_j` (e_ij → u_j e_ij, zero padded),
    or None (uniform: numba prunes the weighting loop, the unweighted code is unchanged).

    Xp is (d, n_pad) with zero padding up to a multiple of _VW: every loop runs over
    whole vectors (the padded weights are set to 0), none falls into a scalar remainder.
    """
    d = Xp.shape[0]
    s0 = 0.0
    si = 0.0
    for a in range(d):
        sx[a] = 0.0
    for j0 in range(0, jend, _CH):
        m = min(_CH, jend - j0)
        mp = min(_CH, ((m + _VW - 1) // _VW) * _VW)
        _logits(Xp, q, j0, mp, buf)
        if fast:
            for j in range(mp):
                buf[j] = _exp_fast(buf[j] - c)
        else:
            for j in range(m):
                buf[j] = math.exp(buf[j] - c)
        for j in range(m, mp):
            buf[j] = 0.0
        if u is not None:
            uc = u[j0:j0 + mp]
            for j in range(mp):
                buf[j] *= uc[j]
        t = 0.0
        for j in range(mp):
            t += buf[j]
        s0 += t
        for a in range(d):
            x = Xp[a, j0:j0 + mp]
            t = 0.0
            for j in range(mp):
                t += buf[j] * x[j]
            sx[a] += t
        if want_ito:
            _logits(Xp, xi, j0, mp, cbuf)
            t = 0.0
            for j in range(mp):
                t += buf[j] * cbuf[j] * cbuf[j]
            si += t
    return s0, s0 + si


@njit(fastmath=_FM, **_OPTS)
def _row_sums3(x0, x1, x2, q0, q1, q2, y0, y1, y2, c, jend, want_ito):
    """d = 3, polynomial exp: the row in one vectorised loop. Returns S0, SX, Σ_j e_ij⟨x_i,x_j⟩².

    The columns are zero-padded to a multiple of _VW and the loop runs over whole
    vectors, the weights beyond jend set to 0 (a select: cheaper than a scalar remainder).
    """
    s0 = 0.0
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    si = 0.0
    npad = ((jend + _VW - 1) // _VW) * _VW
    if want_ito:
        for j in range(npad):
            u0 = x0[j]
            u1 = x1[j]
            u2 = x2[j]
            e = _exp_fast(q0 * u0 + q1 * u1 + q2 * u2 - c)
            e = e if j < jend else 0.0
            s0 += e
            a0 += e * u0
            a1 += e * u1
            a2 += e * u2
            cc = y0 * u0 + y1 * u1 + y2 * u2
            si += e * cc * cc
    else:
        for j in range(npad):
            u0 = x0[j]
            u1 = x1[j]
            u2 = x2[j]
            e = _exp_fast(q0 * u0 + q1 * u1 + q2 * u2 - c)
            e = e if j < jend else 0.0
            s0 += e
            a0 += e * u0
            a1 += e * u1
            a2 += e * u2
    return s0, a0, a1, a2, si


@njit(fastmath=_FM, **_OPTS)
def _row_sums2w(x0, x1, q0, q1, y0, y1, c, jend, want_ito, u):
    """d = 2 with relative column masses u (zero-padded), polynomial exp: the row in one
    vectorised loop, e_ij = u_j e^{s_ij − c}. Returns S0, SX, Σ_j e_ij⟨x_i,x_j⟩² (as
    :func:`_row_sums3`)."""
    s0 = 0.0
    a0 = 0.0
    a1 = 0.0
    si = 0.0
    npad = ((jend + _VW - 1) // _VW) * _VW
    if want_ito:
        for j in range(npad):
            u0 = x0[j]
            u1 = x1[j]
            e = _exp_fast(q0 * u0 + q1 * u1 - c) * u[j]
            e = e if j < jend else 0.0
            s0 += e
            a0 += e * u0
            a1 += e * u1
            cc = y0 * u0 + y1 * u1
            si += e * cc * cc
    else:
        for j in range(npad):
            u0 = x0[j]
            u1 = x1[j]
            e = _exp_fast(q0 * u0 + q1 * u1 - c) * u[j]
            e = e if j < jend else 0.0
            s0 += e
            a0 += e * u0
            a1 += e * u1
    return s0, a0, a1, si


@njit(fastmath=_FM, **_OPTS, **_ALIGNED)
def _tile_sums3_fixed(Xt, D, X, beta, shift, rowmax, causal, want_ito, p, i0, i1, buf, q, sums):
    r"""Rows i0..i1−1 of path p for every head, d = 3, uniform masses, polynomial exp.

    Non-symmetric heads without a mask: :func:`_rows3_lanes`. Other heads with the fixed
    shift :math:`c = c_h` (``2c_h < 700``): per row one loop over the
    whole vectors of columns before ``jend`` without a mask, then the last partial vector
    block masked (weights beyond ``jend`` 0; columns zero-padded to _VW), with the
    unclamped :func:`_exp_shifted` and the shift folded into the logit,
    :math:`((-c + q_0 u_0) + q_1 u_1) + q_2 u_2` (three FMAs). Returns S0, SX and
    SI = Σ_j e_ij (1 + ⟨x_i,x_j⟩²) in the arrays. Heads with the row-max shift go to
    :func:`_tile_sums3`. ``sums``: the row sums (S0, SX, SI, RS).

    All heads in one compiled function and the loops inline: no call and no reference
    counting of the column views per row or per head.
    """
    H = D.shape[1]
    x0 = Xt[p, 0]
    x1 = Xt[p, 1]
    x2 = Xt[p, 2]
    for h in range(H):
        if rowmax[p, h]:
            # rowmax[p, h] (True here), not the literal: a literal would compile another
            # specialisation of _tile_sums3 besides _tile_sums64's
            _tile_sums3(Xt[p], D[p, h], X, beta, shift[p, h], rowmax[p, h], causal, want_ito, p, h,
                        i0, i1, buf, q, sums)
            continue
        if not causal and not _symmetric3(D, p, h):
            _rows3_lanes(x0, x1, x2, D[p, h], X, beta, shift[p, h], want_ito, p, h, i0, i1, buf,
                         sums)
            continue
        _rows3_fixed(x0, x1, x2, D[p, h], X, beta, shift[p, h], causal, want_ito, p, h, i0, i1,
                     sums)


@njit(inline="always", **_OPTS)
def _symmetric3(D, p, h):
    """Whether D[p, h] (3 × 3) equals its transpose exactly."""
    return D[p, h, 0, 1] == D[p, h, 1, 0] and D[p, h, 0, 2] == D[p, h, 2, 0] and \
        D[p, h, 1, 2] == D[p, h, 2, 1]


@njit(**_OPTS, **_ALIGNED)
def _rows3_lanes(x0, x1, x2, Dh, X, beta, c, want_ito, p, h, i0, i1, ys, sums):
    r"""Rows i0..i1−1 (at most :data:`_LANES3`) of a non-symmetric head with the fixed shift,
    no mask: the rows across the lanes of one vector, one loop over the columns j < n.

    Per lane (row i) :math:`y_{ij} = \langle \tilde q_i, x_j\rangle - \tilde c` with
    :math:`\tilde q_i = \beta\log_2 e\, D_h x_i`, :math:`\tilde c = c\log_2 e`, three
    multiply-adds; :math:`e_{ij} = 2^{y_{ij}}` (the explicit vectors' exponential,
    :func:`~.exp._exp2_shifted`: :math:`y \in [-2c\log_2 e, 0]` up to rounding); the sums
    over j in column order, each in its lane: no reduction across lanes, no tail mask, no
    per-row loop set-up. The lanes are independent: the bits do not depend on how the target
    splits the vector into registers; the rows beyond i1 (zero tokens) are discarded. The
    function has no fast-math flags (the explicit vectors' own ``contract`` only). ``ys``:
    scratch of at least 5·:data:`_LANES3` floats; ``sums``: the row sums (S0, SX, SI, RS)."""
    S0, SX, SI, RS = sums
    n = X.shape[1]
    m = i1 - i0
    L = _LANES3
    for r in range(L):
        for a in range(3):
            ys[a * L + r] = X[p, i0 + r, a] if r < m else 0.0
    y0 = _lload(ys, 0)
    y1 = _lload(ys, L)
    y2 = _lload(ys, 2 * L)
    g = beta * _LOG2E
    q0 = _lfma(_lsplat(g * Dh[0, 0]), y0, _lfma(_lsplat(g * Dh[0, 1]), y1,
                                              _lmul(_lsplat(g * Dh[0, 2]), y2)))
    q1 = _lfma(_lsplat(g * Dh[1, 0]), y0, _lfma(_lsplat(g * Dh[1, 1]), y1,
                                              _lmul(_lsplat(g * Dh[1, 2]), y2)))
    q2 = _lfma(_lsplat(g * Dh[2, 0]), y0, _lfma(_lsplat(g * Dh[2, 1]), y1,
                                              _lmul(_lsplat(g * Dh[2, 2]), y2)))
    mc = _lsplat(-c * _LOG2E)
    s0 = _lzero()
    a0 = _lzero()
    a1 = _lzero()
    a2 = _lzero()
    si = _lzero()
    if want_ito:
        for j in range(n):
            u0 = _lbcast(x0, j)
            u1 = _lbcast(x1, j)
            u2 = _lbcast(x2, j)
            e = _lexp2(_lfma(q2, u2, _lfma(q1, u1, _lfma(q0, u0, mc))))
            s0 = _ladd(s0, e)
            a0 = _lfma(e, u0, a0)
            a1 = _lfma(e, u1, a1)
            a2 = _lfma(e, u2, a2)
            cc = _lfma(y2, u2, _lfma(y1, u1, _lmul(y0, u0)))
            si = _lfma(_lmul(e, cc), cc, si)
    else:
        for j in range(n):
            u0 = _lbcast(x0, j)
            u1 = _lbcast(x1, j)
            u2 = _lbcast(x2, j)
            e = _lexp2(_lfma(q2, u2, _lfma(q1, u1, _lfma(q0, u0, mc))))
            s0 = _ladd(s0, e)
            a0 = _lfma(e, u0, a0)
            a1 = _lfma(e, u1, a1)
            a2 = _lfma(e, u2, a2)
    _lstore(ys, 0, s0)
    _lstore(ys, L, a0)
    _lstore(ys, 2 * L, a1)
    _lstore(ys, 3 * L, a2)
    _lstore(ys, 4 * L, si)
    for r in range(m):
        i = i0 + r
        S0[p, h, i] = ys[r]
        SI[p, h, i] = ys[4 * L + r] + ys[r]
        RS[p, h, i] = c
        SX[p, h, i, 0] = ys[L + r]
        SX[p, h, i, 1] = ys[2 * L + r]
        SX[p, h, i, 2] = ys[3 * L + r]


@njit(fastmath=_FM, inline="always", **_OPTS)
def _rows3_fixed(x0, x1, x2, Dh, X, beta, c, causal, want_ito, p, h, i0, i1, sums):
    """The body of :func:`_tile_sums3_fixed` for one head (inlined into it by numba)."""
    S0, SX, SI, RS = sums
    n = X.shape[1]
    d00, d01, d02 = Dh[0, 0], Dh[0, 1], Dh[0, 2]
    d10, d11, d12 = Dh[1, 0], Dh[1, 1], Dh[1, 2]
    d20, d21, d22 = Dh[2, 0], Dh[2, 1], Dh[2, 2]
    mc = -c
    for i in range(i0, i1):
        jend = i + 1 if causal else n
        nfull = (jend // _VW) * _VW
        y0, y1, y2 = X[p, i, 0], X[p, i, 1], X[p, i, 2]
        q0 = beta * (d00 * y0 + d01 * y1 + d02 * y2)
        q1 = beta * (d10 * y0 + d11 * y1 + d12 * y2)
        q2 = beta * (d20 * y0 + d21 * y1 + d22 * y2)
        s0 = 0.0
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        si = 0.0
        if want_ito:
            for j in range(nfull):
                u0 = x0[j]
                u1 = x1[j]
                u2 = x2[j]
                e = _exp_shifted(((mc + q0 * u0) + q1 * u1) + q2 * u2)
                s0 += e
                a0 += e * u0
                a1 += e * u1
                a2 += e * u2
                cc = y0 * u0 + y1 * u1 + y2 * u2
                si += e * cc * cc
        else:
            for j in range(nfull):
                u0 = x0[j]
                u1 = x1[j]
                u2 = x2[j]
                e = _exp_shifted(((mc + q0 * u0) + q1 * u1) + q2 * u2)
                s0 += e
                a0 += e * u0
                a1 += e * u1
                a2 += e * u2
        if nfull < jend:  # the last block: jend rounded up to a whole vector (_VQ), masked
            m = jend - nfull
            mt = ((m + _VQ - 1) // _VQ) * _VQ
            b0 = 0.0
            b1 = 0.0
            b2 = 0.0
            b3 = 0.0
            b4 = 0.0
            for j in range(mt):
                u0 = x0[nfull + j]
                u1 = x1[nfull + j]
                u2 = x2[nfull + j]
                e = _exp_shifted(((mc + q0 * u0) + q1 * u1) + q2 * u2)
                e = e if j < m else 0.0
                b0 += e
                b1 += e * u0
                b2 += e * u1
                b3 += e * u2
                if want_ito:
                    cc = y0 * u0 + y1 * u1 + y2 * u2
                    b4 += e * cc * cc
            s0 += b0
            a0 += b1
            a1 += b2
            a2 += b3
            si += b4
        S0[p, h, i] = s0
        SI[p, h, i] = si + s0
        RS[p, h, i] = c
        SX[p, h, i, 0] = a0
        SX[p, h, i, 1] = a1
        SX[p, h, i, 2] = a2


@njit(**_OPTS, **_ALIGNED)
def _tile_sums3(Xp, Dh, X, beta, c_fixed, use_rowmax, causal, want_ito, p, h, i0, i1, buf, q,
                sums):
    """:func:`_tile_sums64` for d = 3, uniform masses, polynomial exp: the column views and
    D_h taken once per tile (not per row), q_i = β D_h x_i in scalars summed in the order of
    the generic loop (no fast-math flags here: the same bits)."""
    S0, SX, SI, RS = sums
    n = X.shape[1]
    x0 = Xp[0]
    x1 = Xp[1]
    x2 = Xp[2]
    d00, d01, d02 = Dh[0, 0], Dh[0, 1], Dh[0, 2]
    d10, d11, d12 = Dh[1, 0], Dh[1, 1], Dh[1, 2]
    d20, d21, d22 = Dh[2, 0], Dh[2, 1], Dh[2, 2]
    for i in range(i0, i1):
        jend = i + 1 if causal else n
        y0, y1, y2 = X[p, i, 0], X[p, i, 1], X[p, i, 2]
        q0 = beta * (((0.0 + d00 * y0) + d01 * y1) + d02 * y2)
        q1 = beta * (((0.0 + d10 * y0) + d11 * y1) + d12 * y2)
        q2 = beta * (((0.0 + d20 * y0) + d21 * y1) + d22 * y2)
        if use_rowmax:
            q[0] = q0
            q[1] = q1
            q[2] = q2
            c = _row_max(Xp, q, jend, buf)
        else:
            c = c_fixed
        s0, a0, a1, a2, si = _row_sums3(x0, x1, x2, q0, q1, q2, y0, y1, y2, c, jend, want_ito)
        S0[p, h, i] = s0
        SI[p, h, i] = si + s0
        RS[p, h, i] = c
        SX[p, h, i, 0] = a0
        SX[p, h, i, 1] = a1
        SX[p, h, i, 2] = a2


@njit(**_OPTS, **_ALIGNED)
def _tile_sums64(job, fast, p, h, i0, i1, scratch, sums):
    """Row sums ``sums`` (S0, SX, SI, RS) of rows i0..i1−1 of (path p, head h), from the
    :class:`RowJob` ``job``: Xt (P, d, n_pad), D (P, H, d, d), X (P, n, d); U (P, n_pad)
    relative column masses or (P, 0) for uniform masses (weighted rows take the chunked
    loop, also for d = 3, except d = 2 with the polynomial exponential:
    :func:`_row_sums2w`). ``scratch``: buf, cbuf (_CH), sx, q (d)."""
    Xt, D, V, X, beta, shift, rowmax, lap, norm, causal, want_ito, U, R = job
    buf, cbuf, sx, q = scratch
    S0, SX, SI, RS = sums
    d = X.shape[2]
    n = X.shape[1]
    Xp = Xt[p]
    Dh = D[p, h]
    weighted = U.shape[1] > 0
    if not weighted and fast and d == 3:  # (the fused pass calls _tile_sums3_fixed instead)
        _tile_sums3(Xp, Dh, X, beta, shift[p, h], rowmax[p, h], causal, want_ito, p, h, i0, i1,
                    buf, q, sums)
        return
    for i in range(i0, i1):
        jend = i + 1 if causal else n
        xi = X[p, i]
        for a in range(d):  # q = β D_h x_i: s_ij = ⟨q, x_j⟩
            acc = 0.0
            for bb in range(d):
                acc += Dh[a, bb] * xi[bb]
            q[a] = beta * acc
        if rowmax[p, h]:
            c = _row_max(Xp, q, jend, buf)
        else:
            c = shift[p, h]
        if not weighted:
            s0, si = _row_sums(Xp, q, xi, c, jend, want_ito, fast, buf, cbuf, sx, None)
        elif fast and d == 2:  # weighted d = 2 (the density on S¹): one fused loop
            s0, sx[0], sx[1], si = _row_sums2w(Xp[0], Xp[1], q[0], q[1], xi[0], xi[1], c, jend,
                                               want_ito, U[p])
            si += s0
        else:
            s0, si = _row_sums(Xp, q, xi, c, jend, want_ito, fast, buf, cbuf, sx, U[p])
        S0[p, h, i] = s0
        SI[p, h, i] = si
        RS[p, h, i] = c
        for a in range(d):
            SX[p, h, i, a] = sx[a]


@njit(fastmath=_FM, **_OPTS)
def _row_sums3_f32(x0, x1, x2, q0, q1, q2, y0, y1, y2, c, jend, want_ito):
    """float32 version of :func:`_row_sums3` (x*, q*, y*, c float32; columns padded to _VW32).

    Exponentials and sums in float32 within chunks of _CH columns, the chunk sums added
    in float64 (so the float32 rounding does not grow with n). Returns float64 sums.
    """
    S0 = 0.0
    A0 = 0.0
    A1 = 0.0
    A2 = 0.0
    SI = 0.0
    npad = ((jend + _VW32 - 1) // _VW32) * _VW32
    for j0 in range(0, npad, _CH):
        m = min(npad - j0, _CH)
        mv = jend - j0  # valid columns in this chunk
        v0 = x0[j0:j0 + m]  # views indexed from 0: plain vector loads, no gathers
        v1 = x1[j0:j0 + m]
        v2 = x2[j0:j0 + m]
        s0 = _F0
        a0 = _F0
        a1 = _F0
        a2 = _F0
        si = _F0
        if want_ito:
            for j in range(m):
                u0 = v0[j]
                u1 = v1[j]
                u2 = v2[j]
                e = _exp_fast32(q0 * u0 + q1 * u1 + q2 * u2 - c)
                e = e if j < mv else _F0
                s0 += e
                a0 += e * u0
                a1 += e * u1
                a2 += e * u2
                cc = y0 * u0 + y1 * u1 + y2 * u2
                si += e * cc * cc
        else:
            for j in range(m):
                u0 = v0[j]
                u1 = v1[j]
                u2 = v2[j]
                e = _exp_fast32(q0 * u0 + q1 * u1 + q2 * u2 - c)
                e = e if j < mv else _F0
                s0 += e
                a0 += e * u0
                a1 += e * u1
                a2 += e * u2
        S0 += s0
        A0 += a0
        A1 += a1
        A2 += a2
        SI += si
    return S0, A0, A1, A2, SI


@njit(fastmath=_FM, **_OPTS)
def _row_max3_f32(x0, x1, x2, q0, q1, q2, jend):
    mx = -np.inf
    for j in range(jend):
        s = q0 * x0[j] + q1 * x1[j] + q2 * x2[j]
        if s > mx:
            mx = s
    return np.float32(mx)


@njit(**_OPTS, **_ALIGNED)
def _tile_sums32(Xt, D, X, beta, shift, rowmax, causal, want_ito, p, h, i0, i1, sums):
    """float32 row sums (d = 3) of rows i0..i1−1 of (path p, head h): Xt (P, 3, n_pad)
    float32; D, X float64; shift float32. Outputs ``sums`` (float64) as :func:`_tile_sums64`."""
    S0, SX, SI, RS = sums
    n = X.shape[1]
    x0 = Xt[p, 0]
    x1 = Xt[p, 1]
    x2 = Xt[p, 2]
    Dh = D[p, h]
    for i in range(i0, i1):
        jend = i + 1 if causal else n
        y0 = x0[i]
        y1 = x1[i]
        y2 = x2[i]
        z0 = np.float64(y0)
        z1 = np.float64(y1)
        z2 = np.float64(y2)
        q0 = np.float32(beta * (Dh[0, 0] * z0 + Dh[0, 1] * z1 + Dh[0, 2] * z2))
        q1 = np.float32(beta * (Dh[1, 0] * z0 + Dh[1, 1] * z1 + Dh[1, 2] * z2))
        q2 = np.float32(beta * (Dh[2, 0] * z0 + Dh[2, 1] * z1 + Dh[2, 2] * z2))
        if rowmax[p, h]:
            c = _row_max3_f32(x0, x1, x2, q0, q1, q2, jend)
        else:
            c = shift[p, h]
        s0, a0, a1, a2, si = _row_sums3_f32(x0, x1, x2, q0, q1, q2, y0, y1, y2, c, jend,
                                            want_ito)
        S0[p, h, i] = s0
        SX[p, h, i, 0] = a0
        SX[p, h, i, 1] = a1
        SX[p, h, i, 2] = a2
        SI[p, h, i] = s0 + si
        RS[p, h, i] = c


# One pool job per field evaluation. Work items are (path, tile of R rows), R fixed by
# d alone; the threads take items from the job's atomic counter (dynamic schedule: a
# preempted thread delays at most its current item, not a static share of the loop). Every
# output slot and every tile partial is written by one item with the same code, and the
# reductions run afterwards in a fixed order: results never depend on the schedule.
@njit(inline="always", **_OPTS)
def _tile_item(t, nt, R, n):
    """Work item t of the tile passes: (path p, tile b, its rows i0..i1−1), nt tiles of R rows
    per path."""
    p = t // nt
    b = t - p * nt
    i0 = b * R
    return p, b, i0, min(n, i0 + R)


@njit(nogil=True, **_OPTS, **_ALIGNED)
def _fused64(role, job, fast, pairs, with_energy, counter, sums, outs):
    """The fused pass, float64 pair loop (:class:`RowJob` ``job``: Xt (P, d, n_pad) float64;
    U (P, n_pad) relative masses, or (P, 0) for uniform masses; the row ``sums`` (S0, SX, SI,
    RS) and the ``outs`` (:class:`~.workspace.Outputs`) as tuples). Without ``pairs`` the pair
    sums are given (the BLAS pair pass) and only the epilogue runs, item by item as in the fused
    pass (one compiled function for both: numba optimises the epilogue's code once, not in each
    caller; ≈ 6 s of compilation). ``with_energy`` False (the general pass, which reports no
    energy): the d = 3 combine skips the terms of g, the Itô sum and ∂_D E."""
    master = _enter(role)
    job, counter, sums = _unowned(job), _unowned(counter), _unowned(sums)
    Xt, D, V, X, beta, shift, rowmax, lap, norm, causal, want_ito, U, R = job
    vel, part, grad, bhat, er, dEp, energy, diss, G2, G2hm, ito_sum, dEdD = _unowned(outs)
    P, n, d = X.shape
    H = D.shape[1]
    nt = (n + R - 1) // R
    items = P * nt
    # one worker: its scratch, then items until none is left
    buf = np.empty(_CH)
    cbuf = np.empty(_CH)
    sx = np.empty(d)
    q = np.empty(d)
    ybar = np.empty(d)
    w = np.empty(d)
    v = np.empty(d)
    g = np.empty(d)
    acc = np.empty((R, 2 * d + 3))
    while True:
        t = _fetch_add(counter)
        if t >= items:
            break
        p, b, i0, i1 = _tile_item(t, nt, R, n)
        acc[:] = 0.0
        if pairs and d == 3 and fast and U.shape[1] == 0:  # every head's pair sums at once
            _tile_sums3_fixed(Xt, D, X, beta, shift, rowmax, causal, want_ito, p, i0, i1,
                              buf, q, sums)
            for h in range(H):  # (h, h + 1) as in _head_epilogue: one specialisation
                _head_epilogue3(X, D, V, lap, norm, causal or not with_energy, p, b, h, h + 1,
                                i0, i1, sums, (part, dEp, acc), U)
        else:
            for h in range(H if pairs else 0):
                _tile_sums64(job, fast, p, h, i0, i1, (buf, cbuf, sx, q), sums)
            for h in range(H):
                _head_epilogue(X, D, V, lap, norm, causal, p, b, h, i0, i1, sums,
                               (part, dEp, acc), (ybar, w), U)
        _rows_epilogue(X, H, norm, causal, p, i0, i1, acc, vel, grad, bhat, er, v, g)
        _item_done(counter)  # (release: the item's writes)
    if master:
        _wait_done(role, counter, items)
        if not causal:
            _finish(er, dEp, beta, H, want_ito, energy, diss, G2, G2hm, ito_sum, dEdD, U)
        _leave(role, counter)


@njit(nogil=True, **_OPTS, **_ALIGNED)
def _fused32(role, job, counter, sums, outs):
    """The fused pass, float32 pair loop for d = 3 (:class:`RowJob` ``job``: Xt (P, 3, n_pad)
    float32, shift float32; ``sums`` and ``outs`` as in :func:`_fused64`)."""
    master = _enter(role)
    job, counter, sums = _unowned(job), _unowned(counter), _unowned(sums)
    Xt, D, V, X, beta, shift, rowmax, lap, norm, causal, want_ito, U, R = job
    vel, part, grad, bhat, er, dEp, energy, diss, G2, G2hm, ito_sum, dEdD = _unowned(outs)
    P, n, d = X.shape
    H = D.shape[1]
    nt = (n + R - 1) // R
    items = P * nt
    # one worker: its scratch, then items until none is left
    ybar = np.empty(d)
    w = np.empty(d)
    v = np.empty(d)
    g = np.empty(d)
    acc = np.empty((R, 2 * d + 3))
    while True:
        t = _fetch_add(counter)
        if t >= items:
            break
        p, b, i0, i1 = _tile_item(t, nt, R, n)
        acc[:] = 0.0
        for h in range(H):
            _tile_sums32(Xt, D, X, beta, shift, rowmax, causal, want_ito, p, h, i0, i1, sums)
            _head_epilogue(X, D, V, lap, norm, causal, p, b, h, i0, i1, sums, (part, dEp, acc),
                           (ybar, w), U)
        _rows_epilogue(X, H, norm, causal, p, i0, i1, acc, vel, grad, bhat, er, v, g)
        _item_done(counter)  # (release: the item's writes)
    if master:
        _wait_done(role, counter, items)
        if not causal:
            _finish(er, dEp, beta, H, want_ito, energy, diss, G2, G2hm, ito_sum, dEdD, U)
        _leave(role, counter)
#: No token columns (:func:`_fused64` after the BLAS pair pass reads none).
_NO_XT = np.empty((0, 0, 0))


class RowJob(NamedTuple):
    """The inputs of a job of :func:`_fused64` or :func:`_fused32`, their argument ``job`` (as
    a plain tuple: numba types a NamedTuple argument in Python at every call, ≈ 2 µs):
    token columns Xt (P, d, n_pad) (float32 for :func:`_fused32`), D and V (P, H, d, d),
    X (P, n, d), β, the shifts (P, H) (float32 for :func:`_fused32`) and the row-maximum
    flags (P, H), the Laplacian heads (H,), the normalisation code, the causal mask and the
    Itô flag, the relative masses U (P, n_pad) or (P, 0), the tile rows R."""

    Xt: np.ndarray
    D: np.ndarray
    V: np.ndarray
    X: np.ndarray
    beta: float
    shift: np.ndarray
    rowmax: np.ndarray
    lap: np.ndarray
    norm: int
    causal: bool
    want_ito: bool
    U: np.ndarray
    R: int
