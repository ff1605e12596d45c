"""Writes the table-driven conformance kernels of tests/conformance/.

Run `python tests/conformance/generate.py` after changing a table; the
generated `.loom` files are checked in and reviewed like golden files.

Each generated file is one single-invocation kernel that evaluates a table
of rows (op, operands, expected result) and stores, per row, a 64-bit
*miss*: 0 when the device's result is right, else the XOR of the result's
bits with the expected bits (or, for approximate math, the ulp distance
beyond the tolerance). The case expects every miss to be 0, so CHECK/001
names the first failing row. Operands are constants XORed with a zero the
kernel loads from memory, so no compiler (ours or the driver's) can fold
them: the device computes every row.

Expected values come from this file alone (Python integers, `fractions`
and `struct`, with `math` for the transcendental functions), never from
loomcli, so the suite checks the implementation against an independent
model of LANGUAGE.md sections 5-7.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parent
INTS = (8, 16, 32, 64)
FLOATS = ("f16", "bf16", "f32", "f64")
WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
# (precision incl. the hidden bit, minimum normal exponent, maximum exponent)
FORMAT = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127), "f64": (53, -1022, 1023)}


# ---------------------------------------------------------------- the model: floats as bit patterns


def mask(n: int) -> int:
    return (1 << n) - 1


def s_of(u: int, n: int) -> int:
    u &= mask(n)
    return u - (1 << n) if u >> (n - 1) else u


def is_nan_bits(t: str, u: int) -> bool:
    p = FORMAT[t][0] - 1
    e = mask(WIDTH[t] - 1 - p)
    return (u >> p) & e == e and u & mask(p) != 0


def value_of(t: str, u: int) -> float | Fraction:
    """Exact value of a non-NaN bit pattern: a Fraction, or +-inf."""
    w, p = WIDTH[t], FORMAT[t][0] - 1
    sign = -1 if u >> (w - 1) else 1
    e = (u >> p) & mask(w - 1 - p)
    m = u & mask(p)
    bias = mask(w - 2 - p)
    if e == mask(w - 1 - p):
        assert m == 0, "NaN has no value"
        return sign * math.inf
    if e == 0:
        return sign * Fraction(m, 1 << p) * Fraction(2) ** (1 - bias)
    return sign * (1 + Fraction(m, 1 << p)) * Fraction(2) ** (e - bias)


def bits_of(t: str, q: Fraction | float, negative_zero: bool = False) -> int:
    """Round the exact value q to nearest-even in t; +-inf on overflow."""
    w, (prec, emin, emax) = WIDTH[t], FORMAT[t]
    p = prec - 1
    sign_bit = 1 << (w - 1)
    if isinstance(q, float) and math.isinf(q):
        return (sign_bit if q < 0 else 0) | (mask(w - 1 - p) << p)
    q = Fraction(q)
    if q == 0:
        return sign_bit if negative_zero else 0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)
    scaled = a / Fraction(2) ** (e - p)            # the significand in units of the last place
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n & 1):
        n += 1
    if n >> prec:                                  # carried into a new binade
        n >>= 1
        e += 1
    if e > emax:
        return (sign_bit if neg else 0) | (mask(w - 1 - p) << p)
    if n >> p:                                     # normal
        u = ((e + mask(w - 2 - p)) << p) | (n & mask(p))
    else:                                          # subnormal
        u = n
    return (sign_bit if neg else 0) | u


def f_bits(t: str, x: float) -> int:
    """Bits of a Python float literal that is exact (or inf) in t."""
    if math.isnan(x):
        return qnan(t)
    neg0 = x == 0 and math.copysign(1, x) < 0
    b = bits_of(t, x if math.isinf(x) else Fraction(x), negative_zero=neg0)
    assert math.isinf(x) or value_of(t, b) == Fraction(x), (t, x)
    return b


def qnan(t: str, negative: bool = False) -> int:
    p = FORMAT[t][0] - 1
    return ((1 << (WIDTH[t] - 1)) if negative else 0) | (mask(WIDTH[t] - 1 - p) << p) | (1 << (p - 1))


NAN = object()  # an expected result that may be any NaN


def f_round(t: str, v: Fraction | float) -> int | object:
    """Expected bits of an exact result v (Fraction, +-inf, -0.0 or NaN) in t.
    bf16 arithmetic is computed in f32 and rounded (LANGUAGE.md 17.29)."""
    if isinstance(v, float):
        if math.isnan(v):
            return NAN
        if math.isinf(v):
            return bits_of(t, v)
        if v == 0:
            return bits_of(t, Fraction(0), negative_zero=math.copysign(1, v) < 0)
        v = Fraction(v)
    if t == "bf16":
        u32 = bits_of("f32", v)
        if u32 & 0x7F800000 == 0x7F800000:
            return u32 >> 16
        return bits_of("bf16", value_of("f32", u32), negative_zero=bool(u32 >> 31))
    return bits_of(t, v)


def signed_zero(neg: bool) -> float:
    return -0.0 if neg else 0.0


def fval(t: str, u: int) -> float | Fraction:
    return math.nan if is_nan_bits(t, u) else value_of(t, u)


def is_neg(t: str, u: int) -> bool:
    return bool(u >> (WIDTH[t] - 1))


def exact_arith(op: str, t: str, a: int, b: int) -> Fraction | float:
    """IEEE a op b, exactly (NaN, signed zeros and infinities as IEEE 754)."""
    x, y = fval(t, a), fval(t, b)
    if (isinstance(x, float) and math.isnan(x)) or (isinstance(y, float) and math.isnan(y)):
        return math.nan
    na, nb = is_neg(t, a), is_neg(t, b)
    inf_x, inf_y = isinstance(x, float), isinstance(y, float)
    if op in ("addf", "subf"):
        if op == "subf":
            y, nb = -y, not nb
            inf_y = isinstance(y, float)
        if inf_x and inf_y:
            return x if na == nb else math.nan
        if inf_x or inf_y:
            return x if inf_x else y
        r = x + y
        if r == 0:
            return signed_zero(na and nb) if x == 0 and y == 0 else 0.0
        return r
    if op == "mulf":
        neg = na != nb
        if inf_x or inf_y:
            if x == 0 or y == 0:
                return math.nan
            return -math.inf if neg else math.inf
        r = x * y
        return signed_zero(neg) if r == 0 else r
    if op == "divf":
        neg = na != nb
        if (inf_x and inf_y) or (x == 0 and y == 0):
            return math.nan
        if inf_x or y == 0:
            return -math.inf if neg else math.inf
        if inf_y:
            return signed_zero(neg)
        r = x / y
        return signed_zero(neg) if r == 0 else r
    raise ValueError(op)


# ---------------------------------------------------------------- emitting kernels


@dataclass
class Row:
    comment: str
    body: list[str]          # ops computing %r<k>... ending in a miss value named by `miss`
    miss: str                # an i64 value: 0 iff the row passed


class Kernel:
    """One single-invocation kernel evaluating rows; writes one i64 miss per row."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.n = 0
        self.zero_widths: set[int] = set()
        self.prelude: list[str] = []              # operands, each made once
        self.inputs: dict[tuple[str, int], str] = {}

    def fresh(self, base: str) -> str:
        self.n += 1
        return f"%{base}{self.n}"

    # ---- operands

    def int_in(self, out: list[str], n: int, value: int) -> str:
        """An iN operand of value `value` that no compiler can fold."""
        key = (f"i{n}", value & mask(n))
        if key not in self.inputs:
            self.zero_widths.add(n)
            c, v = self.fresh("c"), self.fresh("x")
            self.prelude.append(f"{c} = scalar.constant {s_of(value, n)} : i{n}")
            self.prelude.append(f"{v} = scalar.xori {c}, %z{n} : i{n}")
            self.inputs[key] = v
        return self.inputs[key]

    def float_in(self, out: list[str], t: str, u: int) -> str:
        key = (t, u)
        if key not in self.inputs:
            w = WIDTH[t]
            i = self.int_in(out, w, u)
            v = self.fresh("f")
            self.prelude.append(f"{v} = scalar.bitcast {i} : i{w} to {t}")
            self.inputs[key] = v
        return self.inputs[key]

    def bool_in(self, out: list[str], b: bool) -> str:
        key = ("i1", int(b))
        if key not in self.inputs:
            i = self.int_in(out, 8, int(b))
            v = self.fresh("p")
            self.prelude.append(f"{v} = scalar.trunci {i} : i8 to i1")
            self.inputs[key] = v
        return self.inputs[key]

    # ---- misses

    def int_miss(self, out: list[str], n: int, r: str, expected: int) -> str:
        e, d = self.fresh("e"), self.fresh("d")
        out.append(f"{e} = scalar.constant {s_of(expected, n)} : i{n}")
        out.append(f"{d} = scalar.xori {r}, {e} : i{n}")
        return self.widen(out, n, d)

    def bool_miss(self, out: list[str], r: str, expected: bool) -> str:
        e, d = self.fresh("e"), self.fresh("d")
        out.append(f"{e} = scalar.constant {'true' if expected else 'false'} : i1")
        out.append(f"{d} = scalar.xori {r}, {e} : i1")
        return self.widen(out, 1, d)

    def widen(self, out: list[str], n: int, d: str) -> str:
        if n == 64:
            return d
        m = self.fresh("m")
        out.append(f"{m} = scalar.extui {d} : i{n} to i64")
        return m

    def float_miss(self, out: list[str], t: str, r: str, expected: int | object, ulps: int = 0) -> str:
        """Exact bits (ulps=0), any NaN (expected NAN), or within `ulps` (same-sign ordering)."""
        w = WIDTH[t]
        if expected is NAN:
            u = self.fresh("u")
            out.append(f"{u} = scalar.cmpf ord, {r}, {r} : {t}")   # true (a miss) unless NaN
            return self.widen(out, 1, u)
        assert isinstance(expected, int)
        bits = self.fresh("b")
        out.append(f"{bits} = scalar.bitcast {r} : {t} to i{w}")
        if ulps == 0:
            return self.int_miss(out, w, bits, expected)
        # Distance in ulps: map sign-magnitude patterns onto a monotone integer line.
        wide = self.widen(out, w, bits)
        a = self._ordered(out, w, wide)
        e = self.fresh("e")
        ord_e = expected & mask(w - 1)
        ord_e = -ord_e if expected >> (w - 1) else ord_e
        out.append(f"{e} = scalar.constant {ord_e} : i64")
        diff, neg, dist, tol, over, zero, miss = (self.fresh(x) for x in ("dd", "dn", "dist", "tol", "ov", "zz", "ms"))
        out.append(f"{diff} = scalar.subi {a}, {e} : i64")
        out.append(f"{zero} = scalar.constant 0 : i64")
        out.append(f"{neg} = scalar.subi {zero}, {diff} : i64")
        out.append(f"{dist} = scalar.maxsi {diff}, {neg} : i64")
        out.append(f"{tol} = scalar.constant {ulps} : i64")
        out.append(f"{over} = scalar.subi {dist}, {tol} : i64")
        out.append(f"{miss} = scalar.maxsi {over}, {zero} : i64")
        return miss

    def _ordered(self, out: list[str], w: int, wide: str) -> str:
        mag, sign, neg, r, mk, sh, zero = (self.fresh(x) for x in ("mg", "sg", "ng", "or", "mk", "sh", "z0"))
        out.append(f"{mk} = scalar.constant {mask(w - 1)} : i64")
        out.append(f"{mag} = scalar.andi {wide}, {mk} : i64")
        out.append(f"{sh} = scalar.constant {w - 1} : i64")
        out.append(f"{sign} = scalar.shrui {wide}, {sh} : i64")
        out.append(f"{zero} = scalar.constant 0 : i64")
        out.append(f"{neg} = scalar.subi {zero}, {mag} : i64")
        p = self.fresh("pp")
        out.append(f"{p} = scalar.trunci {sign} : i64 to i1")
        out.append(f"{r} = scf.select {p}, {neg}, {mag} : i64")
        return r

    def add(self, comment: str, body: list[str], miss: str) -> None:
        self.rows.append(Row(comment, body, miss))

    # ---- text

    def render(self, title: str, notes: Iterable[str], name: str) -> str:
        n = len(self.rows)
        lines = [f"// {line}" if line else "//" for line in title.splitlines()]
        lines.append("// Generated by tests/conformance/generate.py; one miss per row, 0 = right.")
        for note in notes:
            lines.append(f"// {note}")
        lines += [
            f"kernel.def export(\"{name}\") @{name}() {{",
            "  %one = index.constant 1 : index",
            "  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index",
            "} launch(%zero: buffer, %out: buffer) {",
            "  %o = index.constant 0 : offset",
            "  %i0 = index.constant 0 : index",
            "  %zv = buffer.view %zero[%o] : buffer -> view<1xi64>",
            f"  %ov = buffer.view %out[%o] : buffer -> view<{n}xi64>",
            "  %z64 = view.load %zv[%i0] : view<1xi64> -> i64",
        ]
        for w in sorted(self.zero_widths - {64}):
            lines.append(f"  %z{w} = scalar.trunci %z64 : i64 to i{w}")
        lines += ["  " + op for op in self.prelude]
        for k, row in enumerate(self.rows):
            lines.append(f"  // [{k}] {row.comment}")
            lines += ["  " + op for op in row.body]
            lines.append(f"  view.store {row.miss}, %ov[{k}] : i64, view<{n}xi64>")
        lines += [
            "  kernel.return",
            "}",
            "",
            f"check.case @{name}_case {{",
            "  %z = check.generate.fill value(0) : tensor<1xi64>",
            f"  %out = check.generate.fill value(-1) : tensor<{n}xi64>",
            f"  kernel.launch @{name}(%z, %out) : (tensor<1xi64>, tensor<{n}xi64>)",
            f"  %none = check.generate.fill value(0) : tensor<{n}xi64>",
            f"  check.expect.equal actual(%out) expected(%none) : tensor<{n}xi64>",
            "  check.return",
            "}",
        ]
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- tables


def int_samples(n: int) -> list[int]:
    lo, hi = -(1 << (n - 1)), (1 << (n - 1)) - 1
    return [0, 1, -1, 2, -2, 7, -7, 3, -3, hi, lo, hi - 1, lo + 1, 100 % (1 << (n - 1)), -(100 % (1 << (n - 1)))]


def int_pairs(n: int) -> list[tuple[int, int]]:
    s = int_samples(n)
    pairs = [(a, b) for a in s[:7] for b in (1, -1, 2, -7, 3)]
    pairs += [(s[9], 1), (s[10], -2), (s[10], 1), (s[9], s[9]), (s[10], s[10]), (s[9], -1), (s[11], 2), (s[12], -3)]
    return pairs


def int_binary(op: str, n: int, a: int, b: int) -> int | None:
    """Expected iN result (as the unsigned pattern), None where UB."""
    sa, sb, ua, ub = s_of(a, n), s_of(b, n), a & mask(n), b & mask(n)
    if op == "addi":
        return (sa + sb) & mask(n)
    if op == "subi":
        return (sa - sb) & mask(n)
    if op == "muli":
        return (sa * sb) & mask(n)
    if op in ("divsi", "remsi"):
        if sb == 0 or (sa == -(1 << (n - 1)) and sb == -1):
            return None
        q = abs(sa) // abs(sb) * (1 if (sa < 0) == (sb < 0) else -1)
        return (q if op == "divsi" else sa - q * sb) & mask(n)
    if op in ("divui", "remui"):
        if ub == 0:
            return None
        return ua // ub if op == "divui" else ua % ub
    if op in ("shli", "shrsi", "shrui"):
        if ub >= n:
            return None
        if op == "shli":
            return (ua << ub) & mask(n)
        return (sa >> ub) & mask(n) if op == "shrsi" else ua >> ub
    return {"andi": ua & ub, "ori": ua | ub, "xori": ua ^ ub,
            "minsi": min(sa, sb) & mask(n), "maxsi": max(sa, sb) & mask(n),
            "minui": min(ua, ub), "maxui": max(ua, ub)}[op]


def int_file(ops: list[str], n: int, pairs: list[tuple[int, int]]) -> Kernel:
    k = Kernel()
    for op in ops:
        for a, b in pairs:
            want = int_binary(op, n, a, b)
            if want is None:
                continue
            body: list[str] = []
            x, y = k.int_in(body, n, a), k.int_in(body, n, b)
            r = k.fresh("r")
            body.append(f"{r} = scalar.{op} {x}, {y} : i{n}")
            k.add(f"{op} {s_of(a, n)}, {s_of(b, n)} = {s_of(want, n)}", body, k.int_miss(body, n, r, want))
    return k


ICMP = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")


def icmp(pred: str, n: int, a: int, b: int) -> bool:
    if pred in ("eq", "ne"):
        return (a & mask(n) == b & mask(n)) == (pred == "eq")
    x, y = (s_of(a, n), s_of(b, n)) if pred[0] == "s" else (a & mask(n), b & mask(n))
    return {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[pred[1:]]


FCMP = ("oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une", "uno")


def fcmp(pred: str, x: float | Fraction, y: float | Fraction) -> bool:
    unordered = (isinstance(x, float) and math.isnan(x)) or (isinstance(y, float) and math.isnan(y))
    if pred == "ord":
        return not unordered
    if pred == "uno":
        return unordered
    if unordered:
        return pred[0] == "u"
    return {"eq": x == y, "gt": x > y, "ge": x >= y, "lt": x < y, "le": x <= y, "ne": x != y}[pred[1:]]


def float_samples(t: str) -> list[int]:
    vals = [0.0, -0.0, 1.0, -1.0, 1.5, -2.5, 0.1 if t == "f64" else 0.5, math.inf, -math.inf, 3.0,
            1e-3 if t == "f64" else 0.25]
    bits = [f_bits(t, v) if v not in (0.1, 1e-3) else bits_of(t, Fraction(v)) for v in vals]
    bits += [qnan(t), qnan(t, negative=True)]
    p = FORMAT[t][0] - 1
    bits += [1, (mask(WIDTH[t] - 2 - p) * 2 << p) | mask(p)]   # the smallest subnormal, the largest finite
    return bits


def show(t: str, u: int) -> str:
    if is_nan_bits(t, u):
        return "nan"
    v = value_of(t, u)
    if isinstance(v, float):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "-0.0" if is_neg(t, u) else "0.0"
    f = float(v)
    return repr(f) if Fraction(f) == v else f"{f!r}~"


def fp_unary_in(k: Kernel, body: list[str], t: str, u: int) -> str:
    return k.float_in(body, t, u)


def arith_file(t: str) -> Kernel:
    k = Kernel()
    s = float_samples(t)
    lhs = [s[i] for i in (0, 1, 2, 5, 6, 7, 8, 11, 13, 14)]
    rhs = [s[i] for i in (0, 1, 4, 7, 11, 14)]
    for op in ("addf", "subf", "mulf", "divf"):
        for a in lhs:
            for b in rhs:
                want = f_round(t, exact_arith(op, t, a, b))
                body: list[str] = []
                x, y = k.float_in(body, t, a), k.float_in(body, t, b)
                r = k.fresh("r")
                body.append(f"{r} = scalar.{op} {x}, {y} : {t}")
                k.add(f"{op} {show(t, a)}, {show(t, b)} = {'nan' if want is NAN else show(t, want)}", body,
                      k.float_miss(body, t, r, want))
    return k


def minmax(op: str, t: str, a: int, b: int) -> int | object:
    na, nb = is_nan_bits(t, a), is_nan_bits(t, b)
    if op in ("minimumf", "maximumf"):
        if na or nb:
            return NAN
    else:
        if na and nb:
            return NAN
        if na or nb:
            return b if na else a
    x, y = value_of(t, a), value_of(t, b)
    if x == y:   # +-0: -0 < +0
        neg = is_neg(t, a) and is_neg(t, b) if op.startswith("max") else is_neg(t, a) or is_neg(t, b)
        return a if is_neg(t, a) == neg else b
    smaller = a if x < y else b
    larger = b if smaller == a else a
    return smaller if op.startswith("min") else larger


def minmax_file(t: str) -> Kernel:
    k = Kernel()
    s = float_samples(t)
    some = [s[i] for i in (0, 1, 2, 3, 7, 8, 11, 12, 13)]
    for op in ("minimumf", "maximumf", "minnumf", "maxnumf"):
        for a in some:
            for b in some:
                if op in ("minnumf", "maxnumf") and value_pair_is_zeros(t, a, b):
                    continue  # IEEE leaves minNum(-0, +0) open; LANGUAGE.md orders zeros only for minimum/maximum
                want = minmax(op, t, a, b)
                body: list[str] = []
                x, y = k.float_in(body, t, a), k.float_in(body, t, b)
                r = k.fresh("r")
                body.append(f"{r} = scalar.{op} {x}, {y} : {t}")
                if want is not NAN and is_nan_bits(t, want):  # type: ignore[arg-type]
                    want = NAN
                k.add(f"{op} {show(t, a)}, {show(t, b)}", body, k.float_miss(body, t, r, want))
    return k


def value_pair_is_zeros(t: str, a: int, b: int) -> bool:
    return a & mask(WIDTH[t] - 1) == 0 and b & mask(WIDTH[t] - 1) == 0 and a != b


def cmpf_file(t: str) -> Kernel:
    k = Kernel()
    s = [f_bits(t, v) for v in (0.0, -0.0, 1.0, -1.0, math.inf)] + [qnan(t)]
    for pred in FCMP:
        for a in s:
            for b in s:
                want = fcmp(pred, fval(t, a), fval(t, b))
                body: list[str] = []
                x, y = k.float_in(body, t, a), k.float_in(body, t, b)
                r = k.fresh("r")
                body.append(f"{r} = scalar.cmpf {pred}, {x}, {y} : {t}")
                k.add(f"cmpf {pred} {show(t, a)}, {show(t, b)} = {want}", body, k.bool_miss(body, r, want))
    return k


def cmpi_file(n: int) -> Kernel:
    k = Kernel()
    s = [0, 1, -1, (1 << (n - 1)) - 1, -(1 << (n - 1))]
    for pred in ICMP:
        for a in s:
            for b in s:
                want = icmp(pred, n, a, b)
                body: list[str] = []
                x, y = k.int_in(body, n, a), k.int_in(body, n, b)
                r = k.fresh("r")
                body.append(f"{r} = scalar.cmpi {pred}, {x}, {y} : i{n}")
                k.add(f"cmpi {pred} {a}, {b} = {want}", body, k.bool_miss(body, r, want))
    return k


def fma_file(t: str) -> tuple[Kernel, list[str]]:
    """fmaf: one rounding. Rows where fused and unfused results differ accept
    either: Vulkan's Fma need not be fused, and lavapipe's is not."""
    k = Kernel()
    eps = Fraction(1, 1 << (FORMAT[t][0] - 1))
    rows = [(Fraction(1) + eps, Fraction(1) - eps, Fraction(-1)), (Fraction(3), Fraction(5), Fraction(7)),
            (Fraction(-2), Fraction(1, 2), Fraction(1)),
            (Fraction(1) + eps, Fraction(1) + eps, -(Fraction(1) + 2 * eps)),
            (Fraction(0), Fraction(-1), Fraction(0)), (Fraction(1, 3), Fraction(3), Fraction(-1))]
    loose = 0
    for a, b, c in rows:
        ua, ub, uc = (bits_of(t, v) for v in (a, b, c))
        x, y, z = (value_of(t, u) for u in (ua, ub, uc))
        exact = x * y + z
        neg_zero = exact == 0 and (x * y == 0 and (is_neg(t, ua) != is_neg(t, ub)) and is_neg(t, uc))
        fused = bits_of(t, exact, negative_zero=neg_zero) if t != "bf16" else f_round(t, exact)
        product = (f_round(t, x * y) if x * y != 0
                   else bits_of(t, Fraction(0), negative_zero=is_neg(t, ua) != is_neg(t, ub)))
        unfused = f_round(t, exact_arith("addf", t, product, uc))   # type: ignore[arg-type]
        body: list[str] = []
        xa, xb, xc = (k.float_in(body, t, u) for u in (ua, ub, uc))
        r = k.fresh("r")
        body.append(f"{r} = scalar.fmaf {xa}, {xb}, {xc} : {t}")
        if fused == unfused:
            k.add(f"fmaf {show(t, ua)}, {show(t, ub)}, {show(t, uc)}", body, k.float_miss(body, t, r, fused))
            continue
        loose += 1
        bits = k.fresh("b")
        w = WIDTH[t]
        body.append(f"{bits} = scalar.bitcast {r} : {t} to i{w}")
        m1 = k.int_miss(body, w, bits, fused)    # type: ignore[arg-type]
        m2 = k.int_miss(body, w, bits, unfused)  # type: ignore[arg-type]
        both = k.fresh("both")
        body.append(f"{both} = scalar.andi {m1}, {m2} : i64")
        # Not a full check (a & b can be 0 with both nonzero); the patterns here differ in their last bits only.
        k.add(f"fmaf {show(t, ua)}, {show(t, ub)}, {show(t, uc)}: fused {show(t, fused)} "  # type: ignore[arg-type]
              f"or, where the driver does not fuse (lavapipe), {show(t, unfused)}", body, both)  # type: ignore[arg-type]
    return k, [f"{loose} rows accept the unfused result too: Vulkan does not require Fma to be fused."]


# ---- casts

def int_to_float_file(t: str) -> Kernel:
    k = Kernel()
    for n in INTS:
        vals = [0, 1, -1, 3, -(1 << (n - 1)), (1 << (n - 1)) - 1, (1 << min(n - 1, 24)) + 1, 100 % (1 << (n - 1))]
        for op in ("sitofp", "uitofp"):
            for a in vals:
                v = s_of(a, n) if op == "sitofp" else a & mask(n)
                want = f_round(t, Fraction(v)) if v != 0 else 0
                if t == "bf16" and abs(v) > (1 << 24):
                    continue  # docs/spirv.md: bf16 from large integers may round twice (through f32)
                body: list[str] = []
                x = k.int_in(body, n, a)
                r = k.fresh("r")
                body.append(f"{r} = scalar.{op} {x} : i{n} to {t}")
                k.add(f"{op} i{n} {v} = {show(t, want)}", body, k.float_miss(body, t, r, want))  # type: ignore[arg-type]
    return k


def float_to_int_file(t: str) -> Kernel:
    k = Kernel()
    vals = [0.0, -0.0, 1.0, -1.0, 1.5, -1.5, 2.5, -2.5, 100.0, -100.0, 0.75, 127.0, -128.0]
    for n in INTS:
        for op in ("fptosi", "fptoui"):
            for x in vals:
                if t == "bf16" and Fraction(x) != value_of("bf16", bits_of("bf16", Fraction(x))):
                    continue
                u = f_bits(t, x)
                r_exact = math.trunc(x)
                lo, hi = (-(1 << (n - 1)), (1 << (n - 1)) - 1) if op == "fptosi" else (0, mask(n))
                if not lo <= r_exact <= hi:
                    continue
                body: list[str] = []
                xin = k.float_in(body, t, u)
                r = k.fresh("r")
                body.append(f"{r} = scalar.{op} {xin} : {t} to i{n}")
                k.add(f"{op} {x} to i{n} = {r_exact}", body, k.int_miss(body, n, r, r_exact & mask(n)))
    return k


def float_float_file() -> Kernel:
    """extf is exact; fptrunc rounds to nearest-even (ties, subnormals, overflow, signed zero, NaN)."""
    k = Kernel()
    pairs = [("f16", "f32"), ("f16", "f64"), ("f32", "f64"), ("bf16", "f32"), ("bf16", "f64")]
    for small, big in pairs:
        for u in float_samples(small):
            body: list[str] = []
            x = k.float_in(body, small, u)
            r = k.fresh("r")
            body.append(f"{r} = scalar.extf {x} : {small} to {big}")
            v = fval(small, u)
            want = NAN if isinstance(v, float) and math.isnan(v) else (
                bits_of(big, v, negative_zero=is_neg(small, u)) if not isinstance(v, float) else bits_of(big, v))
            k.add(f"extf {show(small, u)} {small} to {big}", body, k.float_miss(body, big, r, want))
    for big, small in (("f32", "f16"), ("f64", "f16"), ("f64", "f32"), ("f32", "bf16")):
        ulp = Fraction(1, 1 << (FORMAT[small][0] - 1))
        vals = [Fraction(1) + ulp / 2, Fraction(1) + 3 * ulp / 2, Fraction(1) + ulp / 2 + ulp / 8,
                -(Fraction(1) + ulp / 2), Fraction(2) ** (FORMAT[small][1] - 5),
                Fraction(2) ** (FORMAT[small][2] + 1) * 3 / 2, Fraction(1, 3)]
        for q in vals:
            ub = bits_of(big, q)
            body = []
            x = k.float_in(body, big, ub)
            r = k.fresh("r")
            body.append(f"{r} = scalar.fptrunc {x} : {big} to {small}")
            exact = value_of(big, ub)
            want = bits_of(small, exact)
            k.add(f"fptrunc {show(big, ub)} {big} to {small} = {show(small, want)}", body,
                  k.float_miss(body, small, r, want))
        for u in (f_bits(big, -0.0), f_bits(big, math.inf), f_bits(big, -math.inf)):
            body = []
            x = k.float_in(body, big, u)
            r = k.fresh("r")
            body.append(f"{r} = scalar.fptrunc {x} : {big} to {small}")
            want = bits_of(small, fval(big, u) if is_neg(big, u) is False or u != f_bits(big, -0.0)
                           else Fraction(0), negative_zero=u == f_bits(big, -0.0))
            k.add(f"fptrunc {show(big, u)} {big} to {small}", body, k.float_miss(body, small, r, want))
    return k


def int_int_file() -> Kernel:
    k = Kernel()
    for n in INTS:
        for m in INTS:
            for a in (0, 1, -1, (1 << (n - 1)) - 1, -(1 << (n - 1)), 0x5A):
                body: list[str] = []
                x = k.int_in(body, n, a)
                if m > n:
                    for op in ("extsi", "extui"):
                        r = k.fresh("r")
                        body2 = list(body)
                        body2.append(f"{r} = scalar.{op} {x} : i{n} to i{m}")
                        want = (s_of(a, n) if op == "extsi" else a & mask(n)) & mask(m)
                        k.add(f"{op} i{n} {s_of(a, n)} to i{m}", body2, k.int_miss(body2, m, r, want))
                elif m < n:
                    r = k.fresh("r")
                    body.append(f"{r} = scalar.trunci {x} : i{n} to i{m}")
                    k.add(f"trunci i{n} {s_of(a, n)} to i{m}", body, k.int_miss(body, m, r, a & mask(m)))
    for bit in (0, 1):
        for op in ("extui", "extsi"):
            body = []
            p = k.bool_in(body, bool(bit))
            r = k.fresh("r")
            body.append(f"{r} = scalar.{op} {p} : i1 to i32")
            want = bit if op == "extui" else (-bit) & mask(32)
            k.add(f"{op} i1 {bit} to i32", body, k.int_miss(body, 32, r, want))
    return k


def bitcast_file() -> Kernel:
    k = Kernel()
    for t in FLOATS:
        w = WIDTH[t]
        for u in float_samples(t) + [qnan(t) | 1, (qnan(t) ^ (1 << (FORMAT[t][0] - 2))) | 5]:
            body: list[str] = []
            x = k.int_in(body, w, u)
            f, r = k.fresh("f"), k.fresh("r")
            body.append(f"{f} = scalar.bitcast {x} : i{w} to {t}")
            body.append(f"{r} = scalar.bitcast {f} : {t} to i{w}")
            k.add(f"bitcast 0x{u:x} through {t} keeps its bits (NaN payloads too)", body, k.int_miss(body, w, r, u))
    return k


# ---- math functions


MATH: dict[str, tuple[Callable[..., float], int, list[float]]] = {
    # name: (reference, ulps for f32/f64, arguments)
    "sqrtf": (math.sqrt, 0, [0.0, -0.0, 1.0, 2.0, 0.5, 10.0, 1e-3, math.inf]),
    "rsqrtf": (lambda x: 1 / math.sqrt(x), 2, [1.0, 2.0, 0.5, 10.0, 4.0, 1e-3]),
    "expf": (math.exp, 2, [0.0, 1.0, -1.0, 0.5, 10.0, -10.0, 3.3]),
    "exp2f": (lambda x: 2.0 ** x, 2, [0.0, 1.0, -1.0, 0.5, 10.0, -10.0, 3.3]),
    "logf": (math.log, 2, [1.0, 2.0, 0.5, 10.0, 1e-3, 1.0001, 123.0]),
    "log2f": (math.log2, 2, [1.0, 2.0, 0.5, 10.0, 1e-3, 1.0001, 1024.0]),
    "tanhf": (math.tanh, 2, [0.0, 0.5, -0.5, 1.0, 3.0, -3.0, 1e-3, 20.0]),
    "sinf": (math.sin, 2, [0.0, 0.5, -0.5, 1.0, 3.0, 100.0, 1e-3]),
    "cosf": (math.cos, 2, [0.0, 0.5, -0.5, 1.0, 3.0, 100.0, 1e-3]),
    "floorf": (math.floor, 0, [0.0, 1.5, -1.5, 2.0, -0.25, 1e6 + 0.5]),
    "ceilf": (math.ceil, 0, [0.0, 1.5, -1.5, 2.0, 0.25, -0.25]),
    "negf": (lambda x: -x, 0, [0.0, -0.0, 1.5, -2.0, math.inf]),
    "absf": (abs, 0, [0.0, -0.0, 1.5, -2.0, -math.inf]),
}


def math_file(t: str, names: list[str]) -> Kernel:
    k = Kernel()
    for name in (n for n in names if n in MATH):
        ref, ulps, args = MATH[name]
        for x in args:
            u = bits_of(t, Fraction(x)) if math.isfinite(x) and x != 0 else f_bits(t, x)
            xv = value_of(t, u)
            if isinstance(xv, float) and math.isfinite(x):
                continue  # overflows the type (f16)
            xf = float(xv) if not isinstance(xv, float) else xv
            if name in ("floorf", "ceilf") and xf == 0 and math.copysign(1, xf) < 0:
                continue
            y = ref(xf) if name not in ("floorf", "ceilf") else float(ref(xf))
            if name in ("floorf", "ceilf") and y == 0 and xf < 0:
                y = -0.0
            if xf == 0:  # value_of has no signed zero: take the sign from the bits
                y = {"negf": 0.0 if is_neg(t, u) else -0.0, "absf": 0.0,
                     "sqrtf": -0.0 if is_neg(t, u) else 0.0}.get(name, y)
            if math.isinf(y) or y == 0:
                want = f_bits(t, y)
            else:
                want = f_round(t, Fraction(y))  # libm's double result, rounded once more
            tol = ulps if t in ("f32", "f64") else (1 if ulps else 0)
            if name == "sqrtf" and 0 < xf < math.inf:
                want = bits_of(t, exact_sqrt(Fraction(xv), t))
            body: list[str] = []
            xin = k.float_in(body, t, u)
            r = k.fresh("r")
            body.append(f"{r} = scalar.{name} {xin} : {t}")
            k.add(f"{name}({show(t, u)}) = {show(t, want)} within {tol} ulp", body,   # type: ignore[arg-type]
                  k.float_miss(body, t, r, want, tol))
    if "powf" in names:
        for a, b in ((2.0, 10.0), (2.0, 0.5), (10.0, -2.0), (1.5, 3.0), (0.5, 0.5)):
            ua, ub = bits_of(t, Fraction(a)), bits_of(t, Fraction(b))
            want = f_round(t, Fraction(float(value_of(t, ua)) ** float(value_of(t, ub))))
            body = []
            xa, xb = k.float_in(body, t, ua), k.float_in(body, t, ub)
            r = k.fresh("r")
            body.append(f"{r} = scalar.powf {xa}, {xb} : {t}")
            tol = 2 if t in ("f32", "f64") else 1
            k.add(f"powf({a}, {b}) within {tol} ulp", body, k.float_miss(body, t, r, want, tol))
    return k


def exact_sqrt(q: Fraction, t: str) -> Fraction:
    """A value whose rounding to t equals the correctly rounded sqrt(q)."""
    prec = FORMAT[t][0] + 4
    scale = 1 << (2 * (prec + 64))
    r = math.isqrt(q.numerator * scale // q.denominator)
    exact = Fraction(r, 1 << (prec + 64))
    # sticky: if r*r != the scaled value, nudge above the truncated root so ties are not invented
    return exact if Fraction(r * r, scale) == q else exact + Fraction(1, 1 << (prec + 70))


# ---------------------------------------------------------------- the files


def files() -> dict[str, tuple[str, Kernel, list[str]]]:
    out: dict[str, tuple[str, Kernel, list[str]]] = {}
    for n in INTS:
        pairs = int_pairs(n)
        out[f"int_wrap_i{n}"] = (f"i{n} addi/subi/muli wrap modulo 2^{n} (LANGUAGE.md 7.2).",
                                 int_file(["addi", "subi", "muli"], n, pairs), [])
        out[f"int_div_i{n}"] = (f"i{n} divsi/remsi/divui/remui with negative operands: division truncates,\n"
                                "the remainder takes the dividend's sign (INT_MIN / -1 is in int_div_overflow).",
                                int_file(["divsi", "remsi", "divui", "remui"], n, pairs), [])
        shifts = [(a, b) for a in int_samples(n)[:11] for b in (0, 1, 3, n - 1)]
        out[f"int_shift_i{n}"] = (f"i{n} shli/shrsi/shrui by 0 .. {n - 1} (shifts >= {n} are UB).",
                                  int_file(["shli", "shrsi", "shrui"], n, shifts), [])
        out[f"int_bits_i{n}"] = (f"i{n} andi/ori/xori and signed/unsigned min/max.",
                                 int_file(["andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui"], n,
                                          pairs[::3]), [])
        out[f"cmpi_i{n}"] = (f"Every scalar.cmpi predicate on i{n}, signed and unsigned readings.", cmpi_file(n), [])
    for t in FLOATS:
        out[f"cmpf_{t}"] = (f"Every scalar.cmpf predicate on {t}: ordered ones false and unordered ones\n"
                            "true on NaN, -0 == +0, infinities.", cmpf_file(t), [])
        out[f"float_arith_{t}"] = (f"{t} addf/subf/mulf/divf: IEEE nearest-even, signed zeros, infinities, NaN,\n"
                                   "subnormals and overflow" + (" (computed in f32, 17.29)." if t == "bf16" else "."),
                                   arith_file(t), [])
        out[f"minmax_{t}"] = (f"{t} minimumf/maximumf (NaN propagates, -0 < +0) and minnumf/maxnumf\n"
                              "(the non-NaN operand).", minmax_file(t), [])
        out[f"cast_int_to_{t}"] = (f"sitofp/uitofp from every integer width to {t}, rounded to nearest-even.",
                                   int_to_float_file(t), [])
        out[f"cast_{t}_to_int"] = (f"fptosi/fptoui from {t} to every integer width: toward zero.",
                                   float_to_int_file(t), [])
    for t in ("f16", "f32", "f64"):
        kern, notes = fma_file(t)
        out[f"fma_{t}"] = (f"{t} fmaf: one rounding.", kern, notes)
    out["cast_float_float"] = ("extf (exact) and fptrunc (nearest-even: ties, subnormals, overflow to\n"
                               "infinity, signed zero) between f16, bf16, f32 and f64.", float_float_file(), [])
    out["cast_int_int"] = ("extsi/extui/trunci between every integer width, i1 included.", int_int_file(), [])
    out["bitcast"] = ("scalar.bitcast between integers and every float type keeps the bits,\n"
                      "NaN payloads and signalling NaNs included.", bitcast_file(), [])
    basic = ["sqrtf", "floorf", "ceilf", "negf", "absf"]
    trans = ["rsqrtf", "expf", "exp2f", "logf", "log2f", "tanhf", "sinf", "cosf", "powf"]
    for t in ("f32", "f64", "f16"):
        out[f"math_exact_{t}"] = (f"{t} sqrtf (correctly rounded), floorf, ceilf, negf, absf.", math_file(t, basic), [])
        out[f"math_approx_{t}"] = (f"{t} transcendental functions within their stated accuracy (a few ulp:\n"
                                   "2 for f32 and f64, 1 for f16; docs/spirv.md).", math_file(t, trans), [])
    return out


def main() -> None:
    for old in HERE.glob("gen_*.loom"):
        old.unlink()
    for name, (title, kernel, notes) in files().items():
        (HERE / f"gen_{name}.loom").write_text(kernel.render(title, notes, name))


if __name__ == "__main__":
    main()
