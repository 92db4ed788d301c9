r"""Explicit SIMD vectors for the numba kernels of :mod:`wflow.kernels`.

numba vectorises loops through LLVM's loop vectoriser, which keeps a reduction's partial sums
in registers only within one loop: every exit reduces them across lanes, every entry starts
again. The symmetric pair loop (:func:`~wflow.kernels.band3._sym_band3`) runs one loop over
all its (group of rows, vector of columns) steps and keeps its row sums as vectors across
them: this module gives numba a vector value type for that.

``vector_ops(lanes, round_magic, coeffs)`` returns intrinsics on ``lanes × float64`` vectors (an LLVM
``<lanes x double>`` held in registers; LLVM splits it where the target's registers are
narrower). Arithmetic carries the ``contract`` flag only (a product feeding one sum may
become a fused multiply-add on targets that have one, never reassociated), so a loop written
with them has one rounding order on a given target, whatever LLVM does to the loop around it
— provided the function using them has no fast-math flags of its own (numba adds the
function's flags to instructions that carry none, ``mul_rounded``'s included).

======================  ================================================================
``load(a, i)``          ``a[i : i + lanes]`` of a contiguous float64 array (unaligned)
``store(a, i, v)``      ``a[i : i + lanes] = v``
``splat(x)``            ``(x, …, x)``;  ``bcast(a, i)``: ``splat(a[i])`` (a broadcast load)
``zero()``              ``(0, …, 0)``
``load3(a, i)``         three vectors ``(a[i + 3l + q])_l`` for q = 0, 1, 2 (the components
                        of ``lanes`` rows of a C-contiguous (rows, 3) array, flat)
``add, mul``            lane-wise ``a + b``, ``a · b`` (contractible)
``mul_rounded(a, b)``   ``a · b`` never contracted into a sum (rounded on its own)
``add_rounded``         ``a + b``; ``sub``, ``div``: ``a − b``, ``a / b``; each rounded on its
                        own: with ``mul_rounded``, a vector loop whose lanes are bit for bit
                        the scalar code's (numba compiles scalar code uncontracted)
``fma(a, b, c)``        ``a·b + c`` (contractible: one instruction with FMA, else two)
``fma_exact(a, b, c)``  ``a·b + c`` rounded once (``llvm.fma``; a libm call without FMA)
``exp2(y)``             :math:`2^y` for y ∈ [−1021, 1023], as
                        :func:`~wflow.kernels.exp._exp2_shifted`, lane-wise
``hsum(v)``             the lanes' sum in a fixed tree (halves added, then halves again)
``store3_groups``       ``(a, i, u, v, w)``: rows r of the vectors (lanes a multiple of 4)
                        interleaved, ``(u_r, v_r, w_r)``, in groups of four rows: group
                        k's 12 floats at ``a[i + 24k :]`` (the symmetric band's row
                        constants)
``hsums(a, i, vs)``     ``a[i + k] = hsum(vs[k])`` for a tuple of m·lanes vectors, as
                        m stores of whole vectors (a transposing tree: the same sums in
                        the same order as ``hsum``: by construction fewer than one
                        fold of three instructions per vector, against log2(lanes)
                        levels and a scalar store each)
======================  ================================================================
"""

from __future__ import annotations

from types import SimpleNamespace

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

from wflow.kernels.exp import _E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9, _E10, _ROUND_MAGIC
from wflow.kernels.target import _VQ


class F64Vec(types.Type):
    """numba type of a ``lanes × float64`` vector value."""

    def __init__(self, lanes):
        self.lanes = lanes
        super().__init__(name=f"F64x{lanes}")


@register_model(F64Vec)
class _F64VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(ir.DoubleType(), fe_type.lanes))


_FLAGS = ("contract",)


def vector_ops(lanes, round_magic, coeffs):
    """Intrinsics on ``lanes × float64`` vectors (the table of the module docstring). The
    exponential uses ``round_magic`` (1.5·2^52) and the polynomial coefficients ``coeffs``
    (E_1 … E_10 of :func:`~wflow.kernels.exp._exp2_shifted`, same Horner order)."""
    ty = F64Vec(lanes)
    vt = ir.VectorType(ir.DoubleType(), lanes)
    it = ir.VectorType(ir.IntType(64), lanes)
    i32 = ir.IntType(32)

    def const(x):
        return ir.Constant(vt, [x] * lanes)

    def splat_ir(builder, x):
        v = builder.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(i32, 0))
        return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                                      ir.Constant(ir.VectorType(i32, lanes), [0] * lanes))

    def ptr(context, builder, aty, arr, i):
        data = context.make_array(aty)(context, builder, arr).data
        return builder.gep(data, [i])

    def is_f64_array(a):
        return isinstance(a, types.Array) and a.dtype == types.float64

    @intrinsic
    def load(typingctx, a, i):
        if is_f64_array(a) and isinstance(i, types.Integer):
            def codegen(context, builder, sig, args):
                p = ptr(context, builder, sig.args[0], *args)
                return builder.load(builder.bitcast(p, vt.as_pointer()), align=8)
            return ty(a, i), codegen
        return None

    @intrinsic
    def load3(typingctx, a, i):
        if is_f64_array(a) and isinstance(i, types.Integer):
            def codegen(context, builder, sig, args):
                p = ptr(context, builder, sig.args[0], *args)
                wide = ir.VectorType(ir.DoubleType(), 3 * lanes)
                w = builder.load(builder.bitcast(p, wide.as_pointer()), align=8)
                u = ir.Constant(wide, ir.Undefined)
                out = [builder.shuffle_vector(w, u, ir.Constant(
                    ir.VectorType(i32, lanes), [q + 3 * k for k in range(lanes)]))
                    for q in range(3)]
                return context.make_tuple(builder, sig.return_type, out)
            return types.UniTuple(ty, 3)(a, i), codegen
        return None

    @intrinsic
    def store(typingctx, a, i, v):
        if is_f64_array(a) and isinstance(i, types.Integer) and v == ty:
            def codegen(context, builder, sig, args):
                p = ptr(context, builder, sig.args[0], args[0], args[1])
                builder.store(args[2], builder.bitcast(p, vt.as_pointer()), align=8)
                return context.get_dummy_value()
            return types.none(a, i, v), codegen
        return None

    @intrinsic
    def splat(typingctx, x):
        if isinstance(x, types.Float):
            def codegen(context, builder, sig, args):
                return splat_ir(builder, args[0])
            return ty(types.float64), codegen
        return None

    @intrinsic
    def bcast(typingctx, a, i):
        if is_f64_array(a) and isinstance(i, types.Integer):
            def codegen(context, builder, sig, args):
                x = builder.load(ptr(context, builder, sig.args[0], *args), align=8)
                return splat_ir(builder, x)
            return ty(a, i), codegen
        return None

    @intrinsic
    def zero(typingctx):
        def codegen(context, builder, sig, args):
            return const(0.0)
        return ty(), codegen

    def binary(op, flags=_FLAGS):
        @intrinsic
        def f(typingctx, a, b):
            if a == ty and b == ty:
                def codegen(context, builder, sig, args):
                    return getattr(builder, op)(args[0], args[1], flags=flags)
                return ty(a, b), codegen
            return None
        return f

    @intrinsic
    def fma(typingctx, a, b, c):
        if a == ty and b == ty and c == ty:
            def codegen(context, builder, sig, args):
                return builder.fadd(builder.fmul(args[0], args[1], flags=_FLAGS), args[2],
                                    flags=_FLAGS)
            return ty(a, b, c), codegen
        return None

    @intrinsic
    def fma_exact(typingctx, a, b, c):
        if a == ty and b == ty and c == ty:
            def codegen(context, builder, sig, args):
                fn = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fma.v{lanes}f64")
                return builder.call(fn, args)
            return ty(a, b, c), codegen
        return None

    @intrinsic
    def exp2(typingctx, y):
        if y == ty:
            def codegen(context, builder, sig, args):
                y = args[0]
                t = builder.fadd(y, const(round_magic))  # (no flags: the rounding trick)
                k = builder.fsub(t, const(round_magic))
                r = builder.fsub(y, k)
                p = const(coeffs[-1])
                for c in coeffs[-2::-1]:
                    p = builder.fadd(builder.fmul(p, r, flags=_FLAGS), const(c), flags=_FLAGS)
                p = builder.fadd(builder.fmul(p, r, flags=_FLAGS), const(1.0), flags=_FLAGS)
                e = builder.shl(builder.bitcast(t, it), ir.Constant(it, [52] * lanes))
                return builder.bitcast(builder.add(builder.bitcast(p, it), e), vt)
            return ty(y), codegen
        return None

    @intrinsic
    def hsum(typingctx, v):
        if v == ty:
            def codegen(context, builder, sig, args):
                v = args[0]
                m = lanes
                while m > 1:  # lanes [0, m/2) + [m/2, m)
                    h = m // 2
                    sub = ir.VectorType(ir.DoubleType(), h)
                    u = ir.Constant(v.type, ir.Undefined)
                    lo = builder.shuffle_vector(v, u, ir.Constant(ir.VectorType(i32, h),
                                                                  list(range(h))))
                    hi = builder.shuffle_vector(v, u, ir.Constant(ir.VectorType(i32, h),
                                                                  list(range(h, m))))
                    v = builder.fadd(lo, hi)
                    m = h
                    assert v.type == sub
                return builder.extract_element(v, ir.Constant(i32, 0))
            return types.float64(v), codegen
        return None

    def fold(builder, x, y, k):
        # blocks of k lanes: (x, y)'s first blocks of each 2k lanes plus their second ones;
        # lane l of the result sums two lanes of x (its first half of each 2k) or of y
        first, second = [], []
        for c in range(0, lanes, 2 * k):
            first += list(range(c, c + k)) + list(range(lanes + c, lanes + c + k))
            second += list(range(c + k, c + 2 * k)) + list(range(lanes + c + k, lanes + c + 2 * k))
        mask = ir.VectorType(i32, lanes)
        return builder.fadd(builder.shuffle_vector(x, y, ir.Constant(mask, first)),
                            builder.shuffle_vector(x, y, ir.Constant(mask, second)))

    def reduce_ir(builder, vs, k=1):
        # lane j of the result: the sum of vs[j]'s lanes, by hsum's tree (the first level,
        # k = lanes/2, adds the halves; the last, k = 1, neighbouring lanes)
        if len(vs) == 1:
            return vs[0]
        return fold(builder, reduce_ir(builder, vs[0::2], 2 * k),
                    reduce_ir(builder, vs[1::2], 2 * k), k)

    @intrinsic
    def store3_groups(typingctx, a, i, u, v, w):
        if (is_f64_array(a) and isinstance(i, types.Integer) and u == ty and v == ty
                and w == ty and lanes % 4 == 0):
            def codegen(context, builder, sig, args):
                arr, i, u, v, w = args
                two = lambda x, y: builder.shuffle_vector(  # noqa: E731
                    x, y, ir.Constant(ir.VectorType(i32, 2 * lanes), list(range(2 * lanes))))
                uv, ww = two(u, v), two(w, w)  # (lanes of w at 2·lanes + r)
                full = builder.shuffle_vector(uv, ww, ir.Constant(
                    ir.VectorType(i32, 3 * lanes),
                    [c * lanes + r for r in range(lanes) for c in range(3)]))
                g12 = ir.VectorType(ir.DoubleType(), 12)
                for k in range(lanes // 4):
                    part = builder.shuffle_vector(full, ir.Constant(full.type, ir.Undefined),
                                                  ir.Constant(ir.VectorType(i32, 12),
                                                              list(range(12 * k, 12 * k + 12))))
                    p = ptr(context, builder, sig.args[0], arr,
                            builder.add(i, ir.Constant(i.type, 24 * k)))
                    builder.store(part, builder.bitcast(p, g12.as_pointer()), align=8)
                return context.get_dummy_value()
            return types.none(a, i, u, v, w), codegen
        return None

    @intrinsic
    def hsums(typingctx, a, i, vs):
        if (is_f64_array(a) and isinstance(i, types.Integer)
                and isinstance(vs, types.UniTuple) and vs.dtype == ty
                and vs.count % lanes == 0):
            def codegen(context, builder, sig, args):
                arr, i, tup = args
                vals = [builder.extract_value(tup, k) for k in range(sig.args[2].count)]
                for m in range(0, len(vals), lanes):
                    p = ptr(context, builder, sig.args[0], arr,
                            builder.add(i, ir.Constant(i.type, m)))
                    builder.store(reduce_ir(builder, vals[m:m + lanes]),
                                  builder.bitcast(p, vt.as_pointer()), align=8)
                return context.get_dummy_value()
            return types.none(a, i, vs), codegen
        return None

    return SimpleNamespace(load=load, store=store, splat=splat, bcast=bcast,
                           zero=zero, add=binary("fadd"), mul=binary("fmul"),
                           mul_rounded=binary("fmul", ()), add_rounded=binary("fadd", ()),
                           sub=binary("fsub", ()), div=binary("fdiv", ()), load3=load3,
                           fma=fma,
                           fma_exact=fma_exact, exp2=exp2, hsum=hsum, hsums=hsums,
                           store3_groups=store3_groups)



_V = vector_ops(_VQ, _ROUND_MAGIC, (_E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9, _E10))
_vload, _vstore, _vsplat, _vbcast, _vzero = _V.load, _V.store, _V.splat, _V.bcast, _V.zero
_vadd, _vmul, _vfma, _vfma_exact, _vexp2, _vhsums = (_V.add, _V.mul, _V.fma, _V.fma_exact,
                                                     _V.exp2, _V.hsums)
_vhsum = _V.hsum
_vmul_rounded = _V.mul_rounded
_vadd_rounded, _vsub, _vdiv, _vload3 = _V.add_rounded, _V.sub, _V.div, _V.load3
_vstore3_groups = _V.store3_groups
