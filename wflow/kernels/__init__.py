"""The numba kernels of the attention field [model §2–4, §6]: one fused pass over the pairs.

:func:`fused_pass` evaluates, for a batch of P paths (tokens X (P, n, d) on the sphere,
interaction matrices D (P, H, d, d), values V), every quantity that
:func:`wflow.kernels.reference.field_reference` returns, without forming an n × n array.

*The pair sums.* For each (path p, head h, row i), with e_ij = exp(s^h_ij − c) and the logit
s^h_ij = ⟨q_i, x_j⟩, q_i = β D_h x_i,

    S0 = Σ_j e_ij,      SX = Σ_j e_ij x_j  (d),      SI = Σ_j e_ij (1 + ⟨x_i, x_j⟩²).

Everything else is linear in these sums (Σ_j e_ij V_h x_j = V_h SX, likewise D_h SX): the
velocity, the gradient, ∂_D E and the Itô sum come out of a per-row combine.

*Modules, one per pass.* :mod:`.routing` chooses the route (:class:`Route`) and the plan
(:class:`Plan`: route, shift, row bands, tile rows) that both :func:`fused_pass` and the
memory estimate read; :mod:`.rows` is the row pass for any d (a fused d = 3 loop, chunks of
columns otherwise, float32 for d = 3); :mod:`.band3` and :mod:`.sym3` the symmetric d = 3
pass (each unordered pair once); :mod:`.blas` the BLAS tiles for large d; :mod:`.combine`
the per-row combines and the reductions; :mod:`.exp` the exponentials; :mod:`.simd` explicit
vectors; :mod:`.pool` the worker threads; :mod:`.target` the compile target and options;
:mod:`.workspace` the arrays kept between calls; :mod:`.pairs` the pair statistics of the
clustering diagnostics; :mod:`.reference` the dense NumPy reference; :mod:`._cache` the
guard that makes numba's on-disk cache see edits anywhere in the package.

*Determinism.* Every output slot and every partial sum is written by exactly one work item
with the same code whatever the schedule, and the reductions over rows, tiles and bands run
afterwards in a fixed order: results are bit-identical whatever the number of threads, the
schedule or the path batch. The accumulation loops carry ``fastmath={"reassoc",
"contract"}``: results may differ in the last bits between machines of different SIMD
width, never between runs on one machine.

numba is imported only inside this package; :func:`set_num_threads` and
:func:`get_num_threads` set and read the threads of the passes.
"""

from wflow.kernels import _cache  # noqa: F401  (first: before any kernel is defined)
from wflow.kernels.band3 import sym_band_count
from wflow.kernels.exp import fast_exp_array, fast_exp_rate
from wflow.kernels.fused import FieldPass, fused_pass, kernels_ready
from wflow.kernels.pairs import pair_statistics
from wflow.kernels.pool import get_num_threads, set_num_threads, spin_us
from wflow.kernels.routing import (
    BLAS_MIN_D,
    BLAS_MIN_N,
    FIXED_SHIFT_LIMIT,
    SYM_MAX_N,
    Norm,
    Plan,
    Route,
    plan,
    plan_shapes,
    takes_sym_pass,
)

__all__ = ["Norm", "Route", "Plan", "plan", "plan_shapes", "BLAS_MIN_D", "BLAS_MIN_N",
           "FIXED_SHIFT_LIMIT", "SYM_MAX_N", "FieldPass", "fused_pass", "fast_exp_array", "fast_exp_rate",
           "sym_band_count", "takes_sym_pass", "kernels_ready", "pair_statistics", "spin_us",
           "set_num_threads", "get_num_threads"]
