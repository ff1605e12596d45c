"""Attribute values (LANGUAGE.md section 6).

Plain Python values stand for literals: ``int``, ``float``, ``bool``, ``str``
(a string literal), ``list``/``tuple`` (arrays) and ``dict`` (dictionaries).
Words that are not strings get small wrapper types so the printer and the
bytecode keep their kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from loomcli.ir.core import Value


@dataclass(frozen=True, slots=True)
class Ident:
    """A bare identifier used as a value: enum words, `nan(same)`."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class SymbolRef:
    """`@name` used as an attribute."""

    name: str

    def __str__(self) -> str:
        return "@" + self.name


@dataclass(frozen=True, slots=True)
class HashAttr:
    """`#name` or `#name<p, k=v>`; params are positional values or (key, value) pairs."""

    name: str
    params: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class KeyParam:
    """A `k=v` parameter of a hash attribute."""

    key: str
    value: Any


# A predicate argument is an SSA value or an integer literal.
PredArg = Union["Value", int]


@dataclass(eq=False, slots=True)
class Pred:
    """A predicate `name(subject, args...)` of a `where`, `index.assume` or `config.decl` list."""

    name: str
    args: list[PredArg]
    loc: tuple[int, int] | None = None
    arg_locs: list[tuple[int, int]] | None = None  # per argument, when parsed from text

    def arg_loc(self, i: int) -> tuple[int, int]:
        """Where argument `i` was written, else where the predicate was."""
        if self.arg_locs is not None and i < len(self.arg_locs):
            return self.arg_locs[i]
        return self.loc or (0, 0)


# name -> number of arguments after the subject (LANGUAGE.md section 6).
PREDICATE_ARITY = {
    "range": 2, "eq": 1, "ne": 1, "lt": 1, "le": 1, "gt": 1, "ge": 1,
    "mul": 1, "pow2": 0, "min": 1, "max": 1,
}


# ---------------------------------------------------------------- spelling
# How literals and attribute values are written (LANGUAGE.md section 6): the
# printer, the verifier's messages and the format directives share it.

_SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def quote(s: str) -> str:
    out = []
    for c in s:
        e = _SHORT_ESCAPES.get(c)
        if e is not None:
            out.append(e)
        elif c < " " or c == "\x7f":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def format_float(x: float) -> str:
    if math.isnan(x):
        return "nan"
    return repr(x)


def literal_text(v: Any) -> str:
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return format_float(v)
    if isinstance(v, str):
        return quote(v)
    return attribute_text(v)


def angled(inner: str) -> str:
    """`<inner>`, glued as LANGUAGE.md section 4.5 wants, except after a name
    that ends in `-` (legal, section 2): `->` always lexes as the arrow, so
    `<@a->` would not read back; a space before `>` keeps the name whole."""
    return f"<{inner} >" if inner.endswith("-") else f"<{inner}>"


def attribute_text(v: Any) -> str:
    if isinstance(v, (bool, int, float, str)):
        return literal_text(v)
    if isinstance(v, Ident):
        return v.text
    if isinstance(v, SymbolRef):
        return "@" + v.name
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(attribute_text(x) for x in v) + "]"
    if isinstance(v, dict):
        return dictionary_text(v)
    if isinstance(v, HashAttr):
        if not v.params:
            return "#" + v.name
        parts = [f"{p.key}={attribute_text(p.value)}" if isinstance(p, KeyParam) else attribute_text(p)
                 for p in v.params]
        return f"#{v.name}{angled(', '.join(parts))}"
    raise TypeError(f"cannot print attribute {v!r}")


def dictionary_text(d: dict[str, Any]) -> str:
    keys = sorted(d, key=lambda k: k.encode())
    return "{" + ", ".join(f"{k} = {attribute_text(d[k])}" for k in keys) + "}"
