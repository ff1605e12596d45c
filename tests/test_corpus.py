"""Golden corpus of the front end (lexer, parser, printer, verifier).

corpus/valid/*.loom     verify and print back byte-identically; together they
                        use every op of the op table.
corpus/format/X.loom    non-canonical input whose canonical form is X.loom.out
                        (itself a fixed point).
corpus/invalid/*.loom   expected diagnostics written before the offending line:
                        `// ERROR@+N: CODE` or `// ERROR@+N:COL: CODE` names the
                        N-th following line that is not itself a marker, so
                        several markers may precede one line (all `@+1`). A
                        `// -----` line splits a file into independent cases,
                        like MLIR's split-input-file; each case keeps the
                        file's line numbers (other cases' lines are blanked).
                        The reported (line, code) set must equal the markers'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from loomcli.diagnostics import CompileError
from loomcli.frontend import parse_text
from loomcli.ir.ops import OPS
from loomcli.text.printer import print_module

CORPUS = Path(__file__).parent / "corpus"
VALID = sorted((CORPUS / "valid").glob("*.loom"))
FORMAT = sorted((CORPUS / "format").glob("*.loom"))
INVALID = sorted((CORPUS / "invalid").glob("*.loom"))

# Every code of LANGUAGE.md section 14 that parsing or verification can report.
FRONT_END_CODES = {
    "PARSE/001", "PARSE/002", "PARSE/003", "PARSE/004", "PARSE/006", "PARSE/007", "PARSE/010", "PARSE/011",
    "TYPE/001", "TYPE/002", "TYPE/003", "TYPE/005", "TYPE/006",
    "STRUCTURE/001", "STRUCTURE/003", "STRUCTURE/005", "STRUCTURE/007", "STRUCTURE/008", "STRUCTURE/009",
    "STRUCTURE/010",
    "DOMINANCE/001", "DOMINANCE/002",
    "SYMBOL/001", "SYMBOL/002", "SYMBOL/003",
}

_MARKER = re.compile(r"\s*// ERROR@\+(\d+):(?:(\d+):)? ([A-Z_]+/\d{3})\s*\Z")
_SPLIT = "// -----"


@dataclass(frozen=True)
class Case:
    path: Path
    index: int
    text: str
    expected: frozenset[tuple[int, str]]
    columns: frozenset[tuple[int, int, str]]

    @property
    def id(self) -> str:
        return f"{self.path.name}#{self.index}"


def _markers(lines: list[str]) -> tuple[set[tuple[int, str]], set[tuple[int, int, str]]]:
    expected: set[tuple[int, str]] = set()
    columns: set[tuple[int, int, str]] = set()
    pending: list[list] = []  # [remaining offset, column or None, code]
    for number, line in enumerate(lines, 1):
        m = _MARKER.match(line)
        if m:
            assert int(m.group(1)) >= 1, f"line {number}: offsets count forward from 1"
            pending.append([int(m.group(1)), m.group(2), m.group(3)])
            continue
        still = []
        for marker in pending:
            marker[0] -= 1
            if marker[0]:
                still.append(marker)
                continue
            expected.add((number, marker[2]))
            if marker[1] is not None:
                columns.add((number, int(marker[1]), marker[2]))
        pending = still
    assert not pending, f"markers point past the end: {pending}"
    return expected, columns


def split_cases(path: Path) -> list[Case]:
    lines = path.read_text(encoding="utf-8").split("\n")
    bounds = [i for i, line in enumerate(lines) if line.strip() == _SPLIT]
    starts = [0] + [b + 1 for b in bounds]
    ends = bounds + [len(lines)]
    cases = []
    for k, (start, end) in enumerate(zip(starts, ends)):
        kept = ["" if not start <= i < end else line for i, line in enumerate(lines)]
        expected, columns = _markers(kept)
        cases.append(Case(path, k, "\n".join(kept), frozenset(expected), frozenset(columns)))
    return cases


INVALID_CASES = [case for path in INVALID for case in split_cases(path)]


def diagnostics_of(text: str, path: str) -> list:
    """The diagnostics `parse_text` raises; any other exception fails the test."""
    try:
        parse_text(text, path)
    except CompileError as e:
        assert e.diagnostics, "CompileError without diagnostics"
        for d in e.diagnostics:
            rendered = d.render(text)
            assert rendered.startswith(f"{path}:"), rendered
        return e.diagnostics
    return []


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_is_canonical(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert print_module(parse_text(text, path.name)) == text


def test_valid_corpus_uses_every_op() -> None:
    used: set[str] = set()
    for path in VALID:
        used.update(op.name for op in parse_text(path.read_text(encoding="utf-8"), path.name).walk())
    missing = sorted(set(OPS) - used)
    assert not missing, f"ops without a valid corpus test: {missing}"


@pytest.mark.parametrize("path", FORMAT, ids=lambda p: p.name)
def test_format(path: Path) -> None:
    want = path.with_suffix(".loom.out").read_text(encoding="utf-8")
    assert print_module(parse_text(path.read_text(encoding="utf-8"), path.name)) == want
    assert print_module(parse_text(want, path.name)) == want


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda c: c.id)
def test_invalid(case: Case) -> None:
    assert case.expected, f"{case.id} has no ERROR marker"
    diags = diagnostics_of(case.text, case.path.name)
    got = {(d.line, d.code) for d in diags}
    assert got == case.expected, "\n".join(d.render(case.text) for d in diags)
    located = {(d.line, d.column, d.code) for d in diags}
    assert case.columns <= located, "\n".join(d.render(case.text) for d in diags)


def test_invalid_corpus_covers_every_front_end_code() -> None:
    covered = {code for case in INVALID_CASES for _, code in case.expected}
    assert covered >= FRONT_END_CODES, f"codes without an invalid corpus test: {sorted(FRONT_END_CODES - covered)}"


def test_rendered_diagnostic_matches_section_14() -> None:
    text = "\n".join([
        "kernel.def @k() {",
        "  %one = index.constant 1 : index",
        "  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index",
        "} launch(%b: buffer) {",
        "  %zero = index.constant 0 : offset",
        "  %c0 = index.constant 0 : index",
        "  %v = buffer.view %b[%zero] : buffer -> view<4xf32>",
        "  %x = scalar.constant 1 : i32",
        "  view.store %x, %v[%c0] : f32, view<4xf32>",
        "  kernel.return",
        "}",
        "",
    ])
    (diag,) = diagnostics_of(text, "k.loom")
    assert diag.render(text) == (
        "k.loom:9:14: error [TYPE/001]: operand 0 of view.store: expected f32, found i32\n"
        "  view.store %x, %v[%c0] : f32, view<4xf32>\n"
        "             ^"
    )


def test_caret_line_copies_tabs() -> None:
    text = "func.def @f() {\n\t%x = index.constant 1 : i32\n\tfunc.return\n}\n"
    (diag,) = diagnostics_of(text, "t.loom")
    assert (diag.code, diag.line, diag.column) == ("TYPE/001", 2, 7)
    assert diag.render(text).split("\n")[2] == "\t     ^"
