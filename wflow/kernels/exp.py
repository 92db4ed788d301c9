"""The exponentials of the pair loops.

:func:`_exp_fast`: a branch-free polynomial exponential (Cody–Waite range reduction with the
fdlibm split of ln 2, a degree-10 polynomial, 2^k built by bit-casting) that LLVM
vectorises; arguments are clamped to [−708, 709]. :func:`_exp_shifted` and
:func:`_exp2_shifted` drop the clamp where the fixed shift bounds the argument (s − c ∈
[−2c, 0]). :func:`_exp_fast32` is the float32 form (cephes split, degree 6). Only
``contract`` is allowed in these functions (never reassociation): the same bits in every
loop that inlines them. :func:`fast_exp_rate` measures the polynomial's throughput (see
benchmarks/).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

from wflow.kernels.target import _FM, _OPTS, _f64_as_i64, _i64_as_f64

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm split: k·_LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10
_ROUND_MAGIC = 6755399441055744.0  # 1.5·2^52: adding it rounds to an integer (ties to even)
_EXP_LO = -708.0
_EXP_HI = 709.0
# e^r ≈ Σ_k C_k r^k, |r| ≤ ln2/2: degree-10 interpolant at the Chebyshev nodes (computed in
# long double, rounded to float64); truncation error 4.5e-16 relative (Taylor would need 12)
_C1 = 1.0000000000000067
_C2 = 0.5000000000000006
_C3 = 0.16666666666554397
_C4 = 0.04166666666657336
_C5 = 0.008333333385670185
_C6 = 0.0013888888932453442
_C7 = 0.00019841170267682917
_C8 = 2.4801504368699118e-05
_C9 = 2.764018186397757e-06
_C10 = 2.762635356469098e-07
# 2^r ≈ 1 + r Σ_k E_k r^(k−1), |r| ≤ 1/2: the degree-10 interpolant at the Chebyshev nodes of
# (2^r − 1)/r (mpmath, 50 digits, rounded to float64); 6.7e-16 relative in float64 Horner
_E1 = 0.6931471805599462
_E2 = 0.24022650695910075
_E3 = 0.05550410866465167
_E4 = 0.009618129107618665
_E5 = 0.0013333558200794592
_E6 = 0.00015403530424776529
_E7 = 1.5252672924850737e-05
_E8 = 1.3215451633221434e-06
_E9 = 1.0205905413765595e-07
_E10 = 7.070977866508138e-09


# The flags must be explicit: numba otherwise inherits the caller's fastmath flags
# (ConfigStack), and "reassoc" would license folding (t + M) − M = t or merging the ln2 split.
# "contract" (FMA) is harmless here: t still rounds to an integer, k·ln2_hi is exact.
_EXP_FM = {"contract"}


@njit(cache=True, error_model="numpy", fastmath=_EXP_FM)
def _exp_fast(x):
    r"""Branch-free :math:`e^x` for float64, ``x`` clamped to ``[-708, 709]``.

    ``x = k ln2 + r`` with ``k = round(x/ln2)`` (magic-number rounding) and ``|r| ≤ ln2/2``
    (Cody–Waite, ln2 split in two); ``e^r`` by a degree-10 polynomial (Horner);
    ``2^k`` by writing ``k + 1023`` into the exponent bits. Compiled with FMA contraction
    only (the rounding trick and the split reduction must not be reassociated). On the
    clamped range this is :func:`_exp_shifted` (k + 1023 fits the exponent field there).
    """
    return _exp_shifted(min(max(x, _EXP_LO), _EXP_HI))


# float32 version: same scheme, int32 bits, degree-6 Chebyshev interpolant (error ≈ 1e-7)
@intrinsic
def _pow2_from_rounded_f32(typingctx, t):
    """2^k as float32 from t = k + 1.5·2^23 (float32): the exponent field set to k + 127,
    in 32-bit integer arithmetic (LLVM bitcast, add, and, shl, bitcast)."""
    if isinstance(t, types.Float) and t.bitwidth == 32:

        def codegen(context, builder, sig, args):
            i32 = context.get_value_type(types.int32)
            bits = builder.bitcast(args[0], i32)
            bits = builder.add(bits, i32(127))
            bits = builder.and_(bits, i32(0xFF))
            bits = builder.shl(bits, i32(23))
            return builder.bitcast(bits, context.get_value_type(types.float32))

        return types.float32(t), codegen
    return None


_F0 = np.float32(0.0)
_F_LOG2E = np.float32(1.4426950408889634)
_F_LN2_HI = np.float32(0.693359375)  # 0.693359375 + (-2.12194e-4) = ln 2 (cephes split)
_F_LN2_LO = np.float32(-0.00021219444170128554)
_F_ROUND_MAGIC = np.float32(12582912.0)  # 1.5·2^23
_F_EXP_LO = np.float32(-87.0)
_F_EXP_HI = np.float32(88.0)
_F_C2 = np.float32(0.5)
_F_C3 = np.float32(0.16666415333747864)
_F_C4 = np.float32(0.04166635125875473)
_F_C5 = np.float32(0.00837512593716383)
_F_C6 = np.float32(0.0013941108481958508)
_F1 = np.float32(1.0)


@njit(cache=True, error_model="numpy", fastmath=_EXP_FM)
def _exp_fast32(x):
    """Branch-free float32 :math:`e^x`, x clamped to [-87, 88] (as :func:`_exp_fast`)."""
    x = min(max(x, _F_EXP_LO), _F_EXP_HI)
    t = x * _F_LOG2E + _F_ROUND_MAGIC
    k = t - _F_ROUND_MAGIC
    r = (x - k * _F_LN2_HI) - k * _F_LN2_LO
    p = _F_C6
    p = p * r + _F_C5
    p = p * r + _F_C4
    p = p * r + _F_C3
    p = p * r + _F_C2
    p = p * r + _F1
    p = p * r + _F1
    return p * _pow2_from_rounded_f32(t)


@njit(cache=True, error_model="numpy", boundscheck=False)
def _fast_exp_array_impl(x, out):
    for i in range(x.size):
        out[i] = _exp_fast(x[i])


@njit(cache=True, error_model="numpy", boundscheck=False)
def _fast_exp_array_impl32(x, out):
    for i in range(x.size):
        out[i] = _exp_fast32(x[i])


def fast_exp_array(x):
    """The kernel's polynomial exponential applied to an array, for tests.

    float64 (default): inputs clamped to ``[-708, 709]`` (``e^{-1000}`` returns ``e^{-708}``).
    float32 input: the float32 kernel exponential, inputs clamped to ``[-87, 88]``.
    """
    if np.asarray(x).dtype == np.float32:
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty_like(x)
        _fast_exp_array_impl32(x.reshape(-1), out.reshape(-1))
        return out
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    _fast_exp_array_impl(x.reshape(-1), out.reshape(-1))
    return out


@njit(parallel=True, fastmath=_FM, **_OPTS)
def _exp_rate_impl(x, reps, out):
    """out[w] = Σ_r Σ_j e^{x_j − r·2⁻³⁰} for each worker w (x small: in L1)."""
    for w in prange(out.size):
        acc = 0.0
        for r in range(reps):
            c = r * 9.313225746154785e-10
            t = 0.0
            for j in range(x.size):
                t += _exp_fast(x[j] - c)
            acc += t
        out[w] = acc


def fast_exp_rate(seconds=0.3):
    """Polynomial exponentials per second on all of numba's threads (each summing
    :func:`_exp_fast` over an L1-resident block, the pair loop's inner work without the
    loads): the exponential-bound rate of the pair pass. Median of a few timings."""
    import time

    x = np.linspace(-3.0, 0.0, 1024)
    nth = max(1, numba.get_num_threads())
    out = np.empty(nth)
    _exp_rate_impl(x, 1, out)  # compile / warm up
    reps = 64
    while True:
        t0 = time.perf_counter()
        _exp_rate_impl(x, reps, out)
        t = time.perf_counter() - t0
        if t > seconds / 5 or reps > 1 << 26:
            break
        reps *= 4
    rates = [nth * reps * x.size / t]
    for _ in range(4):
        t0 = time.perf_counter()
        _exp_rate_impl(x, reps, out)
        rates.append(nth * reps * x.size / (time.perf_counter() - t0))
    rates.sort()
    return rates[len(rates) // 2]


@njit(inline="always", error_model="numpy", fastmath=_EXP_FM)
def _scaled_poly(r, t, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10):
    r"""The tail of both exponentials: :math:`p = 1 + r(c_1 + r(c_2 + \dots + r c_{10}))`
    (Horner), then :math:`p\,2^k` with k the rounded integer held in the low bits of
    ``t = y + 1.5·2^52``: an integer add of k to p's exponent field, exact (the same bits as
    the product; p ∈ [0.7, 1.42] and k ∈ [−1021, 1023] keep the exponent normal), on the
    integer pipes instead of a multiply."""
    p = c10
    p = p * r + c9
    p = p * r + c8
    p = p * r + c7
    p = p * r + c6
    p = p * r + c5
    p = p * r + c4
    p = p * r + c3
    p = p * r + c2
    p = p * r + c1
    p = p * r + 1.0
    return _i64_as_f64(_f64_as_i64(p) + (_f64_as_i64(t) << 52))


@njit(cache=True, error_model="numpy", fastmath=_EXP_FM)
def _exp_shifted(x):
    r""":func:`_exp_fast` without the clamp and the exponent mask, for
    :math:`x \in [-708, 709]` only (there the same bits as :func:`_exp_fast`).

    The pair loops with the fixed shift call it: their arguments are
    :math:`s_{ij} - c_h \in [-2c_h, 0]` with :math:`2c_h <` :data:`FIXED_SHIFT_LIMIT`
    :math:`= 700` (up to the rounding of the logit), so the clamp is never active and
    :math:`k + 1023 \in [13, 1024]` fits the exponent field. Three vector operations fewer per
    exponential (the pair loop is bound by its arithmetic: ≈ 37 per vector of 4 pairs).
    """
    t = x * _LOG2E + _ROUND_MAGIC
    k = t - _ROUND_MAGIC
    r = (x - k * _LN2_HI) - k * _LN2_LO
    return _scaled_poly(r, t, _C1, _C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10)


@njit(cache=True, error_model="numpy", fastmath=_EXP_FM)
def _exp2_shifted(y):
    r""":math:`2^y` for :math:`y \in [-1021, 1023]`: the exponential of the symmetric pair loop,
    which computes its logits in base 2, :math:`y = (s_{ij} - c_h)\log_2 e` (β log₂e and
    c_h log₂e folded into its row constants).

    .. math:: 2^y = 2^k\,2^r,\quad k = \operatorname{round}(y),\quad r = y - k \in [-\tfrac12, \tfrac12]

    r is exact (Sterbenz), so there is no ln 2 split: against :func:`_exp_shifted` three vector
    operations fewer per exponential (one addition instead of a multiply-add and two
    multiply-adds), the polynomial is the same degree. Relative error 7e-16 for 2^y; the base-2
    logit carries the rounding of s − c and of its scaling by log₂e, ~|s − c|·2^-52 relative
    in e^{s − c}, as the natural-base logit does."""
    t = y + _ROUND_MAGIC
    k = t - _ROUND_MAGIC
    r = y - k
    return _scaled_poly(r, t, _E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9, _E10)
