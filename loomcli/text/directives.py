"""Each op's syntax, compiled from the format directives of its row.

`loomcli.ir.format` says, as data, what an op's text holds. Here each
directive class gets its syntax: a subclass holding the same fields (copied
from the row's directive) that parses that piece of text into an op and
prints it back, side by side, so a round trip is symmetric by construction.
`FORMATS` maps every declared op to its compiled format, built once at
import; the parser and the printer run it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from loomcli.ir import format as F
from loomcli.ir.attrs import Ident, angled, attribute_text
from loomcli.ir.core import Operation, Signature
from loomcli.ir.ops import OPS, OpDef
from loomcli.ir.types import Type

if TYPE_CHECKING:
    from loomcli.text.parser import Parser
    from loomcli.text.printer import Printer


class Syntax(F.Directive):
    """A directive that parses and prints itself."""

    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        raise NotImplementedError

    def print(self, pr: Printer, op: Operation) -> None:
        raise NotImplementedError


_SYNTAX: dict[type[F.Directive], type[Syntax]] = {}  # a directive class -> its syntax


def _syntax(cls: type[Syntax]) -> type[Syntax]:
    """Register `cls` as the syntax of the directive class it extends."""
    _SYNTAX[cls.__bases__[0]] = cls
    return cls


def compile_directive(d: F.Directive) -> Syntax:
    """The syntax of `d`: its class's, holding `d`'s fields."""
    syntax = object.__new__(_SYNTAX[type(d)])
    name: str
    for name in type(d).__slots__:
        setattr(syntax, name, getattr(d, name))
    return syntax


def compile_format(opdef: OpDef) -> tuple[Syntax, ...]:
    return tuple(compile_directive(d) for d in opdef.format)


def _shown(value: object) -> str:
    """An attribute value as the printer writes it, for messages."""
    return attribute_text(value)


def _workload(op: Operation) -> int:
    """The workload operands before a call's arguments (none for an op whose callee takes none)."""
    return op.attr("nworkload", 0) if "nworkload" in op.opdef.attributes else 0


def _indexed_base(op: Operation) -> int:
    """Position of the indexed base among the operands (after leading values)."""
    return op.opdef.indexed_base


@_syntax
class KindSyntax(F.Kind, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        if not p.at("<"):
            if not self.optional:
                p.fail_expected("`<`")
            if self.flags:
                op.set_attr(self.attr, ())
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
            op.set_attr(self.attr, tuple(w for w in self.words if w in seen))
        else:
            op.set_attr(self.attr, seen[0])

    def print(self, pr: Printer, op: Operation) -> None:
        value = op.attr(self.attr, None)
        if self.flags:
            if value:
                pr.glue("<" + "|".join(value) + ">")
        elif value is not None:
            pr.glue(f"<{value}>")


@_syntax
class SymKindSyntax(F.SymKind, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        if not p.at("<"):
            p.fail_expected("`<`")
        p.advance()
        p.record_loc(op, self.attr)
        op.set_attr(self.attr, p.expect_symbol())
        p.expect(">")

    def print(self, pr: Printer, op: Operation) -> None:
        pr.glue(angled("@" + op.attr(self.attr)))


@_syntax
class PunctSyntax(F.Punct, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(self.text)

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(self.text)


@_syntax
class OperandsSyntax(F.Operands, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        start = len(op.operands)
        if p.at_ssa() and not p.at_results():  # `func.return` then `%x = …` on the next line
            p.parse_operand(op)
            while p.at(","):
                p.advance()
                p.parse_operand(op)
        if self.segment:
            op.set_attr(self.segment, len(op.operands) - start)

    def print(self, pr: Printer, op: Operation) -> None:
        if self.segment:
            start = F.segment_start(op, self.segment)
            values = op.operands[start:start + op.attr(self.segment)]
        else:
            values = op.operands
        if values:
            pr.word(", ".join([pr.value(v) for v in values]))


@_syntax
class LeadingSyntax(F.Leading, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.parse_operand(op)
        if self.sep == ",":
            p.expect(",")
        else:
            p.expect_word(self.sep)

    def print(self, pr: Printer, op: Operation) -> None:
        text = pr.value(op.operands[0])
        pr.word(text + "," if self.sep == "," else f"{text} {self.sep}")


@_syntax
class PredicateSyntax(F.Predicate, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        loc = p.offset
        word = p.expect_ident("a predicate")
        if word not in self.words:
            p.fail("PARSE/007", loc, word=word, op=op.name)
        op.set_attr("predicate", word)
        p.expect(",")

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(op.attr("predicate") + ",")


@_syntax
class LiteralSyntax(F.Literal, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.record_loc(op, self.attr)
        op.set_attr(self.attr, p.parse_literal())

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(pr.literal(op.attr(self.attr)))


@_syntax
class IndexedSyntax(F.Indexed, Syntax):
    __slots__ = ()

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
        op.set_attr("indices", tuple(template))

    def print(self, pr: Printer, op: Operation) -> None:
        template = op.attr("indices")
        start = _indexed_base(op)
        dynamic = iter(op.operands[start + 1:start + 1 + template.count(None)])
        parts = [pr.value(next(dynamic)) if t is None else str(t) for t in template]
        pr.word(f"{pr.value(op.operands[start])}[{', '.join(parts)}]")


@_syntax
class KwParenSyntax(F.KwParen, Syntax):
    __slots__ = ()

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
            op.set_attr(self.attr, p.parse_int())
        elif inner == "lit":
            op.set_attr(self.attr, p.parse_literal())
        elif inner == "lits":
            op.set_attr(self.attr, p.parse_literal_list())
        elif inner == "str":
            op.set_attr(self.attr, p.parse_string())
        elif inner == "ident":
            op.set_attr(self.attr, p.expect_ident("a word"))
        elif inner == "operand":
            p.parse_operand(op)
        elif inner == "operands":
            start = len(op.operands)
            p.parse_operand(op)
            while p.at(","):
                p.advance()
                p.parse_operand(op)
            op.set_attr(self.attr, len(op.operands) - start)
        p.expect(")")

    def print(self, pr: Printer, op: Operation) -> None:
        inner = self.inner
        if inner == "operand":
            index = op.opdef.operand_keywords.index(self.word)
            pr.word(f"{self.word}({pr.value(op.operands[index])})")
            return
        if not op.has_attr(self.attr):
            return
        value = op.attr(self.attr)
        if inner == "operands":
            start = F.segment_start(op, self.attr)
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


@_syntax
class DictSyntax(F.Dict, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        if self.keys is None:
            if p.at("{"):
                p.record_loc(op, self.attr)
                op.set_attr(self.attr, p.parse_dict())
            else:
                op.set_attr(self.attr, {})
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
            if not isinstance(allowed, tuple):  # int
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
        op.set_attr(self.attr, d)

    def print(self, pr: Printer, op: Operation) -> None:
        d = op.attr(self.attr, None)
        if d:
            pr.word(pr.dictionary(d))


@_syntax
class PredsSyntax(F.Preds, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        op.set_attr("preds", p.parse_preds())

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(pr.preds(op.attr("preds")))


@_syntax
class CalleeSyntax(F.Callee, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.record_loc(op, "callee")
        op.set_attr("callee", p.expect_symbol())
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
        op.set_attr("nworkload", nwork)
        ParenOperandsSyntax().parse(p, op)

    def print(self, pr: Printer, op: Operation) -> None:
        n = op.attr("nworkload", 0)
        text = "@" + op.attr("callee")
        if n:
            text += "[" + ", ".join(pr.value(v) for v in op.operands[:n]) + "]"
        text += "(" + ", ".join(pr.value(v) for v in op.operands[n:]) + ")"
        pr.word(text)


@_syntax
class ParenOperandsSyntax(F.ParenOperands, Syntax):
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
        start = _workload(op)
        pr.glue("(" + ", ".join(pr.value(v) for v in op.operands[start:]) + ")")


@_syntax
class PackSyntax(F.Pack, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect("[")
        aligns: list[int] = []
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
        op.set_attr("aligns", tuple(aligns))

    def print(self, pr: Printer, op: Operation) -> None:
        parts = [f"align({a}) {pr.value(v)}" for a, v in zip(op.attr("aligns"), op.operands)]
        pr.word("[" + ", ".join(parts) + "]")


@_syntax
class TypeSameSyntax(F.TypeSame, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(":")
        t = p.parse_type()
        if self.legacy_arrow and (p.at("->") or p.at(",")):
            p.fail_legacy(op, "->")
        for i in F.listed_operands(op, self.operands):
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
            t = op.operands[F.listed_operands(op, self.operands)[0]].type
        pr.word(": " + pr.type(t))


@_syntax
class TypeEachSyntax(F.TypeEach, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        which = F.listed_operands(op, self.operands)
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
        which = F.listed_operands(op, self.operands)
        if which:
            pr.word(": " + ", ".join(pr.type(op.operands[i].type) for i in which))


@_syntax
class TypeArrowSyntax(F.TypeArrow, Syntax):
    __slots__ = ()

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


@_syntax
class CallTypesSyntax(F.CallTypes, Syntax):
    __slots__ = ()

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
        op.set_attr("written_nworkload", nwork)
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
        n = _workload(op)
        types = [pr.type(v.type) for v in op.operands]
        text = ": "
        if n:
            text += "[" + ", ".join(types[:n]) + "]"
        text += "(" + ", ".join(types[n:]) + ")"
        if op.results:
            text += " -> (" + ", ".join(pr.type(r.type) for r in op.results) + ")"
        pr.word(text)


@_syntax
class ResultTypesSyntax(F.ResultTypes, Syntax):
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


@_syntax
class TypeAttrSyntax(F.TypeAttr, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(":")
        p.record_loc(op, "type")
        op.set_attr("type", p.parse_type())

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(": " + pr.type(op.attr("type")))


@_syntax
class RegionSyntax(F.Region, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.parse_region(op, self.index)

    def print(self, pr: Printer, op: Operation) -> None:
        pr.region(op, self.index)


@_syntax
class ElseSyntax(F.Else, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        written = p.at_word("else")
        if written:
            p.advance()
        op.set_attr("else", written)
        p.parse_region(op, 1, written=written)

    def print(self, pr: Printer, op: Operation) -> None:
        if op.attr("else", None) or not pr.region_is_trivial(op.regions[1]):
            pr.word("else")
            pr.region(op, 1)


@_syntax
class BindingsSyntax(F.Bindings, Syntax):
    __slots__ = ()

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


@_syntax
class ForHeaderSyntax(F.ForHeader, Syntax):
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


@_syntax
class DoSyntax(F.Do, Syntax):
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


@_syntax
class ModifiersSyntax(F.Modifiers, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        rank = -1
        while p.at_ident() and not p.at_word("where"):
            loc = p.offset
            word = p.text
            if word not in self.allowed or F.MODIFIER_RANK.get(word, -1) <= rank:
                p.fail("PARSE/007", loc, word=word, op=op.name)
            rank = F.MODIFIER_RANK[word]
            p.advance()
            if word in ("public", "retain", "pure"):
                op.set_attr(word, True)
            elif word in ("host", "device"):
                op.set_attr("convention", word)
            elif word in ("inline", "noinline"):
                op.set_attr("inlining", word)
            elif word == "target":
                p.expect("(")
                p.record_loc(op, "target")
                op.set_attr("target", p.expect_symbol())
                p.expect(")")
            elif word == "export":
                p.expect("(")
                p.record_loc(op, "export")
                op.set_attr("export", p.parse_string())
                p.expect(")")
            elif word == "priority":
                p.expect("(")
                p.record_loc(op, "priority")
                op.set_attr("priority", p.parse_int())
                p.expect(")")
            elif word == "requires":
                p.record_loc(op, "requires")
                op.set_attr("requires", p.parse_attr_list())

    def print(self, pr: Printer, op: Operation) -> None:
        a = dict(op.attr_items())
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


@_syntax
class SymNameSyntax(F.SymName, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.record_loc(op, self.attr)
        op.set_attr(self.attr, p.expect_symbol())

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word("@" + op.attr(self.attr))


@_syntax
class SigArgsSyntax(F.SigArgs, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        if not self.glued:
            p.expect_word(self.attr)
        if not p.at("("):
            p.fail_expected("`(`")
        args = p.parse_signature_args(op, self.region)
        op.set_attr(self.attr, Signature(args))

    def print(self, pr: Printer, op: Operation) -> None:
        sig: Signature = op.attr(self.attr)
        text = "(" + ", ".join(f"{pr.value(a)}: {pr.type(a.type)}" for a in sig.args) + ")"
        if self.glued:
            pr.glue(text)
        else:
            pr.word(self.attr + text)


@_syntax
class SigResultsSyntax(F.SigResults, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        if p.at("->"):
            p.advance()
            p.expect("(")
            p.record_loc(op, "results")
            if not p.at(")"):
                op.attr("sig").results = p.parse_type_list(")")
            p.expect(")")

    def print(self, pr: Printer, op: Operation) -> None:
        results = op.attr("sig").results
        if results:
            pr.word("-> (" + ", ".join(pr.type(t) for t in results) + ")")


@_syntax
class WhereSyntax(F.Where, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        if p.at_word("where"):
            p.advance()
            op.attr(self.attr).where = p.parse_preds()

    def print(self, pr: Printer, op: Operation) -> None:
        where = op.attr(self.attr).where
        if where is not None:
            pr.word("where " + pr.preds(where))


@_syntax
class ConfigDeclTypeSyntax(F.ConfigDeclType, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.expect(":")
        if p.at_ssa():
            args = p.parse_local_binding(op)
            op.set_attr("sig", Signature(args))
            p.expect_word("where")
            op.attr("sig").where = p.parse_preds()
            p.close_pending_scope()
            op.set_attr("type", args[0].type)
        else:
            p.record_loc(op, "type")
            op.set_attr("type", p.parse_type())

    def print(self, pr: Printer, op: Operation) -> None:
        sig = op.attr("sig", None)
        if sig is None:
            pr.word(": " + pr.type(op.attr("type")))
        else:
            subject = sig.args[0]
            pr.word(f": {pr.value(subject)}: {pr.type(subject.type)} where {pr.preds(sig.where or [])}")


@_syntax
class SymbolListSyntax(F.SymbolList, Syntax):
    __slots__ = ()

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
        op.set_attr("symbols", tuple(names))

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word("[" + ", ".join("@" + s for s in sorted(set(op.attr("symbols")))) + "]")


@_syntax
class StringAttrSyntax(F.StringAttr, Syntax):
    __slots__ = ()

    def parse(self, p: Parser, op: Operation) -> None:
        p.record_loc(op, self.attr)
        op.set_attr(self.attr, p.parse_string())

    def print(self, pr: Printer, op: Operation) -> None:
        pr.word(pr.literal(op.attr(self.attr)))



# Every declared op's compiled format (the op table never changes after import).
FORMATS: Mapping[OpDef, tuple[Syntax, ...]] = {opdef: compile_format(opdef) for opdef in OPS.values()}
