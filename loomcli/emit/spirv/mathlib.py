"""Software exp, exp2, log, log2, sin, cos, tanh and pow for f32 and f64.

Vulkan's GLSL.std.450 math instructions are only loosely specified (and
defined for 16/32-bit floats only); drivers differ by hundreds of ulp near
hard arguments (lavapipe: log near 1, tanh near 0, sin of large arguments).
LANGUAGE.md asks for "within a few ulp", so these functions are built here
from exactly specified operations (+ - * / with `NoContraction`, `Fma`,
`RoundEven`, `FrexpStruct`, `Ldexp` and integer ops) and emitted once per
module as OpFunctions named `<fn>_f32` / `<fn>_f64`. f16 and bf16 values use
the f32 routines and round.

The algorithms are fdlibm's:

* exp/exp2: x = k·ln2 + r, |r| <= ln2/2 (Cody-Waite, exact products), Taylor
  polynomial, then 2^k by two Ldexp steps (each in range);
* log/log2: x = 2^e·m, m in [sqrt(1/2), sqrt(2)), log(m) = log1p(f) by the
  atanh series in s = f/(2+f);
* sin/cos: x = k·pi/2 + r with a three-part pi/2 (Cody-Waite) for moderate
  |x|, and a Payne-Hanek reduction (the exact product of the mantissa with
  a window of 2/pi bits, in 32-bit limbs) beyond; fdlibm's kernel
  polynomials on |r| <= pi/4;
* tanh: t/(t+2) with t = expm1(2|x|); pow: exp2(y·log2 x) with log2 x and
  the product carried in double-word arithmetic (Dekker's two_prod/two_sum,
  which need no fused fma); f32 pow uses the f64 routine when the profile
  has f64.

Measured on the reduced ranges against Python's math: at most 1-3 ulp.
Special values (NaN, infinities, zeros, overflow) are handled with selects.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

from loomcli.emit.spirv.builder import Builder
from loomcli.emit.spirv.spec import GLSL, SC, Op
from loomcli.emit.spirv.writer import FunctionWriter

if TYPE_CHECKING:
    from loomcli.emit.spirv.emitter import SpirvEmitter

INF = math.inf
NAN = math.nan
LN2 = math.log(2.0)
SIN = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
       2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
COS = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
       -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
INV_FACT = tuple(1.0 / math.factorial(i) for i in range(15))


def _round32(x: float) -> float:
    import struct

    return struct.unpack("<f", struct.pack("<f", x))[0]


class Width:
    """Constants and polynomial lengths of one float width."""

    def __init__(self, bits: int) -> None:
        self.bits = bits
        r = _round32 if bits == 32 else float
        # Splits whose leading parts have few significant bits, so k * part is
        # exact for every k the reductions meet: they must not rely on a fused
        # Fma (lavapipe's is not).
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
        self.tiny = (2.0 ** -1000, 2.0 ** 54) if bits == 64 else (2.0 ** -100, 2.0 ** 30)
        self.tanh_big = 22.0 if bits == 64 else 9.0
        self.tanh_small = 2.0 ** -28 if bits == 64 else 2.0 ** -12
        self.reduce_big = 2.0 ** 20 if bits == 64 else 64.0    # Cody-Waite below, Payne-Hanek above
        self.mant = 53 if bits == 64 else 24
        self.limbs = 6 if bits == 64 else 4                # 32-bit words of 2/pi in the window


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


class MathLib(Builder):
    """Arithmetic helpers for one routine of one width."""

    def __init__(self, em: SpirvEmitter, fw: FunctionWriter, bits: int) -> None:
        super().__init__(em.m, fw)
        self.em = em
        self.w = Width(bits)
        self.bits = bits
        self.table = 0   # sin/cos: the Function variable holding `two_over_pi_words`

    @property
    def t(self) -> int:
        return self.m.float(self.bits)

    def k(self, x: float) -> int:
        return self.m.fconst(self.bits, x)

    def add(self, a: int, b: int) -> int:
        return self.nocontract(self.fw.val(Op.FAdd, self.t, a, b))

    def sub(self, a: int, b: int) -> int:
        return self.nocontract(self.fw.val(Op.FSub, self.t, a, b))

    def mul(self, a: int, b: int) -> int:
        return self.nocontract(self.fw.val(Op.FMul, self.t, a, b))

    def div(self, a: int, b: int) -> int:
        return self.nocontract(self.fw.val(Op.FDiv, self.t, a, b))

    def neg(self, a: int) -> int:
        return self.fw.val(Op.FNegate, self.t, a)

    def lt(self, a: int, b: int) -> int:
        return self.cmp(Op.FOrdLessThan, a, b)

    def gt(self, a: int, b: int) -> int:
        return self.cmp(Op.FOrdGreaterThan, a, b)

    def eq(self, a: int, b: int) -> int:
        return self.cmp(Op.FOrdEqual, a, b)

    def isnan(self, a: int) -> int:
        return self.val(Op.IsNan, self.bool_t, a)

    def isinf(self, a: int) -> int:
        return self.val(Op.IsInf, self.bool_t, a)

    def abs(self, a: int) -> int:
        return self.fw.ext(self.t, GLSL.FAbs, a)

    def round_even(self, a: int) -> int:
        return self.fw.ext(self.t, GLSL.RoundEven, a)

    def to_int(self, a: int) -> int:
        return self.val(Op.ConvertFToS, self.u32_t, a)

    def ldexp(self, a: int, n: int) -> int:
        return self.fw.ext(self.t, GLSL.Ldexp, a, n)

    def horner(self, x: int, coefs: tuple[float, ...]) -> int:
        """c0 + x*(c1 + x*(c2 + ...))."""
        acc = self.k(coefs[-1])
        for c in reversed(coefs[:-1]):
            acc = self.add(self.mul(acc, x), self.k(c))
        return acc

    def clamp(self, x: int, lo: float, hi: float) -> int:
        return self.select(self.gt(x, self.k(hi)), self.k(hi), self.select(self.lt(x, self.k(lo)), self.k(lo), x))

    # ------------------------------------------------------------ exp and log kernels

    def exp_reduced(self, r: int) -> int:
        """e^r for |r| <= ln2/2."""
        p = self.horner(r, INV_FACT[2:self.w.exp_terms])
        return self.add(self.k(1.0), self.add(r, self.mul(self.mul(r, r), p)))

    def expm1_reduced(self, r: int) -> int:
        p = self.horner(r, INV_FACT[2:self.w.expm1_terms])
        return self.add(r, self.mul(self.mul(r, r), p))

    def reduce_ln2(self, x: int, k: int) -> int:
        """x - k*ln2: k*ln2_hi is exact and so is the first difference."""
        r = self.sub(x, self.mul(k, self.k(self.w.ln2_hi)))
        return self.sub(r, self.mul(k, self.k(self.w.ln2_lo)))

    def scale2(self, y: int, k: int) -> int:
        """y * 2^k for an integral k of moderate size, in two in-range Ldexp steps."""
        half = self.round_even(self.mul(k, self.k(0.5)))
        return self.ldexp(self.ldexp(y, self.to_int(half)), self.to_int(self.sub(k, half)))

    def log_mantissa(self, x: int) -> tuple[int, int]:
        """(e, f) with x = 2^e * (1 + f), 1 + f in [sqrt(1/2), sqrt(2)); x finite > 0."""
        tiny, up = self.w.tiny
        small_x = self.lt(x, self.k(tiny))
        xs = self.select(small_x, self.mul(x, self.k(up)), x)
        fr = self.fw.ext(self.m.struct((self.t, self.u32_t)), GLSL.FrexpStruct, xs)
        mant = self.val(Op.CompositeExtract, self.t, fr, 0)
        e = self.val(Op.CompositeExtract, self.u32_t, fr, 1)
        e = self.select(small_x, self.bin(Op.ISub, e, self.u32(int(math.log2(up)))), e)
        low = self.lt(mant, self.k(math.sqrt(0.5)))
        mant = self.select(low, self.mul(mant, self.k(2.0)), mant)
        e = self.select(low, self.bin(Op.ISub, e, self.u32(1)), e)
        return self.val(Op.ConvertSToF, self.t, e), self.sub(mant, self.k(1.0))

    def log_parts(self, x: int) -> tuple[int, int]:
        """(e, log(m)) with x = 2^e * m, m in [sqrt(1/2), sqrt(2)); x finite > 0."""
        ef, f = self.log_mantissa(x)
        s = self.div(f, self.add(self.k(2.0), f))
        z = self.mul(s, s)
        r = self.mul(self.horner(z, tuple(2.0 / (2 * j + 1) for j in range(1, self.w.log_terms + 1))), z)
        hfsq = self.mul(self.k(0.5), self.mul(f, f))
        return ef, self.sub(f, self.sub(hfsq, self.mul(s, self.add(hfsq, r))))

    def log_special(self, x: int, value: int) -> int:
        """NaN for NaN and negatives, -inf at zero, +inf at +inf."""
        r = self.select(self.eq(x, self.k(INF)), self.k(INF), value)
        r = self.select(self.eq(x, self.k(0.0)), self.k(-INF), r)
        return self.select(self.lor(self.lt(x, self.k(0.0)), self.isnan(x)), self.k(NAN), r)

    def exp2_scaled(self, hi: int, lo: int) -> int:
        """2^(hi + lo): hi carries the integer part, lo a small correction."""
        kk = self.round_even(hi)
        frac = self.add(self.sub(hi, kk), lo)
        k2 = self.round_even(frac)
        kk = self.add(kk, k2)
        frac = self.sub(frac, k2)
        c = self.w.exp2_clamp
        return self.scale2(self.exp_reduced(self.mul(frac, self.k(LN2))), self.clamp(kk, -c, c))

    # ------------------------------------------------------------ trigonometric reduction

    def sincos(self, x: int) -> tuple[int, int, int]:
        """(sin r, cos r, quadrant) with x = q*pi/2 + r, |r| <= pi/4, for finite x."""
        big = self.gt(self.abs(x), self.k(self.w.reduce_big))
        r, q = self.if_else(big, lambda: self.payne_hanek(x), lambda: self.cody_waite(x))
        z = self.mul(r, r)
        s = self.add(r, self.mul(self.mul(z, r),
                                 self.add(self.k(self.w.sin[0]), self.mul(z, self.horner(z, self.w.sin[1:])))))
        cr = self.mul(z, self.horner(z, self.w.cos))
        hz = self.mul(self.k(0.5), z)
        w = self.sub(self.k(1.0), hz)
        c = self.add(w, self.add(self.sub(self.sub(self.k(1.0), w), hz), self.mul(z, cr)))
        return s, c, q

    def cody_waite(self, x: int) -> list[int]:
        """x - k*pi/2 with pi/2 in three parts; the products and the first
        difference are exact, so one rounding is left, near the result."""
        k = self.round_even(self.mul(x, self.k(self.w.two_over_pi)))
        p1, p2, p3 = self.w.pio2_split
        r = self.sub(x, self.mul(k, self.k(p1)))
        r = self.sub(self.sub(r, self.mul(k, self.k(p2))), self.mul(k, self.k(p3)))
        return [r, self.bin(Op.BitwiseAnd, self.to_int(k), self.u32(3))]

    def payne_hanek(self, x: int) -> list[int]:
        """Reduce a large |x| exactly enough: |x| = M * 2^E; the 2/pi bits that
        matter mod 4 start at bit E - 1; the product of M with a window of
        `limbs` words of them gives the quadrant (top two bits) and the
        fraction (the rest), mod 2^(32 * limbs)."""
        w = self.w
        u = self.u32_t
        n = w.limbs
        ax = self.abs(x)
        if self.bits == 64:
            words = self.bitcast(self.m.vector(u, 2), ax)
            lo = self.val(Op.CompositeExtract, u, words, 0)
            hi = self.val(Op.CompositeExtract, u, words, 1)
            e = self.bin(Op.ISub, self.ishr(hi, 20), self.u32(1075))
            mant = [lo, self.bin(Op.BitwiseOr, self.bin(Op.BitwiseAnd, hi, self.u32(0xFFFFF)), self.u32(0x100000))]
        else:
            bits = self.bitcast(u, ax)
            e = self.bin(Op.ISub, self.ishr(bits, 23), self.u32(150))
            mant = [self.bin(Op.BitwiseOr, self.bin(Op.BitwiseAnd, bits, self.u32(0x7FFFFF)), self.u32(0x800000))]
        # Window start: bit (E - 1) of 2/pi, at table bit (E - 2 + 64).
        start = self.bin(Op.IAdd, e, self.u32(62))
        first = self.ishr(start, 5)
        shift = self.bin(Op.BitwiseAnd, start, self.u32(31))
        back = self.bin(Op.ISub, self.u32(32), shift)
        aligned = self.cmp(Op.IEqual, shift, self.u32(0))
        table = self.table
        ptr_t = self.m.pointer(SC.Function, u)

        def word(j: int) -> int:
            at = self.bin(Op.IAdd, first, self.u32(j))
            return self.val(Op.Load, u, self.val(Op.AccessChain, ptr_t, table, at))

        raw = [word(j) for j in range(n + 1)]
        window = []  # most significant first
        for j in range(n):
            joined = self.bin(Op.BitwiseOr, self.bin(Op.ShiftLeftLogical, raw[j], shift),
                              self.bin(Op.ShiftRightLogical, raw[j + 1], back))
            window.append(self.select(aligned, raw[j], joined))
        limbs = list(reversed(window))  # least significant first
        prod = [self.u32(0)] * n
        pair = self.m.struct((u, u))
        for i, m_limb in enumerate(mant):
            for j, a in enumerate(limbs):
                if i + j >= n:
                    continue
                mul = self.val(Op.UMulExtended, pair, m_limb, a)
                self._add_at(prod, i + j, self.val(Op.CompositeExtract, u, mul, 0), pair)
                if i + j + 1 < n:
                    self._add_at(prod, i + j + 1, self.val(Op.CompositeExtract, u, mul, 1), pair)
        top = prod[n - 1]
        q = self.ishr(top, 30)
        half = self.cmp(Op.INotEqual, self.bin(Op.BitwiseAnd, top, self.u32(1 << 29)), self.u32(0))
        # Fraction >= 1/2: take it from the next quadrant (negate the fraction bits).
        neg = [self.bin(Op.BitwiseXor, p, self.u32(0xFFFFFFFF)) for p in prod]
        self._add_at(neg, 0, self.u32(1), pair)
        frac = [self.select(half, a, b) for a, b in zip(neg, prod)]
        frac[n - 1] = self.bin(Op.BitwiseAnd, frac[n - 1], self.u32(0x3FFFFFFF))
        q = self.bin(Op.BitwiseAnd, self.select(half, self.bin(Op.IAdd, q, self.u32(1)), q), self.u32(3))
        f = self.k(0.0)
        for j, limb in enumerate(frac):
            term = self.val(Op.ConvertUToF, self.t, limb)
            f = self.add(f, self.mul(term, self.k(2.0 ** (32 * j - (32 * n - 2)))))
        f = self.select(half, self.neg(f), f)
        r = self.add(self.mul(f, self.k(w.pio2[0])), self.mul(f, self.k(w.pio2[1])))
        negative = self.lt(x, self.k(0.0))
        r = self.select(negative, self.neg(r), r)
        q = self.select(negative, self.bin(Op.BitwiseAnd, self.bin(Op.ISub, self.u32(4), q), self.u32(3)), q)
        return [r, q]

    def _add_at(self, limbs: list[int], at: int, value: int, pair: int) -> None:
        """limbs += value * 2^(32*at), carries rippling up and dropping off the top."""
        carry = value
        for j in range(at, len(limbs)):
            s = self.val(Op.IAddCarry, pair, limbs[j], carry)
            limbs[j] = self.val(Op.CompositeExtract, self.u32_t, s, 0)
            carry = self.val(Op.CompositeExtract, self.u32_t, s, 1)

    # ------------------------------------------------------------ double-word arithmetic (Dekker, no fma)

    def split(self, a: int) -> tuple[int, int]:
        t = self.mul(a, self.k(self.w.split))
        hi = self.sub(t, self.sub(t, a))
        return hi, self.sub(a, hi)

    def two_prod(self, a: int, b: int) -> tuple[int, int]:
        """a*b as p + e exactly."""
        p = self.mul(a, b)
        ah, al = self.split(a)
        bh, bl = self.split(b)
        e = self.add(self.add(self.add(self.sub(self.mul(ah, bh), p), self.mul(ah, bl)), self.mul(al, bh)),
                     self.mul(al, bl))
        return p, e

    def two_sum(self, a: int, b: int) -> tuple[int, int]:
        """a+b as s + e exactly."""
        s = self.add(a, b)
        bb = self.sub(s, a)
        return s, self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))

    def log2_wide(self, x: int) -> tuple[int, int]:
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

    def pick(self, q: int, options: tuple[int, int, int, int]) -> int:
        r = options[0]
        for j in (1, 2, 3):
            r = self.select(self.cmp(Op.IEqual, q, self.u32(j)), options[j], r)
        return r


def build(em: SpirvEmitter, name: str) -> FunctionWriter:
    """The routine `name` (`exp_f32`, `sin_f64`, `pow_f32` ...) as a new OpFunction."""
    fn, width = name.rsplit("_f", 1)
    bits = int(width)
    m = em.m
    t = m.float(bits)
    fw = FunctionWriter(m, t, (t,) * (2 if fn == "pow" else 1))
    lib = MathLib(em, fw, bits)
    fw.label()
    if fn in ("sin", "cos"):  # variables come first in the entry block
        words = two_over_pi_words()
        arr = m.array(lib.u32_t, len(words))
        init = m.constant_composite(arr, tuple(lib.u32(w) for w in words))
        lib.table = fw.val(Op.Variable, m.pointer(SC.Function, arr), SC.Function, init)
    result = _BODIES[fn](lib, *fw.params)
    fw.op(Op.ReturnValue, result)
    return fw


def _exp(b: MathLib, x: int) -> int:
    lo, hi = b.w.exp_clamp
    xc = b.clamp(x, -lo, hi)
    k = b.round_even(b.mul(xc, b.k(b.w.inv_ln2)))
    y = b.scale2(b.exp_reduced(b.reduce_ln2(xc, k)), k)
    y = b.select(b.gt(x, b.k(b.w.exp_max)), b.k(INF), y)
    y = b.select(b.lt(x, b.k(b.w.exp_min)), b.k(0.0), y)
    return b.select(b.isnan(x), x, y)


def _exp2(b: MathLib, x: int) -> int:
    c = b.w.exp2_clamp
    y = b.exp2_scaled(b.clamp(x, -c, c), b.k(0.0))
    y = b.select(b.isnan(x), x, y)
    return b.select(b.eq(x, b.k(-INF)), b.k(0.0), b.select(b.eq(x, b.k(INF)), b.k(INF), y))


def _positive(b: MathLib, x: int) -> int:
    return b.select(b.gt(x, b.k(0.0)), b.select(b.isinf(x), b.k(1.0), x), b.k(1.0))


def _log(b: MathLib, x: int) -> int:
    e, lm = b.log_parts(_positive(b, x))
    hi = b.mul(e, b.k(b.w.ln2_hi))
    lo = b.add(b.mul(e, b.k(b.w.ln2_lo)), lm)
    return b.log_special(x, b.add(hi, lo))


def _log2(b: MathLib, x: int) -> int:
    e, lm = b.log_parts(_positive(b, x))
    return b.log_special(x, b.add(e, b.mul(lm, b.k(b.w.inv_ln2))))


def _sin(b: MathLib, x: int) -> int:
    bad = b.lor(b.isnan(x), b.isinf(x))
    s, c, q = b.sincos(b.select(bad, b.k(0.0), x))
    r = b.pick(q, (s, c, b.neg(s), b.neg(c)))
    r = b.select(b.eq(x, b.k(0.0)), x, r)  # keeps -0
    return b.select(bad, b.k(NAN), r)


def _cos(b: MathLib, x: int) -> int:
    bad = b.lor(b.isnan(x), b.isinf(x))
    s, c, q = b.sincos(b.select(bad, b.k(0.0), x))
    return b.select(bad, b.k(NAN), b.pick(q, (c, b.neg(s), b.neg(c), s)))


def _tanh(b: MathLib, x: int) -> int:
    ax = b.abs(x)
    big = b.w.tanh_big
    y = b.mul(b.select(b.gt(ax, b.k(big)), b.k(big), ax), b.k(2.0))
    # expm1(y) for y >= 0: directly below ln2/2, else 2^k (expm1(r) + 1) - 1.
    k = b.round_even(b.mul(y, b.k(b.w.inv_ln2)))
    em = b.expm1_reduced(b.reduce_ln2(y, k))
    ki = b.to_int(k)
    scaled = b.add(b.ldexp(em, ki), b.sub(b.ldexp(b.k(1.0), ki), b.k(1.0)))
    t = b.select(b.lt(y, b.k(LN2 / 2)), b.expm1_reduced(y), scaled)
    mag = b.select(b.gt(ax, b.k(big)), b.k(1.0), b.div(t, b.add(t, b.k(2.0))))
    r = b.select(b.lt(x, b.k(0.0)), b.neg(mag), mag)
    r = b.select(b.lt(ax, b.k(b.w.tanh_small)), x, r)
    return b.select(b.isnan(x), x, r)


def _pow(b: MathLib, ax: int, y: int) -> int:
    """|x|**y for finite |x| > 0 and finite y (the caller handles the rest)."""
    if b.bits == 32 and "f64" in b.em.profile.features:
        f64 = b.m.float(64)
        helper = b.em.math_helper("pow_f64")
        b.fw.callees[helper.id] = helper
        wide = b.val(Op.FunctionCall, f64, helper.id, b.val(Op.FConvert, f64, ax), b.val(Op.FConvert, f64, y))
        return b.val(Op.FConvert, b.t, wide)
    # y * log2|x| in double-word precision, then 2^(hi + lo).
    l_hi, l_lo = b.log2_wide(ax)
    yc = b.clamp(y, -b.w.split_max, b.w.split_max)
    hi, lo = b.two_prod(yc, l_hi)
    return b.exp2_scaled(hi, b.add(lo, b.mul(yc, l_lo)))


_BODIES = {"exp": _exp, "exp2": _exp2, "log": _log, "log2": _log2, "sin": _sin, "cos": _cos, "tanh": _tanh,
           "pow": _pow}

