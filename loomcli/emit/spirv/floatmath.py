"""Float and combining-kind semantics of LANGUAGE.md 7.2/7.5 as SPIR-V.

Everything here is exact where the language is exact, built from selects and
bit operations rather than instructions whose NaN or signed-zero behaviour
Vulkan leaves open:

* minimumf/maximumf propagate NaN and order -0 < +0; minnumf/maxnumf return
  the non-NaN operand (GLSL's FMin/NMin are not used for these);
* bf16 values are carried in f32; `widen-bf16` made their arithmetic f32
  between conversions, and a conversion to bf16 rounds to nearest-even on
  the f32 bit pattern (`round_bf16`);
* +, -, *, / and the square roots are decorated `NoContraction` unless the
  op allows `contract`, so drivers cannot fuse them into an fma.

Square roots, floor, ceil and abs use GLSL.std.450. exp, exp2, log, log2,
sin, cos, tanh and pow never get here: Vulkan's precision for the
GLSL.std.450 versions is far from "a few ulp", so the spirv profiles list
none of them as native and `expand-math` (loomcli/passes/mathlib.py) has
built them from the ops above before instruction selection.
"""

from __future__ import annotations

from loomcli.emit.spirv.builder import Builder
from loomcli.emit.spirv.spec import GLSL, Op
from loomcli.ir.types import BF16, I1, ScalarType

INF = float("inf")
NAN = float("nan")

FLOAT_BINARY = {"addf": Op.FAdd, "subf": Op.FSub, "mulf": Op.FMul, "divf": Op.FDiv}
# Unary ops GLSL.std.450 computes well enough on every width (exact, or within
# Vulkan's 2-3 ulp for the square roots).
GLSL_UNARY = {"sqrtf": GLSL.Sqrt, "rsqrtf": GLSL.InverseSqrt, "floorf": GLSL.Floor, "ceilf": GLSL.Ceil,
              "absf": GLSL.FAbs}
GLSL_EXACT = frozenset(GLSL_UNARY)


def cbits(t: ScalarType) -> int:
    """Width of the SPIR-V float that carries a value of `t`."""
    return 32 if t is BF16 else t.bits


def fconst(b: Builder, t: ScalarType, x: float) -> int:
    b.vtype(t)
    return b.m.fconst(cbits(t), x)


def isnan(b: Builder, x: int) -> int:
    return b.val(Op.IsNan, b.bool_t, x)


# ------------------------------------------------------------ bit patterns


def _bits_type(b: Builder, bits: int) -> int:
    """An integer type with the float's width; f64 uses a pair of u32 (no Int64 needed)."""
    if bits == 64:
        return b.m.vector(b.u32_t, 2)
    return b.uint_t(bits)


def bits_op(b: Builder, opcode: int, bits: int, x: int, y: int) -> int:
    """A bitwise op on the bit patterns of two floats."""
    it = _bits_type(b, bits)
    r = b.val(opcode, it, b.bitcast(it, x), b.bitcast(it, y))
    return b.bitcast(b.typeof(x), r)


def signbit(b: Builder, bits: int, x: int) -> int:
    """The sign bit of a float, as a bool (true for -0.0 and negative NaNs)."""
    it = _bits_type(b, bits)
    v = b.bitcast(it, x)
    if bits == 64:
        v = b.val(Op.CompositeExtract, b.u32_t, v, 1)
        bits = 32
    mask = b.m.uint(bits, 1 << (bits - 1))
    return b.cmp(Op.INotEqual, b.bin(Op.BitwiseAnd, v, mask), b.m.uint(bits, 0))


def round_bf16(b: Builder, x: int) -> int:
    """Round an f32 to the nearest-even bf16 value (kept in f32); NaN stays a quiet NaN."""
    u = b.bitcast(b.u32_t, x)
    lsb = b.bin(Op.BitwiseAnd, b.ishr(u, 16), b.u32(1))
    rounded = b.bin(Op.IAdd, u, b.bin(Op.IAdd, lsb, b.u32(0x7FFF)))
    rounded = b.bin(Op.BitwiseAnd, rounded, b.u32(0xFFFF0000))
    quiet = b.bin(Op.BitwiseAnd, b.bin(Op.BitwiseOr, u, b.u32(0x00400000)), b.u32(0xFFFF0000))
    r = b.select(isnan(b, x), quiet, rounded)
    return b.bitcast(b.m.float(32), r)


# ------------------------------------------------------------ min/max


def minimum(b: Builder, t: ScalarType, x: int, y: int) -> int:
    bits = cbits(t)
    r = b.select(b.cmp(Op.FOrdLessThan, x, y), x, y)
    # Equal operands: the same bits, or zeros, where -0 wins (an OR of the patterns).
    r = b.select(b.cmp(Op.FOrdEqual, x, y), bits_op(b, Op.BitwiseOr, bits, x, y), r)
    r = b.select(isnan(b, y), y, r)
    return b.select(isnan(b, x), x, r)


def maximum(b: Builder, t: ScalarType, x: int, y: int) -> int:
    bits = cbits(t)
    r = b.select(b.cmp(Op.FOrdGreaterThan, x, y), x, y)
    r = b.select(b.cmp(Op.FOrdEqual, x, y), bits_op(b, Op.BitwiseAnd, bits, x, y), r)
    r = b.select(isnan(b, y), y, r)
    return b.select(isnan(b, x), x, r)


def minnum(b: Builder, t: ScalarType, x: int, y: int) -> int:
    r = minimum(b, t, x, y)
    r = b.select(isnan(b, y), x, r)
    return b.select(isnan(b, x), y, r)


def maxnum(b: Builder, t: ScalarType, x: int, y: int) -> int:
    r = maximum(b, t, x, y)
    r = b.select(isnan(b, y), x, r)
    return b.select(isnan(b, x), y, r)


MINMAX = {"minimumf": minimum, "maximumf": maximum, "minnumf": minnum, "maxnumf": maxnum}


# ------------------------------------------------------------ arithmetic


def arith(b: Builder, opcode: int, t: ScalarType, x: int, y: int, flags: tuple[str, ...] = ()) -> int:
    r = b.val(opcode, b.typeof(x), x, y)
    if "contract" not in flags:
        b.nocontract(r)
    return r


def fma(b: Builder, t: ScalarType, x: int, y: int, z: int) -> int:
    return b.fw.ext(b.typeof(x), GLSL.Fma, x, y, z)


def binary(b: Builder, name: str, t: ScalarType, x: int, y: int, flags: tuple[str, ...] = ()) -> int:
    if name in FLOAT_BINARY:
        return arith(b, FLOAT_BINARY[name], t, x, y, flags)
    return MINMAX[name](b, t, x, y)


def unary(b: Builder, name: str, t: ScalarType, x: int, flags: tuple[str, ...] = ()) -> int:
    ft = b.typeof(x)
    if name == "negf":
        return b.val(Op.FNegate, ft, x)
    if name in GLSL_EXACT:
        r = b.fw.ext(ft, GLSL_UNARY[name], x)
        if name in ("sqrtf", "rsqrtf") and "contract" not in flags:
            b.nocontract(r)
        return r
    raise KeyError(name)


# ------------------------------------------------------------ combining kinds (7.5)

_INT_COMBINE = {"addi": Op.IAdd, "muli": Op.IMul, "andi": Op.BitwiseAnd, "ori": Op.BitwiseOr,
                "xori": Op.BitwiseXor}
_INT_ORDER = {"minsi": Op.SLessThan, "maxsi": Op.SGreaterThan, "minui": Op.ULessThan, "maxui": Op.UGreaterThan}
# On i1 (true reads as -1 signed, 1 unsigned) every kind is a logical op.
BOOL_COMBINE = {"addi": Op.LogicalNotEqual, "xori": Op.LogicalNotEqual, "muli": Op.LogicalAnd,
                "andi": Op.LogicalAnd, "ori": Op.LogicalOr, "minsi": Op.LogicalOr, "maxsi": Op.LogicalAnd,
                "minui": Op.LogicalAnd, "maxui": Op.LogicalOr}


def combine(b: Builder, kind: str, t: ScalarType, x: int, y: int) -> int:
    """x <kind> y for a combining kind on a scalar of type `t`."""
    if t is I1:
        return b.cmp(BOOL_COMBINE[kind], x, y)
    if kind in _INT_COMBINE:
        return b.bin(_INT_COMBINE[kind], x, y)
    if kind in _INT_ORDER:
        return b.select(b.cmp(_INT_ORDER[kind], x, y), x, y)
    return binary(b, kind, t, x, y)
