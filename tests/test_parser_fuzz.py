"""Random and mutated text never makes the front end fail other than with CompileError.

Inputs are kept small so each example takes milliseconds; a parse that takes
seconds counts as a hang. A text that does verify must print to canonical
text that is a fixed point of the formatter, and blanks added between the
tokens of canonical text must not change what it prints (section 17.2).
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli.diagnostics import CODES, CompileError
from loomcli.frontend import parse_text
from loomcli.text.lexer import tokenize
from loomcli.text.printer import print_module

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "samples").glob("*.loom"))] + [
    p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests" / "corpus" / "valid").glob("*.loom"))
]

# Pieces of Loom text (and near misses) that random edits splice in.
FRAGMENTS = [
    "%x", "%0", "%a-b", "@f", "@a.b", "#h", "#h<1, k=v>", "index", "offset", "i1", "f32", "bf16", "buffer",
    "view<4xf32>", "view<[%n]x4xf32>", "tensor<2x[%n]xi8>", "vector<8xf32>", "vector<", "view<[%",
    "0", "-1", "0x1F", "18446744073709551616", "1.5", "1e-05", "-inf", "nan", "-nan", "true", '"s\\n"', '"\\u',
    "(", ")", "[", "]", "{", "}", "<", ">", "=", ":", ",", "|", "->", "//", "// c\n", "\n", " ", "\t", "\r",
    "^bb0", "§", "\\", "where", "launch", "else", "do", "to", "into", "step", "align(16)", "pure", "public",
    "index.add", "scf.if", "scf.yield", "func.return", "kernel.return", "func.def", "kernel.def", "scf.switch",
    "func.template", "[range(%n, 1, 2)]", "{ordering = relaxed, scope = device}", "-> (f32)", "} else {",
]

_PIECES = re.compile(r"\s+|[A-Za-z0-9_.$%@#-]+|.", re.S)


class Hang(Exception):
    pass


@contextlib.contextmanager
def hang_guard(seconds: float) -> Iterator[None]:
    """Turn a parse that runs away into a failure instead of a stuck test run."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check(text: str) -> None:
    with hang_guard(5.0):
        try:
            module = parse_text(text, "fuzz.loom")
        except CompileError as e:
            assert e.diagnostics
            for d in e.diagnostics:
                assert d.code in CODES, d.code
                d.render(text)
        else:
            printed = print_module(module)
            assert print_module(parse_text(printed, "fuzz.loom")) == printed


@st.composite
def mutated(draw: st.DrawFn) -> str:
    source = draw(st.sampled_from(SOURCES))
    pieces = _PIECES.findall(source)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(pieces)))
        action = draw(st.sampled_from(["delete", "insert", "swap", "duplicate", "char"]))
        if action == "delete" and pieces:
            del pieces[min(i, len(pieces) - 1):min(i, len(pieces) - 1) + draw(st.integers(1, 3))]
        elif action == "insert":
            pieces.insert(i, draw(st.sampled_from(FRAGMENTS)))
        elif action == "swap" and len(pieces) > 1:
            j = draw(st.integers(0, len(pieces) - 1))
            i = min(i, len(pieces) - 1)
            pieces[i], pieces[j] = pieces[j], pieces[i]
        elif action == "duplicate" and pieces:
            i = min(i, len(pieces) - 1)
            pieces.insert(i, pieces[i])
        elif action == "char":
            pieces.insert(i, draw(st.characters(codec="utf-8")))
    return "".join(pieces)


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_fragment_soup(text: str) -> None:
    check(text)


@FUZZ
@given(st.text(max_size=200))
def test_random_text(text: str) -> None:
    check(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_samples(text: str) -> None:
    check(text)


CANONICAL = [text for text in SOURCES if len(tokenize(text).starts) > 2 and print_module(parse_text(text)) == text]


@st.composite
def respaced(draw: st.DrawFn) -> tuple[str, str]:
    """A canonical text with blanks added at token boundaries (section 17.2),
    except right after a comment line: a blank line there detaches the
    comment block at top level (section 17.34)."""
    text = draw(st.sampled_from(CANONICAL))
    starts = sorted(c for c in set(tokenize(text).starts[1:-1])
                    if not text[text.rfind("\n", 0, c - 1) + 1:c].lstrip().startswith("//"))
    cuts = sorted(set(draw(st.lists(st.sampled_from(starts), min_size=1, max_size=20))))
    pieces, last = [], 0
    for cut in cuts:
        pieces += [text[last:cut], draw(st.sampled_from([" ", "\t", "\n", "  \n\t", "\r\n"]))]
        last = cut
    return text, "".join(pieces) + text[last:]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(respaced())
def test_blanks_between_tokens_are_insignificant(case: tuple[str, str]) -> None:
    canonical, respaced_text = case
    assert print_module(parse_text(respaced_text)) == canonical
