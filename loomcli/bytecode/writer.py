"""Module -> `.loombc` bytes (layout: docs/bytecode.md).

The writer is deterministic: strings are numbered in order of first use while
the payloads are encoded, values in order of definition, attributes in
insertion order. Nothing in the output depends on object identities, hash
seeds or the environment.
"""

from __future__ import annotations

import struct
from typing import Any

from loomcli.bytecode import layout as L
from loomcli.ir.attrs import PREDICATE_ARITY, HashAttr, Ident, KeyParam, Pred, SymbolRef
from loomcli.ir.core import LocalName, Module, Operation, Signature, Value
from loomcli.ir.types import ELEMENT_TYPES, ERROR, SCALAR_TYPES, SHAPED_KINDS, ScalarType, ShapedType, Type

_pack_f64 = struct.Struct("<d").pack


def _uv(out: bytearray, x: int) -> None:
    """Append `x` (>= 0) as an unsigned LEB128 varint."""
    if 0 <= x < 0x80:
        out.append(x)
        return
    if x < 0:
        raise ValueError(f"cannot encode negative number {x} as an unsigned varint")
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)


def _check_int(x: int) -> None:
    if not L.INT_MIN <= x <= L.INT_MAX:
        raise ValueError(f"integer {x} is outside [-2^63, 2^64-1]")


class _Strings:
    __slots__ = ("index", "items")

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.items: list[str] = []

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            if type(s) is not str:
                raise TypeError(f"expected a string, got {s!r}")
            i = self.index[s] = len(self.items)
            self.items.append(s)
        return i


class _PayloadWriter:
    """Encodes one top-level op with its own value table."""

    __slots__ = ("base_line", "debug", "out", "s", "types", "values")

    def __init__(self, strings: _Strings, debug: bool) -> None:
        self.out = bytearray()
        self.s = strings
        self.debug = debug
        self.values: dict[Value, int] = {}
        self.types: dict[Type, int] = {}
        self.base_line = 0  # the line of the top-level op; other lines are relative to it

    # ---------------------------------------------------------- primitives

    def loc(self, loc: tuple[int, int]) -> None:
        line, col = loc
        if line < 0:
            raise ValueError(f"negative line number in location {loc}")
        d = line - self.base_line
        out = self.out
        _uv(out, d + d if d >= 0 else -1 - d - d)
        _uv(out, col)

    def define(self, v: Value, depth: int) -> None:
        """A value definition: name, type, location; enters the value table."""
        if v in self.values:
            raise ValueError(f"value %{v.name} is used before its definition or defined twice")
        _uv(self.out, self.s(v.name))
        self.type(v.type, depth)
        if self.debug:
            self.loc(v.loc)
        self.values[v] = len(self.values)

    def ref(self, v: Value, depth: int) -> None:
        i = self.values.get(v)
        if i is not None:
            _uv(self.out, i + L.REF_BASE)
            return
        if not isinstance(v, Value):
            raise TypeError(f"expected an SSA value, got {v!r}")
        # Not defined earlier in this top-level op: define it here.
        if depth > L.MAX_DEPTH:
            raise ValueError(f"value types nested deeper than {L.MAX_DEPTH}")
        self.out.append(L.REF_LOCAL if isinstance(v, LocalName) else L.REF_FREE)
        self.define(v, depth)

    def type(self, t: Type, depth: int) -> None:
        code = self.types.get(t)  # scalar types only (interned singletons)
        if code is not None:
            _uv(self.out, code)
            return
        if isinstance(t, ScalarType):
            if SCALAR_TYPES.get(t.name) is not t and t is not ERROR:
                raise ValueError(f"unknown scalar type {t.name!r}")
            code = self.s(t.name) * 2
            self.types[t] = code
            _uv(self.out, code)
            return
        if not isinstance(t, ShapedType):
            raise TypeError(f"cannot encode type {t!r}")
        if t.name not in SHAPED_KINDS or t.elem not in ELEMENT_TYPES or not t.dims:
            raise ValueError(f"malformed shaped type {t}")
        out = self.out
        _uv(out, self.s(t.name) * 2 + 1)
        _uv(out, len(t.dims))
        for d in t.dims:
            if isinstance(d, int) and not isinstance(d, bool):
                if not 0 <= d <= L.INT_MAX:
                    raise ValueError(f"static dimension {d} outside [0, 2^64-1]")
                _uv(out, d + 1)
            elif isinstance(d, Value):
                out.append(0)
                self.ref(d, depth + 1)
            else:
                raise ValueError(f"malformed dimension {d!r}")
        _uv(out, self.s(t.elem.name))

    def pred(self, p: Pred, depth: int) -> None:
        out = self.out
        arity = PREDICATE_ARITY.get(p.name)
        if arity is None or len(p.args) != arity + 1 or not isinstance(p.args[0], Value):
            raise ValueError(f"malformed predicate {p.name}({', '.join(map(repr, p.args))})")
        _uv(out, self.s(p.name))
        _uv(out, len(p.args))
        for a in p.args:
            if isinstance(a, Value):
                out.append(L.P_VALUE)
                self.ref(a, depth)
            elif isinstance(a, int) and not isinstance(a, bool):
                _check_int(a)
                if a >= 0:
                    out.append(L.P_INT)
                    _uv(out, a)
                else:
                    out.append(L.P_NEGINT)
                    _uv(out, -1 - a)
            else:
                raise TypeError(f"cannot encode predicate argument {a!r}")
        if self.debug:
            arg_locs = getattr(p, "arg_locs", None)
            out.append((0 if p.loc is None else 1) | (0 if arg_locs is None else 2))
            if p.loc is not None:
                self.loc(p.loc)
            if arg_locs is not None:
                _uv(out, len(arg_locs))
                for loc in arg_locs:
                    self.loc(loc)

    def attr(self, v: Any, depth: int) -> None:
        if depth > L.MAX_DEPTH:
            raise ValueError(f"attribute nesting deeper than {L.MAX_DEPTH}")
        out = self.out
        t = type(v)
        if t is bool:
            out.append(L.A_TRUE if v else L.A_FALSE)
        elif t is int:
            _check_int(v)
            if v >= 0:
                out.append(L.A_INT)
                _uv(out, v)
            else:
                out.append(L.A_NEGINT)
                _uv(out, -1 - v)
        elif t is str:
            out.append(L.A_STR)
            _uv(out, self.s(v))
        elif t is tuple or t is list:
            out.append(L.A_TUPLE if t is tuple else L.A_LIST)
            _uv(out, len(v))
            for x in v:
                self.attr(x, depth + 1)
        elif v is None:
            out.append(L.A_NONE)
        elif t is float:
            out.append(L.A_FLOAT)
            out += _pack_f64(v)
        elif t is Ident:
            out.append(L.A_IDENT)
            _uv(out, self.s(v.text))
        elif t is SymbolRef:
            out.append(L.A_SYMREF)
            _uv(out, self.s(v.name))
        elif t is dict:
            out.append(L.A_DICT)
            _uv(out, len(v))
            for k, x in v.items():
                _uv(out, self.s(k))
                self.attr(x, depth + 1)
        elif t is HashAttr:
            out.append(L.A_HASH)
            _uv(out, self.s(v.name))
            _uv(out, len(v.params))
            for x in v.params:
                self.attr(x, depth + 1)
        elif t is KeyParam:
            out.append(L.A_KEYPARAM)
            _uv(out, self.s(v.key))
            self.attr(v.value, depth + 1)
        elif isinstance(v, Type):
            out.append(L.A_TYPE)
            self.type(v, depth)
        elif t is Signature:
            out.append(L.A_SIG)
            _uv(out, len(v.args))
            for a in v.args:
                self.ref(a, depth)
            _uv(out, len(v.results))
            for r in v.results:
                self.type(r, depth)
            if v.where is None:
                out.append(0)
            else:
                _uv(out, len(v.where) + 1)
                for p in v.where:
                    self.pred(p, depth)
        elif t is Pred:
            out.append(L.A_PRED)
            self.pred(v, depth)
        elif isinstance(v, Value):
            out.append(L.A_VALUE)
            self.ref(v, depth)
        else:
            raise TypeError(f"cannot encode attribute value {v!r}")

    # ---------------------------------------------------------- operations

    def op(self, op: Operation, depth: int) -> None:
        if depth > L.MAX_DEPTH:
            raise ValueError(f"operations nested deeper than {L.MAX_DEPTH}")
        out, s, debug = self.out, self.s, self.debug
        opdef = op.opdef
        if len(op.regions) != len(opdef.regions):
            raise ValueError(f"{opdef.name} has {len(op.regions)} regions, its definition {len(opdef.regions)}")
        written = op.written_types
        if written is not None:
            operands = op.operands
            n = len(operands)
            if not any(t is not None and (i >= n or t != operands[i].type) for i, t in enumerate(written)):
                written = None
        flags = 0
        if debug:
            if op.comments:
                flags |= L.OP_COMMENTS
            if op.operand_locs is not None:
                flags |= L.OP_OPERAND_LOCS
            if op.attr_locs is not None:
                flags |= L.OP_ATTR_LOCS
        if written is not None:
            flags |= L.OP_WRITTEN_TYPES
        _uv(out, s(opdef.name))
        out.append(flags)
        if debug:
            if depth == 1:  # the payload's first location: absolute
                self.base_line = 0
                self.loc(op.loc)
                self.base_line = op.loc[0]
            else:
                self.loc(op.loc)
            if flags & L.OP_COMMENTS:
                _uv(out, len(op.comments))
                for c in op.comments:
                    _uv(out, s(c))
        _uv(out, len(op.operands))
        for v in op.operands:
            self.ref(v, depth)
        if flags & L.OP_OPERAND_LOCS and op.operand_locs is not None:
            _uv(out, len(op.operand_locs))
            for loc in op.operand_locs:
                self.loc(loc)
        if written is not None:
            _uv(out, len(written))
            for t in written:
                if t is None:
                    out.append(0)
                else:
                    out.append(1)
                    self.type(t, depth)
        for region in op.regions:
            _uv(out, len(region.args))
            for a in region.args:
                self.define(a, depth)
            if debug:
                self.loc(region.end_loc)
        attrs = [(k, v) for k, v in op.attr_items() if not k.startswith("$")]  # "$": in-memory only
        _uv(out, len(attrs))
        for k, v in attrs:
            _uv(out, s(k))
            self.attr(v, depth)
        if flags & L.OP_ATTR_LOCS and op.attr_locs is not None:
            _uv(out, len(op.attr_locs))
            for k, loc in op.attr_locs.items():
                _uv(out, s(k))
                self.loc(loc)
        _uv(out, len(op.results))
        for r in op.results:
            self.define(r, depth)
        for region in op.regions:
            _uv(out, len(region.ops))
            for inner in region.ops:
                self.op(inner, depth + 1)


def symbol_fields(op: Operation) -> tuple[str | None, bool, bool, str | None]:
    """(symbol, public, retain, export) of a top-level op, as the symbol table records them."""
    sym, export = op.symbol, op.attr_or("export")
    return (sym if type(sym) is str else None, op.attr_or("public") is True, op.attr_or("retain") is True,
            export if type(export) is str else None)


def write_module(module: Module, *, keep_debug: bool = True) -> bytes:
    """Encode `module` as `.loombc` bytes.

    With `keep_debug=False` no comments, locations or paths are written, so
    the bytes depend only on the program. Raises ValueError/TypeError for IR
    the format cannot represent (never for IR the parser or reader built).
    """
    strings = _Strings()
    debug = bool(keep_debug)
    head = bytearray()
    # Module section first so the path and end comments come first in the string table.
    if debug:
        _uv(head, strings(module.path))
        _uv(head, len(module.end_comments))
        for c in module.end_comments:
            _uv(head, strings(c))
    payloads: list[bytes] = []
    symbols = bytearray()
    _uv(symbols, len(module.body.ops))
    offset = 0
    for op in module.body.ops:
        w = _PayloadWriter(strings, debug)
        w.op(op, 1)
        payload = bytes(w.out)
        sym, public, retain, export = symbol_fields(op)
        flags = ((L.SYM_PUBLIC if public else 0) | (L.SYM_RETAIN if retain else 0)
                 | (L.SYM_EXPORT if export is not None else 0) | (L.SYM_SYMBOL if sym is not None else 0))
        _uv(symbols, strings(op.opdef.name))
        symbols.append(flags)
        if sym is not None:
            _uv(symbols, strings(sym))
        if export is not None:
            _uv(symbols, strings(export))
        _uv(symbols, offset)
        _uv(symbols, len(payload))
        offset += len(payload)
        payloads.append(payload)
    out = bytearray(L.MAGIC)
    _uv(out, L.VERSION)
    _uv(out, L.FLAG_DEBUG if debug else 0)
    encoded = [s.encode("utf-8") for s in strings.items]
    _uv(out, len(encoded))
    for e in encoded:
        _uv(out, len(e))
    for e in encoded:
        out += e
    out += head
    out += symbols
    for p in payloads:
        out += p
    return bytes(out)
