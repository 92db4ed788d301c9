"""The compile target and the options every kernel shares.

The vector width of the pair loops follows numba's target (``NUMBA_CPU_NAME`` /
``NUMBA_CPU_FEATURES``, else the host): :data:`_VW` float64 lanes of padding for the row
pass, :data:`_VW32` for float32, :data:`_VQ` the symmetric loop's vector. ``_FM`` is the
fast-math set of the accumulation loops (``reassoc``, ``contract``), ``_OPTS`` the numba
options (on-disk cache, NumPy error model, no bounds checks). :func:`_kernel_pipeline` adds
``noalias`` to array arguments and aligns the stack frame to :data:`_STACK_ALIGN` bytes so
that vector spills are aligned. Intrinsics: bit casts, an unowned array view, ``fma``.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


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
    against 4 (see benchmarks/). Padding to 16 with AVX2 makes the row pass 4% faster at
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
    Where it landed depended on the caller's stack depth, and so did the loop's time; with
    the aligned frame the spills are aligned (the same bits).
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
    meminfo and parent (the same numba type, so no new compilation); of a tuple (the groups of
    a kernel's arguments: its job, row sums, outputs, scratch), every array in it so.

    numba counts references to an array's meminfo with atomic (``lock``-prefixed)
    instructions whenever compiled code makes a view of it or passes it to a function that is
    not inlined: in the symmetric pass that is dozens per (path, head) (the token rows, the
    pair loop's and the combine's arguments), each a full memory barrier, and the two threads'
    counts of a shared array (tokens, D, outputs) contend for one cache line. With NULL
    meminfos numba's ``NRT_incref``/``NRT_decref`` return at once (see benchmarks/). Only for
    a job body's arguments: the Python caller holds every one of them until the job is over,
    and nothing in the body keeps a reference beyond it."""
    if isinstance(arr, (types.Array, types.BaseTuple)):

        def codegen(context, builder, sig, args):
            return _without_owner(builder, sig.args[0], args[0])

        return arr(arr), codegen
    return None


def _without_owner(builder, ty, v):
    """The LLVM value ``v`` of numba type ``ty`` with every array's meminfo and parent NULL
    (:func:`_unowned`)."""
    if isinstance(ty, types.Array):
        elements = v.type.elements  # (meminfo, parent, nitems, itemsize, data, shape, strides)
        v = builder.insert_value(v, ir.Constant(elements[0], None), 0)
        return builder.insert_value(v, ir.Constant(elements[1], None), 1)
    if isinstance(ty, types.BaseTuple):
        for k, t in enumerate(ty.types):
            if isinstance(t, (types.Array, types.BaseTuple)):
                v = builder.insert_value(v, _without_owner(builder, t, builder.extract_value(v, k)), k)
    return v


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
