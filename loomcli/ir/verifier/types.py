"""Typing rules (TYPE/*): written operand types, shapes and literals, and the
`rule_<name>` of every op whose typing is local to it (index, scalar,
buffer and view, vector, coordinates and collectives, check cases).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from loomcli.ir.attrs import literal_text
from loomcli.ir.core import Loc, Operation, Signature, Value
from loomcli.ir.ops import (
    CASE,
    CHECK_EXPECT_CLOSE,
    CHECK_PARAM_CHOICE,
    INDEX_CONSTANT,
    VECTOR_FMAF,
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
    is_tensor,
    is_vector,
    is_view,
)
from loomcli.ir.verifier.base import VerifierBase, kind_text, literal_fits

MAX_VECTOR_LANES = 64


_INT_KINDS = {"addi", "muli", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui", "xchgi", "subi"}


_FLOAT_KINDS = {"addf", "mulf", "minimumf", "maximumf", "minnumf", "maxnumf", "xchgf"}






class TypeRules(VerifierBase):
    """Types of values, literals and the ops typed by their own operands."""

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
                    self.type_error(op.operand_loc(i), f"operand {i} of {op.name}", kind_text(w), v.type)
                    ok = False
        return ok

    @staticmethod
    def _types_of(op: Operation) -> Iterable[tuple[Type, Loc]]:
        """The types an op introduces, each with the place to blame for it."""
        for r in op.results:
            yield r.type, op.loc
        for attr in ("sig", "launch"):
            sig = op._attrs.get(attr)
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
                self.type_error(loc, f"dim of {kind_text(t)}", "index", d.type)
        if t.name == "vector":
            if len(t.dims) != 1 or not isinstance(t.dims[0], int) or t.dims[0] < 1:
                self.error("TYPE/003", loc, what=f"type {t}", why="a vector has one static dim >= 1")
            elif t.dims[0] > MAX_VECTOR_LANES:  # section 17.35
                self.error("TYPE/003", loc, what="vector type", why=f"{t.dims[0]} lanes, at most {MAX_VECTOR_LANES}")
        elif t.name == "tensor" and context != CASE:
            self.error("TYPE/003", loc, what=f"type {t}", why="tensors exist only in check cases")

    def rule_constant(self, op: Operation) -> None:
        self.operands(op, 0)
        t = op.result().type
        if op.opdef is INDEX_CONSTANT:
            ok = self.want(op, "result of index.constant", t, is_index_like(t), "index or offset")
        else:
            ok = self.want(op, "result of scalar.constant", t, is_int(t) or is_float(t), "an integer or float type")
        if ok:
            self.literal(op, "value", t)

    def rule_index_cast(self, op: Operation) -> None:
        if not self.operands(op, 1):
            return
        src, dst = op.operand("value").type, op.result().type
        ok = (is_int(src) and is_index_like(dst)) or (is_index_like(src) and is_int(dst)) \
            or (src is INDEX and dst is OFFSET) or (src is OFFSET and dst is INDEX)
        if not ok:
            self.error("TYPE/003", op.loc, what="index.cast", why=f"cannot cast {kind_text(src)} to {kind_text(dst)}")

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
        self.check_preds(op._attrs.get("preds", []), set(op.operands))

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
        src, dst = op.operand("value").type, op.result().type
        if not (isinstance(src, ScalarType) and isinstance(dst, ScalarType) and ok(src, dst)):
            self.error("TYPE/003", op.loc, what=op.name, why=f"{kind_text(src)} to {kind_text(dst)}: {why}")

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

    def rule_select(self, op: Operation) -> None:
        if not self.operands(op, 3):
            return
        c = op.operand("condition")
        self.want(op, "operand 0 of scf.select", c.type, c.type is I1, "i1", op.operand_loc(0))
        t = op.result().type
        self.want(op, "type of scf.select", t, not is_tensor(t), "a non-tensor type")

    def rule_buffer_view(self, op: Operation) -> None:
        if not op.operands:
            return
        b = op.operand_group("buffer")[0]
        self.want(op, "operand 0 of buffer.view", b.type, b.type is BUFFER, "buffer", op.operand_loc(0))
        if len(op.operands) != 2 or op.attr("indices", None) != (None,):
            self.count(op, 1, "offsets", len(op.attr("indices", ())))
            return
        off = op.operand("offset")
        self.want(op, "operand 1 of buffer.view", off.type, off.type is OFFSET, "offset", op.operand_loc(1))
        self.result(op, is_view, "a view type")

    def rule_buffer_pack(self, op: Operation) -> None:
        if not op.operands:
            self.count(op, 1, "operands", 0)
            return
        t = op.result("total").type
        self.want(op, "type of buffer.pack", t, t is OFFSET, "offset")
        for k, a in enumerate(op.attr("aligns", ())):
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
        a = op.attr("dict", {}).get("minimum_alignment", 1)
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
        return t if isinstance(t, ShapedType) else None

    def rule_view_load(self, op: Operation) -> None:
        v = self._view_operand(op, 0)
        if v is None or not self.check_indices(op, v, 0):
            return
        self.result(op, lambda t: t is v.elem, v.elem.name)

    def rule_view_store(self, op: Operation) -> None:
        v = self._view_operand(op, 1)
        if v is None or not self.check_indices(op, v, 1):
            return
        x = op.operand("value")
        self.want(op, "operand 0 of view.store", x.type, x.type is v.elem, v.elem.name, op.operand_loc(0))

    def rule_view_subview(self, op: Operation) -> None:
        v = self._view_operand(op, 0)
        if v is None or not self.check_indices(op, v, 0):
            return
        r = op.result().type
        if not self.result(op, lambda t: is_view(t) and t.elem is v.elem and len(t.dims) == len(v.dims),
                           f"a view of rank {len(v.dims)} of {v.elem.name}") or not is_view(r):
            return
        template = op.attr("indices", ())
        for axis, (src, dst) in enumerate(zip(v.dims, r.dims)):
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
        x = op.operand("value")
        if not self.want(op, "operand 0 of view.atomic.rmw", x.type, x.type is v.elem, v.elem.name,
                         op.operand_loc(0)):
            return
        kind = op.attr("kind", None)
        elem = v.elem.name
        if (kind in _INT_KINDS and elem not in ("i32", "i64")) or (kind in _FLOAT_KINDS and elem not in ("f32", "f64")):
            self.error("TYPE/003", op.loc, what=f"view.atomic.rmw<{kind}>", why=f"not defined on {elem}")
        self.result(op, lambda t: t is v.elem, elem)

    def rule_vector_constant(self, op: Operation) -> None:
        if self.result(op, is_vector, "a vector type"):
            self.literal(op, "value", op.result().type)

    def rule_vector_splat(self, op: Operation) -> None:
        t = op.result().type if op.results else ERROR
        if not self.operands(op, 1) or not self.result(op, is_vector, "a vector type") or not is_vector(t):
            return
        elem = t.elem
        s = op.operand("value")
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
        x = op.operand("value")
        self.want(op, "operand 0 of vector.store", x.type, is_vector(x.type) and x.type.elem is v.elem,
                  f"a vector of {v.elem.name}", op.operand_loc(0))

    def rule_vector_extract(self, op: Operation) -> None:
        v = self._view_operand(op, 0, is_vector, "a vector type")
        if v is None or not self.count(op, 1, "indices", len(op.attr("indices", ()))):
            return
        k = op.attr("indices")[0]
        lanes = v.dims[0]
        if k is None:
            idx = op.operand_group("indices")[0]
            self.want(op, "operand 1 of vector.extract", idx.type, idx.type is INDEX, "index", op.operand_loc(1))
        elif isinstance(lanes, int) and not 0 <= k < lanes:
            self.error("TYPE/003", op.loc_of("index0"), what=f"lane {k}",
                       why=f"a vector<{lanes}> has lanes 0..{lanes - 1}")
        self.result(op, lambda t: t is v.elem, v.elem.name)

    def rule_vector_insert(self, op: Operation) -> None:
        v = self._view_operand(op, 1, is_vector, "a vector type")
        if v is None or not self.count(op, 1, "indices", len(op.attr("indices", ()))):
            return
        x = op.operand("value")
        self.want(op, "operand 0 of vector.insert", x.type, x.type is v.elem, v.elem.name, op.operand_loc(0))
        k = op.attr("indices")[0]
        lanes = v.dims[0]
        if k is None:
            idx = op.operand_group("indices")[0]
            self.want(op, "operand 2 of vector.insert", idx.type, idx.type is INDEX, "index", op.operand_loc(2))
        elif isinstance(lanes, int) and not 0 <= k < lanes:
            self.error("TYPE/003", op.loc_of("index0"), what=f"lane {k}",
                       why=f"a vector<{lanes}> has lanes 0..{lanes - 1}")

    def _combining_kind(self, op: Operation, elem: Type) -> None:
        kind = op._attrs.get("kind")
        if (kind in _INT_KINDS and not is_int(elem)) or (kind in _FLOAT_KINDS and not is_float(elem)):
            self.error("TYPE/003", op.loc, what=f"{op.name}<{kind}>", why=f"not defined on {kind_text(elem)}")

    def rule_vector_reduce(self, op: Operation) -> None:
        if not self.operands(op, 2):
            return
        v = self._view_operand(op, 0, is_vector, "a vector type")
        if v is None:
            return
        init = op.operand("init")
        if self.want(op, "operand 1 of vector.reduce", init.type, init.type is v.elem, v.elem.name, op.operand_loc(1)):
            self._combining_kind(op, v.elem)

    def rule_vector_arith(self, op: Operation) -> None:
        n = 3 if op.opdef is VECTOR_FMAF else 2
        if not self.operands(op, n):
            return
        t = op.result().type
        want_float = op.name.endswith("f")
        ok = is_vector(t) and (is_float(t.elem) if want_float else is_int(t.elem))
        self.want(op, f"type of {op.name}", t, ok, "a vector of floats" if want_float else "a vector of integers")

    def rule_coordinate(self, op: Operation) -> None:
        self.result(op, lambda t: t is INDEX, "index")

    def rule_collective_reduce(self, op: Operation) -> None:
        if self.operands(op, 1):
            t = op.results[0].type
            if self.want(op, f"type of {op.name}", t, is_int(t) or is_float(t), "an integer or float type"):
                self._combining_kind(op, t)

    def rule_check_literal(self, op: Operation) -> None:
        t = op.results[0].type
        if self.want(op, "type of check.literal", t, self._scalar_arg(t), "index, offset, integer or float"):
            self.literal(op, "value", t)

    def rule_check_param(self, op: Operation) -> None:
        t = op.results[0].type
        if not self.want(op, "type of check.param.choice", t, self._scalar_arg(t), "index, offset, integer or float"):
            return
        values = op._attrs.get("values", [])
        if not values:
            self.count(op, 1, "values", 0, op.loc_of("values"))
        for v in values:
            if not literal_fits(v, t):
                self.error("TYPE/005", op.loc_of("values"), literal=literal_text(v), type=kind_text(t))
        case = op.parent
        name = op._attrs.get("name")
        if case is not None:
            for other in case.ops:
                if other is op:
                    break
                if other.opdef is CHECK_PARAM_CHOICE and other._attrs.get("name") == name:
                    self.error("SYMBOL/001", op.loc_of("name"), name=name)

    def rule_check_fill(self, op: Operation) -> None:
        if self.result(op, is_tensor, "a tensor type"):
            self.literal(op, "value", op.result().type)

    def rule_check_file(self, op: Operation) -> None:
        if self.result(op, is_tensor, "a tensor type") and not op._attrs.get("path"):
            self.error("TYPE/003", op.loc_of("path"), what="check.generate.file", why="the path is empty")

    def rule_check_iota(self, op: Operation) -> None:
        t = op.result().type if op.results else ERROR
        if self.result(op, is_tensor, "a tensor type") and is_tensor(t):
            elem = t.elem
            for attr in ("offset", "step"):
                v = op._attrs.get(attr)
                kind_ok = isinstance(v, float) if is_float(elem) else (isinstance(v, int) and not isinstance(v, bool))
                if not kind_ok:
                    self.error("TYPE/005", op.loc_of(attr), literal=literal_text(v), type=kind_text(elem))

    def rule_check_expect(self, op: Operation) -> None:
        if not self.operands(op, 2):
            return
        t = op.operand("actual").type
        if op.opdef is CHECK_EXPECT_CLOSE:
            elem = t.elem if isinstance(t, ShapedType) else t
            self.want(op, "type of check.expect.close", t, is_float(elem), "float elements")
            for attr in ("atol", "rtol"):
                v = op._attrs.get(attr)
                if not isinstance(v, float) or v < 0 or math.isnan(v):
                    self.error("TYPE/005", op.loc_of(attr), literal=literal_text(v), type="tolerance")
            nan = op._attrs.get("nan")
            if nan is not None and nan != "same":
                self.error("TYPE/003", op.loc_of("nan"), what=f"nan({nan})", why="the only mode is nan(same)")
        else:
            self.want(op, "type of check.expect.equal", t, is_tensor(t) or self._scalar_arg(t),
                      "a tensor or scalar type")
