"""The Loom text parser.

Phases (LANGUAGE.md section 17 item 9): the first syntax error stops
(`_SyntaxStop`); names are resolved per isolated scope while parsing, and the
first PARSE/001/002 stops once the whole file is read; everything else
(DOMINANCE/*, counts, terminators) is collected for the verifier's sorted
report. Each op's syntax comes from its `OpDef.format` directives, compiled
by `loomcli.text.directives`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, NoReturn

from loomcli.diagnostics import CompileError, Diagnostic, did_you_mean
from loomcli.ir.attrs import PREDICATE_ARITY, HashAttr, Ident, KeyParam, Pred, SymbolRef
from loomcli.ir.core import DETACHED, MAX_DEPTH, BlockArgument, LocalName, Module, Operation, Region, Value
from loomcli.ir.gcpause import gc_paused
from loomcli.ir.ops import COMMAND_PROGRAM_DECL, KERNEL_DEF, OPS, RENAMED_OPS, OpDef
from loomcli.ir.types import ERROR, SCALAR_TYPES, ShapedType, Type
from loomcli.text.directives import FORMATS
from loomcli.text.lexer import (
    EOF,
    FLOAT,
    HASH,
    IDENT,
    INT,
    INVALID,
    NEGIDENT,
    PUNCT,
    SHAPE,
    SSA,
    STRING,
    SYM,
    Tokens,
    tokenize,
)

_SHAPE_RE = re.compile(r"(view|tensor|vector)<((?:(?:[0-9]+|\[%(?:[A-Za-z_$][A-Za-z0-9_$-]*|[0-9]+)\])x)+)"
                       r"([A-Za-z0-9_]+)>\Z")
_DIM_RE = re.compile(r"([0-9]+|\[%[^\]]+\])x")
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# Identifiers that are literals, type or op names: never an op's unknown keyword.
_NOT_KEYWORDS = frozenset({"true", "false", "inf", "nan", *SCALAR_TYPES, *OPS, *RENAMED_OPS})


class _SyntaxStop(Exception):
    def __init__(self, diag: Diagnostic) -> None:
        self.diag = diag


class _IsolatedScope:
    """Names of one isolated region (or a declaration's signature)."""

    __slots__ = ("defined", "owner", "pending", "related")

    def __init__(self, owner: str, related: _IsolatedScope | None) -> None:
        self.owner = owner
        self.defined: dict[str, Value] = {}
        self.pending: list[tuple[str, int, Value]] = []  # unresolved uses: name, offset, placeholder
        self.related = related  # a kernel body sees its launch-config scope as "across the boundary"


class _Scope:
    __slots__ = ("iso", "names")

    def __init__(self, iso: _IsolatedScope) -> None:
        self.names: dict[str, Value] = {}
        self.iso = iso


class Parser:
    """Parses one source text into a `Module`. Directives drive the op syntax."""

    def __init__(self, text: str, path: str) -> None:
        self.path = path
        self.toks: Tokens = tokenize(text)
        self.loc = self.toks.loc
        self.kinds = self.toks.kinds
        self.texts = self.toks.texts
        self.starts = self.toks.starts
        self.i = 0
        self.comment_i = 0
        self.scopes: list[_Scope] = []
        self.diags: list[Diagnostic] = []          # phase-3 findings made while parsing
        self.name_errors: list[tuple[int, Diagnostic]] = []
        self.result_types: list[Type] = []
        self.pending_args: list[tuple[str, Type, int]] = []
        self.pending_scope: tuple[Operation, int | None, _Scope] | None = None
        self.last_iso: dict[int, _IsolatedScope] = {}  # id(kernel op) -> launch-config scope
        self._static_shapes: dict[str, ShapedType] = {}
        self.current: Operation | None = None  # the op whose directives are parsing
        # Nesting of regions and attribute containers: bytecode holds at most
        # MAX_DEPTH of both together, so text may not nest deeper either.
        self.depth = 1

    # ------------------------------------------------------------ token access

    @property
    def offset(self) -> int:
        return self.starts[self.i]

    @property
    def text(self) -> str:
        return self.texts[self.i]

    def advance(self) -> None:
        self.i += 1

    def at(self, punct: str) -> bool:
        return self.texts[self.i] == punct and self.kinds[self.i] == PUNCT

    def at_word(self, word: str) -> bool:
        return self.texts[self.i] == word and self.kinds[self.i] == IDENT

    def at_ident(self) -> bool:
        return self.kinds[self.i] == IDENT

    def at_ssa(self) -> bool:
        return self.kinds[self.i] == SSA

    def at_results(self) -> bool:
        """At `%a, %b =`: the result list of the next op, not operands."""
        kinds, texts, j = self.kinds, self.texts, self.i
        while kinds[j] == SSA:
            j += 1
            if kinds[j] != PUNCT or texts[j] not in (",", "="):
                return False
            if texts[j] == "=":
                return True
            j += 1
        return False

    def at_int(self) -> bool:
        return self.kinds[self.i] == INT

    # ------------------------------------------------------------ errors

    def fail(self, code: str, offset: int, hint: str = "", **fields: Any) -> NoReturn:
        if code == "PARSE/004":  # the token as the message shows it: no raw NUL, ESC or other control
            fields["text"] = _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", fields["text"])
        d = Diagnostic.make(code, self.path, self.loc(offset), **fields)
        d.message += hint
        raise _SyntaxStop(d)

    def describe(self) -> str:
        k = self.kinds[self.i]
        if k == EOF:
            return "end of file"
        return f"`{self.texts[self.i]}`"

    def fail_expected(self, what: str) -> NoReturn:
        k = self.kinds[self.i]
        if k == INVALID:
            self.fail("PARSE/004", self.offset, text=self.text)
        if k == IDENT and self.current is not None and self.text not in _NOT_KEYWORDS:
            # Section 17.11: an unknown word after a known op name is PARSE/007.
            self.fail("PARSE/007", self.offset, word=self.text, op=self.current.name)
        if self.kinds[self.i] == SHAPE and not _SHAPE_RE.match(self.text):
            self._bad_shape(self.text, self.offset)
        self.fail("PARSE/003", self.offset, expected=what, found=self.describe())

    def fail_legacy(self, op: Operation, text: str) -> NoReturn:
        self.fail("PARSE/011", self.offset, text=text if text != "[]" else f"{op.name} @k[]", new=op.opdef.example)

    def count_error(self, op: Operation, n: int, items: str, m: int) -> None:
        self.diags.append(Diagnostic.make("TYPE/002", self.path, op.loc, op=op.name, n=n, items=items, m=m))
        op.invalid = True

    def record_loc(self, op: Operation, attr: str) -> None:
        if op.attr_locs is None:
            op.attr_locs = {}
        op.attr_locs[attr] = self.loc(self.offset)

    # ------------------------------------------------------------ expectations

    def expect(self, punct: str) -> None:
        i = self.i
        if self.texts[i] != punct or self.kinds[i] != PUNCT:  # `at`, inline: the parser's most common call
            self.fail_expected(f"`{punct}`")
        self.i = i + 1

    def expect_word(self, word: str) -> None:
        if not self.at_word(word):
            self.fail_expected(f"`{word}`")
        self.i += 1

    def expect_ident(self, what: str) -> str:
        if self.kinds[self.i] != IDENT:
            self.fail_expected(what)
        self.i += 1
        return self.texts[self.i - 1]

    def expect_symbol(self) -> str:
        if self.kinds[self.i] != SYM:
            self.fail_expected("a symbol")
        self.i += 1
        return self.texts[self.i - 1][1:]

    def expect_ssa(self) -> str:
        if self.kinds[self.i] != SSA:
            self.fail_expected("a value")
        self.i += 1
        return self.texts[self.i - 1][1:]

    # ------------------------------------------------------------ literals and attributes

    def parse_int(self) -> int:
        if self.kinds[self.i] != INT:
            self.fail_expected("an integer")
        return self._int_token()

    def _int_token(self) -> int:
        text = self.texts[self.i]
        hexadecimal = "x" in text or "X" in text
        digits = text.lstrip("-")[2 if hexadecimal else 0:].lstrip("0")
        if len(digits) > (16 if hexadecimal else 20):  # past 2^64 (and Python's 4,300-digit limit)
            self.fail("PARSE/004", self.offset, text=text if len(text) <= 40 else text[:40] + "…")
        value = int(text, 16) if hexadecimal else int(text, 10)  # `007` is 7
        if not _INT_MIN <= value <= _INT_MAX:
            self.fail("PARSE/004", self.offset, text=text)
        self.i += 1
        return value

    def parse_literal(self) -> Any:
        k = self.kinds[self.i]
        text = self.texts[self.i]
        if k == INT:
            return self._int_token()
        if k == FLOAT:
            value = float(text)
            if math.isinf(value):
                self.overflowing_float(text)
            self.i += 1
            return value
        if k == IDENT:
            if text == "true" or text == "false":
                self.i += 1
                return text == "true"
            if text == "inf" or text == "nan":
                self.i += 1
                return float(text)
        if k == NEGIDENT:
            if text == "-inf" or text == "-nan":
                self.i += 1
                return float(text)
            self.fail("PARSE/004", self.offset, text=text)
        if k == STRING:
            return self.parse_string()
        self.fail_expected("a literal")

    def overflowing_float(self, text: str) -> None:
        """Section 17.5: a finite float literal that rounds to infinity is
        TYPE/005. Past f64's range the value kept (the f64 written) is already
        `inf`, which the verifier accepts as written `inf`, so the finding is
        made here, where the spelling is still known; the op is marked invalid
        so that its literal rule does not report the same token again."""
        shown = text if len(text) <= 40 else text[:40] + "…"
        self.diags.append(Diagnostic.make("TYPE/005", self.path, self.loc(self.offset), literal=shown,
                                          type="float (it rounds to infinity in f64)"))
        if self.current is not None:
            self.current.invalid = True

    def parse_string(self) -> str:
        if self.kinds[self.i] != STRING:
            self.fail_expected("a string")
        text = self.texts[self.i]
        try:
            value = json.loads(text)
        except ValueError:
            self.fail("PARSE/004", self.offset, text=text)
        if any("\ud800" <= c <= "\udfff" for c in value):
            self.fail("PARSE/004", self.offset, text=text)
        self.i += 1
        return value

    def parse_literal_list(self) -> list[Any]:
        self.expect("[")
        values = []
        if not self.at("]"):
            values.append(self.parse_literal())
            while self.at(","):
                self.i += 1
                values.append(self.parse_literal())
        self.expect("]")
        return values

    def parse_attr(self) -> Any:
        k = self.kinds[self.i]
        if k == IDENT and self.texts[self.i] not in ("true", "false", "inf", "nan"):
            self.i += 1
            return Ident(self.texts[self.i - 1])
        if k == PUNCT:
            if self.at("{"):
                return self.parse_dict()
            if self.at("["):
                return self.parse_attr_list()
        if k == HASH:
            name = self.texts[self.i][1:]
            self.i += 1
            params: list[Any] = []
            if self.at("<"):
                self.i += 1
                self._nest(1)
                while True:
                    if (self.kinds[self.i] == IDENT and self.texts[self.i + 1] == "="
                            and self.kinds[self.i + 1] == PUNCT):
                        key = self.texts[self.i]
                        self.i += 2
                        params.append(KeyParam(key, self.parse_attr()))
                    else:
                        params.append(self.parse_attr())
                    if not self.at(","):
                        break
                    self.i += 1
                self.expect(">")
                self.depth -= 1
            return HashAttr(name, tuple(params))
        if k == SYM:
            return SymbolRef(self.expect_symbol())
        return self.parse_literal()

    def _nest(self, delta: int) -> None:
        self.depth += delta
        if self.depth > MAX_DEPTH:
            raise _SyntaxStop(Diagnostic("PARSE/003", "expected shallower nesting, found too deep a nest",
                                         self.path, *self.loc(self.offset)))

    def parse_attr_list(self) -> list[Any]:
        self._nest(1)
        try:
            return self._parse_attr_list()
        finally:
            self.depth -= 1

    def _parse_attr_list(self) -> list[Any]:
        self.expect("[")
        values = []
        if not self.at("]"):
            values.append(self.parse_attr())
            while self.at(","):
                self.i += 1
                values.append(self.parse_attr())
        self.expect("]")
        return values

    def parse_dict(self, offsets: dict[str, tuple[int, int]] | None = None) -> dict[str, Any]:
        """`{k = v, ...}`; `offsets`, if given, receives each key's (key, value) offsets."""
        self._nest(1)
        try:
            return self._parse_dict(offsets)
        finally:
            self.depth -= 1

    def _parse_dict(self, offsets: dict[str, tuple[int, int]] | None) -> dict[str, Any]:
        self.expect("{")
        d: dict[str, Any] = {}
        if not self.at("}"):
            while True:
                off = self.offset
                key = self.expect_ident("a key")
                if key in d:
                    self.fail("PARSE/003", off, expected="a unique key", found=f"duplicate `{key}`")
                self.expect("=")
                if offsets is not None:
                    offsets[key] = (off, self.offset)
                d[key] = self.parse_attr()
                if not self.at(","):
                    break
                self.i += 1
        self.expect("}")
        return d

    def parse_preds(self) -> list[Pred]:
        self.expect("[")
        preds: list[Pred] = []
        if not self.at("]"):
            while True:
                preds.append(self._parse_pred())
                if not self.at(","):
                    break
                self.i += 1
        self.expect("]")
        return preds

    def _parse_pred(self) -> Pred:
        off = self.offset
        name = self.expect_ident("a predicate")
        arity = PREDICATE_ARITY.get(name)
        if arity is None:
            self.fail("PARSE/003", off, expected="a predicate", found=f"`{name}`")
        self.expect("(")
        locs = [self.loc(self.offset)]
        args: list[Any] = [self.resolve(self.expect_ssa(), self.starts[self.i - 1])]
        while self.at(","):
            self.i += 1
            locs.append(self.loc(self.offset))
            if self.kinds[self.i] == SSA:
                args.append(self.resolve(self.expect_ssa(), self.starts[self.i - 1]))
            else:
                args.append(self.parse_int())
        if len(args) - 1 != arity:
            self.fail("PARSE/003", off, expected=f"{arity + 1} arguments of `{name}`", found=str(len(args)))
        self.expect(")")
        return Pred(name, args, self.loc(off), locs)

    # ------------------------------------------------------------ types

    def parse_type(self) -> Type:
        k = self.kinds[self.i]
        text = self.texts[self.i]
        if k == IDENT:
            t = SCALAR_TYPES.get(text)
            if t is None:
                self.fail("PARSE/010", self.offset, did_you_mean(text, SCALAR_TYPES), text=text)
            self.i += 1
            return t
        if k == SHAPE:
            shaped = self._static_shapes.get(text)
            if shaped is None:
                shaped = self._parse_shape(text, self.offset)
            self.i += 1
            return shaped
        self.fail_expected("a type")

    def _bad_shape(self, text: str, offset: int) -> NoReturn:
        if "#" in text and "," in text:
            self.fail("PARSE/011", offset, text=text, new=text.split(",")[0] + ">")
        self.fail("PARSE/004", offset, text=text)

    def _parse_shape(self, text: str, offset: int) -> ShapedType:
        m = _SHAPE_RE.match(text)
        if m is None:
            self._bad_shape(text, offset)
        elem = SCALAR_TYPES.get(m.group(3))
        if elem is None or elem.category not in ("int", "float"):
            numeric = (n for n, t in SCALAR_TYPES.items() if t.category in ("int", "float"))
            self.fail("PARSE/010", offset + m.start(3), did_you_mean(m.group(3), numeric), text=m.group(3))
        dims: list[Any] = []
        static = True
        pos = offset + m.start(2)
        for d in _DIM_RE.findall(m.group(2)):
            if d[0] == "[":
                static = False
                dims.append(self.resolve(d[2:-1], pos + 1))
            else:
                # Like an integer token (section 17.4): past 2^64-1 no file
                # can hold the dim (bytecode refuses it), and past 4,300
                # digits Python will not convert it.
                digits = d.lstrip("0")
                if len(digits) > 20 or int(digits or "0") > _INT_MAX:
                    self.fail("PARSE/004", pos, text=d if len(d) <= 40 else d[:40] + "…")
                dims.append(int(d))
            pos += len(d) + 1
        t = ShapedType(m.group(1), tuple(dims), elem)
        if static:
            self._static_shapes[text] = t
        return t

    def parse_type_list(self, close: str) -> list[Type]:
        types = [self.parse_type()]
        while self.at(","):
            self.i += 1
            types.append(self.parse_type())
        return types

    def write_type(self, op: Operation, index: int, t: Type) -> None:
        if op.written_types is None:
            op.written_types = [None] * len(op.operands)
        if index < len(op.written_types):
            op.written_types[index] = t

    # ------------------------------------------------------------ names and scopes

    def _open(self, owner: str, isolated: bool, related: _IsolatedScope | None = None) -> _Scope:
        if isolated or not self.scopes:
            scope = _Scope(_IsolatedScope(owner, related))
        else:
            scope = _Scope(self.scopes[-1].iso)
        self.scopes.append(scope)
        return scope

    def _close(self, scope: _Scope) -> None:
        popped = self.scopes.pop()
        assert popped is scope
        iso = scope.iso
        if self.scopes and self.scopes[-1].iso is iso:
            return
        for name, offset, placeholder in iso.pending:
            del placeholder
            if name in iso.defined:
                self.diags.append(Diagnostic.make("DOMINANCE/001", self.path, self.loc(offset), v=name))
            elif self._visible_outside(name) or (iso.related is not None and name in iso.related.defined):
                self.diags.append(Diagnostic.make("DOMINANCE/002", self.path, self.loc(offset), v=name, op=iso.owner))
            else:
                self.name_errors.append((offset, Diagnostic.make("PARSE/001", self.path, self.loc(offset), v=name)))

    def _visible_outside(self, name: str) -> bool:
        return any(name in s.names for s in self.scopes)

    def resolve(self, name: str, offset: int) -> Value:
        scopes = self.scopes
        if scopes:
            iso = scopes[-1].iso
            for scope in reversed(scopes):
                if scope.iso is not iso:
                    break
                v = scope.names.get(name)
                if v is not None:
                    return v
            placeholder = Value(name, ERROR, self.loc(offset))
            iso.pending.append((name, offset, placeholder))
            return placeholder
        placeholder = Value(name, ERROR, self.loc(offset))
        self.name_errors.append((offset, Diagnostic.make("PARSE/001", self.path, self.loc(offset), v=name)))
        return placeholder

    def define(self, value: Value, offset: int) -> None:
        name = value.name
        if not self.scopes:  # a result at module level: an op that does not belong there
            return
        top = self.scopes[-1]
        iso = top.iso
        for scope in reversed(self.scopes):
            if scope.iso is not iso:
                break
            if name in scope.names:
                self.name_errors.append((offset, Diagnostic.make("PARSE/002", self.path, self.loc(offset), v=name)))
                return
        top.names[name] = value
        iso.defined.setdefault(name, value)

    def parse_operand(self, op: Operation) -> None:
        if self.kinds[self.i] != SSA:
            self.fail_expected("a value")
        offset = self.starts[self.i]
        v = self.resolve(self.texts[self.i][1:], offset)
        self.i += 1
        op.add_operand(v)
        if op.operand_locs is None:
            op.operand_locs = []
        op.operand_locs.append(self.loc(offset))

    def close_pending_scope(self) -> None:
        if self.pending_scope is not None:
            self._close(self.pending_scope[2])
            self.pending_scope = None

    def _signature_scope(self, op: Operation, region: int | None) -> _Scope:
        pending = self.pending_scope
        # A command program's two lists share one scope, declared or defined:
        # its `where` after `launch(...)` may name specialization arguments.
        shared = region is not None or op.opdef is COMMAND_PROGRAM_DECL
        if pending is not None and pending[0] is op and pending[1] == region and shared:
            return pending[2]
        self.close_pending_scope()
        related = None
        if op.opdef is KERNEL_DEF and region == 1:
            related = self.last_iso.get(id(op))
        scope = self._open(op.name, True, related)
        if op.opdef is KERNEL_DEF and region == 0:
            self.last_iso[id(op)] = scope.iso
        self.pending_scope = (op, region, scope)
        return scope

    def parse_signature_args(self, op: Operation, region: int | None) -> list[Value]:
        self._signature_scope(op, region)
        target = op.regions[region] if region is not None else None
        self.expect("(")
        args: list[Value] = []
        if not self.at(")"):
            while True:
                args.append(self._parse_arg(target))
                if not self.at(","):
                    break
                self.i += 1
        self.expect(")")
        return args

    def _parse_arg(self, target: Region | None) -> Value:
        offset = self.offset
        name = self.expect_ssa()
        self.expect(":")
        t = self.parse_type()
        if target is not None:
            v: Value = BlockArgument(name, t, target, len(target.args), self.loc(offset))
            target.args.append(v)
        else:
            v = LocalName(name, t, self.loc(offset))
        self.define(v, offset)
        return v

    def parse_local_binding(self, op: Operation) -> list[Value]:
        self._signature_scope(op, None)
        return [self._parse_arg(None)]

    def parse_arg_list(self) -> None:
        """`(%a: T, ...)` whose names become arguments of the next region."""
        self.expect("(")
        if not self.at(")"):
            while True:
                offset = self.offset
                name = self.expect_ssa()
                self.expect(":")
                self.pending_args.append((name, self.parse_type(), offset))
                if not self.at(","):
                    break
                self.i += 1
        self.expect(")")

    # ------------------------------------------------------------ comments

    def take_comments(self, offset: int, top_level: bool = False) -> list[str]:
        starts = self.toks.comment_starts
        j = self.comment_i
        if j >= len(starts) or starts[j] >= offset:
            return []
        k = j
        while k < len(starts) and starts[k] < offset:
            k += 1
        self.comment_i = k
        comments = self.toks.comments[j:k]
        if not top_level:
            return comments
        # Top level: a block followed by a blank line is detached (17.34).
        text = self.toks.text
        out: list[str] = []
        for n, c in enumerate(comments):
            out.append(c)
            end = text.find("\n", starts[j + n])
            nxt = starts[j + n + 1] if n + 1 < len(comments) else offset
            if end >= 0 and text.count("\n", end, nxt) >= 2:
                out.append(DETACHED)
        return out

    # ------------------------------------------------------------ ops and regions

    def parse_region(self, op: Operation, index: int, written: bool = True) -> None:
        spec = op.opdef.regions[index]
        region = op.regions[index]
        pending = self.pending_scope
        if pending is not None and pending[0] is op and pending[1] == index:
            scope = pending[2]
            self.pending_scope = None
        else:
            scope = self._open(op.name, spec.isolated)
        args, self.pending_args = self.pending_args, []
        for name, t, offset in args:
            v = BlockArgument(name, t, region, len(region.args), self.loc(offset))
            region.args.append(v)
            self.define(v, offset)
        close_off = self.offset
        if written:
            self.expect("{")
            kinds = self.kinds
            self._nest(1)
            while not (kinds[self.i] == PUNCT and self.texts[self.i] == "}"):
                if kinds[self.i] == EOF:
                    self.fail_expected("`}`")
                self.parse_op(region)
            self.depth -= 1
            close_off = self.offset
            self.i += 1
            region.end_loc = self.loc(close_off)
        else:
            region.end_loc = op.loc
        comments = self.take_comments(close_off) if written else []
        last = region.ops[-1] if region.ops else None
        if spec.elide and (last is None or not last.opdef.has("terminator")):
            term = Operation(OPS[spec.terminator], loc=region.end_loc)
            region.append(term)
            last = term
        if last is not None:
            last.comments.extend(comments)
        self._close(scope)

    def parse_op(self, region: Region) -> Operation:
        kinds, texts = self.kinds, self.texts
        start = self.starts[self.i]
        comments = self.take_comments(start, region.owner is None)
        saved_current, self.current = self.current, None
        names: list[tuple[str, int]] = []
        if kinds[self.i] == SSA:
            names.append((texts[self.i][1:], start))
            self.i += 1
            while self.at(","):
                self.i += 1
                off = self.offset
                names.append((self.expect_ssa(), off))
            self.expect("=")
        name_off = self.starts[self.i]
        if kinds[self.i] != IDENT:
            self.fail_expected("an operation")
        opname = texts[self.i]
        opdef = OPS.get(opname)
        if opdef is None:
            self._unknown_op(opname, name_off)
        self.i += 1
        op = Operation(opdef, loc=self.loc(name_off))
        op.comments = comments
        for _ in opdef.regions:
            op.add_region()
        if not opdef.has_kind and self.at("<"):
            self.fail("PARSE/007", self.starts[self.i + 1], word=texts[self.i + 1], op=opname)
        if opdef.legacy_dict:
            self._reject_legacy_dict(opdef, name_off)
        saved_results, saved_args = self.result_types, self.pending_args
        self.result_types, self.pending_args, self.current = [], [], op
        for directive in FORMATS[opdef]:
            directive.parse(self, op)
        if self.pending_scope is not None and self.pending_scope[0] is op:
            self.close_pending_scope()
        result_types, self.result_types, self.pending_args = self.result_types, saved_results, saved_args
        self._check_op_end(op)
        self.current = saved_current
        if len(names) != len(result_types) and not op.invalid:
            self.diags.append(Diagnostic.make("TYPE/002", self.path, op.loc, op=opname, n=len(result_types),
                                              items="results", m=len(names)))
            op.invalid = True
        for k, t in enumerate(result_types):
            nm, off = names[k] if k < len(names) else ("", name_off)
            r = op.add_result(t, nm, self.loc(off))
            if nm:
                self.define(r, off)
        for nm, off in names[len(result_types):]:
            self.define(Value(nm, ERROR, self.loc(off)), off)
        region.append(op)
        return op

    def _check_op_end(self, op: Operation) -> None:
        k = self.kinds[self.i]
        if k in (EOF, SSA) or (k == PUNCT and self.texts[self.i] == "}"):
            return
        if k == IDENT:
            if self.texts[self.i] in OPS or self.texts[self.i] in RENAMED_OPS:
                return
            prev = self.i - 1
            same_line = "\n" not in self.toks.text[self.starts[prev]:self.starts[self.i]]
            if same_line:
                self.fail("PARSE/007", self.offset, word=self.text, op=op.name)
            return
        if k == INVALID:
            self.fail("PARSE/004", self.offset, text=self.text)
        self.fail("PARSE/003", self.offset, expected="the next operation", found=self.describe())

    def _reject_legacy_dict(self, opdef: OpDef, name_off: int) -> None:
        """Upstream spelled these ops' attributes as a dictionary (`kernel.barrier
        {…}`, `buffer.alloca %n {…}`); v1 has none, so a `{` on the op's line,
        wherever it stands, marks the legacy spelling (PARSE/011)."""
        kinds, texts, starts = self.kinds, self.texts, self.starts
        line_end = self.toks.text.find("\n", name_off)
        if line_end < 0:
            line_end = len(self.toks.text)
        j = self.i
        while kinds[j] != EOF and starts[j] < line_end:
            if kinds[j] == PUNCT and texts[j] == "{":
                self.fail("PARSE/011", name_off, text=f"{opdef.name} {{…}}", new=opdef.example)
            if kinds[j] == IDENT and texts[j] in OPS:
                return
            j += 1

    def _unknown_op(self, name: str, offset: int) -> NoReturn:
        if name in RENAMED_OPS:
            raise _SyntaxStop(Diagnostic(
                "PARSE/006", f"unknown operation `{name}`; v1 spells it `{RENAMED_OPS[name]}`",
                self.path, *self.loc(offset)))
        self.fail("PARSE/006", offset, did_you_mean(name, OPS, cutoff=0.8), op=name)  # a shared dialect is no hint

    def parse_module(self) -> Module:
        module = Module(self.path)
        while self.kinds[self.i] != EOF:
            if self.kinds[self.i] == INVALID:
                self.fail("PARSE/004", self.offset, text=self.text)
            self.parse_op(module.body)
        module.end_comments = self.take_comments(len(self.toks.text) + 1)
        return module


def parse(text: str, path: str = "<memory>") -> tuple[Module, list[Diagnostic]]:
    """Parse `text`. Raises `CompileError` on a syntax or name error (phases 1
    and 2); returns the module and the phase-3 findings made while parsing."""
    p = Parser(text.replace("\r", ""), path)
    try:
        with gc_paused():
            module = p.parse_module()
    except _SyntaxStop as stop:
        raise CompileError([stop.diag]) from None
    except RecursionError:
        raise CompileError([Diagnostic("PARSE/003", "expected shallower nesting, found too deep a nest",
                                       path, *p.loc(p.offset))]) from None
    if p.name_errors:
        first = min(p.name_errors, key=lambda e: e[0])
        raise CompileError([first[1]])
    return module, p.diags


__all__ = ["Parser", "parse"]
