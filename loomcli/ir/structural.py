"""The structural check: every invariant the text parser guarantees, checked
on a module that did not come from text (a decoded `.loombc`).

The parser only builds operations whose attributes have the shape their
format directives write: enum words from closed sets, required attributes
present with the right kinds, operands that resolve by name to values
visible where they are used, names that are valid identifiers. Bytecode can
say anything, so `check_op` re-derives those invariants from the op table
(`loomcli.ir.ops`): one function per format directive, chosen by the
directive's class. Later stages (verifier, printer, lowering, emitters)
then see only modules that the text could have produced; a module that
passes prints as text that parses back to the same module.

Problems are raised as `StructureError(why)`; the bytecode reader turns
them into BYTECODE/003 at the offending op's payload.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NoReturn

from loomcli.ir import format as F
from loomcli.ir.attrs import PREDICATE_ARITY, HashAttr, Ident, KeyParam, Pred, SymbolRef
from loomcli.ir.core import DETACHED, BlockArgument, LocalName, Module, Operation, OpResult, Region, Signature, Value
from loomcli.ir.ops import OPS, OpDef
from loomcli.ir.types import ELEMENT_TYPES, SCALAR_TYPES, SHAPED_KINDS, ScalarType, ShapedType, Type

# The lexer's spellings (loomcli/text/lexer.py): a name that does not match
# would print as text that does not lex back to the same token.
_SSA_RE = re.compile(r"(?:[A-Za-z_$](?:[A-Za-z0-9_$]|-(?!>))*|[0-9]+)\Z")
_SYMBOL_RE = re.compile(r"[A-Za-z_$](?:[A-Za-z0-9_$.]|-(?!>))*\Z")
_HASH_RE = re.compile(r"[A-Za-z_](?:[A-Za-z0-9_.]|-(?!>))*\Z")
_IDENT_RE = _HASH_RE
_LITERAL_WORDS = frozenset({"true", "false", "inf", "nan"})
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1
_SCALARS = frozenset(SCALAR_TYPES.values())
# Attributes the parser sets besides those its directives own.
_EXTRA_ATTRS = frozenset({"written_nworkload"})
_MISSING = object()


class StructureError(Exception):
    """The module breaks an invariant the parser guarantees; `why` says which."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _fail(op: Operation | None, why: str) -> NoReturn:
    raise StructureError(f"{op.name}: {why}" if op is not None else why)


# ---------------------------------------------------------------- names and values


def _is_int(x: Any) -> bool:
    return type(x) is int and _INT_MIN <= x <= _INT_MAX


def _is_float(x: Any) -> bool:
    return type(x) is float


def is_literal(x: Any) -> bool:
    """int, float, bool or string: what `Parser.parse_literal` returns."""
    return type(x) in (bool, str) or _is_int(x) or _is_float(x)


def _symbol(op: Operation, what: str, name: Any) -> None:
    if type(name) is not str or not _SYMBOL_RE.match(name):
        _fail(op, f"{what} {name!r} is not a symbol name")


def _ident(op: Operation, what: str, word: Any) -> None:
    if type(word) is not str or not _IDENT_RE.match(word) or word in _LITERAL_WORDS:
        _fail(op, f"{what} {word!r} is not an identifier")


def check_attribute(op: Operation, what: str, x: Any) -> None:
    """A generic attribute value (dictionaries, `requires`, hash parameters):
    what `Parser.parse_attr` can return."""
    stack = [x]
    while stack:
        x = stack.pop()
        if is_literal(x):
            continue
        if type(x) is Ident:
            _ident(op, what, x.text)
        elif type(x) is SymbolRef:
            _symbol(op, what, x.name)
        elif type(x) is list:
            stack.extend(x)
        elif type(x) is dict:
            for k, v in x.items():
                _ident(op, f"{what} key", k)
                stack.append(v)
        elif type(x) is HashAttr:
            if type(x.name) is not str or not _HASH_RE.match(x.name):
                _fail(op, f"{what}: {x.name!r} is not a hash attribute name")
            if type(x.params) is not tuple:
                _fail(op, f"{what}: malformed hash attribute parameters")
            for p in x.params:
                if type(p) is KeyParam:
                    _ident(op, f"{what} key", p.key)
                    stack.append(p.value)
                else:
                    stack.append(p)
        else:
            _fail(op, f"{what}: {type(x).__name__} is not an attribute value")


class _Scope:
    """The names visible at a point, as the parser tracks them: a chain of
    name tables up to the nearest isolated region."""

    __slots__ = ("chain", "shadow")

    def __init__(self, chain: list[dict[str, Value]]) -> None:
        self.chain = chain
        self.shadow = False  # a declaration's later signature may reuse an earlier one's names

    def nested(self, isolated: bool) -> _Scope:
        return _Scope([{}] if isolated else [*self.chain, {}])

    def define(self, op: Operation | None, v: Value, kind: type = Value) -> None:
        if not isinstance(v, kind):
            _fail(op, f"`%{getattr(v, 'name', v)}` is not a {kind.__name__}")
        name = v.name
        if type(name) is not str or not _SSA_RE.match(name):
            _fail(op, f"{name!r} is not a value name")
        for names in self.chain[-1:] if self.shadow else self.chain:
            if name in names:
                _fail(op, f"redefinition of `%{name}`")
        self.chain[-1][name] = v
        check_type(op, v.type, self)

    def use(self, op: Operation | None, v: Any) -> None:
        if not isinstance(v, Value):
            _fail(op, f"{type(v).__name__} used as a value")
        for names in reversed(self.chain):
            found = names.get(v.name)
            if found is not None:
                if found is v:
                    return
                break
        _fail(op, f"`%{v.name}` is not visible here")


def check_type(op: Operation | None, t: Any, scope: _Scope) -> None:
    if isinstance(t, ScalarType):
        if t not in _SCALARS:
            _fail(op, f"invalid type `{t.name}`")
        return
    if type(t) is not ShapedType:
        _fail(op, f"{type(t).__name__} is not a type")
    if t.name not in SHAPED_KINDS or t.elem not in ELEMENT_TYPES or type(t.dims) is not tuple or not t.dims:
        _fail(op, "malformed shaped type")
    for d in t.dims:
        if type(d) is int:
            if not 0 <= d <= _INT_MAX:
                _fail(op, f"dimension {d} out of range")
        else:
            scope.use(op, d)


def _pred(op: Operation, p: Any, scope: _Scope) -> None:
    if type(p) is not Pred or type(p.args) is not list:
        _fail(op, "malformed predicate")
    arity = PREDICATE_ARITY.get(p.name)
    if arity is None or len(p.args) != arity + 1:
        _fail(op, f"malformed predicate `{p.name}`")
    for i, a in enumerate(p.args):
        if _is_int(a) and i > 0:
            continue
        scope.use(op, a)


def _preds(op: Operation, preds: Any, scope: _Scope) -> None:
    if type(preds) is not list:
        _fail(op, "predicates must be a list")
    for p in preds:
        _pred(op, p, scope)


# ---------------------------------------------------------------- one op


class _OpCheck:
    """Walks an op's format directives in order, as the parser would, tracking
    which attributes and operands they account for."""

    __slots__ = ("op", "outer", "pos", "region_scopes", "results", "sig_scopes")

    def __init__(self, op: Operation, outer: _Scope) -> None:
        self.op = op
        self.outer = outer
        self.pos = 0              # operands accounted for so far
        self.results: int | None = None  # expected result count; None: any
        self.region_scopes: dict[int, _Scope] = {}
        self.sig_scopes: dict[str, _Scope] = {}

    def fail(self, why: str) -> NoReturn:
        _fail(self.op, why)

    def need(self, attr: str) -> Any:
        value = self.op._attrs.get(attr, _MISSING)
        if value is _MISSING:
            self.fail(f"missing attribute `{attr}`")
        return value

    def take(self, n: int) -> None:
        """The next `n` operands belong to the current directive."""
        op = self.op
        if n < 0 or self.pos + n > len(op.operands):
            self.fail(f"expected at least {self.pos + n} operands, found {len(op.operands)}")
        for v in op.operands[self.pos:self.pos + n]:
            self.outer.use(op, v)
        self.pos += n

    def count(self, attr: str, lo: int = 0) -> int:
        n = self.need(attr)
        if not _is_int(n) or n < lo:
            self.fail(f"`{attr}` must be an integer >= {lo}")
        return n

    def region_scope(self, index: int) -> _Scope:
        scope = self.region_scopes.get(index)
        if scope is None:
            spec = self.op.opdef.regions[index]
            scope = self.region_scopes[index] = self.outer.nested(spec.isolated)
        return scope

    def run(self) -> None:
        op = self.op
        if len(op.regions) != len(op.opdef.regions):
            self.fail(f"expected {len(op.opdef.regions)} regions, found {len(op.regions)}")
        for i, region in enumerate(op.regions):
            if type(region) is not Region or region.owner is not op:
                self.fail("malformed region")
            for k, a in enumerate(region.args):
                if type(a) is not BlockArgument or a.region is not region or a.index != k:
                    self.fail(f"malformed argument {k} of region {i}")
        for directive in op.opdef.format:
            _DIRECTIVES[type(directive)](self, directive)
        if self.pos != len(op.operands):
            self.fail(f"expected {self.pos} operands, found {len(op.operands)}")
        if self.results is not None and self.results != len(op.results):
            self.fail(f"expected {self.results} results, found {len(op.results)}")
        extra = op._attrs.keys() - _OWNED[op.opdef.name]
        if extra:
            self.fail(f"unexpected attribute `{sorted(extra)[0]}`")
        if op.written_types is not None:
            if type(op.written_types) is not list or len(op.written_types) != len(op.operands):
                self.fail("written types do not match the operands")
            for t in op.written_types:
                if t is not None:
                    check_type(op, t, self.outer)
        for k, r in enumerate(op.results):
            if type(r) is not OpResult or r.op is not op or r.index != k:
                self.fail(f"malformed result {k}")
            check_type(op, r.type, self.outer)
        top_level = op.parent is None or op.parent.owner is None
        previous: Any = None
        for comment in op.comments:
            # A top-level op's list may mark the blank line after a comment
            # block (DETACHED, 17.34); the parser puts one only after a comment.
            if not (comment == DETACHED and top_level and previous not in (None, DETACHED)):
                check_comment(comment)
            previous = comment


def check_comment(comment: Any) -> None:
    # The printer writes `// text` on one line and the lexer strips the
    # trailing blanks: anything else would not read back the same.
    if type(comment) is not str or "\n" in comment or "\r" in comment or comment != comment.rstrip(" \t"):
        raise StructureError(f"malformed comment {comment!r}")


def _kind(c: _OpCheck, d: F.Kind) -> None:
    if d.attr not in c.op._attrs and d.optional:  # flags built in code may be left out
        return
    value = c.need(d.attr)
    if d.flags:
        ordered = tuple(w for w in d.words if w in value) if type(value) is tuple else None
        if ordered != value or len(set(value)) != len(value):
            c.fail(f"`{d.attr}` must be flags from {', '.join(d.words)} in that order")
    elif value not in d.words:
        c.fail(f"`{value}` is not one of {', '.join(d.words)}")


def _sym_name(c: _OpCheck, d: F.SymName | F.SymKind) -> None:
    _symbol(c.op, f"`{d.attr}`", c.need(d.attr))


def _predicate(c: _OpCheck, d: F.Predicate) -> None:
    value = c.need("predicate")
    if value not in d.words:
        c.fail(f"predicate {value!r} is not one of {', '.join(d.words)}")


def _literal(c: _OpCheck, d: F.Literal) -> None:
    if not is_literal(c.need(d.attr)):
        c.fail(f"`{d.attr}` is not a literal")


def _operands(c: _OpCheck, d: F.Operands) -> None:
    if d.segment:
        c.take(c.count(d.segment))
    else:
        c.take(len(c.op.operands) - c.pos)


def _leading(c: _OpCheck, d: F.Leading) -> None:
    c.take(1)


def _indexed(c: _OpCheck, d: F.Indexed) -> None:
    if c.pos != c.op.opdef.indexed_base:
        c.fail("malformed indexed operands")
    template = c.need("indices")
    if type(template) is not tuple or not template:
        c.fail("`indices` must be a non-empty tuple")
    for t in template:
        if t is None:
            continue
        if not d.literals or type(t) is not int or not 0 <= t <= _INT_MAX:
            c.fail(f"invalid index {t!r}")
    c.take(1 + template.count(None))


def _kw_paren(c: _OpCheck, d: F.KwParen) -> None:
    inner, attr, op = d.inner, d.attr, c.op
    if inner == "operand":
        if op.opdef.operand_keywords.index(d.word) != c.pos:
            c.fail("malformed keyword operands")
        c.take(1)
        return
    if d.optional and attr not in op._attrs:
        return
    value = c.need(attr)
    if inner == "int":
        ok = _is_int(value)
    elif inner == "lit":
        ok = is_literal(value)
    elif inner == "lits":
        ok = type(value) is list and all(is_literal(v) for v in value)
    elif inner == "str":
        ok = type(value) is str
    elif inner == "ident":
        _ident(op, f"`{attr}`", value)
        ok = True
    else:  # operands
        ok = _is_int(value) and value >= 1
        if ok:
            if F.segment_start(op, attr) != c.pos:
                c.fail("malformed operand groups")
            c.take(value)
    if not ok:
        c.fail(f"malformed `{attr}`")


def _dict(c: _OpCheck, d: F.Dict) -> None:
    value = c.need(d.attr)
    if type(value) is not dict:
        c.fail(f"`{d.attr}` is not a dictionary")
    if d.keys is None:
        check_attribute(c.op, f"`{d.attr}`", value)
        return
    if set(value) != set(d.keys):
        c.fail(f"`{d.attr}` must hold exactly {', '.join(d.keys)}")
    for key, allowed in d.keys.items():
        v = value[key]
        if not isinstance(allowed, tuple):  # int
            if not _is_int(v):
                c.fail(f"`{key}` must be an integer")
        elif type(v) is not Ident or v.text not in allowed:
            c.fail(f"`{key}` must be one of {', '.join(allowed)}")


def _preds_directive(c: _OpCheck, d: F.Preds) -> None:
    _preds(c.op, c.need("preds"), c.outer)


def _callee(c: _OpCheck, d: F.Callee) -> None:
    _symbol(c.op, "callee", c.need("callee"))
    n = c.count("nworkload")
    if n and not d.workload:
        c.fail("a call has no workload operands")
    c.take(n)
    c.take(len(c.op.operands) - c.pos)
    if "written_nworkload" in c.op._attrs and not _is_int(c.op._attrs["written_nworkload"]):
        c.fail("malformed `written_nworkload`")


def _paren_operands(c: _OpCheck, d: F.ParenOperands) -> None:
    c.take(len(c.op.operands) - c.pos)


def _pack(c: _OpCheck, d: F.Pack) -> None:
    aligns = c.need("aligns")
    if type(aligns) is not tuple or not aligns or not all(_is_int(a) for a in aligns):
        c.fail("`aligns` must be a non-empty tuple of integers")
    c.take(len(aligns))


def _result_count(n: int | None) -> Callable[[_OpCheck, F.Directive], None]:
    def check(c: _OpCheck, d: F.Directive) -> None:
        c.results = n
    return check


def _written_as(c: _OpCheck, i: int, t: Type) -> None:
    """Text writes one type for operand `i` and the parser takes it as written:
    the operand must have it (a recorded written type is the verifier's)."""
    op = c.op
    if op.operands[i].type != t and (op.written_types is None or i >= len(op.written_types)
                                     or op.written_types[i] is None):
        c.fail(f"operand {i} has type {op.operands[i].type}, but the op's text gives {t}")


def _results_typed(c: _OpCheck, types: list[Type]) -> None:
    if len(c.op.results) == len(types):
        for k, (r, t) in enumerate(zip(c.op.results, types)):
            if r.type != t:
                c.fail(f"result {k} has type {r.type}, but the op's text gives {t}")


def _type_same(c: _OpCheck, d: F.TypeSame) -> None:
    op = c.op
    which = F.listed_operands(op, d.operands)
    if d.result is True or d.result == "pack":
        c.results = 1 if d.result is True else len(op.operands) + 1
        if len(op.results) != c.results:
            return
        t = op.results[0].type
        _results_typed(c, [t] * c.results)
    else:
        c.results = 1 if isinstance(d.result, Type) else 0
        if isinstance(d.result, Type):
            _results_typed(c, [d.result])
        if not which:
            c.fail("no operand carries the type")
        t = op.operands[which[0]].type
    for i in which:
        _written_as(c, i, t)


def _type_each(c: _OpCheck, d: F.TypeEach) -> None:
    which = F.listed_operands(c.op, d.operands)
    if d.mirror is True:
        c.results = len(which)
        _results_typed(c, [c.op.operands[i].type for i in which])
    elif d.mirror is None or d.mirror is False:
        c.results = 0
    else:
        c.results = 1 if d.mirror in which else 0
        if c.results:
            _results_typed(c, [c.op.operands[d.mirror].type])


def _type_arrow(c: _OpCheck, d: F.TypeArrow) -> None:
    if any(i >= len(c.op.operands) for i in d.operands):
        c.fail("an operand the type refers to is missing")
    c.results = 1


def _type_attr(c: _OpCheck, d: F.TypeAttr) -> None:
    check_type(c.op, c.need("type"), c.outer)


def _region(c: _OpCheck, d: F.Region) -> None:
    op = c.op
    scope = c.region_scope(d.index)
    spec = op.opdef.regions[d.index]
    region = op.regions[d.index]
    declared = scope.chain[-1]
    for a in region.args:
        if declared.get(a.name) is not a:
            c.fail(f"argument `%{a.name}` of region {d.index} is not declared")
    # The body is checked here rather than in a helper: nesting is bounded by
    # the format's MAX_DEPTH, and each level costs three Python frames.
    for inner in region.ops:
        if type(inner) is not Operation or inner.parent is not region:
            c.fail("malformed region")
        check_op(inner, scope)
    if spec.elide and (not region.ops or not region.ops[-1].opdef.has("terminator")):
        c.fail(f"region {d.index} without its `{spec.terminator}`")


def _else(c: _OpCheck, d: F.Else) -> None:
    if type(c.op._attrs.get("else", False)) is not bool:
        c.fail("malformed `else`")
    _region(c, F.Region(1))


def _bindings(c: _OpCheck, d: F.Bindings) -> None:
    op = c.op
    lead = op.opdef.leading_operands
    inits = op.operands[lead:]
    region = op.regions[0]
    lead_args = 1 if lead else 0  # scf.for's induction variable
    if len(region.args) != lead_args + len(inits):
        c.fail("carried values do not match the region arguments")
    c.take(len(inits))
    scope = c.region_scope(0)
    for a, v in zip(region.args[lead_args:], inits):
        check_type(op, a.type, c.outer)
        if a.type != v.type:
            c.fail(f"carried `%{a.name}` has a type other than its initial value")
        scope.define(op, a)


def _for_header(c: _OpCheck, d: F.ForHeader) -> None:
    op = c.op
    c.take(3)
    region = op.regions[0]
    if not region.args or region.args[0].type != op.operands[0].type:
        c.fail("the induction variable must have the type of the lower bound")
    c.region_scope(0).define(op, region.args[0])


def _do(c: _OpCheck, d: F.Do) -> None:
    scope = c.region_scope(1)
    for a in c.op.regions[1].args:
        check_type(c.op, a.type, c.outer)
        scope.define(c.op, a)
    _region(c, F.Region(1))


_MODIFIER_ATTRS = {
    "public": "public", "retain": "retain", "pure": "pure", "host": "convention", "device": "convention",
    "inline": "inlining", "noinline": "inlining", "target": "target", "export": "export",
    "requires": "requires", "priority": "priority",
}


def _modifiers(c: _OpCheck, d: F.Modifiers) -> None:
    op, a = c.op, c.op._attrs
    owned = {_MODIFIER_ATTRS[w] for w in d.allowed}
    for word in ("public", "retain", "pure"):
        if word in a and (word not in owned or a[word] is not True):
            c.fail(f"malformed `{word}`")
    for attr, words in (("convention", ("host", "device")), ("inlining", ("inline", "noinline"))):
        if attr in a and (a[attr] not in words or a[attr] not in d.allowed):
            c.fail(f"malformed `{attr}`")
    if "target" in a:
        _symbol(op, "`target`", a["target"])
    if "export" in a and type(a["export"]) is not str:
        c.fail("`export` is not a string")
    if "priority" in a and not _is_int(a["priority"]):
        c.fail("`priority` is not an integer")
    if "requires" in a:
        if type(a["requires"]) is not list:
            c.fail("`requires` is not a list")
        check_attribute(op, "`requires`", a["requires"])


def _sig_args(c: _OpCheck, d: F.SigArgs) -> None:
    op = c.op
    sig = c.need(d.attr)
    if type(sig) is not Signature or type(sig.args) is not list or type(sig.results) is not list:
        c.fail(f"`{d.attr}` is not a signature")
    if d.region is None:
        # A declaration's signatures share one scope: `launch(...) where`
        # may name the specialization arguments, as the parser allows.
        prev = next(iter(c.sig_scopes.values()), None)
        scope = _Scope([{}]) if prev is None else _Scope([{}, *prev.chain[-1:]][::-1])
        scope.shadow = prev is not None
        kind: type = LocalName
    else:
        first = d.region not in c.region_scopes
        scope = c.region_scope(d.region)
        kind = BlockArgument
        if first:  # the signatures opening a region declare exactly its arguments, in order
            declared: list[Value] = []
            for x in op.opdef.format:
                if isinstance(x, F.SigArgs) and x.region == d.region:
                    other = op._attrs.get(x.attr)
                    if type(other) is not Signature or type(other.args) is not list:
                        c.fail(f"`{x.attr}` is not a signature")
                    declared.extend(other.args)
            args = op.regions[d.region].args
            if len(args) != len(declared) or any(a is not b for a, b in zip(args, declared)):
                c.fail(f"the signature does not declare the arguments of region {d.region}")
    c.sig_scopes[d.attr] = scope
    for v in sig.args:
        scope.define(op, v, kind)
    has_where = any(isinstance(x, F.Where) and x.attr == d.attr for x in op.opdef.format)
    if sig.where is not None and not has_where:
        c.fail(f"`{d.attr}` has a `where` list it cannot print")
    if sig.results and (d.attr != "sig" or not any(isinstance(x, F.SigResults) for x in op.opdef.format)):
        c.fail(f"`{d.attr}` has results it cannot print")


def _sig_results(c: _OpCheck, d: F.SigResults) -> None:
    for t in c.op._attrs["sig"].results:
        check_type(c.op, t, c.sig_scopes["sig"])


def _where(c: _OpCheck, d: F.Where) -> None:
    where = c.op._attrs[d.attr].where
    if where is not None:
        _preds(c.op, where, c.sig_scopes[d.attr])


def _config_decl_type(c: _OpCheck, d: F.ConfigDeclType) -> None:
    op = c.op
    t = c.need("type")
    sig = op._attrs.get("sig")
    if sig is None:
        check_type(op, t, c.outer)
        return
    if type(sig) is not Signature or len(sig.args) != 1 or sig.results or type(sig.where) is not list:
        c.fail("malformed `sig`")
    scope = c.outer.nested(True)
    scope.define(op, sig.args[0], LocalName)
    if sig.args[0].type is not t and sig.args[0].type != t:
        c.fail("`type` disagrees with the bound name's type")
    _preds(op, sig.where, scope)


def _symbol_list(c: _OpCheck, d: F.SymbolList) -> None:
    names = c.need("symbols")
    if type(names) is not tuple or not names:
        c.fail("`symbols` must be a non-empty tuple")
    for s in names:
        _symbol(c.op, "imported symbol", s)


def _string_attr(c: _OpCheck, d: F.StringAttr) -> None:
    if type(c.need(d.attr)) is not str:
        c.fail(f"`{d.attr}` is not a string")


def _keyword(c: _OpCheck, d: F.Directive) -> None:
    pass


_DIRECTIVES: dict[type, Callable[[_OpCheck, Any], None]] = {
    F.Kind: _kind, F.SymKind: _sym_name, F.SymName: _sym_name, F.Punct: _keyword,
    F.Operands: _operands, F.Leading: _leading, F.Predicate: _predicate, F.Literal: _literal,
    F.Indexed: _indexed, F.KwParen: _kw_paren, F.Dict: _dict, F.Preds: _preds_directive, F.Callee: _callee,
    F.ParenOperands: _paren_operands, F.Pack: _pack, F.TypeSame: _type_same, F.TypeEach: _type_each,
    F.TypeArrow: _type_arrow, F.CallTypes: _result_count(None), F.ResultTypes: _result_count(None),
    F.TypeAttr: _type_attr, F.Region: _region, F.Else: _else, F.Bindings: _bindings, F.ForHeader: _for_header,
    F.Do: _do, F.Modifiers: _modifiers, F.SigArgs: _sig_args, F.SigResults: _sig_results, F.Where: _where,
    F.ConfigDeclType: _config_decl_type, F.SymbolList: _symbol_list, F.StringAttr: _string_attr,
}


def _owned(opdef: OpDef) -> frozenset[str]:
    """The attributes an op's directives read and write: any other is refused."""
    owned = set(_EXTRA_ATTRS)
    for d in opdef.format:
        if isinstance(d, (F.Kind, F.SymKind, F.SymName, F.Literal, F.Dict, F.SigArgs, F.StringAttr)) or (
                isinstance(d, F.KwParen) and d.inner != "operand"):
            owned.add(d.attr)
        elif isinstance(d, F.Operands) and d.segment:
            owned.add(d.segment)
        elif isinstance(d, F.Modifiers):
            owned.update(_MODIFIER_ATTRS[w] for w in d.allowed)
        else:
            owned.update(_DIRECTIVE_ATTRS.get(type(d), ()))
    return frozenset(owned)


_DIRECTIVE_ATTRS: dict[type, tuple[str, ...]] = {
    F.Predicate: ("predicate",), F.Indexed: ("indices",), F.Preds: ("preds",), F.Callee: ("callee", "nworkload"),
    F.Pack: ("aligns",), F.TypeAttr: ("type",), F.Else: ("else",), F.ConfigDeclType: ("type", "sig"),
    F.SymbolList: ("symbols",),
}
# Derived once from the op table (which never changes after import).
_OWNED = {name: _owned(opdef) for name, opdef in OPS.items()}


# ---------------------------------------------------------------- regions and modules


def check_op(op: Operation, scope: _Scope) -> None:
    """Check one op and everything nested in it; its results join `scope`."""
    _OpCheck(op, scope).run()
    if op.results and scope.chain:
        for r in op.results:
            scope.define(op, r)
    elif op.results:
        _fail(op, "results at module level")


def check_module_op(op: Operation) -> None:
    """Check one top-level op (a bytecode payload)."""
    if type(op) is not Operation:
        raise StructureError("malformed operation")
    if op.results:
        _fail(op, "results at module level")
    check_op(op, _Scope([]))


def check_module(module: Module) -> None:
    for op in module.ops:
        check_module_op(op)
    for comment in module.end_comments:
        check_comment(comment)
