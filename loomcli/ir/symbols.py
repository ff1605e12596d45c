"""Symbol references: which attributes name other symbols, and renaming them.

Top-level ops refer to each other only through these attributes, so linking,
dead-symbol removal and renaming need no other knowledge of op semantics.
"""

from __future__ import annotations

from collections.abc import Iterator

from loomcli.ir.core import Operation
from loomcli.ir.ops import MODULE_IMPORT, TARGET_RECORDS, TEMPLATE_APPLY, TEMPLATE_DEF, OpTable, op_names

# Attributes holding one symbol name (without `@`).
REF_ATTRS = ("callee", "family", "ref", "case", "target")

DEFINITIONS = op_names("func.def", "template.def", "kernel.def", "command.program.def", "config.def",
                       "check.case", "check.benchmark", *TARGET_RECORDS)
# Declarations that a definition in another input replaces when linked.
RESOLVABLE: OpTable[str] = OpTable("ir.symbols.RESOLVABLE", {
    "func.decl": "func.def", "kernel.decl": "kernel.def", "command.program.decl": "command.program.def",
    "config.decl": "config.def"})


def references(op: Operation) -> Iterator[tuple[Operation, str, str]]:
    """(op, attribute, symbol) for every symbol reference in `op` and its regions."""
    for inner in op.walk():
        attrs = inner._attrs
        for key in REF_ATTRS:
            name = attrs.get(key)
            if name is not None and (key != "family" or inner.opdef in (TEMPLATE_APPLY, TEMPLATE_DEF)):
                yield inner, key, name
        if inner.opdef is MODULE_IMPORT:
            for name in attrs.get("symbols", ()):
                yield inner, "symbols", name


def referenced_symbols(op: Operation) -> list[str]:
    """Symbols `op` refers to, in first-reference order, without repeats."""
    seen: dict[str, None] = {}
    for _, _, name in references(op):
        seen.setdefault(name, None)
    return list(seen)


def rename_references(op: Operation, renames: dict[str, str]) -> None:
    """Rewrite symbol references inside `op` (not its own `sym`)."""
    for inner, key, name in list(references(op)):
        new = renames.get(name)
        if new is None:
            continue
        if key == "symbols":
            inner._attrs["symbols"] = tuple(renames.get(s, s) for s in inner._attrs["symbols"])
        else:
            inner._attrs[key] = new
