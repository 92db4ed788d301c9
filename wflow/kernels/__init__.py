"""The numba kernels of the attention field (to document)."""

from wflow.kernels import _cache  # noqa: F401  (first: before any kernel is defined)
from wflow.kernels.band3 import sym_band_count
from wflow.kernels.exp import fast_exp_array, fast_exp_rate
from wflow.kernels.fused import FieldPass, fused_pass, kernels_ready
from wflow.kernels.pairs import pair_statistics
from wflow.kernels.pool import spin_us
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
           "sym_band_count", "takes_sym_pass", "kernels_ready", "pair_statistics", "spin_us"]
