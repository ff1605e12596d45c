"""The verifier: every LANGUAGE.md rule that names a parse-time code.

It walks the module once, tracking the context of each region, and checks
for every op: its context (STRUCTURE/003), the types the text wrote against
the operands (TYPE/001), its typing rule (named in the op table, a
`rule_<name>` of one of the parts below), terminators and yields.
Module-wide checks cover symbols (SYMBOL/*), kernel convergence
(STRUCTURE/005), workgroup allocas (STRUCTURE/008), `pure` (STRUCTURE/009)
and recursion (STRUCTURE/010). All findings are returned sorted by (line,
column, code).

One concern per module: `types` (TYPE/*), `structure` (regions, terminators,
contexts), `symbols` (SYMBOL/* and signatures), `convergence` (uniformity),
`purity` (`pure` and recursion); `base` holds what they share. This module
is the driver.
"""

from __future__ import annotations

from loomcli.diagnostics import Diagnostic
from loomcli.ir.attrs import literal_text
from loomcli.ir.core import Module, Operation
from loomcli.ir.ops import FUNCTION, KERNEL_DEF, MODULE, TERMINATOR, function_context
from loomcli.ir.verifier.base import literal_fits
from loomcli.ir.verifier.convergence import ConvergenceChecks
from loomcli.ir.verifier.purity import PurityChecks
from loomcli.ir.verifier.structure import StructureRules
from loomcli.ir.verifier.symbols import SymbolRules
from loomcli.ir.verifier.types import MAX_VECTOR_LANES, TypeRules


class Verifier(TypeRules, StructureRules, SymbolRules, ConvergenceChecks, PurityChecks):
    """One walk over a module; each op's rule comes from the part that owns its concern."""

    def run(self) -> list[Diagnostic]:
        self.collect_symbols()
        for op in self.module.ops:
            self.visit(op, MODULE)
        self.check_recursion()
        return sorted(self.diags, key=lambda d: d.sort_key)

    def visit(self, op: Operation, context: str) -> None:
        opdef = op.opdef
        if opdef.has(TERMINATOR):
            # A terminator ends its region and is found nowhere else (section 3):
            # STRUCTURE/001, never STRUCTURE/003; a wrong last one is check_region_end's.
            region = op.parent
            owner = region.owner if region is not None else None
            if region is not None and owner is None:
                self.error("STRUCTURE/001", op.loc, op="the module", terminator=f"no terminator (found {op.name})")
            elif region is not None and owner is not None and region.ops[-1] is not op:
                self.error("STRUCTURE/001", op.loc, op=owner.name, terminator=self._terminator_of(region))
        elif context not in opdef.contexts:
            where = "the module" if context == MODULE else f"a {context}"
            self.error("STRUCTURE/003", op.loc, op=op.name, context=where)
            self.bad_ops.add(id(op))
        ok = not op.invalid and self.check_written_types(op)
        for t, loc in self._types_of(op):
            self.check_type(t, loc, context)
        if ok and id(op) not in self.bad_ops and opdef.rule:
            getattr(self, "rule_" + opdef.rule)(op)
        for index, region in enumerate(op.regions):
            spec = opdef.regions[index]
            inner = spec.context or context
            if inner == "convention":
                inner = function_context(op._attrs.get("convention"))
            self.check_region_end(op, region, spec.terminator)
            for inner_op in region.ops:
                self.visit(inner_op, inner)
        if op.opdef is KERNEL_DEF and self.source_level:
            self.check_kernel_body(op)
        if op.opdef.has(FUNCTION) and op._attrs.get("pure"):
            self.check_pure(op)


def verify(module: Module, parse_findings: list[Diagnostic] | None = None, *,
           source_level: bool = True) -> list[Diagnostic]:
    """All verification errors of `module`, sorted by (line, column, code).
    `source_level=False`: the module is legalized IR, checked without the
    source-level convergence rule (STRUCTURE/005; see `ModulePass.legalizes`)."""
    diags = Verifier(module, source_level).run()
    if parse_findings:
        diags = sorted(diags + parse_findings, key=lambda d: d.sort_key)
    return diags


__all__ = ["MAX_VECTOR_LANES", "Verifier", "literal_fits", "literal_text", "verify"]
