"""The verifier: every LANGUAGE.md rule that names a parse-time code.

It walks the module once, tracking the context of each region, and checks
for every op: its context (STRUCTURE/003), the types the text wrote against
the operands (TYPE/001), its typing rule (named in the op table, implemented
here as `rule_<name>`), terminators and yields. Module-wide checks cover
symbols (SYMBOL/*), kernel convergence (STRUCTURE/005), workgroup allocas
(STRUCTURE/008), `pure` (STRUCTURE/009) and recursion (STRUCTURE/010).
All findings are returned sorted by (line, column, code).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Iterable
from typing import Any

from loomcli.diagnostics import Diagnostic
from loomcli.ir.attrs import HashAttr, Pred, literal_text
from loomcli.ir.core import Loc, Module, Operation, OpResult, Region, Signature, Value
from loomcli.ir.ops import (
    CASE,
    CONVERGENT,
    F_ANY,
    F_DEV,
    F_HOST,
    K_BODY,
    K_CFG,
    LAUNCH,
    MEMORY,
    MODULE,
    PROGRAM,
    PURE,
    SYMBOL,
    TARGET_RECORDS,
    TERMINATOR,
)
from loomcli.ir.types import (
    BUFFER,
    ERROR,
    I1,
    INDEX,
    OFFSET,
    ScalarType,
    ShapedType,
    Type,
    is_float,
    is_index_like,
    is_int,
    is_integer_like,
    is_tensor,
    is_vector,
    is_view,
)

MAX_VECTOR_LANES = 64
_EXPORT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


_INT_KINDS = {"addi", "muli", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui", "xchgi", "subi"}
_FLOAT_KINDS = {"addf", "mulf", "minimumf", "maximumf", "minnumf", "maxnumf", "xchgf"}
# Largest finite magnitudes before a literal rounds to infinity (half-way to the next power).
_FLOAT_LIMITS = {"f16": 65520.0, "bf16": 3.39617752923046e38, "f32": 3.4028235677973366e38}


def _kind_text(t: Type) -> str:
    return t.name if isinstance(t, ScalarType) else str(t)


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


class Verifier:
    def __init__(self, module: Module) -> None:
        self.module = module
        self.path = module.path
        self.diags: list[Diagnostic] = []
        self.symbols: dict[str, Operation] = {}
        self.bad_ops: set[int] = set()

    # ------------------------------------------------------------ reporting

    def error(self, code: str, loc: Loc, **fields: Any) -> None:
        self.diags.append(Diagnostic.make(code, self.path, loc, **fields))

    def type_error(self, loc: Loc, what: str, expected: str, found: Type | str) -> None:
        self.error("TYPE/001", loc, what=what, t1=expected, t2=found if isinstance(found, str) else _kind_text(found))

    def count(self, op: Operation, n: int, items: str, m: int, loc: Loc | None = None) -> bool:
        if n != m:
            self.error("TYPE/002", loc or op.loc, op=op.name, n=n, items=items, m=m)
            return False
        return True

    def operands(self, op: Operation, n: int) -> bool:
        return self.count(op, n, "operands", len(op.operands))

    # ------------------------------------------------------------ driver

    def run(self) -> list[Diagnostic]:
        self.collect_symbols()
        for op in self.module.ops:
            self.visit(op, MODULE)
        self.check_recursion()
        return sorted(self.diags, key=lambda d: d.sort_key)

    def collect_symbols(self) -> None:
        exports: dict[str, Operation] = {}
        for op in self.module.ops:
            sym = op.attrs.get("sym")
            if sym is not None and op.opdef.has(SYMBOL):
                if sym in self.symbols:
                    self.error("SYMBOL/001", op.loc_of("sym"), name="@" + sym)
                else:
                    self.symbols[sym] = op
            if op.name == "kernel.def":
                entry = op.attrs.get("export", sym)
                if entry in exports:
                    self.error("SYMBOL/001", op.loc_of("export"), name=entry)
                else:
                    exports[entry] = op

    def lookup(self, op: Operation, attr: str, kinds: Iterable[str], expected: str) -> Operation | None:
        name = op.attrs.get(attr)
        if name is None:
            return None
        target = self.symbols.get(name)
        if target is None:
            self.error("SYMBOL/002", op.loc_of(attr), s=name)
            return None
        if target.name not in kinds:
            self.error("SYMBOL/003", op.loc_of(attr), s=name, kind=target.opdef.symbol_kind or target.name,
                       kind2=expected)
            return None
        return target

    def visit(self, op: Operation, context: str) -> None:
        opdef = op.opdef
        if opdef.has(TERMINATOR):
            # A terminator ends its region and is found nowhere else (section 3):
            # STRUCTURE/001, never STRUCTURE/003; a wrong last one is check_region_end's.
            region = op.parent
            if region is not None and region.owner is None:
                self.error("STRUCTURE/001", op.loc, op="the module", terminator=f"no terminator (found {op.name})")
            elif region is not None and region.ops[-1] is not op:
                self.error("STRUCTURE/001", op.loc, op=region.owner.name, terminator=self._terminator_of(region))
        elif context not in opdef.contexts:
            where = "the module" if context == MODULE else f"a {context}"
            self.error("STRUCTURE/003", op.loc, op=op.name, context=where)
            self.bad_ops.add(id(op))
        ok = not op.attrs.get("$invalid") and self.check_written_types(op)
        for t, loc in self._types_of(op):
            self.check_type(t, loc, context)
        if ok and id(op) not in self.bad_ops and opdef.rule:
            getattr(self, "rule_" + opdef.rule)(op)
        for index, region in enumerate(op.regions):
            spec = opdef.regions[index]
            inner = spec.context or context
            if inner == "convention":
                inner = {"device": F_DEV, "host": F_HOST}.get(op.attrs.get("convention"), F_ANY)
            self.check_region_end(op, region, spec.terminator)
            for inner_op in region.ops:
                self.visit(inner_op, inner)
        if op.name == "kernel.def":
            self.check_kernel_body(op)
        if op.name in ("func.def", "template.def") and op.attrs.get("pure"):
            self.check_pure(op)

    @staticmethod
    def _terminator_of(region: Region) -> str:
        owner = region.owner
        assert owner is not None
        return owner.opdef.regions[owner.regions.index(region)].terminator

    def check_region_end(self, op: Operation, region: Region, terminator: str) -> None:
        last = region.ops[-1] if region.ops else None
        if last is None or last.name != terminator:
            if last is not None and last.opdef.has(TERMINATOR) and last.name != terminator:
                self.error("STRUCTURE/001", last.loc, op=op.name, terminator=terminator)
            elif last is None or not last.opdef.has(TERMINATOR):
                self.error("STRUCTURE/001", region.end_loc, op=op.name, terminator=terminator)

    def check_written_types(self, op: Operation) -> bool:
        ok = True
        written = op.written_types
        for i, v in enumerate(op.operands):
            if v.type is ERROR:
                ok = False
                continue
            if written is not None and i < len(written):
                w = written[i]
                if w is not None and w != v.type:
                    self.type_error(op.operand_loc(i), f"operand {i} of {op.name}", _kind_text(w), v.type)
                    ok = False
        return ok

    @staticmethod
    def _types_of(op: Operation) -> Iterable[tuple[Type, Loc]]:
        """The types an op introduces, each with the place to blame for it."""
        for r in op.results:
            yield r.type, op.loc
        for attr in ("sig", "launch"):
            sig = op.attrs.get(attr)
            if isinstance(sig, Signature):
                for a in sig.args:
                    yield a.type, a.loc
                for t in sig.results:
                    yield t, op.loc_of("results")

    def check_type(self, t: Type, loc: Loc, context: str) -> None:
        if not isinstance(t, ShapedType):
            return
        for d in t.dims:
            if isinstance(d, Value) and d.type is not ERROR and d.type is not INDEX:
                self.type_error(loc, f"dim of {_kind_text(t)}", "index", d.type)
        if t.name == "vector":
            if len(t.dims) != 1 or not isinstance(t.dims[0], int) or t.dims[0] < 1:
                self.error("TYPE/003", loc, what=f"type {t}", why="a vector has one static dim >= 1")
            elif t.dims[0] > MAX_VECTOR_LANES:  # section 17.35
                self.error("TYPE/003", loc, what="vector type", why=f"{t.dims[0]} lanes, at most {MAX_VECTOR_LANES}")
        elif t.name == "tensor" and context != CASE:
            self.error("TYPE/003", loc, what=f"type {t}", why="tensors exist only in check cases")

    # ------------------------------------------------------------ helpers for rules

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
        value = op.attrs.get(attr)
        if value is not None and not literal_fits(value, t):
            self.error("TYPE/005", op.loc_of(attr), literal=literal_text(value), type=_kind_text(t))

    def check_indices(self, op: Operation, view_t: Type, base: int) -> bool:
        template = op.attrs.get("indices", ())
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
        if isinstance(v, OpResult) and v.op.name in ("index.constant", "scalar.constant"):
            return v.op.attrs.get("value")
        return None

    def folds(self, v: Value, depth: int = 0) -> bool | None:
        """True if `v` folds to a constant now, None if it would once config or
        the target are bound, False if it never does."""
        if not isinstance(v, OpResult) or depth > 64:
            return False
        op = v.op
        if op.name in ("config.get", "target.subgroup.size"):
            return None
        if op.name in ("index.constant", "scalar.constant"):
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

    # ------------------------------------------------------------ rules: index and scalar

    def rule_constant(self, op: Operation) -> None:
        self.operands(op, 0)
        t = op.results[0].type
        if op.name == "index.constant":
            ok = self.want(op, "result of index.constant", t, is_index_like(t), "index or offset")
        else:
            ok = self.want(op, "result of scalar.constant", t, is_int(t) or is_float(t), "an integer or float type")
        if ok:
            self.literal(op, "value", t)

    def rule_index_cast(self, op: Operation) -> None:
        if not self.operands(op, 1):
            return
        src, dst = op.operands[0].type, op.results[0].type
        ok = (is_int(src) and is_index_like(dst)) or (is_index_like(src) and is_int(dst)) \
            or (src is INDEX and dst is OFFSET) or (src is OFFSET and dst is INDEX)
        if not ok:
            self.error("TYPE/003", op.loc, what="index.cast", why=f"cannot cast {_kind_text(src)} to {_kind_text(dst)}")

    def _same_typed(self, op: Operation, n: int, pred: Callable[[Type], bool], expected: str) -> None:
        if self.operands(op, n):
            t = op.results[0].type if op.results and op.results[0].type is not I1 else op.operands[0].type
            if op.name.endswith(("cmp", "cmpi", "cmpf")):
                t = op.operands[0].type
            self.want(op, f"type of {op.name}", t, pred(t), expected)

    def rule_index_binary(self, op: Operation) -> None:
        self._same_typed(op, 2, is_index_like, "index or offset")

    def rule_index_ternary(self, op: Operation) -> None:
        self._same_typed(op, 3, is_index_like, "index or offset")

    def rule_index_cmp(self, op: Operation) -> None:
        self._same_typed(op, 2, is_index_like, "index or offset")

    def rule_index_scale(self, op: Operation) -> None:
        if not self.operands(op, 2):
            return
        a, b = op.operands
        self.want(op, "operand 0 of index.scale", a.type, a.type is INDEX, "index", op.operand_loc(0))
        self.want(op, "operand 1 of index.scale", b.type, b.type is OFFSET, "offset", op.operand_loc(1))
        self.result(op, lambda t: t is OFFSET, "offset")

    def rule_index_assume(self, op: Operation) -> None:
        if not op.operands:
            self.count(op, 1, "operands", 0)
            return
        for i, v in enumerate(op.operands):
            self.want(op, f"operand {i} of index.assume", v.type, is_index_like(v.type), "index or offset",
                      op.operand_loc(i))
        self.check_preds(op.attrs.get("preds", []), set(op.operands))

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
                    self.type_error(p.arg_loc(i), f"argument `%{a.name}` of {p.name}", _kind_text(subject.type),
                                    a.type)
            if p.name == "mul" and isinstance(p.args[1], int) and p.args[1] <= 0:
                self.error("TYPE/003", p.arg_loc(1), what="predicate mul", why="the divisor must be > 0")

    def rule_int_binary(self, op: Operation) -> None:
        self._same_typed(op, 2, is_int, "an integer type")

    def rule_float_binary(self, op: Operation) -> None:
        self._same_typed(op, 2, is_float, "a float type")

    def rule_float_unary(self, op: Operation) -> None:
        self._same_typed(op, 1, is_float, "a float type")

    def rule_float_ternary(self, op: Operation) -> None:
        self._same_typed(op, 3, is_float, "a float type")

    def rule_float_cmp(self, op: Operation) -> None:
        self._same_typed(op, 2, is_float, "a float type")

    def rule_int_cmp(self, op: Operation) -> None:
        self._same_typed(op, 2, is_int, "an integer type")

    def _cast(self, op: Operation, ok: Callable[[ScalarType, ScalarType], bool], why: str) -> None:
        if not self.operands(op, 1):
            return
        src, dst = op.operands[0].type, op.results[0].type
        if not (isinstance(src, ScalarType) and isinstance(dst, ScalarType) and ok(src, dst)):
            self.error("TYPE/003", op.loc, what=op.name, why=f"{_kind_text(src)} to {_kind_text(dst)}: {why}")

    def rule_cast_sitofp(self, op: Operation) -> None:
        self._cast(op, lambda s, d: is_int(s) and is_float(d), "expected integer to float")

    rule_cast_uitofp = rule_cast_sitofp

    def rule_cast_fptosi(self, op: Operation) -> None:
        self._cast(op, lambda s, d: is_float(s) and is_int(d), "expected float to integer")

    rule_cast_fptoui = rule_cast_fptosi

    def rule_cast_extf(self, op: Operation) -> None:
        self._cast(op, lambda s, d: is_float(s) and is_float(d) and d.bits > s.bits, "expected a wider float")

    def rule_cast_fptrunc(self, op: Operation) -> None:
        self._cast(op, lambda s, d: is_float(s) and is_float(d) and d.bits < s.bits, "expected a narrower float")

    def rule_cast_extsi(self, op: Operation) -> None:
        self._cast(op, lambda s, d: is_int(s) and is_int(d) and d.bits > s.bits, "expected a wider integer")

    rule_cast_extui = rule_cast_extsi

    def rule_cast_trunci(self, op: Operation) -> None:
        self._cast(op, lambda s, d: is_int(s) and is_int(d) and d.bits < s.bits, "expected a narrower integer")

    def rule_cast_bitcast(self, op: Operation) -> None:
        self._cast(op, lambda s, d: (is_int(s) or is_float(s)) and (is_int(d) or is_float(d))
                   and s.bits == d.bits and s is not d, "expected another type of equal width")

    # ------------------------------------------------------------ rules: scf

    def _yield_types(self, region: Region) -> tuple[Operation | None, list[Type]]:
        term = region.ops[-1] if region.ops else None
        if term is None or term.name not in ("scf.yield", "scf.condition"):
            return None, []
        return term, [v.type for v in term.operands]

    def _match_yield(self, op: Operation, region: Region, want: list[Type], skip: int = 0) -> None:
        term, got = self._yield_types(region)
        if term is None:
            return
        got = got[skip:]
        if any(t is ERROR for t in got):
            return
        if got != want:
            self.error("STRUCTURE/007", term.loc, t1=", ".join(map(_kind_text, got)), parent=op.name,
                       t2=", ".join(map(_kind_text, want)))

    def rule_scf_if(self, op: Operation) -> None:
        if not self.operands(op, 1):
            return
        c = op.operands[0]
        self.want(op, "condition of scf.if", c.type, c.type is I1, "i1", op.operand_loc(0))
        want = [r.type for r in op.results]
        if want and not op.attrs.get("else"):
            self.error("STRUCTURE/007", op.loc, t1="", parent=op.name, t2=", ".join(map(_kind_text, want)))
            return
        for region in op.regions:
            self._match_yield(op, region, want)

    def rule_scf_for(self, op: Operation) -> None:
        if len(op.operands) < 3:
            self.count(op, 3, "bounds", len(op.operands))
            return
        lo, hi, step = op.operands[:3]
        kind = lo.type
        if not self.want(op, "bounds of scf.for", kind, is_index_like(kind), "index or offset", op.operand_loc(0)):
            return
        for k, v in ((1, hi), (2, step)):
            self.want(op, f"operand {k} of scf.for", v.type, v.type is kind, _kind_text(kind), op.operand_loc(k))
        s = self.constant_of(step)
        if isinstance(s, int) and s <= 0:
            self.error("TYPE/003", op.operand_loc(2), what="step", why=f"{s} is not > 0")
        carried = [a.type for a in op.regions[0].args[1:]]
        results = [r.type for r in op.results]
        if results != carried:
            if len(results) != len(carried):
                self.count(op, len(carried), "results", len(results))
            else:
                self.error("STRUCTURE/007", op.loc, t1=", ".join(map(_kind_text, carried)), parent=op.name,
                           t2=", ".join(map(_kind_text, results)))
            return
        self._match_yield(op, op.regions[0], carried)

    def rule_scf_while(self, op: Operation) -> None:
        carried = [a.type for a in op.regions[0].args]
        results = [r.type for r in op.results]
        before, after = op.regions
        term, got = self._yield_types(before)
        if (term is not None and term.name == "scf.condition" and got and all(t is not ERROR for t in got)
                and got[1:] != results):
            self.error("STRUCTURE/007", term.loc, t1=", ".join(map(_kind_text, got[1:])), parent=op.name,
                       t2=", ".join(map(_kind_text, results)))
        do_args = [a.type for a in after.args]
        if do_args != results:
            # Blame the first `do(...)` argument that differs, else the op.
            loc = next((a.loc for a, t in zip(after.args, results) if a.type != t), op.loc)
            self.error("STRUCTURE/007", loc, t1=", ".join(map(_kind_text, do_args)), parent=op.name,
                       t2=", ".join(map(_kind_text, results)))
        self._match_yield(op, after, carried)

    def rule_condition(self, op: Operation) -> None:
        if not op.operands:
            self.count(op, 1, "operands", 0)
            return
        c = op.operands[0]
        self.want(op, "operand 0 of scf.condition", c.type, c.type is I1, "i1", op.operand_loc(0))

    def rule_select(self, op: Operation) -> None:
        if not self.operands(op, 3):
            return
        c = op.operands[0]
        self.want(op, "operand 0 of scf.select", c.type, c.type is I1, "i1", op.operand_loc(0))
        t = op.results[0].type
        self.want(op, "type of scf.select", t, not is_tensor(t), "a non-tensor type")

    # ------------------------------------------------------------ rules: buffer and view

    def rule_buffer_view(self, op: Operation) -> None:
        if not op.operands:
            return
        b = op.operands[0]
        self.want(op, "operand 0 of buffer.view", b.type, b.type is BUFFER, "buffer", op.operand_loc(0))
        if len(op.operands) != 2 or op.attrs.get("indices") != (None,):
            self.count(op, 1, "offsets", len(op.attrs.get("indices", ())))
            return
        off = op.operands[1]
        self.want(op, "operand 1 of buffer.view", off.type, off.type is OFFSET, "offset", op.operand_loc(1))
        self.result(op, is_view, "a view type")

    def rule_buffer_alloca(self, op: Operation) -> None:
        if not self.operands(op, 1):
            return
        n = op.operands[0]
        self.want(op, "operand 0 of buffer.alloca", n.type, n.type is OFFSET, "offset", op.operand_loc(0))
        self.result(op, lambda t: t is BUFFER, "buffer")
        align = op.attrs.get("align", 0)
        if not (0 < align <= 4096 and align & (align - 1) == 0):
            self.error("TYPE/003", op.loc_of("align"), what=f"align({align})", why="a power of two <= 4096")
        folds = self.folds(n)
        if op.attrs.get("kind") == "workgroup":
            parent = op.parent_op
            top = parent is not None and parent.name == "kernel.def" and op.parent is parent.regions[1]
            if not top or folds is False:
                self.error("STRUCTURE/008", op.loc)
        elif folds is False:
            self.error("TYPE/003", op.operand_loc(0), what="alloca size", why="it must fold to a constant")

    def rule_buffer_pack(self, op: Operation) -> None:
        if not op.operands:
            self.count(op, 1, "operands", 0)
            return
        t = op.results[0].type
        self.want(op, "type of buffer.pack", t, t is OFFSET, "offset")
        for k, a in enumerate(op.attrs.get("aligns", ())):
            if not (a > 0 and a & (a - 1) == 0):
                self.error("TYPE/003", op.loc_of(f"align{k}"), what=f"align({a})", why="a power of two")

    def _buffers(self, op: Operation) -> None:
        for i, v in enumerate(op.operands):
            self.want(op, f"operand {i} of {op.name}", v.type, v.type is BUFFER, "buffer", op.operand_loc(i))

    def rule_assume_noalias(self, op: Operation) -> None:
        if len(op.operands) < 2:
            self.count(op, 2, "operands", len(op.operands))
            return
        self._buffers(op)

    def rule_assume_alignment(self, op: Operation) -> None:
        if not self.operands(op, 1):
            return
        self._buffers(op)
        a = op.attrs.get("dict", {}).get("minimum_alignment", 1)
        if a <= 0 or a & (a - 1):
            self.error("TYPE/003", op.loc_of("dict"), what=f"minimum_alignment {a}", why="expected a power of two")

    def rule_assume_memory_space(self, op: Operation) -> None:
        if self.operands(op, 1):
            self._buffers(op)

    def _view_operand(self, op: Operation, i: int, pred: Callable[[Type], bool] = is_view,
                      expected: str = "a view type") -> ShapedType | None:
        if i >= len(op.operands):
            self.count(op, i + 1, "operands", len(op.operands))
            return None
        t = op.operands[i].type
        if not self.want(op, f"operand {i} of {op.name}", t, pred(t), expected, op.operand_loc(i)):
            return None
        return t  # type: ignore[return-value]

    def rule_view_load(self, op: Operation) -> None:
        v = self._view_operand(op, 0)
        if v is None or not self.check_indices(op, v, 0):
            return
        self.result(op, lambda t: t is v.elem, v.elem.name)

    def rule_view_store(self, op: Operation) -> None:
        v = self._view_operand(op, 1)
        if v is None or not self.check_indices(op, v, 1):
            return
        x = op.operands[0]
        self.want(op, "operand 0 of view.store", x.type, x.type is v.elem, v.elem.name, op.operand_loc(0))

    def rule_view_subview(self, op: Operation) -> None:
        v = self._view_operand(op, 0)
        if v is None or not self.check_indices(op, v, 0):
            return
        r = op.results[0].type
        if not self.result(op, lambda t: is_view(t) and t.elem is v.elem and len(t.dims) == len(v.dims),
                           f"a view of rank {len(v.dims)} of {v.elem.name}"):
            return
        template = op.attrs.get("indices", ())
        for axis, (src, dst) in enumerate(zip(v.dims, r.dims)):  # type: ignore[union-attr]
            origin = template[axis] if axis < len(template) else None
            if isinstance(src, int) and isinstance(dst, int):
                o = origin if isinstance(origin, int) else 0
                if o + dst > src:
                    self.error("TYPE/003", op.loc, what="subview",
                               why=f"axis {axis}: origin {o} + extent {dst} exceeds {src}")

    def rule_atomic_rmw(self, op: Operation) -> None:
        v = self._view_operand(op, 1)
        if v is None or not self.check_indices(op, v, 1):
            return
        x = op.operands[0]
        if not self.want(op, "operand 0 of view.atomic.rmw", x.type, x.type is v.elem, v.elem.name,
                         op.operand_loc(0)):
            return
        kind = op.attrs.get("kind")
        elem = v.elem.name
        if (kind in _INT_KINDS and elem not in ("i32", "i64")) or (kind in _FLOAT_KINDS and elem not in ("f32", "f64")):
            self.error("TYPE/003", op.loc, what=f"view.atomic.rmw<{kind}>", why=f"not defined on {elem}")
        self.result(op, lambda t: t is v.elem, elem)

    # ------------------------------------------------------------ rules: vector

    def rule_vector_constant(self, op: Operation) -> None:
        if self.result(op, is_vector, "a vector type"):
            self.literal(op, "value", op.results[0].type)

    def rule_vector_splat(self, op: Operation) -> None:
        if not self.operands(op, 1) or not self.result(op, is_vector, "a vector type"):
            return
        elem = op.results[0].type.elem  # type: ignore[union-attr]
        s = op.operands[0]
        self.want(op, "operand 0 of vector.splat", s.type, s.type is elem, elem.name, op.operand_loc(0))

    def rule_vector_load(self, op: Operation) -> None:
        v = self._view_operand(op, 0)
        if v is None or not self.check_indices(op, v, 0):
            return
        self.result(op, lambda t: is_vector(t) and t.elem is v.elem, f"a vector of {v.elem.name}")

    def rule_vector_store(self, op: Operation) -> None:
        v = self._view_operand(op, 1)
        if v is None or not self.check_indices(op, v, 1):
            return
        x = op.operands[0]
        self.want(op, "operand 0 of vector.store", x.type, is_vector(x.type) and x.type.elem is v.elem,
                  f"a vector of {v.elem.name}", op.operand_loc(0))

    def rule_vector_extract(self, op: Operation) -> None:
        v = self._view_operand(op, 0, is_vector, "a vector type")
        if v is None or not self.count(op, 1, "indices", len(op.attrs.get("indices", ()))):
            return
        k = op.attrs["indices"][0]
        if k is None:
            idx = op.operands[1]
            self.want(op, "operand 1 of vector.extract", idx.type, idx.type is INDEX, "index", op.operand_loc(1))
        elif not 0 <= k < v.dims[0]:  # type: ignore[operator]
            self.error("TYPE/003", op.loc_of("index0"), what=f"lane {k}",
                       why=f"a vector<{v.dims[0]}> has lanes 0..{v.dims[0] - 1}")
        self.result(op, lambda t: t is v.elem, v.elem.name)

    def rule_vector_insert(self, op: Operation) -> None:
        v = self._view_operand(op, 1, is_vector, "a vector type")
        if v is None or not self.count(op, 1, "indices", len(op.attrs.get("indices", ()))):
            return
        x = op.operands[0]
        self.want(op, "operand 0 of vector.insert", x.type, x.type is v.elem, v.elem.name, op.operand_loc(0))
        k = op.attrs["indices"][0]
        if k is None:
            idx = op.operands[2]
            self.want(op, "operand 2 of vector.insert", idx.type, idx.type is INDEX, "index", op.operand_loc(2))
        elif not 0 <= k < v.dims[0]:  # type: ignore[operator]
            self.error("TYPE/003", op.loc_of("index0"), what=f"lane {k}",
                       why=f"a vector<{v.dims[0]}> has lanes 0..{v.dims[0] - 1}")

    def _combining_kind(self, op: Operation, elem: Type) -> None:
        kind = op.attrs.get("kind")
        if (kind in _INT_KINDS and not is_int(elem)) or (kind in _FLOAT_KINDS and not is_float(elem)):
            self.error("TYPE/003", op.loc, what=f"{op.name}<{kind}>", why=f"not defined on {_kind_text(elem)}")

    def rule_vector_reduce(self, op: Operation) -> None:
        if not self.operands(op, 2):
            return
        v = self._view_operand(op, 0, is_vector, "a vector type")
        if v is None:
            return
        init = op.operands[1]
        if self.want(op, "operand 1 of vector.reduce", init.type, init.type is v.elem, v.elem.name, op.operand_loc(1)):
            self._combining_kind(op, v.elem)

    def rule_vector_arith(self, op: Operation) -> None:
        n = 3 if op.name == "vector.fmaf" else 2
        if not self.operands(op, n):
            return
        t = op.results[0].type
        want_float = op.name.endswith("f")
        ok = is_vector(t) and (is_float(t.elem) if want_float else is_int(t.elem))  # type: ignore[union-attr]
        self.want(op, f"type of {op.name}", t, ok, "a vector of floats" if want_float else "a vector of integers")

    # ------------------------------------------------------------ rules: kernels

    def _arg_types(self, sig: Signature, what: str, allowed: Callable[[Type], bool], expected: str) -> None:
        for a in sig.args:
            if a.type is not ERROR and not is_tensor(a.type) and not allowed(a.type):  # tensors: check_type
                self.type_error(a.loc, f"{what} `%{a.name}`", expected, a.type)

    @staticmethod
    def _scalar_arg(t: Type) -> bool:
        return isinstance(t, ScalarType) and t.category in ("int", "float", "index", "offset")

    def _where(self, op: Operation, *attrs: str) -> None:
        for attr in attrs:
            sig = op.attrs.get(attr)
            if sig is not None and sig.where:
                subjects = set(sig.args)
                if op.name.startswith("command.program"):
                    subjects = set(op.attrs["sig"].args) | set(op.attrs["launch"].args)
                self.check_preds(sig.where, subjects)

    def rule_kernel_def(self, op: Operation) -> None:
        self._kernel_signature(op)
        export = op.attrs.get("export")
        if export is not None and not _EXPORT_RE.match(export):
            self.error("TYPE/005", op.loc_of("export"), literal=literal_text(export), type="export name")
        if "target" in op.attrs:
            self.lookup(op, "target", TARGET_RECORDS, "target")

    def _kernel_signature(self, op: Operation) -> None:
        self._arg_types(op.attrs["sig"], "workload argument", self._scalar_arg, "index, offset, integer or float")
        self._arg_types(op.attrs["launch"], "device argument",
                        lambda t: self._scalar_arg(t) or t is BUFFER, "index, offset, integer, float or buffer")
        self._where(op, "sig", "launch")

    rule_kernel_decl = _kernel_signature

    def rule_entry_decl(self, op: Operation) -> None:
        self._arg_types(op.attrs["sig"], "device argument",
                        lambda t: self._scalar_arg(t) or t is BUFFER, "index, offset, integer, float or buffer")
        self._where(op, "sig")

    @staticmethod
    def _callee_loc(op: Operation) -> Loc:
        return op.loc_of("callee" if "callee" in op.attrs else "family")

    def _call_signature(self, op: Operation, use: str, callee: str, params: list[Value], nwant_workload: int,
                        in_case: bool = False) -> None:
        """Operands against the callee's signature arguments `params` (TYPE/006)."""
        args = op.operands
        nwork = op.attrs.get("nworkload", 0)
        written_nwork = op.attrs.get("written_nworkload", nwork)
        if any(v.type is ERROR for v in args):
            return
        if nwork != nwant_workload or written_nwork != nwork:
            self.error("TYPE/006", self._callee_loc(op), use=use, s=callee,
                       detail=f"expected {nwant_workload} workload values, found {nwork}")
            return
        if len(args) != len(params):
            self.error("TYPE/006", self._callee_loc(op), use=use, s=callee,
                       detail=f"expected {len(params)} arguments, found {len(args)}")
            return
        position = {id(p): i for i, p in enumerate(params)}
        for i, (a, p) in enumerate(zip(args, params)):
            g, w = a.type, p.type
            if in_case and w is BUFFER and is_tensor(g):
                continue
            detail = None
            if not _types_match(g, w):
                detail = f"argument {i}: expected {_kind_text(w)}, found {_kind_text(g)}"
            elif isinstance(w, ShapedType) and isinstance(g, ShapedType):
                # A dynamic dim of the signature names an argument: the operand's
                # type must name the value passed for it (section 5).
                for dw, dg in zip(w.dims, g.dims):
                    k = position.get(id(dw), -1)
                    if k >= 0 and dg is not args[k]:
                        detail = (f"argument {i}: dim `%{getattr(dg, 'name', dg)}` is not the value passed "
                                  f"for `%{dw.name}`")  # type: ignore[union-attr]
                        break
            if detail is not None:
                self.error("TYPE/006", op.operand_loc(i), use=use, s=callee, detail=detail)
                return

    def _context_of(self, op: Operation) -> str | None:
        node = op
        while node.parent is not None and node.parent.owner is not None:
            owner = node.parent.owner
            index = owner.regions.index(node.parent)
            ctx = owner.opdef.regions[index].context
            if ctx == "convention":
                return {"device": F_DEV, "host": F_HOST}.get(owner.attrs.get("convention"), F_ANY)
            if ctx is not None:
                return ctx
            node = owner
        return None

    def rule_launch(self, op: Operation) -> None:
        target = self.lookup(op, "callee", ("kernel.def", "kernel.decl"), "kernel")
        if target is None:
            return
        sig, launch = target.attrs["sig"], target.attrs["launch"]
        in_case = self._context_of(op) == CASE
        self._call_signature(op, "kernel.launch", target.attrs["sym"], sig.args + launch.args,
                             len(sig.args), in_case)

    def rule_dispatch(self, op: Operation) -> None:
        target = self.lookup(op, "callee", ("kernel.entry.decl",), "entry")
        n = op.attrs.get("nworkload", 0)
        if not 1 <= n <= 3:
            self.error("TYPE/002", op.loc, op=op.name, n="1 to 3", items="workgroup counts", m=n)
        for i, v in enumerate(op.operands[:n]):
            self.want(op, f"operand {i} of kernel.dispatch", v.type, v.type is INDEX, "index", op.operand_loc(i))
            c = self.constant_of(v)
            if isinstance(c, int) and not 0 <= c <= (1 << 32) - 1:
                self.error("TYPE/003", op.operand_loc(i), what=f"workgroup count {c}", why="counts lie in [0, 2^32-1]")
        if target is None:
            return
        written = op.attrs.get("written_nworkload", n)
        if written != n:  # `[…]` in the type list iff workload operands (section 7.6), as for kernel.launch
            self.error("TYPE/006", op.loc_of("callee"), use="kernel.dispatch", s=target.attrs["sym"],
                       detail=f"expected {n} workload types, found {written}")
            return
        want = target.attrs["sig"].arg_types
        got = [v.type for v in op.operands[n:]]
        if len(got) != len(want) or any(not _types_match(g, w) for g, w in zip(got, want)):
            self.error("TYPE/006", op.loc_of("callee"), use="kernel.dispatch", s=target.attrs["sym"],
                       detail=f"expected ({', '.join(map(_kind_text, want))}), "
                              f"found ({', '.join(map(_kind_text, got))})")

    def rule_launch_config(self, op: Operation) -> None:
        for seg in ("workgroups", "workgroup_size", "cluster_size"):
            if seg in op.attrs:
                self.count(op, 3, seg, op.attrs[seg], op.loc_of(seg))
        for i, v in enumerate(op.operands):
            self.want(op, f"operand {i} of kernel.launch.config", v.type, v.type is INDEX, "index", op.operand_loc(i))

    def rule_coordinate(self, op: Operation) -> None:
        self.result(op, lambda t: t is INDEX, "index")

    def rule_barrier(self, op: Operation) -> None:
        kind, scope, ordering = op.attrs.get("kind"), op.attrs.get("scope"), op.attrs.get("ordering")
        if kind == "workgroup":
            if scope not in ("subgroup", "workgroup"):
                self.error("TYPE/003", op.loc_of("scope"), what=f"scope({scope})", why="expected subgroup or workgroup")
            if ordering != "acq_rel":
                self.error("TYPE/003", op.loc_of("ordering"), what=f"ordering({ordering})", why="expected acq_rel")
        else:
            if scope != "workgroup":
                self.error("TYPE/003", op.loc_of("scope"), what=f"scope({scope})", why="expected workgroup")
            if ordering not in ("acquire", "release", "acq_rel"):
                self.error("TYPE/003", op.loc_of("ordering"), what=f"ordering({ordering})",
                           why="expected acquire, release or acq_rel")

    def rule_collective_reduce(self, op: Operation) -> None:
        if self.operands(op, 1):
            t = op.results[0].type
            if self.want(op, f"type of {op.name}", t, is_int(t) or is_float(t), "an integer or float type"):
                self._combining_kind(op, t)

    def rule_no_operands(self, op: Operation) -> None:
        self.operands(op, 0)

    # ------------------------------------------------------------ rules: functions and templates

    def _function_signature(self, op: Operation) -> None:
        sig: Signature = op.attrs["sig"]
        host_like = op.attrs.get("convention") != "device"
        for a in sig.args:
            t = a.type
            if t is ERROR:
                continue
            if host_like and (t is BUFFER or is_view(t) or is_vector(t)):  # tensors: check_type
                self.type_error(a.loc, f"argument `%{a.name}` of @{op.attrs['sym']}",
                                "index, offset, integer or float", t)
        for t in sig.results:
            if isinstance(t, ShapedType) and not t.is_static:
                self.error("TYPE/003", op.loc_of("results"), what=f"result type {t}",
                           why="signature results are static")
            elif host_like and (t is BUFFER or is_view(t) or is_vector(t)):
                self.type_error(op.loc_of("results"), f"result of @{op.attrs['sym']}", "a host type", t)
        self._where(op, "sig")
        if "target" in op.attrs:
            self.lookup(op, "target", TARGET_RECORDS, "target")

    rule_func_def = _function_signature
    rule_func_decl = _function_signature
    rule_template_decl = _function_signature

    def rule_template_def(self, op: Operation) -> None:
        self._function_signature(op)
        family = self.lookup(op, "family", ("template.decl",), "template family")
        if family is not None and not _same_signature(family.attrs["sig"], op.attrs["sig"]):
            self.error("TYPE/006", op.loc_of("family"), use="template.def", s=family.attrs["sym"],
                       detail="argument or result types differ from the family's")
        for req in op.attrs.get("requires", []):
            if not (isinstance(req, HashAttr) and req.name == "target.subgroup.size" and len(req.params) == 1
                    and isinstance(req.params[0], int) and not isinstance(req.params[0], bool)):
                self.error("TYPE/003", op.loc_of("requires"), what="requirement",
                           why="requires takes only #target.subgroup.size<N>")

    def _callable(self, op: Operation, target: Operation, use: str) -> None:
        sig: Signature = target.attrs["sig"]
        self._call_signature(op, use, target.attrs["sym"], sig.args, 0)
        got = [r.type for r in op.results]
        if got != sig.results and not any(t is ERROR for t in got):
            self.error("TYPE/006", self._callee_loc(op), use=use,
                       s=target.attrs["sym"], detail=f"results ({', '.join(map(_kind_text, got))}) differ from "
                                                     f"({', '.join(map(_kind_text, sig.results))})")

    @staticmethod
    def _eligible(ctx: str | None, callee: Operation) -> bool:
        """May a site in context `ctx` call (or select) `callee` (sections 3 and 17.17)?"""
        conv = callee.attrs.get("convention")
        if ctx in (K_BODY, F_DEV):
            return conv != "host"
        if ctx in (K_CFG, PROGRAM, CASE, F_HOST):
            return conv != "device"
        return conv is None

    def _check_call_site(self, op: Operation, callee: Operation) -> None:
        ctx = self._context_of(op)
        if not self._eligible(ctx, callee):
            conv = callee.attrs.get("convention") or "unannotated"
            self.error("STRUCTURE/003", op.loc_of("callee"), op=f"call of {conv} `@{callee.attrs['sym']}`",
                       context=f"a {ctx}")

    def rule_call(self, op: Operation) -> None:
        target = self.lookup(op, "callee", ("func.def", "func.decl"), "function")
        ctx = self._context_of(op)
        if ctx in (K_CFG, PROGRAM) and not op.attrs.get("pure"):
            self.error("STRUCTURE/003", op.loc, op="func.call without `pure`", context=f"a {ctx}")
        if target is None:
            return
        self._callable(op, target, "func.call")
        if op.attrs.get("pure") and not target.attrs.get("pure"):
            self.error("TYPE/006", op.loc_of("callee"), use="func.call pure", s=target.attrs["sym"],
                       detail="the callee is not pure")
        self._check_call_site(op, target)

    def rule_return(self, op: Operation) -> None:
        fn = op.parent_op
        if fn is None or fn.name not in ("func.def", "template.def"):
            return
        want = fn.attrs["sig"].results
        got = [v.type for v in op.operands]
        if self.count(op, len(want), "operands", len(got)):
            for i, (g, w) in enumerate(zip(got, want)):
                if g is not ERROR and not _types_match(g, w):
                    self.type_error(op.operand_loc(i), f"operand {i} of {op.name}", _kind_text(w), g)

    def rule_apply(self, op: Operation) -> None:
        family = self.lookup(op, "family", ("template.decl",), "template family")
        if family is None:
            return
        # An ineligible provider is refuted at this site, not an error (section 17.17).
        self._callable(op, family, "template.apply")

    def rule_template_call(self, op: Operation) -> None:
        target = self.lookup(op, "callee", ("template.def",), "template provider")
        if target is not None:
            self._callable(op, target, "template.call")
            self._check_call_site(op, target)

    def providers(self, family: str) -> list[Operation]:
        return [p for p in self.module.ops if p.name == "template.def" and p.attrs.get("family") == family]

    # ------------------------------------------------------------ rules: config, targets, module

    def rule_config_decl(self, op: Operation) -> None:
        t = op.attrs.get("type")
        if self.want(op, f"type of @{op.attrs.get('sym')}", t, self._scalar_arg(t), "index, offset, integer or float",
                     op.loc_of("type")):
            sig = op.attrs.get("sig")
            if sig is not None and sig.where:
                self.check_preds(sig.where, set(sig.args))

    def rule_config_def(self, op: Operation) -> None:
        t = op.attrs.get("type")
        if self.want(op, f"type of @{op.attrs.get('sym')}", t, self._scalar_arg(t), "index, offset, integer or float",
                     op.loc_of("type")):
            self.literal(op, "value", t)

    def rule_config_get(self, op: Operation) -> None:
        target = self.lookup(op, "ref", ("config.decl", "config.def"), "config key")
        if target is not None:
            want = target.attrs["type"]
            self.result(op, lambda t: t is want, _kind_text(want))

    def rule_target_record(self, op: Operation) -> None:
        pass  # record keys are TARGET/* facts, checked when a profile is chosen

    def rule_subgroup_size(self, op: Operation) -> None:
        self.result(op, lambda t: t is INDEX, "index")

    def rule_module_import(self, op: Operation) -> None:
        for i, name in enumerate(op.attrs.get("symbols", ())):
            target = self.symbols.get(name)
            if target is None:
                self.error("SYMBOL/002", op.loc_of(f"symbols{i}"), s=name)
            elif not target.name.endswith(".decl"):
                self.error("SYMBOL/003", op.loc_of(f"symbols{i}"), s=name,
                           kind=target.opdef.symbol_kind or target.name, kind2="declaration")

    # ------------------------------------------------------------ rules: commands and checks

    def _program_signature(self, op: Operation) -> None:
        self._arg_types(op.attrs["sig"], "specialization argument", self._scalar_arg,
                        "index, offset, integer or float")
        self._arg_types(op.attrs["launch"], "launch argument", lambda t: t is BUFFER, "buffer")
        self._where(op, "launch")
        if "target" in op.attrs:
            self.lookup(op, "target", TARGET_RECORDS, "target")

    rule_program_def = _program_signature
    rule_program_decl = _program_signature

    def rule_program_launch(self, op: Operation) -> None:
        target = self.lookup(op, "callee", ("command.program.def", "command.program.decl"), "command program")
        if target is not None:
            sig, launch = target.attrs["sig"], target.attrs["launch"]
            self._call_signature(op, "command.program.launch", target.attrs["sym"], sig.args + launch.args,
                                 len(sig.args))

    def rule_check_literal(self, op: Operation) -> None:
        t = op.results[0].type
        if self.want(op, "type of check.literal", t, self._scalar_arg(t), "index, offset, integer or float"):
            self.literal(op, "value", t)

    def rule_check_param(self, op: Operation) -> None:
        t = op.results[0].type
        if not self.want(op, "type of check.param.choice", t, self._scalar_arg(t), "index, offset, integer or float"):
            return
        values = op.attrs.get("values", [])
        if not values:
            self.count(op, 1, "values", 0, op.loc_of("values"))
        for v in values:
            if not literal_fits(v, t):
                self.error("TYPE/005", op.loc_of("values"), literal=literal_text(v), type=_kind_text(t))
        case = op.parent
        name = op.attrs.get("name")
        if case is not None:
            for other in case.ops:
                if other is op:
                    break
                if other.name == "check.param.choice" and other.attrs.get("name") == name:
                    self.error("SYMBOL/001", op.loc_of("name"), name=name)

    def rule_check_fill(self, op: Operation) -> None:
        if self.result(op, is_tensor, "a tensor type"):
            self.literal(op, "value", op.results[0].type)

    def rule_check_iota(self, op: Operation) -> None:
        if self.result(op, is_tensor, "a tensor type"):
            t = op.results[0].type
            elem = t.elem  # type: ignore[union-attr]
            for attr in ("offset", "step"):
                v = op.attrs.get(attr)
                kind_ok = isinstance(v, float) if is_float(elem) else (isinstance(v, int) and not isinstance(v, bool))
                if not kind_ok:
                    self.error("TYPE/005", op.loc_of(attr), literal=literal_text(v), type=_kind_text(elem))

    def rule_check_expect(self, op: Operation) -> None:
        if not self.operands(op, 2):
            return
        t = op.operands[0].type
        if op.name == "check.expect.close":
            elem = t.elem if isinstance(t, ShapedType) else t
            self.want(op, "type of check.expect.close", t, is_float(elem), "float elements")
            for attr in ("atol", "rtol"):
                v = op.attrs.get(attr)
                if not isinstance(v, float) or v < 0 or math.isnan(v):
                    self.error("TYPE/005", op.loc_of(attr), literal=literal_text(v), type="tolerance")
            nan = op.attrs.get("nan")
            if nan is not None and nan != "same":
                self.error("TYPE/003", op.loc_of("nan"), what=f"nan({nan})", why="the only mode is nan(same)")
        else:
            self.want(op, "type of check.expect.equal", t, is_tensor(t) or self._scalar_arg(t),
                      "a tensor or scalar type")

    def rule_benchmark(self, op: Operation) -> None:
        case = self.lookup(op, "case", ("check.case",), "check case")
        if case is None:
            return
        params = {p.attrs.get("name") for p in case.regions[0].ops if p.name == "check.param.choice"}
        for key in op.attrs.get("dict", {}):
            if key not in params:
                self.error("TYPE/003", op.loc_of("dict"), what=f"parameter `{key}`",
                           why=f"@{case.attrs['sym']} has no such parameter")

    # ------------------------------------------------------------ kernel bodies: convergence

    def check_kernel_body(self, kernel: Operation) -> None:
        body = kernel.regions[1]
        uniform: set[Value] = set(body.args)
        self._uniform_region(body, uniform, [])

    def _uniform_region(self, region: Region, uniform: set[Value], controls: list[tuple[str, Value | None]]) -> None:
        for op in region.ops:
            if op.opdef.has(CONVERGENT):
                self._check_convergent(op, controls)
            name = op.name
            if name == "scf.if":
                cond = op.operands[0] if op.operands else None
                cu = cond is not None and cond in uniform
                for r in op.regions:
                    self._uniform_region(r, uniform, controls + [("if", None if cu else cond)])
                if cu:
                    yields_uniform = all(
                        all(v in uniform for v in r.ops[-1].operands) for r in op.regions if r.ops)
                    if yields_uniform:
                        uniform.update(op.results)
            elif name == "scf.for":
                bad = next((v for v in op.operands[:3] if v not in uniform), None)
                if bad is None and op.regions[0].args:
                    uniform.add(op.regions[0].args[0])
                self._uniform_region(op.regions[0], uniform, controls + [("for", bad)])
            elif name == "scf.while":
                for r in op.regions:
                    self._uniform_region(r, uniform, controls + [("while", None)])
            else:
                for r in op.regions:
                    self._uniform_region(r, uniform, controls)
                if self._is_uniform_op(op, uniform):
                    uniform.update(op.results)

    @staticmethod
    def _is_uniform_op(op: Operation, uniform: set[Value]) -> bool:
        name = op.name
        if name in ("index.constant", "scalar.constant", "vector.constant", "config.get", "target.subgroup.size",
                    "kernel.workgroup.id", "kernel.workgroup.size", "kernel.workgroup.count",
                    "kernel.subgroup.size", "kernel.workgroup.reduce"):
            return True
        if name.startswith(("index.", "scalar.")) or name == "scf.select":
            return all(v in uniform for v in op.operands)
        return False

    def _check_convergent(self, op: Operation, controls: list[tuple[str, Value | None]]) -> None:
        for kind, _bad in controls:
            if kind == "while":
                self.diags.append(Diagnostic("STRUCTURE/005", f"convergent {op.name} inside scf.while",
                                             self.path, *op.loc))
                return
        for _kind, bad in controls:
            if bad is not None:
                self.error("STRUCTURE/005", op.loc, op=op.name, v=bad.name)
                return

    # ------------------------------------------------------------ pure functions and recursion

    def check_pure(self, fn: Operation) -> None:
        sym = fn.attrs.get("sym")
        for op in fn.regions[0].ops:
            for inner in op.walk():
                bad = None
                if inner.opdef.has(MEMORY) or inner.opdef.has(CONVERGENT) or inner.opdef.has(LAUNCH):
                    bad = inner.name
                elif inner.name == "func.call":
                    callee = self.symbols.get(inner.attrs.get("callee", ""))
                    if callee is not None and callee.name in ("func.def", "func.decl") and not callee.attrs.get("pure"):
                        bad = f"impure call of `@{callee.attrs['sym']}`"
                elif inner.name == "template.call":
                    callee = self.symbols.get(inner.attrs.get("callee", ""))
                    if callee is not None and callee.name == "template.def" and not callee.attrs.get("pure"):
                        bad = f"impure call of `@{callee.attrs['sym']}`"
                elif inner.name == "template.apply":
                    ctx = self._context_of(inner)
                    for provider in self.providers(inner.attrs.get("family", "")):
                        if self._eligible(ctx, provider) and not provider.attrs.get("pure"):
                            bad = f"template.apply selecting impure `@{provider.attrs['sym']}`"
                            break
                if bad is not None:
                    self.error("STRUCTURE/009", inner.loc, s=sym, op=bad)

    def check_recursion(self) -> None:
        edges: dict[str, list[tuple[str, Operation]]] = {}
        for fn in self.module.ops:
            if fn.name not in ("func.def", "template.def"):
                continue
            out: list[tuple[str, Operation]] = []
            for op in fn.walk():
                if op.name in ("func.call", "template.call"):
                    out.append((op.attrs.get("callee", ""), op))
                elif op.name == "template.apply":
                    for p in self.providers(op.attrs.get("family", "")):
                        out.append((p.attrs["sym"], op))
            edges[fn.attrs["sym"]] = out
        state: dict[str, int] = {}
        reported: set[int] = set()

        def dfs(start: str) -> None:
            # Iterative DFS so deep call chains cannot exhaust Python's stack.
            path: list[str] = [start]
            stack = [iter(edges.get(start, []))]
            state[start] = 1
            while stack:
                step = next(stack[-1], None)
                if step is None:
                    state[path.pop()] = 2
                    stack.pop()
                    continue
                callee, site = step
                if callee not in edges:
                    continue
                if state.get(callee) == 1:
                    if id(site) not in reported:
                        reported.add(id(site))
                        cycle = path[path.index(callee):] + [callee]
                        self.error("STRUCTURE/010", site.loc, cycle=" -> ".join("@" + s for s in cycle))
                elif callee not in state:
                    state[callee] = 1
                    path.append(callee)
                    stack.append(iter(edges.get(callee, [])))

        for name in edges:
            if name not in state:
                dfs(name)


def _types_match(a: Type, b: Type) -> bool:
    """Equal types, where dynamic dims of a signature only need a dynamic dim."""
    if a == b:
        return True
    if isinstance(a, ShapedType) and isinstance(b, ShapedType):
        return a.name == b.name and a.elem is b.elem and len(a.dims) == len(b.dims) and all(
            (isinstance(x, int) and isinstance(y, int) and x == y)
            or (not isinstance(x, int) and not isinstance(y, int))
            for x, y in zip(a.dims, b.dims))
    return False


def _same_signature(a: Signature, b: Signature) -> bool:
    if len(a.args) != len(b.args) or len(a.results) != len(b.results):
        return False
    pos_a = {id(v): i for i, v in enumerate(a.args)}
    pos_b = {id(v): i for i, v in enumerate(b.args)}

    def same(x: Type, y: Type) -> bool:
        if isinstance(x, ShapedType) and isinstance(y, ShapedType):
            if x.name != y.name or x.elem is not y.elem or len(x.dims) != len(y.dims):
                return False
            for dx, dy in zip(x.dims, y.dims):
                if isinstance(dx, int) or isinstance(dy, int):
                    if dx != dy:
                        return False
                elif pos_a.get(id(dx)) != pos_b.get(id(dy)):
                    return False
            return True
        return x is y

    return all(same(x.type, y.type) for x, y in zip(a.args, b.args)) and all(
        same(x, y) for x, y in zip(a.results, b.results))


def verify(module: Module, parse_findings: list[Diagnostic] | None = None) -> list[Diagnostic]:
    """All verification errors of `module`, sorted by (line, column, code)."""
    diags = Verifier(module).run()
    if parse_findings:
        diags = sorted(diags + parse_findings, key=lambda d: d.sort_key)
    return diags

