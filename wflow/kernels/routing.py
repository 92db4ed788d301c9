"""The route of a field pass: which kernels :func:`wflow.kernels.fused_pass` runs, chosen from
the shapes, the precision and the interaction matrices, never from the thread count's effect
on the bits.

Routes (:class:`Route`):

* ``sym3`` / ``sym3-chain`` / ``sym3-bands``: the symmetric d = 3 pass (:mod:`.sym3`), each
  unordered pair once (e_ij = e_ji). It needs float64, the polynomial exponential, uniform
  masses, no mask, symmetric D_h and the fixed shift on every head (2 c_h below
  :data:`FIXED_SHIFT_LIMIT`). One row band: work items (path, chunk of heads) when there are
  at least as many paths as threads (``sym3``), else (path, head) (``sym3-chain``); several
  bands (large n·H, :func:`~.band3.sym_band_count`): path by path (``sym3-bands``). The three
  forms give the same bits.
* ``blas`` / ``blas-combine``: the pair sums by BLAS tiles (:mod:`.blas`), d ≥
  :data:`BLAS_MIN_D` and n ≥ :data:`BLAS_MIN_N` (needs threadpoolctl); from d ≥
  :data:`BLAS_EPILOGUE_MIN_D` the combine runs as matmuls too (``blas-combine``).
* ``rows32``: the float32 row pass (float32 tokens, d = 3, polynomial exponential).
* ``rows``: the float64 row pass (:mod:`.rows`), every other case.

The logit bound c_h = β‖D_h‖₂ [model §2] is part of the plan: with 2 c_h below the limit
the fixed shift c_h is used, otherwise each row is shifted by its maximum. A route may be
forced (``fused_pass(route=...)``) where its conditions hold; any route gives results within
rounding of any other, and the route is a function of the inputs only.
"""

from __future__ import annotations

import contextlib
import enum
from typing import NamedTuple

import numpy as np

from wflow.kernels.band3 import SYM_MAX_N, _sym_bands, sym_band_count
from wflow.kernels.blas import BLAS_EPILOGUE_MIN_D, BLAS_MIN_D, BLAS_MIN_N, _blas_available, _blas_limits
from wflow.kernels.sym3 import _SYM_BLOCK_ROWS, _gram3_norms, _sym3_norms, _sym3_precheck


class Norm(enum.IntEnum):
    """Normalisation of the heads [model §2]: per head, joint over the heads, or none."""

    HEAD = 0
    JOINT = 1
    NONE = 2

    @classmethod
    def of(cls, value):
        """The member for a name (``"head"``, ``"joint"``, ``"none"``), a code or a member."""
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                raise ValueError(f"normalization {value!r}: expected one of "
                                 f"{[m.name.lower() for m in cls]}") from None
        try:
            return cls(int(value))
        except ValueError:
            raise ValueError(f"norm = {value!r}: expected 0 (head), 1 (joint) or 2 (none)") from None


class Route(enum.Enum):
    """The kernels of a field pass (module notes)."""

    SYM3 = "sym3"
    SYM3_CHAIN = "sym3-chain"
    SYM3_BANDS = "sym3-bands"
    BLAS = "blas"
    BLAS_COMBINE = "blas-combine"
    ROWS32 = "rows32"
    ROWS = "rows"

    @property
    def symmetric(self):
        """The symmetric d = 3 pass."""
        return self in (Route.SYM3, Route.SYM3_CHAIN, Route.SYM3_BANDS)

    @property
    def blas(self):
        """The BLAS pair pass (keeps Q = β X D_hᵀ, (P, H, n, d))."""
        return self in (Route.BLAS, Route.BLAS_COMBINE)


class Plan(NamedTuple):
    """How :func:`wflow.kernels.fused_pass` evaluates one batch."""

    route: Route
    #: (P, H) logit bounds c_h, or None where the symmetric pass's items compute them (and in
    #: a plan from shapes alone, :func:`plan_shapes`)
    shift: np.ndarray | None
    #: row band edges of the symmetric pass (n_bands + 1,), else None
    bands: np.ndarray | None
    #: rows per work item (the tiles of the ∂_D E partial sums: the bits depend on it)
    tile_rows: int
    #: (P, H) bool, the heads shifted by row maxima (2 c_h at or above the route's limit);
    #: None for the symmetric pass (fixed shift on every head) and a plan from shapes
    row_max: np.ndarray | None = None

    @property
    def band_count(self):
        """Row bands of the symmetric pass (0 on the other routes)."""
        return 0 if self.bands is None else self.bands.size - 1

    @property
    def keeps_q(self):
        """Whether the pass keeps Q = β X D_hᵀ (P, H, n, d) (the BLAS routes)."""
        return self.route.blas


#: Above this value of 2·β‖D_h‖₂ a fixed shift could underflow whole rows: use row maxima.
FIXED_SHIFT_LIMIT = 700.0
#: The same for the float32 pair loop (float32 underflows below e^-87).
FIXED_SHIFT_LIMIT_F32 = 80.0


def _sym_form(n, d, H, single, fast_exp, U, causal):
    """The conditions of the symmetric d = 3 pass that do not depend on D's values: float64,
    polynomial exp, uniform masses (``U`` None), no mask, 0 < n ≤ :data:`SYM_MAX_N`, H > 0."""
    return (d == 3 and not single and fast_exp and U is None and not causal
            and 0 < n <= SYM_MAX_N and H > 0)


def _use_sym(n, d, single, fast_exp, U, causal, D, shift, symmetric=None):
    """Whether the symmetric d = 3 pass applies: :func:`_sym_form`, symmetric D (e_ij = e_ji)
    and the fixed shift on every head. ``symmetric``: :func:`_is_symmetric` (D), if known."""
    return (_sym_form(n, d, D.shape[1], single, fast_exp, U, causal)
            and bool((2.0 * shift < FIXED_SHIFT_LIMIT).all())
            and (_is_symmetric(D) if symmetric is None else symmetric))


def _route(n, d, H, P, single, fast_exp, symmetric, threads):
    """The route of a batch; ``symmetric``: the symmetric pass's conditions hold."""
    if symmetric:
        if sym_band_count(n, H) > 1:
            return Route.SYM3_BANDS
        return Route.SYM3 if P >= threads else Route.SYM3_CHAIN
    if d >= BLAS_MIN_D and n >= BLAS_MIN_N and _blas_available():
        return Route.BLAS_COMBINE if d >= BLAS_EPILOGUE_MIN_D else Route.BLAS
    if single and d == 3 and fast_exp:
        return Route.ROWS32
    return Route.ROWS


def _check(route, n, d, H, single, fast_exp, symmetric):
    """Refuse a forced ``route`` whose conditions do not hold."""
    if route.symmetric:
        if not symmetric:
            raise ValueError(f"route {route.value!r}: needs d = 3, float64, the polynomial "
                             f"exponential, uniform masses, no mask, symmetric D and "
                             f"2·β‖D_h‖₂ < {FIXED_SHIFT_LIMIT} on every head")
        if (route is Route.SYM3_BANDS) != (sym_band_count(n, H) > 1):
            raise ValueError(f"route {route.value!r}: n = {n}, H = {H} take "
                             f"{sym_band_count(n, H)} row band(s)")
    elif route.blas and not _blas_available():
        raise ValueError(f"route {route.value!r}: needs threadpoolctl")
    elif route is Route.ROWS32 and not (single and d == 3 and fast_exp):
        raise ValueError("route 'rows32': needs float32 tokens, d = 3, the polynomial "
                         "exponential and uniform masses")


def plan_shapes(n, d, H, P=1, *, single=False, fast_exp=True, weighted=False, causal=False,
                threads=1, symmetric=True):
    """The plan of a batch from its shapes alone, for symmetric D_h (``symmetric``) with the
    fixed shift on every head (the model's case): what the memory estimate needs. ``shift``
    is None."""
    single = single and not weighted  # (the weighted pair loop is float64)
    sym = symmetric and _sym_form(n, d, H, single, fast_exp, True if weighted else None, causal)
    route = _route(n, d, H, P, single, fast_exp, sym, threads)
    return _plan(route, None, n, d, H)


def _plan(route, shift, n, d, H):
    if route.symmetric:
        return Plan(route, shift, _sym_bands(n, H), _SYM_BLOCK_ROWS)
    row_max = None
    if shift is not None:
        limit = FIXED_SHIFT_LIMIT_F32 if route is Route.ROWS32 else FIXED_SHIFT_LIMIT
        row_max = np.ascontiguousarray(2.0 * shift >= limit)
    return Plan(route, shift, None, tile_rows(d), row_max)


def plan(X, D, beta, *, single, fast_exp, U, causal, threads, route=None):
    """The plan of :func:`wflow.kernels.fused_pass` for tokens X (P, n, d) and matrices
    D (P, H, d, d) (C-contiguous float64), ``U``: relative masses or None, ``route``: a forced
    :class:`Route` (or its value), refused where its conditions do not hold.

    When the symmetric pass applies whatever the spectral norms (a Frobenius bound, one row
    band), its items compute the shifts and the plan's shift is None; otherwise it holds
    c_h = β‖D_h‖₂."""
    P, n, d = X.shape
    H = D.shape[1]
    forced = None if route is None else Route(route)
    pre = -1  # (not tested)
    if _sym_form(n, d, H, single, fast_exp, U, causal):
        pre = _sym3_precheck(D, beta, FIXED_SHIFT_LIMIT)
    if (pre == 1 and sym_band_count(n, H) == 1
            and (forced is None or forced.symmetric)):
        shift, sym = None, True
    else:  # (the precheck's symmetry verdict, when it ran, is not tested again)
        shift, sym = _shift_and_route(n, d, D, beta, single, fast_exp, U, causal,
                                      None if pre < 0 else pre > 0)
    if forced is None:
        chosen = _route(n, d, H, P, single, fast_exp, sym, threads)
    else:
        _check(forced, n, d, H, single, fast_exp, sym)
        chosen = forced
    return _plan(chosen, shift, n, d, H)


def tile_rows(d):
    """Rows per work item of the fused pass: 8 for d ≤ 8, then 8·⌈d/8⌉ (a function of d
    only: the tile partial sums of ∂_D E, hence the results, depend on it)."""
    return 8 * max(1, -(-d // 8))


def _is_symmetric(D):
    """Whether every D_h (…, d, d) equals its transpose exactly."""
    return bool(np.array_equal(D, np.swapaxes(D, -1, -2)))


#: From this d on, :func:`spectral_norm` calls LAPACK with BLAS limited to one thread.
SPECTRAL_LIMIT_D = 32


def spectral_norm(D, symmetric=None):
    """‖D_h‖₂ per (p, h): max |eigenvalue| when D is symmetric, else the largest singular
    value; for d = 3 both in closed form (:func:`~.sym3._sym3_norms`, and for a general D_h
    the square root of the largest eigenvalue of D_hᵀD_h, :func:`~.sym3._gram3_norms`: up to
    ~√ε relative near a double singular value, which the shift tolerates), else by LAPACK.
    ``symmetric``: :func:`_is_symmetric` (D), if known."""
    P, H, d, _ = D.shape
    if H == 0 or d == 0:
        return np.zeros((P, H))
    sym = _is_symmetric(D) if symmetric is None else symmetric
    if d == 3:
        out = np.empty((P, H))
        (_sym3_norms if sym else _gram3_norms)(np.ascontiguousarray(D), out)
        return out
    # LAPACK on one BLAS thread from d = SPECTRAL_LIMIT_D on: a threaded eigensolver leaves
    # OpenBLAS's workers spinning, taking a core from the pair pass that follows
    limits = _blas_limits() if d >= SPECTRAL_LIMIT_D else None
    with limits if limits is not None else contextlib.nullcontext():
        if sym:
            return np.ascontiguousarray(np.abs(np.linalg.eigvalsh(D)).max(axis=-1))
        return np.ascontiguousarray(np.linalg.norm(D, ord=2, axis=(-2, -1)))


def _shift_and_route(n, d, D, beta, single, fast_exp, U, causal, symmetric=None):
    """The logit bound c_h = β‖D_h‖₂ (P, H) [model §2] and whether :func:`fused_pass` takes
    the symmetric d = 3 pass (:func:`_use_sym`): one symmetry test of D for both (unless
    ``symmetric`` is given)."""
    if symmetric is None:
        symmetric = _is_symmetric(D)
    shift = beta * spectral_norm(D, symmetric)
    return shift, _use_sym(n, d, single, fast_exp, U, causal, D, shift, symmetric)


def takes_sym_pass(X, D, beta, fast_exp=True, weights=None, causal=False):
    """Whether :func:`fused_pass` evaluates (X (P, n, d) float64; D (P, H, d, d)) with the
    symmetric d = 3 pass. Its paths are independent and it skips the Itô loop path by path, so
    two batches that both take it may be evaluated as one, with the same bits."""
    X = np.asarray(X)
    P, n, d = X.shape
    single = X.dtype == np.float32
    D = np.asarray(D, dtype=np.float64)
    # the precheck's 1 (symmetric, every Frobenius bound below the limit) settles it as in
    # fused_pass, without the spectral norms (once per step of a run with the ledger:
    # :meth:`wflow.model.attention.AttentionModel.evaluate_pair`)
    if (D.ndim == 4 and _sym_form(n, d, D.shape[1], single, fast_exp, weights, causal)
            and _sym3_precheck(_c_f64(D), float(beta), FIXED_SHIFT_LIMIT) == 1):
        return True
    return _shift_and_route(n, d, D, float(beta), single, fast_exp, weights, bool(causal))[1]


def _c_f64(a):
    """``a`` as a C-contiguous, writeable float64 array: itself when it is one (cheaper than
    ``np.require`` on the arrays a field evaluation passes around)."""
    if (type(a) is np.ndarray and a.dtype == np.float64 and a.flags.c_contiguous
            and a.flags.writeable):
        return a
    return np.require(a, np.float64, ("C", "W"))
