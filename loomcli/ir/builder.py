"""Making and copying IR: ops by name, clones with value remapping, SSA names.

Values print by name, so every value a transformation creates needs a name
that no visible value already has (LANGUAGE.md section 3, PARSE/002).
`Namer` hands out fresh names for one isolated region; `legalize_names`
renames, deterministically, any definition that would redefine a visible
name, so a transformation may move ops between regions freely and leave
the names to it.

Types may name SSA values (`view<[%n]xf32>`) and `index.assume` predicates
name their subjects; neither is a use, so `refs_of` lists them and
`remap_type` rewrites them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from loomcli.ir.attrs import Pred
from loomcli.ir.clone import remap_attr, remap_type
from loomcli.ir.core import BlockArgument, Loc, Module, Operation, Region, Value
from loomcli.ir.format import Dict, Kind
from loomcli.ir.ops import OPS, function_context
from loomcli.ir.types import ShapedType, Type

_NUMERIC = re.compile(r"[0-9]+\Z")
_SUFFIX = re.compile(r"^(.*[^0-9_].*?)_[0-9]+\Z")


# ---------------------------------------------------------------- creating ops


def default_attrs(name: str) -> dict[str, Any]:
    """Attributes the parser always fills for `name` (empty flag sets, dictionaries)."""
    attrs: dict[str, Any] = {}
    for d in OPS[name].format:
        if isinstance(d, Kind) and d.flags:
            attrs[d.attr] = ()
        elif isinstance(d, Dict):
            attrs[d.attr] = {}
    return attrs


def create(name: str, operands: Sequence[Value] = (), result_types: Sequence[Type] = (),
           attrs: Mapping[str, Any] | None = None, names: Sequence[str] = (), loc: Loc = (0, 0)) -> Operation:
    """A detached op `name` from the op table, with empty regions as its row declares."""
    opdef = OPS[name]
    full = default_attrs(name)
    full.update(attrs or {})
    op = Operation(opdef, list(operands), list(result_types), full, loc)
    for r, n in zip(op.results, names):
        r.name = n
    for _ in opdef.regions:
        op.add_region()
    return op


# ---------------------------------------------------------------- values named by types and predicates


def type_refs(t: Type) -> Iterator[Value]:
    if isinstance(t, ShapedType):
        for d in t.dims:
            if not isinstance(d, int):
                yield d


def _attr_refs(v: Any) -> Iterator[Value]:
    if isinstance(v, Pred):
        for a in v.args:
            if isinstance(a, Value):
                yield a
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _attr_refs(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _attr_refs(x)


def refs_of(op: Operation) -> list[Value]:
    """Values `op` names outside its operands: in result types, the types of
    its regions' arguments, written operand types and predicates. (Every
    `Rewriter` asks this of every op, which mostly names none: so a list,
    and no generator for a type without dims or a scalar attribute.)"""
    refs: list[Value] = []
    for r in op.results:
        if isinstance(r.type, ShapedType):
            refs += type_refs(r.type)
    for region in op.regions:
        for a in region.args:
            if isinstance(a.type, ShapedType):
                refs += type_refs(a.type)
    if op.written_types:
        for t in op.written_types:
            if isinstance(t, ShapedType):
                refs += type_refs(t)
    for key, v in op._attrs.items():
        if isinstance(v, _MAY_NAME_VALUES) and key not in ("sig", "launch"):
            refs += _attr_refs(v)
    return refs


# The attribute values `_attr_refs` looks into (it finds nothing in any other).
_MAY_NAME_VALUES = (Pred, list, tuple, dict)


def remap_refs(op: Operation, mapping: dict[Value, Value]) -> None:
    """Rewrite, in place, the values `op` names in types and predicates (not its operands)."""
    for r in op.results:
        r.type = remap_type(r.type, mapping)
    for region in op.regions:
        for a in region.args:
            a.type = remap_type(a.type, mapping)
    if op.written_types:
        op.written_types = [None if t is None else remap_type(t, mapping) for t in op.written_types]
    for key, v in list(op._attrs.items()):
        if key not in ("sig", "launch") and isinstance(v, (Pred, list, tuple, dict)):
            op._attrs[key] = remap_attr(v, mapping)


def replace_value(old: Value, new: Value) -> None:
    """Every use of `old`, and every type or predicate naming it inside its
    top-level op, now means `new` (for rewrites outside the pattern
    driver's `Rewriter`, which keeps its own counts)."""
    old.replace_all_uses_with(new)
    root = top_level_op(old)
    if root is None:
        return
    mapping = {old: new}
    for op in root.walk():
        if any(v is old for v in refs_of(op)):
            remap_refs(op, mapping)


def substitute(op: Operation, new: Operation) -> None:
    """Put `new` in `op`'s place; `op`'s results become `new`'s (same names,
    types and locations), uses, types and predicates included."""
    new.comments = op.comments
    region = op.parent
    assert region is not None
    region.ops[region.ops.index(op)] = new
    new.parent = region
    op.drop_operand_uses()
    for r in op.results:
        replace_value(r, new.add_result(r.type, r.name, r.loc))


# ---------------------------------------------------------------- cloning


# ---------------------------------------------------------------- regions and contexts


def is_isolated(region: Region) -> bool:
    owner = region.owner
    if owner is None:
        return True
    if owner.parent is not None and owner.parent.owner is None:
        return True  # every region of a top-level op opens a scope of its own
    return owner.opdef.regions[owner.regions.index(region)].isolated


def isolated_region(where: Operation | Region | Value) -> Region | None:
    """The isolated region (a name scope) that contains `where`."""
    region: Region | None
    if isinstance(where, Region):
        region = where
    elif isinstance(where, Operation):
        region = where.parent
    elif isinstance(where, BlockArgument):
        region = where.region
    else:
        op = getattr(where, "op", None)
        region = op.parent if op is not None else None
    while region is not None and not is_isolated(region):
        owner = region.owner
        region = owner.parent if owner is not None else None
    return region


def top_level_op(where: Operation | Region | Value) -> Operation | None:
    """The module-level op whose body holds `where`."""
    region = isolated_region(where)
    return region.owner if region is not None else None


def context_of(region: Region) -> str | None:
    """The context (LANGUAGE.md section 3) ops of `region` run in; None at module level."""
    while region.owner is not None:
        owner = region.owner
        spec = owner.opdef.regions[owner.regions.index(region)]
        if spec.context == "convention":
            return function_context(owner._attrs.get("convention"))
        if spec.context is not None:
            return spec.context
        if owner.parent is None:
            return None
        region = owner.parent
    return None


def region_values(region: Region) -> Iterator[Value]:
    """Every value defined in `region`: its arguments, results and nested definitions."""
    yield from region.args
    for op in region.ops:
        for inner in op.walk():
            yield from inner.results
            for r in inner.regions:
                yield from r.args


# ---------------------------------------------------------------- names


class Namer:
    """Fresh SSA names for one isolated region: the name asked for when free,
    else `stem_N` with the next N not taken (digits-only names get the next
    free number)."""

    def __init__(self, region: Region | None = None, taken: Iterable[str] = ()) -> None:
        self.taken: set[str] = set(taken)
        if region is not None:
            self.taken.update(v.name for v in region_values(region))
        self._next: dict[str, int] = {}  # stem -> the smallest suffix that may be free

    @classmethod
    def for_op(cls, op: Operation) -> Namer:
        return cls(isolated_region(op))

    def fresh(self, base: str) -> str:
        if base and base not in self.taken:
            self.taken.add(base)
            return base
        if not base or _NUMERIC.match(base):
            stem, n = "", self._next.get("", 0)
            while str(n) in self.taken:
                n += 1
            name = str(n)
        else:
            m = _SUFFIX.match(base)
            stem = m.group(1) if m else base
            n = self._next.get(stem, 1)
            while f"{stem}_{n}" in self.taken:
                n += 1
            name = f"{stem}_{n}"
        self._next[stem] = n + 1
        self.taken.add(name)
        return name


def legalize_names(module: Module) -> int:
    """Rename every definition that redefines a visible name (or has none),
    walking each isolated region in text order as the parser does. Returns
    how many values were renamed.

    It runs after every pass and almost always renames nothing, so it only
    walks: an isolated region's `Namer` (which collects every name of the
    region) is made at its first rename, and the names in scope are one
    set (a name is in it at most once: a second definition is renamed)."""
    renamed = 0
    for top in module.ops:
        for region in top.regions:
            renamed += _legalize_region(region, set(), _FirstRename(region))
    return renamed


class _FirstRename:
    """An isolated region's `Namer`, made when the region first needs a
    fresh name (until then its names are those it had at the start)."""

    def __init__(self, region: Region) -> None:
        self.region = region
        self.namer: Namer | None = None

    def fresh(self, base: str) -> str:
        if self.namer is None:
            self.namer = Namer(self.region)
        return self.namer.fresh(base)


def _legalize_region(region: Region, visible: set[str], names: _FirstRename) -> int:
    scope: list[str] = []  # the names this region defines, out of `visible` again when it ends
    renamed = 0

    def define(v: Value) -> None:
        nonlocal renamed
        if not v.name or v.name in visible:
            v.name = names.fresh(v.name)
            renamed += 1
        visible.add(v.name)
        scope.append(v.name)

    for a in region.args:
        define(a)
    for op in region.ops:
        for inner in op.regions:
            renamed += _legalize_region(inner, visible, names)
        for r in op.results:
            define(r)
    visible.difference_update(scope)
    return renamed



__all__ = [
    "Namer",
    "context_of",
    "create",
    "default_attrs",
    "is_isolated",
    "isolated_region",
    "legalize_names",
    "refs_of",
    "region_values",
    "remap_attr",
    "remap_refs",
    "remap_type",
    "top_level_op",
    "type_refs",
]
