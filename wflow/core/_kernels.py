r"""Numba kernels of the attention field [model §2–4, §6]: one fused pass over the pairs.

:func:`fused_pass` evaluates, for a batch of ``P`` paths, every quantity that
:func:`wflow.core._reference.field_reference` returns, without ever forming an
``n × n`` array.

Design
------
*Pair pass.* For each (path p, head h, row i) one loop over the columns j accumulates,
with ``e_ij = exp(s^h_ij − c)``,

    S0 = Σ_j e_ij,      SX = Σ_j e_ij x_j  (d),      SI = Σ_j e_ij (1 + ⟨x_i, x_j⟩²).

Everything else is linear in these sums: ``Σ_j e_ij V_h x_j = V_h SX`` and
``Σ_j e_ij D_h x_j = D_h SX``, so the value and gradient directions, ``∂_D E`` and
the Itô sum come out of a cheap per-row combine (no ``D_h x_j`` / ``V_h x_j`` buffers).
The logit is ``s_ij = ⟨q_i, x_j⟩`` with ``q_i = β D_h x_i`` computed once per row, so
the j-loop only reads the tokens, stored as structure of arrays ``(d, n_pad)``,
zero-padded to a multiple of the vector length: the loop runs over whole vectors and
the padded (or causally masked) weights are set to 0 by a select, instead of a scalar
remainder. d = 3 has a fully fused loop (:func:`_row_sums3`); other d use chunks of
512 columns (logits, exponentials, then the sums, each a simple vectorised loop).

*Large d* (d ≥ :data:`BLAS_MIN_D`, n ≥ :data:`BLAS_MIN_N`): :func:`_pair_pass_blas` computes
the same sums by tiles of T × T pairs with BLAS matmuls (logits L = Q_I X_Jᵀ with
Q = β X D_hᵀ, E = e^{L−c} and its sums in one compiled loop, SX_I += E X_J, the Gram tile
X_I X_Jᵀ for the Itô sum). With the fixed shift and symmetric D_h a tile gives the sums of
its rows *and* of its columns (e_ij = e_ji): half the logits and exponentials. A tile stays
in cache between its three steps. OpenBLAS results depend on its thread count (measured),
so BLAS is limited to one thread during the pass (threadpoolctl; without threadpoolctl the
numba pair pass is used) and the tiles run in a pool of ``numba.get_num_threads()`` Python
threads, in rounds of disjoint block pairs (fixed order of every sum). From d ≥
:data:`BLAS_EPILOGUE_MIN_D` the combine runs as matmuls per row block too
(:func:`_epilogue_blas`: Ȳ V_hᵀ, SX D_hᵀ and the ∂_D E partial (e X)ᵀ SX per head).

*Symmetric pairs* (e_ij = e_ji for symmetric D_h and the fixed shift), d = 3:
:func:`_sym3` computes each unordered pair once (used when :func:`_use_sym` holds:
float64, polynomial exp, uniform masses, no mask, every head on the fixed shift,
n ≤ :data:`SYM_MAX_N`). Groups of four rows run over the columns j ≥ i in whole vectors;
each e is added to its row sums (vector registers) and to the column sums of j (a vector
read-modify-write); the diagonal counts 1/2 in each. Four rows per group keep four
exponential chains in flight: with one or two rows the loop was bound by the latency of the
polynomial (0.8–1.3×); with four, measured 1.5–1.6× at n = 4096 and 1.2–1.3× at n = 200
(one thread, CPU time, AVX2, 2026-11-30). One loop runs over every (group,
vector) of a band, written with explicit vectors (:mod:`wflow.core._simd`) and no fast-math
flags: faster at small n, and the same bits in every compilation (:func:`_sym_band3`).
Work items are (path, head,
row band); the bands (:func:`_sym_bands`, a function of n and H only) have their own column
sums, added in band order afterwards (:func:`_sym_reduce3`), so the bits never depend on
the thread count or the path batch. Earlier attempts, for the record: a row triangle with
column sums as views of one 2-D array (not vectorised: "unsafe indirect dependence");
8 × 128 blocks of e then a column update (0.8–1.2×).

*Small n, many heads* (the paper's regime, n = 200, H = 100, P = 10; measured 2026-11 on a
2-core AVX2 machine, CPU time of one thread): the row loop alone runs at the large-n rate
per padded column; what is lost is the padding (200 → 224 columns with 32, 208 with 16),
the per-(row, head) combine and the per-row call and reductions. Now (d = 3, uniform
masses, polynomial exp, fixed shift): :func:`_tile_sums3_fixed` computes the rows of a tile
for every head in one compiled call with the loops inline (before: three nested calls per
head and one per row, each with reference counts of its array arguments), each row as one
unmasked loop over the whole vectors before ``jend`` and one masked loop over the last
vector (n = 200: 200 columns), with :func:`_exp_shifted` (no clamp: the fixed shift bounds
its argument); the row-sum arrays are reused between calls (:func:`_row_sum_arrays`), and
:func:`_head_epilogue3` runs every head of a tile in one call. Together 1.3× at both
n = 200, H = 100, P = 10 and n = 4096, H = 8 (results change in the last bits only).
Tried and not kept:
2 rows per j-loop with the Itô sum 0.7× (register spills: 16 ymm registers), rows
vectorised across the tile (4 rows, j sequential) 0.95×, the symmetric pairs as a
row triangle with column sums in L1 0.43× (the read-modify-write loop is not vectorised).

*Precision.* float32 tokens with d = 3 run the pair loop in float32 (16 lanes;
:func:`_exp_fast32`; sums in float32 over chunks of 512 columns, then float64);
everything after the pair loop is float64.

*Stabilisation* [model §2]. On the sphere ``|s^h_ij| ≤ c_h = β‖D_h‖₂``. When
``2 c_h < 700`` the fixed shift ``c_h`` is used (no overflow, no row can
underflow); otherwise each row is shifted by its own maximum (a first cheap pass).
``Z_h(x_i) = e^{shift}·S0/n`` is finite while the shift is below ≈ 709.

*One job per evaluation.* The work items are (path p, tile of R rows), R a
function of d only (:func:`_tile_rows`); an item computes the row sums of its rows for every
head, then head after head the per-row combine (:func:`_head_epilogue`: partition, the
head's terms of velocity, gradient and the scalar diagnostics in per-row accumulators,
e^{shift} once per head, D_h and V_h in registers for d = 3, the tile's partial sum of
∂_D E), then the per-row outputs (:func:`_rows_epilogue`). Every row adds its heads in the
order h = 0, 1, … as a row-by-row loop would (the same bits). After the
loop, in the same compiled function, the sums over rows and over tiles run sequentially
(:func:`_finish`) on the calling thread. The threads take items from the job's atomic
counter (:func:`_fetch_add`): a dynamic schedule, so a thread preempted by another process
delays at most its current item instead of a static half of the loop. The symmetric d = 3
pass takes one job with one band (items: (path, chunk of ≤ 16 heads) with at least as many
paths as threads; otherwise (path, head); the thread that completes a path's last item runs
its per-row outputs and sums), and with several bands two per path for the pair sums and
their band reduction, then one for the combine (the stages of :func:`_sym3`).

*Threads: wflow's own pool* (:mod:`wflow.core._pool`). The passes are not numba
``prange`` loops (OpenMP regions) but jobs of a pool of ``numba.get_num_threads() − 1``
worker threads: each pass is a ``nogil`` function ``body(role, …)`` that the calling thread
and the workers run at once, taking items from the job's counter; the caller then waits for
the items still running and runs the tail. Idle workers spin (a ``pause`` loop, ≤ 2 ms)
between the passes of a run while the machine is otherwise idle, and sleep as soon as the
kernel preempts them for other work: neither OpenMP wait policy did both (passive: 8–11%
slower alone on VMs whose idle vCPUs halt; spinning: 10–40× slower beside other work).
The job counter's slots (:data:`_C_NEXT` …) are listed at :func:`_job_counter`.

*Sharing the machine.* ``wflow/__init__.py`` sets ``OMP_WAIT_POLICY=passive`` (and
``KMP_BLOCKTIME=0``) unless the user set them, before numba loads its OpenMP runtime (still
used by :func:`fast_exp_rate` and by other libraries in the process, e.g. torch): idle
OpenMP threads sleep instead of spinning (GNU OpenMP spins ≈ 300 000 iterations, several
ms, at every barrier by default, which made runs 10–40× slower beside other work). It also
puts OpenMP before TBB in numba's threading-layer order (numba takes TBB first wherever it is
installed; under TBB a default run beside two busy processes took 2.43× its time alone,
against 1.54× under OpenMP), and ``OPENBLAS_THREAD_TIMEOUT=4`` (idle OpenBLAS workers
sleep instead of spinning ≈ 0.1 s after each threaded call).

*Determinism.* Each output slot (and each tile partial) is written by exactly one work
item, every row's sums are computed by the same code whatever the schedule, and the
reductions over rows and tiles are done afterwards in a fixed sequential order. Results are
bit-identical whatever the number of threads, the schedule or the path batch. (The j-loop
sums are vectorised,
with ``fastmath={"reassoc", "contract"}`` on the accumulation loops only: the
results can differ in the last bits between machines with different SIMD widths,
never between runs or thread counts on one machine.)

*Weighted points* [model §5b]. ``weights`` (masses w_j) enter as relative masses
``u_j = n w_j``: the exponentials are multiplied by u_j before the column sums (a separate
loop in the chunked path, a fused loop :func:`_row_sums2w` for d = 2; d = 3 takes the chunked
path) and the row terms and the ∂_D E partials by u_i. ``weights=None`` passes an empty
``U`` of shape (P, 0) to the parallel passes: one compiled specialisation serves both (a
runtime test per row or per tile picks the unweighted loops, which are unchanged, bit for bit;
a separate ``U = None`` specialisation cost ≈ 20 s of compilation per pass on a cold cache).
The BLAS pair pass gives its tile kernels masses of 1.0 for uniform masses: multiplying by
1.0 is exact (also inside an FMA), so the bits are those of the unweighted loops, and the
tile kernels have one compiled form (≈ 10 s less compilation on a cold cache; the libm
form's sums, vectorised differently, changed in the last bits).

*Exponential.* ``fast_exp=True`` uses :func:`_exp_fast`, a branch-free
polynomial exponential (Cody–Waite range reduction, degree-10 polynomial,
2^k built by bit-casting) that LLVM vectorises; ``fast_exp=False`` uses libm.
"""

from __future__ import annotations

import contextlib
import functools
import math
import platform
import threading
from typing import NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from wflow.core import _pool
from wflow.core._simd import vector_ops

__all__ = ["NORM_CODES", "FieldPass", "fused_pass", "fast_exp_array", "fast_exp_rate", "sym_band_count",
           "takes_sym_pass"]


class FieldPass(NamedTuple):
    """The results of :func:`fused_pass`, per path, with the meaning of
    :func:`wflow.core._reference.field_reference` (a tuple: unpacks in this order)."""

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

NORM_CODES = {"head": 0, "joint": 1, "none": 2}

#: Above this value of 2·β‖D_h‖₂ a fixed shift could underflow whole rows: use row maxima.
FIXED_SHIFT_LIMIT = 700.0
#: The same for the float32 pair loop (float32 underflows below e^-87).
FIXED_SHIFT_LIMIT_F32 = 80.0
#: Column chunk of the pair loop (fixed: the rounding of the row sums depends on it).
_CH = 512


def _target_features():
    """(CPU name, feature list) of numba's compile target: ``NUMBA_CPU_NAME`` /
    ``NUMBA_CPU_FEATURES``, else the host's features; None for the list when a name is set
    without one (the name's own features, unknown here). Raises if numba cannot say."""
    from numba.core import config

    name = config.CPU_NAME or ""
    feats = config.CPU_FEATURES
    if feats is None and not name:
        import llvmlite.binding as ll

        feats = ll.get_host_cpu_features().flatten()
    return name, feats


def _pad_granularity():
    """Column padding (float64 elements) for numba's compile target: 16 when the target
    surely lacks AVX2 (``NUMBA_CPU_NAME=generic``, or the host's or ``NUMBA_CPU_FEATURES``'
    feature list says ``-avx2``), else 32.

    The pair loops run over whole vectors only if the padding is a multiple of the vector
    width × interleave LLVM picks for them: 4 × 4 with AVX2, 8 × 4 with AVX-512. Padding
    columns carry weight 0 and add exact zeros to the lane sums, so the granularity changes
    speed only, never the results of one machine. The padding also sets the symmetric pass's
    explicit vectors, :data:`_VQ` = padding/4 floats (:func:`_sym_band3`): with AVX2 8 floats
    (two 256-bit registers per vector, so each step has twice the exponentials in flight)
    against 4 [measured with ``NUMBA_CPU_NAME=znver3`` and the AVX-512 features off, one
    thread, best of 25, four alternations]: (200, 100, 3) P = 10 1.02 → 1.27–1.32·10⁹
    pair-heads/s, (4096, 8, 3) 1.14 → 1.29–1.32·10⁹ (a loop per group padded to 16:
    1.27–1.32 and 1.15–1.25). Padding to 16 with AVX2 makes the row pass 4% faster at
    n = 200, where 32 pads 200 columns to 224."""
    try:
        name, feats = _target_features()
    except Exception:  # pragma: no cover - unknown target: the safe (wider) padding
        return 32
    # whole tokens (the host's list holds "-avx512fp16" on AVX-512 CPUs without FP16, AMD Zen 4)
    if name == "generic" or "-avx2" in (feats or "").split(","):
        return 16
    return 32


#: Column padding granularity (a multiple of every SIMD width × unroll LLVM picks for the
#: target, :func:`_pad_granularity`; a compile-time constant of the cached kernels, which
#: numba keys by CPU name and features).
_VW = _pad_granularity()
_VW32 = 2 * _VW  # the same for float32 (twice as many lanes)
#: The granularity of the last, masked column block of the fixed-shift d = 3 rows (n = 200:
#: 200 columns, not 208) and the lanes of the symmetric pass's explicit vectors: 8 floats
#: (AVX-512: one register; AVX2: two), 4 without AVX2.
_VQ = _VW // 4

_FM = {"reassoc", "contract"}  # for the accumulation loops only (never for _exp_fast)
_OPTS = dict(cache=True, error_model="numpy", boundscheck=False)


#: Stack alignment (bytes) of the functions compiled by :func:`_kernel_pipeline`: one AVX-512
#: register.
_STACK_ALIGN = 64


def _kernel_pipeline(noalias=True):
    """A numba compiler pipeline for the hot loop kernels: the function's frame is aligned to
    :data:`_STACK_ALIGN` bytes (LLVM's ``alignstack``), and with ``noalias`` every pointer
    argument is marked ``noalias`` (numba's internal ``Flags.noalias``, which its parallel
    gufuncs use): LLVM then needs no runtime overlap checks before vectorising a loop that
    writes some array arguments and reads others. ``noalias`` only for functions whose array
    arguments never share memory that one of them writes (:func:`_sym_band3`).

    The alignment: the symmetric pair loop keeps more live vectors than
    AVX-512 has registers and spills ≈ 45 of them per iteration to its stack frame, which the
    x86-64 ABI aligns to 16 bytes only; a 64-byte spill then usually spans two cache lines.
    Where it landed depended on the caller's stack depth (the process's random stack start and
    the call path): the same band at n = 200 took 21.3–36.4 µs (typically 23.3) over call
    paths and processes, and 21.2–22.7 µs with the aligned frame (aligned spills, same bits).
    None (the default pipeline: the same results) if this numba lacks the hooks."""
    try:
        from numba.core import lowering, typed_passes
        from numba.core.compiler import Compiler, DefaultPassBuilder, Flags
        from numba.core.compiler_machinery import register_pass

        if noalias and "noalias" not in Flags.options:
            return None
    except Exception:  # pragma: no cover - another numba layout
        return None

    class AlignedLower(lowering.Lower):
        def post_lower(self):
            super().post_lower()
            attrs = self.function.attributes
            attrs.alignstack = _STACK_ALIGN
            attrs.add("nounwind")  # (numba functions return errors; llvmlite prints no
            # attributes for an empty set, alignstack included)

    @register_pass(mutates_CFG=True, analysis_only=False)
    class AlignedNativeLowering(typed_passes.NativeLowering):
        _name = "wflow_aligned_native_lowering" + ("_noalias" if noalias else "")

        @property
        def lowering_class(self):
            return AlignedLower

    class KernelCompiler(Compiler):
        def define_pipelines(self):
            if noalias:
                self.state.flags.noalias = True
            pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
            pm.passes = [(AlignedNativeLowering if p is typed_passes.NativeLowering else p, d)
                         for p, d in pm.passes]
            pm.finalize()
            return [pm]

    return KernelCompiler


#: The pipeline of :func:`_kernel_pipeline` as ``njit`` options: aligned frame and noalias
#: arguments, or the aligned frame alone.
_NOALIAS_COMPILER = _kernel_pipeline()
_NOALIAS = {} if _NOALIAS_COMPILER is None else {"pipeline_class": _NOALIAS_COMPILER}
_ALIGNED_COMPILER = _kernel_pipeline(noalias=False)
_ALIGNED = {} if _ALIGNED_COMPILER is None else {"pipeline_class": _ALIGNED_COMPILER}


# ---------------------------------------------------------------------------------------------
# Branch-free exponential
# ---------------------------------------------------------------------------------------------
@intrinsic
def _i64_as_f64(typingctx, x):
    """Reinterpret the bits of an int64 as a float64 (LLVM bitcast)."""
    if isinstance(x, types.Integer) and x.bitwidth == 64:

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], context.get_value_type(types.float64))

        return types.float64(x), codegen
    return None


@intrinsic
def _f64_as_i64(typingctx, x):
    """Reinterpret the bits of a float64 as an int64 (LLVM bitcast)."""
    if isinstance(x, types.Float) and x.bitwidth == 64:

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], context.get_value_type(types.int64))

        return types.int64(x), codegen
    return None


@intrinsic
def _unowned(typingctx, arr):
    r"""The array ``arr`` without its owner: the same data, shape and strides with a NULL
    meminfo and parent (the same numba type, so no new compilation).

    numba counts references to an array's meminfo with atomic (``lock``-prefixed)
    instructions whenever compiled code makes a view of it or passes it to a function that is
    not inlined: in the symmetric pass that is dozens per (path, head) (the token rows, the
    pair loop's and the combine's arguments), each a full memory barrier, and the two threads'
    counts of a shared array (tokens, D, outputs) contend for one cache line. With NULL
    meminfos numba's ``NRT_incref``/``NRT_decref`` return at once. Measured [one process, best
    of 12 evaluations, alternated trees]: (200, 100, 3) P = 10 on one thread
    1.751/1.754 → 1.789/1.773·10⁹ pair-heads/s, on two 3.326/3.380 → 3.421/3.428; (4096, 8, 3)
    unchanged (3.68–3.70); the general pass with point masses, (200, 100, 3) P = 10, best of 25:
    51.4–56.4 → 49.6–52.2 ms. Only for a job body's arguments: the Python caller holds every
    one of them until the job is over, and nothing in the body keeps a reference beyond it."""
    if isinstance(arr, types.Array):

        def codegen(context, builder, sig, args):
            v = args[0]
            elements = v.type.elements  # (meminfo, parent, nitems, itemsize, data, shape, strides)
            v = builder.insert_value(v, ir.Constant(elements[0], None), 0)
            return builder.insert_value(v, ir.Constant(elements[1], None), 1)

        return arr(arr), codegen
    return None


def _target_has_fma():
    """Whether numba's compile target has fused multiply-add instructions (False for
    ``NUMBA_CPU_NAME=generic`` or a feature list with ``-fma``)."""
    try:
        name, feats = _target_features()
    except Exception:  # pragma: no cover - unknown target: no FMA (correct everywhere)
        return False
    if name == "generic":
        return False
    return feats is None or "+fma" in feats.split(",")


_HAS_FMA = _target_has_fma()


@intrinsic
def _fma(typingctx, a, b, c):
    """``a·b + c`` rounded once (``llvm.fma.f64``): an intrinsic call, never reassociated or
    contracted with the fast-math code around it, so the same bits in every loop that uses
    it. The loops use it only where the target has FMA instructions (:func:`_ito_term`);
    elsewhere it is a libm call (correct, scalar: the cosine table of the tests)."""
    if all(isinstance(t, types.Float) and t.bitwidth == 64 for t in (a, b, c)):

        def codegen(context, builder, sig, args):
            ty = context.get_value_type(types.float64)
            fn = builder.module.declare_intrinsic("llvm.fma", [ty],
                                                  ir.FunctionType(ty, [ty, ty, ty]))
            return builder.call(fn, args)

        return types.float64(a, b, c), codegen
    return None


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
def _tile_sums3_fixed(Xt, D, X, beta, shift, rowmax, causal, want_ito, p, i0, i1, buf, q,
                      S0, SX, SI, RS):
    r"""Rows i0..i1−1 of path p for every head, d = 3, uniform masses, polynomial exp.

    Heads with the fixed shift :math:`c = c_h` (``2c_h < 700``): per row one loop over the
    whole vectors of columns before ``jend`` without a mask, then the last partial vector
    block masked (weights beyond ``jend`` 0; columns zero-padded to _VW), with the
    unclamped :func:`_exp_shifted` and the shift folded into the logit,
    :math:`((-c + q_0 u_0) + q_1 u_1) + q_2 u_2` (three FMAs). Returns S0, SX and
    SI = Σ_j e_ij (1 + ⟨x_i,x_j⟩²) in the arrays. Heads with the row-max shift go to
    :func:`_tile_sums3`.

    All heads in one compiled function and the loops inline: no call and no reference
    counting of the column views per row or per head (at n = 200 the calls, the mask and
    the clamp cost ≈ 1/4 of the pair loop; measured on AVX2, one thread).
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
                        i0, i1, buf, q, S0, SX, SI, RS)
            continue
        _rows3_fixed(x0, x1, x2, D[p, h], X, beta, shift[p, h], causal, want_ito, p, h, i0, i1,
                     S0, SX, SI, RS)


@njit(fastmath=_FM, inline="always", **_OPTS)
def _rows3_fixed(x0, x1, x2, Dh, X, beta, c, causal, want_ito, p, h, i0, i1, S0, SX, SI, RS):
    """The body of :func:`_tile_sums3_fixed` for one head (inlined into it by numba)."""
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
                S0, SX, SI, RS):
    """:func:`_tile_sums64` for d = 3, uniform masses, polynomial exp: the column views and
    D_h taken once per tile (not per row), q_i = β D_h x_i in scalars summed in the order of
    the generic loop (no fast-math flags here: the same bits)."""
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


# ---------------------------------------------------------------------------------------------
# Symmetric d = 3 pass: every unordered pair once
# ---------------------------------------------------------------------------------------------
#: Rows per column loop of the symmetric pass (four independent exponentials in flight).
_SYM_ROWS = 4
#: The symmetric d = 3 pass runs up to this many tokens (measured 1.5× the row pass at
#: n = 32 768, H = 4, where a band's column sums, 5·n floats, are in L3; the row pass above).
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
def _sym_rows_out(S0h, SXh, SIh, RSh, C0, C1, C2, C3, C4, Rp, i_lo, i_hi, c, own):
    """Rows ``i_lo..i_hi−1``'s sums of :func:`_sym_band3` once the band is done: the row part
    ``Rp[i] = (Σ e, Σ e x_j)`` plus the column part C_k[i]; for the Itô sum only the column
    part, doubled (:func:`_sym_band3`). One loop over the rows, which LLVM vectorises (it
    was four scalar blocks of ≈ 50 instructions after each group of four rows; the same
    arithmetic, the same bits)."""
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
#: some pair usually collides, and (4096, 8, 3) took 75–98 ms on one thread depending on
#: where the allocator put the weights (37.6–53.7 ms on two). Now every row of these arrays
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


_V = vector_ops(_VQ, _ROUND_MAGIC, (_E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9, _E10))
_vload, _vstore, _vsplat, _vbcast, _vzero = _V.load, _V.store, _V.splat, _V.bcast, _V.zero
_vadd, _vmul, _vfma, _vfma_exact, _vexp2, _vhsums = (_V.add, _V.mul, _V.fma, _V.fma_exact,
                                                     _V.exp2, _V.hsums)
_vhsum = _V.hsum
_vmul_rounded = _V.mul_rounded
_vadd_rounded, _vsub, _vdiv, _vload3 = _V.add_rounded, _V.sub, _V.div, _V.load3
_vstore3_groups = _V.store3_groups
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
    operation rounded on its own (:func:`_sym_row_q`) [measured: 0.33 µs per head at
    n = 200 in scalars, ≈ 2% of the paper case]. Returns the loop's steps: every group's
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
def _sym_band3(x0, x1, x2, Dh, beta, c, n, i_lo, i_hi, C0, C1, C2, C3, C4, Wf, Rp, own, S0h,
               SXh, SIh, RSh, ito, Gf, gs):
    r"""Rows ``i_lo..i_hi−1`` of (path p, head h), d = 3, fixed shift c, symmetric D_h, each
    unordered pair once:

    .. math:: e_{ij} = e^{\langle q_i, x_j\rangle - c} = 2^{\langle q'_i, x_j\rangle - c'} = e_{ji},
        \qquad q'_i = (\beta\log_2 e) D_h x_i,\quad c' = c\log_2 e

    (base 2: :func:`_exp2_shifted`, here lane-wise: :mod:`wflow.core._simd`).

    Groups of four rows ``i..i+3`` run over the columns ``j ≥ _VQ⌊i/_VQ⌋`` in whole vectors,
    with weights ω_rj (:func:`_sym_flat_weights`): 0 for j < i+r or j ≥ n, 1/2 for j = i+r,
    1 for j > i+r. Each weighted e is added to the row sums of i+r (Σ e, Σ e x_j) and to the
    column sums of j in ``C0 … C4`` (n_pad each, the rows of one (5, n_pad) buffer): Σ e,
    Σ e x_{i+r}, Σ e⟨x_{i+r}, x_j⟩². The diagonal counts 1/2 in each, so row i gets e_ii
    once. When a group ends its four rows' parts go to ``Rp[i + r]`` (≥ i_hi + 3 rows of 4);
    after the last :func:`_sym_rows_out` writes ``S0 = row part + C0[i]`` etc. for every row
    of the band in one vectorised loop. Against the row pass: half the exponentials and
    logits (1.5–1.6× at n = 4096, 1.2–1.3× at n = 200, one thread).

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
    without Brownian noise; 10–16% less time).

    **One loop** over every (group, vector of columns) of the band, with
    explicit vectors: each row's sums stay lane by lane in registers across the group's
    vectors and are added across lanes when its group ends, inside the loop: all sixteen at
    once (:func:`_vhsums`, a transposing tree that stores the group's ``Rp`` rows as whole
    vectors; per vector the order of LLVM's own reduction) [by construction
    fourteen two-vector folds (two shuffles and an add each) and two vector stores per
    group, against sixteen halving trees (six each) and sixteen scalar stores: the band at
    n = 200, one thread, 20.1 → 18.7 µs per head without Itô
    sums, 21.6 → 19.9 with the table, 23.9 → 22.4 in the loop; the same bits].
    A loop per group that LLVM vectorises is short at small n
    (n = 200: 13 vectors on average) and each of its ends cost about one iteration (the
    exit, the lane sums and the next loop's start wait for the
    last iteration's chain of dependent operations: ≈ 190 instructions per step, and the
    out-of-order window holds less than two): 12% of the band at n = 200 against n = 1600.
    And the weights differ from 1 only in a group's first vector (the diagonal), its last when
    n is not a multiple of the vector (padding) and a band's short last group: only those
    steps multiply by them (four products fewer per step, on the exponentials' ports).
    Measured against the loop per group (band alone, one thread, AVX-512, paired medians of
    150 alternations): n = 200 0.911 of its time (no Itô sums), 0.915 (table); n = 1600
    0.954 (none), 0.98 (in the loop); whole evaluations (1 thread, best of 25, 10 alternated
    processes) (200, 100, 3) P = 10 1.710 → 1.782·10⁹ pair-heads/s, (4096, 8, 3)
    1.836 → 1.877·10⁹. The row parts had the same bits as the loop per group there.

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
    with 4 it was 8–22% slower than the loop per group, with 8 as fast at n = 200 and
    5–10% faster at n = 4096.

    Compiled with every pointer argument ``noalias`` (:func:`_kernel_pipeline`, which also
    aligns its frame): the arguments are separate arrays or disjoint rows of one.
    ``Wf`` (flat, ≥ :func:`_sym_flat_room` floats): the weight table, then the rows'
    constants (:func:`_sym_flat_rows`, filled here for the band)."""
    numba.literally(ito)
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
    _sym_rows_out(S0h, SXh, SIh, RSh, C0, C1, C2, C3, C4, Rp, i_lo, i_hi, c, own)


@njit(inline="always", **_OPTS)
def _sym_band3_for(x0, x1, x2, Dh, beta, c, n, i_lo, i_hi, C, W, Rp, own, S0h, SXh, SIh, RSh,
                   want_ito, G):
    """:func:`_sym_band3` (W flat, filled by :func:`_sym_flat_weights`) with its Itô literal chosen
    from the runtime flag ``want_ito`` and the table G (rows ≥ 1: squared cosines; else
    computed in the loop)."""
    Gf = G.reshape(G.size)
    gs = G.shape[1]
    if want_ito and G.shape[0] > 0:
        _sym_band3(x0, x1, x2, Dh, beta, c, n, i_lo, i_hi, C[0], C[1], C[2], C[3], C[4], W, Rp,
                   own, S0h, SXh, SIh, RSh, 2, Gf, gs)
    elif want_ito:
        _sym_band3(x0, x1, x2, Dh, beta, c, n, i_lo, i_hi, C[0], C[1], C[2], C[3], C[4], W, Rp,
                   own, S0h, SXh, SIh, RSh, 1, Gf, gs)
    else:
        _sym_band3(x0, x1, x2, Dh, beta, c, n, i_lo, i_hi, C[0], C[1], C[2], C[3], C[4], W, Rp,
                   own, S0h, SXh, SIh, RSh, 0, Gf, gs)


@njit(inline="always", **_OPTS)
def _sym_combine_vec(Xf, xo, S0f, SXf, SIf, so, Pf, A, ao, V9, D9, es, zn, izn, one, lp, head):
    r"""One vector of rows of :func:`_sym_epilogue3`: the rows' components at ``Xf[xo:]``,
    ``SXf[xo:]`` (flat (rows, 3)), their S0, SI at ``so``, Z into ``Pf[so:]`` and the
    increments into the accumulators ``A[k, ao:]``; returns the six products
    :math:`x_a\,SX_b` (a ≤ b) of the ∂_D E block sums. Every operation rounded on its own,
    in the scalar code's order (lane by lane the bits of a scalar loop)."""
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
def _sym_combine_tail(Xp, S0h, SXh, SIh, Ph, acc, r, k, V9, D9, es, zn, izn, one, lp, head,
                      tl):
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
    t = _sym_combine_vec(tX, 0, tS0, tSX, tSI, 0, tP, tA, 0, V9, D9, es, zn, izn, one, lp,
                         head)
    for q in range(k):
        Ph[r + q] = tP[q]
        for c in range(9):
            acc[c, r + q] = tA[c, q]
    return t


#: Floats of the scratch of :func:`_sym_combine_tail`.
_SYM_TAIL = 18 * _VQ


@njit(**_OPTS, **_NOALIAS)
def _sym_epilogue3(X, D, V, lap, norm, p, h, i0, i1, R, S0r, SXr, SIr, RSr, part, dEp, acc,
                   tl):
    r"""Head h's combine of rows i0..i1−1 of path p after the symmetric pass (d = 3, fixed
    shift :math:`c_h`, uniform masses, no mask): with :math:`\bar y = SX/S0`,

    .. math::
        Z = \tfrac{e^{c}}{n} S0,\quad v \mathrel{+}= \omega\,P_x(V_h\bar y \text{ or }
        V_h x - V_h\bar y),\quad g \mathrel{+}= e^{c} D_h SX,\quad
        \partial_D E_{\text{block}} \mathrel{+}= e^{c} \textstyle\sum_{i} x_i SX_i^\top

    (ω = 1 for the head normalisation, Z otherwise), and Σ_h Z, Σ_h 1/Z, the Itô row term
    :math:`e^{c} SI` into the row accumulators ``acc[:, i − i0]`` (component-major, (9, rows));
    the ∂_D E partial of every block of R rows it covers into ``dEp[p, block, h]`` (written,
    not added: every pass writes each block of each head once).
    :math:`e^{c}` once per head, 1/S0 once per row. The fused per-path form calls it for all
    rows, the unfused form for one block (i0 a multiple of R): the same arithmetic for every
    row and block (the same bits).

    One loop over vectors of rows (:func:`_sym_combine_vec`, explicit vectors of
    :mod:`wflow.core._simd`; a last partial vector runs on zero-padded copies), each
    operation rounded on its own: the row terms have the bits of the scalar loop. The
    partial sums of ∂_D E add each block's products lane by lane over its vectors (R rows,
    :data:`_SYM_BLOCK_ROWS`, a multiple of the vector), then across lanes by
    :func:`_vhsum`'s fixed tree [not row after row: scalar chains, and an LLVM-vectorised
    rows loop reading the (rows, 3) arrays by stride-3 shuffles, were slower. In the whole
    evaluation of the paper's case,
    one thread, the combine took ≈ 1.5 ms of 22 (skipping it: 22.24 → 20.72 ms, medians of
    eight alternated fresh processes)].

    The tile sums take the six entries a ≤ b and mirror them:
    :math:`\sum_i x_i SX_i^\top = \sum_{i,j} e_{ij} x_i x_j^\top` is symmetric (e_ij = e_ji),
    so the sum over tiles of the mirrored upper triangles is that matrix up to rounding, and
    exactly symmetric. Compiled with noalias pointer arguments (the arrays it writes,
    ``part``, ``dEp``, ``acc`` and the tail's scratch ``tl``, share no memory with any
    other)."""
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
    mv = (m // _VQ) * _VQ
    b = i0 // R  # the block and the row within it (i0 is a block's first row)
    pos = i0 - b * R
    e00 = e01 = e02 = e11 = e12 = e22 = _vzero()
    for r in range(0, m, _VQ):
        if r < mv:
            t00, t01, t02, t11, t12, t22 = _sym_combine_vec(
                Xp, 3 * r, S0h, SXh, SIh, r, Ph, acc, r, V9, D9, ves, zn, izn, one, lp, head)
        else:  # the last rows (fewer than a vector)
            t00, t01, t02, t11, t12, t22 = _sym_combine_tail(
                Xp, S0h, SXh, SIh, Ph, acc, r, m - r, V9, D9, ves, zn, izn, one, lp, head, tl)
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


@njit(nogil=True, **_OPTS, **_ALIGNED)
def _sym_reduce3(role, bands, Cb, S0, SX, SI, counter):
    """Rows of band b get the column sums of the earlier bands 0..b−1 in this order, then
    SI = 2·(Itô column sums) + S0 (:func:`_sym_band3`; a job of :mod:`wflow.core._pool`;
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


@njit(**_OPTS, **_ALIGNED)
def _tile_sums64(Xt, D, X, beta, shift, rowmax, causal, want_ito, fast, p, h, i0, i1,
                 buf, cbuf, sx, q, S0, SX, SI, RS, U):
    """Row sums of rows i0..i1−1 of (path p, head h). Xt (P, d, n_pad), D (P, H, d, d),
    X (P, n, d); buf, cbuf (_CH), sx, q (d) scratch; U (P, n_pad) relative column masses
    or (P, 0) for uniform masses (weighted rows take the chunked loop, also for d = 3,
    except d = 2 with the polynomial exponential: :func:`_row_sums2w`)."""
    d = X.shape[2]
    n = X.shape[1]
    Xp = Xt[p]
    Dh = D[p, h]
    weighted = U.shape[1] > 0
    if not weighted and fast and d == 3:  # (the fused pass calls _tile_sums3_fixed instead)
        _tile_sums3(Xp, Dh, X, beta, shift[p, h], rowmax[p, h], causal, want_ito, p, h, i0, i1,
                    buf, q, S0, SX, SI, RS)
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
            if fast and d == 3:
                s0, sx[0], sx[1], sx[2], si = _row_sums3(
                    Xp[0], Xp[1], Xp[2], q[0], q[1], q[2], xi[0], xi[1], xi[2], c, jend,
                    want_ito)
                si += s0
            else:
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
def _tile_sums32(Xt, D, X, beta, shift, rowmax, causal, want_ito, p, h, i0, i1,
                 S0, SX, SI, RS):
    """float32 row sums (d = 3) of rows i0..i1−1 of (path p, head h): Xt (P, 3, n_pad)
    float32; D, X float64; shift float32. Outputs (float64) as :func:`_tile_sums64`."""
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


# ---------------------------------------------------------------------------------------------
# Pair pass for large d: tiles, BLAS matmuls (single-threaded BLAS in a thread pool)
# ---------------------------------------------------------------------------------------------
#: Use the BLAS pair pass from this dimension and this number of tokens on. Measured
#: 2026-11-30 (2 cores under load ≈ 12, CPU time of fused_pass with 2 threads, numba pass →
#: tiled BLAS pass): (n, H, d, P) = (2048, 8, 8, 1) 238 → 128 ms, (2048, 8, 4, 1) 178 → 123,
#: (200, 100, 16, 10) 690 → 438, (200, 100, 8, 10) 403 → 317, (200, 10, 16, 10) 74 → 64,
#: (200, 10, 8, 10) 33 → 29, (256, 8, 16, 1) 6.3 → 5.6; even or slower: (160, 8, 16, 1)
#: 4.5 → 5.1, (128, 8, 16, 1) 2.4 → 2.6, (128, 8, 8, 1) 1.5 → 2.0, (200, 10, 4, 10)
#: 19.9 → 20.9, (512, 8, 4, 1) 8.4 → 8.8. Below, the numba pair pass.
BLAS_MIN_D = 8
BLAS_MIN_N = 200
#: Rows per block of the row-maximum pass (at most; fixed: never depends on the thread count).
_BLAS_ROWS = 128
#: Bound on the elements of one block array (rows × columns) of the row-maximum pass.
_BLAS_BLOCK_ELEMS = 1 << 18
#: Rows and columns of one tile of the tiled BLAS pair pass, for n < 1024 and n ≥ 1024 (a
#: function of n only: the rounding depends on it). Measured (2 cores, one thread, CPU time
#: of the pass): (n, H, d) = (2048, 8, 64) T = 128: 375 ms, 192: 358, 256: 329, 384: 335,
#: 512: 380; (512, 8, 16) T = 64: 12.7 ms, 128: 10.2, 256: 14.2 (larger tiles: faster
#: matmuls, but fewer tile pairs to share and fewer items for the threads).
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
def _blas_sym_heads(X, Xu, Q, bDT, shift, p, i0, i1, j0, j1, h0, h1, C, libm, uI, uJ,
                    S0, SI, SX):
    """Heads h0..h1−1 of the symmetric tile (rows i0:i1, columns j0:j1) of path p, in one
    compiled call (BLAS through numba's ``np.dot``: no Python, no GIL between the steps).
    A diagonal tile (i0 = j0) first computes Q_I = X_I βD_hᵀ and gives row sums only; an
    off-diagonal tile gives the row and the column sums (:func:`_blas_tile`) and
    SX_I += E (uX)_J, SX_J += Eᵀ (uX)_I."""
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
def _blas_sym_item(X, Xu, Q, bDT, shift, p, I, J, T, h0, h1, ito, libm, U, S0, SI, SX):
    """One item of the symmetric pass: tile (I, J) (I = J: a diagonal tile) for heads
    h0..h1−1, the Gram tile once for all of them when ``ito`` is not None, the masses U
    (P, ≥ n) (ones for uniform masses)."""
    n = X.shape[1]
    i0 = I * T
    i1 = min(n, i0 + T)
    j0 = J * T
    j1 = min(n, j0 + T)
    if ito is None:
        _blas_sym_heads(X, Xu, Q, bDT, shift, p, i0, i1, j0, j1, h0, h1, None, libm,
                        U[p, i0:i1], U[p, j0:j1], S0, SI, SX)
    else:
        C = np.dot(X[p, i0:i1], X[p, j0:j1].T)
        _blas_sym_heads(X, Xu, Q, bDT, shift, p, i0, i1, j0, j1, h0, h1, C, libm,
                        U[p, i0:i1], U[p, j0:j1], S0, SI, SX)


_blas_controller = None


def _blas_limits():
    """A context manager limiting BLAS to one thread (threadpoolctl), or None if unavailable.

    Both BLAS libraries are limited: NumPy's and SciPy's (which numba's ``np.dot`` calls);
    the latter is loaded before the controller lists the libraries."""
    global _blas_controller
    if _blas_controller is None:
        try:
            import scipy.linalg.cython_blas  # noqa: F401  numba's np.dot: limited as well
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _blas_controller = False
        else:
            _blas_controller = ThreadpoolController()
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


def _use_blas(n, d, single, fast_exp):
    """Whether fused_pass takes the BLAS pair pass."""
    return d >= BLAS_MIN_D and n >= BLAS_MIN_N and not (single and d == 3 and fast_exp)


#: The symmetric d = 3 pass may be switched off (tests compare it with the row pass), and
#: its per-path fused form (stage ``_SYM_FUSED`` of :func:`_sym3`, used when there are at
#: least as many paths as threads and one band) may be switched off (tests: the same bits as
#: the chained form, which then runs).
_SYM_ENABLED = True
_SYM_FUSE = True


def _sym_form(n, d, H, single, fast_exp, U, causal):
    """The conditions of the symmetric d = 3 pass that do not depend on D's values: float64,
    polynomial exp, uniform masses (``U`` None), no mask, 0 < n ≤ :data:`SYM_MAX_N`, H > 0."""
    return (_SYM_ENABLED and d == 3 and not single and fast_exp and U is None and not causal
            and 0 < n <= SYM_MAX_N and H > 0)


def _use_sym(n, d, single, fast_exp, U, causal, D, shift, symmetric=None):
    """Whether fused_pass takes the symmetric d = 3 pass: :func:`_sym_form`, symmetric D
    (e_ij = e_ji) and the fixed shift on every head (a function of the inputs, never of the
    thread count). ``symmetric``: :func:`_is_symmetric` (D), if known."""
    return (_sym_form(n, d, D.shape[1], single, fast_exp, U, causal)
            and bool((2.0 * shift < FIXED_SHIFT_LIMIT).all())
            and (_is_symmetric(D) if symmetric is None else symmetric))


def _pair_pass_blas(X, D, beta, shift, rowmax, causal, want_ito, fast, S0, SX, SI, RS, limits,
                    U=None):
    r"""The pair pass with BLAS matmuls, the same sums as :func:`_pair_pass`:

    .. math::
        S0_i = \sum_j u_j e_{ij},\quad SX_i = \sum_j u_j e_{ij} x_j,\quad
        SI_i = \sum_j u_j e_{ij}(1 + \langle x_i, x_j\rangle^2),\quad
        e_{ij} = e^{\beta\langle D_h x_i, x_j\rangle - c},

    by tiles of T = :func:`_blas_tile_size` rows and columns. For a tile (I, J) of one head:
    the logits L = Q_I X_Jᵀ (Q = β X D_hᵀ computed once), E = e^{L − c} and its sums in
    one fused loop per row (:func:`_blas_tile`), SX_I += E (u X)_J; the Gram tile
    C = X_I X_Jᵀ of the Itô sum is computed once per tile for all heads.

    Why this layout (measured at (n, H, d) = (2048, 8, 64), one thread, CPU time of the
    pass: row blocks of 128 × n, 532 ms → tiles, 344 ms): the time is the three B × n × d
    matmuls per head and block and the n² exponentials. Row blocks of the whole L (2 MB)
    left the cache between the logits matmul, the exponentials and the SX matmul; the
    exponentials ran as separate short loops (exp, then the sums: 58 µs per 128 × 128
    tile against 41 µs fused); and every logit and exponential was computed twice (e_ij
    and e_ji). Tiles of 256² with symmetric pairs halve the logits matmul and the
    exponentials, and the matmuls on 256-tiles run faster than on 128 × n blocks. With
    2 threads on a loaded machine the wall time was ~2.5× the CPU time: each of the ~8
    NumPy calls per tile and head takes the GIL, and a thread preempted while holding it
    stalls the other. A symmetric tile item is therefore one nogil numba call
    (:func:`_blas_sym_item`, BLAS through numba's ``np.dot``): 1320 → 858 ms wall at
    (2048, 8, 64) under load ≈ 12 (the causal and non-symmetric items still call NumPy
    from Python).

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

    def sym_item(p, I, J, hs):
        _blas_sym_item(X, Xu, Q, bDT, shift, p, I, J, T, hs.start, hs.stop, ito, libm, U,
                       S0, SI, SX)

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
#: the ∂_D E outer product). Measured on one thread (CPU time of ``fused_pass``, compiled
#: combine → matmuls, a loaded machine): (2048, 8, 64) combine 55 → 28 ms; (512, 8, 64)
#: 57 → 32 ms whole pass; d = 32 and 48 within ±2%; d = 16 1–5% slower (NumPy's per-call
#: overhead, ≈ 15 calls per block and head, against 3·256 multiply-adds per row).
BLAS_EPILOGUE_MIN_D = 32


def _epilogue_blas(X, D, V, lap, norm, causal, want_ito, beta, U, S0, SX, SI, RS,
                   vel, part, grad, bhat, er, energy, diss, G2, G2hm, ito_sum, dEdD, limits):
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
    the thread count. ``U`` (P, ≥ n) relative masses, or None."""
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


# ---------------------------------------------------------------------------------------------
# Worker-pool primitives (the threads themselves: wflow.core._pool)
# ---------------------------------------------------------------------------------------------
#: The slots of a job's counter (:func:`wflow.core._pool.job_counter`): the next work item,
#: the threads, the items complete, the address of ``usleep`` and the caller's patience in
#: cycles (:func:`_wait_done`, :func:`_leave`), the workers that took a scratch slot
#: (:func:`_sym3`), then (from _C_PATH) per path the heads done (the chained stage of
#: :func:`_sym3`).
_C_NEXT, _C_THREADS, _C_DONE, _C_SLEEP, _C_PATIENCE, _C_SLOT, _C_PATH = 0, 1, 2, 3, 4, 5, 6
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def _int64_slot(arr, i, v=None):
    """Typing of the atomics: an int64 array, an integer index (and an integer value)."""
    return (isinstance(arr, types.Array) and arr.dtype == types.int64
            and isinstance(i, types.Integer) and (v is None or isinstance(v, types.Integer)))


def _slot_ptr(context, builder, sig, args):
    """Address of ``arr[i]`` (the first two arguments)."""
    a = context.make_array(sig.args[0])(context, builder, args[0])
    idx = context.cast(builder, args[1], sig.args[1], types.intp)
    return builder.gep(a.data, [idx])


def _value(context, builder, sig, args):
    return context.cast(builder, args[2], sig.args[2], types.int64)


@intrinsic
def _atomic_load(typingctx, arr, i):
    """``arr[i]`` read atomically with acquire ordering (int64 array): never hoisted out of a
    loop, and the thread sees every write made before the matching release."""
    if _int64_slot(arr, i):

        def codegen(context, builder, sig, args):
            return builder.load_atomic(_slot_ptr(context, builder, sig, args), "acquire", 8)

        return types.int64(arr, i), codegen
    return None


@intrinsic
def _atomic_store(typingctx, arr, i, v):
    """``arr[i] = v`` atomically with release ordering (int64 array)."""
    if _int64_slot(arr, i, v):

        def codegen(context, builder, sig, args):
            builder.store_atomic(_value(context, builder, sig, args),
                                 _slot_ptr(context, builder, sig, args), "release", 8)
            return context.get_dummy_value()

        return types.none(arr, i, v), codegen
    return None


@intrinsic
def _atomic_add(typingctx, arr, i, v):
    """``old = arr[i]; arr[i] += v`` atomically, acquire-release ordering (int64 array)."""
    if _int64_slot(arr, i, v):

        def codegen(context, builder, sig, args):
            return builder.atomic_rmw("add", _slot_ptr(context, builder, sig, args),
                                      _value(context, builder, sig, args), "acq_rel")

        return types.int64(arr, i, v), codegen
    return None


@intrinsic
def _cycles(typingctx):
    """The processor's cycle counter (``llvm.readcyclecounter``; 0 where there is none)."""

    def codegen(context, builder, sig, args):
        fn = builder.module.declare_intrinsic(
            "llvm.readcyclecounter", fnty=ir.FunctionType(ir.IntType(64), []))
        return builder.call(fn, [])

    return types.int64(), codegen


@intrinsic
def _call_usleep(typingctx, addr, us):
    """``usleep(us)`` through its address ``addr``; nothing when ``addr`` is 0."""
    if isinstance(addr, types.Integer) and isinstance(us, types.Integer):

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)])
            a = context.cast(builder, args[0], sig.args[0], types.int64)
            u = context.cast(builder, args[1], sig.args[1], types.int32)
            with builder.if_then(builder.icmp_signed("!=", a, ir.Constant(a.type, 0))):
                builder.call(builder.inttoptr(a, fnty.as_pointer()), [u])
            return context.get_dummy_value()

        return types.none(addr, us), codegen
    return None


@intrinsic
def _pause(typingctx):
    """The spin-loop hint (``pause`` on x86: the core slows the loop and saves power)."""

    def codegen(context, builder, sig, args):
        if _X86:
            fn = builder.module.declare_intrinsic(
                "llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), []))
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.none(), codegen


@njit(nogil=True, cache=True)
def _enter(role):
    """First call of a job's body: ``role`` is the pool's control array for the calling
    thread (``role[0]``, the job posted; sets ``role[1]``, the job entered: this thread has
    released the GIL, the spinning workers may take it), empty for the workers. Returns
    whether this thread is the caller's (it waits for the items and runs the tail)."""
    if role.size >= 2:
        _atomic_store(role, 1, role[0])
    return role.size > 0


@njit(nogil=True, cache=True)
def _leave(role, counter):
    """Last call of a job's body on the caller's thread: wait (at most the counter's patience)
    until no worker is between the end of its part and its next wait (``role[2]``, workers
    engaged): such a worker holds the GIL for a moment, and a caller returning to Python then
    would sleep on the GIL and pay a wake-up (10–30 µs measured on 2-vCPU VMs)."""
    if role.size >= 3:
        t0 = _cycles()
        while _atomic_load(role, 2) > 0 and _cycles() - t0 < counter[_C_PATIENCE]:
            _pause()


@njit(nogil=True, cache=True)
def _engage(ctrl, v):
    _atomic_add(ctrl, 2, v)


@njit(nogil=True, cache=True)
def _fail(ctrl, g):
    _atomic_store(ctrl, 3, g)


@njit(nogil=True, cache=True)
def _spin_until_changed(ctrl, seen, cycles, jump, out, engaged):
    """Spin until ``ctrl[1] != seen`` (a job entered) for at most ``cycles`` cycles of the
    cycle counter (first, without the GIL, leave ``ctrl[2]`` if ``engaged``). ``out[0]`` =
    ``ctrl[1]``, ``out[1]`` = 1 if two successive reads of the counter were more than
    ``jump`` cycles apart (the thread was preempted: other work wants this core)."""
    if engaged:
        _atomic_add(ctrl, 2, -1)
    t0 = _cycles()
    last = t0
    out[1] = 0
    while True:
        g = _atomic_load(ctrl, 1)
        if g != seen:
            break
        now = _cycles()
        if now - last > jump:
            out[1] = 1
            break
        if now - t0 >= cycles:
            break
        last = now
        for _ in range(8):
            _pause()
    out[0] = g


@njit(nogil=True, cache=True)
def _item_done(counter):
    """Count one completed item of the job (release: the item's writes go with it)."""
    _atomic_add(counter, _C_DONE, 1)


@njit(nogil=True, cache=True)
def _wait_done(role, counter, items):
    """Wait until ``counter[DONE] >= items``: every item of the job is complete, and
    (acquire) their writes are visible to this thread. Spins the counter's patience in
    cycles, then sleeps 20 µs at a time (the other threads are preempted: let the machine's
    other work run). Returns early if a worker failed in this job (``role[3]``, the failed
    job, equals ``role[0]``, the job posted; the pool then raises)."""
    t0 = _cycles()
    while _atomic_load(counter, _C_DONE) < items:
        if role.size >= 4 and _atomic_load(role, 3) == role[0]:
            return
        if _cycles() - t0 > counter[_C_PATIENCE]:
            _call_usleep(counter[_C_SLEEP], 20)
        else:
            _pause()


@njit(nogil=True, cache=True)
def _read_cycles():
    return _cycles()


# ---------------------------------------------------------------------------------------------
# Combine
# ---------------------------------------------------------------------------------------------
@intrinsic
def _fetch_add(typingctx, counter):
    """``old = counter[0]; counter[0] += 1`` atomically (LLVM ``atomicrmw add``); int64 array.

    The atomic read-modify-write makes every index go to exactly one thread; "monotonic"
    ordering suffices (items share no data; each item's completion is counted with
    acquire-release ordering, :func:`_atomic_add`)."""
    if isinstance(counter, types.Array) and counter.dtype == types.int64:

        def codegen(context, builder, sig, args):
            arr = context.make_array(sig.args[0])(context, builder, args[0])
            one = context.get_constant(types.int64, 1)
            return builder.atomic_rmw("add", arr.data, one, "monotonic")

        return types.int64(counter), codegen
    return None


@njit(**_OPTS)
def _head_epilogue3(X, D, V, lap, norm, causal, p, b, h0, h1, i0, i1, S0, SX, SI, RS, part,
                    dEp, acc, U):
    """:func:`_head_epilogue` for d = 3 and the heads h0..h1−1 in order, in scalars (V_h, D_h
    and the ∂_D E partial in registers). Every sum is written in the order of the generic loops,
    ``((0 + a) + b) + c``, and the module compiles it without fast-math flags."""
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
            if not causal:
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
        if not causal:  # the tile's partial (dEp starts at 0: the same sums as in place)
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
def _head_epilogue(X, D, V, lap, norm, causal, p, b, h, i0, i1, S0, SX, SI, RS,
                   part, dEp, acc, ybar, w, U):
    r"""Head h's part of the per-row outputs of rows i0..i1−1 of path p, from their row sums.

    Writes the partition ``part[p, h, i]``, adds the head's terms to the row accumulators
    ``acc[i − i0]`` (columns: v (d), g (d), Σ_h Z, Σ_h 1/Z, Itô), and writes the tile's
    partial :math:`\sum_{i \in \text{tile}} e^{c_{hi}} u_i x_i\, SX_{hi}^\top` into
    ``dEp[p, b, h]`` (rows in increasing order). Called for h = 0, 1, … in order, so every
    row accumulates its heads in the same order as a row-by-row loop (the same bits).
    ``e^{c}`` is computed once per run of rows with the same shift (the fixed shift: once
    per tile and head). ybar, w: (d,) scratch. U (P, ≥n) relative masses, or (P, 0) for
    uniform masses.
    """
    n, d = X.shape[1], X.shape[2]
    if d == 3:
        _head_epilogue3(X, D, V, lap, norm, causal, p, b, h, h + 1, i0, i1, S0, SX, SI, RS, part,
                        dEp, acc, U)
        return
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


#: A fresh job counter (:func:`wflow.core._pool.job_counter`).
_job_counter = _pool.job_counter


@njit(nogil=True, **_OPTS, **_ALIGNED)
def _fused64(role, Xt, D, V, X, beta, shift, rowmax, lap, norm, causal, want_ito, fast, pairs,
             R, counter, U, S0, SX, SI, RS, vel, part, grad, bhat, er, dEp,
             energy, diss, G2, G2hm, ito_sum, dEdD):
    """The fused pass, float64 pair loop (Xt (P, d, n_pad) float64; U (P, n_pad) relative
    masses, or (P, 0) for uniform masses). Without ``pairs`` the pair sums S0, SX, SI, RS are
    given (the BLAS pair pass) and only the epilogue runs, item by item as in the fused pass
    (one compiled function for both: numba optimises the epilogue's code once, not in each
    caller; ≈ 6 s of compilation)."""
    master = _enter(role)
    Xt, D, V, X = _unowned(Xt), _unowned(D), _unowned(V), _unowned(X)
    shift, rowmax, lap, counter = _unowned(shift), _unowned(rowmax), _unowned(lap), _unowned(counter)
    U, S0, SX, SI = _unowned(U), _unowned(S0), _unowned(SX), _unowned(SI)
    RS, vel, part, grad = _unowned(RS), _unowned(vel), _unowned(part), _unowned(grad)
    bhat, er, dEp, energy = _unowned(bhat), _unowned(er), _unowned(dEp), _unowned(energy)
    diss, G2, G2hm, ito_sum = _unowned(diss), _unowned(G2), _unowned(G2hm), _unowned(ito_sum)
    dEdD = _unowned(dEdD)
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
                              buf, q, S0, SX, SI, RS)
            for h in range(H):  # (h, h + 1) as in _head_epilogue: one specialisation
                _head_epilogue3(X, D, V, lap, norm, causal, p, b, h, h + 1, i0, i1, S0, SX,
                                SI, RS, part, dEp, acc, U)
        else:
            for h in range(H if pairs else 0):
                _tile_sums64(Xt, D, X, beta, shift, rowmax, causal, want_ito, fast, p, h,
                             i0, i1, buf, cbuf, sx, q, S0, SX, SI, RS, U)
            for h in range(H):
                _head_epilogue(X, D, V, lap, norm, causal, p, b, h, i0, i1, S0, SX, SI, RS,
                               part, dEp, acc, ybar, w, U)
        _rows_epilogue(X, H, norm, causal, p, i0, i1, acc, vel, grad, bhat, er, v, g)
        _item_done(counter)  # (release: the item's writes)
    if master:
        _wait_done(role, counter, items)
        if not causal:
            _finish(er, dEp, beta, H, want_ito, energy, diss, G2, G2hm, ito_sum, dEdD, U)
        _leave(role, counter)


@njit(nogil=True, **_OPTS, **_ALIGNED)
def _fused32(role, Xt, D, V, X, beta, shift, rowmax, lap, norm, causal, want_ito, R, counter,
             U, S0, SX, SI, RS, vel, part, grad, bhat, er, dEp,
             energy, diss, G2, G2hm, ito_sum, dEdD):
    """The fused pass, float32 pair loop for d = 3 (Xt (P, 3, n_pad) float32)."""
    master = _enter(role)
    Xt, D, V, X = _unowned(Xt), _unowned(D), _unowned(V), _unowned(X)
    shift, rowmax, lap, counter = _unowned(shift), _unowned(rowmax), _unowned(lap), _unowned(counter)
    U, S0, SX, SI = _unowned(U), _unowned(S0), _unowned(SX), _unowned(SI)
    RS, vel, part, grad = _unowned(RS), _unowned(vel), _unowned(part), _unowned(grad)
    bhat, er, dEp, energy = _unowned(bhat), _unowned(er), _unowned(dEp), _unowned(energy)
    diss, G2, G2hm, ito_sum = _unowned(diss), _unowned(G2), _unowned(G2hm), _unowned(ito_sum)
    dEdD = _unowned(dEdD)
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
            _tile_sums32(Xt, D, X, beta, shift, rowmax, causal, want_ito, p, h, i0, i1,
                         S0, SX, SI, RS)
            _head_epilogue(X, D, V, lap, norm, causal, p, b, h, i0, i1, S0, SX, SI, RS,
                           part, dEp, acc, ybar, w, U)
        _rows_epilogue(X, H, norm, causal, p, i0, i1, acc, vel, grad, bhat, er, v, g)
        _item_done(counter)  # (release: the item's writes)
    if master:
        _wait_done(role, counter, items)
        if not causal:
            _finish(er, dEp, beta, H, want_ito, energy, diss, G2, G2hm, ito_sum, dEdD, U)
        _leave(role, counter)


#: The stages of :func:`_sym3`.
_SYM_FUSED, _SYM_PAIRS, _SYM_COMBINE, _SYM_CHAIN = 0, 1, 2, 3
#: Rows per block of the symmetric pass's combine (a multiple of the vector): the tiles of its
#: ∂_D E partial sums and the items of its unfused combine stage [tiles of 8 rows
#: (:func:`_tile_rows`) would make the fused stage write 25 tiles per head at n = 200, each
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
def _sym3(role, stage, Xt, D, V, X, beta, shift, own_shift, bands, lap, norm, ito, R, counter,
          Cb, Ws, Cws, Gs, As, Ts, Rs, Ss, Ks, Ac, S0, SX, SI, RS, vel, part, grad, bhat, er, dEp,
          energy, diss, G2, G2hm, ito_sum, dEdD):
    """The symmetric d = 3 pass, one compiled function for its four stages; one thread's part
    of a job of :mod:`wflow.core._pool` (the work items come from the job's counter, a dynamic
    schedule; the caller's thread, ``role`` of :func:`_enter`, then waits until
    every item is complete and runs the sums of :func:`_finish`):

    * ``_SYM_FUSED`` (one band, at least as many paths as threads): items are (path p, chunk
      of heads, :data:`_SYM_CHUNK`); an item runs head after head the pair sums
      (:func:`_sym_band3`, all rows) and at once the head's combine for all rows
      (:func:`_sym_epilogue3`, into the chunk's accumulators ``Ac[p, chunk]``), while the
      head's row sums are in cache: in the thread's scratch ``Ss`` (one head, 9.6 KB at
      n = 200), not in the (P, H, n) arrays, whose path (0.96 MB for H = 100) evicted the
      path's table of squared cosines from L2 at every head (one thread, six
      alternated fresh processes: paper case 1.45 → 1.62·10⁹ pair-heads/s, (4096, 8, 3)
      1.73 → 1.83 in the same runs, a noisy hour). The thread whose item completes path p's last chunk (the
      acquire-release counter ``counter[_C_PATH + p]``) adds the chunks in order and runs the
      path's per-row outputs and its sums (:func:`_finish_path`). Items of chunks rather
      than whole paths: the paper's 10 paths of 100 heads on two threads left one thread
      idle for up to one path at the end (six alternated fresh processes:
      2.94 → 3.08·10⁹ pair-heads/s). With a
      table slot in the scratch ``Gs`` (and an Itô sum wanted) the thread fills path p's
      table of ⟨x_i, x_j⟩² (:func:`_cos2_table`) unless it holds p's already.
    * ``_SYM_CHAIN`` (one band, fewer paths than threads): items (path p, head h), each the
      head's pair sums; the thread whose item completes path p's last head (an acquire-release
      counter per path, ``counter[_C_PATH + p]``: it sees the other threads' row sums) runs path p's
      combine for all rows, then its per-row outputs and sums. One job, where the
      unfused form took two (a single path n = 200, H = 10: 0.31 → 0.235 ms; n = 500, H = 100:
      9.1 → 8.5 ms). With at least as many paths as threads the fused form is
      faster (n = 200, H = 100, P = 10: 14.1 against 14.3–16.4 ms: the chained combine
      reads 100 heads' row sums back from L3).
    * ``_SYM_PAIRS``: items (path p, head h, band b), each its band's pair sums. With one band
      the column sums live in a per-thread buffer (tests only); with several, band b writes
      ``Cb[p, h, b]`` and :func:`_sym_reduce3` adds them afterwards in band order.
    * ``_SYM_COMBINE`` (after the pairs): items (path, block of R = :data:`_SYM_BLOCK_ROWS`
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
    Xt, D, V, X = _unowned(Xt), _unowned(D), _unowned(V), _unowned(X)
    shift, bands, lap, ito = _unowned(shift), _unowned(bands), _unowned(lap), _unowned(ito)
    counter, Cb, Ws, Cws = _unowned(counter), _unowned(Cb), _unowned(Ws), _unowned(Cws)
    Gs, As, Ts, Rs = _unowned(Gs), _unowned(As), _unowned(Ts), _unowned(Rs)
    Ss, Ks, Ac, S0, SX = _unowned(Ss), _unowned(Ks), _unowned(Ac), _unowned(S0), _unowned(SX)
    SI, RS, vel, part = _unowned(SI), _unowned(RS), _unowned(vel), _unowned(part)
    grad, bhat, er, dEp = _unowned(grad), _unowned(bhat), _unowned(er), _unowned(dEp)
    energy, diss, G2, G2hm = _unowned(energy), _unowned(diss), _unowned(G2), _unowned(G2hm)
    ito_sum, dEdD = _unowned(ito_sum), _unowned(dEdD)
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
            _sym_band3_for(Xt[p, 0], Xt[p, 1], Xt[p, 2], D[p, h], beta, shift[p, h], n,
                           i_lo, i_hi, C, W, Rp, nb == 1, S0h, SXh, SIh, RSh, ito[p], Gp)
            if fused:  # the head's combine while its row sums are in cache (all rows: the
                # fused stage has one band, i_lo = 0 and i_hi = n, int64 rather than the
                # literal 0, so that both call sites compile one combine: 0.8 s of a cold cache)
                _sym_epilogue3(X, D, V, lap, norm, p, h, i_lo, i_hi, R, S0h, SXh, SIh, RSh,
                               part, dEp, ac, tl)
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
                    _sym_epilogue3(X, D, V, lap, norm, p, h, r0, r1, R, S0[p, h], SX[p, h],
                                   SI[p, h], RS[p, h], part, dEp, tmp, tl)
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


def _run_sym3(stage, table, Xt, D, V, X, beta, shift, bands, lap, norm, ito, R, threads,
              Cb, *arrays, own_shift=False):
    """One job of :func:`_sym3` on the pool, with at most ``threads`` threads; with
    ``own_shift`` its items write ``shift`` of their heads first (one band only)."""
    P, H, n = Xt.shape[0], D.shape[1], arrays[0].shape[2]
    items = int(_sym3_items(stage, P, H, bands.size - 1, (n + R - 1) // R))
    threads = max(1, min(threads, items))
    counter = _job_counter(P, threads)
    whole = stage == _SYM_FUSED or stage == _SYM_CHAIN
    scratch = _sym3_scratch(threads, n, Xt.shape[2], table and stage == _SYM_FUSED,
                            n if whole else R)
    if stage == _SYM_FUSED:  # the chunks' sums (every slot written before it is read)
        Ac = _kept("sym3_chunks", (P, H, n), lambda: np.empty((P, int(_sym_chunks(H)), 9, n)))
    else:
        Ac = _NO_AC
    _pool.run(_sym3, (stage, Xt, D, V, X, beta, shift, bool(own_shift), bands, lap, norm, ito,
                      R, counter, Cb, *scratch, Ac, *arrays), threads)


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
    the next ((4096, 8, 3) on two threads 3.41 → 3.52·10⁹ pair-heads/s, six
    alternated fresh processes; the paper case unchanged within the noise)."""
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
    _pool.run(_sym_reduce3, (bands, Cb, S0, SX, SI, _job_counter(0, threads)),
              min(threads, items))


def _sym_pair_sums(Xt, D, beta, shift, bands, threads, Cb, S0, SX, SI, RS, ito):
    """The pair stage of :func:`_sym3` alone, on ``threads`` threads (row sums S0, SX, SI,
    RS; tests)."""
    e1, e2, e3, e4 = np.empty(0), np.empty((0, 0)), np.empty((0, 0, 0)), np.empty((0,) * 4)
    _run_sym3(_SYM_PAIRS, False, Xt, D, D, e3, float(beta), shift, bands,
              np.zeros(D.shape[1], np.bool_), 0, ito, _SYM_BLOCK_ROWS, threads, Cb, S0, SX, SI,
              RS, e3, e3, e3, e2, e3, np.empty((0,) * 5), e1, e1, e1, e1, e1, e4)


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------
#: No band column sums (one band: per-thread buffers).
_NO_CB = np.empty((0, 0, 0, 5, 0))
#: No chunk sums (the stages of :func:`_sym3` other than the fused one).
_NO_AC = np.empty((0, 0, 9, 0))
#: No token columns (:func:`_fused64` after the BLAS pair pass reads none).
_NO_XT = np.empty((0, 0, 0))


def _tile_rows(d):
    """Rows per work item of the fused pass: 8 for d ≤ 8, then 8·⌈d/8⌉ (a function of d
    only: the tile partial sums of ∂_D E, hence the results, depend on it)."""
    return 8 * max(1, -(-d // 8))


_WORKSPACE = threading.local()


#: Shapes whose row-sum arrays one Python thread keeps (:func:`_row_sum_arrays`).
_WORKSPACE_SHAPES = 2


def _row_sum_arrays(P, H, n, d):
    """The intermediate row sums ``S0 (P, H, n), SX (P, H, n, d), SI, RS (P, H, n)`` of
    :func:`fused_pass`, kept between calls of one Python thread for the last
    :data:`_WORKSPACE_SHAPES` shapes (every slot is rewritten by each pass; never returned).
    Fresh arrays of this size cost their page faults at every call: ≈ 5% of a field
    evaluation at (200, 100, 3), P = 10, and ≈ 30% when calls alternate between two shapes
    (the paired benchmark; a caller of :func:`wflow.field` on two sizes)."""
    return _kept("row_sums", (P, H, n, d), lambda: (
        np.empty((P, H, n)), np.empty((P, H, n, d)), np.empty((P, H, n)), np.empty((P, H, n))))


def _kept(name, key, make):
    """The arrays ``make()`` of this Python thread's workspace ``name`` for ``key``, kept for
    the last :data:`_WORKSPACE_SHAPES` keys (most recent first)."""
    kept = getattr(_WORKSPACE, name, None)
    if kept is None:
        kept = []
        setattr(_WORKSPACE, name, kept)
    for k, ws in enumerate(kept):
        if ws[0] == key:
            kept.insert(0, kept.pop(k))
            return ws[1]
    ws = (key, make())
    kept.insert(0, ws)
    del kept[_WORKSPACE_SHAPES:]
    return ws[1]


@njit(**_OPTS)
def _sym3_norms(D, out):
    r"""max |λ| of symmetric 3 × 3 matrices D (P, H, 3, 3) in closed form (Smith 1961): with
    :math:`q = \operatorname{tr}D/3`, :math:`p = \sqrt{\|D - qI\|_F^2/6}`,
    :math:`r = \det((D - qI)/p)/2`, the extreme eigenvalues are
    :math:`q + 2p\cos(\tfrac13\arccos r)` and :math:`q + 2p\cos(\tfrac13\arccos r + \tfrac{2\pi}3)`.
    Near a double eigenvalue ``arccos`` costs up to ~√ε relative accuracy: harmless for a shift
    (an upper bound of the logits up to that rounding). ``np.linalg.eigvalsh`` took 1.4 ms for
    the paper's 1000 matrices, ≈ 5% of a field evaluation."""
    for p_ in range(D.shape[0]):
        for h in range(D.shape[1]):
            out[p_, h] = _sym3_norm(D, p_, h)


@njit(inline="always", **_OPTS)
def _sym3_norm(D, p_, h):
    """:func:`_sym3_norms` of D[p_, h] (inlined: the same arithmetic wherever it is called,
    e.g. in the items of :func:`_sym3`)."""
    a00, a01, a02 = D[p_, h, 0, 0], D[p_, h, 0, 1], D[p_, h, 0, 2]
    a11, a12, a22 = D[p_, h, 1, 1], D[p_, h, 1, 2], D[p_, h, 2, 2]
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


#: Relative margin of :func:`_sym3_precheck`'s Frobenius bound over the closed-form spectral
#: norm (which may exceed the exact one by ~√ε near a double eigenvalue).
_FRO_MARGIN = 1e-6


@njit(**_OPTS)
def _sym3_precheck(D, beta, limit):
    r"""One pass over D (P, H, 3, 3): 0 if some D_h is not symmetric (exact equality), 1 if
    all are and every :math:`2\beta\|D_h\|_F (1 + 10^{-6}) <` ``limit`` (then every fixed
    shift :math:`c_h = \beta\|D_h\|_2 \le \beta\|D_h\|_F` is below the limit: the
    symmetric pass applies without the spectral norms), 2 otherwise. With ``1`` the pass's
    items compute their own shifts (:func:`_sym3`, in parallel); the 1000 closed forms of
    the paper's case took ≈ 55 µs on the caller's thread before the pass."""
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


@njit(**_OPTS)
def _root(parent, i):
    """Root of i in a union–find forest, halving the path on the way."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def pair_statistics(X, cos_cluster, cos_merge):
    r"""The pairwise clustering statistics of P token clouds in one pass over the pairs, with
    :math:`c_{ij} = \langle x_i, x_j\rangle` summed in the order k = 0, 1, …, d − 1 (no BLAS: the
    same bits on every machine):

    .. math::
        \min_{i, j} c_{ij},\qquad
        \#\text{components of } \{i \sim j : c_{ij} \ge c_{\text{cluster}}\},\qquad
        \#\{i < j : c_{ij} > c_{\text{merge}}\}

    (the minimum includes i = j, :math:`|x_i|^2`; components by union–find over the pairs
    i < j: union by the smaller root, path halving, the root of i kept while j runs, so an edge
    costs one root search). No m × m Gram matrix is formed; the paths are the work items of a
    job of :mod:`wflow.core._pool` (each alone: the same results whatever the thread count).

    Parameters
    ----------
    X : (P, m, d) float64 tokens.
    cos_cluster, cos_merge : float thresholds.

    Returns
    -------
    (min_cos (P,) float64, components (P,) int64, merged pairs i < j (P,) int64)
    """
    X = np.require(X, np.float64, ("C", "W"))
    P = X.shape[0]
    mins = np.empty(P)
    comps = np.empty(P, dtype=np.int64)
    merged = np.empty(P, dtype=np.int64)
    threads = min(numba.get_num_threads(), P)
    _pool.run(_pair_statistics, (X, float(cos_cluster), float(cos_merge), _job_counter(0, threads),
                                 mins, comps, merged), threads)
    return mins, comps, merged


@njit(nogil=True, **_OPTS)
def _pair_statistics(role, X, cos_cluster, cos_merge, counter, mins, comps, merged):
    """One thread's part of :func:`pair_statistics`: items are paths."""
    master = _enter(role)
    P, m, d = X.shape
    while True:
        p = _fetch_add(counter)
        if p >= P:
            break
        parent = np.empty(m, dtype=np.int64)
        for i in range(m):
            parent[i] = i
        count = m
        low = np.inf
        pairs = 0
        for i in range(m):
            c = 0.0
            for k in range(d):
                c += X[p, i, k] * X[p, i, k]
            low = min(low, c)  # the diagonal |x_i|²
            ra = _root(parent, i)
            for j in range(i + 1, m):
                c = 0.0
                for k in range(d):
                    c += X[p, i, k] * X[p, j, k]
                if c < low:
                    low = c
                if c > cos_merge:
                    pairs += 1
                if c >= cos_cluster:
                    rb = _root(parent, j)
                    if ra != rb:  # union by the smaller root; i's root is the smaller one after
                        if ra < rb:
                            parent[rb] = ra
                        else:
                            parent[ra] = rb
                            ra = rb
                        count -= 1
        mins[p] = low
        comps[p] = count
        merged[p] = pairs
        _item_done(counter)
    if master:
        _wait_done(role, counter, P)
        _leave(role, counter)


def _columns(X, width, dtype=np.float64):
    """The tokens as structure of arrays ``(P, d, n_pad)``, columns zero-padded to a multiple
    of ``width`` (the pair loops' vector granularity)."""
    P, n, d = X.shape
    Xt = np.zeros((P, d, -(-n // width) * width), dtype=dtype)
    Xt[:, :, :n] = X.transpose(0, 2, 1)
    return Xt


def _is_symmetric(D):
    """Whether every D_h (…, d, d) equals its transpose exactly."""
    return bool(np.array_equal(D, np.swapaxes(D, -1, -2)))


#: From this d on, :func:`_spectral_norm` calls LAPACK with BLAS limited to one thread.
SPECTRAL_LIMIT_D = 32


def _spectral_norm(D, symmetric=None):
    """‖D_h‖₂ per (p, h): max |eigenvalue| when D is symmetric (closed form for d = 3), else
    the largest singular value. ``symmetric``: :func:`_is_symmetric` (D), if known."""
    P, H, d, _ = D.shape
    if H == 0 or d == 0:
        return np.zeros((P, H))
    sym = _is_symmetric(D) if symmetric is None else symmetric
    if sym and d == 3:
        out = np.empty((P, H))
        _sym3_norms(np.ascontiguousarray(D), out)
        return out
    # LAPACK on one BLAS thread from d = SPECTRAL_LIMIT_D on: at d = 64 the eigensolver runs
    # OpenBLAS's worker threads, which then spin ≈ 0.1 s (114 ms of CPU after a 1.5 ms
    # eigvalsh) and take a core from the pair pass that follows
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
    shift = beta * _spectral_norm(D, symmetric)
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
    # fused_pass, without the spectral norms (0.5 µs against 10 µs, once per step of a run
    # with the ledger: :meth:`wflow.model.attention.AttentionModel.evaluate_pair`)
    if (D.ndim == 4 and _sym_form(n, d, D.shape[1], single, fast_exp, weights, causal)
            and _sym3_precheck(_c_f64(D), float(beta), FIXED_SHIFT_LIMIT) == 1):
        return True
    return _shift_and_route(n, d, D, float(beta), single, fast_exp, weights, bool(causal))[1]


def fused_pass(X, D, V, beta, norm_code, laplacian_mask, causal, tied, want_ito=True,
               fast_exp=True, weights=None):
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
    D : (P, H, d, d) symmetric interaction matrices.
    V : (P, H, d, d) value matrices (ignored when ``tied``; may be None then).
    beta : inverse temperature β > 0.
    norm_code : 0 head, 1 joint, 2 none (:data:`NORM_CODES`).
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

    Precision: with float32 ``X`` (d = 3, ``fast_exp``) the pair loop runs in float32
    (logits, exponentials and sums over chunks of 512 columns, 16 SIMD lanes); the chunk
    sums, the combine and every output are float64. Expect relative errors ~1e-6
    (more for large β‖D‖: the logit error is ~6e-8·β‖D‖₂). D and V are always used in float64.

    Returns
    -------
    FieldPass of new float64 arrays, per path, with the meaning of
    :func:`wflow.core._reference.field_reference`:
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
    if X.ndim != 3:
        raise ValueError(f"X has shape {X.shape}: expected (P, n, d)")
    P, n, d = X.shape
    if D.ndim != 4 or D.shape[0] != P or D.shape[2:] != (d, d):
        raise ValueError(f"D has shape {D.shape}: expected ({P}, H, {d}, {d})")
    H = D.shape[1]
    if tied or V is None:
        V = D
    else:
        V = _c_f64(V)
        if V.shape != D.shape:
            raise ValueError(f"V has shape {V.shape}: expected {D.shape}")
    beta = float(beta)
    if not beta > 0:
        raise ValueError(f"beta = {beta}: expected beta > 0")
    norm_code = int(norm_code)
    if norm_code not in (0, 1, 2):
        raise ValueError(f"norm_code = {norm_code}: expected 0 (head), 1 (joint) or 2 (none)")
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

    # logit bound c_h = β‖D_h‖₂ and the shift policy [model §2]; the route. When the
    # symmetric pass applies whatever the spectral norms (a Frobenius bound) and runs one
    # band, its items compute the shifts
    own_shift = False
    pre = -1  # (not tested)
    if _sym_form(n, d, H, single, fast_exp, U, causal):
        pre = _sym3_precheck(D, beta, FIXED_SHIFT_LIMIT)
    if pre == 1 and sym_band_count(n, H) == 1:
        shift, use_sym, own_shift = np.empty((P, H)), True, True
    else:  # (the precheck's symmetry verdict, when it ran, is not tested again)
        shift, use_sym = _shift_and_route(n, d, D, beta, single, fast_exp, U, causal,
                                          None if pre < 0 else pre > 0)
    S0, SX, SI, RS = _row_sum_arrays(P, H, n, d)
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
    energy = new(P)
    diss = new(P)
    G2 = new(P)
    G2hm = new(P)
    ito = new(P)
    dEdD = new((P, H, d, d))
    # rows per tile: the work items of the unfused passes, and the tiles of ∂_D E's partial
    # sums (the symmetric pass: blocks of _SYM_BLOCK_ROWS)
    R = _SYM_BLOCK_ROWS if use_sym else _tile_rows(d)
    # per-tile partial sums of ∂_D E (internal; the symmetric pass writes every one once: kept
    # between calls; the other passes add to them)
    nt = -(-n // R)
    dEp = (_kept("tile_partials", (P, nt, H, d), lambda: np.empty((P, nt, H, d, d))) if use_sym
           else np.zeros((P, nt, H, d, d)))
    # this thread's numba thread count (numba.get_num_threads in compiled code would prevent
    # caching)
    threads = _num_threads()
    outs = (vel, part, grad, bhat, er, dEp, energy, diss, G2, G2hm, ito, dEdD)
    if use_sym:
        bands, nps = _sym_layout(n, H)
        # rows of nps: whole pages (kept: the padding columns stay zero)
        Xt = _kept("sym_columns", (P, n), lambda: _paged_zeros((P, 3, nps), _SLOT_LOADS))
        Xt[:, :, :n] = X.transpose(0, 2, 1)
        nb = bands.size - 1
        sym = (Xt, D, V, X, beta, shift, bands, lap, norm_code, ito_p, R, threads)
        if nb == 1 and P >= threads and _SYM_FUSE:  # items (path, chunk of heads): the same bits
            _run_sym3(_SYM_FUSED, _HAS_FMA and n <= _SYM_TABLE_N, *sym, _NO_CB, S0, SX, SI, RS,
                      *outs, own_shift=own_shift)
        elif nb == 1:  # items (path, head); a path's last head runs its combine
            _run_sym3(_SYM_CHAIN, False, *sym, _NO_CB, S0, SX, SI, RS, *outs,
                      own_shift=own_shift)
        else:  # path by path: the band column sums take H·nb·5·n floats, not P times that
            Cb = _paged_zeros((1, H, nb, 5, nps), _SLOT_SUMS)
            for q in range(P):
                s = slice(q, q + 1)
                _run_sym3(_SYM_PAIRS, False, Xt[s], D[s], V[s], X[s], beta, shift[s], bands,
                          lap, norm_code, ito_p[s], R, threads, Cb, S0[s], SX[s], SI[s],
                          RS[s], *outs)  # (the outputs are not touched by this stage)
                _run_sym_reduce3(bands, Cb, S0[s], SX[s], SI[s], threads)
            _run_sym3(_SYM_COMBINE, False, *sym, _NO_CB, S0, SX, SI, RS, *outs)
        return _field_pass(want_ito, ito_all, ito_p, vel, part, grad, bhat, energy, diss, G2,
                           G2hm, dEdD, ito)
    counter = _job_counter(P, threads)
    tile_threads = min(threads, P * -(-n // R))
    Uk = np.zeros((P, 0)) if U is None else U  # the parallel passes' form (module notes)
    limits = _blas_limits() if _use_blas(n, d, single, fast_exp) else None
    if limits is not None:
        rowmax = np.ascontiguousarray(2.0 * shift >= FIXED_SHIFT_LIMIT)
        _pair_pass_blas(X, D, beta, shift, rowmax, causal, want_ito, bool(fast_exp),
                        S0, SX, SI, RS, limits, U)
        if d >= BLAS_EPILOGUE_MIN_D:
            _epilogue_blas(X, D, V, lap, norm_code, causal, want_ito, beta, U, S0, SX, SI, RS,
                           vel, part, grad, bhat, er, energy, diss, G2, G2hm, ito, dEdD,
                           _blas_limits())
        else:
            _pool.run(_fused64, (_NO_XT, D, V, X, beta, shift, rowmax, lap, norm_code, causal,
                                 want_ito, bool(fast_exp), False, R, counter, Uk, S0, SX, SI,
                                 RS, *outs), tile_threads)
    elif single and d == 3 and fast_exp:
        shift32 = np.ascontiguousarray(shift, dtype=np.float32)
        rowmax = np.ascontiguousarray(2.0 * shift >= FIXED_SHIFT_LIMIT_F32)
        Xt = _columns(X, _VW32, np.float32)
        _pool.run(_fused32, (Xt, D, V, X, beta, shift32, rowmax, lap, norm_code, causal,
                             want_ito, R, counter, Uk, S0, SX, SI, RS, *outs), tile_threads)
    else:
        rowmax = np.ascontiguousarray(2.0 * shift >= FIXED_SHIFT_LIMIT)
        Xt = _columns(X, _VW)
        _pool.run(_fused64, (Xt, D, V, X, beta, shift, rowmax, lap, norm_code, causal,
                             want_ito, bool(fast_exp), True, R, counter, Uk, S0, SX, SI, RS,
                             *outs), tile_threads)
    return _field_pass(want_ito, ito_all, ito_p, vel, part, grad, bhat, energy, diss, G2, G2hm,
                       dEdD, ito)


def _field_pass(want_ito, ito_all, ito_p, vel, part, grad, bhat, energy, diss, G2, G2hm, dEdD,
                ito):
    """The FieldPass of :func:`fused_pass`, NaN as the Itô sum of the paths that do not want
    it (the routes other than the symmetric pass compute it for every path; ``ito_all``: every
    path wants it, or none does)."""
    if want_ito and not ito_all:
        ito[~ito_p] = np.nan
    return FieldPass(vel, part, grad, bhat, energy, diss, G2, G2hm, dEdD, ito)


def _c_f64(a):
    """``a`` as a C-contiguous, writeable float64 array: itself when it is one (``np.require``'s
    Python took 8–16 µs per call on the caches a field evaluation leaves behind)."""
    if (type(a) is np.ndarray and a.dtype == np.float64 and a.flags.c_contiguous
            and a.flags.writeable):
        return a
    return np.require(a, np.float64, ("C", "W"))


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


def _num_threads():
    """``numba.get_num_threads()`` (this thread's setting) without its lock once numba's
    threading layer is up: the public call took ≈ 20 µs per field evaluation (a process
    lock), ≈ 0.15% of the paper case on two threads."""
    try:
        from numba.np.ufunc import parallel as par

        if par._is_initialized:
            nt = int(par._get_num_threads())
            if nt > 0:
                return nt
    except Exception:  # pragma: no cover - another numba: the public call
        pass
    return numba.get_num_threads()


@functools.lru_cache(maxsize=64)
def _sym_layout(n, H):
    """(bands, nps) of the symmetric pass for (n, H): :func:`_sym_bands` and the page-padded
    row length :func:`_sym_stride` (never modified by the pass)."""
    return _sym_bands(n, H), _sym_stride(-(-n // _VQ) * _VQ)


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
        entry = _sym3
    elif _use_blas(n, d, single, fast_exp):
        entry = _blas_sym_item
    else:
        entry = _fused32 if (single and d == 3 and fast_exp) else _fused64
    return _compiled_for_this_cpu(entry)
