"""The symmetric d = 3 pass (:mod:`.band3`'s pair loop, then the combine): its work items,
stages and forms.

One job per evaluation. With one row band the items are (path, chunk of at most
:data:`_SYM_CHUNK` heads) when there are at least as many paths as threads (stage
``Stage.FUSED``, route ``sym3``), otherwise (path, head) (``Stage.CHAIN``, route
``sym3-chain``: the thread that completes a path's last head runs its combine). With
several bands (route ``sym3-bands``) each path takes two jobs for the pair sums and their
band reduction (``Stage.PAIRS``, :func:`_sym_reduce3`), then one job runs the combine
(``Stage.COMBINE``).

Every row adds its heads chunk by chunk, each chunk's sum in head order from zero, the
chunks' sums in chunk order; the ∂_D E partial sums are per block of :data:`_SYM_BLOCK_ROWS`
rows: functions of n and H only, so the three forms give the same bits, whatever the
threads. The shifts c_h = β‖D_h‖₂ come from :func:`_sym3_norms` (closed form for symmetric
3 × 3 matrices); :func:`_sym3_precheck` settles the route by a Frobenius bound when it can.
"""

from __future__ import annotations

import enum
import math
from typing import NamedTuple

import numpy as np
from numba import njit

from wflow.kernels import pool
from wflow.kernels.band3 import (
    _PAGE,
    _SLOT_LOADS,
    _SLOT_SUMS,
    _SYM_ROWS,
    _cos2_table,
    _paged_zeros,
    _sym_band3_for,
    _sym_flat_room,
    _sym_flat_weights,
)
from wflow.kernels.combine import _SYM_TAIL, _finish, _finish_path, _rows_epilogue, _sym_epilogue3
from wflow.kernels.pool import (
    _C_PATH,
    _C_SLOT,
    _atomic_add,
    _enter,
    _fetch_add,
    _item_done,
    _leave,
    _wait_done,
    job_counter,
)
from wflow.kernels.target import _ALIGNED, _OPTS, _VQ, _unowned
from wflow.kernels.workspace import _kept


@njit(nogil=True, **_OPTS, **_ALIGNED)
def _sym_reduce3(role, bands, Cb, S0, SX, SI, counter):
    """Rows of band b get the column sums of the earlier bands 0..b−1 in this order, then
    SI = 2·(Itô column sums) + S0 (:func:`_sym_band3`; a job of :mod:`wflow.kernels.pool`;
    items (p, h), each in a fixed order: the same bits for any threads)."""
    master = _enter(role)
    bands, Cb, S0, SX = _unowned(bands), _unowned(Cb), _unowned(S0), _unowned(SX)
    SI, counter = _unowned(SI), _unowned(counter)
    P, H, n = S0.shape
    nb = bands.size - 1
    while True:
        ph = _fetch_add(counter)
        if ph >= P * H:
            break
        p = ph // H
        h = ph - p * H
        for b in range(1, nb):
            for i in range(bands[b], bands[b + 1]):
                s = S0[p, h, i]
                a0 = SX[p, h, i, 0]
                a1 = SX[p, h, i, 1]
                a2 = SX[p, h, i, 2]
                g = SI[p, h, i]
                for bb in range(b):
                    s += Cb[p, h, bb, 0, i]
                    a0 += Cb[p, h, bb, 1, i]
                    a1 += Cb[p, h, bb, 2, i]
                    a2 += Cb[p, h, bb, 3, i]
                    g += Cb[p, h, bb, 4, i]
                S0[p, h, i] = s
                SX[p, h, i, 0] = a0
                SX[p, h, i, 1] = a1
                SX[p, h, i, 2] = a2
                SI[p, h, i] = g
        for i in range(n):
            SI[p, h, i] = 2.0 * SI[p, h, i] + S0[p, h, i]
        _item_done(counter)
    if master:
        _wait_done(role, counter, P * H)
        _leave(role, counter)


#: The stages of :func:`_sym3`.
class Stage(enum.IntEnum):
    """The stages of :func:`_sym3` (module notes); the compiled code sees their codes."""

    FUSED = 0
    PAIRS = 1
    COMBINE = 2
    CHAIN = 3


_SYM_FUSED, _SYM_PAIRS, _SYM_COMBINE, _SYM_CHAIN = (int(s) for s in Stage)
#: Rows per block of the symmetric pass's combine (a multiple of the vector): the tiles of its
#: ∂_D E partial sums and the items of its unfused combine stage [tiles of 8 rows
#: (:func:`~.routing.tile_rows`) would make the fused stage write 25 tiles per head at n = 200, each
#: in its own cache line of a 1.8 MB array at P = 10, H = 100]. A constant: the partial sums'
#: rounding depends on it, never on the thread count or the path batch.
_SYM_BLOCK_ROWS = 256


#: Heads per chunk of the symmetric pass's combine (at most): every row adds its heads chunk by
#: chunk, each chunk's sum in head order from zero, the chunks' sums in chunk order (a function
#: of H only, so the same bits in every form). The fused form's work items are (path, chunk):
#: finer than paths for the dynamic schedule (the paper's P = 10 paths of H = 100 heads on two
#: threads: 70 items of 14–15 heads, not 10 of 100).
_SYM_CHUNK = 16


@njit(inline="always", **_OPTS)
def _sym_chunks(H):
    """The number of head chunks of :func:`_sym3` (:data:`_SYM_CHUNK`)."""
    return max(1, (H + _SYM_CHUNK - 1) // _SYM_CHUNK)


@njit(**_OPTS)
def _chunk_add(dst, src, m, first):
    """``dst[:, :m] = src[:, :m]`` (the first chunk) or ``+=`` (the next ones), by explicit
    loops: the array expressions' shape checks compiled numba's string formatting into
    :func:`_sym3` (≈ 5 s of a cold cache). A call, not inlined (with such a helper
    inlined the suite crashed in two of three CI runs; the cause was not found)."""
    for q in range(dst.shape[0]):
        d = dst[q]
        s = src[q]
        if first:
            for r in range(m):
                d[r] = s[r]
        else:
            for r in range(m):
                d[r] += s[r]


@njit(inline="always", **_OPTS)
def _sym_chunk_start(H, nc, c):
    """The first head of chunk c of nc (chunk sizes differ by at most one)."""
    return (c * H) // nc


@njit(**_OPTS)
def _sym3_items(stage, P, H, nb, nt):
    """The number of work items of a :func:`_sym3` stage (the body's loop and the pool's
    thread count)."""
    if stage == _SYM_FUSED:
        return P * _sym_chunks(H)
    if stage == _SYM_CHAIN:
        return P * H
    if stage == _SYM_PAIRS:
        return P * H * nb
    return P * nt


@njit(nogil=True, **_OPTS, **_ALIGNED)
def _sym3(role, stage, job, own_shift, counter, Cb, scratch, Ac, sums, outs):
    """The symmetric d = 3 pass, one compiled function for its four stages; one thread's part
    of a job of :mod:`wflow.kernels.pool` (the work items come from the job's counter, a dynamic
    schedule; the caller's thread, ``role`` of :func:`_enter`, then waits until
    every item is complete and runs the sums of :func:`_finish`). The arguments in groups:
    ``job`` (:class:`SymJob`: tokens, matrices, β, shifts, bands, flags), the ``scratch`` of
    :func:`_sym3_scratch`, the row ``sums`` (S0, SX, SI, RS of
    :class:`~.workspace.RowSums`) and the ``outs`` (:class:`~.workspace.Outputs`), each a
    tuple in that order; ``Cb`` the band column sums, ``Ac`` the chunks' sums:

    * ``Stage.FUSED`` (one band, at least as many paths as threads): items are (path p, chunk
      of heads, :data:`_SYM_CHUNK`); an item runs head after head the pair sums
      (:func:`_sym_band3`, all rows) and at once the head's combine for all rows
      (:func:`_sym_epilogue3`, into the chunk's accumulators ``Ac[p, chunk]``), while the
      head's row sums are in cache: in the thread's scratch ``Ss`` (one head), not in the
      (P, H, n) arrays, whose path would evict the path's table of squared cosines from L2 at
      every head. The thread whose item completes path p's last chunk (the
      acquire-release counter ``counter[_C_PATH + p]``) adds the chunks in order and runs the
      path's per-row outputs and its sums (:func:`_finish_path`). Items of chunks rather
      than whole paths: whole paths leave a thread idle for up to one path at the end. With a
      table slot in the scratch ``Gs`` (and an Itô sum wanted) the thread fills path p's
      table of ⟨x_i, x_j⟩² (:func:`_cos2_table`) unless it holds p's already.
    * ``Stage.CHAIN`` (one band, fewer paths than threads): items (path p, head h), each the
      head's pair sums; the thread whose item completes path p's last head (an acquire-release
      counter per path, ``counter[_C_PATH + p]``: it sees the other threads' row sums) runs path p's
      combine for all rows, then its per-row outputs and sums: one job. With at least as many
      paths as threads the fused form is faster (the chained combine reads every head's row
      sums back from the cache).
    * ``Stage.PAIRS``: items (path p, head h, band b), each its band's pair sums. With one band
      the column sums live in a per-thread buffer (tests only); with several, band b writes
      ``Cb[p, h, b]`` and :func:`_sym_reduce3` adds them afterwards in band order.
    * ``Stage.COMBINE`` (after the pairs): items (path, block of R = :data:`_SYM_BLOCK_ROWS`
      rows), each head by head with :func:`_sym_epilogue3`, then the per-row outputs and
      the sums.

    Every row adds its heads chunk by chunk (in the order h = 0, 1, … within a chunk, from
    zero; the chunks' sums in order) and every tile partial is the same sum in the fused,
    chained and unfused (pairs, then combine) forms: the same bits, so the choice may depend
    on the thread count. ``ito`` (P,) bool: the paths whose Itô sums are wanted; the
    others skip the Itô loop (SI then holds S0 plus zeros). One function rather than three:
    numba optimises the code a function links (the two pair loops) again in every function
    that calls it, which cost ≈ 11 s of compilation."""
    master = _enter(role)
    # (no reference counting of the arguments' views: :func:`_unowned`)
    Xt, D, V, X, beta, shift, bands, lap, norm, ito, R, _ = _unowned(job)
    counter, Cb, Ac = _unowned(counter), _unowned(Cb), _unowned(Ac)
    Ws, Cws, Gs, As, Ts, Rs, Ss, Ks = _unowned(scratch)
    S0, SX, SI, RS = _unowned(sums)
    vel, part, grad, bhat, er, dEp, energy, diss, G2, G2hm, ito_sum, dEdD = _unowned(outs)
    P = Xt.shape[0]
    H = D.shape[1]
    n = S0.shape[2]
    d = 3
    nb = bands.size - 1
    nt = (n + R - 1) // R
    npq = ((n + _VQ - 1) // _VQ) * _VQ
    items = _sym3_items(stage, P, H, nb, nt)
    # one thread: its scratch (slot 0 the caller's, then one per worker in order of arrival),
    # then items until none is left
    slot = 0 if master else 1 + _atomic_add(counter, _C_SLOT, 1)
    late = slot >= Ws.shape[0]  # (never: a job has at most as many threads as slots)
    if late:  # no items, and no write to another thread's scratch
        items = 0
        slot = 0
    W = Ws[slot]  # (filled at the thread's first item: below)
    filled = False
    Cw = Cws[slot]
    acc = As[slot]  # component-major (2d + 3, n or R)
    tmp = Ts[slot]  # one chunk's sum (the combine of the chained and unfused forms)
    Rp = Rs[slot]  # the band's row parts
    tl = Ks[slot]  # the combine's last rows (:func:`_sym_combine_tail`)
    # one head's row sums (the fused stage: S0, SX, SI, RS of (P, H, n) stay untouched)
    S0s = Ss[slot, :n]
    SXs = Ss[slot, n:4 * n].reshape((n, d))
    SIs = Ss[slot, 4 * n:5 * n]
    RSs = Ss[slot, 5 * n:6 * n]
    nc = _sym_chunks(H)
    v = np.empty(d)
    g = np.empty(d)
    NOG = np.empty((0, npq))
    tab = n > 0 and Gs.shape[1] >= n * npq and ito.any()  # (a table slot: the fused stage)
    G = Gs[slot, :n * npq].reshape((n, npq)) if tab else NOG
    tab_p = -1
    any_ito = ito.any()
    NOU = np.empty((1, 0))  # (uniform masses)
    while True:
        t = _fetch_add(counter)
        if t >= items:
            break
        if not filled:  # only a thread with an item writes its slot's weights: a worker that
            # arrives after the items are gone may find the slot (kept scratch) in use by the
            # next job, whose band may be rewriting its weights (non-table mode)
            _sym_flat_weights(W, n)
            filled = True
        # the item: path p and its heads h0..h1−1 of band b (no heads: a combine tile)
        b = 0
        h0 = 0
        h1 = H
        c = 0
        if stage == _SYM_FUSED:
            p = t // nc
            c = t - p * nc
            h0 = _sym_chunk_start(H, nc, c)
            h1 = _sym_chunk_start(H, nc, c + 1)
        elif stage == _SYM_CHAIN:
            p = t // H
            h0 = t - p * H
            h1 = h0 + 1
        elif stage == _SYM_PAIRS:
            b = t % nb
            ph = t // nb
            p = ph // H
            h0 = ph - p * H
            h1 = h0 + 1
        else:
            p = t // nt
            h1 = 0
        fused = stage == _SYM_FUSED
        ac = Ac[p, c] if fused else acc  # the chunk's sum (fused: for the path's last chunk)
        if fused:
            ac[:] = 0.0
        use_tab = tab and ito[p]  # (the paths without the Itô sum never read it)
        if use_tab and p != tab_p:  # (the thread's table holds path tab_p)
            _cos2_table(Xt[p, 0], Xt[p, 1], Xt[p, 2], n, G)
            tab_p = p
        Gp = G if use_tab else NOG
        i_lo = bands[b]
        i_hi = bands[b + 1]
        if own_shift:  # c_h = β‖D_h‖₂ of the item's heads (:func:`_sym3_precheck`)
            for h in range(h0, h1):
                shift[p, h] = beta * _sym3_norm(D, p, h)
        # one call site of the pair loop for every stage: each one is compiled (and
        # optimised by LLVM) once per site and Itô variant (≈ 3 s each, cold cache)
        for h in range(h0, h1):
            C = Cw if nb == 1 else Cb[p, h, b]
            C[:, (i_lo // _VQ) * _VQ:npq] = 0.0  # (the columns the loop reads)
            if fused:  # the head's row sums: consumed at once, in the thread's scratch
                S0h, SXh, SIh, RSh = S0s, SXs, SIs, RSs
            else:
                S0h, SXh, SIh, RSh = S0[p, h], SX[p, h], SI[p, h], RS[p, h]
            sh = (S0h, SXh, SIh, RSh)
            _sym_band3_for((Xt[p, 0], Xt[p, 1], Xt[p, 2]), D[p, h], beta, shift[p, h], n,
                           i_lo, i_hi, C, W, Rp, nb == 1, sh, ito[p], Gp)
            if fused:  # the head's combine while its row sums are in cache (all rows: the
                # fused stage has one band, i_lo = 0 and i_hi = n, int64 rather than the
                # literal 0, so that both call sites compile one combine: 0.8 s of a cold cache)
                _sym_epilogue3(X, D, V, lap, norm, p, h, i_lo, i_hi, R, sh, (part, dEp, ac), tl)
        # the combine of rows r0..r1−1, every head: a block of R rows, or a chained path once its
        # last head is done (the thread that completes it sees the others' row sums)
        r0 = 0
        r1 = n
        heads = stage == _SYM_COMBINE
        if heads:
            r0 = (t - p * nt) * R
            r1 = min(n, r0 + R)
        elif stage == _SYM_CHAIN:
            heads = _atomic_add(counter, _C_PATH + p, 1) == H - 1
        # fused: the thread that completes the path's last chunk (acquire-release: it sees
        # the other chunks' sums) adds the chunks and runs the path's per-row outputs
        last = fused and _atomic_add(counter, _C_PATH + p, 1) == nc - 1
        if heads:  # chunk by chunk, as the fused form
            m = r1 - r0
            for k in range(nc):
                tmp[:, :m] = 0.0
                # (tmp whole: the combine uses its first m columns; a C-contiguous argument,
                # as in the fused call, so one compiled combine, not two: 0.8 s of a cold cache)
                for h in range(_sym_chunk_start(H, nc, k), _sym_chunk_start(H, nc, k + 1)):
                    _sym_epilogue3(X, D, V, lap, norm, p, h, r0, r1, R,
                                   (S0[p, h], SX[p, h], SI[p, h], RS[p, h]), (part, dEp, tmp), tl)
                _chunk_add(acc, tmp, m, k == 0)
        if last:
            for k in range(nc):
                _chunk_add(acc, Ac[p, k], n, k == 0)
        if heads or last:
            for tb in range(r0 // R, (r1 + R - 1) // R):
                i0 = tb * R
                i1 = min(n, i0 + R)
                _rows_epilogue(X, H, norm, False, p, i0, i1, acc[:, i0 - r0:i1 - r0].T,
                               vel, grad, bhat, er, v, g)
        if last or (heads and stage == _SYM_CHAIN):  # the whole path: its sums here
            _finish_path(er, dEp, beta, H, any_ito, energy, diss, G2, G2hm, ito_sum, dEdD,
                         NOU, p)
        _item_done(counter)  # (release: the item's writes)
    if master:
        _wait_done(role, counter, items)
        if stage == _SYM_COMBINE:  # (the fused and chained forms ran them path by path)
            _finish(er, dEp, beta, H, any_ito, energy, diss, G2, G2hm, ito_sum, dEdD, NOU)
        _leave(role, counter)


class SymJob(NamedTuple):
    """The inputs of a job of :func:`_sym3`, its argument ``job`` (as a plain tuple):
    page-padded columns Xt (P, 3, nps), D and V (P, H, 3, 3), X (P, n, 3), β, the shifts
    (P, H), the row bands, the Laplacian heads (H,), the normalisation code, the paths' Itô
    flags (P,), the tile rows ``R`` and the thread count (the pool's, not read by the kernel)."""

    Xt: np.ndarray
    D: np.ndarray
    V: np.ndarray
    X: np.ndarray
    beta: float
    shift: np.ndarray
    bands: np.ndarray
    lap: np.ndarray
    norm: int
    ito: np.ndarray
    R: int
    threads: int


def _run_sym3(stage, table, job, Cb, sums, outs, own_shift=False):
    """One job of :func:`_sym3` (:class:`SymJob` ``job``, row sums ``sums``, outputs ``outs``)
    on the pool, with at most ``job.threads`` threads; with ``own_shift`` its items write
    ``shift`` of their heads first (one band only)."""
    Xt, D, bands, R, threads = job.Xt, job.D, job.bands, job.R, job.threads
    P, H, n = Xt.shape[0], D.shape[1], sums[0].shape[2]
    stage = int(stage)  # (a plain int for the kernels: one compiled type)
    items = int(_sym3_items(stage, P, H, bands.size - 1, (n + R - 1) // R))
    threads = max(1, min(threads, items))
    counter = job_counter(P, threads)
    whole = stage == _SYM_FUSED or stage == _SYM_CHAIN
    scratch = _sym3_scratch(threads, n, Xt.shape[2], table and stage == _SYM_FUSED,
                            n if whole else R)
    if stage == _SYM_FUSED:  # the chunks' sums (every slot written before it is read)
        Ac = _kept("sym3_chunks", (P, H, n), lambda: np.empty((P, int(_sym_chunks(H)), 9, n)))
    else:
        Ac = _NO_AC
    # (plain tuples: numba types a NamedTuple argument in Python at every call, ≈ 2 µs)
    pool.run(_sym3, (stage, tuple(job), bool(own_shift), counter, Cb, scratch, Ac, tuple(sums),
                      tuple(outs)), threads)


def _sym3_scratch(slots, n, nps, table, rows):
    """Each thread's scratch of :func:`_sym3`, one slot per thread: the pair weights
    ``Ws (slots, room)`` (:func:`_sym_flat_weights`, filled by the job; room for the
    weight table and row constants of :func:`_sym_band3`, :func:`_sym_flat_room`), the column
    sums ``Cws (slots, 5, nps)``, the table of squared cosines ``Gs (slots, ≥ n·n_pad or 0)``
    the row accumulators ``As, Ts (slots, 9, rows)`` (all heads; one chunk of heads) and the
    band's row parts ``Rs (slots, n_pad + 4, 4)`` (:func:`_sym_band3`), one head's row sums
    ``Ss (slots, 6n)`` (S0, SX, SI, RS of the fused stage) and the combine's last rows
    ``Ks (slots, _SYM_TAIL)`` (:func:`_sym_combine_tail`), in the page layout of
    :data:`_PAGE`.
    Kept between calls of one Python thread for the last :data:`_WORKSPACE_SHAPES` shapes,
    like :func:`_row_sum_arrays`: fresh per job, a worker's scratch came from its malloc
    arena, which may return it to the system at the end of a job and fault it in again at
    the next (see benchmarks/)."""
    npq = -(-n // _VQ) * _VQ
    per = _PAGE // 8
    gsize = -(-(n * npq) // per) * per if table else 0
    return _kept("sym3", (slots, n, nps, gsize, rows), lambda: (
        _paged_zeros((slots, _sym_flat_room(n)), _SLOT_LOADS),
        _paged_zeros((slots, 5, nps), _SLOT_SUMS), _paged_zeros((slots, gsize), _SLOT_LOADS),
        np.zeros((slots, 2 * 3 + 3, rows)), np.zeros((slots, 2 * 3 + 3, rows)),
        np.zeros((slots, npq + _SYM_ROWS, 4)), np.zeros((slots, 6 * n)),
        np.zeros((slots, _SYM_TAIL))))


def _run_sym_reduce3(bands, Cb, S0, SX, SI, threads):
    """:func:`_sym_reduce3` as one job of the pool on at most ``threads`` threads."""
    items = S0.shape[0] * S0.shape[1]
    pool.run(_sym_reduce3, (bands, Cb, S0, SX, SI, job_counter(0, threads)),
              min(threads, items))


def _sym_pair_sums(Xt, D, beta, shift, bands, threads, Cb, S0, SX, SI, RS, ito):
    """The pair stage of :func:`_sym3` alone, on ``threads`` threads (row sums S0, SX, SI,
    RS; tests)."""
    e1, e2, e3, e4 = np.empty(0), np.empty((0, 0)), np.empty((0, 0, 0)), np.empty((0,) * 4)
    job = SymJob(Xt, D, D, e3, float(beta), shift, bands, np.zeros(D.shape[1], np.bool_), 0,
                 ito, _SYM_BLOCK_ROWS, threads)
    _run_sym3(Stage.PAIRS, False, job, Cb, (S0, SX, SI, RS),
              (e3, e3, e3, e2, e3, np.empty((0,) * 5), e1, e1, e1, e1, e1, e4))


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------
#: No band column sums (one band: per-thread buffers).
_NO_CB = np.empty((0, 0, 0, 5, 0))
#: No chunk sums (the stages of :func:`_sym3` other than the fused one).
_NO_AC = np.empty((0, 0, 9, 0))


@njit(**_OPTS)
def _sym3_norms(D, out):
    r"""max |λ| of symmetric 3 × 3 matrices D (P, H, 3, 3) in closed form (Smith 1961): with
    :math:`q = \operatorname{tr}D/3`, :math:`p = \sqrt{\|D - qI\|_F^2/6}`,
    :math:`r = \det((D - qI)/p)/2`, the extreme eigenvalues are
    :math:`q + 2p\cos(\tfrac13\arccos r)` and :math:`q + 2p\cos(\tfrac13\arccos r + \tfrac{2\pi}3)`.
    Near a double eigenvalue ``arccos`` costs up to ~√ε relative accuracy: harmless for a shift
    (an upper bound of the logits up to that rounding). Cheaper than ``np.linalg.eigvalsh``
    on many small matrices."""
    for p_ in range(D.shape[0]):
        for h in range(D.shape[1]):
            out[p_, h] = _sym3_norm(D, p_, h)


@njit(inline="always", **_OPTS)
def _sym3_norm(D, p_, h):
    """:func:`_sym3_norms` of D[p_, h] (inlined: the same arithmetic wherever it is called,
    e.g. in the items of :func:`_sym3`)."""
    a00, a01, a02 = D[p_, h, 0, 0], D[p_, h, 0, 1], D[p_, h, 0, 2]
    a11, a12, a22 = D[p_, h, 1, 1], D[p_, h, 1, 2], D[p_, h, 2, 2]
    return _sym3_eigmax(a00, a01, a02, a11, a12, a22)


@njit(inline="always", **_OPTS)
def _sym3_eigmax(a00, a01, a02, a11, a12, a22):
    """max |λ| of the symmetric 3 × 3 matrix with upper triangle (a00, a01, a02; a11, a12;
    a22), in closed form (:func:`_sym3_norms`)."""
    p1 = a01 * a01 + a02 * a02 + a12 * a12
    if p1 == 0.0:
        return max(abs(a00), abs(a11), abs(a22))
    q = (a00 + a11 + a22) / 3.0
    b00, b11, b22 = a00 - q, a11 - q, a22 - q
    pp = math.sqrt((b00 * b00 + b11 * b11 + b22 * b22 + 2.0 * p1) / 6.0)
    det = (b00 * (b11 * b22 - a12 * a12) - a01 * (a01 * b22 - a12 * a02)
           + a02 * (a01 * a12 - b11 * a02))
    r = det / (2.0 * pp * pp * pp)
    r = min(1.0, max(-1.0, r))
    phi = math.acos(r) / 3.0
    l1 = q + 2.0 * pp * math.cos(phi)
    l3 = q + 2.0 * pp * math.cos(phi + 2.0 * math.pi / 3.0)
    return max(abs(l1), abs(l3))


@njit(**_OPTS)
def _gram3_norms(D, out):
    r"""The spectral norms of general 3 × 3 matrices D (P, H, 3, 3):
    :math:`\|D_h\|_2 = \sqrt{\lambda_{\max}(D_h^\top D_h)}`, the largest eigenvalue of the
    symmetric Gram matrix in the closed form of :func:`_sym3_norms` (up to ~√ε relative near a
    double singular value, which a shift tolerates), of D_h scaled by its largest entry (no
    over- or underflow); a symmetric D_h takes :func:`_sym3_norms`' form (its shift is then the
    same whatever the other heads). Much cheaper than an SVD per matrix."""
    for p_ in range(D.shape[0]):
        for h in range(D.shape[1]):
            if (D[p_, h, 0, 1] == D[p_, h, 1, 0] and D[p_, h, 0, 2] == D[p_, h, 2, 0]
                    and D[p_, h, 1, 2] == D[p_, h, 2, 1]):
                out[p_, h] = _sym3_norm(D, p_, h)  # a symmetric head: its own closed form
                continue
            m = 0.0  # the largest |entry|: D_h / m keeps D_hᵀD_h clear of over- and underflow
            for a in range(3):
                for b in range(3):
                    m = max(m, abs(D[p_, h, a, b]))
            if m == 0.0:
                out[p_, h] = 0.0
                continue
            c0 = (D[p_, h, 0, 0] / m, D[p_, h, 1, 0] / m, D[p_, h, 2, 0] / m)  # columns of D_h / m
            c1 = (D[p_, h, 0, 1] / m, D[p_, h, 1, 1] / m, D[p_, h, 2, 1] / m)
            c2 = (D[p_, h, 0, 2] / m, D[p_, h, 1, 2] / m, D[p_, h, 2, 2] / m)
            g00 = c0[0] * c0[0] + c0[1] * c0[1] + c0[2] * c0[2]
            g01 = c0[0] * c1[0] + c0[1] * c1[1] + c0[2] * c1[2]
            g02 = c0[0] * c2[0] + c0[1] * c2[1] + c0[2] * c2[2]
            g11 = c1[0] * c1[0] + c1[1] * c1[1] + c1[2] * c1[2]
            g12 = c1[0] * c2[0] + c1[1] * c2[1] + c1[2] * c2[2]
            g22 = c2[0] * c2[0] + c2[1] * c2[1] + c2[2] * c2[2]
            out[p_, h] = m * math.sqrt(_sym3_eigmax(g00, g01, g02, g11, g12, g22))


#: Relative margin of :func:`_sym3_precheck`'s Frobenius bound over the closed-form spectral
#: norm (which may exceed the exact one by ~√ε near a double eigenvalue).
_FRO_MARGIN = 1e-6


@njit(**_OPTS)
def _sym3_precheck(D, beta, limit):
    r"""One pass over D (P, H, 3, 3): 0 if some D_h is not symmetric (exact equality), 1 if
    all are and every :math:`2\beta\|D_h\|_F (1 + 10^{-6}) <` ``limit`` (then every fixed
    shift :math:`c_h = \beta\|D_h\|_2 \le \beta\|D_h\|_F` is below the limit: the
    symmetric pass applies without the spectral norms), 2 otherwise. With ``1`` the pass's
    items compute their own shifts (:func:`_sym3`, in parallel, not on the caller's thread
    before the pass)."""
    sym = 1
    for p_ in range(D.shape[0]):
        for h in range(D.shape[1]):
            f = 0.0
            for a in range(3):
                for b in range(3):
                    v = D[p_, h, a, b]
                    f += v * v
                    if v != D[p_, h, b, a]:
                        return 0
            if not 2.0 * beta * math.sqrt(f) * (1.0 + _FRO_MARGIN) < limit:
                sym = 2
    return sym
