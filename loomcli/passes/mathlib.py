"""exp, exp2, log, log2, sin, cos, tanh and pow for f32 and f64, written
once in Loom scalar ops (the `expand-math` pass builds them into a module).

Targets' own versions are loosely specified (Vulkan's GLSL.std.450 math
differs by hundreds of ulp near hard arguments on lavapipe: log near 1,
tanh near 0, sin of large arguments; AMDGPU's v_sin scales by 1/2pi in
single precision). LANGUAGE.md asks for "within a few ulp", so these
routines use only operations the language defines exactly: + - * / (no
flags, so nothing may contract or reassociate them), `floorf`, compares,
selects, bit casts and integer ops. Where an algorithm wants an
instruction Loom lacks, an exact construction stands in:

* round-to-nearest-even of a moderate |x| is (x + 1.5*2^(p-1)) - 1.5*2^(p-1);
* ldexp is a multiplication by 2^k built from exponent bits, in two steps
  of half the scale each, so each factor is a normal number and only the
  last product rounds;
* frexp reads the exponent field (subnormals are scaled up first);
* a 32x32 -> 64-bit product is a product of zero-extended limbs in i64
  when the profile has i64, else of 16-bit halves.

The algorithms are fdlibm's:

* exp/exp2: x = k*ln2 + r, |r| <= ln2/2 (Cody-Waite, exact products), Taylor
  polynomial, then 2^k in two steps;
* log/log2: x = 2^e*m, m in [sqrt(1/2), sqrt(2)), log(m) = log1p(f) by the
  atanh series in s = f/(2+f);
* sin/cos: x = k*pi/2 + r with a three-part pi/2 (Cody-Waite) for moderate
  |x|, and a Payne-Hanek reduction beyond (the exact product of the
  mantissa with a window of 2/pi bits, in 32-bit limbs; the window's words
  are picked from the table, 64 bits at a time where there is i64, by a
  tree of selects on the exponent); fdlibm's kernel polynomials on
  |r| <= pi/4;
* tanh: t/(t+2) with t = expm1(2|x|);
* pow: exp2(y*log2 x) with log2 x and the product carried in double-word
  arithmetic (Dekker's two_prod/two_sum, which need no fused fma), C99's
  special cases by selects; f32 pow uses the f64 routine when the profile
  has f64.

Measured on the reference interpreter against mpmath over hard inputs
(tests/test_expand_math.py): at most 1 ulp for f32, 1 for f64 (2 for tanh),
within the documented 2; f16 and bf16 (through f32, one final rounding)
correctly rounded on those inputs, within the documented 1 (docs/math.md).
Special values (NaN, infinities, zeros, overflow, subnormals) are handled
with selects; the inputs of every integer conversion are kept finite and in
range, so no path has undefined behaviour, even one whose value a select discards.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from loomcli.ir.builder import Namer, create
from loomcli.ir.core import Operation, Region, Value
from loomcli.ir.types import F32, F64, I1, I32, I64, Type

INF = math.inf
NAN = math.nan
LN2 = math.log(2.0)
SIN = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
       2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
COS = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
       -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
INV_FACT = tuple(1.0 / math.factorial(i) for i in range(15))


def round32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


class Width:
    """Constants and polynomial lengths of one float width."""

    def __init__(self, bits: int) -> None:
        self.bits = bits
        r = round32 if bits == 32 else float
        # Splits whose leading parts have few significant bits, so k * part is
        # exact for every k the reductions meet: nothing relies on a fused fma.
        self.ln2_hi = 6.93147180369123816490e-01 if bits == 64 else 0.693145751953125
        self.ln2_lo = 1.90821492927058770002e-10 if bits == 64 else 1.428606765330187e-06
        self.inv_ln2 = r(1.0 / LN2)
        self.pio2_split = ((1.57079632673412561417, 6.07710050630396597660e-11, 2.0222662487959506e-21)
                           if bits == 64 else (1.5707931518554688, 3.1749368645250797e-06, 2.5633440682570896e-12))
        self.pio2 = ((1.5707963267948966, 6.123233995736766e-17) if bits == 64 else
                     (1.5707963705062866, -4.371138828673793e-08))
        self.two_over_pi = r(2.0 / math.pi)
        self.split = 134217729.0 if bits == 64 else 4097.0   # Dekker: 2^(p/2) + 1
        self.split_max = 1e300 if bits == 64 else 1e34
        self.exp_terms = 14 if bits == 64 else 8          # e^r: Taylor to r^(n-1)
        self.expm1_terms = 15 if bits == 64 else 9
        self.log_terms = 11 if bits == 64 else 5           # atanh series in s^2
        self.sin = SIN if bits == 64 else SIN[:4]
        self.cos = COS if bits == 64 else COS[:4]
        self.exp_max = 709.782712893384 if bits == 64 else 88.72283172607422
        self.exp_min = -745.1332191019412 if bits == 64 else -103.97208404541016
        self.exp_clamp = (746.0, 710.0) if bits == 64 else (104.0, 89.0)
        self.exp2_clamp = 1100.0 if bits == 64 else 160.0
        self.tiny = (2.0 ** -1000, 54) if bits == 64 else (2.0 ** -100, 30)   # (below, scale up by 2^n)
        self.tanh_big = 22.0 if bits == 64 else 9.0
        self.tanh_small = 2.0 ** -28 if bits == 64 else 2.0 ** -12
        self.reduce_big = 2.0 ** 20 if bits == 64 else 64.0    # Cody-Waite below, Payne-Hanek above
        self.mant = 52 if bits == 64 else 23                   # stored mantissa bits
        self.bias = 1023 if bits == 64 else 127
        self.limbs = 6 if bits == 64 else 4                # 32-bit words of 2/pi in the window
        # x + magic - magic rounds |x| < 2^(p-2) to an integer, ties to even.
        self.round_magic = 1.5 * 2.0 ** self.mant


@lru_cache(maxsize=1)
def two_over_pi_words() -> tuple[int, ...]:
    """Bits of 2/pi after the binary point, 32 per word, preceded by two zero words."""
    prec = 1600

    def arctan_inv(n: int) -> int:
        x = (1 << prec) // n
        total, k, sign = x, 1, -1
        while x:
            x //= n * n
            total += sign * (x // (2 * k + 1))
            sign, k = -sign, k + 1
        return total

    pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))
    frac = (2 << (2 * prec)) // pi
    bits = bin(frac)[2:].zfill(prec)
    return (0, 0) + tuple(int(bits[32 * j:32 * j + 32], 2) for j in range(42))


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


class Builder:
    """Appends Loom ops to one function body (constants hoisted to its top),
    naming each value freshly."""

    def __init__(self, body: Region, namer: Namer) -> None:
        self.body = body
        self.region = body
        self.namer = namer
        self.consts: dict[tuple[str, Any], Value] = {}
        self.nconst = 0

    def op(self, name: str, operands: Sequence[Value], result_types: Sequence[Type],
           attrs: dict[str, Any] | None = None, hint: str = "t") -> Operation:
        op = create(name, operands, result_types, attrs, [self.namer.fresh(hint) for _ in result_types])
        self.region.append(op)
        return op

    def val(self, name: str, operands: Sequence[Value], t: Type, hint: str = "t", **attrs: Any) -> Value:
        return self.op(name, operands, (t,), attrs or None, hint).results[0]

    def const(self, t: Type, value: float | int) -> Value:
        if t.category == "float":  # type: ignore[attr-defined]
            v: Any = float(value)
            v = round32(v) if t is F32 else v
            key: tuple[str, Any] = (t.name, struct.pack("<d", v))
            hint = "c"
        else:
            v = bool(value) if t is I1 else _signed(int(value), t.bits)  # type: ignore[attr-defined]
            key = (t.name, v)
            hint = "i"
        c = self.consts.get(key)
        if c is None:
            op = create("scalar.constant", (), (t,), {"value": v}, [self.namer.fresh(hint)])
            op.parent = self.body
            self.body.ops.insert(self.nconst, op)
            self.nconst += 1
            c = self.consts[key] = op.results[0]
        return c

    def if_else(self, cond: Value, types: Sequence[Type], then: Callable[[], Sequence[Value]],
                other: Callable[[], Sequence[Value]]) -> list[Value]:
        """scf.if with results; `then` and `other` build their branch and return its values."""
        op = self.op("scf.if", (cond,), types, {"else": True}, "p")
        outer = self.region
        for region, build in zip(op.regions, (then, other)):
            self.region = region
            values = build()
            self.op("scf.yield", values, ())
        self.region = outer
        return list(op.results)


class MathLib:
    """The routines of one float width, built with `b`; ints are i32."""

    def __init__(self, b: Builder, bits: int, has_i64: bool,
                 reduce: Callable[[Value], Sequence[Value]] | None = None) -> None:
        self.b = b
        self.w = Width(bits)
        self.bits = bits
        self.t: Type = F64 if bits == 64 else F32
        self.has_i64 = has_i64
        # x -> (r, q), x = q*pi/2 + r: sin and cos call one shared function
        # for it (`expand-math`), else it is built in place.
        self.reduce = reduce or self.rem_pio2

    # ------------------------------------------------------------ float ops

    def k(self, x: float) -> Value:
        return self.b.const(self.t, x)

    def i(self, x: int) -> Value:
        return self.b.const(I32, x)

    def fop(self, name: str, *xs: Value) -> Value:
        return self.b.val(f"scalar.{name}", xs, self.t)

    def add(self, a: Value, c: Value) -> Value:
        return self.fop("addf", a, c)

    def sub(self, a: Value, c: Value) -> Value:
        return self.fop("subf", a, c)

    def mul(self, a: Value, c: Value) -> Value:
        return self.fop("mulf", a, c)

    def div(self, a: Value, c: Value) -> Value:
        return self.fop("divf", a, c)

    def neg(self, a: Value) -> Value:
        return self.fop("negf", a)

    def abs(self, a: Value) -> Value:
        return self.fop("absf", a)

    def cmpf(self, pred: str, a: Value, c: Value) -> Value:
        return self.b.val("scalar.cmpf", (a, c), I1, "p", predicate=pred)

    def lt(self, a: Value, c: Value) -> Value:
        return self.cmpf("olt", a, c)

    def gt(self, a: Value, c: Value) -> Value:
        return self.cmpf("ogt", a, c)

    def eq(self, a: Value, c: Value) -> Value:
        return self.cmpf("oeq", a, c)

    def isnan(self, a: Value) -> Value:
        return self.cmpf("uno", a, a)

    def isinf(self, a: Value) -> Value:
        return self.eq(self.abs(a), self.k(INF))

    def select(self, c: Value, a: Value, d: Value) -> Value:
        if a is d:
            return a
        return self.b.val("scf.select", (c, a, d), a.type, "s")

    def lor(self, a: Value, c: Value) -> Value:
        return self.b.val("scalar.ori", (a, c), I1, "p")

    def land(self, a: Value, c: Value) -> Value:
        return self.b.val("scalar.andi", (a, c), I1, "p")

    def lnot(self, a: Value) -> Value:
        return self.b.val("scalar.xori", (a, self.b.const(I1, 1)), I1, "p")

    def round_even(self, a: Value) -> Value:
        """a rounded to an integer, ties to even, for |a| < 2^(p-2)."""
        magic = self.k(self.w.round_magic)
        return self.sub(self.add(a, magic), magic)

    def to_int(self, a: Value) -> Value:
        """An integral float of moderate size as i32."""
        return self.b.val("scalar.fptosi", (a,), I32, "n")

    def horner(self, x: Value, coefs: tuple[float, ...]) -> Value:
        """c0 + x*(c1 + x*(c2 + ...))."""
        acc = self.k(coefs[-1])
        for c in reversed(coefs[:-1]):
            acc = self.add(self.mul(acc, x), self.k(c))
        return acc

    def clamp(self, x: Value, lo: float, hi: float) -> Value:
        return self.select(self.gt(x, self.k(hi)), self.k(hi), self.select(self.lt(x, self.k(lo)), self.k(lo), x))

    # ------------------------------------------------------------ integer ops (i32 unless given)

    def iop(self, name: str, a: Value, c: Value | int, t: Type = I32) -> Value:
        cv = self.b.const(t, c) if isinstance(c, int) else c
        return self.b.val(f"scalar.{name}", (a, cv), t, "n")

    def icmp(self, pred: str, a: Value, c: Value | int) -> Value:
        cv = self.b.const(a.type, c) if isinstance(c, int) else c
        return self.b.val("scalar.cmpi", (a, cv), I1, "p", predicate=pred)

    def cast(self, name: str, a: Value, t: Type) -> Value:
        return self.b.val(f"scalar.{name}", (a,), t, "n")

    # ------------------------------------------------------------ exponent bits

    def pow2(self, n: Value) -> Value:
        """2^n as a float, for an i32 n in the normal exponent range."""
        w = self.w
        if self.bits == 64:
            e = self.cast("extsi", self.iop("addi", n, w.bias), I64)
            return self.cast("bitcast", self.iop("shli", e, w.mant, I64), self.t)
        return self.cast("bitcast", self.iop("shli", self.iop("addi", n, w.bias), w.mant), self.t)

    def scale2(self, y: Value, k: Value) -> Value:
        """y * 2^k for an integral float k of moderate size, in two in-range steps."""
        ki = self.to_int(k)
        half = self.iop("shrsi", ki, 1)
        return self.mul(self.mul(y, self.pow2(half)), self.pow2(self.iop("subi", ki, half)))

    def frexp(self, x: Value) -> tuple[Value, Value]:
        """(m, e) with x = m * 2^e, m in [1/2, 1), for a finite positive normal x."""
        w = self.w
        if self.bits == 64:
            bits = self.cast("bitcast", x, I64)
            e = self.cast("trunci", self.iop("shrui", bits, w.mant, I64), I32)
            m = self.iop("ori", self.iop("andi", bits, (1 << w.mant) - 1, I64), (w.bias - 1) << w.mant, I64)
        else:
            bits = self.cast("bitcast", x, I32)
            e = self.iop("shrui", bits, w.mant)
            m = self.iop("ori", self.iop("andi", bits, (1 << w.mant) - 1), (w.bias - 1) << w.mant)
        return self.cast("bitcast", m, self.t), self.iop("subi", e, w.bias - 1)

    def signbit(self, x: Value) -> Value:
        """True for -0.0 and every negative value (NaN's sign included)."""
        it = I64 if self.bits == 64 else I32
        return self.icmp("slt", self.cast("bitcast", x, it), self.b.const(it, 0))

    # ------------------------------------------------------------ exp and log kernels

    def exp_reduced(self, r: Value) -> Value:
        """e^r for |r| <= ln2/2."""
        p = self.horner(r, INV_FACT[2:self.w.exp_terms])
        return self.add(self.k(1.0), self.add(r, self.mul(self.mul(r, r), p)))

    def expm1_reduced(self, r: Value) -> Value:
        p = self.horner(r, INV_FACT[2:self.w.expm1_terms])
        return self.add(r, self.mul(self.mul(r, r), p))

    def reduce_ln2(self, x: Value, k: Value) -> Value:
        """x - k*ln2: k*ln2_hi is exact and so is the first difference."""
        r = self.sub(x, self.mul(k, self.k(self.w.ln2_hi)))
        return self.sub(r, self.mul(k, self.k(self.w.ln2_lo)))

    def log_mantissa(self, x: Value) -> tuple[Value, Value]:
        """(e, f) with x = 2^e * (1 + f), 1 + f in [sqrt(1/2), sqrt(2)); x finite > 0."""
        tiny, up = self.w.tiny
        small_x = self.lt(x, self.k(tiny))
        xs = self.select(small_x, self.mul(x, self.k(2.0 ** up)), x)
        mant, e = self.frexp(xs)
        e = self.select(small_x, self.iop("subi", e, up), e)
        low = self.lt(mant, self.k(math.sqrt(0.5)))
        mant = self.select(low, self.mul(mant, self.k(2.0)), mant)
        e = self.select(low, self.iop("subi", e, 1), e)
        return self.cast("sitofp", e, self.t), self.sub(mant, self.k(1.0))

    def log_parts(self, x: Value) -> tuple[Value, Value]:
        """(e, log(m)) with x = 2^e * m, m in [sqrt(1/2), sqrt(2)); x finite > 0."""
        ef, f = self.log_mantissa(x)
        s = self.div(f, self.add(self.k(2.0), f))
        z = self.mul(s, s)
        r = self.mul(self.horner(z, tuple(2.0 / (2 * j + 1) for j in range(1, self.w.log_terms + 1))), z)
        hfsq = self.mul(self.k(0.5), self.mul(f, f))
        return ef, self.sub(f, self.sub(hfsq, self.mul(s, self.add(hfsq, r))))

    def log_special(self, x: Value, value: Value) -> Value:
        """NaN for NaN and negatives, -inf at zero, +inf at +inf."""
        r = self.select(self.eq(x, self.k(INF)), self.k(INF), value)
        r = self.select(self.eq(x, self.k(0.0)), self.k(-INF), r)
        return self.select(self.lor(self.lt(x, self.k(0.0)), self.isnan(x)), self.k(NAN), r)

    def exp2_scaled(self, hi: Value, lo: Value) -> Value:
        """2^(hi + lo): hi carries the integer part (|hi| < 2^(p-2)), lo a small correction."""
        kk = self.round_even(hi)
        frac = self.add(self.sub(hi, kk), lo)
        k2 = self.round_even(frac)
        kk = self.add(kk, k2)
        frac = self.sub(frac, k2)
        c = self.w.exp2_clamp
        return self.scale2(self.exp_reduced(self.mul(frac, self.k(LN2))), self.clamp(kk, -c, c))

    # ------------------------------------------------------------ trigonometric reduction

    def rem_pio2(self, x: Value) -> list[Value]:
        """(r, q) with x = q*pi/2 + r (q mod 4), |r| <= pi/4, for finite x."""
        big = self.gt(self.abs(x), self.k(self.w.reduce_big))
        return self.b.if_else(big, (self.t, I32), lambda: self.payne_hanek(x), lambda: self.cody_waite(x))

    def sincos(self, x: Value) -> tuple[Value, Value, Value]:
        """(sin r, cos r, quadrant) with x = q*pi/2 + r, |r| <= pi/4, for finite x."""
        r, q = self.reduce(x)
        z = self.mul(r, r)
        s = self.add(r, self.mul(self.mul(z, r),
                                 self.add(self.k(self.w.sin[0]), self.mul(z, self.horner(z, self.w.sin[1:])))))
        cr = self.mul(z, self.horner(z, self.w.cos))
        hz = self.mul(self.k(0.5), z)
        w = self.sub(self.k(1.0), hz)
        c = self.add(w, self.add(self.sub(self.sub(self.k(1.0), w), hz), self.mul(z, cr)))
        return s, c, q

    def cody_waite(self, x: Value) -> list[Value]:
        """x - k*pi/2 with pi/2 in three parts; the products and the first
        difference are exact, so one rounding is left, near the result."""
        k = self.round_even(self.mul(x, self.k(self.w.two_over_pi)))
        p1, p2, p3 = self.w.pio2_split
        r = self.sub(x, self.mul(k, self.k(p1)))
        r = self.sub(self.sub(r, self.mul(k, self.k(p2))), self.mul(k, self.k(p3)))
        return [r, self.iop("andi", self.to_int(k), 3)]

    def payne_hanek(self, x: Value) -> list[Value]:
        """Reduce a large |x| exactly enough: |x| = M * 2^E; the 2/pi bits that
        matter mod 4 start at bit E - 1; the product of M with a window of
        `limbs` words of them gives the quadrant (top two bits) and the
        fraction (the rest), mod 2^(32 * limbs)."""
        w = self.w
        n = w.limbs
        ax = self.abs(x)
        if self.bits == 64:
            bits = self.cast("bitcast", ax, I64)
            hi = self.cast("trunci", self.iop("shrui", bits, 32, I64), I32)
            lo = self.cast("trunci", bits, I32)
            e = self.iop("subi", self.iop("shrui", hi, 20), 1075)
            mant = [lo, self.iop("ori", self.iop("andi", hi, 0xFFFFF), 0x100000)]
            lowest_exp = 1043     # biased exponent of 2^20, where this reduction starts
        else:
            bits = self.cast("bitcast", ax, I32)
            e = self.iop("subi", self.iop("shrui", bits, 23), 150)
            mant = [self.iop("ori", self.iop("andi", bits, 0x7FFFFF), 0x800000)]
            lowest_exp = 133      # biased exponent of 64
        # Window start: bit (E - 1) of 2/pi, at table bit (E - 2 + 64).
        start = self.iop("addi", e, 62)
        lowest = lowest_exp - 1075 + 62 if self.bits == 64 else lowest_exp - 150 + 62
        highest = 2046 - 1075 + 62 if self.bits == 64 else 254 - 150 + 62
        window = self.window_words(start, lowest, highest, n)  # most significant first
        limbs = list(reversed(window))  # least significant first
        prod = [self.i(0)] * n
        for i, m_limb in enumerate(mant):
            for j, a in enumerate(limbs):
                if i + j >= n:
                    continue
                plo, phi = self.mul_wide(m_limb, a)
                self._add_at(prod, i + j, plo)
                if i + j + 1 < n:
                    self._add_at(prod, i + j + 1, phi)
        top = prod[n - 1]
        q = self.iop("shrui", top, 30)
        half = self.icmp("ne", self.iop("andi", top, 1 << 29), 0)
        # Fraction >= 1/2: take it from the next quadrant (negate the fraction bits).
        neg = [self.iop("xori", p, 0xFFFFFFFF) for p in prod]
        self._add_at(neg, 0, self.i(1))
        frac = [self.select(half, a, c) for a, c in zip(neg, prod)]
        frac[n - 1] = self.iop("andi", frac[n - 1], 0x3FFFFFFF)
        q = self.iop("andi", self.select(half, self.iop("addi", q, 1), q), 3)
        f = self.k(0.0)
        for j, limb in enumerate(frac):
            term = self.cast("uitofp", limb, self.t)
            f = self.add(f, self.mul(term, self.k(2.0 ** (32 * j - (32 * n - 2)))))
        f = self.select(half, self.neg(f), f)
        r = self.add(self.mul(f, self.k(w.pio2[0])), self.mul(f, self.k(w.pio2[1])))
        negative = self.lt(x, self.k(0.0))
        r = self.select(negative, self.neg(r), r)
        q = self.select(negative, self.iop("andi", self.iop("subi", self.i(4), q), 3), q)
        return [r, q]

    def window_words(self, start: Value, lowest: int, highest: int, n: int) -> list[Value]:
        """n 32-bit words of 2/pi's bits from table bit `start` (known to lie in
        [lowest, highest]), most significant first: the table words covering
        them, picked by trees of selects, shifted into place. With i64 the
        table has 64-bit words, which halves the selects."""
        words = two_over_pi_words()
        wide = self.has_i64 and n % 2 == 0
        it, width = (I64, 64) if wide else (I32, 32)
        table = [words[k] << 32 | words[k + 1] for k in range(0, len(words), 2)] if wide else list(words)
        log = width.bit_length() - 1
        first = self.iop("shrui", start, log)
        shift = self.iop("andi", start, width - 1)
        back = self.iop("andi", self.iop("subi", self.i(width), shift), width - 1)   # a shift by width is UB
        aligned = self.icmp("eq", shift, 0)
        if wide:
            shift, back = self.cast("extui", shift, I64), self.cast("extui", back, I64)
        count = n * 32 // width
        raw = self.table_window(first, lowest >> log, highest >> log, count + 1, table, it)
        joined = [self.select(aligned, raw[j], self.iop("ori", self.iop("shli", raw[j], shift, it),
                                                        self.iop("shrui", raw[j + 1], back, it), it))
                  for j in range(count)]
        if not wide:
            return joined
        out = []
        for w in joined:
            out += [self.cast("trunci", self.iop("shrui", w, 32, I64), I32), self.cast("trunci", w, I32)]
        return out

    def table_window(self, first: Value, lowest: int, highest: int, count: int, table: list[int],
                     it: Type) -> list[Value]:
        """Words first .. first+count-1 of `table` (as `it`), for an i32 first in
        [lowest, highest]: a tree of selects on the bits of first - lowest."""
        d = self.iop("subi", first, lowest)
        span = highest - lowest + 1
        nbits = max(1, (span - 1).bit_length())
        bit = [self.icmp("ne", self.iop("andi", d, 1 << j), 0) for j in range(nbits)]

        def tree(entries: list[int], level: int) -> Value:
            if all(v == entries[0] for v in entries):
                return self.b.const(it, entries[0])
            size = 1 << level
            if len(entries) <= size:
                return tree(entries, level - 1)
            return self.select(bit[level], tree(entries[size:], level - 1), tree(entries[:size], level - 1))

        return [tree([table[f + j] for f in range(lowest, highest + 1)], nbits - 1) for j in range(count)]

    def mul_wide(self, a: Value, c: Value) -> tuple[Value, Value]:
        """The 64-bit product of two u32 as (low word, high word)."""
        if self.has_i64:
            p = self.iop("muli", self.cast("extui", a, I64), self.cast("extui", c, I64), I64)
            return self.cast("trunci", p, I32), self.cast("trunci", self.iop("shrui", p, 32, I64), I32)
        a0, a1 = self.iop("andi", a, 0xFFFF), self.iop("shrui", a, 16)
        c0, c1 = self.iop("andi", c, 0xFFFF), self.iop("shrui", c, 16)
        mid = self.iop("muli", a0, c1)
        mid2 = self.iop("muli", a1, c0)
        mid_sum = self.iop("addi", mid, mid2)
        mid_carry = self.cast("extui", self.icmp("ult", mid_sum, mid), I32)
        low = self.iop("muli", a0, c0)
        lo = self.iop("addi", low, self.iop("shli", mid_sum, 16))
        lo_carry = self.cast("extui", self.icmp("ult", lo, low), I32)
        hi = self.iop("addi", self.iop("muli", a1, c1), self.iop("shrui", mid_sum, 16))
        hi = self.iop("addi", self.iop("addi", hi, self.iop("shli", mid_carry, 16)), lo_carry)
        return lo, hi

    def _add_at(self, limbs: list[Value], at: int, value: Value) -> None:
        """limbs += value * 2^(32*at), carries rippling up and dropping off the top."""
        carry = value
        for j in range(at, len(limbs)):
            s = self.iop("addi", limbs[j], carry)
            if j + 1 < len(limbs):
                carry = self.cast("extui", self.icmp("ult", s, carry), I32)
            limbs[j] = s

    # ------------------------------------------------------------ double-word arithmetic (Dekker, no fma)

    def split(self, a: Value) -> tuple[Value, Value]:
        t = self.mul(a, self.k(self.w.split))
        hi = self.sub(t, self.sub(t, a))
        return hi, self.sub(a, hi)

    def two_prod(self, a: Value, c: Value) -> tuple[Value, Value]:
        """a*c as p + e exactly."""
        p = self.mul(a, c)
        ah, al = self.split(a)
        ch, cl = self.split(c)
        e = self.add(self.add(self.add(self.sub(self.mul(ah, ch), p), self.mul(ah, cl)), self.mul(al, ch)),
                     self.mul(al, cl))
        return p, e

    def two_sum(self, a: Value, c: Value) -> tuple[Value, Value]:
        """a+c as s + e exactly."""
        s = self.add(a, c)
        bb = self.sub(s, a)
        return s, self.add(self.sub(a, self.sub(s, bb)), self.sub(c, bb))

    def log2_wide(self, x: Value) -> tuple[Value, Value]:
        """log2(x) as hi + lo with about twice the working precision (x finite > 0)."""
        e, f = self.log_mantissa(x)
        d_hi, d_lo = self.two_sum(self.k(2.0), f)
        s = self.div(f, d_hi)
        p, pe = self.two_prod(s, d_hi)
        # s_lo = (f - s*(d_hi + d_lo)) / d_hi, with s*d_hi taken exactly.
        s_lo = self.div(self.sub(self.sub(self.sub(f, p), pe), self.mul(s, d_lo)), d_hi)
        z = self.mul(s, s)
        r = self.mul(self.mul(z, s), self.horner(z, tuple(2.0 / (2 * j + 1) for j in range(1, self.w.log_terms + 1))))
        l_hi, l_lo = self.two_sum(self.mul(s, self.k(2.0)), self.add(self.mul(s_lo, self.k(2.0)), r))
        il_hi = self.w.inv_ln2
        il_lo = float.fromhex("0x1.777d0ffda0d24p-56") if self.bits == 64 else 1.9259629911266175e-08
        p_hi, p_lo = self.two_prod(l_hi, self.k(il_hi))
        p_lo = self.add(p_lo, self.add(self.mul(l_hi, self.k(il_lo)), self.mul(l_lo, self.k(il_hi))))
        h, hl = self.two_sum(e, p_hi)
        return h, self.add(hl, p_lo)

    def pick(self, q: Value, options: tuple[Value, Value, Value, Value]) -> Value:
        r = options[0]
        for j in (1, 2, 3):
            r = self.select(self.icmp("eq", q, j), options[j], r)
        return r


# ------------------------------------------------------------ the routines: x -> f(x) of one width


def exp(b: MathLib, x: Value) -> Value:
    lo, hi = b.w.exp_clamp
    xc = b.clamp(b.select(b.isnan(x), b.k(0.0), x), -lo, hi)
    k = b.round_even(b.mul(xc, b.k(b.w.inv_ln2)))
    y = b.scale2(b.exp_reduced(b.reduce_ln2(xc, k)), k)
    y = b.select(b.gt(x, b.k(b.w.exp_max)), b.k(INF), y)
    y = b.select(b.lt(x, b.k(b.w.exp_min)), b.k(0.0), y)
    return b.select(b.isnan(x), x, y)


def exp2(b: MathLib, x: Value) -> Value:
    c = b.w.exp2_clamp
    y = b.exp2_scaled(b.clamp(b.select(b.isnan(x), b.k(0.0), x), -c, c), b.k(0.0))
    y = b.select(b.isnan(x), x, y)
    return b.select(b.eq(x, b.k(-INF)), b.k(0.0), b.select(b.eq(x, b.k(INF)), b.k(INF), y))


def _positive(b: MathLib, x: Value) -> Value:
    """x where it is finite and positive, else 1 (the special cases replace the result)."""
    return b.select(b.gt(x, b.k(0.0)), b.select(b.isinf(x), b.k(1.0), x), b.k(1.0))


def log(b: MathLib, x: Value) -> Value:
    e, lm = b.log_parts(_positive(b, x))
    hi = b.mul(e, b.k(b.w.ln2_hi))
    lo = b.add(b.mul(e, b.k(b.w.ln2_lo)), lm)
    return b.log_special(x, b.add(hi, lo))


def log2(b: MathLib, x: Value) -> Value:
    e, lm = b.log_parts(_positive(b, x))
    return b.log_special(x, b.add(e, b.mul(lm, b.k(b.w.inv_ln2))))


def sin(b: MathLib, x: Value) -> Value:
    bad = b.lor(b.isnan(x), b.isinf(x))
    s, c, q = b.sincos(b.select(bad, b.k(0.0), x))
    r = b.pick(q, (s, c, b.neg(s), b.neg(c)))
    r = b.select(b.eq(x, b.k(0.0)), x, r)  # keeps -0
    return b.select(bad, b.k(NAN), r)


def cos(b: MathLib, x: Value) -> Value:
    bad = b.lor(b.isnan(x), b.isinf(x))
    s, c, q = b.sincos(b.select(bad, b.k(0.0), x))
    return b.select(bad, b.k(NAN), b.pick(q, (c, b.neg(s), b.neg(c), s)))


def tanh(b: MathLib, x: Value) -> Value:
    ax = b.abs(x)
    big = b.w.tanh_big
    y = b.mul(b.select(b.lor(b.gt(ax, b.k(big)), b.isnan(x)), b.k(big), ax), b.k(2.0))
    # expm1(y) for y >= 0: directly below ln2/2, else 2^k (expm1(r) + 1) - 1.
    k = b.round_even(b.mul(y, b.k(b.w.inv_ln2)))
    em = b.expm1_reduced(b.reduce_ln2(y, k))
    scale = b.pow2(b.to_int(k))
    scaled = b.add(b.mul(em, scale), b.sub(scale, b.k(1.0)))
    t = b.select(b.lt(y, b.k(LN2 / 2)), b.expm1_reduced(y), scaled)
    mag = b.select(b.gt(ax, b.k(big)), b.k(1.0), b.div(t, b.add(t, b.k(2.0))))
    r = b.select(b.lt(x, b.k(0.0)), b.neg(mag), mag)
    r = b.select(b.lt(ax, b.k(b.w.tanh_small)), x, r)
    return b.select(b.isnan(x), x, r)


def pow_core(b: MathLib, ax: Value, y: Value) -> Value:
    """|x|**y for finite |x| > 0 and finite y: y * log2|x| in double-word
    precision, then 2^(hi + lo)."""
    l_hi, l_lo = b.log2_wide(ax)
    yc = b.clamp(y, -b.w.split_max, b.w.split_max)
    hi, lo = b.two_prod(yc, l_hi)
    lo = b.add(lo, b.mul(yc, l_lo))
    # Far outside the exponent range the result is 0 or inf whatever lo is;
    # bounding hi keeps the rounding trick of exp2_scaled in its range.
    c = b.w.exp2_clamp + 2.0
    out = b.gt(b.abs(hi), b.k(c))
    hi = b.select(out, b.select(b.lt(hi, b.k(0.0)), b.k(-c), b.k(c)), hi)
    return b.exp2_scaled(hi, b.select(out, b.k(0.0), lo))


def pow_special(b: MathLib, x: Value, y: Value, core: Callable[[Value, Value], Value]) -> Value:
    """x**y with C99's special cases (IEEE 754 9.2.1) around `core`, which
    computes |x|**y for a finite positive |x| and a finite y."""
    k = b.k
    ax = b.abs(x)
    finite_pos = b.land(b.gt(ax, k(0.0)), b.lnot(b.isinf(ax)))
    mag_core = core(b.select(finite_pos, ax, k(1.0)), b.select(b.eq(b.abs(y), k(INF)), k(0.0),
                                                                b.select(b.isnan(y), k(0.0), y)))
    fy = b.fop("floorf", y)
    y_int = b.eq(fy, y)                    # true for +-inf too
    half = b.mul(y, k(0.5))
    y_odd = b.land(y_int, b.cmpf("one", b.fop("floorf", half), half))
    y_neg = b.lt(y, k(0.0))
    y_zero = b.eq(y, k(0.0))
    zero_case = b.select(y_neg, k(INF), b.select(y_zero, k(1.0), k(0.0)))
    inf_case = b.select(y_neg, k(0.0), b.select(y_zero, k(1.0), k(INF)))
    mag = b.select(b.eq(ax, k(0.0)), zero_case, mag_core)
    mag = b.select(b.eq(ax, k(INF)), inf_case, mag)
    ax_gt1 = b.gt(ax, k(1.0))
    ax_eq1 = b.eq(ax, k(1.0))
    mag = b.select(b.eq(y, k(INF)), b.select(ax_gt1, k(INF), b.select(ax_eq1, k(1.0), k(0.0))), mag)
    mag = b.select(b.eq(y, k(-INF)), b.select(ax_gt1, k(0.0), b.select(ax_eq1, k(1.0), k(INF))), mag)
    r = b.select(b.land(b.signbit(x), y_odd), b.neg(mag), mag)
    finite_neg = b.land(b.lt(x, k(0.0)), b.lnot(b.isinf(x)))
    y_frac = b.land(b.lnot(y_int), b.lnot(b.isinf(y)))
    r = b.select(b.land(finite_neg, y_frac), k(NAN), r)
    r = b.select(b.lor(b.isnan(x), b.isnan(y)), k(NAN), r)
    return b.select(b.lor(y_zero, b.eq(x, k(1.0))), k(1.0), r)


def rem_pio2(b: MathLib, x: Value) -> list[Value]:
    return b.rem_pio2(x)


UNARY: dict[str, Callable[[MathLib, Value], Value]] = {
    "exp": exp, "exp2": exp2, "log": log, "log2": log2, "sin": sin, "cos": cos, "tanh": tanh,
}
