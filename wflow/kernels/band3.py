"""The symmetric d = 3 pair loop: one row band of one (path, head), each unordered pair once.

With symmetric D_h and the fixed shift, e_ij = e_ji: groups of :data:`_SYM_ROWS` rows run
over the columns j ≥ i in whole vectors; each e is added to its row's sums (vector
registers) and to the column sums of j (a vector read-modify-write); the diagonal counts 1/2
in each. Four rows per group keep four exponential chains in flight (the loop is bound by
the latency of the polynomial otherwise; see benchmarks/). :func:`_sym_band3` runs one loop
over every (group, vector) of a band with explicit vectors (:mod:`.simd`) and no fast-math
flags: the same bits in every compilation.

Shapes: the columns x0, x1, x2 (n_pad,) of one path, page-padded (:func:`_sym_stride`,
:func:`_paged_zeros`: the loads of the columns and the column sums do not alias in the cache);
a band is rows i_lo..i_hi−1; its column sums C0..C4 (5 × n_pad) are per band and added in band
order afterwards (:func:`~.sym3._sym_reduce3`). The bands (:func:`_sym_bands`) are a function
of n and H only, so the bits never depend on the thread count or the path batch.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import njit

from wflow.kernels.exp import _LOG2E
from wflow.kernels.simd import (
    _vadd,
    _vadd_rounded,
    _vbcast,
    _vexp2,
    _vfma,
    _vfma_exact,
    _vhsums,
    _vload,
    _vmul,
    _vmul_rounded,
    _vsplat,
    _vstore,
    _vstore3_groups,
    _vzero,
)
from wflow.kernels.target import _FM, _HAS_FMA, _NOALIAS, _OPTS, _VQ, _fma

# ---------------------------------------------------------------------------------------------
# Symmetric d = 3 pass: every unordered pair once
# ---------------------------------------------------------------------------------------------
#: Rows per column loop of the symmetric pass (four independent exponentials in flight).
_SYM_ROWS = 4
#: The symmetric d = 3 pass runs up to this many tokens, while a band's column sums (5·n
#: floats) stay in the last-level cache; above, the row pass (the ``routes`` suite of benchmarks/).
SYM_MAX_N = 1 << 20


def sym_band_count(n, H):
    """Row bands of the symmetric d = 3 pass for n tokens and H heads (:func:`_sym_bands`);
    with more than one, each path keeps H·nb·5·n floats of band column sums."""
    return max(1, min(-(-32 // max(H, 1)), n // 512))


def _sym_bands(n, H):
    r"""Row bands of the symmetric pass: ``nb = max(1, min(⌈32/H⌉, ⌊n/512⌋))`` bands of about equal
    triangle work (band b ends at row :math:`n(1-\sqrt{1-(b+1)/nb})`, a multiple of 4), so that
    a path has at least 32 work items when n allows. A function of (n, H) only: the rounding of
    the column sums depends on the bands, never on the thread count or the path batch."""
    nb = sym_band_count(n, H)
    edges = [0]
    for b in range(1, nb):
        e = int(round(n * (1.0 - math.sqrt(1.0 - b / nb)) / _SYM_ROWS)) * _SYM_ROWS
        edges.append(min(max(e, edges[-1]), n))
    edges.append(n)
    return np.array(edges, dtype=np.int64)


@njit(inline="always", **_OPTS)
def _sym_rows_out(sums, C, Rp, i_lo, i_hi, c, own):
    """Rows ``i_lo..i_hi−1``'s sums ``sums`` (S0, SX, SI, RS of one head) of :func:`_sym_band3`
    once the band is done: the row part ``Rp[i] = (Σ e, Σ e x_j)`` plus the column part
    C_k[i] (``C`` the five column sums); for the Itô sum only the column part, doubled
    (:func:`_sym_band3`). One loop over the rows, which LLVM vectorises (it was four scalar
    blocks of ≈ 50 instructions after each group of four rows; the same arithmetic, the same
    bits)."""
    S0h, SXh, SIh, RSh = sums
    C0, C1, C2, C3, C4 = C
    m = i_hi - i_lo
    s0 = S0h[i_lo:i_hi]
    sx = SXh[i_lo:i_hi].reshape(3 * m)  # (flat: a stride LLVM knows)
    si = SIh[i_lo:i_hi]
    rs = RSh[i_lo:i_hi]
    rp = Rp[i_lo:i_hi].reshape(4 * m)
    c0 = C0[i_lo:i_hi]
    c1 = C1[i_lo:i_hi]
    c2 = C2[i_lo:i_hi]
    c3 = C3[i_lo:i_hi]
    c4 = C4[i_lo:i_hi]
    for k in range(m):
        s = rp[4 * k] + c0[k]
        s0[k] = s
        sx[3 * k] = rp[4 * k + 1] + c1[k]
        sx[3 * k + 1] = rp[4 * k + 2] + c2[k]
        sx[3 * k + 2] = rp[4 * k + 3] + c3[k]
        si[k] = 2.0 * c4[k] + s if own else c4[k]
        rs[k] = c


#: The symmetric pass's streams by page offset: its column loop reads the token
#: rows (3), the cosine table's rows (4) and the column sums (5 rows, read and written) at one
#: index j (the pair weights are a small table). A load whose address equals, in its low 12
#: bits, that of a store still in flight
#: (a few hundred bytes behind) waits for it ("4K aliasing"); with rows at arbitrary offsets
#: some pair usually collides and the loop's time depends on where the allocator put them.
#: So every row of these arrays
#: starts at a fixed offset within a page: the tokens, weights and table at
#: :data:`_SLOT_LOADS`, the column sums at :data:`_SLOT_SUMS`, half a page apart (rows are
#: padded to whole pages: :func:`_sym_stride`).
_PAGE = 4096
_SLOT_LOADS = 0
_SLOT_SUMS = 2048


def _sym_stride(npq):
    """Row length (float64) of the symmetric pass's arrays: ``npq`` rounded up to whole
    pages, so that every row starts at the same offset within a page."""
    per = _PAGE // 8
    return -(-npq // per) * per


@njit(**_OPTS)
def _paged_empty(size, offset):
    """``np.empty(size)`` whose data start ``offset`` bytes (a multiple of 8) into a page."""
    per = _PAGE // 8
    buf = np.empty(size + per)
    skip = ((offset - buf.ctypes.data % _PAGE) % _PAGE) // 8
    return buf[skip:skip + size]


def _paged_zeros(shape, offset):
    """``np.zeros(shape)`` (float64) whose data start ``offset`` bytes into a page."""
    a = _paged_empty(int(np.prod(shape)), offset).reshape(shape)
    a[...] = 0.0
    return a


#: The fused symmetric stage reads ⟨x_i, x_j⟩² from a table per path (and worker) up to this
#: n: n × n_pad floats, 0.5 MB at n = 256, in L2. A machine may choose another limit: the table
#: and the loop give the same bits (:func:`_cos2`).
_SYM_TABLE_N = 256


@njit(inline="always", **_OPTS)
def _cos2(y0, y1, y2, u0, u1, u2):
    """⟨y, u⟩² (d = 3) by explicit fused multiply-adds: the same bits inside any loop (the
    table :func:`_cos2_table` and the loop of :func:`_sym_band3` agree exactly)."""
    c = _fma(y2, u2, _fma(y1, u1, y0 * u0))
    return _fma(c, c, 0.0)


@njit(inline="always", fastmath=_FM, **_OPTS)
def _ito_term(e, y0, y1, y2, u0, u1, u2):
    """e·⟨y, u⟩²: with :func:`_cos2` where the target has FMA (the bits of the table);
    elsewhere plain arithmetic (an unflagged multiply-add pair changed how LLVM vectorised
    the rest of the loop on the generic target, hence the other sums' bits; no table there)."""
    if _HAS_FMA:
        return e * _cos2(y0, y1, y2, u0, u1, u2)
    c = y0 * u0 + y1 * u1 + y2 * u2
    return e * c * c


@njit(**_OPTS)
def _cos2_table(x0, x1, x2, n, G):
    """``G[i, j] = ⟨x_i, x_j⟩²`` (:func:`_cos2`) for i < n and every column j the pair loop
    reads (to n rounded up to the vector, :data:`_VQ`; the rows may be longer)."""
    npq = min(G.shape[1], ((n + _VQ - 1) // _VQ) * _VQ)
    for i in range(n):
        y0, y1, y2 = x0[i], x1[i], x2[i]
        g = G[i]
        for j in range(npq):
            g[j] = _cos2(y0, y1, y2, x0[j], x1[j], x2[j])
#: Floats of the pair loop's weight table: (rows valid mod 4, first/last vector, o, r, lane).
_SYM_FLAT_W = 16 * _VQ * _VQ


def _sym_flat_room(n):
    """Floats of weight scratch :func:`_sym_band3` needs for n tokens: the weight table
    (:data:`_SYM_FLAT_W`) and 6 row constants per row of its groups."""
    return _SYM_FLAT_W + 6 * (-(-n // _VQ) * _VQ + _SYM_ROWS)


@njit(**_OPTS)
def _sym_flat_weights(Wf, n):
    """Write the pair weights of :func:`_sym_band3` for n tokens into ``Wf[:_SYM_FLAT_W]``,
    as ``(4, 4, _VQ/4, 4, _VQ)``: ``[v, f + 2l, o, r, m]`` is the weight of lane m of row r of
    a group of rows i..i+3 with i − _VQ⌊i/_VQ⌋ = 4o, in its first vector of columns (f = 1: 0
    before the diagonal, 1/2 on it, 1 after), in its last (l = 1: 0 beyond n), in both (a
    single vector) or in neither (1); v = 1, 2, 3 for a band's last group with only v rows
    (the others 0), v = 0 otherwise."""
    npq = ((n + _VQ - 1) // _VQ) * _VQ
    W = Wf[:_SYM_FLAT_W].reshape((4, 4, _VQ // _SYM_ROWS, _SYM_ROWS, _VQ))
    for v in range(4):
        for kind in range(4):
            for o in range(_VQ // _SYM_ROWS):
                for r in range(_SYM_ROWS):
                    for m in range(_VQ):
                        w = 1.0
                        k = o * _SYM_ROWS + r
                        if kind & 1 and m < k:
                            w = 0.0
                        elif kind & 1 and m == k:
                            w = 0.5
                        if kind & 2 and npq - _VQ + m >= n:
                            w = 0.0
                        if v > 0 and r >= v:
                            w = 0.0
                        W[v, kind, o, r, m] = w


@njit(inline="always", **_OPTS)
def _vrow_sums(e, u0, u1, u2, s, a0, a1, a2):
    """One row's sums (Σ e, Σ e x_j) lane-wise over one more vector of columns."""
    return _vadd(s, e), _vfma(e, u0, a0), _vfma(e, u1, a1), _vfma(e, u2, a2)


@njit(inline="always", **_OPTS)
def _cos2_vec(y0, y1, y2, u0, u1, u2):
    """:func:`_cos2` lane-wise (the same bits: explicit fused multiply-adds where the target
    has them; plain arithmetic otherwise, as :func:`_ito_term`)."""
    if _HAS_FMA:
        c = _vfma_exact(y2, u2, _vfma_exact(y1, u1, _vmul(y0, u0)))
        return _vfma_exact(c, c, _vzero())
    c = _vadd(_vadd(_vmul(y0, u0), _vmul(y1, u1)), _vmul(y2, u2))
    return _vmul(c, c)


@njit(inline="always", **_OPTS)
def _sym_row_q(d0, d1, d2, bl, y0, y1, y2):
    """One component of q'_i = bl·D_h x_i: bl·((d0 y0 + d1 y1) + d2 y2), each operation
    rounded on its own (the lanes of :func:`_sym_flat_rows`' vectors: the same bits)."""
    return bl * ((d0 * y0 + d1 * y1) + d2 * y2)


@njit(**_OPTS)
def _sym_flat_rows(x0, x1, x2, Dh, bl, i_lo, i_hi, npq, Q):
    """The row constants of :func:`_sym_band3` for rows i_lo..i_hi−1 (in groups of four,
    the last group's missing rows repeating row i_hi − 1): group g's q'_i = bl·D_h x_i at
    ``Q[24g + 3r : 24g + 3r + 3]`` and x_i at ``Q[24g + 12 + 3r : …]`` (a group's 24 in three
    cache lines at most). Vectors of rows while they lie in the band (interleaved into the
    groups by :func:`_vstore3_groups`), then row by row with the same arithmetic, each
    operation rounded on its own (:func:`_sym_row_q`). Returns the loop's steps: every group's
    vectors of columns from its first, _VQ⌊i/_VQ⌋, to npq."""
    d00, d01, d02 = Dh[0, 0], Dh[0, 1], Dh[0, 2]
    d10, d11, d12 = Dh[1, 0], Dh[1, 1], Dh[1, 2]
    d20, d21, d22 = Dh[2, 0], Dh[2, 1], Dh[2, 2]
    ng = (i_hi - i_lo + _SYM_ROWS - 1) // _SYM_ROWS
    total = 0
    for g in range(ng):
        total += (npq - ((i_lo + g * _SYM_ROWS) // _VQ) * _VQ) // _VQ
    v00, v01, v02 = _vsplat(d00), _vsplat(d01), _vsplat(d02)
    v10, v11, v12 = _vsplat(d10), _vsplat(d11), _vsplat(d12)
    v20, v21, v22 = _vsplat(d20), _vsplat(d21), _vsplat(d22)
    vb = _vsplat(bl)
    k = 0
    while i_lo + k + _VQ <= i_hi:  # (k a multiple of the vector: whole groups)
        y0 = _vload(x0, i_lo + k)
        y1 = _vload(x1, i_lo + k)
        y2 = _vload(x2, i_lo + k)
        q0 = _vmul_rounded(vb, _vadd_rounded(_vadd_rounded(
            _vmul_rounded(v00, y0), _vmul_rounded(v01, y1)), _vmul_rounded(v02, y2)))
        q1 = _vmul_rounded(vb, _vadd_rounded(_vadd_rounded(
            _vmul_rounded(v10, y0), _vmul_rounded(v11, y1)), _vmul_rounded(v12, y2)))
        q2 = _vmul_rounded(vb, _vadd_rounded(_vadd_rounded(
            _vmul_rounded(v20, y0), _vmul_rounded(v21, y1)), _vmul_rounded(v22, y2)))
        a = 24 * (k // _SYM_ROWS)
        _vstore3_groups(Q, a, q0, q1, q2)
        _vstore3_groups(Q, a + 12, y0, y1, y2)
        k += _VQ
    for kk in range(k, ng * _SYM_ROWS):
        k = kk
        i = min(i_lo + k, i_hi - 1)
        y0, y1, y2 = x0[i], x1[i], x2[i]
        a = 24 * (k // _SYM_ROWS) + 3 * (k % _SYM_ROWS)
        Q[a] = _sym_row_q(d00, d01, d02, bl, y0, y1, y2)
        Q[a + 1] = _sym_row_q(d10, d11, d12, bl, y0, y1, y2)
        Q[a + 2] = _sym_row_q(d20, d21, d22, bl, y0, y1, y2)
        Q[a + 12] = y0
        Q[a + 13] = y1
        Q[a + 14] = y2
    return total


@njit(**_OPTS, **_NOALIAS)
def _sym_band3(cols, Dh, beta, c, n, i_lo, i_hi, C, Wf, Rp, own, sums, ito, Gf, gs):
    r"""Rows ``i_lo..i_hi−1`` of (path p, head h), d = 3, fixed shift c, symmetric D_h, each
    unordered pair once:

    .. math:: e_{ij} = e^{\langle q_i, x_j\rangle - c} = 2^{\langle q'_i, x_j\rangle - c'} = e_{ji},
        \qquad q'_i = (\beta\log_2 e) D_h x_i,\quad c' = c\log_2 e

    (base 2: :func:`_exp2_shifted`, here lane-wise: :mod:`wflow.kernels.simd`).

    Groups of four rows ``i..i+3`` run over the columns ``j ≥ _VQ⌊i/_VQ⌋`` in whole vectors,
    with weights ω_rj (:func:`_sym_flat_weights`): 0 for j < i+r or j ≥ n, 1/2 for j = i+r,
    1 for j > i+r. Each weighted e is added to the row sums of i+r (Σ e, Σ e x_j) and to the
    column sums of j in ``C = (C0, …, C4)`` (n_pad each, the rows of one (5, n_pad) buffer): Σ e,
    Σ e x_{i+r}, Σ e⟨x_{i+r}, x_j⟩². The diagonal counts 1/2 in each, so row i gets e_ii
    once. When a group ends its four rows' parts go to ``Rp[i + r]`` (≥ i_hi + 3 rows of 4);
    after the last :func:`_sym_rows_out` writes ``S0 = row part + C0[i]`` etc. for every row
    of the band in one vectorised loop (``sums``: the head's S0, SX, SI, RS; ``cols``: the
    path's token columns x0, x1, x2). Against the row pass: half the exponentials and
    logits.

    The Itô sums go to the column sums only: the pass's consumers use them only
    through :math:`\sum_i e^{c_h} SI_i` (uniform masses, the sum of :func:`_finish`), and
    :math:`\sum_{i,j} e_{ij}\langle x_i, x_j\rangle^2 = 2\sum_j C4_j` by symmetry (the
    diagonal's 1/2 included), so row i holds ``SI = 2·C4[i] + S0`` (when ``own``, i.e. the
    band is the only one; else C4[i] of this band, and :func:`_sym_reduce3` adds the earlier
    bands' columns, doubles and adds S0): not its own row's Itô sum, the same total.
    ``ito`` (a literal: each value compiles its own loop): 1 computes ⟨x_{i+r}, x_j⟩² in the
    loop (:func:`_cos2_vec`), 2 reads it from the path's table ``Gf`` (n rows of length
    ``gs``, flat: :func:`_cos2_table`, filled once per path for all heads by the fused stage
    of :func:`_sym3` up to n = :data:`_SYM_TABLE_N`; the same bits), 0 skips it (the
    evaluations that need no Itô sum: the ledger's second pass, Runge–Kutta stages, weights
    without Brownian noise).

    **One loop** over every (group, vector of columns) of the band, with
    explicit vectors: each row's sums stay lane by lane in registers across the group's
    vectors and are added across lanes when its group ends, inside the loop: all sixteen at
    once (:func:`_vhsums`, a transposing tree that stores the group's ``Rp`` rows as whole
    vectors; per vector the order of LLVM's own reduction): fewer shuffles and stores than a
    halving tree per row, the same bits.
    A loop per group that LLVM vectorises is short at small n
    (n = 200: 13 vectors on average) and each of its ends cost about one iteration (the
    exit, the lane sums and the next loop's start wait for the
    last iteration's chain of dependent operations: ≈ 190 instructions per step, and the
    out-of-order window holds less than two).
    And the weights differ from 1 only in a group's first vector (the diagonal), its last when
    n is not a multiple of the vector (padding) and a band's short last group: only those
    steps multiply by them (four products fewer per step, on the exponentials' ports).
    See benchmarks/ for the loop against a loop per group.

    The other reason: **the same bits in every compilation.** The loop per group was compiled
    with fast-math reassociation (its reductions needed it), which left LLVM free to fuse
    and order differently in the stages' separate compilations: with AVX2
    (``NUMBA_CPU_NAME=znver3``, AVX-512 off) the fused, chained and unfused forms and the Itô
    variants gave different bits (the thread count chooses the form). This function has no
    fast-math flags (numba would add
    ``reassoc`` to the intrinsics' unflagged products); its arithmetic carries its own
    (``contract`` only), and the innermost product of each chain is rounded on its own
    (:func:`_vmul_rounded`), so at most one product of a sum can become a fused multiply-add.
    With AVX2 its vectors are 8 floats too, two registers each (:func:`_pad_granularity`):
    with 4 floats the loop is slower than a loop per group (see benchmarks/).

    Compiled with every pointer argument ``noalias`` (:func:`_kernel_pipeline`, which also
    aligns its frame): the arguments are separate arrays or disjoint rows of one.
    ``Wf`` (flat, ≥ :func:`_sym_flat_room` floats): the weight table, then the rows'
    constants (:func:`_sym_flat_rows`, filled here for the band)."""
    numba.literally(ito)
    x0, x1, x2 = cols
    C0, C1, C2, C3, C4 = C
    npq = ((n + _VQ - 1) // _VQ) * _VQ
    padded = npq != n
    short = 4 * _VQ * _VQ  # wg from here on: a group with fewer than four rows
    mc = _vsplat(-c * _LOG2E)
    Q = Wf[_SYM_FLAT_W:]  # 6 per row from i_lo (_sym_flat_rows)
    Rpf = Rp.reshape(Rp.size)  # (rows i..i+3 of a group: 16 floats in a row)
    total = _sym_flat_rows(x0, x1, x2, Dh, beta * _LOG2E, i_lo, i_hi, npq, Q)
    i = i_lo
    jb = (i // _VQ) * _VQ
    jv = jb
    b = 0
    wg = (min(_SYM_ROWS, i_hi - i) % _SYM_ROWS) * 4 * _VQ * _VQ + (i - jb) * _VQ
    ra = i * gs
    rb = min(i + 1, i_hi - 1) * gs
    rc = min(i + 2, i_hi - 1) * gs
    rd = min(i + 3, i_hi - 1) * gs
    sa = aa0 = aa1 = aa2 = _vzero()
    sb = ab0 = ab1 = ab2 = _vzero()
    sc = ac0 = ac1 = ac2 = _vzero()
    sd = ad0 = ad1 = ad2 = _vzero()
    for _ in range(total):
        u0 = _vload(x0, jv)
        u1 = _vload(x1, jv)
        u2 = _vload(x2, jv)
        ea = _vexp2(_vfma(_vbcast(Q, b + 2), u2, _vfma(
            _vbcast(Q, b + 1), u1, _vfma(_vbcast(Q, b), u0, mc))))
        eb = _vexp2(_vfma(_vbcast(Q, b + 5), u2, _vfma(
            _vbcast(Q, b + 4), u1, _vfma(_vbcast(Q, b + 3), u0, mc))))
        ec = _vexp2(_vfma(_vbcast(Q, b + 8), u2, _vfma(
            _vbcast(Q, b + 7), u1, _vfma(_vbcast(Q, b + 6), u0, mc))))
        ed = _vexp2(_vfma(_vbcast(Q, b + 11), u2, _vfma(
            _vbcast(Q, b + 10), u1, _vfma(_vbcast(Q, b + 9), u0, mc))))
        last = jv + _VQ >= npq
        if jv == jb or (padded and last) or wg >= short:  # weights other than 1
            w = wg + _VQ * _VQ * ((jv == jb) + 2 * last)
            ea = _vmul_rounded(ea, _vload(Wf, w))
            eb = _vmul_rounded(eb, _vload(Wf, w + _VQ))
            ec = _vmul_rounded(ec, _vload(Wf, w + 2 * _VQ))
            ed = _vmul_rounded(ed, _vload(Wf, w + 3 * _VQ))
        sa, aa0, aa1, aa2 = _vrow_sums(ea, u0, u1, u2, sa, aa0, aa1, aa2)
        sb, ab0, ab1, ab2 = _vrow_sums(eb, u0, u1, u2, sb, ab0, ab1, ab2)
        sc, ac0, ac1, ac2 = _vrow_sums(ec, u0, u1, u2, sc, ac0, ac1, ac2)
        sd, ad0, ad1, ad2 = _vrow_sums(ed, u0, u1, u2, sd, ad0, ad1, ad2)
        _vstore(C0, jv, _vadd(_vload(C0, jv), _vadd(_vadd(ea, eb), _vadd(ec, ed))))
        _vstore(C1, jv, _vadd(_vload(C1, jv), _vfma(ed, _vbcast(Q, b + 21), _vfma(
            ec, _vbcast(Q, b + 18), _vfma(eb, _vbcast(Q, b + 15), _vmul_rounded(ea, _vbcast(Q, b + 12)))))))
        _vstore(C2, jv, _vadd(_vload(C2, jv), _vfma(ed, _vbcast(Q, b + 22), _vfma(
            ec, _vbcast(Q, b + 19), _vfma(eb, _vbcast(Q, b + 16), _vmul_rounded(ea, _vbcast(Q, b + 13)))))))
        _vstore(C3, jv, _vadd(_vload(C3, jv), _vfma(ed, _vbcast(Q, b + 23), _vfma(
            ec, _vbcast(Q, b + 20), _vfma(eb, _vbcast(Q, b + 17), _vmul_rounded(ea, _vbcast(Q, b + 14)))))))
        if ito != 0:  # the Itô terms go to the column sums only (as in _sym_band3)
            if ito == 2:  # rows of the table of ⟨x_i, x_j⟩²
                ga = _vload(Gf, ra + jv)
                gb = _vload(Gf, rb + jv)
                gc = _vload(Gf, rc + jv)
                gd = _vload(Gf, rd + jv)
            else:  # the same bits in the loop
                ga = _cos2_vec(_vbcast(Q, b + 12), _vbcast(Q, b + 13), _vbcast(Q, b + 14),
                               u0, u1, u2)
                gb = _cos2_vec(_vbcast(Q, b + 15), _vbcast(Q, b + 16), _vbcast(Q, b + 17),
                               u0, u1, u2)
                gc = _cos2_vec(_vbcast(Q, b + 18), _vbcast(Q, b + 19), _vbcast(Q, b + 20),
                               u0, u1, u2)
                gd = _cos2_vec(_vbcast(Q, b + 21), _vbcast(Q, b + 22), _vbcast(Q, b + 23),
                               u0, u1, u2)
            t = _vfma(ed, gd, _vfma(ec, gc, _vfma(eb, gb, _vmul_rounded(ea, ga))))
            _vstore(C4, jv, _vadd(_vload(C4, jv), t))
        jv += _VQ
        if jv >= npq:  # the group's end: its rows' parts (rows beyond i_hi: never read)
            _vhsums(Rpf, 4 * i, (sa, aa0, aa1, aa2, sb, ab0, ab1, ab2,
                                 sc, ac0, ac1, ac2, sd, ad0, ad1, ad2))
            sa = aa0 = aa1 = aa2 = _vzero()
            sb = ab0 = ab1 = ab2 = _vzero()
            sc = ac0 = ac1 = ac2 = _vzero()
            sd = ad0 = ad1 = ad2 = _vzero()
            i += _SYM_ROWS
            jb = (i // _VQ) * _VQ
            jv = jb
            b += 24
            wg = (min(_SYM_ROWS, i_hi - i) % _SYM_ROWS) * 4 * _VQ * _VQ + (i - jb) * _VQ
            ra = i * gs
            rb = min(i + 1, i_hi - 1) * gs
            rc = min(i + 2, i_hi - 1) * gs
            rd = min(i + 3, i_hi - 1) * gs
    _sym_rows_out(sums, C, Rp, i_lo, i_hi, c, own)


@njit(inline="always", **_OPTS)
def _sym_band3_for(cols, Dh, beta, c, n, i_lo, i_hi, C, W, Rp, own, sums, want_ito, G):
    """:func:`_sym_band3` (C (5, n_pad) the column sums, W flat, filled by
    :func:`_sym_flat_weights`) with its Itô literal chosen from the runtime flag ``want_ito``
    and the table G (rows ≥ 1: squared cosines; else computed in the loop)."""
    Gf = G.reshape(G.size)
    gs = G.shape[1]
    Cr = (C[0], C[1], C[2], C[3], C[4])
    if want_ito and G.shape[0] > 0:
        _sym_band3(cols, Dh, beta, c, n, i_lo, i_hi, Cr, W, Rp, own, sums, 2, Gf, gs)
    elif want_ito:
        _sym_band3(cols, Dh, beta, c, n, i_lo, i_hi, Cr, W, Rp, own, sums, 1, Gf, gs)
    else:
        _sym_band3(cols, Dh, beta, c, n, i_lo, i_hi, Cr, W, Rp, own, sums, 0, Gf, gs)


@functools.lru_cache(maxsize=64)
def _sym_layout(n, H):
    """(bands, nps) of the symmetric pass for (n, H): :func:`_sym_bands` and the page-padded
    row length :func:`_sym_stride` (never modified by the pass)."""
    return _sym_bands(n, H), _sym_stride(-(-n // _VQ) * _VQ)
