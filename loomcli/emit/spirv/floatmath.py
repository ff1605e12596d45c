"""Float and combining-kind semantics of LANGUAGE.md 7.2/7.5 as SPIR-V.

Everything here is exact where the language is exact, built from selects and
bit operations rather than instructions whose NaN or signed-zero behaviour
Vulkan leaves open:

* minimumf/maximumf propagate NaN and order -0 < +0; minnumf/maxnumf return
  the non-NaN operand (GLSL's FMin/NMin are not used for these);
* bf16 values are carried in f32 and rounded to nearest-even on the f32 bit
  pattern after every operation that can produce a non-bf16 value;
* +, -, *, / and the math functions are decorated `NoContraction` unless the
  op allows `contract`, so drivers cannot fuse them into an fma;
* powf handles the C99 special cases (zeros, infinities, NaN, negative bases
  with integral exponents) with selects around GLSL `Pow` of |x|.

Square roots, floor, ceil and abs use GLSL.std.450; exp, exp2, log, log2,
sin, cos, tanh and pow call the software routines of `mathlib` (emitted once
per module as functions; f16 and bf16 go through the f32 ones), because
Vulkan's precision for the GLSL.std.450 versions is far from "a few ulp".
"""

from __future__ import annotations

from typing import Protocol

from loomcli.emit.spirv.builder import Builder
from loomcli.emit.spirv.spec import GLSL, Op
from loomcli.ir.types import BF16, F16, I1, ScalarType

INF = float("inf")
NAN = float("nan")

FLOAT_BINARY = {"addf": Op.FAdd, "subf": Op.FSub, "mulf": Op.FMul, "divf": Op.FDiv}
# Unary ops GLSL.std.450 computes well enough on every width (exact, or within
# Vulkan's 2-3 ulp for the square roots); the others come from `mathlib`.
GLSL_UNARY = {"sqrtf": GLSL.Sqrt, "rsqrtf": GLSL.InverseSqrt, "floorf": GLSL.Floor, "ceilf": GLSL.Ceil,
              "absf": GLSL.FAbs}
GLSL_EXACT = frozenset(GLSL_UNARY)


class MathHost(Protocol):
    """What the f64 routines need from the emitter: a helper function by name."""

    def math_helper(self, name: str) -> int: ...


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


def finish(b: Builder, t: ScalarType, x: int) -> int:
    """Bring a computed value back to its type (bf16 rounding)."""
    return round_bf16(b, x) if t is BF16 else x


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
    return finish(b, t, r)


def fma(b: Builder, t: ScalarType, x: int, y: int, z: int) -> int:
    return finish(b, t, b.fw.ext(b.typeof(x), GLSL.Fma, x, y, z))


def binary(b: Builder, host: MathHost, name: str, t: ScalarType, x: int, y: int, flags: tuple[str, ...] = ()) -> int:
    if name in FLOAT_BINARY:
        return arith(b, FLOAT_BINARY[name], t, x, y, flags)
    if name in MINMAX:
        return MINMAX[name](b, t, x, y)
    if name == "powf":
        return finish(b, t, powf(b, host, t, x, y))
    raise KeyError(name)


def unary(b: Builder, host: MathHost, name: str, t: ScalarType, x: int, flags: tuple[str, ...] = ()) -> int:
    ft = b.typeof(x)
    if name == "negf":
        return b.val(Op.FNegate, ft, x)
    if name in GLSL_EXACT:
        r = b.fw.ext(ft, GLSL_UNARY[name], x)
        if name in ("sqrtf", "rsqrtf") and "contract" not in flags:
            b.nocontract(r)
        if name == "absf":
            return r  # exact, and a sign-bit operation: rounding would quiet a signalling bf16 NaN
        return finish(b, t, r)
    # Transcendental: the software routines (`mathlib`), f16 through f32.
    wide = 64 if t.bits == 64 else 32
    arg = b.val(Op.FConvert, b.m.float(32), x) if t is F16 else x
    r = b.val(Op.FunctionCall, b.m.float(wide), host.math_helper(f"{name[:-1]}_f{wide}"), arg)
    if t is F16:
        return b.val(Op.FConvert, ft, r)
    return finish(b, t, r)


def powf(b: Builder, host: MathHost, t: ScalarType, x: int, y: int) -> int:
    """x**y with the C99 special cases; |x|**y of a finite positive |x| and a
    finite y comes from GLSL Pow (f16/f32) or the f64 routine."""
    bits = cbits(t)
    ft = b.typeof(x)

    def k(v: float) -> int:
        return b.m.fconst(bits, v)

    ax = b.fw.ext(ft, GLSL.FAbs, x)
    # |x|**y by the software routine (garbage where a special case applies; replaced below).
    if t is F16:
        f32 = b.m.float(32)
        core = b.val(Op.FunctionCall, f32, host.math_helper("pow_f32"), b.val(Op.FConvert, f32, ax),
                     b.val(Op.FConvert, f32, y))
        core = b.val(Op.FConvert, ft, core)
    else:
        core = b.val(Op.FunctionCall, ft, host.math_helper(f"pow_f{bits}"), ax, y)
    fy = b.fw.ext(ft, GLSL.Floor, y)
    y_int = b.cmp(Op.FOrdEqual, fy, y)                    # true for +-inf too
    half = b.val(Op.FMul, ft, y, k(0.5))
    y_odd = b.land(y_int, b.cmp(Op.FOrdNotEqual, b.fw.ext(ft, GLSL.Floor, half), half))
    y_neg = b.cmp(Op.FOrdLessThan, y, k(0.0))
    y_zero = b.cmp(Op.FOrdEqual, y, k(0.0))
    zero_case = b.select(y_neg, k(INF), b.select(y_zero, k(1.0), k(0.0)))
    inf_case = b.select(y_neg, k(0.0), b.select(y_zero, k(1.0), k(INF)))
    mag = b.select(b.cmp(Op.FOrdEqual, ax, k(0.0)), zero_case, core)
    mag = b.select(b.cmp(Op.FOrdEqual, ax, k(INF)), inf_case, mag)
    ax_gt1 = b.cmp(Op.FOrdGreaterThan, ax, k(1.0))
    ax_eq1 = b.cmp(Op.FOrdEqual, ax, k(1.0))
    mag = b.select(b.cmp(Op.FOrdEqual, y, k(INF)), b.select(ax_gt1, k(INF), b.select(ax_eq1, k(1.0), k(0.0))), mag)
    mag = b.select(b.cmp(Op.FOrdEqual, y, k(-INF)), b.select(ax_gt1, k(0.0), b.select(ax_eq1, k(1.0), k(INF))), mag)
    r = b.select(b.land(signbit(b, bits, x), y_odd), b.val(Op.FNegate, ft, mag), mag)
    finite_neg = b.land(b.cmp(Op.FOrdLessThan, x, k(0.0)), b.logical_not(b.val(Op.IsInf, b.bool_t, x)))
    y_frac = b.land(b.logical_not(y_int), b.logical_not(b.val(Op.IsInf, b.bool_t, y)))
    r = b.select(b.land(finite_neg, y_frac), k(NAN), r)
    r = b.select(b.lor(isnan(b, x), isnan(b, y)), k(NAN), r)
    return b.select(b.lor(y_zero, b.cmp(Op.FOrdEqual, x, k(1.0))), k(1.0), r)


# ------------------------------------------------------------ combining kinds (7.5)

_INT_COMBINE = {"addi": Op.IAdd, "muli": Op.IMul, "andi": Op.BitwiseAnd, "ori": Op.BitwiseOr,
                "xori": Op.BitwiseXor}
_INT_ORDER = {"minsi": Op.SLessThan, "maxsi": Op.SGreaterThan, "minui": Op.ULessThan, "maxui": Op.UGreaterThan}
# On i1 (true reads as -1 signed, 1 unsigned) every kind is a logical op.
BOOL_COMBINE = {"addi": Op.LogicalNotEqual, "xori": Op.LogicalNotEqual, "muli": Op.LogicalAnd,
                "andi": Op.LogicalAnd, "ori": Op.LogicalOr, "minsi": Op.LogicalOr, "maxsi": Op.LogicalAnd,
                "minui": Op.LogicalAnd, "maxui": Op.LogicalOr}


def combine(b: Builder, host: MathHost, kind: str, t: ScalarType, x: int, y: int) -> int:
    """x <kind> y for a combining kind on a scalar of type `t`."""
    if t is I1:
        return b.cmp(BOOL_COMBINE[kind], x, y)
    if kind in _INT_COMBINE:
        return b.bin(_INT_COMBINE[kind], x, y)
    if kind in _INT_ORDER:
        return b.select(b.cmp(_INT_ORDER[kind], x, y), x, y)
    return binary(b, host, kind, t, x, y)
