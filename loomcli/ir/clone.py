"""Deep copies of operations with value remapping: the one cloning routine.

Prepared objects (parsed libraries, the link index) are shared and never
mutated; stages that rewrite IR work on clones made here. Inlining and
unrolling clone bodies with fresh names through a `namer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from loomcli.ir.attrs import Pred
from loomcli.ir.core import BlockArgument, LocalName, Module, Operation, Region, Signature, Value
from loomcli.ir.types import ShapedType, Type


class Renamer(Protocol):
    def fresh(self, name: str) -> str: ...


def remap_type(t: Type, mapping: Mapping[Value, Value]) -> Type:
    """`t` with its dynamic dims mapped (the same object when nothing changes)."""
    if isinstance(t, ShapedType) and not t.is_static:
        dims = tuple(d if isinstance(d, int) else mapping.get(d, d) for d in t.dims)
        if any(a is not b for a, b in zip(dims, t.dims, strict=True)):
            return t.replace_dims(dims)
    return t


_SCALARS = frozenset((str, int, bool, float, type(None)))


def remap_attr(v: Any, mapping: dict[Value, Value]) -> Any:
    """An attribute value with the SSA values it names mapped; signatures get
    fresh local names (their region arguments are mapped already), which
    `mapping` records."""
    if type(v) in _SCALARS:  # most attributes: answered before the isinstance chain
        return v
    if isinstance(v, Signature):
        args = [_clone_local(a, mapping) for a in v.args]
        where = None if v.where is None else [remap_attr(p, mapping) for p in v.where]
        return Signature(args, [remap_type(t, mapping) for t in v.results], where)
    if isinstance(v, Pred):
        return Pred(v.name, [mapping.get(a, a) if isinstance(a, Value) else a for a in v.args], v.loc)
    if isinstance(v, Value):
        return mapping.get(v, v)
    if isinstance(v, list):
        return [remap_attr(x, mapping) for x in v]
    if isinstance(v, tuple):
        return tuple(remap_attr(x, mapping) for x in v)
    if isinstance(v, dict):
        return {k: remap_attr(x, mapping) for k, x in v.items()}
    if isinstance(v, Type):
        return remap_type(v, mapping)
    return v  # immutable scalars, Ident, HashAttr, SymbolRef


def _clone_local(a: Value, mapping: dict[Value, Value]) -> Value:
    """A signature argument: region arguments are already mapped; local names are copied."""
    if a in mapping:
        return mapping[a]
    new = LocalName(a.name, remap_type(a.type, mapping), a.loc)
    mapping[a] = new
    return new


def clone_op(op: Operation, mapping: dict[Value, Value] | None = None, namer: Renamer | None = None,
             comments: bool = True) -> Operation:
    """A detached deep copy of `op`. Operands, types and predicates go through
    `mapping` (values it lacks are kept as they are), which receives old -> new
    for every value the copy defines. `namer` gives the copies fresh names;
    `comments=False` leaves comments behind."""
    if mapping is None:
        mapping = {}
    new = Operation(op.opdef, loc=op.loc)
    if comments:
        new.comments = list(op.comments)
    new.operand_locs = list(op.operand_locs) if op.operand_locs is not None else None
    new.attr_locs = dict(op.attr_locs) if op.attr_locs is not None else None
    for v in op.operands:
        new.add_operand(mapping.get(v, v))
    if op.written_types is not None:
        new.written_types = [None if t is None else remap_type(t, mapping) for t in op.written_types]
    # Region arguments first: the signatures of definitions refer to them.
    for region in op.regions:
        r = new.add_region()
        r.end_loc = region.end_loc
        clone_args(region, r, mapping, namer)
    new._attrs = {k: remap_attr(v, mapping) for k, v in op._attrs.items()}
    new.invalid = op.invalid
    for region, r in zip(op.regions, new.regions, strict=True):
        for inner in region.ops:
            r.append(clone_op(inner, mapping, namer, comments))
    for res in op.results:
        mapping[res] = new.add_result(remap_type(res.type, mapping), namer.fresh(res.name) if namer else res.name,
                                      res.loc)
    return new


def clone_module(module: Module) -> Module:
    """A deep copy of `module`, for a stage that rewrites it while the original stays in use."""
    copy = Module(module.path)
    for op in module.ops:
        copy.body.append(clone_op(op))
    return copy


def clone_args(src: Region, dst: Region, mapping: dict[Value, Value], namer: Renamer | None = None) -> None:
    for a in src.args:
        b = BlockArgument(namer.fresh(a.name) if namer else a.name, remap_type(a.type, mapping), dst,
                          len(dst.args), a.loc)
        dst.args.append(b)
        mapping[a] = b
