"""Convergence and uniformity of kernel bodies (LANGUAGE.md 8, STRUCTURE/005):
barriers and collectives only under uniform control flow.
"""

from __future__ import annotations

from loomcli.diagnostics import Diagnostic
from loomcli.ir.core import Operation, Region, Value
from loomcli.ir.ops import (
    CONVERGENT,
    SCF_FOR,
    SCF_IF,
    SCF_SELECT,
    SCF_WHILE,
    UNIFORM,
)
from loomcli.ir.verifier.base import VerifierBase


class ConvergenceChecks(VerifierBase):
    """Which values are uniform; where convergent ops may nest."""

    def check_kernel_body(self, kernel: Operation) -> None:
        body = kernel.region("body")
        uniform: set[Value] = set(body.args)
        self._uniform_region(body, uniform, [])

    def _uniform_region(self, region: Region, uniform: set[Value], controls: list[tuple[str, Value | None]]) -> None:
        for op in region.ops:
            if op.opdef.has(CONVERGENT):
                self._check_convergent(op, controls)
            if op.opdef is SCF_IF:
                cond = op.operand("condition") if op.operands else None
                cu = cond is not None and cond in uniform
                for r in op.regions:
                    self._uniform_region(r, uniform, controls + [("if", None if cu else cond)])
                if cu:
                    yields_uniform = all(
                        all(v in uniform for v in r.ops[-1].operands) for r in op.regions if r.ops)
                    if yields_uniform:
                        uniform.update(op.results)
            elif op.opdef is SCF_FOR:
                bounds = [g for name in ("lower", "upper", "step") for g in op.operand_group(name)]
                bad = next((v for v in bounds if v not in uniform), None)
                body = op.region("body")
                if bad is None and body.args:
                    uniform.add(body.args[0])
                self._uniform_region(body, uniform, controls + [("for", bad)])
            elif op.opdef is SCF_WHILE:
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
        if op.opdef.has(UNIFORM):
            return True
        if name.startswith(("index.", "scalar.")) or op.opdef is SCF_SELECT:
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
