"""Textual format directives, as data.

An op's format is a tuple of directives: which words, operands, types,
attributes and regions its text holds, in order, and how each is spelled.
The directives here are data only; the text layer compiles each into one
piece of syntax that both parses and prints it from these same fields
(`loomcli.text.directives`), so a round trip is symmetric by construction,
and the IR never needs the parser or the printer.

Conventions for attributes that directives fill:
  kind, flags       the `<...>` word or flag list
  sym               the symbol an op defines;  callee / ref: a symbol it uses
  indices           per-axis index template of an indexed access (int or None)
  nworkload         number of workload operands of a launch
  segments          operand counts of `workgroups(...)` groups
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loomcli.ir.types import Type

if TYPE_CHECKING:
    from loomcli.ir.core import Operation


class Directive:
    """One piece of an op's text (subclasses hold what it needs to know)."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        """The attributes this directive stores on an op: what `Operation.attr`
        may ask for (derived, with the op's other directives, into its row)."""
        return ()


# ---------------------------------------------------------------- words


class Kind(Directive):
    """`<word>` glued to the op name; with `flags`, a `|`-joined set in declaration order."""

    __slots__ = ("attr", "flags", "optional", "words")

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, words: Sequence[str], flags: bool = False, optional: bool = False, attr: str = "kind") -> None:
        self.words = tuple(words)
        self.flags = flags
        self.optional = optional or flags
        self.attr = attr


class SymKind(Directive):
    """`<@sym>` glued to the op name (template families, benchmarked cases)."""

    __slots__ = ("attr",)

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str) -> None:
        self.attr = attr


class Punct(Directive):
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


# ---------------------------------------------------------------- values


class Operands(Directive):
    """`%a, %b, ...`: any number is parsed; the verifier checks the count."""

    __slots__ = ("segment",)

    def attributes(self) -> tuple[str, ...]:
        return (self.segment,) if self.segment else ()

    def __init__(self, segment: str | None = None) -> None:
        self.segment = segment


class Leading(Directive):
    """One operand followed by `,` or a word (`%x, %v[...]`, `%x into %v[...]`)."""

    __slots__ = ("sep",)

    def __init__(self, sep: str = ",") -> None:
        self.sep = sep


class Predicate(Directive):
    """A comparison word followed by `,` (`index.cmp ult, ...`)."""

    __slots__ = ("words",)

    def attributes(self) -> tuple[str, ...]:
        return ("predicate",)

    def __init__(self, words: Sequence[str]) -> None:
        self.words = tuple(words)


class Literal(Directive):
    """A literal attribute (`64`, `0.5`, `true`, `"s"`); typed by the verifier."""

    __slots__ = ("attr",)

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str = "value") -> None:
        self.attr = attr


class Indexed(Directive):
    """`%v[%i, 0]`: a base operand and per-axis indices (values or literals >= 0)."""

    __slots__ = ("literals",)

    def attributes(self) -> tuple[str, ...]:
        return ("indices",)

    def __init__(self, literals: bool = True) -> None:
        self.literals = literals


class KwParen(Directive):
    """`word(...)` where the inside is an int, a literal, a literal list, a
    string, an identifier, an operand or an operand group."""

    __slots__ = ("attr", "inner", "optional", "word")

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)  # an operand group's size, for `inner == "operands"`

    def __init__(self, word: str, inner: str, attr: str | None = None, optional: bool = False) -> None:
        self.word = word
        self.inner = inner
        self.attr = attr or word
        self.optional = optional


class Dict(Directive):
    """`{k = v, ...}` attribute dictionary; printed sorted, omitted when empty.

    With `keys` the dictionary is required and holds exactly those keys, each
    mapped to its allowed enum words or to `int`: a missing key is PARSE/003
    (section 17.7), an unknown key or word PARSE/007 (section 17.11)."""

    __slots__ = ("attr", "keys")

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str = "dict", keys: dict[str, tuple[str, ...] | type[int]] | None = None) -> None:
        self.attr = attr
        self.keys = keys


class Preds(Directive):
    """`[pred, ...]` of `index.assume`."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("preds",)


class Callee(Directive):
    """`@k[%w...](%a...)` (launches) or `@f(%a...)` (calls)."""

    __slots__ = ("workload",)

    def attributes(self) -> tuple[str, ...]:
        return ("callee", "nworkload")

    def __init__(self, workload: bool) -> None:
        self.workload = workload


class ParenOperands(Directive):
    """`(%a, %b)` glued to what precedes it."""

    __slots__ = ()


class Pack(Directive):
    """`[align(16) %n0, align(256) %n1]` of `buffer.pack`."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("aligns",)


# ---------------------------------------------------------------- types


class TypeSame(Directive):
    """`: T` naming the type of the listed operands (all by default) and,
    with `result`, of the one result (`result` may also be a fixed type such
    as i1 for comparisons, or "pack" for buffer.pack's offsets)."""

    __slots__ = ("legacy_arrow", "operands", "result")

    def __init__(self, operands: Sequence[int] | None = None, result: bool | Type | str = True,
                 legacy_arrow: bool = False) -> None:
        self.operands = operands
        self.result = result
        self.legacy_arrow = legacy_arrow


class TypeEach(Directive):
    """`: T0, T1, ...` one type per listed operand; results mirror all
    operands (`mirror=True`) or one of them (`mirror=k`)."""

    __slots__ = ("legacy_arrow", "mirror", "operands")

    def __init__(self, operands: Sequence[int] | None = None, mirror: bool | int | None = None,
                 legacy_arrow: bool = False) -> None:
        self.operands = operands
        self.mirror = mirror
        self.legacy_arrow = legacy_arrow


class TypeArrow(Directive):
    """`: A to R` / `: A, B -> R`: written types of the listed operands, then the result."""

    __slots__ = ("operands", "sep")

    def __init__(self, operands: Sequence[int], sep: str = "->") -> None:
        self.operands = tuple(operands)
        self.sep = sep


class CallTypes(Directive):
    """`: [W...](D...) -> (R...)`; `[...]` iff there are workload operands,
    `-> (...)` iff there are results."""

    __slots__ = ("results",)

    def attributes(self) -> tuple[str, ...]:
        return ("written_nworkload",)

    def __init__(self, results: bool = True) -> None:
        self.results = results


class ResultTypes(Directive):
    """`-> (T, ...)`; dropped when there are no results."""

    __slots__ = ()


class TypeAttr(Directive):
    """`: T` stored as the `type` attribute (config ops)."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("type",)


# ---------------------------------------------------------------- regions and control flow


class Region(Directive):
    """`{ ... }` for region `index`; continuation words print on the `}` line."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class Else(Directive):
    """Optional `else { ... }` of `scf.if`; printed iff written or non-empty."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("else",)


class Bindings(Directive):
    """`(%acc = %init : T, ...)`: carried values; init operands plus region
    arguments of region 0 (after any `leading` arguments such as a loop IV)."""

    __slots__ = ("optional",)

    def __init__(self, optional: bool) -> None:
        self.optional = optional


class ForHeader(Directive):
    """`%i = [%lo to %hi step %s]` of `scf.for`."""

    __slots__ = ()


class Do(Directive):
    """`do(%a: T, ...) {` of `scf.while`; `()` dropped when empty."""

    __slots__ = ()


# ---------------------------------------------------------------- symbols and signatures

# A modifier's place in the fixed order (words of one rank exclude each other).
MODIFIER_RANK = {"public": 0, "retain": 1, "host": 2, "device": 2, "pure": 3, "inline": 4, "noinline": 4,
                 "target": 5, "export": 6, "requires": 7, "priority": 8}


class Modifiers(Directive):
    """Modifier words in their fixed order (LANGUAGE.md 7.7); out of order,
    repeated or not allowed here: PARSE/007."""

    __slots__ = ("allowed",)

    def attributes(self) -> tuple[str, ...]:
        names = {"host": "convention", "device": "convention", "inline": "inlining", "noinline": "inlining"}
        ranked = sorted(self.allowed, key=lambda w: MODIFIER_RANK[w])
        return tuple(dict.fromkeys(names.get(word, word) for word in ranked))

    def __init__(self, allowed: Sequence[str]) -> None:
        self.allowed = frozenset(allowed)


class SymName(Directive):
    """The `@name` an op defines (or, with attr="ref"/"callee", uses)."""

    __slots__ = ("attr",)

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str = "sym") -> None:
        self.attr = attr


class SigArgs(Directive):
    """`(%a: T, ...)` opening a signature; the arguments become the block
    arguments of region `region` (definitions) or local names (declarations).
    `attr` is `sig` or `launch` (a kernel's device list)."""

    __slots__ = ("attr", "glued", "region")

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str = "sig", region: int | None = None, glued: bool = True) -> None:
        self.attr = attr
        self.region = region
        self.glued = glued


class SigResults(Directive):
    """`-> (T, ...)` of a signature; results are static (TYPE/003)."""

    __slots__ = ()


class Where(Directive):
    """Optional `where [preds]` for the signature in `attr`."""

    __slots__ = ("attr",)

    def __init__(self, attr: str = "sig") -> None:
        self.attr = attr


class ConfigDeclType(Directive):
    """`: T` or `: %v: T where [preds]` of `config.decl`."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("sig", "type")


class SymbolList(Directive):
    """`[@a, @b]` of `module.import`, printed sorted."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("symbols",)


class StringAttr(Directive):
    __slots__ = ("attr",)

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str) -> None:
        self.attr = attr


# ---------------------------------------------------------------- reading an op by its directives


def segment_start(op: Operation, segment: str) -> int:
    """Operands before a named segment are the ones its op declares earlier."""
    start = 0
    for name in op.opdef.segments:
        if name == segment:
            return start
        start += op._attrs.get(name, 0)
    return start


def listed_operands(op: Operation, which: Sequence[int] | None) -> list[int]:
    """The positions a type directive's `operands` names (None: every operand), as far as `op` has them."""
    return list(range(len(op.operands))) if which is None else [i for i in which if i < len(op.operands)]
