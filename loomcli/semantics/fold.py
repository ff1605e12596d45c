"""Constant folding with the exact semantics of LANGUAGE.md sections 5-7.

A constant is a plain Python value in one canonical form per type:

    index, offset       int, a mathematical integer in the type's range
    i1                  bool
    iN (N > 1)          int, the signed reading of the N-bit pattern
    f16 bf16 f32 f64    float, a value exactly representable in the type

`FOLDERS` maps op names to folders. A folder takes the op and its operands'
constants and returns the results' constants, or None when it does not
fold (transcendental functions, a NaN whose payload a constant cannot
carry); it raises `UndefinedBehavior` when the operands give UB, and an op
whose constants give UB never folds (section 17 item 15). The evaluator runs
the same folders, so folding and evaluation cannot disagree.

Floats: arithmetic is done in binary64 and rounded to the op's type. For
+, -, *, / and sqrt of f32 or f16 operands binary64 is wide enough that this
equals one correct rounding; `fmaf` and integer-to-float conversions round
exact rationals instead. f32 rounds through struct 'f', f16 through struct
'e'; bf16 is computed in f32 and rounded to nearest-even on the f32 bit
pattern (as targets carry it).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from loomcli.ir.attrs import Pred
from loomcli.ir.core import Operation, OpResult, Value
from loomcli.ir.ops import CONSTANT_OPS, SCALAR_FPTOSI, OpTable
from loomcli.ir.types import BF16, F16, F32, F64, I1, INDEX, OFFSET, ScalarType, Type, is_float, is_int, scalar

INDEX_MIN, INDEX_MAX = -(1 << 63), (1 << 63) - 1
MASK64 = (1 << 64) - 1


class EvaluationError(Exception):
    """A value could not be computed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UndefinedBehavior(EvaluationError):
    """The operands give undefined behaviour (LANGUAGE.md sections 5-7)."""


class NotEvaluable(EvaluationError):
    """The op cannot be evaluated here (memory, unbound config, step limit...)."""


class _NotConstant:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_CONSTANT"


NOT_CONSTANT: Any = _NotConstant()

Lookup = Callable[[Value], Any]  # a value's constant, or NOT_CONSTANT
Folder = Callable[[Operation, list[Any], "Lookup | None"], "list[Any] | None"]


# ---------------------------------------------------------------- canonical values


def _mask(n: int) -> int:
    return (1 << n) - 1


def signed(u: int, n: int) -> int:
    """The signed reading of an n-bit pattern."""
    u &= _mask(n)
    return u - (1 << n) if u >> (n - 1) else u


def pattern(v: Any, n: int) -> int:
    """The n-bit pattern of an integer constant (bool, signed or unsigned reading)."""
    return int(v) & _mask(n)


def from_pattern(u: int, n: int) -> Any:
    return bool(u & 1) if n == 1 else signed(u, n)


def canonical(value: Any, t: Type) -> Any:
    """A literal (as written in an attribute) as a constant of type `t`."""
    if t is INDEX or t is OFFSET:
        return int(value)
    if is_int(t):
        return from_pattern(pattern(value, t.bits), t.bits)
    if is_float(t):
        return round_float(t, float(value))
    return value


def to_literal(value: Any, t: Type) -> Any:
    """The attribute a constant op of type `t` holds for a canonical value."""
    if t is I1:
        return bool(value)
    if t is INDEX or t is OFFSET or is_int(t):
        return int(value)
    return float(value)


def in_range(t: Type, v: int) -> int:
    """index/offset results outside the type's range are UB (section 5)."""
    lo = 0 if t is OFFSET else INDEX_MIN
    if not lo <= v <= INDEX_MAX:
        raise UndefinedBehavior(f"{v} is outside the {t} range")
    return v


def constant_value(op: Operation) -> Any:
    """The canonical value of an `index.constant` or `scalar.constant`."""
    return canonical(op.attr("value"), op.result().type)


def constant_of(v: Value) -> Any:
    """The constant `v` holds, or NOT_CONSTANT."""
    if isinstance(v, OpResult) and v.op.opdef.name in CONSTANT_OPS and v.op.has_attr("value"):
        return constant_value(v.op)
    return NOT_CONSTANT


def same_value(a: Any, b: Any) -> bool:
    """Equality of constants that tells -0.0 from 0.0 and takes NaN for NaN."""
    if isinstance(a, float) or isinstance(b, float):
        if not (isinstance(a, float) and isinstance(b, float)):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return type(a) is type(b) and a == b


# ---------------------------------------------------------------- float rounding

# mantissa bits (with the implicit one), minimum and maximum normal exponent
_FORMATS = {"f64": (53, -1022, 1023), "f32": (24, -126, 127), "f16": (11, -14, 15)}


def _f32(x: float) -> float:
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _f16(x: float) -> float:
    try:
        return struct.unpack("<e", struct.pack("<e", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _bf16_of_f32(x: float) -> float:
    if math.isnan(x):
        return math.nan
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return struct.unpack("<f", struct.pack("<I", (bits << 16) & 0xFFFFFFFF))[0]


def round_float(t: Type, x: float) -> float:
    """`x` rounded to nearest-even in float type `t`. A NaN is returned as
    it is: its sign and payload are carried as `float_bits` reads them
    (struct's f16 packing would replace them)."""
    if x != x:
        return x
    name = t.name
    if name == "f64":
        return float(x)
    if name == "f32":
        return _f32(x)
    if name == "f16":
        return _f16(x)
    if name == "bf16":
        return _bf16_of_f32(_f32(x))
    raise TypeError(f"not a float type: {t}")


def round_exact(t: Type, q: Fraction | int) -> float:
    """The exact rational `q` rounded once, to nearest-even, into type `t`."""
    if t is BF16:
        return _bf16_of_f32(round_exact(F32, q))
    p, emin, emax = _FORMATS[t.name]
    if q == 0:
        return 0.0
    neg = q < 0
    a = abs(Fraction(q))
    n, d = a.numerator, a.denominator
    e = n.bit_length() - d.bit_length()
    if (n if e >= 0 else n << -e) < (d << e if e >= 0 else d):
        e -= 1  # now 2^e <= a < 2^(e+1)
    qe = max(e, emin) - (p - 1)
    num, den = (n, d << qe) if qe >= 0 else (n << -qe, d)
    m, rem = divmod(num, den)
    if 2 * rem > den or (2 * rem == den and m & 1):
        m += 1
    if m.bit_length() + qe > emax + 1:
        val = math.inf
    else:
        val = math.ldexp(m, qe)
    return -val if neg else val


# (mantissa bits, exponent mask) of the narrower float types; a NaN of one is
# carried in a Python float (binary64) with its sign and payload moved to the
# top of the binary64 mantissa, so bitcasts see the bits they were given.
_NAN_LAYOUT = {"f32": (23, 0xFF << 23), "f16": (10, 0x1F << 10), "bf16": (7, 0xFF << 7)}


def float_bits(t: Type, x: float) -> int:
    """The IEEE bit pattern of `x` in float type `t`; NaNs keep their sign and payload."""
    if t is F64:
        return struct.unpack("<Q", struct.pack("<d", x))[0]
    if x != x:
        mbits, exp = _NAN_LAYOUT[t.name]
        b = struct.unpack("<Q", struct.pack("<d", x))[0]
        payload = (b & _mask(52)) >> (52 - mbits) or 1 << (mbits - 1)
        return (b >> 63) << exp.bit_length() | exp | payload
    if t is F32:
        return struct.unpack("<I", struct.pack("<f", x))[0]
    if t is F16:
        return struct.unpack("<H", struct.pack("<e", x))[0]
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16  # bf16: exact in f32


def float_from_bits(t: Type, u: int) -> float:
    """The value of bit pattern `u` in float type `t` (NaNs as `float_bits` carries them)."""
    if t is F64:
        return struct.unpack("<d", struct.pack("<Q", u))[0]
    mbits, exp = _NAN_LAYOUT[t.name]
    if u & exp == exp and u & _mask(mbits):
        sign = u >> exp.bit_length() & 1
        b = sign << 63 | 0x7FF << 52 | (u & _mask(mbits)) << (52 - mbits)
        return struct.unpack("<d", struct.pack("<Q", b))[0]
    if t is F32:
        return struct.unpack("<f", struct.pack("<I", u))[0]
    if t is F16:
        return struct.unpack("<e", struct.pack("<H", u))[0]
    return struct.unpack("<f", struct.pack("<I", u << 16))[0]


def is_plain_constant(t: Type, x: Any) -> bool:
    """Whether a constant op can hold `x`: any value but a NaN other than
    the one `nan` spells (a constant carries no NaN payload)."""
    return not (is_float(t) and x != x and float_bits(t, x) != float_bits(t, math.nan))


# ---------------------------------------------------------------- predicates


def compare_int(pred: str, a: int, b: int, ua: int, ub: int) -> bool:
    """`index.cmp`/`scalar.cmpi`: signed forms on a, b; unsigned on the patterns ua, ub."""
    if pred == "eq":
        return a == b
    if pred == "ne":
        return a != b
    if pred[0] == "u":
        a, b = ua, ub
    op = pred[1:]
    if op == "lt":
        return a < b
    if op == "le":
        return a <= b
    if op == "gt":
        return a > b
    return a >= b


def compare_float(pred: str, a: float, b: float) -> bool:
    unordered = math.isnan(a) or math.isnan(b)
    if pred == "ord":
        return not unordered
    if pred == "uno":
        return unordered
    if unordered:
        return pred[0] == "u"
    op = pred[1:]
    return {"eq": a == b, "ne": a != b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b}[op]


SWAPPED_PREDICATE = {"eq": "eq", "ne": "ne", "slt": "sgt", "sle": "sge", "sgt": "slt", "sge": "sle",
                     "ult": "ugt", "ule": "uge", "ugt": "ult", "uge": "ule"}


def predicate_holds(name: str, args: Sequence[int]) -> bool:
    """A predicate of LANGUAGE.md section 6 on constant arguments."""
    v = args[0]
    if name == "range":
        return args[1] <= v <= args[2]
    if name == "mul":
        return args[1] > 0 and v % args[1] == 0
    if name == "pow2":
        return v > 0 and v & (v - 1) == 0
    if name == "min":
        return v >= args[1]
    if name == "max":
        return v <= args[1]
    w = args[1]
    return {"eq": v == w, "ne": v != w, "lt": v < w, "le": v <= w, "gt": v > w, "ge": v >= w}[name]


def check_predicates(preds: Sequence[Pred], value_of: Lookup) -> bool | None:
    """True if every predicate holds, None if one names a value without a
    constant; raises UndefinedBehavior for a false one."""
    for p in preds:
        args = []
        for a in p.args:
            if isinstance(a, Value):
                c = value_of(a)
                if c is NOT_CONSTANT:
                    return None
                args.append(int(c))
            else:
                args.append(a)
        if not predicate_holds(p.name, args):
            raise UndefinedBehavior(f"{p.name}({', '.join(map(str, args))}) is false")
    return True


# ---------------------------------------------------------------- the folder table

FOLDERS: OpTable[Folder] = OpTable("semantics.fold.FOLDERS")
folder = FOLDERS.register


def fold_op(op: Operation, args: list[Any], lookup: Lookup | None = None) -> list[Any] | None:
    """The results of `op` on constant operands `args`; None if it does not fold.
    Raises UndefinedBehavior. `lookup` gives constants of other values an op
    names (predicate arguments of `index.assume`)."""
    fn = FOLDERS.get(op.opdef.name)
    if fn is None:
        return None
    return fn(op, args, lookup)


def fold_values(op: Operation, operands: Sequence[Any], lookup: Lookup | None = None) -> list[Any] | None:
    """Like `fold_op`, for callers holding literal values (read as the
    operands' types) that want None, never an exception, for UB."""
    try:
        args = [canonical(a, v.type) for a, v in zip(operands, op.operands)]
        return fold_op(op, args, lookup)
    except UndefinedBehavior:
        return None


def _result_type(op: Operation) -> Type:
    return op.results[0].type


# ---- index (7.1)


def _index_div(a: int, b: int) -> int:
    if a < 0 or b <= 0:
        raise UndefinedBehavior(f"index.div needs a >= 0 and b > 0, got {a} and {b}")
    return a // b


def _index_rem(a: int, b: int) -> int:
    if a < 0 or b <= 0:
        raise UndefinedBehavior(f"index.rem needs a >= 0 and b > 0, got {a} and {b}")
    return a % b


def _shift_amount(b: int) -> int:
    if not 0 <= b <= 63:
        raise UndefinedBehavior(f"shift amount {b} is outside [0, 63]")
    return b


def _bits_op(fn: Callable[[int, int], int]) -> Callable[[int, int], int]:
    return lambda a, b: signed(fn(a & MASK64, b & MASK64), 64)


_INDEX_BINARY: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": _index_div,
    "rem": _index_rem,
    "min": min,
    "max": max,
    "andi": _bits_op(lambda a, b: a & b),
    "ori": _bits_op(lambda a, b: a | b),
    "xori": _bits_op(lambda a, b: a ^ b),
    "shli": lambda a, b: a << _shift_amount(b),
    "shrsi": lambda a, b: a >> _shift_amount(b),
    "shrui": lambda a, b: signed((a & MASK64) >> _shift_amount(b), 64),
}


def _index_binary(fn: Callable[[int, int], int]) -> Folder:
    def fold(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
        return [in_range(_result_type(op), fn(args[0], args[1]))]
    return fold


for _name, _fn in _INDEX_BINARY.items():
    FOLDERS[f"index.{_name}"] = _index_binary(_fn)


@folder("index.madd")
def _fold_madd(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    a, b, c = args
    return [in_range(_result_type(op), a * b + c)]


@folder("index.scale")
def _fold_scale(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    i, s = args
    if i < 0:
        raise UndefinedBehavior(f"index.scale needs i >= 0, got {i}")
    return [in_range(OFFSET, i * s)]


@folder("index.cmp")
def _fold_index_cmp(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    a, b = args
    return [compare_int(op.attr("predicate"), a, b, a & MASK64, b & MASK64)]


@folder("index.cast")
def _fold_index_cast(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    (x,) = args
    src, dst = op.operand("value").type, _result_type(op)
    if is_int(src):
        n = src.bits
        u = pattern(x, n)
        if dst is INDEX:
            return [u if n == 1 else signed(u, n)]
        return [in_range(OFFSET, u)]  # zero-extends; an i64 must be >= 0
    if is_int(dst):
        n = dst.bits
        return [from_pattern(x & _mask(n), n)]
    return [in_range(dst, x)]  # index <-> offset


@folder("index.assume")
def _fold_assume(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any] | None:
    env = dict(zip(op.operands, args))

    def value_of(v: Value) -> Any:
        if v in env:
            return env[v]
        return lookup(v) if lookup is not None else NOT_CONSTANT

    if check_predicates(op.attr("preds", []), value_of) is None:
        return None
    return list(args)


# ---- scalar integers (7.2)


def _overflow(kind: str) -> UndefinedBehavior:
    return UndefinedBehavior(f"{kind} overflow")


def _addi(u: int, w: int, n: int, flags: tuple[str, ...]) -> int:
    r = u + w
    if "nuw" in flags and r >> n:
        raise _overflow("unsigned")
    if "nsw" in flags and not -(1 << (n - 1)) <= signed(u, n) + signed(w, n) < (1 << (n - 1)):
        raise _overflow("signed")
    return r


def _subi(u: int, w: int, n: int, flags: tuple[str, ...]) -> int:
    r = u - w
    if "nuw" in flags and r < 0:
        raise _overflow("unsigned")
    if "nsw" in flags and not -(1 << (n - 1)) <= signed(u, n) - signed(w, n) < (1 << (n - 1)):
        raise _overflow("signed")
    return r


def _muli(u: int, w: int, n: int, flags: tuple[str, ...]) -> int:
    r = u * w
    if "nuw" in flags and r >> n:
        raise _overflow("unsigned")
    if "nsw" in flags and not -(1 << (n - 1)) <= signed(u, n) * signed(w, n) < (1 << (n - 1)):
        raise _overflow("signed")
    return r


def _int_shift(w: int, n: int) -> int:
    if w >= n:
        raise UndefinedBehavior(f"shift amount {w} >= {n}")
    return w


def _shli(u: int, w: int, n: int, flags: tuple[str, ...]) -> int:
    r = u << _int_shift(w, n)
    if "nuw" in flags and r >> n:
        raise _overflow("unsigned")
    if "nsw" in flags and not -(1 << (n - 1)) <= signed(u, n) << w < (1 << (n - 1)):
        raise _overflow("signed")
    return r


def _signed_division(u: int, w: int, n: int) -> tuple[int, int]:
    if w == 0:
        raise UndefinedBehavior("division by zero")
    a, b = signed(u, n), signed(w, n)
    if a == -(1 << (n - 1)) and b == -1:
        raise UndefinedBehavior("signed division overflow (INT_MIN / -1)")
    q = abs(a) // abs(b)
    if (a < 0) != (b < 0):
        q = -q
    return q, a - b * q


def _unsigned_division(u: int, w: int) -> tuple[int, int]:
    if w == 0:
        raise UndefinedBehavior("division by zero")
    return divmod(u, w)


_SCALAR_INT: dict[str, Callable[[int, int, int, tuple[str, ...]], int]] = {
    "addi": _addi,
    "subi": _subi,
    "muli": _muli,
    "shli": _shli,
    "divsi": lambda u, w, n, f: _signed_division(u, w, n)[0],
    "remsi": lambda u, w, n, f: _signed_division(u, w, n)[1],
    "divui": lambda u, w, n, f: _unsigned_division(u, w)[0],
    "remui": lambda u, w, n, f: _unsigned_division(u, w)[1],
    "minsi": lambda u, w, n, f: u if signed(u, n) <= signed(w, n) else w,
    "maxsi": lambda u, w, n, f: u if signed(u, n) >= signed(w, n) else w,
    "minui": lambda u, w, n, f: min(u, w),
    "maxui": lambda u, w, n, f: max(u, w),
    "andi": lambda u, w, n, f: u & w,
    "ori": lambda u, w, n, f: u | w,
    "xori": lambda u, w, n, f: u ^ w,
    "shrsi": lambda u, w, n, f: signed(u, n) >> _int_shift(w, n),
    "shrui": lambda u, w, n, f: u >> _int_shift(w, n),
}


def _scalar_int(fn: Callable[[int, int, int, tuple[str, ...]], int]) -> Folder:
    def fold(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
        n = scalar(_result_type(op)).bits
        r = fn(pattern(args[0], n), pattern(args[1], n), n, tuple(op.attr_or("flags", ())))
        return [from_pattern(r & _mask(n), n)]
    return fold


for _name, _ifn in _SCALAR_INT.items():
    FOLDERS[f"scalar.{_name}"] = _scalar_int(_ifn)


@folder("scalar.cmpi")
def _fold_cmpi(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    n = scalar(op.operand("lhs").type).bits
    ua, ub = pattern(args[0], n), pattern(args[1], n)
    return [compare_int(op.attr("predicate"), signed(ua, n), signed(ub, n), ua, ub)]


# ---- scalar floats (7.2)


def _divf(a: float, b: float) -> float:
    if b == 0.0:
        if math.isnan(a) or a == 0.0:
            return math.nan
        return math.copysign(math.inf, math.copysign(1.0, a) * math.copysign(1.0, b))
    return a / b


def _minimum(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0.0:
        return a if math.copysign(1.0, a) < 0 else b
    return min(a, b)


def _maximum(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0.0:
        return a if math.copysign(1.0, a) > 0 else b
    return max(a, b)


def _minnum(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return _minimum(a, b)


def _maxnum(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return _maximum(a, b)


_FLOAT_BINARY: dict[str, Callable[[float, float], float]] = {
    "addf": lambda a, b: a + b,
    "subf": lambda a, b: a - b,
    "mulf": lambda a, b: a * b,
    "divf": _divf,
    "minimumf": _minimum,
    "maximumf": _maximum,
    "minnumf": _minnum,
    "maxnumf": _maxnum,
}


def _sqrt(x: float) -> float:
    if math.isnan(x) or x < 0.0:
        return math.nan
    if x == 0.0 or math.isinf(x):
        return x
    return math.sqrt(x)


def _integral(fn: Callable[[float], int]) -> Callable[[float], float]:
    def apply(x: float) -> float:
        if not math.isfinite(x):
            return x
        r = float(fn(x))
        return math.copysign(0.0, x) if r == 0.0 else r
    return apply


_FLOAT_UNARY: dict[str, Callable[[float], float]] = {
    "negf": lambda x: -x,
    "absf": math.fabs,
    "sqrtf": _sqrt,
    "floorf": _integral(math.floor),
    "ceilf": _integral(math.ceil),
}


def _float_binary(fn: Callable[[float, float], float]) -> Folder:
    def fold(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
        return [round_float(_result_type(op), fn(args[0], args[1]))]
    return fold


def _float_unary(fn: Callable[[float], float]) -> Folder:
    def fold(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
        return [round_float(_result_type(op), fn(args[0]))]
    return fold


for _name, _bfn in _FLOAT_BINARY.items():
    FOLDERS[f"scalar.{_name}"] = _float_binary(_bfn)
for _name, _ufn in _FLOAT_UNARY.items():
    FOLDERS[f"scalar.{_name}"] = _float_unary(_ufn)


@folder("scalar.fmaf")
def _fold_fma(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    a, b, c = args
    t = _result_type(op)
    if not all(math.isfinite(x) for x in args):
        return [round_float(t, a * b + c)]  # NaN and infinities: no rounding happens
    product = Fraction(a) * Fraction(b)
    exact = product + Fraction(c)
    if exact == 0:
        negative_product = product == 0 and (math.copysign(1.0, a) * math.copysign(1.0, b) < 0)
        if product == 0 and c == 0.0:
            return [-0.0 if negative_product and math.copysign(1.0, c) < 0 else 0.0]
        return [0.0]
    return [round_exact(t, exact)]


@folder("scalar.cmpf")
def _fold_cmpf(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    return [compare_float(op.attr("predicate"), args[0], args[1])]


# ---- casts (5, 7.2)


def _int_bits(t: Type) -> int:
    return scalar(t).bits


@folder("scalar.sitofp")
def _fold_sitofp(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    n = _int_bits(op.operand("value").type)
    return [round_exact(_result_type(op), signed(pattern(args[0], n), n))]


@folder("scalar.uitofp")
def _fold_uitofp(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    return [round_exact(_result_type(op), pattern(args[0], _int_bits(op.operand("value").type)))]


@folder("scalar.fptosi", "scalar.fptoui")
def _fold_fptoint(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    (x,) = args
    if not math.isfinite(x):
        raise UndefinedBehavior(f"{op.opdef.name} of {x}")
    n = _int_bits(_result_type(op))
    v = math.trunc(x)
    lo, hi = (-(1 << (n - 1)), (1 << (n - 1)) - 1) if op.opdef is SCALAR_FPTOSI else (0, (1 << n) - 1)
    if not lo <= v <= hi:
        raise UndefinedBehavior(f"{op.opdef.name}: {x} does not fit i{n}")
    return [from_pattern(v & _mask(n), n)]


@folder("scalar.extf", "scalar.fptrunc")
def _fold_float_cast(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    return [round_float(_result_type(op), args[0])]


@folder("scalar.extsi")
def _fold_extsi(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    n, m = _int_bits(op.operand("value").type), _int_bits(_result_type(op))
    return [from_pattern(signed(pattern(args[0], n), n) & _mask(m), m)]


@folder("scalar.extui")
def _fold_extui(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    n, m = _int_bits(op.operand("value").type), _int_bits(_result_type(op))
    return [from_pattern(pattern(args[0], n), m)]


@folder("scalar.trunci")
def _fold_trunci(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    m = _int_bits(_result_type(op))
    return [from_pattern(pattern(args[0], m), m)]


@folder("scalar.bitcast")
def _fold_bitcast(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any] | None:
    (x,) = args
    src, dst = op.operand("value").type, _result_type(op)
    u = float_bits(src, x) if is_float(src) else pattern(x, _int_bits(src))
    return [float_from_bits(dst, u) if is_float(dst) else from_pattern(u, _int_bits(dst))]


# ---- scf.select, buffer.pack


@folder("scf.select")
def _fold_select(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    return [args[1] if args[0] else args[2]]


def align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@folder("buffer.pack")
def _fold_pack(op: Operation, args: list[Any], lookup: Lookup | None) -> list[Any]:
    aligns = op.attr("aligns")
    offsets = [0]
    for k in range(1, len(args)):
        offsets.append(in_range(OFFSET, align_up(offsets[-1] + args[k - 1], aligns[k])))
    total = in_range(OFFSET, align_up(offsets[-1] + args[-1], max(aligns)))
    return [total] + offsets


def is_foldable_type(t: Type) -> bool:
    return isinstance(t, ScalarType) and t.category in ("int", "float", "index", "offset")


__all__ = [
    "CONSTANT_OPS",
    "FOLDERS",
    "NOT_CONSTANT",
    "SWAPPED_PREDICATE",
    "EvaluationError",
    "NotEvaluable",
    "UndefinedBehavior",
    "canonical",
    "check_predicates",
    "compare_float",
    "compare_int",
    "constant_of",
    "constant_value",
    "fold_op",
    "fold_values",
    "from_pattern",
    "in_range",
    "is_foldable_type",
    "is_plain_constant",
    "pattern",
    "predicate_holds",
    "round_exact",
    "round_float",
    "same_value",
    "signed",
    "to_literal",
]
