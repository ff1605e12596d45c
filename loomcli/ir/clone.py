"""Deep copies of operations with value remapping.

Prepared objects (parsed libraries, the link index) are shared and never
mutated; stages that rewrite IR work on clones made here.
"""

from __future__ import annotations

from typing import Any

from loomcli.ir.attrs import Pred
from loomcli.ir.core import BlockArgument, LocalName, Operation, Region, Signature, Value
from loomcli.ir.types import ShapedType, Type


def map_type(t: Type, mapping: dict[Value, Value]) -> Type:
    if isinstance(t, ShapedType) and not t.is_static:
        return t.replace_dims(tuple(d if isinstance(d, int) else mapping.get(d, d) for d in t.dims))
    return t


def _clone_attr(v: Any, mapping: dict[Value, Value]) -> Any:
    if isinstance(v, Signature):
        args = [_clone_local(a, mapping) for a in v.args]
        where = None if v.where is None else [_clone_attr(p, mapping) for p in v.where]
        return Signature(args, [map_type(t, mapping) for t in v.results], where)
    if isinstance(v, Pred):
        return Pred(v.name, [mapping.get(a, a) if isinstance(a, Value) else a for a in v.args], v.loc)
    if isinstance(v, Value):
        return mapping.get(v, v)
    if isinstance(v, list):
        return [_clone_attr(x, mapping) for x in v]
    if isinstance(v, tuple):
        return tuple(_clone_attr(x, mapping) for x in v)
    if isinstance(v, dict):
        return {k: _clone_attr(x, mapping) for k, x in v.items()}
    if isinstance(v, Type):
        return map_type(v, mapping)
    return v  # immutable scalars, Ident, HashAttr, SymbolRef


def _clone_local(a: Value, mapping: dict[Value, Value]) -> Value:
    """A signature argument: region arguments are already mapped; local names are copied."""
    if a in mapping:
        return mapping[a]
    new = LocalName(a.name, map_type(a.type, mapping), a.loc)
    mapping[a] = new
    return new


def clone_op(op: Operation, mapping: dict[Value, Value] | None = None) -> Operation:
    """A deep copy of `op`. Operands outside `op` stay as they are unless
    `mapping` maps them; `mapping` receives old -> new for every value defined."""
    if mapping is None:
        mapping = {}
    new = Operation(op.opdef, loc=op.loc)
    new.comments = list(op.comments)
    new.operand_locs = list(op.operand_locs) if op.operand_locs else None
    new.attr_locs = dict(op.attr_locs) if op.attr_locs else None
    for v in op.operands:
        new.add_operand(mapping.get(v, v))
    # Region arguments first: signatures of definitions refer to them.
    for region in op.regions:
        r = new.add_region()
        r.end_loc = region.end_loc
        for a in region.args:
            b = BlockArgument(a.name, map_type(a.type, mapping), r, len(r.args), a.loc)
            r.args.append(b)
            mapping[a] = b
    new.attrs = {k: _clone_attr(v, mapping) for k, v in op.attrs.items()}
    for region, r in zip(op.regions, new.regions):
        clone_region_into(region, r, mapping)
    for res in op.results:
        mapping[res] = new.add_result(map_type(res.type, mapping), res.name, res.loc)
    return new


def clone_region_into(src: Region, dst: Region, mapping: dict[Value, Value]) -> None:
    for inner in src.ops:
        dst.append(clone_op(inner, mapping))
