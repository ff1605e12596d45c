"""Dead code: `dce` inside bodies, `symbol-dce` between symbols.

`dce` erases ops whose results nothing uses (no operand, no type, no
predicate names them) and that have no effect: pure ops, and `scf.if` /
`scf.for` whose regions hold only such ops (an `scf.for` always ends;
`scf.while` may not, and calls are kept).

`symbol-dce` erases top-level symbols no root reaches. Roots: `public` or
`retain` symbols, kernels with `export(...)`, check cases and benchmarks.
A live op reaches the symbols its attributes name (callees, `config.get`
keys, template families, `target(@t)`, ...); a live `template.apply`
reaches every provider of its family. `module.import` lists drop the
declarations that went away.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from loomcli.ir.attrs import SymbolRef
from loomcli.ir.core import Module, Operation
from loomcli.ir.ops import (
    CHECK_BENCHMARK,
    CHECK_CASE,
    KERNEL_DEF,
    MODULE_IMPORT,
    PURE,
    SCF_FOR,
    SCF_IF,
    SYMBOL,
    TEMPLATE_APPLY,
    TEMPLATE_DEF,
    TERMINATOR,
)
from loomcli.passes.registry import ModulePass, PassContext
from loomcli.passes.rewrite import Rewriter

# ---------------------------------------------------------------- dce

_EFFECT_FREE_REGION_OPS = (SCF_IF, SCF_FOR)


def has_no_effect(op: Operation) -> bool:
    """Removing `op` (when its results are unused) changes nothing observable."""
    if op.opdef.has(PURE) and not op.regions:
        return True
    if op.opdef in _EFFECT_FREE_REGION_OPS:
        return all(inner.opdef.has(TERMINATOR) or has_no_effect(inner)
                   for region in op.regions for inner in region.ops)
    return False


def dce(module: Module) -> int:
    """Erase dead ops in every body of `module`; returns how many were erased."""
    rw = Rewriter(module)
    erased = 0
    changed = True
    while changed:
        changed = False
        # Reversed pre-order: uses are seen before definitions, nested ops before their owner.
        for op in reversed(list(module.walk())):
            if op.parent is None or op.parent.owner is None or _inside_erased(op):
                continue
            if op.opdef.has(TERMINATOR) or any(rw.is_used(r) for r in op.results) or not has_no_effect(op):
                continue
            rw.erase_op(op)
            erased += 1
            changed = True
    return erased


def _inside_erased(op: Operation) -> bool:
    node: Operation | None = op
    while node is not None:
        region = node.parent
        if region is None:
            return True
        node = region.owner
        if node is None:
            return False
    return False


@dataclass(frozen=True)
class DeadCodeElimination(ModulePass):
    name = "dce"
    summary = "Erase unused pure ops, and scf.if/scf.for without results in use or effects."

    def run(self, module: Module, ctx: PassContext) -> None:
        dce(module)


# ---------------------------------------------------------------- symbol-dce

# Attributes whose string value names a symbol.
_SYMBOL_ATTRS = ("callee", "ref", "family", "case", "target")


def is_root(op: Operation) -> bool:
    return bool(op.attr_or("public") or op.attr_or("retain") or (op.opdef is KERNEL_DEF and op.has_attr("export"))
                or op.opdef in (CHECK_CASE, CHECK_BENCHMARK))


def _symbol_refs(value: Any) -> Iterator[str]:
    if isinstance(value, SymbolRef):
        yield value.name
    elif isinstance(value, (list, tuple)):
        for x in value:
            yield from _symbol_refs(x)
    elif isinstance(value, dict):
        for x in value.values():
            yield from _symbol_refs(x)


def references(op: Operation) -> Iterator[str]:
    """Symbols `op` and the ops it nests name, in program order."""
    for inner in op.walk():
        for key, value in inner.attr_items():
            if key in _SYMBOL_ATTRS and isinstance(value, str):
                yield value
            elif key != "sym":
                yield from _symbol_refs(value)


def symbol_dce(module: Module) -> list[str]:
    """Erase unreachable private symbols; returns their names in module order."""
    symbols = module.symbols()
    providers: dict[str, list[Operation]] = {}
    for op in module.ops:
        if op.opdef is TEMPLATE_DEF:
            providers.setdefault(op.attr("family", ""), []).append(op)
    live: set[Operation] = set()
    stack = [op for op in module.ops if op.opdef.has(SYMBOL) and is_root(op)]
    live.update(stack)
    while stack:
        op = stack.pop()
        reached = [symbols.get(s) for s in references(op)]
        reached += [p for inner in op.walk() if inner.opdef is TEMPLATE_APPLY
                    for p in providers.get(inner.attr("family", ""), [])]
        for target in reached:
            if target is not None and target not in live:
                live.add(target)
                stack.append(target)
    rw = Rewriter(module)
    dead = [op for op in module.ops if op.opdef.has(SYMBOL) and op not in live]
    for op in dead:
        rw.erase_op(op)
    remaining = module.symbols()
    for op in list(module.ops):
        if op.opdef is MODULE_IMPORT:
            kept = tuple(s for s in op.attr("symbols", ()) if s in remaining)
            if kept:
                op.set_attr("symbols", kept)
            else:
                rw.erase_op(op)
    return [op.attr("sym") for op in dead]


@dataclass(frozen=True)
class SymbolDCE(ModulePass):
    name = "symbol-dce"
    summary = "Erase private symbols unreachable from public, retained or exported roots, cases and benchmarks."

    def run(self, module: Module, ctx: PassContext) -> None:
        symbol_dce(module)


__all__ = ["DeadCodeElimination", "SymbolDCE", "dce", "has_no_effect", "is_root", "references", "symbol_dce"]
