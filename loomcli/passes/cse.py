"""`cse`: merge pure ops that compute the same thing.

Two pure ops without regions merge when they have the same name, the same
operands, equal attributes and the same result types, and the first
dominates the second: it comes earlier in the same region or in a region
enclosing the second's. Each isolated region starts from nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from loomcli.ir.attrs import Pred
from loomcli.ir.core import Module, Operation, Region, Value
from loomcli.ir.ops import PURE, TERMINATOR
from loomcli.passes.registry import ModulePass, PassContext
from loomcli.passes.rewrite import Rewriter

# Pure, but their results stand for distinct provenance: never merged.
_NEVER_MERGED = frozenset({"buffer.assume.noalias"})


def _attr_key(v: Any) -> Hashable:
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, float):
        return ("f", struct.pack("<d", v))  # tells -0.0 from 0.0
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, (list, tuple)):
        return ("l", tuple(_attr_key(x) for x in v))
    if isinstance(v, dict):
        return ("d", tuple(sorted((k, _attr_key(x)) for k, x in v.items())))
    if isinstance(v, Pred):
        return ("p", v.name, tuple(("v", id(a)) if isinstance(a, Value) else ("i", a) for a in v.args))
    if isinstance(v, Value):
        return ("v", id(v))
    return ("o", type(v).__name__, repr(v))


def _empty(v: Any) -> bool:
    return v is None or v is False or (isinstance(v, (tuple, list, dict)) and not v)


def op_key(op: Operation) -> Hashable | None:
    """What makes two ops interchangeable, or None if `op` never merges."""
    opdef = op.opdef
    if not opdef.has(PURE) or op.regions or opdef.has(TERMINATOR) or not op.results \
            or opdef.name in _NEVER_MERGED:
        return None
    attrs = tuple(sorted((k, _attr_key(v)) for k, v in op.attr_items() if not k.startswith("$") and not _empty(v)))
    return (opdef.name, tuple(id(v) for v in op.operands), attrs, tuple(r.type for r in op.results))


def cse(module: Module) -> int:
    """Merge equal pure ops in `module`; returns how many were erased."""
    rw = Rewriter(module)
    merged = 0
    for top in module.ops:
        for region in top.regions:
            merged += _region(region, [], rw)
    return merged


def _region(region: Region, scopes: list[dict[Hashable, Operation]], rw: Rewriter) -> int:
    table: dict[Hashable, Operation] = {}
    scopes.append(table)
    merged = 0
    for op in list(region.ops):
        key = op_key(op)
        if key is not None:
            first = next((s[key] for s in reversed(scopes) if key in s), None)
            if first is not None:
                rw.carry_comments(op)
                rw.replace_op(op, first.results)
                merged += 1
                continue
            table[key] = op
        for inner in op.regions:
            merged += _region(inner, scopes, rw)
    scopes.pop()
    return merged


@dataclass(frozen=True)
class CommonSubexpressionElimination(ModulePass):
    name = "cse"
    summary = "Merge equal pure ops (same name, operands, attributes, result types) where one dominates the other."

    def run(self, module: Module, ctx: PassContext) -> None:
        cse(module)


__all__ = ["CommonSubexpressionElimination", "cse", "op_key"]
