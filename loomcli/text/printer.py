"""The canonical printer (LANGUAGE.md section 4 and section 17 items 3-7).

Op text comes from each op's format directives (compiled by
`loomcli.text.directives`); this module owns layout:
indentation, blank lines, comments, elided terminators and the spelling of
literals.
"""

from __future__ import annotations

from typing import Any

from loomcli.ir.attrs import Pred, attribute_text, dictionary_text, literal_text
from loomcli.ir.core import DETACHED, Module, Operation, Region, Value
from loomcli.ir.ops import COMMAND_YIELD, MODULE_IMPORT, SCF_YIELD
from loomcli.ir.types import ShapedType, Type
from loomcli.text.directives import FORMATS


def is_elided(op: Operation) -> bool:
    """Operand-free `scf.yield` and every `command.yield` are not printed."""
    return op.opdef is COMMAND_YIELD or (op.opdef is SCF_YIELD and not op.operands)


class Printer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.cur = ""
        self.indent = ""

    # ---- primitives used by directives

    def word(self, text: str) -> None:
        self.cur += " " + text

    def glue(self, text: str) -> None:
        self.cur += text

    @staticmethod
    def value(v: Value) -> str:
        return "%" + v.name

    @staticmethod
    def type(t: Type) -> str:
        if isinstance(t, ShapedType):
            parts = [str(d) if isinstance(d, int) else f"[%{d.name}]" for d in t.dims]
            return f"{t.name}<{'x'.join(parts)}x{t.elem.name}>"
        return t.name

    def literal(self, v: Any) -> str:
        return literal_text(v)

    def attribute(self, v: Any) -> str:
        return attribute_text(v)

    def dictionary(self, d: dict[str, Any]) -> str:
        return dictionary_text(d)

    def preds(self, preds: list[Pred]) -> str:
        parts = []
        for p in preds:
            args = [self.value(a) if isinstance(a, Value) else str(a) for a in p.args]
            parts.append(f"{p.name}({', '.join(args)})")
        return "[" + ", ".join(parts) + "]"

    def region_is_trivial(self, region: Region) -> bool:
        return all(is_elided(op) and not op.comments for op in region.ops)

    def region(self, op: Operation, index: int) -> None:
        region = op.regions[index]
        self.cur += " {"
        self.lines.append(self.cur)
        outer = self.indent
        self.indent = outer + "  "
        for inner in region.ops:
            if is_elided(inner):
                self._comments(inner.comments)
            else:
                self.op(inner)
        self.indent = outer
        self.cur = outer + "}"

    # ---- layout

    def _comments(self, comments: list[str]) -> None:
        for c in comments:
            if c == DETACHED:
                self.lines.append("")  # the blank line after a detached block (17.34)
            else:
                self.lines.append(f"{self.indent}// {c}" if c else f"{self.indent}//")

    def op(self, op: Operation) -> None:
        if op.comments:
            self._comments(op.comments)
        if op.results:
            self.cur = self.indent + ", ".join("%" + r.name for r in op.results) + " = " + op.opdef.name
        else:
            self.cur = self.indent + op.opdef.name
        for directive in FORMATS[op.opdef]:
            directive.print(self, op)
        self.lines.append(self.cur)
        self.cur = ""

    def module(self, module: Module) -> str:
        first = True
        for op in module.ops:
            if not first and op.opdef is not MODULE_IMPORT:
                self.lines.append("")
            first = False
            self.op(op)
        self._comments(module.end_comments)
        return "\n".join(self.lines) + "\n" if self.lines else ""


def print_module(module: Module) -> str:
    return Printer().module(module)


def print_op(op: Operation) -> str:
    p = Printer()
    p.op(op)
    return "\n".join(p.lines)
