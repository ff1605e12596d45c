"""Math functions: LLVM intrinsics where the target lowers them, short
branch-free expansions elsewhere (shared by every LLVM-based target).

The expansions follow fdlibm and Cephes:

* `tanh`: Cephes' polynomial below |x| = 0.625, 1 - 2/(e^{2|x|} + 1) above;
* f64 `exp`, `exp2`: Cody-Waite reduction by ln 2, a degree-13 Taylor
  polynomial, `llvm.ldexp` (about 1 ulp);
* f64 `log`, `log2`: `llvm.frexp`, fdlibm's `Lg1..Lg7` polynomial (about 1 ulp);
* f64 `sin`, `cos`: reduction by pi/2 (a three-double pi/2, fma steps),
  fdlibm's kernels: about 1 ulp for |x| < 2^40; no Payne-Hanek reduction,
  so larger arguments give inaccurate results;
* `pow` (every type, since LLVM's AMDGPU `llvm.pow` is exp2(y log2 x) and
  wrong for negative bases): computed in f64 with a double-double logarithm,
  with C99's special cases (x < 0 with integer y, zeros, infinities, NaN).

Fast-math flags permit rewrites, never require them; expansions ignore them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from loomcli.ir.types import F64

if TYPE_CHECKING:
    from loomcli.emit.llvm.lower import FunctionLowering

D = "double"
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
LN2 = math.log(2.0)
LN2_TAIL = 2.3190468138462996e-17   # ln 2 - LN2
LOG2E = 1.4426950408889634
TWO_OVER_PI = 0.6366197723675814
PIO2 = (1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33)
LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01, 2.222219843214978396e-01,
      1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01)
IVLN2_HI = 1.44269504072144627571e+00
IVLN2_LO = 1.67517131648865118353e-10
SIN = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
       2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
COS = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
       -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
TANH_F32 = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
TANH_P = (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3)
TANH_Q = (1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)
EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(14))


# What this module can expand; every other math function is an LLVM intrinsic
# that every target lowers (sqrt, fabs, floor, ceil, fma, min/max, ldexp...).
EXPANDED = ("exp", "exp2", "log", "log2", "sin", "cos", "tanh", "pow")


def math_call(fl: FunctionLowering, fn: str, llty: str, args: list[str], flags: str = "", hint: str = "t") -> str:
    """`fn` (a `loomcli.emit.llvm.target.MATH_FUNCTIONS` name) of scalar `args`."""
    if fn not in EXPANDED or (fn not in ("pow", "tanh") and (fn, llty) in fl.t.native_math):
        return fl.intrinsic(fn, llty, args, flags, hint)
    if fn == "pow":
        wide = [_widen(fl, llty, a) for a in args]
        return _narrow(fl, llty, pow64(Builder(fl), *wide))
    if fn == "tanh":
        if llty == D:
            return tanh64(Builder(fl), args[0])
        x = fl.cast("fpext", llty, args[0], "float") if llty == "half" else args[0]
        r = tanh32(Builder(fl, "float"), x)
        return fl.cast("fptrunc", "float", r, "half") if llty == "half" else r
    if llty != D:  # a narrower type the target lacks: through f64, rounded once at the end
        return _narrow(fl, llty, math_call(fl, fn, D, [_widen(fl, llty, args[0])]))
    b = Builder(fl)
    return {"exp": exp64, "exp2": exp2_64, "log": log64, "log2": log2_64, "sin": sin64, "cos": cos64}[fn](b, args[0])


def _widen(fl: FunctionLowering, llty: str, v: str) -> str:
    return v if llty == D else fl.cast("fpext", llty, v, D)


def _narrow(fl: FunctionLowering, llty: str, v: str) -> str:
    return v if llty == D else fl.cast("fptrunc", D, v, llty)


class Builder:
    """Float arithmetic of one type, as terse as the formulas it spells."""

    def __init__(self, fl: FunctionLowering, ty: str = D) -> None:
        self.fl = fl
        self.ty = ty

    def c(self, x: float) -> str:
        from loomcli.emit.llvm.lower import float_literal

        return float_literal(self.ty, F64, x)

    def add(self, a: str, b: str) -> str:
        return self.fl.binop("fadd", self.ty, a, b)

    def sub(self, a: str, b: str) -> str:
        return self.fl.binop("fsub", self.ty, a, b)

    def mul(self, a: str, b: str) -> str:
        return self.fl.binop("fmul", self.ty, a, b)

    def div(self, a: str, b: str) -> str:
        return self.fl.binop("fdiv", self.ty, a, b)

    def neg(self, a: str) -> str:
        return self.fl.inst(f"fneg {self.ty} {a}")

    def fma(self, a: str, b: str, c: str) -> str:
        return self.fl.intrinsic("fma", self.ty, [a, b, c])

    def call(self, fn: str, *args: str) -> str:
        return self.fl.intrinsic(fn, self.ty, list(args))

    def cmp(self, pred: str, a: str, b: str) -> str:
        return self.fl.inst(f"fcmp {pred} {self.ty} {a}, {b}")

    def sel(self, c: str, a: str, b: str) -> str:
        return self.fl.select(c, self.ty, a, b)

    def horner(self, x: str, coeffs: tuple[float, ...]) -> str:
        """c0*x^(n-1) + ... + c_{n-1}, coefficients highest degree first."""
        acc = self.c(coeffs[0])
        for k in coeffs[1:]:
            acc = self.fma(acc, x, self.c(k))
        return acc

    def to_int(self, x: str) -> str:
        """An integral float as i32, saturating (NaN: 0) so no poison escapes."""
        return self.fl.call("i32", f"llvm.fptosi.sat.i32.{self.fl.suffix(self.ty)}", [(self.ty, x)])

    def ldexp(self, x: str, n: str) -> str:
        return self.fl.call(self.ty, f"llvm.ldexp.{self.fl.suffix(self.ty)}.i32", [(self.ty, x), ("i32", n)])

    def and_(self, a: str, b: str) -> str:
        return self.fl.binop("and", "i1", a, b)

    def or_(self, a: str, b: str) -> str:
        return self.fl.binop("or", "i1", a, b)

    def not_(self, a: str) -> str:
        return self.fl.binop("xor", "i1", a, "true")


# ---------------------------------------------------------------- exp


def _exp_reduced(b: Builder, r: str, n: str) -> str:
    """e^r * 2^n for |r| <= ln(2)/2."""
    p = b.horner(r, tuple(reversed(EXP_TAYLOR)))
    return b.ldexp(p, b.to_int(n))


def _clamp(b: Builder, x: str, bound: float) -> str:
    return b.call("maximum", b.call("minimum", x, b.c(bound)), b.c(-bound))  # NaN stays NaN


def exp64(b: Builder, x: str) -> str:
    x = _clamp(b, x, 1100.0)
    n = b.call("rint", b.mul(x, b.c(LOG2E)))
    nn = b.neg(n)
    r = b.fma(nn, b.c(LN2_HI), x)
    r = b.fma(nn, b.c(LN2_LO), r)
    return _exp_reduced(b, r, n)


def exp2_64(b: Builder, x: str) -> str:
    x = _clamp(b, x, 1100.0)
    n = b.call("rint", x)
    f = b.sub(x, n)                                         # exact, |f| <= 1/2
    r = b.fma(f, b.c(LN2), b.mul(f, b.c(LN2_TAIL)))
    return _exp_reduced(b, r, n)


# ---------------------------------------------------------------- log


class _LogParts:
    """x = 2^k (1 + f), sqrt(1/2) <= 1 + f < sqrt(2); log(1+f) = f - hfsq + s (hfsq + R)."""

    def __init__(self, b: Builder, x: str) -> None:
        fl = b.fl
        fr = fl.call(f"{{ {D}, i32 }}", "llvm.frexp.f64.i32", [(D, x)])
        m = fl.inst(f"extractvalue {{ {D}, i32 }} {fr}, 0")
        e = fl.inst(f"extractvalue {{ {D}, i32 }} {fr}, 1")
        small = b.cmp("olt", m, b.c(math.sqrt(0.5)))
        m = b.sel(small, b.mul(m, b.c(2.0)), m)
        e = fl.select(small, "i32", fl.binop("sub", "i32", e, "1"), e)
        self.k = fl.cast("sitofp", "i32", e, D)
        self.f = b.sub(m, b.c(1.0))
        self.s = b.div(self.f, b.add(b.c(2.0), self.f))
        z = b.mul(self.s, self.s)
        w = b.mul(z, z)
        t1 = b.mul(w, b.horner(w, (LG[5], LG[3], LG[1])))
        t2 = b.mul(z, b.horner(w, (LG[6], LG[4], LG[2], LG[0])))
        self.r = b.add(t2, t1)
        self.hfsq = b.mul(b.mul(b.c(0.5), self.f), self.f)
        self.tail = b.mul(self.s, b.add(self.hfsq, self.r))  # s (hfsq + R)


def _log_specials(b: Builder, x: str, r: str) -> str:
    inf = b.c(math.inf)
    r = b.sel(b.cmp("oeq", x, inf), inf, r)
    r = b.sel(b.cmp("oeq", x, b.c(0.0)), b.c(-math.inf), r)
    return b.sel(b.cmp("olt", x, b.c(0.0)), b.c(math.nan), r)


def log64(b: Builder, x: str) -> str:
    p = _LogParts(b, x)
    inner = b.sub(b.sub(p.hfsq, b.add(p.tail, b.mul(p.k, b.c(LN2_LO)))), p.f)
    return _log_specials(b, x, b.sub(b.mul(p.k, b.c(LN2_HI)), inner))


def log2_64(b: Builder, x: str) -> str:
    fl = b.fl
    p = _LogParts(b, x)
    hi = b.sub(p.f, p.hfsq)
    bits = fl.binop("and", "i64", fl.cast("bitcast", D, hi, "i64"), str(-(1 << 32)))
    hi = fl.cast("bitcast", "i64", bits, D)                 # the top 21 mantissa bits: exact products below
    lo = b.add(b.sub(b.sub(p.f, hi), p.hfsq), p.tail)
    val_hi = b.mul(hi, b.c(IVLN2_HI))
    val_lo = b.add(b.mul(b.add(lo, hi), b.c(IVLN2_LO)), b.mul(lo, b.c(IVLN2_HI)))
    w = b.add(p.k, val_hi)
    val_lo = b.add(val_lo, b.add(b.sub(p.k, w), val_hi))
    return _log_specials(b, x, b.add(val_lo, w))


# ---------------------------------------------------------------- sin, cos


def _sincos_parts(b: Builder, x: str) -> tuple[str, str, str]:
    n = b.call("rint", b.mul(x, b.c(TWO_OVER_PI)))
    nn = b.neg(n)
    r = x
    for part in PIO2:
        r = b.fma(nn, b.c(part), r)
    quarter = b.mul(n, b.c(0.25))                           # n mod 4, exact for |n| < 2^53
    q = b.to_int(b.sub(n, b.mul(b.call("floor", quarter), b.c(4.0))))
    z = b.mul(r, r)
    s = b.fma(b.mul(z, r), b.fma(z, b.horner(z, SIN[5:0:-1]), b.c(SIN[0])), r)
    cz = b.mul(z, b.mul(z, b.horner(z, tuple(reversed(COS)))))
    hz = b.mul(b.c(0.5), z)
    w = b.sub(b.c(1.0), hz)
    c = b.add(w, b.add(b.sub(b.sub(b.c(1.0), w), hz), cz))
    return q, s, c


def _quadrant(b: Builder, q: str, s: str, c: str, negate_on: str) -> str:
    fl = b.fl
    swap = fl.inst(f"icmp ne i32 {fl.binop('and', 'i32', q, '1')}, 0")
    v = b.sel(swap, c, s)
    neg = fl.inst(f"icmp ne i32 {fl.binop('and', 'i32', negate_on, '2')}, 0")
    return b.sel(neg, b.neg(v), v)


def sin64(b: Builder, x: str) -> str:
    q, s, c = _sincos_parts(b, x)
    r = _quadrant(b, q, s, c, q)
    return b.sel(b.cmp("oeq", x, b.c(0.0)), x, r)            # sin(-0) = -0


def cos64(b: Builder, x: str) -> str:
    q, s, c = _sincos_parts(b, x)
    return _quadrant(b, q, c, b.neg(s), q)


# ---------------------------------------------------------------- tanh


def _tanh_large(b: Builder, x: str, exp_of: str) -> str:
    t = b.sub(b.c(1.0), b.div(b.c(2.0), b.add(exp_of, b.c(1.0))))
    return b.call("copysign", t, x)


def tanh32(b: Builder, x: str) -> str:
    z = b.call("fabs", x)
    big = _tanh_large(b, x, b.call("exp", b.add(z, z)))
    s = b.mul(x, x)
    small = b.fma(b.mul(b.horner(s, TANH_F32), s), x, x)
    small = b.sel(b.cmp("oeq", x, b.c(0.0)), x, small)     # tanh(-0) = -0
    return b.sel(b.cmp("oge", z, b.c(0.625)), big, small)


def tanh64(b: Builder, x: str) -> str:
    z = b.call("fabs", x)
    big = _tanh_large(b, x, exp64(b, b.add(z, z)))
    s = b.mul(x, x)
    num = b.horner(s, TANH_P)
    den = b.horner(s, (1.0, *TANH_Q))
    small = b.fma(b.mul(x, s), b.div(num, den), x)
    small = b.sel(b.cmp("oeq", x, b.c(0.0)), x, small)
    return b.sel(b.cmp("oge", z, b.c(0.625)), big, small)


# ---------------------------------------------------------------- pow


def pow64(b: Builder, x: str, y: str) -> str:
    fl = b.fl
    ax = b.call("fabs", x)
    p = _LogParts(b, ax)
    # log(1+f) as hi + lo: f - hfsq is exact to within the rounding of hfsq,
    # recovered with an fma.
    lf_hi = b.sub(p.f, p.hfsq)
    hfsq_err = b.fma(b.mul(b.c(0.5), p.f), p.f, b.neg(p.hfsq))
    lf_lo = b.add(b.sub(b.sub(b.sub(p.f, lf_hi), p.hfsq), hfsq_err), p.tail)
    # ln|x| = k ln2 + log(1+f) in double-double (k*LN2_HI is exact).
    a = b.mul(p.k, b.c(LN2_HI))
    hi = b.add(a, lf_hi)
    bb = b.sub(hi, a)
    err = b.add(b.sub(a, b.sub(hi, bb)), b.sub(lf_hi, bb))
    lo = b.add(err, b.add(lf_lo, b.mul(p.k, b.c(LN2_LO))))
    total = b.add(hi, lo)                                   # normalize: |lo| <= ulp(hi) / 2
    lo = b.sub(lo, b.sub(total, hi))
    hi = total
    finite_base = fl.binop("and", "i1", b.cmp("one", ax, b.c(math.inf)), b.cmp("one", ax, b.c(0.0)))
    hi = b.sel(b.cmp("oeq", ax, b.c(0.0)), b.c(-math.inf), b.sel(b.cmp("oeq", ax, b.c(math.inf)), ax, hi))
    hi = b.sel(b.cmp("uno", ax, ax), ax, hi)
    lo = b.sel(finite_base, lo, b.c(0.0))
    yh = b.mul(y, hi)
    yl = b.add(b.fma(y, hi, b.neg(yh)), b.mul(y, lo))
    e = exp64(b, yh)
    finite = b.cmp("one", b.call("fabs", e), b.c(math.inf))
    mag = b.sel(b.and_(finite, b.cmp("ord", yl, yl)), b.fma(e, yl, e), e)
    mag = b.sel(b.cmp("oeq", ax, b.c(1.0)), b.c(1.0), mag)  # |x| = 1: 1 even for y = +-inf
    # Sign and domain: x < 0 needs an integral y; odd y keeps the sign.
    y_int = b.cmp("oeq", b.call("rint", y), y)
    half = b.mul(y, b.c(0.5))
    y_odd = b.and_(y_int, b.cmp("une", b.call("rint", half), half))
    sign = fl.inst(f"icmp slt i64 {fl.cast('bitcast', D, x, 'i64')}, 0")
    r = b.sel(b.and_(sign, y_odd), b.neg(mag), mag)
    bad = b.and_(b.and_(b.cmp("olt", x, b.c(0.0)), b.cmp("one", x, b.c(-math.inf))), b.not_(y_int))
    r = b.sel(bad, b.c(math.nan), r)
    one = b.or_(b.cmp("oeq", x, b.c(1.0)), b.cmp("oeq", y, b.c(0.0)))
    return b.sel(one, b.c(1.0), r)
