"""`.loombc` bytes -> Module, and the symbol table alone (layout: docs/bytecode.md).

Input is untrusted. Every count is checked against the bytes that remain
before anything is allocated for it, every string, value and type reference
against its table, every offset and length against the file, nesting against
`MAX_DEPTH`. Each payload is decoded from its own `bytes` object, so reading
past a payload's end is an `IndexError` that becomes BYTECODE/003 at the
payload's end. Each decoded top-level op must then pass the structural check
(`loomcli.ir.structural`): every invariant the text parser guarantees, so no
later stage sees an op that text could not have produced. Problems are
reported as `CompileError` with BYTECODE/001 (not bytecode, or a version this
reader does not know) or BYTECODE/003 (malformed, with the byte offset where
it was noticed: an op that fails the structural check is reported at the
start of its payload).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loomcli.bytecode import layout as L
from loomcli.bytecode.writer import symbol_fields
from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.attrs import PREDICATE_ARITY, HashAttr, Ident, KeyParam, Pred, SymbolRef
from loomcli.ir.core import BlockArgument, LocalName, Module, Operation, Signature, Value
from loomcli.ir.gcpause import gc_paused
from loomcli.ir.ops import OPS, OpDef
from loomcli.ir.structural import StructureError, check_comment, check_module_op
from loomcli.ir.types import ELEMENT_TYPES, ERROR, SCALAR_TYPES, SHAPED_KINDS, ShapedType, Type

_unpack_f64 = struct.Struct("<d").unpack_from
_MAX_DEPTH = L.MAX_DEPTH
_OP_FLAGS = L.OP_FLAGS
_OP_COMMENTS = L.OP_COMMENTS
_OP_OPERAND_LOCS = L.OP_OPERAND_LOCS
_OP_ATTR_LOCS = L.OP_ATTR_LOCS
_OP_WRITTEN_TYPES = L.OP_WRITTEN_TYPES
_OP_DEBUG_FLAGS = L.OP_COMMENTS | L.OP_OPERAND_LOCS | L.OP_ATTR_LOCS
_A_INT = L.A_INT
_A_STR = L.A_STR
_A_NONE = L.A_NONE
_DIM_LIMIT = L.INT_MAX + 1
# Per-argument predicate locations (debug information), where this IR has them.
_PRED_ARG_LOCS = "arg_locs" in getattr(Pred, "__dataclass_fields__", {})


@dataclass(frozen=True, slots=True)
class SymbolEntry:
    """One top-level op as the symbol table records it.

    `offset` is the absolute byte offset of the op's payload in the file and
    `length` its size; `symbol` is `attrs["sym"]` (None for ops without one).
    """

    op_name: str
    symbol: str | None
    public: bool
    retain: bool
    export: str | None
    offset: int
    length: int

    @property
    def kind(self) -> str:
        return self.op_name


class _Malformed(Exception):
    """Internal: the input is malformed at `offset` (relative to `base` when set by a payload)."""

    def __init__(self, offset: int, why: str) -> None:
        super().__init__(why)
        self.offset = offset
        self.why = why


class _BadVersion(Exception):
    def __init__(self, v: object) -> None:
        super().__init__(str(v))
        self.v = v


def _uv_slow(data: bytes, pos: int, b: int) -> tuple[int, int]:
    """Rest of a varint whose first byte `b` (>= 0x80) was read; `pos` is after it."""
    x = b & 0x7F
    shift = 7
    start = pos - 1
    while True:
        b = data[pos]
        pos += 1
        x |= (b & 0x7F) << shift
        if b < 0x80:
            return x, pos
        shift += 7
        if shift >= 7 * L.MAX_VARINT_BYTES:
            raise _Malformed(start, f"varint longer than {L.MAX_VARINT_BYTES} bytes")


def _uv(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    return _uv_slow(data, pos + 1, b)


# ---------------------------------------------------------------- file structure


class _Header:
    __slots__ = ("debug", "end_comments", "entries", "path", "payload_base", "strings")
    debug: bool
    end_comments: list[str]
    entries: list[SymbolEntry]
    path: str | None
    payload_base: int
    strings: _Strings


def _check_count(n: int, pos: int, end: int, what: str, per: int = 1) -> None:
    if n * per > end - pos:
        raise _Malformed(pos, f"{what} count {n} exceeds the remaining {end - pos} bytes")


class _Strings:
    """The string table. Eager: every string decoded once up front (for
    read_module). Lazy: each string decoded at most once, on first use (for
    read_symbol_table, which needs only a few)."""

    __slots__ = ("cache", "data", "list", "offsets")

    def __init__(self, data: bytes, offsets: list[int], eager: bool) -> None:
        self.data = data
        self.offsets = offsets  # n + 1 absolute offsets
        self.cache: dict[int, str] = {}
        self.list: list[str] | None = None
        if eager:
            try:
                self.list = [data[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)]
            except UnicodeDecodeError:
                for i in range(len(offsets) - 1):
                    self.get(i, offsets[i])  # raises _Malformed with the string's offset
                raise  # pragma: no cover

    def get(self, i: int, pos: int) -> str:
        if self.list is not None:
            if i >= len(self.list):
                raise _Malformed(pos, f"string index {i} out of range")
            return self.list[i]
        s = self.cache.get(i)
        if s is None:
            if not 0 <= i < len(self.offsets) - 1:
                raise _Malformed(pos, f"string index {i} out of range")
            a, b = self.offsets[i], self.offsets[i + 1]
            try:
                s = self.data[a:b].decode("utf-8")
            except UnicodeDecodeError:
                raise _Malformed(a, f"string {i} is not valid UTF-8") from None
            self.cache[i] = s
        return s


def _read_header(data: bytes, eager: bool) -> _Header:
    end = len(data)
    if data[:len(L.MAGIC)] != L.MAGIC:
        raise _BadVersion("(no Loom bytecode magic)")
    pos = len(L.MAGIC)
    if pos >= end:
        raise _Malformed(pos, "missing format version")
    version, pos = _uv(data, pos)
    if version not in L.SUPPORTED_VERSIONS:
        raise _BadVersion(version)
    flags_at = pos
    flags, pos = _uv(data, pos)
    if flags & ~L.HEADER_FLAGS:
        raise _Malformed(flags_at, f"unknown header flags {flags:#x}")
    h = _Header()
    h.debug = bool(flags & L.FLAG_DEBUG)
    # String table: count, byte lengths, bytes.
    count, pos = _uv(data, pos)
    _check_count(count, pos, end, "string")
    lengths = []
    total = 0
    for _ in range(count):
        n, pos = _uv(data, pos)
        total += n
        lengths.append(n)
    if total > end - pos:
        raise _Malformed(pos, f"string bytes ({total}) exceed the remaining {end - pos} bytes")
    offsets = [pos]
    for n in lengths:
        pos += n
        offsets.append(pos)
    strings = _Strings(data, offsets, eager)
    h.strings = strings
    # Module section.
    if h.debug:
        i, p0 = _uv(data, pos)
        h.path = strings.get(i, pos)
        pos = p0
        n, pos = _uv(data, pos)
        _check_count(n, pos, end, "end comment")
        comments = []
        for _ in range(n):
            i, p0 = _uv(data, pos)
            comments.append(strings.get(i, pos))
            pos = p0
        h.end_comments = comments
    else:
        h.path = None
        h.end_comments = []
    # Symbol table.
    n, pos = _uv(data, pos)
    _check_count(n, pos, end, "symbol", 4)
    raw = []
    expect = 0
    for _ in range(n):
        at = pos
        i, pos = _uv(data, pos)
        op_name = strings.get(i, at)
        if op_name not in OPS:
            raise _Malformed(at, f"unknown operation `{op_name}` in the symbol table")
        flags_at = pos
        flags, pos = _uv(data, pos)
        if flags & ~L.SYM_FLAGS:
            raise _Malformed(flags_at, f"unknown symbol flags {flags:#x}")
        sym = export = None
        if flags & L.SYM_SYMBOL:
            i, p0 = _uv(data, pos)
            sym = strings.get(i, pos)
            pos = p0
        if flags & L.SYM_EXPORT:
            i, p0 = _uv(data, pos)
            export = strings.get(i, pos)
            pos = p0
        off_at = pos
        offset, pos = _uv(data, pos)
        length, pos = _uv(data, pos)
        if offset != expect:
            raise _Malformed(off_at, f"payload offset {offset}, expected {expect}")
        if length == 0:
            raise _Malformed(off_at, "empty payload")
        expect += length
        raw.append((op_name, sym, bool(flags & L.SYM_PUBLIC), bool(flags & L.SYM_RETAIN), export, offset, length))
    if expect != end - pos:
        why = "payloads overrun the file" if expect > end - pos else "trailing bytes after the last payload"
        raise _Malformed(pos + min(expect, end - pos), why)
    h.payload_base = pos
    h.entries = [SymbolEntry(a, b, c, d, e, pos + off, ln) for a, b, c, d, e, off, ln in raw]
    return h


def _fail(path: str, e: Exception) -> CompileError:
    if isinstance(e, _BadVersion):
        return CompileError([Diagnostic.make("BYTECODE/001", path, (0, 0), v=e.v)])
    assert isinstance(e, _Malformed)
    return CompileError([Diagnostic.make("BYTECODE/003", path, (0, 0), offset=e.offset, why=e.why)])


def read_symbol_table(data: bytes, path: str = "<bytecode>") -> list[SymbolEntry]:
    """The symbol table of `data`, without decoding any op payload."""
    data = bytes(data)
    try:
        return _read_header(data, False).entries
    except (_Malformed, _BadVersion) as e:
        raise _fail(path, e) from None
    except IndexError:
        raise _fail(path, _Malformed(len(data), "truncated file")) from None


# ---------------------------------------------------------------- payloads


class _Payload:
    """Decodes one payload; `pos` is threaded through the methods explicitly."""

    __slots__ = ("base_line", "data", "debug", "end", "nstrs", "opdefs", "strs", "types", "values")

    def __init__(self, data: bytes, strs: list[str], debug: bool, opdefs: dict[int, OpDef], types: dict[int, Type]
                 ) -> None:
        self.data = data
        self.end = len(data)
        self.strs = strs
        self.nstrs = len(strs)
        self.debug = debug
        self.values: list[Value] = []
        self.opdefs = opdefs  # string index -> OpDef, shared by the payloads of a file
        self.types = types    # scalar type code -> ScalarType, shared likewise
        self.base_line = 0    # the line of the payload's top-level op

    # ---------------------------------------------------------- helpers

    def count(self, pos: int, what: str) -> tuple[int, int]:
        data = self.data
        n = data[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = _uv_slow(data, pos + 1, n)
        if n > self.end - pos:
            raise _Malformed(pos, f"{what} count {n} exceeds the remaining {self.end - pos} bytes")
        return n, pos

    def string(self, pos: int) -> tuple[str, int]:
        data = self.data
        i = data[pos]
        if i < 0x80:
            p = pos + 1
        else:
            i, p = _uv_slow(data, pos + 1, i)
        if i >= self.nstrs:
            raise _Malformed(pos, f"string index {i} out of range")
        return self.strs[i], p

    def loc(self, pos: int) -> tuple[tuple[int, int], int]:
        """(line, column): the line zigzag-relative to the payload's first line."""
        data = self.data
        z = data[pos]
        if z < 0x80:
            pos += 1
        else:
            z, pos = _uv_slow(data, pos + 1, z)
        col = data[pos]
        if col < 0x80:
            pos += 1
        else:
            col, pos = _uv_slow(data, pos + 1, col)
        line = self.base_line + ((z >> 1) ^ -(z & 1))
        if line < 0:
            raise _Malformed(pos, "negative line number")
        return (line, col), pos

    def scalar_type(self, code: int, pos: int) -> Type:
        i = code >> 1
        if i >= self.nstrs:
            raise _Malformed(pos, f"type name index {i} out of range")
        name = self.strs[i]
        t = SCALAR_TYPES.get(name)
        if t is None:
            if name != ERROR.name:
                raise _Malformed(pos, f"unknown type `{name}`")
            t = ERROR
        self.types[code] = t
        return t

    def type(self, pos: int, depth: int) -> tuple[Type, int]:
        data = self.data
        code = data[pos]
        if code < 0x80:
            p = pos + 1
        else:
            code, p = _uv_slow(data, pos + 1, code)
        t = self.types.get(code)
        if t is not None:
            return t, p
        if not code & 1:
            return self.scalar_type(code, pos), p
        i = code >> 1
        if i >= self.nstrs:
            raise _Malformed(pos, f"type name index {i} out of range")
        kind = self.strs[i]
        if kind not in SHAPED_KINDS:
            raise _Malformed(pos, f"unknown type `{kind}`")
        rank, p = self.count(p, "dimension")
        if rank == 0:
            raise _Malformed(p, "shaped type of rank 0")
        dims: list[Any] = []
        for _ in range(rank):
            d = data[p]
            if d < 0x80:
                p += 1
            else:
                d, p = _uv_slow(data, p + 1, d)
            if d:
                if d > _DIM_LIMIT:
                    raise _Malformed(p, "static dimension above 2^64-1")
                dims.append(d - 1)
            else:
                v, p = self.ref(p, depth + 1)
                dims.append(v)
        at = p
        elem_name, p = self.string(p)
        elem = SCALAR_TYPES.get(elem_name)
        if elem is None or elem not in ELEMENT_TYPES:
            raise _Malformed(at, f"invalid element type `{elem_name}`")
        return ShapedType(kind, tuple(dims), elem), p

    def define(self, pos: int, cls: Callable[..., Value], depth: int) -> tuple[Value, int]:
        name, pos = self.string(pos)
        t, pos = self.type(pos, depth)
        if self.debug:
            loc, pos = self.loc(pos)
            v = cls(name, t, loc)
        else:
            v = cls(name, t)
        self.values.append(v)
        return v, pos

    def ref(self, pos: int, depth: int) -> tuple[Value, int]:
        data = self.data
        r = data[pos]
        if r < 0x80:
            p = pos + 1
        else:
            r, p = _uv_slow(data, pos + 1, r)
        if r >= L.REF_BASE:
            r -= L.REF_BASE
            values = self.values
            if r >= len(values):
                raise _Malformed(pos, f"value index {r} not defined yet")
            return values[r], p
        if depth > _MAX_DEPTH:
            raise _Malformed(pos, f"nesting deeper than {_MAX_DEPTH}")
        return self.define(p, LocalName if r == L.REF_LOCAL else Value, depth)

    def integer(self, pos: int, negative: bool) -> tuple[int, int]:
        data = self.data
        x = data[pos]
        if x < 0x80:
            p = pos + 1
        else:
            x, p = _uv_slow(data, pos + 1, x)
        if negative:
            x = -1 - x
            if x < L.INT_MIN:
                raise _Malformed(pos, "integer below -2^63")
        elif x > L.INT_MAX:
            raise _Malformed(pos, "integer above 2^64-1")
        return x, p

    def pred(self, pos: int, depth: int) -> tuple[Pred, int]:
        at = pos
        name, pos = self.string(pos)
        arity = PREDICATE_ARITY.get(name)
        if arity is None:
            raise _Malformed(at, f"unknown predicate `{name}`")
        n, pos = self.count(pos, "predicate argument")
        if n != arity + 1:
            raise _Malformed(pos, f"predicate `{name}` takes {arity + 1} arguments, found {n}")
        data = self.data
        args: list[Any] = []
        for k in range(n):
            tag = data[pos]
            pos += 1
            if tag == L.P_VALUE:
                v, pos = self.ref(pos, depth)
                args.append(v)
            elif k and (tag == L.P_INT or tag == L.P_NEGINT):
                x, pos = self.integer(pos, tag == L.P_NEGINT)
                args.append(x)
            else:
                raise _Malformed(pos - 1, f"bad predicate argument tag {tag}")
        loc = None
        arg_locs = None
        if self.debug:
            flag = data[pos]
            pos += 1
            if flag & ~3:
                raise _Malformed(pos - 1, f"bad predicate location flags {flag:#x}")
            if flag & 1:
                loc, pos = self.loc(pos)
            if flag & 2:
                n, pos = self.count(pos, "location")
                arg_locs = []
                for _ in range(n):
                    lc, pos = self.loc(pos)
                    arg_locs.append(lc)
        pred = Pred(name, args, loc)
        if arg_locs is not None and _PRED_ARG_LOCS:
            pred.arg_locs = arg_locs
        return pred, pos

    def attr(self, pos: int, depth: int) -> tuple[Any, int]:
        if depth > _MAX_DEPTH:
            raise _Malformed(pos, f"nesting deeper than {_MAX_DEPTH}")
        data = self.data
        tag = data[pos]
        p = pos + 1
        if tag == L.A_INT:
            return self.integer(p, False)
        if tag == L.A_STR:
            return self.string(p)
        if tag == L.A_TUPLE or tag == L.A_LIST:
            n, p = self.count(p, "array")
            items: list[Any] = []
            depth += 1
            for _ in range(n):
                t = data[p]
                if t == _A_INT:  # small integers inline: index templates, sizes
                    x = data[p + 1]
                    if x < 0x80:
                        items.append(x)
                        p += 2
                        continue
                elif t == _A_NONE:
                    items.append(None)
                    p += 1
                    continue
                x, p = self.attr(p, depth)
                items.append(x)
            return (tuple(items) if tag == L.A_TUPLE else items), p
        if tag == L.A_TRUE:
            return True, p
        if tag == L.A_FALSE:
            return False, p
        if tag == L.A_NONE:
            return None, p
        if tag == L.A_NEGINT:
            return self.integer(p, True)
        if tag == L.A_FLOAT:
            if p + 8 > self.end:
                raise _Malformed(p, "truncated float")
            return _unpack_f64(data, p)[0], p + 8
        if tag == L.A_IDENT:
            s, p = self.string(p)
            return Ident(s), p
        if tag == L.A_SYMREF:
            s, p = self.string(p)
            return SymbolRef(s), p
        if tag == L.A_DICT:
            n, p = self.count(p, "dictionary")
            d: dict[str, Any] = {}
            depth += 1
            for _ in range(n):
                at = p
                k, p = self.string(p)
                if k in d:
                    raise _Malformed(at, f"duplicate dictionary key `{k}`")
                d[k], p = self.attr(p, depth)
            return d, p
        if tag == L.A_HASH:
            name, p = self.string(p)
            n, p = self.count(p, "parameter")
            params = []
            depth += 1
            for _ in range(n):
                x, p = self.attr(p, depth)
                params.append(x)
            return HashAttr(name, tuple(params)), p
        if tag == L.A_KEYPARAM:
            key, p = self.string(p)
            x, p = self.attr(p, depth + 1)
            return KeyParam(key, x), p
        if tag == L.A_TYPE:
            return self.type(p, depth)
        if tag == L.A_SIG:
            n, p = self.count(p, "signature argument")
            args = []
            for _ in range(n):
                v, p = self.ref(p, depth)
                args.append(v)
            n, p = self.count(p, "signature result")
            results = []
            for _ in range(n):
                rt, p = self.type(p, depth)
                results.append(rt)
            w, p = self.count(p, "predicate")
            where = None
            if w:
                where = []
                for _ in range(w - 1):
                    pr, p = self.pred(p, depth)
                    where.append(pr)
            return Signature(args, results, where), p
        if tag == L.A_PRED:
            return self.pred(p, depth)
        if tag == L.A_VALUE:
            return self.ref(p, depth)
        raise _Malformed(pos, f"unknown attribute tag {tag}")

    # ---------------------------------------------------------- operations

    # The parts of an operation only debug information carries: out of the
    # hot path of `op`, which files without debug information take.

    def op_location(self, op: Operation, p: int, depth: int, flags: int) -> int:
        """The op's line (zigzag delta from the previous location) and column, and its comments."""
        if depth == 1:  # the payload's first location: relative to line 0, and the base of the others
            self.base_line = 0
            op.loc, p = self.loc(p)
            self.base_line = op.loc[0]
        else:
            op.loc, p = self.loc(p)
        if flags & _OP_COMMENTS:
            n, p = self.count(p, "comment")
            comments = op.comments
            for _ in range(n):
                c, p = self.string(p)
                comments.append(c)
        return p

    def operand_locations(self, p: int) -> tuple[list[tuple[int, int]], int]:
        data = self.data
        n, p = self.count(p, "location")
        base = self.base_line
        locs = []
        for _ in range(n):
            z = data[p]
            col = data[p + 1]
            if z < 0x80 and col < 0x80:
                p += 2
                line = base + ((z >> 1) ^ -(z & 1))
                if line >= 0:
                    locs.append((line, col))
                    continue
                p -= 2
            lc, p = self.loc(p)
            locs.append(lc)
        return locs, p

    def written_types(self, p: int, depth: int) -> tuple[list[Any], int]:
        """Operand types as the source wrote them where they disagree (None: as the operand's)."""
        data = self.data
        n, p = self.count(p, "written type")
        written: list[Any] = []
        for _ in range(n):
            tag = data[p]
            p += 1
            if tag == 1:
                t, p = self.type(p, depth)
                written.append(t)
            elif tag == 0:
                written.append(None)
            else:
                raise _Malformed(p - 1, f"bad written-type tag {tag}")
        return written, p

    def attribute_locations(self, p: int) -> tuple[dict[str, tuple[int, int]], int]:
        data, strs, nstrs = self.data, self.strs, self.nstrs
        n, p = self.count(p, "location")
        base = self.base_line
        alocs = {}
        for _ in range(n):
            k = data[p]
            z = data[p + 1]
            col = data[p + 2]
            if k < nstrs and k < 0x80 and z < 0x80 and col < 0x80:
                line = base + ((z >> 1) ^ -(z & 1))
                if line >= 0:
                    alocs[strs[k]] = (line, col)
                    p += 3
                    continue
            key, p = self.string(p)
            alocs[key], p = self.loc(p)
        return alocs, p

    def op(self, pos: int, depth: int) -> tuple[Operation, int]:
        """One operation, its regions included. The common cases of every
        field are decoded inline (this is the reader's hot loop, hence its
        length); anything unusual goes to the helpers."""
        if depth > _MAX_DEPTH:
            raise _Malformed(pos, f"nesting deeper than {_MAX_DEPTH}")
        data = self.data
        strs = self.strs
        nstrs = self.nstrs
        values = self.values
        end = self.end
        types = self.types
        # name, flags
        i = data[pos]
        if i < 0x80:
            p = pos + 1
        else:
            i, p = _uv_slow(data, pos + 1, i)
        opdef = self.opdefs.get(i)
        if opdef is None:
            if i >= nstrs:
                raise _Malformed(pos, f"string index {i} out of range")
            opdef = OPS.get(strs[i])
            if opdef is None:
                raise _Malformed(pos, f"unknown operation `{strs[i]}`")
            self.opdefs[i] = opdef
        flags = data[p]
        if flags & ~_OP_FLAGS:
            raise _Malformed(p, f"unknown op flags {flags:#x}")
        p += 1
        attrs: dict[str, Any] = {}
        op = Operation(opdef, attrs=attrs)  # filled below, in place
        debug = self.debug
        if debug:
            p = self.op_location(op, p, depth, flags)
        elif flags & _OP_DEBUG_FLAGS:
            raise _Malformed(p - 1, "debug flags in a file without debug information")
        # operands
        n = data[p]
        if n < 0x80:
            p += 1
        else:
            n, p = _uv_slow(data, p + 1, n)
        if n:
            if n > end - p:
                raise _Malformed(p, f"operand count {n} exceeds the remaining {end - p} bytes")
            add = op.add_operand
            nvalues = len(values)
            for _ in range(n):
                r = data[p]
                if r < 0x80 and 0 <= r - 2 < nvalues:
                    add(values[r - 2])
                    p += 1
                    continue
                v, p = self.ref(p, depth)
                nvalues = len(values)
                add(v)
        if flags & _OP_OPERAND_LOCS:
            op.operand_locs, p = self.operand_locations(p)
        if flags & _OP_WRITTEN_TYPES:
            op.written_types, p = self.written_types(p, depth)
        # region arguments
        nregions = len(opdef.regions)
        if nregions:
            for _ in range(nregions):
                region = op.add_region()
                n, p = self.count(p, "region argument")
                args = region.args
                for k in range(n):
                    name, p = self.string(p)
                    t, p = self.type(p, depth)
                    if debug:
                        loc, p = self.loc(p)
                        a = BlockArgument(name, t, region, k, loc)
                    else:
                        a = BlockArgument(name, t, region, k)
                    args.append(a)
                    values.append(a)
                if debug:
                    region.end_loc, p = self.loc(p)
        # attributes
        n = data[p]
        if n < 0x80:
            p += 1
        else:
            n, p = _uv_slow(data, p + 1, n)
        if n:
            if n > end - p:
                raise _Malformed(p, f"attribute count {n} exceeds the remaining {end - p} bytes")
            for _ in range(n):
                k = data[p]
                if k < 0x80:
                    p += 1
                else:
                    k, p = _uv_slow(data, p + 1, k)
                if k >= nstrs:
                    raise _Malformed(p, f"string index {k} out of range")
                key = strs[k]
                if key in attrs or key[:1] == "$":
                    raise _Malformed(p, f"duplicate or internal attribute `{key}`")
                tag = data[p]
                if tag in (_A_INT, _A_STR):
                    x = data[p + 1]
                    if x < 0x80:
                        if tag == _A_INT:
                            attrs[key] = x
                            p += 2
                            continue
                        if x < nstrs:
                            attrs[key] = strs[x]
                            p += 2
                            continue
                attrs[key], p = self.attr(p, depth)
        if flags & _OP_ATTR_LOCS:
            op.attr_locs, p = self.attribute_locations(p)
        # results
        n = data[p]
        if n < 0x80:
            p += 1
        else:
            n, p = _uv_slow(data, p + 1, n)
        if n:
            if n > end - p:
                raise _Malformed(p, f"result count {n} exceeds the remaining {end - p} bytes")
            add_result = op.add_result
            for _ in range(n):
                k = data[p]
                if k < 0x80:
                    p += 1
                else:
                    k, p = _uv_slow(data, p + 1, k)
                if k >= nstrs:
                    raise _Malformed(p, f"string index {k} out of range")
                code = data[p]
                known = types.get(code) if code < 0x80 else None  # a scalar type seen before: one byte
                if known is None:
                    t, p = self.type(p, depth)
                else:
                    t = known
                    p += 1
                if debug:
                    line = data[p]
                    if line < 0x80:
                        p += 1
                    else:
                        line, p = _uv_slow(data, p + 1, line)
                    col = data[p]
                    if col < 0x80:
                        p += 1
                    else:
                        col, p = _uv_slow(data, p + 1, col)
                    line = self.base_line + ((line >> 1) ^ -(line & 1))
                    if line < 0:
                        raise _Malformed(p, "negative line number")
                    values.append(add_result(t, strs[k], (line, col)))
                else:
                    values.append(add_result(t, strs[k]))
        # region bodies
        if nregions:
            depth += 1
            op_ = self.op
            for region in op.regions:
                n = data[p]
                if n < 0x80:
                    p += 1
                else:
                    n, p = _uv_slow(data, p + 1, n)
                if n > end - p:
                    raise _Malformed(p, f"op count {n} exceeds the remaining {end - p} bytes")
                ops = region.ops
                for _ in range(n):
                    child, p = op_(p, depth)
                    child.parent = region
                    ops.append(child)
        return op, p


def _decode(data: bytes, path: str, check: bool) -> Module:
    base = 0
    try:
        try:
            h = _read_header(data, True)
        except IndexError:
            raise _Malformed(len(data), "truncated file") from None
        strs = h.strings.list
        assert strs is not None  # eager: every string decoded
        module = Module(h.path if h.path is not None else path)
        module.end_comments = h.end_comments
        try:
            for comment in h.end_comments if check else ():
                check_comment(comment)
        except StructureError as bad:
            raise _Malformed(0, bad.why) from None
        opdefs: dict[int, OpDef] = {}
        types: dict[int, Type] = {}
        body = module.body
        for e in h.entries:
            base = e.offset
            payload = data[base:base + e.length]
            dec = _Payload(payload, strs, h.debug, opdefs, types)
            try:
                op, p = dec.op(0, 1)
            except IndexError:
                raise _Malformed(e.length, "payload ends in the middle of an item") from None
            if p != e.length:
                raise _Malformed(p, f"payload has {e.length - p} trailing bytes")
            if check:
                try:
                    check_module_op(op)
                except StructureError as bad:
                    raise _Malformed(0, bad.why) from None
            if (op.opdef.name, *symbol_fields(op)) != (e.op_name, e.symbol, e.public, e.retain, e.export):
                raise _Malformed(0, "symbol table entry disagrees with its payload")
            op.parent = body
            body.ops.append(op)
            base = 0
    except _Malformed as err:
        err.offset += base
        raise
    except (IndexError, ValueError, struct.error) as err:
        raise _Malformed(base, f"malformed ({type(err).__name__})") from None
    return module


def read_module(data: bytes, path: str = "<bytecode>") -> Module:
    """Decode `.loombc` bytes into a Module that passes the structural check.

    The module's path is the one stored in the file (files written with debug
    information) or else `path`, which also names the file in diagnostics.
    Raises `CompileError` (BYTECODE/001 or BYTECODE/003) for anything that is
    not a well-formed module of a supported version.
    """
    return _read(data, path, True)


def decode_module(data: bytes, path: str = "<bytecode>") -> Module:
    """The codec alone, without the structural check: for tests of the format
    itself. Everything a user hands us goes through `read_module`."""
    return _read(data, path, False)


def _read(data: bytes, path: str, check: bool) -> Module:
    data = bytes(data)
    try:
        with gc_paused():
            module = _decode(data, path, check)
    except _Malformed as err:
        raise _fail(path, err) from None
    except _BadVersion as err:
        raise _fail(path, err) from None
    except (IndexError, ValueError, struct.error) as err:  # safety net; validation should catch all
        raise _fail(path, _Malformed(0, f"malformed ({type(err).__name__})")) from None
    return module
