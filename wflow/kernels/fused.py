"""The driver of a field pass: :func:`fused_pass` checks its inputs, asks
:func:`~.routing.plan` for the plan, allocates the outputs and runs the plan's route
(:func:`_sym_pass` or :func:`_row_pass`).

Inputs: X (P, n, d) unit tokens (float64, or float32 for the float32 row pass), D and V
(P, H, d, d), β > 0, the normalisation (:class:`~.routing.Norm`), the Laplacian heads (H,)
bool, the causal mask, point masses (P, n) or none. Outputs: :class:`FieldPass`, new float64
arrays per path. The arrays internal to a pass (row sums, row terms, partial sums) are kept
between calls (:mod:`.workspace`) where every slot is rewritten.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import numpy as np

from wflow.kernels import pool
from wflow.kernels.band3 import (
    _SLOT_LOADS,
    _SLOT_SUMS,
    _SYM_TABLE_N,
    _paged_zeros,
    _sym_layout,
)
from wflow.kernels.blas import (
    _blas_limits,
    _blas_sym_item,
    _epilogue_blas,
    _pair_pass_blas,
)
from wflow.kernels.combine import _radial_rows
from wflow.kernels.pool import _num_threads, job_counter
from wflow.kernels.routing import (
    Norm,
    Route,
    _c_f64,
    plan,
    plan_shapes,
    takes_sym_pass,
)
from wflow.kernels.rows import _NO_XT, RowJob, _fused32, _fused64
from wflow.kernels.sym3 import (
    _NO_CB,
    Stage,
    SymJob,
    _run_sym3,
    _run_sym_reduce3,
    _sym3,
)
from wflow.kernels.target import _HAS_FMA, _VW, _VW32
from wflow.kernels.workspace import Outputs, _kept, _row_sum_arrays


class FieldPass(NamedTuple):
    """The results of :func:`fused_pass`, per path, with the meaning of
    :func:`wflow.kernels.reference.field_reference` (a tuple: unpacks in this order)."""

    velocity: np.ndarray  # (P, n, d), v before the sign σ
    partition: np.ndarray  # (P, H, n), Z_h(x_i)
    gradient: np.ndarray  # (P, n, d), g_i
    b_hat: np.ndarray  # (P, n), 1 / Z̄(x_i)
    energy: np.ndarray  # (P,)
    dissipation: np.ndarray  # (P,), 𝒟
    G2: np.ndarray  # (P,)
    G2_hm: np.ndarray  # (P,)
    dE_dD: np.ndarray  # (P, H, d, d)
    ito_sum: np.ndarray  # (P,)


def _columns(X, width, dtype=np.float64):
    """The tokens as structure of arrays ``(P, d, n_pad)``, columns zero-padded to a multiple
    of ``width`` (the pair loops' vector granularity)."""
    P, n, d = X.shape
    Xt = np.zeros((P, d, -(-n // width) * width), dtype=dtype)
    Xt[:, :, :n] = X.transpose(0, 2, 1)
    return Xt


def fused_pass(X, D, V, beta, norm, laplacian_mask, causal, tied, want_ito=True,
               fast_exp=True, weights=None, route=None, interaction="symmetric", key_bias=None,
               radial=None):
    r"""All field quantities of [model §2–4] for a batch of paths, in one pass over the pairs.

    With point masses :math:`w_j \ge 0` [model §5b] every token average becomes a weighted
    sum, over columns and over rows:

    .. math::
        Z_h(x_i) = \sum_j w_j e^{s^h_{ij}},\quad
        \pi^h_{ij} = \frac{w_j e^{s^h_{ij}}}{\sum_k w_k e^{s^h_{ik}}},\quad
        E = \frac{1}{2\beta H}\sum_h\sum_{i,j} w_i w_j e^{s^h_{ij}},\quad
        \mathcal D = \sum_i w_i\langle g_i, v_i\rangle,

    and likewise G², G²_hm, ∂_D E and the Itô sum; ``weights=None`` is
    :math:`w_j = 1/n` and runs the unweighted code (bit-identical to it).

    Parameters
    ----------
    X : (P, n, d) tokens (unit rows), float64, or float32 for the single-precision pair loop
        (d = 3 with ``fast_exp``; otherwise float32 inputs are promoted to float64).
    D : (P, H, d, d) interaction matrices: symmetric, or any real matrices with
        ``interaction = "general"``.
    V : (P, H, d, d) value matrices (ignored when ``tied``; may be None then).
    beta : inverse temperature β > 0.
    norm : :class:`~wflow.kernels.routing.Norm`, or its name (``"head"``, ``"joint"``,
        ``"none"``) or code (0, 1, 2).
    laplacian_mask : (H,) bool, True for the Laplacian heads.
    causal : token i attends to j ≤ i.
    tied : values tied to the interaction matrices (V_h = D_h).
    want_ito : also compute ``ito_sum`` (else NaN): a bool, or (P,) bool per path. The
        symmetric d = 3 pass skips the Itô loop on the paths without it (same bits for every
        other output); the other routes compute it for all paths when any path wants it.
    fast_exp : polynomial exponential (vectorised) instead of libm.
    weights : (P, n) or (n,) point masses w_j ≥ 0 (not renormalised: E is quadratic in w),
        or None (uniform 1/n). Inside, the relative masses :math:`u_j = n w_j` multiply the
        exponentials after they are computed (the pair loop of d = 3 then takes the chunked
        path, and float32 inputs the float64 pair loop); the reductions keep their fixed order.
    route : None (the route of the inputs, :func:`~wflow.kernels.routing.plan`) or a forced
        :class:`~wflow.kernels.routing.Route` or its value: ``"sym3"``, ``"sym3-chain"``,
        ``"sym3-bands"``, ``"blas"``, ``"blas-combine"``, ``"rows32"``, ``"rows"``; a route
        whose conditions do not hold raises ValueError. Every route gives the same outputs
        up to rounding; the three symmetric forms give the same bits.
    key_bias : (P, H, n) or (H, n) per-head key logit terms :math:`b_{hj}` [model §1b], or
        None: the logits are :math:`s^h_{ij} + b_{hj}` (softmax and :math:`Z_h`);
        ``interaction = "general"`` only. Computed head by head (:func:`_key_bias_pass`):
        the masses of head h are :math:`w_j e^{b_{hj} - \max_k b_{hk}}`.
    interaction : ``"symmetric"`` (D_h = D_hᵀ assumed, every output) or ``"general"``
        [model §1b]: any real D_h, with the logits :math:`s_{ij} = \beta\langle x_i, D_h x_j\rangle`
        (the passes compute :math:`q_i = \beta D_h^\top x_i` once per row, so they receive the
        transposes :math:`D_h^\top`, and the tied values stay :math:`V_h = D_h`); the energy,
        gradient, dissipation, ∂_D E and Itô sum are NaN (they do not exist for non-symmetric
        D), velocity, partition, b̂, G² and G²_hm are computed. A symmetric D_h through the
        general form takes the same route as through the symmetric one (the same velocity bits).
    radial : None, or a (P, n) float64 array that receives the radial part of the combined
        output before the tangent projection [model §1c],
        :math:`\rho_i = \langle x_i, u_i\rangle = \sum_h c_h \langle x_i, o_h(x_i)\rangle`
        (:math:`c_h` of ``norm``, before the sign), from the row sums of the same pass
        (:func:`~.combine._radial_rows`, cost :math:`P H n d^2`): every route serves it; the
        symmetric pass then runs in its chained form (``sym3-chain``, which keeps the row
        sums: the same bits as ``sym3``). The other outputs are unchanged.

    Precision: with float32 ``X`` (d = 3, ``fast_exp``) the pair loop runs in float32
    (logits, exponentials and sums over chunks of 512 columns, 16 SIMD lanes); the chunk
    sums, the combine and every output are float64. Expect relative errors ~1e-6
    (more for large β‖D‖: the logit error is ~6e-8·β‖D‖₂). D and V are always used in float64.

    Returns
    -------
    FieldPass of new float64 arrays, per path, with the meaning of
    :func:`wflow.kernels.reference.field_reference`:
    ``velocity (P, n, d), partition (P, H, n), gradient (P, n, d), b_hat (P, n),
    energy (P,), dissipation (P,), G2 (P,), G2_hm (P,), dE_dD (P, H, d, d), ito_sum (P,)``.
    Under ``causal`` velocity and partition are the masked ones and every
    energy-based output is NaN.
    """
    single = np.asarray(X).dtype == np.float32
    # C-contiguous and writeable: a read-only view (e.g. a broadcast with P = 1) would be
    # another numba type and compile every kernel again
    X = _c_f64(X)
    D = _c_f64(D)
    general = interaction == "general"
    if not general and interaction != "symmetric":
        raise ValueError(f"interaction = {interaction!r}: expected 'symmetric' or 'general'")
    if key_bias is not None:  # per-head column weights e^{b_hj} [model §1b]
        if not general:
            raise ValueError("key_bias needs interaction = 'general' (no energy with it)")
        return _key_bias_pass(X, D, V, beta, norm, laplacian_mask, causal, tied, fast_exp,
                              weights, route, key_bias, radial)
    if X.ndim != 3:
        raise ValueError(f"X has shape {X.shape}: expected (P, n, d)")
    P, n, d = X.shape
    if D.ndim != 4 or D.shape[0] != P or D.shape[2:] != (d, d):
        raise ValueError(f"D has shape {D.shape}: expected ({P}, H, {d}, {d})")
    H = D.shape[1]
    if general:  # the passes' logits are ⟨β D x_i, x_j⟩: give them Dᵀ; the values keep D
        V = D if tied or V is None else V
        D = np.ascontiguousarray(np.swapaxes(D, -1, -2))
        tied, want_ito = False, False
    if tied or V is None:
        V = D
    else:
        V = _c_f64(V)
        if V.shape != D.shape:
            raise ValueError(f"V has shape {V.shape}: expected {D.shape}")
    beta = float(beta)
    if not beta > 0:
        raise ValueError(f"beta = {beta}: expected beta > 0")
    norm_code = int(Norm.of(norm))  # (a plain int for the kernels: one compiled type)
    lap = laplacian_mask  # (the kernels only read it)
    if not (type(lap) is np.ndarray and lap.dtype == np.bool_ and lap.shape == (H,)
            and lap.flags.c_contiguous and lap.flags.writeable):
        lap = np.zeros(H, dtype=np.bool_)
        lap[:] = (np.asarray(laplacian_mask, dtype=np.bool_).reshape(-1)
                  if np.size(laplacian_mask) else False)
    causal = bool(causal)
    # the paths whose Itô sum is wanted: all or none (a shared array, only read), or per path
    if causal or isinstance(want_ito, (bool, np.bool_)):
        want_ito = False if causal else bool(want_ito)
        ito_p = _path_flags(P, want_ito)
        ito_all = True
    else:
        ito_p = np.zeros(P, dtype=np.bool_)
        try:
            ito_p[:] = want_ito
        except ValueError:
            raise ValueError(f"want_ito has shape {np.shape(want_ito)}: expected a bool or "
                             f"({P},)") from None
        want_ito = bool(ito_p.any())
        ito_all = bool(ito_p.all())
    U = None
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        w = np.broadcast_to(w, (P, n)) if w.shape in ((n,), (1, n)) else w
        if w.shape != (P, n):
            raise ValueError(f"weights has shape {w.shape}: expected ({P}, {n}) or ({n},)")
        if not (np.all(np.isfinite(w)) and np.all(w >= 0)):
            raise ValueError("weights: every mass must be finite and >= 0")
        n_padw = -(-n // _VW) * _VW
        U = np.zeros((P, n_padw))
        U[:, :n] = n * w
        single = False  # the weighted pair loop is float64

    # this thread's numba thread count (numba.get_num_threads in compiled code would prevent
    # caching)
    threads = _num_threads()
    pl = plan(X, D, beta, single=single, fast_exp=fast_exp, U=U, causal=causal,
              threads=threads, route=route)
    if radial is not None:
        _check_radial(radial, P, n)
        if pl.route is Route.SYM3:  # (its row sums stay in the threads' scratch)
            pl = pl._replace(route=Route.SYM3_CHAIN)
    use_sym = pl.route.symmetric
    own_shift = pl.shift is None  # (the symmetric pass's items compute the shifts)
    shift = np.empty((P, H)) if own_shift else pl.shift
    S0, SX, SI, RS = sums = _row_sum_arrays(P, H, n, d)
    vel = np.empty((P, n, d))
    part = np.empty((P, H, n))
    # the symmetric pass writes every output (it is never causal); the other routes start
    # from NaN, where a causal pass leaves them undefined. Separate allocations on purpose:
    # views of one buffer would keep all of them alive while a caller keeps any one (e.g. a
    # record holding ``energy`` would hold ``gradient`` too)
    new = np.empty if use_sym else _nans
    grad = new((P, n, d))
    bhat = new((P, n))
    # row terms of 𝒟, G², G²_hm, E, Itô (internal; the symmetric pass writes every one: kept
    # between calls, as the row sums)
    er = _kept("row_terms", (P, n), lambda: np.empty((5, P, n))) if use_sym else new((5, P, n))
    R = pl.tile_rows
    # per-tile partial sums of ∂_D E (internal; the symmetric pass writes every one once: kept
    # between calls; the other passes add to them)
    nt = -(-n // R)
    dEp = (_kept("tile_partials", (P, nt, H, d), lambda: np.empty((P, nt, H, d, d))) if use_sym
           else np.zeros((P, nt, H, d, d)))
    outs = Outputs(vel, part, grad, bhat, er, dEp, new(P), new(P), new(P), new(P), new(P),
                    new((P, H, d, d)))
    if use_sym:
        _sym_pass(pl, X, D, V, beta, shift, own_shift, lap, norm_code, ito_p, threads, sums, outs)
    else:
        _row_pass(pl, X, D, V, beta, shift, lap, norm_code, causal, want_ito, bool(fast_exp), U,
                  threads, sums, outs, not general)
    if general:  # no energy for non-symmetric D [model §1b]
        for a in (outs.grad, outs.energy, outs.diss, outs.dEdD, outs.ito):
            a[...] = np.nan
    if radial is not None:
        _radial_rows(X, V, lap, norm_code, S0, SX, part, radial)
    return _field_pass(want_ito, ito_all, ito_p, outs)


def _check_radial(radial, P, n):
    """ValueError unless ``radial`` is a writeable C-contiguous (P, n) float64 array."""
    if not (type(radial) is np.ndarray and radial.dtype == np.float64
            and radial.shape == (P, n) and radial.flags.c_contiguous
            and radial.flags.writeable):
        raise ValueError(f"radial: expected a writeable C-contiguous float64 array of shape "
                         f"({P}, {n}), got {getattr(radial, 'dtype', type(radial).__name__)} "
                         f"{np.shape(radial)}")


def _key_bias_pass(X, D, V, beta, norm, laplacian_mask, causal, tied, fast_exp, weights,
                   route, key_bias, radial=None):
    r"""The general pass with per-head key logit terms :math:`b_{hj}` [model §1b], head by head.

    .. math::
        Z_h(x_i) = e^{B_h}\sum_j w_j e^{b_{hj} - B_h} e^{s^h_{ij}},\quad
        B_h = \max_j b_{hj},\qquad
        v_i = \tfrac1H\sum_h w_h,\ \frac{\sum_h Z_h w_h}{\sum_h Z_h},\
        \tfrac1H\sum_h Z_h w_h ,

    each head a one-head :func:`fused_pass` with the masses :math:`w_j e^{b_{hj} - B_h}`
    (the softmax is unchanged by the shift :math:`B_h`, which keeps the masses ≤ w_j); the
    heads are combined path by path in head order, and b̂, G², G²_hm from the combined v as
    in :func:`~wflow.kernels.reference.field_reference`. Every part is a deterministic pass
    or a per-path NumPy expression: the bits do not depend on the thread count or on the
    path batch. Returns a :class:`FieldPass` whose energy-based outputs are NaN; ``radial``
    (P, n) or None receives :math:`\rho = \sum_h c_h \rho_h`, the heads' radial parts
    combined in head order as their outputs.
    """
    X = np.asarray(X)
    P, n, d = X.shape
    D = _c_f64(D)
    if D.ndim != 4 or D.shape[0] != P or D.shape[2:] != (d, d):
        raise ValueError(f"D has shape {D.shape}: expected ({P}, H, {d}, {d})")
    H = D.shape[1]
    V = D if tied or V is None else _c_f64(V)
    if V.shape != D.shape:
        raise ValueError(f"V has shape {V.shape}: expected {D.shape}")
    kb = _key_bias_array(key_bias, P, H, n)
    if not np.all(np.isfinite(kb)):
        raise ValueError("key_bias: every term must be finite")
    w = (np.full((P, n), 1.0 / n) if weights is None
         else np.broadcast_to(np.asarray(weights, dtype=float), (P, n)))
    lap = np.zeros(H, dtype=np.bool_)
    lap[:] = (np.asarray(laplacian_mask, dtype=np.bool_).reshape(-1)
              if np.size(laplacian_mask) else False)
    code = Norm.of(norm)
    wh = np.empty((H, P, n, d))
    part = np.empty((P, H, n))
    if radial is not None:
        _check_radial(radial, P, n)
    rh = None if radial is None else np.empty((H, P, n))
    for h in range(H):
        top = kb[:, h].max(axis=1)  # B_h per path
        mass = w * np.exp(kb[:, h] - top[:, None])
        one = fused_pass(X, D[:, h:h + 1], V[:, h:h + 1], beta, Norm.HEAD, lap[h:h + 1], causal,
                         False, want_ito=False, fast_exp=fast_exp, weights=mass, route=route,
                         interaction="general", radial=None if rh is None else rh[h])
        wh[h] = one.velocity
        part[:, h] = one.partition[:, 0] * np.exp(top)[:, None]
    vel = np.empty((P, n, d))
    nan = np.full
    bhat, G2, G2hm = nan((P, n), np.nan), nan(P, np.nan), nan(P, np.nan)
    u = n * w
    limits = _blas_limits()  # (the row sums below: single-threaded BLAS)
    with limits if limits is not None else contextlib.nullcontext():
        _combine_key_bias(code, causal, wh, part, u, vel, bhat, G2, G2hm)
    if radial is not None:
        _combine_radial(code, rh, part, radial)
    return FieldPass(vel, part, nan((P, n, d), np.nan), bhat, nan(P, np.nan), nan(P, np.nan),
                     G2, G2hm, nan((P, H, d, d), np.nan), nan(P, np.nan))


def _combine_key_bias(code, causal, wh, part, u, vel, bhat, G2, G2hm):
    """The heads' w_h (H, P, n, d) and Z_h (P, H, n) combined path by path, in head order
    (the combine of :func:`wflow.kernels.factored.factored_pass`)."""
    H, P, n, d = wh.shape
    for p in range(P):
        acc = np.zeros((n, d))
        zsum = np.zeros(n)
        for h in range(H):
            Z = part[p, h]
            acc += wh[h, p] if code == Norm.HEAD else Z[:, None] * wh[h, p]
            zsum += Z
        vel[p] = acc / (zsum[:, None] if code == Norm.JOINT else H)
        if not causal:
            bhat[p], G2[p], G2hm[p] = _path_mobility(vel[p], part[p], zsum, u[p])


def _combine_radial(code, rh, part, radial):
    """The heads' radial parts ρ_h (H, P, n) combined in head order with the weights of
    ``code`` and Z_h (P, H, n), into ``radial`` (P, n)."""
    H = rh.shape[0]
    acc = np.zeros(radial.shape)
    zsum = np.zeros(radial.shape)
    for h in range(H):
        Z = part[:, h]
        acc += rh[h] if code == Norm.HEAD else Z * rh[h]
        zsum += Z
    radial[...] = acc / (zsum if code == Norm.JOINT else H)


def _key_bias_array(key_bias, P, H, n):
    """Per-head key logit terms (H, n) or (P, H, n) as a (P, H, n) view; ValueError otherwise."""
    kb = np.asarray(key_bias, dtype=float)
    if kb.shape not in ((H, n), (P, H, n)):
        raise ValueError(f"key_bias has shape {kb.shape}: expected ({H}, {n}) or ({P}, {H}, {n})")
    return np.broadcast_to(kb, (P, H, n))


def _path_mobility(vel, part, zsum, u):
    r"""b̂, G² and G²_hm of one path from its combined velocity (n, d), its Z_h (H, n),
    :math:`\sum_h Z_h` (n,) and the relative masses :math:`u_j = n w_j` (n,) [model §4]:
    :math:`\hat b = H/\sum_h Z_h`, :math:`G^2 = \frac1n\sum_i u_i|v_i|^2/\bar m_i` with
    :math:`\bar m = \frac1H\sum_h 1/Z_h`, :math:`G^2_{hm} = \frac1n\sum_i u_i|v_i|^2/\hat b_i`
    (the general passes' tail: no ∂E, no ledger)."""
    H, n = part.shape
    bhat = 1.0 / (zsum / H)
    mbar = (1.0 / part).mean(axis=0)
    v2 = np.einsum("ia,ia->i", vel, vel)
    return bhat, (v2 / mbar) @ u / n, (v2 / bhat) @ u / n


def _sym_pass(pl, X, D, V, beta, shift, own_shift, lap, norm, ito_p, threads, sums, outs):
    """The symmetric d = 3 pass in the form of ``pl.route`` (:mod:`.sym3`)."""
    P, n, _ = X.shape
    H = D.shape[1]
    S0, SX, SI, RS = sums
    bands, nps = _sym_layout(n, H)
    R = pl.tile_rows
    # rows of nps: whole pages (kept: the padding columns stay zero)
    Xt = _kept("sym_columns", (P, n), lambda: _paged_zeros((P, 3, nps), _SLOT_LOADS))
    Xt[:, :, :n] = X.transpose(0, 2, 1)
    nb = bands.size - 1
    job = SymJob(Xt, D, V, X, beta, shift, bands, lap, norm, ito_p, R, threads)
    if pl.route is Route.SYM3:  # items (path, chunk of heads): the same bits
        _run_sym3(Stage.FUSED, _HAS_FMA and n <= _SYM_TABLE_N, job, _NO_CB, sums, outs,
                  own_shift=own_shift)
    elif pl.route is Route.SYM3_CHAIN:  # items (path, head); a path's last head runs its combine
        _run_sym3(Stage.CHAIN, False, job, _NO_CB, sums, outs, own_shift=own_shift)
    else:  # path by path: the band column sums take H·nb·5·n floats, not P times that
        Cb = _paged_zeros((1, H, nb, 5, nps), _SLOT_SUMS)
        for q in range(P):
            s = slice(q, q + 1)
            one = job._replace(Xt=Xt[s], D=D[s], V=V[s], X=X[s], shift=shift[s], ito=ito_p[s])
            # (the outputs are not touched by this stage)
            _run_sym3(Stage.PAIRS, False, one, Cb, (S0[s], SX[s], SI[s], RS[s]), outs)
            _run_sym_reduce3(bands, Cb, S0[s], SX[s], SI[s], threads)
        _run_sym3(Stage.COMBINE, False, job, _NO_CB, sums, outs)


def _row_pass(pl, X, D, V, beta, shift, lap, norm, causal, want_ito, fast, U, threads, sums,
              outs, with_energy=True):
    """The row passes: BLAS pair tiles then the compiled or the matmul combine, or the
    float32 or float64 row pass (:mod:`.rows`, :mod:`.blas`). ``with_energy`` False: the
    general pass (its energy-based outputs are NaN), whose d = 3 combine skips their terms."""
    P, n, d = X.shape
    R = pl.tile_rows
    rowmax = pl.row_max
    counter = job_counter(P, threads)
    tile_threads = min(threads, P * -(-n // R))
    Uk = np.zeros((P, 0)) if U is None else U  # the parallel passes' form (module notes)
    if pl.route.blas:
        _pair_pass_blas(X, D, beta, shift, rowmax, causal, want_ito, fast, sums, _blas_limits(),
                        U)
        if pl.route is Route.BLAS_COMBINE:
            _epilogue_blas(X, D, V, lap, norm, causal, want_ito, beta, U, sums, outs,
                           _blas_limits())
        else:
            job = RowJob(_NO_XT, D, V, X, beta, shift, rowmax, lap, norm, causal, want_ito, Uk, R)
            pool.run(_fused64, (tuple(job), fast, False, with_energy, counter, tuple(sums),
                                tuple(outs)), tile_threads)
    elif pl.route is Route.ROWS32:
        shift32 = np.ascontiguousarray(shift, dtype=np.float32)
        Xt = _columns(X, _VW32, np.float32)
        job = RowJob(Xt, D, V, X, beta, shift32, rowmax, lap, norm, causal, want_ito, Uk, R)
        pool.run(_fused32, (tuple(job), counter, tuple(sums), tuple(outs)), tile_threads)
    else:
        Xt = _columns(X, _VW)
        job = RowJob(Xt, D, V, X, beta, shift, rowmax, lap, norm, causal, want_ito, Uk, R)
        pool.run(_fused64, (tuple(job), fast, True, with_energy, counter, tuple(sums),
                            tuple(outs)), tile_threads)


def _field_pass(want_ito, ito_all, ito_p, o):
    """The FieldPass of :func:`fused_pass`, NaN as the Itô sum of the paths that do not want
    it (the routes other than the symmetric pass compute it for every path; ``ito_all``: every
    path wants it, or none does)."""
    if want_ito and not ito_all:
        o.ito[~ito_p] = np.nan
    return FieldPass(o.vel, o.part, o.grad, o.bhat, o.energy, o.diss, o.G2, o.G2hm, o.dEdD, o.ito)


#: :func:`_path_flags`' arrays by (P, value).
_PATH_FLAGS = {}


def _path_flags(P, value):
    """A (P,) bool array of ``value``, shared between calls (the kernels only read it: never
    write to it)."""
    a = _PATH_FLAGS.get((P, value))
    if a is None:
        a = _PATH_FLAGS[(P, value)] = np.full(P, value, dtype=np.bool_)
    return a


def _nans(shape):
    """A new float64 array of NaN."""
    return np.full(shape, np.nan)


def _compiled_for_this_cpu(dispatcher):
    """Whether numba holds a compiled form of ``dispatcher`` for this CPU: in this process, or
    in its on-disk cache (numba's cache index, whose keys carry the target's CPU name and
    features). False when the index cannot be read (numba's cache layout is not public)."""
    if dispatcher.overloads:
        return True
    try:
        from numba.core.registry import cpu_target

        magic = cpu_target.target_context.codegen().magic_tuple()
        index = dispatcher._cache._cache_file._load_index()
        return any(key[1] == magic for key in index)
    except Exception:  # pragma: no cover - another numba's cache internals
        return False


def kernels_ready(X, D, beta, fast_exp=True, weights=None, causal=False):
    """Whether :func:`fused_pass` on (X (P, n, d); D (P, H, d, d)) runs without compiling its
    route's main kernel first: the symmetric d = 3 pass, the BLAS tiles or the row pass.
    A cold numba cache compiles it once per machine and CPU (tens of seconds; the documented
    times are in ``docs/performance.md``)."""
    X = np.asarray(X)
    P, n, d = X.shape
    single = X.dtype == np.float32
    if takes_sym_pass(X, D, beta, fast_exp, weights, causal):
        return _compiled_for_this_cpu(_sym3)
    route = plan_shapes(n, d, np.shape(D)[1], P, single=single, fast_exp=fast_exp,
                        weighted=weights is not None, causal=causal, symmetric=False).route
    entry = _blas_sym_item if route.blas else _fused32 if route is Route.ROWS32 else _fused64
    return _compiled_for_this_cpu(entry)
