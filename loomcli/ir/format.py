"""Textual format directives.

An op's format is a tuple of directives; each directive knows how to parse
its piece of text into the operation and how to print it back, so a round
trip is symmetric by construction. Directives talk to the parser and printer
through a small interface (`loomcli.text.parser.Parser`,
`loomcli.text.printer.Printer`).

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

from loomcli.ir.attrs import Ident, angled, attribute_text
from loomcli.ir.core import Signature
from loomcli.ir.types import Type

if TYPE_CHECKING:
    from loomcli.ir.core import Operation
    from loomcli.text.parser import Parser
    from loomcli.text.printer import Printer


class Directive:
    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        """The attributes this directive stores on an op: what `Operation.attr`
        may ask for (derived, with the op's other directives, into its row)."""
        return ()

    def parse(self, p: Parser, op: Operation) -> None:
        raise NotImplementedError

    def print(self, pr: Printer, op: Operation) -> None:
        raise NotImplementedError


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

    def parse(self, p: Parser, op: Operation) -> None:
        if not p.at("<"):
            if not self.optional:
                p.fail_expected("`<`")
            if self.flags:
                op.attrs[self.attr] = ()
            return
        p.advance()
        seen: list[str] = []
        empty = self.flags and p.at(">")  # an empty `<>` is no flags (section 17.7)
        while not empty:
            loc = p.offset
            word = p.expect_ident("a kind")
            if self.flags and word == "fast" and "reassoc" in self.words:
                seen.extend(self.words)
            elif word not in self.words:
                p.fail("PARSE/007", loc, word=word, op=op.name)
            else:
                seen.append(word)
            if not p.at("|"):
                break
            p.advance()
            if not self.flags:  # section 17.14: ops with a kind take no flags
                p.fail("PARSE/007", p.offset, word=p.text, op=op.name)
        p.expect(">")
        if self.flags:
            op.attrs[self.attr] = tuple(w for w in self.words if w in seen)
        else:
            op.attrs[self.attr] = seen[0]

    def print(self, pr: Printer, op: Operation) -> None:
        value = op.attrs.get(self.attr)
        if self.flags:
            if value:
                pr.glue("<" + "|".join(value) + ">")
        elif value is not None:
            pr.glue(f"<{value}>")


class SymKind(Directive):
    """`<@sym>` glued to the op name (template families, benchmarked cases)."""

    __slots__ = ("attr",)

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def parse(self, p: Parser, op: Operation) -> None:
        if not p.at("<"):
            p.fail_expected("`<`")
        p.advance()
        p.record_loc(op, self.attr)
        op.attrs[self.attr] = p.expect_symbol()
        p.expect(">")

    def print(self, pr: Printer, op: Operation) -> None:
        pr.glue(angled("@" + op.attrs[self.attr]))


class Keyword(Directive):
    __slots__ = ("word",)

    def __init__(self, word: str) -> None:
        self.word = word

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect_word(self.word)

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(self.word)


class Punct(Directive):
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(self.text)

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(self.text)


# ---------------------------------------------------------------- values


class Operands(Directive):
    """`%a, %b, ...`: any number is parsed; the verifier checks the count."""

    __slots__ = ("segment",)

    def __init__(self, segment: str | None = None) -> None:
        self.segment = segment

    def parse(self, p: Parser, op: Operation) -> None:
        start = len(op.operands)
        if p.at_ssa() and not p.at_results():  # `func.return` then `%x = …` on the next line
            p.parse_operand(op)
            while p.at(","):
                p.advance()
                p.parse_operand(op)
        if self.segment:
            op.attrs[self.segment] = len(op.operands) - start

    def print(self, pr: Printer, op: Operation) -> None:
        if self.segment:
            start = _segment_start(op, self.segment)
            values = op.operands[start:start + op.attrs[self.segment]]
        else:
            values = op.operands
        if values:
            pr.word(", ".join(pr.value(v) for v in values))


def _segment_start(op: Operation, segment: str) -> int:
    """Operands before a named segment are the ones its op declares earlier."""
    start = 0
    for name in op.opdef.segments:
        if name == segment:
            return start
        start += op.attrs.get(name, 0)
    return start


class Leading(Directive):
    """One operand followed by `,` or a word (`%x, %v[...]`, `%x into %v[...]`)."""

    __slots__ = ("sep",)

    def __init__(self, sep: str = ",") -> None:
        self.sep = sep

    def parse(self, p: Parser, op: Operation) -> None:
        p.parse_operand(op)
        if self.sep == ",":
            p.expect(",")
        else:
            p.expect_word(self.sep)

    def print(self, pr: Printer, op: Operation) -> None:
        text = pr.value(op.operands[0])
        pr.word(text + "," if self.sep == "," else f"{text} {self.sep}")


class Predicate(Directive):
    """A comparison word followed by `,` (`index.cmp ult, ...`)."""

    __slots__ = ("words",)

    def attributes(self) -> tuple[str, ...]:
        return ("predicate",)

    def __init__(self, words: Sequence[str]) -> None:
        self.words = tuple(words)

    def parse(self, p: Parser, op: Operation) -> None:
        loc = p.offset
        word = p.expect_ident("a predicate")
        if word not in self.words:
            p.fail("PARSE/007", loc, word=word, op=op.name)
        op.attrs["predicate"] = word
        p.expect(",")

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(op.attrs["predicate"] + ",")


class Literal(Directive):
    """A literal attribute (`64`, `0.5`, `true`, `"s"`); typed by the verifier."""

    __slots__ = ("attr",)

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str = "value") -> None:
        self.attr = attr

    def parse(self, p: Parser, op: Operation) -> None:
        p.record_loc(op, self.attr)
        op.attrs[self.attr] = p.parse_literal()

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(pr.literal(op.attrs[self.attr]))


class Indexed(Directive):
    """`%v[%i, 0]`: a base operand and per-axis indices (values or literals >= 0)."""

    __slots__ = ("literals",)

    def attributes(self) -> tuple[str, ...]:
        return ("indices",)

    def __init__(self, literals: bool = True) -> None:
        self.literals = literals

    def parse(self, p: Parser, op: Operation) -> None:
        p.parse_operand(op)
        if not p.at("["):
            p.fail_expected("`[`")
        p.advance()
        template: list[int | None] = []
        while True:
            if p.at_ssa():
                p.parse_operand(op)
                template.append(None)
            elif self.literals and p.at_int():
                p.record_loc(op, f"index{len(template)}")
                template.append(p.parse_int())
            else:
                p.fail_expected("an index")
            if not p.at(","):
                break
            p.advance()
        p.expect("]")
        op.attrs["indices"] = tuple(template)

    def print(self, pr: Printer, op: Operation) -> None:
        template = op.attrs["indices"]
        start = _indexed_base(op)
        dynamic = iter(op.operands[start + 1:start + 1 + template.count(None)])
        parts = [pr.value(next(dynamic)) if t is None else str(t) for t in template]
        pr.word(f"{pr.value(op.operands[start])}[{', '.join(parts)}]")


def _shown(value: object) -> str:
    """An attribute value as the printer writes it, for messages."""
    return attribute_text(value)


def _indexed_base(op: Operation) -> int:
    """Position of the indexed base among the operands (after leading values)."""
    return op.opdef.indexed_base


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

    def parse(self, p: Parser, op: Operation) -> None:
        if not p.at_word(self.word):
            if self.optional:
                return
            if p.at_ident():
                p.fail("PARSE/007", p.offset, word=p.text, op=op.name)
            p.fail_expected(f"`{self.word}(`")
        p.advance()
        if not p.at("("):
            p.fail_expected("`(`")
        p.advance()
        p.record_loc(op, self.attr)
        inner = self.inner
        if inner == "int":
            op.attrs[self.attr] = p.parse_int()
        elif inner == "lit":
            op.attrs[self.attr] = p.parse_literal()
        elif inner == "lits":
            op.attrs[self.attr] = p.parse_literal_list()
        elif inner == "str":
            op.attrs[self.attr] = p.parse_string()
        elif inner == "ident":
            op.attrs[self.attr] = p.expect_ident("a word")
        elif inner == "operand":
            p.parse_operand(op)
        elif inner == "operands":
            start = len(op.operands)
            p.parse_operand(op)
            while p.at(","):
                p.advance()
                p.parse_operand(op)
            op.attrs[self.attr] = len(op.operands) - start
        p.expect(")")

    def print(self, pr: Printer, op: Operation) -> None:
        inner = self.inner
        if inner == "operand":
            index = op.opdef.operand_keywords.index(self.word)
            pr.word(f"{self.word}({pr.value(op.operands[index])})")
            return
        if self.attr not in op.attrs:
            return
        value = op.attrs[self.attr]
        if inner == "operands":
            start = _segment_start(op, self.attr)
            text = ", ".join(pr.value(v) for v in op.operands[start:start + value])
        elif inner == "int":
            text = str(value)
        elif inner in ("lit", "str"):
            text = pr.literal(value)
        elif inner == "lits":
            text = "[" + ", ".join(pr.literal(v) for v in value) + "]"
        else:
            text = str(value)
        pr.word(f"{self.word}({text})")


class Dict(Directive):
    """`{k = v, ...}` attribute dictionary; printed sorted, omitted when empty.

    With `keys` the dictionary is required and holds exactly those keys, each
    mapped to its allowed enum words or to `int`: a missing key is PARSE/003
    (section 17.7), an unknown key or word PARSE/007 (section 17.11)."""

    __slots__ = ("attr", "keys")

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str = "dict", keys: dict[str, tuple[str, ...] | type] | None = None) -> None:
        self.attr = attr
        self.keys = keys

    def parse(self, p: Parser, op: Operation) -> None:
        if self.keys is None:
            if p.at("{"):
                p.record_loc(op, self.attr)
                op.attrs[self.attr] = p.parse_dict()
            else:
                op.attrs[self.attr] = {}
            return
        if not p.at("{"):
            p.fail_expected(f"`{{{next(iter(self.keys))} = …}}`")
        p.record_loc(op, self.attr)
        offsets: dict[str, tuple[int, int]] = {}
        d = p.parse_dict(offsets)
        for key, value in d.items():
            allowed = self.keys.get(key)
            key_off, value_off = offsets[key]
            if allowed is None:
                p.fail("PARSE/007", key_off, word=key, op=op.name)
            if allowed is int:
                if not isinstance(value, int) or isinstance(value, bool):
                    p.fail("PARSE/003", value_off, expected="an integer", found=f"`{_shown(value)}`")
            elif not isinstance(value, Ident):
                p.fail("PARSE/003", value_off, expected="one of " + ", ".join(f"`{w}`" for w in allowed),
                       found=f"`{_shown(value)}`")
            elif value.text not in allowed:
                p.fail("PARSE/007", value_off, word=value.text, op=op.name)
        for key in self.keys:
            if key not in d:
                p.fail("PARSE/003", p.starts[p.i - 1], expected=f"`{key}`", found="`}`")
        op.attrs[self.attr] = d

    def print(self, pr: Printer, op: Operation) -> None:
        d = op.attrs.get(self.attr)
        if d:
            pr.word(pr.dictionary(d))


class Preds(Directive):
    """`[pred, ...]` of `index.assume`."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("preds",)

    def parse(self, p: Parser, op: Operation) -> None:
        op.attrs["preds"] = p.parse_preds()

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(pr.preds(op.attrs["preds"]))


class Callee(Directive):
    """`@k[%w...](%a...)` (launches) or `@f(%a...)` (calls)."""

    __slots__ = ("workload",)

    def attributes(self) -> tuple[str, ...]:
        return ("callee", "nworkload")

    def __init__(self, workload: bool) -> None:
        self.workload = workload

    def parse(self, p: Parser, op: Operation) -> None:
        p.record_loc(op, "callee")
        op.attrs["callee"] = p.expect_symbol()
        nwork = 0
        if self.workload and p.at("["):
            p.advance()
            if p.at("]"):
                p.fail_legacy(op, "[]")
            p.parse_operand(op)
            while p.at(","):
                p.advance()
                p.parse_operand(op)
            p.expect("]")
            nwork = len(op.operands)
        op.attrs["nworkload"] = nwork
        ParenOperands().parse(p, op)

    def print(self, pr: Printer, op: Operation) -> None:
        n = op.attrs.get("nworkload", 0)
        text = "@" + op.attrs["callee"]
        if n:
            text += "[" + ", ".join(pr.value(v) for v in op.operands[:n]) + "]"
        text += "(" + ", ".join(pr.value(v) for v in op.operands[n:]) + ")"
        pr.word(text)


class ParenOperands(Directive):
    """`(%a, %b)` glued to what precedes it."""

    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        if not p.at("("):
            p.fail_expected("`(`")
        p.advance()
        if not p.at(")"):
            p.parse_operand(op)
            while p.at(","):
                p.advance()
                p.parse_operand(op)
        p.expect(")")

    def print(self, pr: Printer, op: Operation) -> None:
        start = op.attrs.get("nworkload", 0)
        pr.glue("(" + ", ".join(pr.value(v) for v in op.operands[start:]) + ")")


class Pack(Directive):
    """`[align(16) %n0, align(256) %n1]` of `buffer.pack`."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("aligns",)

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect("[")
        aligns = []
        while True:
            p.expect_word("align")
            if not p.at("("):
                p.fail_expected("`(`")
            p.advance()
            p.record_loc(op, f"align{len(aligns)}")
            aligns.append(p.parse_int())
            p.expect(")")
            p.parse_operand(op)
            if not p.at(","):
                break
            p.advance()
        p.expect("]")
        op.attrs["aligns"] = tuple(aligns)

    def print(self, pr: Printer, op: Operation) -> None:
        parts = [f"align({a}) {pr.value(v)}" for a, v in zip(op.attrs["aligns"], op.operands)]
        pr.word("[" + ", ".join(parts) + "]")


# ---------------------------------------------------------------- types


def _which(op: Operation, which: Sequence[int] | None) -> list[int]:
    return list(range(len(op.operands))) if which is None else [i for i in which if i < len(op.operands)]


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

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(":")
        t = p.parse_type()
        if self.legacy_arrow and (p.at("->") or p.at(",")):
            p.fail_legacy(op, "->")
        for i in _which(op, self.operands):
            p.write_type(op, i, t)
        if self.result is True:
            p.result_types.append(t)
        elif self.result == "pack":
            p.result_types.extend([t] * (len(op.operands) + 1))
        elif isinstance(self.result, Type):
            p.result_types.append(self.result)

    def print(self, pr: Printer, op: Operation) -> None:
        if self.result is True or self.result == "pack":
            t = op.results[0].type
        else:
            t = op.operands[_which(op, self.operands)[0]].type
        pr.word(": " + pr.type(t))


class TypeEach(Directive):
    """`: T0, T1, ...` one type per listed operand; results mirror all
    operands (`mirror=True`) or one of them (`mirror=k`)."""

    __slots__ = ("legacy_arrow", "mirror", "operands")

    def __init__(self, operands: Sequence[int] | None = None, mirror: bool | int | None = None,
                 legacy_arrow: bool = False) -> None:
        self.operands = operands
        self.mirror = mirror
        self.legacy_arrow = legacy_arrow

    def parse(self, p: Parser, op: Operation) -> None:
        which = _which(op, self.operands)
        types: list[Type] = []
        if p.at(":"):
            p.advance()
            types.append(p.parse_type())
            while p.at(","):
                p.advance()
                types.append(p.parse_type())
        elif which:
            p.fail_expected("`:`")
        if self.legacy_arrow and p.at("->"):
            p.fail_legacy(op, "->")
        if len(types) != len(which):
            p.count_error(op, len(which), "types", len(types))
        for i, t in zip(which, types):
            p.write_type(op, i, t)
        if self.mirror is True:
            p.result_types.extend(types)
        elif self.mirror is not None and self.mirror is not False:
            k = which.index(self.mirror) if self.mirror in which else -1
            if 0 <= k < len(types):
                p.result_types.append(types[k])

    def print(self, pr: Printer, op: Operation) -> None:
        which = _which(op, self.operands)
        if which:
            pr.word(": " + ", ".join(pr.type(op.operands[i].type) for i in which))


class TypeArrow(Directive):
    """`: A to R` / `: A, B -> R`: written types of the listed operands, then the result."""

    __slots__ = ("operands", "sep")

    def __init__(self, operands: Sequence[int], sep: str = "->") -> None:
        self.operands = tuple(operands)
        self.sep = sep

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(":")
        types = [p.parse_type()]
        while p.at(","):
            p.advance()
            types.append(p.parse_type())
        if self.sep == "to":
            p.expect_word("to")
        else:
            p.expect("->")
        result = p.parse_type()
        if len(types) != len(self.operands):
            p.count_error(op, len(self.operands), "types", len(types))
        for i, t in zip(self.operands, types):
            if i < len(op.operands):
                p.write_type(op, i, t)
        p.result_types.append(result)

    def print(self, pr: Printer, op: Operation) -> None:
        ins = ", ".join(pr.type(op.operands[i].type) for i in self.operands)
        pr.word(f": {ins} {self.sep} {pr.type(op.results[0].type)}")


class CallTypes(Directive):
    """`: [W...](D...) -> (R...)`; `[...]` iff there are workload operands,
    `-> (...)` iff there are results."""

    __slots__ = ("results",)

    def attributes(self) -> tuple[str, ...]:
        return ("written_nworkload",)

    def __init__(self, results: bool = True) -> None:
        self.results = results

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(":")
        written: list[Type] = []
        nwork = 0
        if p.at("["):
            p.advance()
            if p.at("]"):
                p.fail_legacy(op, "[]")
            written.extend(p.parse_type_list("]"))
            p.expect("]")
            nwork = len(written)
            if not p.at("("):
                p.fail_expected("`(`")
        p.expect("(")
        if not p.at(")"):
            written.extend(p.parse_type_list(")"))
        p.expect(")")
        op.attrs["written_nworkload"] = nwork
        if len(written) != len(op.operands):
            p.count_error(op, len(op.operands), "operand types", len(written))
        else:
            for i, t in enumerate(written):
                p.write_type(op, i, t)
        if self.results and p.at("->"):
            p.advance()
            p.expect("(")
            if not p.at(")"):
                p.result_types.extend(p.parse_type_list(")"))
            p.expect(")")

    def print(self, pr: Printer, op: Operation) -> None:
        n = op.attrs.get("nworkload", 0)
        types = [pr.type(v.type) for v in op.operands]
        text = ": "
        if n:
            text += "[" + ", ".join(types[:n]) + "]"
        text += "(" + ", ".join(types[n:]) + ")"
        if op.results:
            text += " -> (" + ", ".join(pr.type(r.type) for r in op.results) + ")"
        pr.word(text)


class ResultTypes(Directive):
    """`-> (T, ...)`; dropped when there are no results."""

    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        if p.at("->"):
            p.advance()
            p.expect("(")
            if not p.at(")"):
                p.result_types.extend(p.parse_type_list(")"))
            p.expect(")")

    def print(self, pr: Printer, op: Operation) -> None:
        if op.results:
            pr.word("-> (" + ", ".join(pr.type(r.type) for r in op.results) + ")")


class TypeAttr(Directive):
    """`: T` stored as the `type` attribute (config ops)."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("type",)

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(":")
        p.record_loc(op, "type")
        op.attrs["type"] = p.parse_type()

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(": " + pr.type(op.attrs["type"]))


# ---------------------------------------------------------------- regions and control flow


class Region(Directive):
    """`{ ... }` for region `index`; continuation words print on the `}` line."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def parse(self, p: Parser, op: Operation) -> None:
        p.parse_region(op, self.index)

    def print(self, pr: Printer, op: Operation) -> None:
        pr.region(op, self.index)


class Else(Directive):
    """Optional `else { ... }` of `scf.if`; printed iff written or non-empty."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("else",)

    def parse(self, p: Parser, op: Operation) -> None:
        written = p.at_word("else")
        if written:
            p.advance()
        op.attrs["else"] = written
        p.parse_region(op, 1, written=written)

    def print(self, pr: Printer, op: Operation) -> None:
        if op.attrs.get("else") or not pr.region_is_trivial(op.regions[1]):
            pr.word("else")
            pr.region(op, 1)


class Bindings(Directive):
    """`(%acc = %init : T, ...)`: carried values; init operands plus region
    arguments of region 0 (after any `leading` arguments such as a loop IV)."""

    __slots__ = ("optional",)

    def __init__(self, optional: bool) -> None:
        self.optional = optional

    def parse(self, p: Parser, op: Operation) -> None:
        if not p.at("("):
            if not self.optional:
                p.fail_expected("`(`")
            return
        p.advance()
        if not p.at(")"):
            while True:
                name_off = p.offset
                name = p.expect_ssa()
                p.expect("=")
                p.parse_operand(op)
                p.expect(":")
                t = p.parse_type()
                p.write_type(op, len(op.operands) - 1, t)
                p.pending_args.append((name, t, name_off))
                if not p.at(","):
                    break
                p.advance()
        p.expect(")")

    def print(self, pr: Printer, op: Operation) -> None:
        lead = op.opdef.leading_operands
        inits = op.operands[lead:]
        args = op.regions[0].args[len(op.regions[0].args) - len(inits):]
        if not inits and self.optional:
            return
        parts = [f"{pr.value(a)} = {pr.value(v)} : {pr.type(a.type)}" for a, v in zip(args, inits)]
        pr.glue("(" + ", ".join(parts) + ")")


class ForHeader(Directive):
    """`%i = [%lo to %hi step %s]` of `scf.for`."""

    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        name_off = p.offset
        name = p.expect_ssa()
        p.expect("=")
        p.expect("[")
        p.parse_operand(op)
        p.expect_word("to")
        p.parse_operand(op)
        p.expect_word("step")
        p.parse_operand(op)
        p.expect("]")
        iv_type = op.operands[0].type
        p.pending_args.append((name, iv_type, name_off))

    def print(self, pr: Printer, op: Operation) -> None:
        lo, hi, step = (pr.value(v) for v in op.operands[:3])
        pr.word(f"{pr.value(op.regions[0].args[0])} = [{lo} to {hi} step {step}]")


class Do(Directive):
    """`do(%a: T, ...) {` of `scf.while`; `()` dropped when empty."""

    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect_word("do")
        if p.at("("):
            p.parse_arg_list()
        p.parse_region(op, 1)

    def print(self, pr: Printer, op: Operation) -> None:
        args = op.regions[1].args
        if args:
            pr.word("do(" + ", ".join(f"{pr.value(a)}: {pr.type(a.type)}" for a in args) + ")")
        else:
            pr.word("do")
        pr.region(op, 1)


# ---------------------------------------------------------------- symbols and signatures

MODIFIER_ORDER = ("public", "retain", "host", "device", "pure", "inline", "noinline",
                  "target", "export", "requires", "priority")
_MOD_RANK = {"public": 0, "retain": 1, "host": 2, "device": 2, "pure": 3, "inline": 4, "noinline": 4,
             "target": 5, "export": 6, "requires": 7, "priority": 8}


class Modifiers(Directive):
    """Modifier words in their fixed order (LANGUAGE.md 7.7); out of order,
    repeated or not allowed here: PARSE/007."""

    __slots__ = ("allowed",)

    def attributes(self) -> tuple[str, ...]:
        names = {"host": "convention", "device": "convention", "inline": "inlining", "noinline": "inlining"}
        return tuple(dict.fromkeys(names.get(word, word) for word in sorted(self.allowed, key=lambda w: _MOD_RANK[w])))

    def __init__(self, allowed: Sequence[str]) -> None:
        self.allowed = frozenset(allowed)

    def parse(self, p: Parser, op: Operation) -> None:
        rank = -1
        while p.at_ident() and not p.at_word("where"):
            loc = p.offset
            word = p.text
            if word not in self.allowed or _MOD_RANK.get(word, -1) <= rank:
                p.fail("PARSE/007", loc, word=word, op=op.name)
            rank = _MOD_RANK[word]
            p.advance()
            if word in ("public", "retain", "pure"):
                op.attrs[word] = True
            elif word in ("host", "device"):
                op.attrs["convention"] = word
            elif word in ("inline", "noinline"):
                op.attrs["inlining"] = word
            elif word == "target":
                p.expect("(")
                p.record_loc(op, "target")
                op.attrs["target"] = p.expect_symbol()
                p.expect(")")
            elif word == "export":
                p.expect("(")
                p.record_loc(op, "export")
                op.attrs["export"] = p.parse_string()
                p.expect(")")
            elif word == "priority":
                p.expect("(")
                p.record_loc(op, "priority")
                op.attrs["priority"] = p.parse_int()
                p.expect(")")
            elif word == "requires":
                p.record_loc(op, "requires")
                op.attrs["requires"] = p.parse_attr_list()

    def print(self, pr: Printer, op: Operation) -> None:
        a = op.attrs
        for word in ("public", "retain"):
            if a.get(word):
                pr.word(word)
        if "convention" in a:
            pr.word(a["convention"])
        if a.get("pure"):
            pr.word("pure")
        if "inlining" in a:
            pr.word(a["inlining"])
        if "target" in a:
            pr.word(f"target(@{a['target']})")
        if "export" in a:
            pr.word(f"export({pr.literal(a['export'])})")
        if "requires" in a:
            pr.word("requires " + pr.attribute(a["requires"]))
        if a.get("priority"):
            pr.word(f"priority({a['priority']})")


class SymName(Directive):
    """The `@name` an op defines (or, with attr="ref"/"callee", uses)."""

    __slots__ = ("attr",)

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str = "sym") -> None:
        self.attr = attr

    def parse(self, p: Parser, op: Operation) -> None:
        p.record_loc(op, self.attr)
        op.attrs[self.attr] = p.expect_symbol()

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word("@" + op.attrs[self.attr])


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

    def parse(self, p: Parser, op: Operation) -> None:
        if not self.glued:
            p.expect_word(self.attr)
        if not p.at("("):
            p.fail_expected("`(`")
        args = p.parse_signature_args(op, self.region)
        op.attrs[self.attr] = Signature(args)

    def print(self, pr: Printer, op: Operation) -> None:
        sig: Signature = op.attrs[self.attr]
        text = "(" + ", ".join(f"{pr.value(a)}: {pr.type(a.type)}" for a in sig.args) + ")"
        if self.glued:
            pr.glue(text)
        else:
            pr.word(self.attr + text)


class SigResults(Directive):
    """`-> (T, ...)` of a signature; results are static (TYPE/003)."""

    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        if p.at("->"):
            p.advance()
            p.expect("(")
            p.record_loc(op, "results")
            if not p.at(")"):
                op.attrs["sig"].results = p.parse_type_list(")")
            p.expect(")")

    def print(self, pr: Printer, op: Operation) -> None:
        results = op.attrs["sig"].results
        if results:
            pr.word("-> (" + ", ".join(pr.type(t) for t in results) + ")")


class Where(Directive):
    """Optional `where [preds]` for the signature in `attr`."""

    __slots__ = ("attr",)

    def __init__(self, attr: str = "sig") -> None:
        self.attr = attr

    def parse(self, p: Parser, op: Operation) -> None:
        if p.at_word("where"):
            p.advance()
            op.attrs[self.attr].where = p.parse_preds()

    def print(self, pr: Printer, op: Operation) -> None:
        where = op.attrs[self.attr].where
        if where is not None:
            pr.word("where " + pr.preds(where))


class ConfigDeclType(Directive):
    """`: T` or `: %v: T where [preds]` of `config.decl`."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("sig", "type")

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(":")
        if p.at_ssa():
            args = p.parse_local_binding(op)
            op.attrs["sig"] = Signature(args)
            p.expect_word("where")
            op.attrs["sig"].where = p.parse_preds()
            p.close_pending_scope()
            op.attrs["type"] = args[0].type
        else:
            p.record_loc(op, "type")
            op.attrs["type"] = p.parse_type()

    def print(self, pr: Printer, op: Operation) -> None:
        sig = op.attrs.get("sig")
        if sig is None:
            pr.word(": " + pr.type(op.attrs["type"]))
        else:
            subject = sig.args[0]
            pr.word(f": {pr.value(subject)}: {pr.type(subject.type)} where {pr.preds(sig.where or [])}")


class SymbolList(Directive):
    """`[@a, @b]` of `module.import`, printed sorted."""

    __slots__ = ()

    def attributes(self) -> tuple[str, ...]:
        return ("symbols",)

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect("[")
        names: list[str] = []
        while True:
            p.record_loc(op, f"symbols{len(names)}")
            names.append(p.expect_symbol())
            if not p.at(","):
                break
            p.advance()
        p.expect("]")
        op.attrs["symbols"] = tuple(names)

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word("[" + ", ".join("@" + s for s in sorted(set(op.attrs["symbols"]))) + "]")


class StringAttr(Directive):
    __slots__ = ("attr",)

    def attributes(self) -> tuple[str, ...]:
        return (self.attr,)

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def parse(self, p: Parser, op: Operation) -> None:
        p.record_loc(op, self.attr)
        op.attrs[self.attr] = p.parse_string()

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(pr.literal(op.attrs[self.attr]))


