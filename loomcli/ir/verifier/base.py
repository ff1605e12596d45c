"""State and reporting every part of the verifier shares: the module's symbols,
the diagnostics, and the small checks rules are written with.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from loomcli.diagnostics import Diagnostic, did_you_mean
from loomcli.ir.attrs import Pred, literal_text
from loomcli.ir.core import Loc, Module, Operation, OpResult, Value
from loomcli.ir.ops import (
    CONFIG_GET,
    CONSTANT_OPS,
    PURE,
    TARGET_SUBGROUP_SIZE,
    TEMPLATE_DEF,
    function_context,
    may_call,
)
from loomcli.ir.types import (
    ERROR,
    I1,
    INDEX,
    OFFSET,
    ScalarType,
    ShapedType,
    Type,
    is_integer_like,
)

# Largest finite magnitudes before a literal rounds to infinity (half-way to the next power).
_FLOAT_LIMITS = {"f16": 65520.0, "bf16": 3.39617752923046e38, "f32": 3.4028235677973366e38}


def literal_fits(value: Any, t: Type) -> bool:
    """LANGUAGE.md sections 6 and 17.4-5: may `value` be written for type `t`?"""
    if isinstance(t, ShapedType):
        t = t.elem
    if not isinstance(t, ScalarType):
        return False
    if t is I1:
        return value in (0, 1) and not isinstance(value, float)
    if isinstance(value, (bool, str)):
        return False
    if t.category == "int":
        if not isinstance(value, int):
            return False
        return -(1 << (t.bits - 1)) <= value <= (1 << t.bits) - 1
    if t is INDEX:
        return isinstance(value, int) and -(1 << 63) <= value <= (1 << 63) - 1
    if t is OFFSET:
        return isinstance(value, int) and 0 <= value <= (1 << 63) - 1
    if t.category == "float":
        if not isinstance(value, float):
            return False
        limit = _FLOAT_LIMITS.get(t.name)
        if limit is None or math.isinf(value) or math.isnan(value):
            return True
        if t.name == "f32":
            try:
                struct.pack("<f", value)
            except OverflowError:
                return False
            return True
        return abs(value) < limit
    return False


def kind_text(t: Type) -> str:
    return t.name if isinstance(t, ScalarType) else str(t)


class VerifierBase:
    """Diagnostics, symbols and the helpers of every rule."""

    def __init__(self, module: Module, source_level: bool = True) -> None:
        self.module = module
        # Legalized IR (after a pass with `legalizes`) may rely on uniformity the
        # source-level convergence rule cannot see; it is checked without that rule.
        self.source_level = source_level
        self.path = module.path
        self.diags: list[Diagnostic] = []
        self.symbols: dict[str, Operation] = {}
        self.bad_ops: set[int] = set()

    def error(self, code: str, loc: Loc, **fields: Any) -> None:
        self.diags.append(Diagnostic.make(code, self.path, loc, **fields))

    def type_error(self, loc: Loc, what: str, expected: str, found: Type | str) -> None:
        self.error("TYPE/001", loc, what=what, t1=expected, t2=found if isinstance(found, str) else kind_text(found))

    def count(self, op: Operation, n: int, items: str, m: int, loc: Loc | None = None) -> bool:
        if n != m:
            self.error("TYPE/002", loc or op.loc, op=op.name, n=n, items=items, m=m)
            return False
        return True

    def operands(self, op: Operation, n: int) -> bool:
        return self.count(op, n, "operands", len(op.operands))

    def want(self, op: Operation, what: str, t: Type, ok: bool, expected: str, loc: Loc | None = None) -> bool:
        if not ok and t is not ERROR:
            self.type_error(loc or op.loc, what, expected, t)
        return ok

    def result(self, op: Operation, pred: Callable[[Type], bool], expected: str) -> bool:
        if not op.results:
            return False
        t = op.results[0].type
        return self.want(op, f"result of {op.name}", t, pred(t), expected)

    def literal(self, op: Operation, attr: str, t: Type) -> None:
        value = op._attrs.get(attr)
        if value is not None and not literal_fits(value, t):
            self.error("TYPE/005", op.loc_of(attr), literal=literal_text(value), type=kind_text(t))

    def check_indices(self, op: Operation, view_t: Type, base: int) -> bool:
        template = op._attrs.get("indices", ())
        if not isinstance(view_t, ShapedType):
            return False
        rank = len(view_t.dims)
        if not self.count(op, rank, "indices", len(template)):
            return False
        k = base + 1
        for axis, t in enumerate(template):
            if t is None:
                v = op.operands[k]
                self.want(op, f"operand {k} of {op.name}", v.type, v.type is INDEX, "index", op.operand_loc(k))
                k += 1
            elif t < 0:  # section 7.4: "per axis an index value or literal >= 0 (TYPE/002)"
                self.error("TYPE/002", op.loc_of(f"index{axis}"), op=op.name, n="an",
                           items=f"index value or literal >= 0 on axis {axis}", m=t)
        return True

    @staticmethod
    def constant_of(v: Value) -> Any:
        if isinstance(v, OpResult) and v.op.name in CONSTANT_OPS:
            return v.op._attrs.get("value")
        return None

    def folds(self, v: Value, depth: int = 0) -> bool | None:
        """True if `v` folds to a constant now, None if it would once config or
        the target are bound, False if it never does."""
        if not isinstance(v, OpResult) or depth > 64:
            return False
        op = v.op
        if op.opdef in (CONFIG_GET, TARGET_SUBGROUP_SIZE):
            return None
        if op.name in CONSTANT_OPS:
            return True
        if not (op.opdef.has(PURE) and op.name.split(".")[0] in ("index", "scalar", "scf", "buffer")) \
                or op.regions:
            return False
        result: bool | None = True
        for operand in op.operands:
            f = self.folds(operand, depth + 1)
            if f is False:
                return False
            if f is None:
                result = None
        return result

    def _context_of(self, op: Operation) -> str | None:
        node = op
        while node.parent is not None and node.parent.owner is not None:
            owner = node.parent.owner
            index = owner.regions.index(node.parent)
            ctx = owner.opdef.regions[index].context
            if ctx == "convention":
                return function_context(owner._attrs.get("convention"))
            if ctx is not None:
                return ctx
            node = owner
        return None

    def lookup(self, op: Operation, attr: str, expected: str) -> Operation | None:
        """The symbol `attr` names, which must be a `expected` (a row's `symbol_kind`)."""
        name = op._attrs.get(attr)
        if name is None:
            return None
        target = self.symbols.get(name)
        if target is None:
            self.error("SYMBOL/002", op.loc_of(attr), s=name)
            same_kind = (n for n, o in self.symbols.items() if o.opdef.symbol_kind == expected)
            self.diags[-1].message += did_you_mean(name, same_kind, "@")
            return None
        if target.opdef.symbol_kind != expected:
            self.error("SYMBOL/003", op.loc_of(attr), s=name, kind=target.opdef.symbol_kind or target.name,
                       kind2=expected)
            return None
        return target

    def providers(self, family: str) -> list[Operation]:
        return [p for p in self.module.ops if p.opdef is TEMPLATE_DEF and p._attrs.get("family") == family]

    def check_preds(self, preds: list[Pred], subjects: set[Value]) -> None:
        for p in preds:
            subject = p.args[0]
            if not isinstance(subject, Value) or subject.type is ERROR:
                continue
            if subject not in subjects:
                self.error("DOMINANCE/001", p.arg_loc(0), v=subject.name)
                continue
            if not is_integer_like(subject.type):
                self.type_error(p.arg_loc(0), f"subject of {p.name}", "index, offset or integer", subject.type)
                continue
            for i, a in enumerate(p.args[1:], 1):
                if isinstance(a, Value) and a.type is not ERROR and a.type != subject.type:
                    self.type_error(p.arg_loc(i), f"argument `%{a.name}` of {p.name}", kind_text(subject.type),
                                    a.type)
            if p.name == "mul" and isinstance(p.args[1], int) and p.args[1] <= 0:
                self.error("TYPE/003", p.arg_loc(1), what="predicate mul", why="the divisor must be > 0")

    @staticmethod
    def _scalar_arg(t: Type) -> bool:
        return isinstance(t, ScalarType) and t.category in ("int", "float", "index", "offset")

    @staticmethod
    def _eligible(ctx: str | None, callee: Operation) -> bool:
        """May a site in context `ctx` call (or select) `callee` (sections 3 and 17.17)?"""
        return may_call(ctx, callee._attrs.get("convention"))
