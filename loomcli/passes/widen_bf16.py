"""`widen-bf16`: bf16 arithmetic computed in f32 and rounded once, in Loom IR.

bf16 is carried as 16 bits and computed in f32 (LANGUAGE.md 17.29). Every
op whose bf16 result may be inexact becomes the same op on f32 between an
`extf` of each operand and one `fptrunc` of the result:

    %r = scalar.addf %a, %b : bf16
    ->
    %wide = scalar.extf %a : bf16 to f32
    %wide_1 = scalar.extf %b : bf16 to f32
    %r = scalar.addf %wide, %wide_1 : f32
    %r_1 = scalar.fptrunc %r : f32 to bf16

so the instruction selectors, which hold a bf16 value in an f32 register,
never round bf16 arithmetic themselves: the one rounding is the conversion
`fptrunc` to bf16. Ops exact on bf16 (negation, absolute value, floor,
ceil, minimum and maximum, comparisons, selects, bit casts, memory) stay
as they are. Lanewise vector arithmetic and vector reductions on bf16
become their lanes' scalar ops (there is no vector `extf`); subgroup and
workgroup reductions that add or multiply reduce in f32 and round once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loomcli.ir.core import Module, Operation, Value
from loomcli.ir.ops import OpTable
from loomcli.ir.types import BF16, F32, I1, ShapedType, Type
from loomcli.passes.registry import ModulePass, PassContext
from loomcli.passes.rewrite import Rewriter

ROUNDED_KINDS = ("addf", "mulf")  # the combining kinds that round


def _is_bf16(t: Type) -> bool:
    return t is BF16 or (isinstance(t, ShapedType) and t.name == "vector" and t.elem is BF16)


def _attrs(op: Operation) -> dict[str, Any]:
    """The attributes `op` has set, by the names its row declares."""
    missing = object()
    values = {name: op.attr(name, missing) for name in op.opdef.attributes}
    return {name: v for name, v in values.items() if v is not missing}


class _Widening:
    """Builds the f32 form of one op in front of it."""

    def __init__(self, rw: Rewriter, anchor: Operation) -> None:
        self.rw, self.anchor = rw, anchor
        self.namer = rw.namer(anchor)

    def value(self, name: str, operands: list[Value], t: Type, attrs: dict[str, Any] | None = None,
              result_name: str | None = None) -> Value:
        names = (result_name if result_name is not None else self.namer.fresh("wide"),)
        return self.rw.create_before(self.anchor, name, operands, (t,), attrs, names).result()

    def widened(self, name: str, operands: list[Value], attrs: dict[str, Any], result_name: str,
                rounded_name: str | None = None) -> Value:
        """`name` on the operands in f32 (bf16 ones extended), rounded to bf16.
        The f32 value takes `result_name` (back ends name registers after it),
        the rounded one `rounded_name` or a fresh name."""
        wide = [self.value("scalar.extf", [v], F32) if v.type is BF16 else v for v in operands]
        inner = self.value(name, wide, F32, attrs, result_name)
        rounded = rounded_name if rounded_name is not None else self.namer.fresh(result_name)
        return self.value("scalar.fptrunc", [inner], BF16, result_name=rounded)

    def lane(self, vector: Value, k: int) -> Value:
        return self.value("vector.extract", [vector], BF16, {"indices": (k,)}, self.namer.fresh("lane"))


def _widen_scalar(w: _Widening, op: Operation) -> Value:
    return w.widened(op.opdef.name, list(op.operands), _attrs(op), op.results[0].name)


def _widen_lanewise(w: _Widening, op: Operation) -> Value:
    t = op.results[0].type
    assert isinstance(t, ShapedType)
    flags = {"flags": op.attr("flags", ())}
    scalar = "scalar." + op.opdef.name.partition(".")[2]
    lanes = [w.widened(scalar, [w.lane(v, k) for v in op.operands], flags, w.namer.fresh("lane"))
             for k in range(_lanes(t))]
    name = op.results[0].name  # the last op takes it: the one replacing the result
    vector = w.value("vector.splat", [lanes[0]], t, result_name=name if len(lanes) == 1 else None)
    for k, lane in enumerate(lanes[1:], start=1):
        vector = w.value("vector.insert", [lane, vector], t, {"indices": (k,)},
                         result_name=name if k == len(lanes) - 1 else None)
    return vector


def _widen_reduce(w: _Widening, op: Operation) -> Value:
    """A vector reduction folded lane by lane, in order (addf and mulf may associate)."""
    vector, acc = op.operand("vector"), op.operand("init")
    scalar = f"scalar.{op.attr('kind')}"
    t = vector.type
    assert isinstance(t, ShapedType)
    name = op.results[0].name
    n = _lanes(t)
    for k in range(n):
        acc = w.widened(scalar, [acc, w.lane(vector, k)], {}, w.namer.fresh(name), name if k == n - 1 else None)
    return acc


def _widen_collective(w: _Widening, op: Operation) -> Value:
    return w.widened(op.opdef.name, [op.operand("value")], {"kind": op.attr("kind")}, op.results[0].name)


@dataclass(frozen=True)
class Rule:
    """When an op is widened (its result is bf16, and then), and how."""

    when: Callable[[Operation], bool]
    widen: Callable[[_Widening, Operation], Value]


def _always(op: Operation) -> bool:
    return True


def _not_from_i1(op: Operation) -> bool:
    return op.operand("value").type is not I1  # 0 and ±1 are exact


def _rounding_kind(op: Operation) -> bool:
    return op.attr("kind") in ROUNDED_KINDS


RULES: OpTable[Rule] = OpTable("passes.widen_bf16.RULES")
RULES.register("scalar.addf", "scalar.subf", "scalar.mulf", "scalar.divf", "scalar.powf", "scalar.fmaf",
               "scalar.sqrtf", "scalar.rsqrtf", "scalar.expf", "scalar.exp2f", "scalar.logf", "scalar.log2f",
               "scalar.tanhf", "scalar.sinf", "scalar.cosf")(Rule(_always, _widen_scalar))
RULES.register("scalar.sitofp", "scalar.uitofp")(Rule(_not_from_i1, _widen_scalar))
RULES.register("vector.addf", "vector.mulf", "vector.fmaf")(Rule(_always, _widen_lanewise))
RULES.register("vector.reduce")(Rule(_rounding_kind, _widen_reduce))
RULES.register("kernel.subgroup.reduce", "kernel.workgroup.reduce")(Rule(_rounding_kind, _widen_collective))


def widens(op: Operation) -> bool:
    """Whether `op` computes a bf16 result this pass widens."""
    rule = RULES.get(op.opdef.name)
    return rule is not None and bool(op.results) and _is_bf16(op.results[0].type) and rule.when(op)


def widen_bf16(module: Module) -> int:
    """Widen every bf16 op of `module` that rounds; returns how many."""
    todo = [op for top in module.ops for op in top.walk() if widens(op)]
    rw = Rewriter(module)
    for op in todo:
        rw.replace_op(op, [RULES[op.opdef.name].widen(_Widening(rw, op), op)])
    return len(todo)


@dataclass(frozen=True)
class WidenBF16(ModulePass):
    name = "widen-bf16"
    summary = "compute bf16 arithmetic in f32 between extf and one fptrunc, so selectors never round bf16"

    def applies(self, module: Module, ctx: PassContext) -> bool:
        return any(widens(op) for top in module.ops for op in top.walk())

    def run(self, module: Module, ctx: PassContext) -> None:
        widen_bf16(module)


__all__ = ["WidenBF16", "widen_bf16", "widens"]


def _lanes(t: ShapedType) -> int:
    """A vector's lane count (vector shapes are static)."""
    n = t.dims[0]
    assert isinstance(n, int)
    return n
