"""`canonicalize`: folding, exact algebraic identities, constant control flow.

Patterns are a table of op name -> functions, run by the one worklist driver
(`loomcli.passes.rewrite.apply_patterns`). Every rewrite is exact: it keeps
the value an op computes whenever the op is defined (rewrites may only
remove undefined behaviour, never add it). Trivially dead pure ops are
erased as the driver goes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from loomcli.ir.builder import legalize_names
from loomcli.ir.core import Module, Operation, OpResult, Value
from loomcli.ir.ops import COMMUTATIVE as COMMUTATIVE_TRAIT
from loomcli.ir.ops import INDEX_DIV, INDEX_REM, KERNEL_DISPATCH, SCALAR_DIVSI, SCALAR_REMSI, SCF_FOR, OpTable, ops_with
from loomcli.ir.types import I1, INDEX, OFFSET, ScalarType
from loomcli.passes.registry import ModulePass, PassContext, option
from loomcli.passes.rewrite import Pattern, Rewriter, apply_patterns
from loomcli.semantics.fold import (
    FOLDERS,
    NOT_CONSTANT,
    SWAPPED_PREDICATE,
    UndefinedBehavior,
    canonical,
    constant_of,
    fold_op,
    is_plain_constant,
    pattern,
    same_value,
    signed,
)


class Lit(NamedTuple):
    """A replacement that is a constant still to be materialized."""

    value: Any


Simplifier = Callable[[Operation], "Sequence[Value | Lit] | None"]


# ---------------------------------------------------------------- replacing results


def constant_fits_uses(result: Value, c: Any) -> bool:
    """A constant the verifier would reject at some use (a constant loop step
    must be > 0, a dispatch count within [0, 2^32-1]) is not substituted:
    the program has UB there, and the op stays as written."""
    for user, i in result.uses:
        if user.opdef is SCF_FOR and i == 2 and c <= 0:
            return False
        if user.opdef is KERNEL_DISPATCH and i < user.attr("nworkload", 0) and not 0 <= c <= (1 << 32) - 1:
            return False
    return True


def replace_results(op: Operation, rw: Rewriter, replacements: Sequence[Value | Lit]) -> bool:
    """Replace each result of `op` by a value or a new constant, then erase it."""
    for r, rep in zip(op.results, replacements):
        c = rep.value if isinstance(rep, Lit) else constant_of(rep)
        if c is not NOT_CONSTANT and not constant_fits_uses(r, c):
            return False
    values: list[Value] = []
    for r, rep in zip(op.results, replacements):
        if isinstance(rep, Lit):
            v = rw.constant_before(op, rep.value, r.type, r.name)
            if op.comments:
                v.op.comments, op.comments = op.comments, []
            values.append(v)
        else:
            values.append(rep)
    rw.carry_comments(op)
    rw.replace_op(op, values)
    return True


_REWRITES: dict[str, list[Pattern]] = {}  # op name -> its patterns, tried in the order defined below


def rewrites(*names: str) -> Callable[[Pattern], Pattern]:
    """Register a pattern for the ops `names` (after those defined above it)."""
    def register(pattern: Pattern) -> Pattern:
        for name in names:
            _REWRITES.setdefault(name, []).append(pattern)
        return pattern
    return register


def simplifier(fn: Simplifier) -> Pattern:
    """A pattern from a function that names the replacements of an op's results."""
    def apply(op: Operation, rw: Rewriter) -> bool:
        replacements = fn(op)
        return replacements is not None and replace_results(op, rw, replacements)
    apply.__name__ = fn.__name__
    apply.__doc__ = fn.__doc__
    return apply


# ---------------------------------------------------------------- helpers


def _lit(op: Operation, x: Any) -> Lit:
    return Lit(canonical(x, op.results[0].type))


def _int_pattern(v: Value) -> int | None:
    """The 64-bit (index, offset) or N-bit pattern of an integer constant."""
    c = constant_of(v)
    if c is NOT_CONSTANT or isinstance(c, float):
        return None
    return pattern(c, _bits(v))


def _bits(v: Value) -> int:
    """The width of an integer-like value's pattern (index and offset: 64)."""
    t = v.type
    return t.bits if isinstance(t, ScalarType) else 64


def _is_int(v: Value, x: int) -> bool:
    """v is the integer constant x (compared as patterns; -1 is all ones)."""
    p = _int_pattern(v)
    return p is not None and p == x & ((1 << _bits(v)) - 1)


def _is_signed_one(v: Value) -> bool:
    p = _int_pattern(v)
    return p is not None and signed(p, _bits(v)) == 1


def _is_float(v: Value, x: float) -> bool:
    c = constant_of(v)
    return isinstance(c, float) and same_value(c, x)


def _flags(op: Operation) -> tuple[str, ...]:
    return tuple(op.attr_or("flags", ()))


def _defining(v: Value, name: str) -> Operation | None:
    if isinstance(v, OpResult) and v.op.opdef.name == name:
        return v.op
    return None


# ---------------------------------------------------------------- folding


@rewrites(*FOLDERS)
@simplifier
def fold_constants(op: Operation) -> list[Value | Lit] | None:
    """Every operand constant: the op's results become constants (unless UB)."""
    args = [constant_of(v) for v in op.operands]
    if not args or any(a is NOT_CONSTANT for a in args):
        return None
    try:
        values = fold_op(op, args, constant_of)
    except UndefinedBehavior:
        return None
    if values is None or not all(is_plain_constant(r.type, v) for r, v in zip(op.results, values)):
        return None  # a NaN with a payload (a bitcast's) stays computed
    return [Lit(v) for v in values]


# ---------------------------------------------------------------- algebra (integers and index)

COMMUTATIVE = ops_with(COMMUTATIVE_TRAIT)


@rewrites(*sorted(COMMUTATIVE))
def constant_to_right(op: Operation, rw: Rewriter) -> bool:
    """`c op x` -> `x op c` for commutative ops, so the identities below see one form."""
    a, b = op.operand("lhs"), op.operand("rhs")
    if constant_of(a) is NOT_CONSTANT or constant_of(b) is not NOT_CONSTANT:
        return False
    _swap_operands(op, rw)
    return True


@rewrites("index.cmp", "scalar.cmpi")
def swap_compare(op: Operation, rw: Rewriter) -> bool:
    """`cmp P, c, x` -> `cmp swap(P), x, c`."""
    a, b = op.operand("lhs"), op.operand("rhs")
    if constant_of(a) is NOT_CONSTANT or constant_of(b) is not NOT_CONSTANT:
        return False
    op.set_attr("predicate", SWAPPED_PREDICATE[op.attr("predicate")])
    _swap_operands(op, rw)
    return True


def _swap_operands(op: Operation, rw: Rewriter) -> None:
    a, b = op.operand("lhs"), op.operand("rhs")
    if a is b:
        return
    rw.set_operand(op, 0, b)
    rw.set_operand(op, 1, a)
    if op.operand_locs and len(op.operand_locs) >= 2:
        op.operand_locs[0], op.operand_locs[1] = op.operand_locs[1], op.operand_locs[0]


@rewrites("index.add", "scalar.addi", "index.sub", "scalar.subi")
@simplifier
def add_zero(op: Operation) -> list[Value | Lit] | None:
    """x + 0 -> x;  x - 0 -> x."""
    return [op.operand("lhs")] if _is_int(op.operand("rhs"), 0) else None


@rewrites("index.sub", "scalar.subi")
@simplifier
def sub_self(op: Operation) -> list[Value | Lit] | None:
    """x - x -> 0."""
    return [_lit(op, 0)] if op.operand("lhs") is op.operand("rhs") else None


@rewrites("index.mul", "scalar.muli")
@simplifier
def mul_identity(op: Operation) -> list[Value | Lit] | None:
    """x * 1 -> x;  x * 0 -> 0."""
    x, c = op.operands
    if _is_int(c, 1):
        return [x]
    if _is_int(c, 0):
        return [_lit(op, 0)]
    return None


@rewrites("index.div", "scalar.divsi", "scalar.divui")
@simplifier
def div_one(op: Operation) -> list[Value | Lit] | None:
    """x / 1 -> x (signed forms: the constant's signed reading is 1)."""
    c = op.operand("rhs")
    one = _is_signed_one(c) if op.opdef in (SCALAR_DIVSI, INDEX_DIV) else _is_int(c, 1)
    return [op.operand("lhs")] if one else None


@rewrites("index.rem", "scalar.remsi", "scalar.remui")
@simplifier
def rem_one(op: Operation) -> list[Value | Lit] | None:
    """x rem 1 -> 0."""
    c = op.operand("rhs")
    one = _is_signed_one(c) if op.opdef in (SCALAR_REMSI, INDEX_REM) else _is_int(c, 1)
    return [_lit(op, 0)] if one else None


@rewrites("index.min", "index.max", "scalar.minsi", "scalar.maxsi", "scalar.minui", "scalar.maxui",
          "scalar.minimumf", "scalar.maximumf", "scalar.minnumf", "scalar.maxnumf", "index.andi", "scalar.andi",
          "index.ori", "scalar.ori")
@simplifier
def idempotent(op: Operation) -> list[Value | Lit] | None:
    """min/max/and/or of x with itself -> x."""
    return [op.operand("lhs")] if op.operand("lhs") is op.operand("rhs") else None


@rewrites("index.andi", "scalar.andi")
@simplifier
def and_constant(op: Operation) -> list[Value | Lit] | None:
    """x & 0 -> 0;  x & ~0 -> x."""
    if _is_int(op.operand("rhs"), 0):
        return [_lit(op, 0)]
    if _is_int(op.operand("rhs"), -1):
        return [op.operand("lhs")]
    return None


@rewrites("index.ori", "scalar.ori")
@simplifier
def or_constant(op: Operation) -> list[Value | Lit] | None:
    """x | 0 -> x;  x | ~0 -> ~0."""
    if _is_int(op.operand("rhs"), 0):
        return [op.operand("lhs")]
    if _is_int(op.operand("rhs"), -1):
        return [_lit(op, -1)]
    return None


@rewrites("index.xori", "scalar.xori")
@simplifier
def xor_identity(op: Operation) -> list[Value | Lit] | None:
    """x ^ 0 -> x;  x ^ x -> 0."""
    if op.operand("lhs") is op.operand("rhs"):
        return [_lit(op, 0)]
    if _is_int(op.operand("rhs"), 0):
        return [op.operand("lhs")]
    return None


@rewrites("index.shli", "index.shrsi", "index.shrui", "scalar.shli", "scalar.shrsi", "scalar.shrui")
@simplifier
def shift_zero(op: Operation) -> list[Value | Lit] | None:
    """x shifted by 0 -> x."""
    return [op.operand("lhs")] if _is_int(op.operand("rhs"), 0) else None


@rewrites("index.madd")
@simplifier
def madd_zero(op: Operation) -> list[Value | Lit] | None:
    """0 * b + c -> c;  a * 0 + c -> c."""
    a, b, c = op.operand("a"), op.operand("b"), op.operand("c")
    return [c] if _is_int(a, 0) or _is_int(b, 0) else None


_SELF_COMPARE = {"eq": True, "sle": True, "sge": True, "ule": True, "uge": True,
                 "ne": False, "slt": False, "sgt": False, "ult": False, "ugt": False}


@rewrites("index.cmp", "scalar.cmpi")
@simplifier
def compare_self(op: Operation) -> list[Value | Lit] | None:
    """x P x -> true or false (integer comparisons)."""
    if op.operand("lhs") is not op.operand("rhs"):
        return None
    return [Lit(_SELF_COMPARE[op.attr("predicate")])]


@rewrites("index.add", "scalar.addi", "index.mul", "scalar.muli")
def reassociate(op: Operation, rw: Rewriter) -> bool:
    """(x op c1) op c2 -> x op (c1 op c2) for add and mul of index and of
    integers without overflow flags (the inner op stays if used elsewhere)."""
    inner_v, c2v = op.operand("lhs"), op.operand("rhs")
    c2 = constant_of(c2v)
    inner = _defining(inner_v, op.opdef.name)
    if c2 is NOT_CONSTANT or inner is None or _flags(op) or _flags(inner):
        return False
    x, c1v = inner.operand("lhs"), inner.operand("rhs")
    if constant_of(c1v) is NOT_CONSTANT or constant_of(x) is not NOT_CONSTANT:
        return False
    try:
        combined = fold_op(op, [constant_of(c1v), c2])
    except UndefinedBehavior:
        return False  # c1 op c2 leaves the index range: keep the chain
    if combined is None:
        return False
    t = op.result().type
    c = rw.constant_before(op, combined[0], t, rw.fresh_name(op, "c"))
    rw.set_operand(op, 0, x)
    rw.set_operand(op, 1, c)
    return True


# ---------------------------------------------------------------- casts


@rewrites("index.cast")
@simplifier
def cast_round_trip(op: Operation) -> list[Value | Lit] | None:
    """index.cast back to the type it came from (index <-> offset) -> the original."""
    inner = _defining(op.operand("value"), "index.cast")
    if inner is None:
        return None
    x = inner.operand("value")
    if x.type is op.result().type and {x.type, inner.result().type} == {INDEX, OFFSET}:
        return [x]
    return None


@rewrites("scalar.trunci")
@simplifier
def trunc_of_ext(op: Operation) -> list[Value | Lit] | None:
    """trunci (extsi|extui x) back to x's type -> x."""
    for name in ("scalar.extsi", "scalar.extui"):
        inner = _defining(op.operand("value"), name)
        if inner is not None and inner.operand("value").type is op.result().type:
            return [inner.operand("value")]
    return None


def _undo(producer: str) -> Simplifier:
    def undo(op: Operation) -> list[Value | Lit] | None:
        inner = _defining(op.operand("value"), producer)
        if inner is not None and inner.operand("value").type is op.result().type:
            return [inner.operand("value")]
        return None
    undo.__name__ = f"undo_{producer.split('.')[1]}"
    undo.__doc__ = f"op ({producer} x) back to x's type -> x."
    return undo


rewrites("scalar.negf")(simplifier(_undo("scalar.negf")))
rewrites("scalar.bitcast")(simplifier(_undo("scalar.bitcast")))
rewrites("scalar.fptrunc")(simplifier(_undo("scalar.extf")))


# ---------------------------------------------------------------- floats (only exact identities)


@rewrites("scalar.addf")
@simplifier
def addf_negative_zero(op: Operation) -> list[Value | Lit] | None:
    """x + -0.0 -> x (x + 0.0 is not: -0.0 + 0.0 = 0.0)."""
    return [op.operand("lhs")] if _is_float(op.operand("rhs"), -0.0) else None


@rewrites("scalar.subf")
@simplifier
def subf_zero(op: Operation) -> list[Value | Lit] | None:
    """x - 0.0 -> x."""
    return [op.operand("lhs")] if _is_float(op.operand("rhs"), 0.0) else None


@rewrites("scalar.mulf", "scalar.divf")
@simplifier
def float_times_one(op: Operation) -> list[Value | Lit] | None:
    """x * 1.0 -> x;  x / 1.0 -> x."""
    return [op.operand("lhs")] if _is_float(op.operand("rhs"), 1.0) else None


# ---------------------------------------------------------------- select and assume


@rewrites("scf.select")
@simplifier
def select_simplify(op: Operation) -> list[Value | Lit] | None:
    """select on a constant -> the taken arm; equal arms -> the arm;
    select(c, true, false) : i1 -> c."""
    c, a, b = op.operand("condition"), op.operand("true_value"), op.operand("false_value")
    cond = constant_of(c)
    if cond is not NOT_CONSTANT:
        return [a if cond else b]
    if a is b:
        return [a]
    if op.result().type is I1 and constant_of(a) is True and constant_of(b) is False:
        return [c]
    return None


@rewrites("index.assume")
@simplifier
def assume_nothing(op: Operation) -> list[Value | Lit] | None:
    """index.assume with no predicates -> its operands."""
    return list(op.operand_group("values")) if not op.attr("preds", None) else None


# ---------------------------------------------------------------- control flow


def _yields_fit(op: Operation, values: Sequence[Value]) -> bool:
    for r, v in zip(op.results, values):
        c = constant_of(v)
        if c is not NOT_CONSTANT and not constant_fits_uses(r, c):
            return False
    return True


@rewrites("scf.if")
def if_constant_condition(op: Operation, rw: Rewriter) -> bool:
    """scf.if on a constant: the taken region replaces it; its yields are the results."""
    cond = constant_of(op.operand("condition"))
    if cond is NOT_CONSTANT:
        return False
    region = op.region("then" if cond else "else")
    if not _yields_fit(op, region.ops[-1].operands):
        return False
    moved = region.ops[:-1]
    rw.carry_comments(op, moved[0] if moved else None)
    values = rw.inline_region_before(region, op, [])
    rw.replace_op_with_new_values(op, values, moved)
    return True


@rewrites("scf.if")
def if_empty(op: Operation, rw: Rewriter) -> bool:
    """scf.if without results whose regions do nothing -> erased."""
    if op.results or any(len(r.ops) > 1 for r in op.regions):
        return False
    rw.carry_comments(op)
    rw.erase_op(op)
    return True


@rewrites("scf.for")
def for_trivial_trip(op: Operation, rw: Rewriter) -> bool:
    """scf.for that runs 0 times -> its inits; exactly once -> its body with IV = lo."""
    lo, hi, step = op.operand("lower"), op.operand("upper"), op.operand("step")
    inits = op.operand_group("inits")
    clo, chi, cstep = constant_of(lo), constant_of(hi), constant_of(step)
    zero = lo is hi or (clo is not NOT_CONSTANT and chi is not NOT_CONSTANT and clo >= chi)
    if zero:
        if not _yields_fit(op, inits):
            return False
        rw.carry_comments(op)
        rw.replace_op(op, inits)
        return True
    if NOT_CONSTANT in (clo, chi, cstep) or cstep <= 0 or clo + cstep < chi:
        return False
    body = op.region("body")
    if not _yields_fit(op, body.ops[-1].operands) or not constant_fits_uses(body.args[0], clo):
        return False
    for arg, init in zip(body.args[1:], inits):
        c = constant_of(init)
        if c is not NOT_CONSTANT and not constant_fits_uses(arg, c):
            return False
    moved = body.ops[:-1]
    rw.carry_comments(op, moved[0] if moved else None)
    values = rw.inline_region_before(body, op, [lo] + inits)
    rw.replace_op_with_new_values(op, values, moved)
    return True


# ---------------------------------------------------------------- the table

PATTERNS: OpTable[list[Pattern]] = OpTable("passes.canonicalize.PATTERNS", _REWRITES)


@dataclass(frozen=True)
class Canonicalize(ModulePass):
    name = "canonicalize"
    summary = "Fold constants, apply exact algebraic identities, fold constant scf.if/select and trivial loops."

    max_iterations: int = option("sweeps of the worklist before giving up on a fixed point", 10, minimum=1)

    def run(self, module: Module, ctx: PassContext) -> None:
        apply_patterns(module, PATTERNS, max_iterations=self.max_iterations)


def canonicalize(module: Module, max_iterations: int = 10) -> bool:
    """Canonicalize `module` in place; returns whether anything changed."""
    changed = apply_patterns(module, PATTERNS, max_iterations=max_iterations)
    legalize_names(module)
    return changed


__all__ = ["PATTERNS", "Canonicalize", "Lit", "canonicalize", "constant_fits_uses", "replace_results", "simplifier"]
