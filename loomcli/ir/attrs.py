"""Attribute values (LANGUAGE.md section 6).

Plain Python values stand for literals: ``int``, ``float``, ``bool``, ``str``
(a string literal), ``list``/``tuple`` (arrays) and ``dict`` (dictionaries).
Words that are not strings get small wrapper types so the printer and the
bytecode keep their kind.
"""

from __future__ import annotations

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
