"""The BLAS pair pass for large d (d ≥ :data:`BLAS_MIN_D`, n ≥ :data:`BLAS_MIN_N`).

The same pair sums as :mod:`.rows`, by tiles of T × T pairs: logits L = Q_I X_Jᵀ with
Q = β X D_hᵀ (kept, (P, H, n, d)), E = e^{L − c} and its sums in one compiled loop
(:func:`_blas_tile`), SX_I += E X_J, the Gram tile X_I X_Jᵀ for the Itô sum. With the fixed
shift and symmetric D_h a tile gives the sums of its rows and of its columns (e_ij = e_ji):
half the logits and exponentials. From d ≥ :data:`BLAS_EPILOGUE_MIN_D` the combine runs as
matmuls per row block too (:func:`_epilogue_blas`: Ȳ V_hᵀ, SX D_hᵀ and the ∂_D E partial
(e X)ᵀ SX per head).

*Determinism.* OpenBLAS results depend on its thread count, so BLAS is limited to one thread
during the pass (threadpoolctl; without it the routes avoid this pass) and the tiles run in a
pool of Python threads, in rounds of disjoint block pairs (:func:`_round_robin`): every sum
has a fixed order. Uniform masses enter the tile kernels as 1.0 (exact, also inside an FMA):
one compiled form.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit

from wflow.kernels.combine import _finish, _rows_epilogue
from wflow.kernels.exp import _exp_fast
from wflow.kernels.target import _ALIGNED, _FM, _OPTS

# ---------------------------------------------------------------------------------------------
# Pair pass for large d: tiles, BLAS matmuls (single-threaded BLAS in a thread pool)
# ---------------------------------------------------------------------------------------------
#: Use the BLAS pair pass from this dimension and this number of tokens on: below, the
#: per-call overhead of the matmuls outweighs their speed and the numba pair pass is faster
#: (the ``routes`` suite of benchmarks/ times both sides).
BLAS_MIN_D = 8
BLAS_MIN_N = 200
#: Rows per block of the row-maximum pass (at most; fixed: never depends on the thread count).
_BLAS_ROWS = 128
#: Bound on the elements of one block array (rows × columns) of the row-maximum pass.
_BLAS_BLOCK_ELEMS = 1 << 18
#: Rows and columns of one tile of the tiled BLAS pair pass, for n < 1024 and n ≥ 1024 (a
#: function of n only: the rounding depends on it). Larger tiles make faster matmuls but
#: fewer tile pairs for the threads (see benchmarks/).
_BLAS_TILE = (128, 256)
#: Items per pool thread and round of the BLAS pair pass (heads are split into groups to
#: reach it; no effect on the results).
_BLAS_ITEMS_PER_THREAD = 2


def _blas_tile_size(n):
    """Rows (and columns) per tile of :func:`_pair_pass_blas` (:data:`_BLAS_TILE`)."""
    return _BLAS_TILE[0] if n < 1024 else _BLAS_TILE[1]


@njit(nogil=True, fastmath=_FM, **_OPTS)
def _blas_block_rows(L, C, i0, c_fixed, use_rowmax, causal, want_ito, fast, S0h, SIh, RSh, u):
    """Rows i0..i0+B−1 of one head from their logits L (B, m): L ← u_j e^{L − c} in place
    (0 beyond the causal mask), S0, SI = Σ_j e_ij (1 + C_ij²) and the shift written.
    ``u`` (m,) relative column masses, or None (uniform). (The row-maximum shift.)"""
    B, m = L.shape
    for r in range(B):
        i = i0 + r
        jend = i + 1 if causal else m
        row = L[r]
        if use_rowmax:
            c = -np.inf
            for j in range(jend):
                if row[j] > c:
                    c = row[j]
        else:
            c = c_fixed
        if fast:
            for j in range(jend):
                row[j] = _exp_fast(row[j] - c)
        else:
            for j in range(jend):
                row[j] = math.exp(row[j] - c)
        for j in range(jend, m):
            row[j] = 0.0
        if u is not None:
            for j in range(jend):
                row[j] *= u[j]
        s0 = 0.0
        for j in range(jend):
            s0 += row[j]
        si = 0.0
        if want_ito:
            cr = C[r]
            for j in range(jend):
                si += row[j] * cr[j] * cr[j]
        S0h[i] = s0
        SIh[i] = s0 + si
        RSh[i] = c


@njit(nogil=True, fastmath=_FM, **_OPTS, **_ALIGNED)
def _blas_tile(L, C, c, libm, causal_diag, uI, uJ, s0I, siI, s0J, siJ, cs):
    r"""One tile (rows I, columns J) of one head with the fixed shift c:

    .. math::
        E_{ij} = e^{L_{ij} - c},\quad
        S0_i \mathrel{+}= \sum_{j\in J} u_j E_{ij},\quad
        SI_i \mathrel{+}= \sum_{j\in J} u_j E_{ij}(1 + C_{ij}^2),

    and, given ``cs`` (a symmetric tile: :math:`e_{ji} = e_{ij}`), the column sums
    :math:`S0_j \mathrel{+}= \sum_{i\in I} u_i E_{ij}`, :math:`SI_j \mathrel{+}= \sum_{i\in I}
    u_i E_{ij}(1 + C_{ij}^2)`. L (b1, b2) ← E in place (0 for j > i on a causal diagonal
    tile); C (b1, b2) the Gram tile ⟨x_i, x_j⟩, or None (no Itô sum: SI = S0); uI, uJ the
    masses of the rows and of the columns, or None (uniform); cs (2, ≥ b2) scratch for the
    column sums of the tile (added to s0J, siJ at the end), or None (row sums only);
    ``libm`` (bool) False for :func:`_exp_fast`, True for libm's exp
    (:func:`_blas_tile_libm`: a runtime test, so the libm form adds no specialisation of the
    callers). Every other option is an argument that is None or not, so numba compiles each
    variant without its dead branches, and each row is one fused loop (exponential, row and
    column sums) over the tile in L1/L2."""
    if libm:
        _blas_tile_libm(L, C, c, causal_diag, uI, uJ, s0I, siI, s0J, siJ, cs)
        return
    b1, b2 = L.shape
    if cs is not None:
        c0 = cs[0]
        c1 = cs[1]
        for j in range(b2):
            c0[j] = 0.0
            c1[j] = 0.0
    for r in range(b1):
        row = L[r]
        jend = min(b2, r + 1) if causal_diag else b2
        ur = 1.0
        if uI is not None:
            ur = uI[r]
        t = 0.0
        ti = 0.0
        if C is None:
            for j in range(jend):
                e = _exp_fast(row[j] - c)
                row[j] = e
                if uJ is None:
                    t += e
                else:
                    t += e * uJ[j]
                if cs is not None:
                    c0[j] += e * ur
        else:
            cr = C[r]
            for j in range(jend):
                e = _exp_fast(row[j] - c)
                row[j] = e
                w = e * cr[j] * cr[j]
                if uJ is None:
                    t += e
                    ti += w
                else:
                    t += e * uJ[j]
                    ti += w * uJ[j]
                if cs is not None:
                    c0[j] += e * ur
                    c1[j] += w * ur
        for j in range(jend, b2):
            row[j] = 0.0
        s0I[r] += t
        siI[r] += t + ti
    if cs is not None:
        for j in range(b2):
            s0J[j] += c0[j]
            siJ[j] += c0[j] + c1[j]


@njit(nogil=True, fastmath=_FM, **_OPTS, **_ALIGNED)
def _blas_tile_libm(L, C, c, causal_diag, uI, uJ, s0I, siI, s0J, siJ, cs):
    """:func:`_blas_tile` with libm's exponential (``fast_exp=False``, the validation form):
    E = e^{L − c} in place first, then the same row and column sums in plain loops."""
    b1, b2 = L.shape
    if cs is not None:
        cs[:, :b2] = 0.0
    for r in range(b1):
        row = L[r]
        jend = min(b2, r + 1) if causal_diag else b2
        for j in range(jend):
            row[j] = math.exp(row[j] - c)
        for j in range(jend, b2):
            row[j] = 0.0
        ur = 1.0 if uI is None else uI[r]
        t = 0.0
        ti = 0.0
        for j in range(jend):
            e = row[j]
            w = 0.0 if C is None else e * C[r, j] * C[r, j]
            uj = 1.0 if uJ is None else uJ[j]
            t += e * uj
            ti += w * uj
            if cs is not None:
                cs[0, j] += e * ur
                cs[1, j] += w * ur
        s0I[r] += t
        siI[r] += t + ti
    if cs is not None:
        for j in range(b2):
            s0J[j] += cs[0, j]
            siJ[j] += cs[0, j] + cs[1, j]


@njit(nogil=True, **_OPTS)
def _blas_sym_heads(job, p, i0, i1, j0, j1, h0, h1, C, libm, uI, uJ, sums):
    """Heads h0..h1−1 of the symmetric tile (rows i0:i1, columns j0:j1) of path p, in one
    compiled call (BLAS through numba's ``np.dot``: no Python, no GIL between the steps).
    A diagonal tile (i0 = j0) first computes Q_I = X_I βD_hᵀ and gives row sums only; an
    off-diagonal tile gives the row and the column sums (:func:`_blas_tile`) and
    SX_I += E (uX)_J, SX_J += Eᵀ (uX)_I. ``job`` and ``sums`` as in :func:`_blas_sym_item`."""
    X, Xu, Q, bDT, shift, U = job
    S0, SX, SI, RS = sums
    d = X.shape[2]
    XI = X[p, i0:i1]
    XJ = X[p, j0:j1]
    XuI = Xu[p, i0:i1]
    XuJ = Xu[p, j0:j1]
    b1 = i1 - i0
    b2 = j1 - j0
    diag = i0 == j0
    L = np.empty((b1, b2))
    tI = np.empty((b1, d))
    tJ = np.empty((b2, d))
    cs = np.empty((2, b2))
    for h in range(h0, h1):
        QI = Q[p, h, i0:i1]
        if diag:
            np.dot(XI, bDT[p, h], QI)
        np.dot(QI, XJ.T, L)
        if diag:
            _blas_tile(L, C, shift[p, h], libm, False, uI, uJ, S0[p, h, i0:i1],
                       SI[p, h, i0:i1], S0[p, h, j0:j1], SI[p, h, j0:j1], None)
        else:
            _blas_tile(L, C, shift[p, h], libm, False, uI, uJ, S0[p, h, i0:i1],
                       SI[p, h, i0:i1], S0[p, h, j0:j1], SI[p, h, j0:j1], cs)
        np.dot(L, XuJ, tI)
        for r in range(b1):
            for a in range(d):
                SX[p, h, i0 + r, a] += tI[r, a]
        if not diag:
            np.dot(L.T, XuI, tJ)
            for r in range(b2):
                for a in range(d):
                    SX[p, h, j0 + r, a] += tJ[r, a]


@njit(nogil=True, **_OPTS)
def _blas_sym_item(job, p, I, J, T, h0, h1, ito, libm, sums):
    """One item of the symmetric pass: tile (I, J) (I = J: a diagonal tile) for heads
    h0..h1−1, the Gram tile once for all of them when ``ito`` is not None. ``job``: the
    tokens X (P, n, d), Xu = u X, Q (P, H, n, d), βD_hᵀ (P, H, d, d), the shifts (P, H) and
    the masses U (P, ≥ n) (ones for uniform masses); ``sums``: the row sums (S0, SX, SI, RS)."""
    X = job[0]
    U = job[5]
    n = X.shape[1]
    i0 = I * T
    i1 = min(n, i0 + T)
    j0 = J * T
    j1 = min(n, j0 + T)
    if ito is None:
        _blas_sym_heads(job, p, i0, i1, j0, j1, h0, h1, None, libm, U[p, i0:i1], U[p, j0:j1],
                        sums)
    else:
        C = np.dot(X[p, i0:i1], X[p, j0:j1].T)
        _blas_sym_heads(job, p, i0, i1, j0, j1, h0, h1, C, libm, U[p, i0:i1], U[p, j0:j1],
                        sums)


_blas_controller = None


def _blas_available():
    """Whether BLAS can be limited to one thread (threadpoolctl): the BLAS routes need it."""
    _blas_controller_init()
    return _blas_controller is not False


def _blas_controller_init():
    global _blas_controller
    if _blas_controller is None:
        try:
            import scipy.linalg.cython_blas  # noqa: F401  numba's np.dot: limited as well
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _blas_controller = False
        else:
            _blas_controller = ThreadpoolController()


def _blas_limits():
    """A context manager limiting BLAS to one thread (threadpoolctl), or None if unavailable.

    Both BLAS libraries are limited: NumPy's and SciPy's (which numba's ``np.dot`` calls);
    the latter is loaded before the controller lists the libraries."""
    _blas_controller_init()
    if _blas_controller is False:
        return None
    return _blas_controller.limit(limits=1, user_api="blas")


_blas_pool = [None, 0, 0]  # executor, its threads, the pid that made it


def _blas_executor(nt):
    """A thread pool of ``nt`` workers, kept between calls (a new one after a fork)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    ex, k, pid = _blas_pool
    if ex is None or k != nt or pid != os.getpid():
        if ex is not None and pid == os.getpid():
            ex.shutdown(wait=False)
        ex = ThreadPoolExecutor(max_workers=nt, thread_name_prefix="wflow-blas")
        _blas_pool[:] = [ex, nt, os.getpid()]
    return ex


def _round_robin(nb):
    """Rounds of disjoint block pairs (I < J), every pair once (the circle method): in one
    round no block appears twice, so the items of a round can run concurrently."""
    m = nb + nb % 2  # an odd nb gets a dummy block m − 1, which sits out its round
    rounds = []
    for k in range(m - 1):
        pairs = [(k, m - 1)] if m - 1 < nb else []
        for i in range(1, m // 2):
            a, b = (k + i) % (m - 1), (k - i) % (m - 1)
            pairs.append((min(a, b), max(a, b)))
        if pairs:
            rounds.append(pairs)
    return rounds


def _pair_pass_blas(X, D, beta, shift, rowmax, causal, want_ito, fast, sums, limits, U=None):
    r"""The pair pass with BLAS matmuls, the same sums as the row pass (:mod:`.rows`):

    .. math::
        S0_i = \sum_j u_j e_{ij},\quad SX_i = \sum_j u_j e_{ij} x_j,\quad
        SI_i = \sum_j u_j e_{ij}(1 + \langle x_i, x_j\rangle^2),\quad
        e_{ij} = e^{\beta\langle D_h x_i, x_j\rangle - c},

    by tiles of T = :func:`_blas_tile_size` rows and columns. For a tile (I, J) of one head:
    the logits L = Q_I X_Jᵀ (Q = β X D_hᵀ computed once), E = e^{L − c} and its sums in
    one fused loop per row (:func:`_blas_tile`), SX_I += E (u X)_J; the Gram tile
    C = X_I X_Jᵀ of the Itô sum is computed once per tile for all heads.

    Why this layout: a tile of L stays in cache between the logits matmul, the exponentials
    and the SX matmul (row blocks of the whole L left it), the exponentials and their sums run
    in one loop, and symmetric tiles halve the logits and the exponentials. A symmetric tile
    item is one nogil numba call (:func:`_blas_sym_item`, BLAS through numba's ``np.dot``):
    NumPy calls per tile would take the GIL, and a thread preempted while holding it stalls
    the others (the causal and non-symmetric items still call NumPy from Python). See
    benchmarks/.

    *Symmetric tiles* (fixed shift, D_h = D_hᵀ for every head of the path, no causal mask):
    e_ij = e_ji, so a tile I < J also gives the column sums and SX_J += Eᵀ (u X)_I: each
    logit and exponential is computed once for two pairs (half the L matmuls and the
    exponentials). The tiles (I, J) run in rounds of disjoint block pairs
    (:func:`_round_robin`; the diagonal tiles and Q first); within a round the items run
    concurrently, the rounds in order.

    Otherwise (causal mask, non-symmetric D_h) each item is a row block I with its tiles
    J = 0, 1, … (J ≤ I under the causal mask) in order; a head with the row-maximum shift
    computes the whole row block of L first (:func:`_blas_block_rows`).

    Determinism: every item is a fixed sequence of single-threaded BLAS calls and compiled
    loops (BLAS limited to one thread by ``limits``; OpenBLAS results depend on its thread
    count), every sum of a row is accumulated in a fixed order (tiles in round order), and
    the items run in a pool of ``numba.get_num_threads()`` Python threads: results do not
    depend on either thread count. Items group heads (more groups when there are few
    items per round, for load balance; the grouping does not change any result).
    """
    S0, SX, SI, RS = sums
    P, n, d = X.shape
    H = D.shape[1]
    T = _blas_tile_size(n)
    nb = -(-n // T)
    XT = np.ascontiguousarray(X.transpose(0, 2, 1))  # (P, d, n)
    bDT = np.ascontiguousarray(beta * D.transpose(0, 1, 3, 2))  # β D_hᵀ: q_i = β D_h x_i
    if U is None:  # uniform masses as ones: the same bits (× 1.0 is exact, also in an FMA),
        U = np.ones((P, n))  # and no second compiled form of every tile kernel (≈ 14 s)
    Xu = X * U[:, :n, None]  # u_j x_j
    sym = [not causal and not rowmax[p].any()
           and np.array_equal(D[p], D[p].transpose(0, 2, 1)) for p in range(P)]
    Q = np.empty((P, H, n, d)) if any(sym) else None
    S0[...] = 0.0
    SI[...] = 0.0
    SX[...] = 0.0
    RS[...] = shift[:, :, None]
    empty, none1 = np.empty((0, 0)), np.empty(0)  # unused arguments
    libm = not fast

    def blk(I):
        return I * T, min(n, I * T + T)

    ito = 1 if want_ito else None
    tiles, arrays = (X, Xu, Q, bDT, shift, U), (S0, SX, SI, RS)  # (_blas_sym_item's groups)

    def sym_item(p, I, J, hs):
        _blas_sym_item(tiles, p, I, J, T, hs.start, hs.stop, ito, libm, arrays)

    def rows_item(p, I, hs):
        i0, i1 = blk(I)
        XI = X[p, i0:i1]
        m = i1 if causal else n  # columns j < i1 under the causal mask
        C = XI @ XT[p, :, :m] if want_ito else empty
        t = np.empty((i1 - i0, d))
        for h in hs:
            QI = XI @ bDT[p, h]
            if rowmax[p, h]:  # the whole row block: the shift is each row's maximum
                L = QI @ XT[p, :, :m]
                _blas_block_rows(L, C, i0, shift[p, h], True, causal, want_ito, fast,
                                 S0[p, h], SI[p, h], RS[p, h], U[p, :m])
                SX[p, h, i0:i1] = L @ X[p, :m]
                continue
            for J in range(I + 1 if causal else nb):
                j0, j1 = blk(J)
                L = QI @ XT[p, :, j0:j1]
                _blas_tile(L, C[:, j0:j1] if want_ito else None, shift[p, h], libm,
                           causal and J == I, None, U[p, j0:j1], S0[p, h, i0:i1],
                           SI[p, h, i0:i1], none1, none1, None)
                np.matmul(L, Xu[p, j0:j1], out=t)
                SX[p, h, i0:i1] += t

    pair_rounds = _round_robin(nb)
    nt = max(1, numba.get_num_threads())
    # head groups: enough items per round for the threads (no effect on the results)
    per_round = P * max(1, nb // 2)
    G = min(H, max(1, -(-_BLAS_ITEMS_PER_THREAD * nt // per_round))) if H else 1
    groups = [range(g * H // G, (g + 1) * H // G) for g in range(G)]
    rounds = [[] for _ in range(1 + len(pair_rounds))]
    for p in range(P):
        for hs in groups:
            if sym[p]:
                rounds[0] += [(sym_item, p, I, I, hs) for I in range(nb)]
                for k, rnd in enumerate(pair_rounds):
                    rounds[k + 1] += [(sym_item, p, I, J, hs) for I, J in rnd]
            else:  # larger (causal) row blocks first
                rounds[0] += [(rows_item, p, I, hs) for I in reversed(range(nb))]

    def run(job):
        job[0](*job[1:])

    with limits:
        if nt == 1:
            for rnd in rounds:
                for job in rnd:
                    run(job)
        else:
            ex = _blas_executor(nt)
            for rnd in rounds:
                for _ in ex.map(run, rnd):
                    pass


#: From this d on the combine after the BLAS pair pass runs as matmuls per row block
#: (:func:`_epilogue_blas`): its per-row work is 3d² multiply-adds per head (V_h ȳ, D_h SX and
#: the ∂_D E outer product); below, NumPy's per-call overhead outweighs the matmuls (see
#: benchmarks/).
BLAS_EPILOGUE_MIN_D = 32


def _epilogue_blas(X, D, V, lap, norm, causal, want_ito, beta, U, sums, outs, limits):
    r"""The combine of :func:`_fused64` (without pairs) for large d, with matmuls on blocks of rows.

    For a block I of rows and each head h in order (:math:`e_i = e^{c_{hi}}`, the row's shift):

    .. math::
        Z_{hi} = e_i S0_{hi}/n,\quad
        a_{hi} = V_h \bar y_{hi},\ \bar y_{hi} = SX_{hi}/S0_{hi}\ (\text{or } V_h x_i - a_{hi}),
        \quad g_i \mathrel{+}= e_i D_h SX_{hi},\quad
        \partial_{D_h}E \mathrel{+}= \textstyle\sum_{i\in I} e_i u_i\, x_i SX_{hi}^\top,

    as ``Ȳ V_hᵀ``, ``SX D_hᵀ`` and ``(e u X)_Iᵀ SX_I``; the row terms then go through the same
    :func:`_rows_epilogue` and :func:`_finish` as the compiled combine (∂_D E: block partials
    summed in block order). Items are (path, row block) in the BLAS pass's thread pool with
    BLAS on one thread; each item adds its heads in order, so the results do not depend on
    the thread count. ``U`` (P, ≥ n) relative masses, or None; ``sums`` the row sums
    (S0, SX, SI, RS), ``outs`` the outputs (:class:`~.workspace.Outputs`; its tile partials
    unused)."""
    S0, SX, SI, RS = sums
    vel, part, grad, bhat, er = outs.vel, outs.part, outs.grad, outs.bhat, outs.er
    energy, diss, G2, G2hm, ito_sum, dEdD = outs[6:]
    P, n, d = X.shape
    H = D.shape[1]
    T = _blas_tile_size(n)
    nb = -(-n // T)
    dEp = np.zeros((P, nb, H, d, d))
    acc_all = np.zeros((P, n, 2 * d + 3))

    def item(p, b):
        i0, i1 = b * T, min(n, b * T + T)
        x = X[p, i0:i1]
        acc = acc_all[p, i0:i1]
        vacc = acc[:, :d]
        gacc = acc[:, d:2 * d]
        w = np.empty((i1 - i0, d))
        t = np.empty((i1 - i0, d))
        for h in range(H):
            es = np.exp(RS[p, h, i0:i1])
            s0 = S0[p, h, i0:i1]
            sx = SX[p, h, i0:i1]
            Z = es * s0
            Z /= n
            part[p, h, i0:i1] = Z
            acc[:, 2 * d] += Z
            acc[:, 2 * d + 1] += 1.0 / Z
            np.matmul(sx, V[p, h].T, out=w)  # V_h SX_i, then / S0_i: V_h ȳ_i
            if not causal:
                if V is D:  # tied values: the same product gives D_h SX_i
                    np.multiply(w, es[:, None], out=t)
                else:
                    np.matmul(sx, D[p, h].T, out=t)
                    t *= es[:, None]
                gacc += t
            w /= s0[:, None]
            if lap[h]:
                np.subtract(x @ V[p, h].T, w, out=w)
            np.multiply(x, np.einsum("ij,ij->i", w, x)[:, None], out=t)
            w -= t
            if norm != 0:
                w *= Z[:, None]
            vacc += w
            if not causal:
                np.multiply(x, (es if U is None else es * U[p, i0:i1])[:, None], out=t)
                np.matmul(t.T, sx, out=dEp[p, b, h])
                acc[:, 2 * d + 2] += es * SI[p, h, i0:i1]

    jobs = [(p, b) for p in range(P) for b in range(nb)]
    nt = max(1, numba.get_num_threads())
    with limits:
        if nt == 1 or len(jobs) == 1:
            for job in jobs:
                item(*job)
        else:
            for _ in _blas_executor(nt).map(lambda job: item(*job), jobs):
                pass
    v = np.empty(d)
    g = np.empty(d)
    for p in range(P):
        _rows_epilogue(X, H, norm, causal, p, 0, n, acc_all[p], vel, grad, bhat, er, v, g)
    if not causal:
        _finish(er, dEp, beta, H, want_ito, energy, diss, G2, G2hm, ito_sum, dEdD,
                np.zeros((P, 0)) if U is None else U)
