"""Diagnostics: stable codes, the text form of LANGUAGE.md section 14, JSON.

Every user-facing compile failure goes through `Diagnostic`. Stages collect
diagnostics in a `Diagnostics` list; phases that stop at the first error raise
`CompileError` carrying what was collected.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

# The code table of LANGUAGE.md section 14: code -> message template.
CODES: dict[str, str] = {
    "PARSE/001": "undefined value `%{v}`",
    "PARSE/002": "redefinition of `%{v}`",
    "PARSE/003": "expected {expected}, found {found}",
    "PARSE/004": "invalid token `{text}`",
    "PARSE/006": "unknown operation `{op}`",
    "PARSE/007": "unexpected `{word}` on {op}",
    "PARSE/010": "unknown type `{text}`",
    "PARSE/011": "legacy `{text}`; write `{new}`",
    "TYPE/001": "{what}: expected {t1}, found {t2}",
    "TYPE/002": "{op}: expected {n} {items}, found {m}",
    "TYPE/003": "invalid {what}: {why}",
    "TYPE/005": "`{literal}` is not a valid {type}",
    "TYPE/006": "{use} of `@{s}` mismatches its signature: {detail}",
    "STRUCTURE/001": "{op} region must end with {terminator}",
    "STRUCTURE/003": "{op} not allowed in {context}",
    "STRUCTURE/005": "convergent {op} under non-uniform `%{v}`",
    "STRUCTURE/007": "yield ({t1}) mismatches {parent} ({t2}), or else missing",
    "STRUCTURE/008": "workgroup alloca nested or not constant",
    "STRUCTURE/009": "pure `@{s}` contains {op}",
    "STRUCTURE/010": "recursion: {cycle}",
    "STRUCTURE/011": "topology not closed: `%{v}` does not fold",
    "DOMINANCE/001": "`%{v}` not visible or not allowed here",
    "DOMINANCE/002": "`%{v}` crosses isolated {op}",
    "SYMBOL/001": "duplicate symbol or export `{name}`",
    "SYMBOL/002": "undefined symbol `@{s}`",
    "SYMBOL/003": "`@{s}` is a {kind}, expected {kind2}",
    "CONFIG/001": "cannot bind `{text}` to `@{k}` : {type}",
    "CONFIG/002": "`@{k}` = {v} violates {pred}",
    "CONFIG/003": "`@{k}` unresolved",
    "CONFIG/004": "`@{k}` bound by {a} and {b}",
    "LINK/001": "no definition for `@{s}`",
    "LINK/002": "`@{s}` declarations disagree: {detail}",
    "LINK/003": "`@{s}` public in {a} and {b}",
    "LINK/004": "private `@{s}` cannot serve {module}",
    "LINK/005": "`@{fam}` ambiguous: `@{a}`, `@{b}` at priority {p}",
    "LINK/006": "no proven provider of `@{fam}`: {why}",
    "LINK/007": "`@{s}` must come from \"{key}\"",
    "LINK/008": "`@{fam}`: chose `@{w}`; `@{u}` stayed unknown",
    "TARGET/001": "unknown or mismatched target, key or fact `{text}`",
    "TARGET/002": "workgroup size of `@{k}` must be constant on {target}",
    "TARGET/003": "workgroup size {x}x{y}x{z} exceeds {target}: {limit}",
    "TARGET/004": "workgroup storage {n} > {limit} bytes",
    "TARGET/005": "`@{k}` needs {feature}, which {target} lacks",
    "TARGET/006": "push constants of `@{k}` take {n} > {limit} bytes",
    "TARGET/007": "private storage {n} > {limit} bytes",
    "LAUNCH_CONFIG/001": "no kernel exported as `{name}`",
    "LAUNCH_CONFIG/004": "workload arguments: {detail}",
    "LAUNCH_CONFIG/005": "argument {i} = {v} violates {pred}",
    "LAUNCH_CONFIG/006": "invalid geometry: {field} = {v}",
    "LAUNCH_CONFIG/007": "evaluation failed: {why}",
    "LAUNCH_CONFIG/008": "{field} of `@{s}` launch does not fold",
    "BYTECODE/001": "not Loom bytecode, or unsupported version {v}",
    "BYTECODE/003": "malformed at byte {offset}: {why}",
    "EXEC/001": "out of bounds: {view}[{indices}] in `@{kernel}`, extents [{extents}]",
    "EXEC/002": "undefined behaviour: {why}",
    "EXEC/003": "step budget exhausted: the launch ran more than {n} operations (loom test --max-steps)",
    "CHECK/001": "at {position}: actual {a}, expected {e}",
    "CHECK/002": "data file `{path}`: {why}",
}


@dataclass(slots=True)
class Diagnostic:
    code: str
    message: str
    file: str = "<command-line>"
    line: int = 0
    column: int = 0
    severity: str = "error"
    end_line: int = 0
    end_column: int = 0
    target: str | None = None  # the target profile a per-target diagnostic is about (`amdgpu:gfx1100`)

    @classmethod
    def make(cls, code: str, file: str, loc: tuple[int, int], severity: str = "error", **fields: object) -> Diagnostic:
        message = CODES[code].format(**fields)
        # A location copied from another input by linking names that input.
        return cls(code, message, getattr(loc, "file", file), loc[0], loc[1], severity)

    @property
    def sort_key(self) -> tuple[int, int, str]:
        return (self.line, self.column, self.code)

    def __str__(self) -> str:
        """`file:line:col: error [CODE]: message`, the line the command line prints."""
        return self.render()

    def render(self, source: str | None = None) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        head = f"{where}: {self.severity} [{self.code}]: {self.message}"
        if source is None or self.line <= 0:
            return head
        lines = source.split("\n")
        if self.line > len(lines):
            return head
        text = lines[self.line - 1].replace("\r", "")
        # The caret line copies tabs so it lines up in a terminal.
        pad = "".join(c if c == "\t" else " " for c in text[: max(self.column - 1, 0)])
        return f"{head}\n{text}\n{pad}^"

    def to_json(self) -> str:
        """One JSON object. `end_column` is the column just past the
        diagnostic's token (exclusive, as in LSP and SARIF), the start column
        where no source is known; `target` is null for a diagnostic that
        holds on every target."""
        return json.dumps({
            "severity": self.severity, "code": self.code, "message": self.message,
            "file": self.file, "line": self.line, "column": self.column,
            "end_line": self.end_line or self.line,
            "end_column": self.end_column or self.column,
            "target": self.target,
        }, ensure_ascii=False)


def did_you_mean(word: str, choices: Iterable[str], prefix: str = "", cutoff: float = 0.6) -> str:
    """`; did you mean `x`?` for the closest of `choices` to an unknown `word`
    (an op, a type, a symbol), or "" when none is close. Runs only on the
    error path, so its difflib import costs a good compile nothing."""
    import difflib

    close = difflib.get_close_matches(word, sorted(set(choices) - {word}), n=1, cutoff=cutoff)
    return f"; did you mean `{prefix}{close[0]}`?" if close else ""


class CompileError(Exception):
    """A stage failed; `diagnostics` says why (at least one error)."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__(diagnostics[0].message if diagnostics else "compile error")
        self.diagnostics = diagnostics


def has_errors(diags: list[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diags)
