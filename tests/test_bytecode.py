"""Tests of the `.loombc` bytecode (docs/bytecode.md)."""

from __future__ import annotations

import itertools
import math
import pathlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli.bytecode import SymbolEntry, read_module, read_symbol_table, write_module
from loomcli.bytecode import layout as L
from loomcli.bytecode import reader as reader_mod
from loomcli.bytecode.reader import decode_module
from loomcli.diagnostics import CompileError
from loomcli.ir.attrs import HashAttr, Ident, KeyParam, Pred, SymbolRef
from loomcli.ir.core import BlockArgument, LocalName, Module, Operation, Signature, Value
from loomcli.ir.ops import OPS
from loomcli.ir.types import F32, I32, INDEX, ShapedType
from loomcli.text.parser import parse
from loomcli.text.printer import print_module

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.loom"))
VALID = sorted(p for p in (ROOT / "tests").rglob("*.loom") if "valid" in p.parent.parts)


def _load(path: pathlib.Path) -> tuple[str, Module]:
    text = path.read_text()
    module, _ = parse(text, str(path.relative_to(ROOT)))
    return text, module


def _strip_comments(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("//"))


# ---------------------------------------------------------------- structural comparison


class _Same:
    """Deep comparison of two modules; values are matched by position of definition."""

    def __init__(self, debug: bool) -> None:
        self.map: dict[int, Value] = {}
        self.debug = debug

    def value_def(self, a: Value, b: Value) -> None:
        assert type(a) is type(b), (a, b)
        assert a.name == b.name and b.loc == (a.loc if self.debug else (0, 0)), (a, b, a.loc, b.loc)
        self.type(a.type, b.type)
        assert id(a) not in self.map
        self.map[id(a)] = b

    def value_ref(self, a: Value, b: Value) -> None:
        if id(a) not in self.map:  # a value defined where it is used (free or local name)
            self.value_def(a, b)
        assert self.map[id(a)] is b, (a, b)

    def type(self, a, b) -> None:
        if isinstance(a, ShapedType):
            assert isinstance(b, ShapedType) and a.name == b.name and a.elem is b.elem
            assert len(a.dims) == len(b.dims)
            for x, y in zip(a.dims, b.dims):
                if isinstance(x, int):
                    assert type(y) is int and x == y
                else:
                    self.value_ref(x, y)
        else:
            assert a is b, (a, b)

    def pred(self, a: Pred, b: Pred) -> None:
        assert type(b) is Pred and a.name == b.name and len(a.args) == len(b.args)
        assert b.loc == (a.loc if self.debug else None)
        assert getattr(b, "arg_locs", None) == (getattr(a, "arg_locs", None) if self.debug else None)
        for x, y in zip(a.args, b.args):
            if isinstance(x, Value):
                self.value_ref(x, y)
            else:
                assert type(y) is int and x == y

    def attr(self, a, b) -> None:
        assert type(a) is type(b) or (isinstance(a, ShapedType) and isinstance(b, ShapedType)), (a, b)
        if isinstance(a, float):
            assert struct.pack("<d", a) == struct.pack("<d", b)
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                self.attr(x, y)
        elif isinstance(a, dict):
            assert list(a) == list(b)
            for k in a:
                self.attr(a[k], b[k])
        elif isinstance(a, HashAttr):
            assert a.name == b.name
            self.attr(a.params, b.params)
        elif isinstance(a, KeyParam):
            assert a.key == b.key
            self.attr(a.value, b.value)
        elif isinstance(a, Signature):
            assert len(a.args) == len(b.args)
            for x, y in zip(a.args, b.args):
                self.value_ref(x, y)
            assert len(a.results) == len(b.results)
            for x, y in zip(a.results, b.results):
                self.type(x, y)
            assert (a.where is None) == (b.where is None)
            for x, y in zip(a.where or [], b.where or []):
                self.pred(x, y)
        elif isinstance(a, Pred):
            self.pred(a, b)
        elif isinstance(a, Value):
            self.value_ref(a, b)
        elif hasattr(a, "dims") or a.__class__.__name__ == "ScalarType":
            self.type(a, b)
        else:
            assert a == b, (a, b)

    def op(self, a: Operation, b: Operation, debug: bool) -> None:
        assert a.opdef is b.opdef
        assert b.loc == (a.loc if debug else (0, 0))
        assert b.comments == (a.comments if debug else [])
        assert b.operand_locs == (a.operand_locs if debug else None)
        assert b.attr_locs == (a.attr_locs if debug else None)
        assert len(a.operands) == len(b.operands)
        for x, y in zip(a.operands, b.operands):
            self.value_ref(x, y)
        assert len(a.regions) == len(b.regions)
        for ra, rb in zip(a.regions, b.regions):
            assert rb.owner is b
            assert rb.end_loc == (ra.end_loc if debug else (0, 0))
            assert len(ra.args) == len(rb.args)
            for k, (x, y) in enumerate(zip(ra.args, rb.args)):
                assert isinstance(y, BlockArgument) and y.region is rb and y.index == k
                self.value_def(x, y)
        av, bv = dict(a.attr_items()), dict(b.attr_items())
        keys = [k for k in av if not k.startswith("$")]
        assert list(bv) == keys
        for k in keys:
            self.attr(av[k], bv[k])
        assert len(a.results) == len(b.results)
        for k, (x, y) in enumerate(zip(a.results, b.results)):
            assert y.op is b and y.index == k
            self.value_def(x, y)
        for ra, rb in zip(a.regions, b.regions):
            assert len(ra.ops) == len(rb.ops)
            for x, y in zip(ra.ops, rb.ops):
                assert y.parent is rb
                self.op(x, y, debug)

    def uses(self, a: Module, b: Module) -> None:
        ops_a = list(a.walk())
        ops_b = list(b.walk())
        index_b = {id(o): n for n, o in enumerate(ops_b)}
        index_a = {id(o): n for n, o in enumerate(ops_a)}
        for oa, ob in zip(ops_a, ops_b):
            for va, vb in zip(oa.operands, ob.operands):
                assert [(index_a[id(o)], i) for o, i in va.uses] == [(index_b[id(o)], i) for o, i in vb.uses]


def assert_same(a: Module, b: Module, debug: bool = True, path: str | None = None) -> None:
    if debug:
        assert b.path == a.path
        assert b.end_comments == a.end_comments
    else:
        assert b.end_comments == []
        if path is not None:
            assert b.path == path
    assert len(a.ops) == len(b.ops)
    same = _Same(debug)
    for x, y in zip(a.ops, b.ops):
        assert y.parent is b.body
        same.op(x, y, debug)
    same.uses(a, b)


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("path", SAMPLES + VALID, ids=lambda p: str(p.relative_to(ROOT)))
def test_round_trip(path: pathlib.Path) -> None:
    text, module = _load(path)
    data = write_module(module)
    assert data.startswith(L.MAGIC)
    again = read_module(data)
    assert print_module(again) == text
    assert write_module(again) == data
    assert_same(module, again)


@pytest.mark.parametrize("path", SAMPLES + VALID, ids=lambda p: str(p.relative_to(ROOT)))
def test_round_trip_without_debug(path: pathlib.Path) -> None:
    text, module = _load(path)
    data = write_module(module, keep_debug=False)
    again = read_module(data, "x.loombc")
    assert again.path == "x.loombc"
    assert print_module(again) == _strip_comments(text)
    assert write_module(again, keep_debug=False) == data
    assert_same(module, again, debug=False, path="x.loombc")
    assert all(op.loc == (0, 0) and not op.comments for op in again.walk())


def test_no_samples_missing() -> None:
    assert len(SAMPLES) >= 5


def test_deterministic() -> None:
    for path in SAMPLES:
        text, _ = _load(path)
        first = write_module(parse(text, "a.loom")[0])
        assert first == write_module(parse(text, "a.loom")[0])
        assert first == write_module(read_module(first))


def test_compiled_bytes_do_not_depend_on_paths_or_comments() -> None:
    text = (ROOT / "samples" / "saxpy.loom").read_text()
    a = write_module(parse(text, "/home/alice/saxpy.loom")[0], keep_debug=False)
    b = write_module(parse(text, "build/other/place.loom")[0], keep_debug=False)
    c = write_module(parse("// a different comment\n\n\n" + _strip_comments(text), "z.loom")[0], keep_debug=False)
    assert a == b == c
    assert b"alice" not in a and b"one invocation" not in a
    with_debug = write_module(parse(text, "/home/alice/saxpy.loom")[0])
    assert b"/home/alice/saxpy.loom" in with_debug
    assert read_module(with_debug, "elsewhere.loombc").path == "/home/alice/saxpy.loom"


def test_definitions_share_signature_and_block_arguments() -> None:
    for path in SAMPLES:
        _, module = _load(path)
        for op in read_module(write_module(module)).walk():
            if op.name in ("kernel.def", "func.def", "template.def"):
                assert op.attr("sig").args == op.regions[0].args
                assert all(a is b for a, b in zip(op.attr("sig").args, op.regions[0].args))
            if op.name == "kernel.def":
                assert all(a is b for a, b in zip(op.attr("launch").args, op.regions[1].args))
                assert len(op.attr("launch").args) == len(op.regions[1].args)
            if op.name == "command.program.def":
                both = op.attr("sig").args + op.attr("launch").args
                assert len(both) == len(op.regions[0].args)
                assert all(a is b for a, b in zip(both, op.regions[0].args))


def test_declarations_and_predicates() -> None:
    text = """\
config.decl @model.layers : %v: index where [range(%v, 1, 256)]

kernel.decl @k(%n: index, %v: view<[%n]xf32>) where [mul(%n, 16), ne(%n, -3)] launch(%n: index, %out: buffer)

func.decl pure @twice(%x: f32) -> (f32)

func.def public pure @twice2(%x: f32) -> (f32) where [] {
  %a, %b = index.assume %x, %x [range(%x, 0, 18446744073709551615), ge(%x, -9223372036854775808)] : f32, f32
  func.return %x : f32
}

template.decl @tile.pick(%n: index) -> (index)
"""
    module, _ = parse(text, "d.loom")
    again = read_module(write_module(module))
    assert print_module(again) == text
    assert_same(module, again)
    decl = again.ops[1]
    args = decl.attr("sig").args
    assert all(type(a) is LocalName for a in args)
    assert args[1].type.dims[0] is args[0]
    assert decl.attr("sig").where[0].args[0] is args[0]
    cfg = again.ops[0]
    assert cfg.attr("sig").where[0].args[0] is cfg.attr("sig").args[0]


# ---------------------------------------------------------------- attributes


def _kernel_module() -> Module:
    text = (ROOT / "samples" / "saxpy.loom").read_text()
    return parse(text, "saxpy.loom")[0]


NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_1234))[0]


def test_every_attribute_kind() -> None:
    module = _kernel_module()
    kernel = module.ops[0]
    n = kernel.regions[1].args[0]
    values = {
        "ints": [0, 1, 127, 128, -1, -128, 300, -(2 ** 63), 2 ** 64 - 1, 2 ** 63],
        "floats": (0.0, -0.0, 1.5, float("inf"), float("-inf"), float("nan"), NAN_PAYLOAD, 5e-324, 1e308, 0.1),
        "bools": [True, False, 1, 0],
        "strs": ["", "a", "é\u00ff\U0001f600", "quote\"back\\slash\nnl\x00"],
        "ident": Ident("same"),
        "sym": SymbolRef("a.b"),
        "hash": HashAttr("target.subgroup.size", (64, KeyParam("k", Ident("v")), HashAttr("x"))),
        "nested": [(1, [2, (3,)]), [], ()],
        "dict": {"z": 1, "a": {"q": None}, "m": [True]},
        "none": None,
        "type": I32,
        "shaped": ShapedType("view", (n, 4), F32),
        "sig": Signature([n], [INDEX, ShapedType("tensor", (2, 3), F32)], [Pred("range", [n, 1, 256], (3, 4))]),
        "sig_no_where": Signature([], [], None),
        "preds": [Pred("pow2", [n], None), Pred("lt", [n, -5], (1, 1))],
        "value": n,
        "$internal": object(),
    }
    if "arg_locs" in getattr(Pred, "__dataclass_fields__", {}):
        values["preds"][1].arg_locs = [(1, 2), (1, 5)]
    kernel.regions[1].ops[0]._attrs.update(values)  # undeclared on purpose: past the accessors
    data = write_module(module)
    with pytest.raises(CompileError, match="malformed at byte"):
        read_module(data)  # the structural check: none of these belong on the op
    again = decode_module(data)
    got = dict(again.ops[0].regions[1].ops[0].attr_items())
    assert "$internal" not in got
    assert_same(module, again)
    for key, value in values.items():
        if key.startswith("$"):
            continue
        if key not in ("floats", "sig", "sig_no_where", "preds", "shaped", "value"):
            assert repr(got[key]) == repr(value), key
    assert [type(x) for x in got["bools"]] == [bool, bool, int, int]
    assert type(got["floats"]) is tuple and type(got["nested"]) is list
    assert type(got["nested"][0]) is tuple and type(got["nested"][0][1]) is list
    for x, y in zip(values["floats"], got["floats"]):
        assert struct.pack("<d", x) == struct.pack("<d", y)
    assert math.copysign(1.0, got["floats"][1]) == -1.0
    assert list(got["dict"]) == ["z", "a", "m"]
    n2 = again.ops[0].regions[1].args[0]
    assert got["shaped"].dims[0] is n2 and got["value"] is n2
    assert got["sig"].args[0] is n2 and got["sig"].where[0].args[0] is n2
    assert got["sig_no_where"].where is None and got["sig"].where[0].loc == (3, 4)
    assert got["preds"][0].loc is None
    assert write_module(again) == data


@pytest.mark.parametrize("bad", [2 ** 64, -(2 ** 63) - 1, object(), {1: 2}])
def test_writer_rejects_unencodable_attributes(bad) -> None:
    module = _kernel_module()
    module.ops[0]._attrs["bad"] = bad  # undeclared on purpose: past the accessors
    with pytest.raises((ValueError, TypeError)):
        write_module(module)


def test_written_types_kept_only_when_they_disagree() -> None:
    module = _kernel_module()
    op = module.ops[0].regions[0].ops[3]  # %padded = index.add %n, %bias : index
    assert op.name == "index.add" and op.written_types is not None
    again = read_module(write_module(module))
    assert again.ops[0].regions[0].ops[3].written_types is None
    op.written_types = [I32, None]
    again = read_module(write_module(module))  # kept for the verifier's TYPE/001
    assert again.ops[0].regions[0].ops[3].written_types == [I32, None]


def test_free_values_are_kept() -> None:
    module = _kernel_module()
    ghost = Value("ghost", F32, (7, 7))
    op = module.ops[0].regions[1].ops[0]
    op.add_operand(ghost)
    with pytest.raises(CompileError, match="malformed at byte"):
        read_module(write_module(module))
    again = decode_module(write_module(module))
    got = again.ops[0].regions[1].ops[0].operands[-1]
    assert type(got) is Value and got.name == "ghost" and got.loc == (7, 7) and got.type is F32
    assert got.uses == [(again.ops[0].regions[1].ops[0], len(op.operands) - 1)]


# ---------------------------------------------------------------- symbol table


def test_symbol_table() -> None:
    _, module = _load(ROOT / "samples" / "frontier.loom")
    data = write_module(module)
    entries = read_symbol_table(data)
    assert [(e.op_name, e.symbol) for e in entries] == [
        ("config.def", "run.trace"), ("template.decl", "frontier.schedule"),
        ("template.def", "large"), ("template.def", "small"),
        ("kernel.def", "classified"), ("kernel.def", "local"), ("kernel.def", "trace"),
        ("kernel.entry.decl", "external"), ("command.program.def", "run"),
    ]
    assert [e.export for e in entries if e.op_name == "kernel.def"] == ["classified", "local", "trace"]
    assert [e.symbol for e in entries if e.public] == ["run"]
    assert not any(e.retain for e in entries)
    assert all(isinstance(e, SymbolEntry) and e.kind == e.op_name for e in entries)
    # Payloads tile the end of the file in order.
    assert entries[-1].offset + entries[-1].length == len(data)
    for a, b in itertools.pairwise(entries):
        assert a.offset + a.length == b.offset
    with pytest.raises(AttributeError):
        entries[0].symbol = "x"  # frozen


def test_symbol_table_does_not_decode_payloads(monkeypatch) -> None:
    _, module = _load(ROOT / "samples" / "frontier.loom")
    data = write_module(module)

    def forbidden(*args, **kwargs):
        raise AssertionError("payload decoded")

    monkeypatch.setattr(reader_mod, "Operation", forbidden)
    monkeypatch.setattr(reader_mod._Payload, "op", forbidden)
    monkeypatch.setattr(Operation, "__init__", forbidden)
    entries = read_symbol_table(data)
    assert len(entries) == 9
    # A payload corrupted beyond recognition does not matter to the symbol table.
    last = entries[-1]
    broken = data[:last.offset] + b"\xff" * last.length
    assert read_symbol_table(broken) == entries


def test_symbol_table_flags() -> None:
    text = "func.def public retain @f() {\n  func.return\n}\nmodule.import \"k\" [@a]\n"
    module, _ = parse(text, "f.loom")
    data = write_module(module)
    e = read_symbol_table(data)
    assert (e[0].op_name, e[0].symbol, e[0].public, e[0].retain, e[0].export) == ("func.def", "f", True, True, None)
    assert (e[1].op_name, e[1].symbol) == ("module.import", None)
    assert print_module(read_module(data)) == text


# ---------------------------------------------------------------- malformed input


def _code(data: bytes) -> str:
    with pytest.raises(CompileError) as info:
        read_module(data, "bad.loombc")
    d = info.value.diagnostics[0]
    assert d.file == "bad.loombc" and d.severity == "error"
    return d.code + " " + d.message


def test_unknown_version() -> None:
    data = bytearray(write_module(_kernel_module()))
    assert data[len(L.MAGIC)] == L.VERSION
    data[len(L.MAGIC)] = 2
    msg = _code(bytes(data))
    assert msg.startswith("BYTECODE/001") and "version 2" in msg
    data[len(L.MAGIC)] = 0
    assert _code(bytes(data)).startswith("BYTECODE/001")
    with pytest.raises(CompileError) as info:
        read_symbol_table(bytes(data))
    assert info.value.diagnostics[0].code == "BYTECODE/001"


@pytest.mark.parametrize("data", [b"", b"LOOM", b"\x7fELF\x02\x01\x01", b"// text\n", b"LOOMBC\x01\x01"])
def test_not_bytecode(data: bytes) -> None:
    assert _code(data).startswith("BYTECODE/001")


def test_truncated_and_trailing() -> None:
    data = write_module(_kernel_module())
    assert _code(data + b"\x00").startswith("BYTECODE/003")
    assert _code(data[:len(L.MAGIC)]).startswith("BYTECODE/003")
    assert "trailing" in _code(data + b"\x00")


def test_every_truncation_and_byte_overwrite_is_diagnosed() -> None:
    for debug in (True, False):
        data = write_module(_kernel_module(), keep_debug=debug)
        for i in range(len(data)):
            assert _code(data[:i]).startswith("BYTECODE/")
        for i in range(len(L.MAGIC) + 1, len(data)):
            for b in (0x00, 0x7F, 0xFF):
                if data[i] != b:
                    _read_or_diagnose(data[:i] + bytes([b]) + data[i + 1:])


def test_huge_counts_do_not_allocate() -> None:
    head = L.MAGIC + bytes([L.VERSION, 0])
    huge = b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f"  # 2^63 - 1
    assert "exceed" in _code(head + huge)                    # string count
    assert "varint" in _code(head + b"\x80" * 11 + b"\x00")  # over-long varint
    assert "exceed" in _code(head + b"\x01" + huge)           # string length
    assert "exceed" in _code(head + b"\x00" + huge)           # symbol count
    # A huge offset or length in the symbol table.
    strings = b"\x01\x0a" + b"kernel.def"
    assert "offset" in _code(head + strings + b"\x01\x00\x00" + huge + b"\x05")
    assert "overrun" in _code(head + strings + b"\x01\x00\x00\x00" + huge)


def _nest(depth: int) -> Module:
    module = Module("deep.loom")
    outer = Operation(OPS["command.serial"])
    module.body.append(outer)
    op = outer
    for _ in range(depth - 2):  # the innermost op is a terminator
        inner = Operation(OPS["command.serial"])
        region = op.add_region()
        region.append(inner)
        region.append(Operation(OPS["command.yield"]))
        op = inner
    op.add_region().append(Operation(OPS["command.yield"]))
    return module


def test_nesting_limit(monkeypatch) -> None:
    ok = _nest(L.MAX_DEPTH)
    serial = [op for op in read_module(write_module(ok)).walk() if op.name == "command.serial"]
    assert len(serial) == L.MAX_DEPTH - 1
    with pytest.raises(ValueError):
        write_module(_nest(L.MAX_DEPTH + 1))
    monkeypatch.setattr(L, "MAX_DEPTH", 10 ** 6)  # let the writer produce what readers must refuse
    deep = write_module(_nest(400))
    assert "nesting" in _code(deep)
    module = _kernel_module()
    nested: list = []
    for _ in range(400):
        nested = [nested]
    module.ops[0]._attrs["deep"] = nested  # undeclared on purpose: past the accessors
    assert "nesting" in _code(write_module(module))


def test_unknown_names_are_rejected() -> None:
    data = write_module(_kernel_module(), keep_debug=False)
    assert _code(data.replace(b"index.constant", b"index.constanX")).startswith("BYTECODE/003")
    assert "unknown operation" in _code(data.replace(b"index.constant", b"index.constanX"))
    assert "unknown type" in _code(data.replace(b"offset", b"offsex"))
    assert "type `f3x`" in _code(data.replace(b"f32", b"f3x"))


def test_symbol_table_must_agree_with_payloads(monkeypatch) -> None:
    from loomcli.bytecode import writer

    real = writer.symbol_fields
    monkeypatch.setattr(writer, "symbol_fields", lambda op: (real(op)[0], True, False, None))
    assert "disagrees" in _code(write_module(_kernel_module()))


def _read_or_diagnose(data: bytes) -> None:
    try:
        module = read_module(data, "fuzz.loombc")
    except CompileError as e:
        assert e.diagnostics and e.diagnostics[0].code in ("BYTECODE/001", "BYTECODE/003"), e.diagnostics
        return
    # Whatever reads back is representable again.
    write_module(module, keep_debug=bool(data[len(L.MAGIC) + 1] & L.FLAG_DEBUG))


_CORPUS = [write_module(_load(p)[1], keep_debug=d) for p in SAMPLES for d in (True, False)]
_HUGE_VARINTS = [b"\xff" * 9 + b"\x7f", b"\x80" * 12 + b"\x01", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x80"]


@st.composite
def _mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(_CORPUS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["truncate", "flip", "overwrite", "insert", "delete", "varint"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "truncate":
            del data[i:]
        elif kind == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "overwrite" and data:
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[i:i + len(chunk)] = chunk
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[i:i + draw(st.integers(1, 8))]
        else:
            data[i:i + draw(st.integers(0, 2))] = draw(st.sampled_from(_HUGE_VARINTS))
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_mutated_files_never_crash(data: bytes) -> None:
    _read_or_diagnose(data)
    try:
        read_symbol_table(data)
    except CompileError as e:
        assert e.diagnostics[0].code.startswith("BYTECODE/")


def _mutate_payload(draw, payload: bytearray, same_length: bool) -> bytearray:
    kinds = ["flip", "overwrite", "small", "high"]
    if not same_length:
        kinds += ["truncate", "insert", "delete", "varint"]
    for _ in range(draw(st.integers(1, 3))):
        if not payload:
            break
        kind = draw(st.sampled_from(kinds))
        i = draw(st.integers(0, len(payload) - 1))
        if kind == "flip":
            payload[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=4))[:len(payload) - i]
            payload[i:i + len(chunk)] = chunk
        elif kind == "small":
            payload[i] = draw(st.integers(0, 20))
        elif kind == "high":
            payload[i] = draw(st.integers(0x80, 0xFF))
        elif kind == "truncate":
            del payload[i:]
        elif kind == "insert":
            payload[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del payload[i:i + draw(st.integers(1, 8))]
        else:
            payload[i:i + draw(st.integers(0, 2))] = draw(st.sampled_from(_HUGE_VARINTS))
    return payload


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_payloads_never_crash(data) -> None:
    """Mutations inside one payload that keep the file's framing intact reach the op decoder."""
    file = data.draw(st.sampled_from(_CORPUS))
    entry = data.draw(st.sampled_from(read_symbol_table(file)))
    payload = _mutate_payload(data.draw, bytearray(file[entry.offset:entry.offset + entry.length]), True)
    _read_or_diagnose(file[:entry.offset] + bytes(payload) + file[entry.offset + entry.length:])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_payload_decoder_on_reshaped_payloads(data) -> None:
    """Payloads that grow or shrink: the decoder itself only ever reports malformed input
    (`_Malformed`, or `IndexError` on running off the payload's end, which read_module turns
    into BYTECODE/003)."""
    file = data.draw(st.sampled_from(_CORPUS))
    header = reader_mod._read_header(file, True)
    entry = data.draw(st.sampled_from(header.entries))
    payload = bytes(_mutate_payload(data.draw, bytearray(file[entry.offset:entry.offset + entry.length]), False))
    dec = reader_mod._Payload(payload, header.strings.list, header.debug, {}, {})
    try:
        op, _ = dec.op(0, 1)
    except (reader_mod._Malformed, IndexError):
        return
    module = Module("m.loom")
    module.body.append(op)
    write_module(module, keep_debug=header.debug)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_after_the_header(tail: bytes) -> None:
    _read_or_diagnose(L.MAGIC + bytes([L.VERSION]) + tail)


# ---------------------------------------------------------------- size


def _big_text(copies: int) -> str:
    src = (ROOT / "samples" / "saxpy.loom").read_text()
    parts = []
    for i in range(copies):
        parts.append(src.replace("@saxpy_case", f"@saxpy_case_{i}").replace("@saxpy_big", f"@saxpy_big_{i}")
                     .replace("@saxpy[", f"@saxpy_{i}[").replace("@saxpy(", f"@saxpy_{i}(")
                     .replace('export("saxpy")', f'export("saxpy_{i}")'))
    return "\n".join(parts)


def test_large_module_round_trips() -> None:
    """A ~1 MB module survives the trip (speed is measured by bench/run.py, never asserted here)."""
    text = _big_text(680)  # ~1.08 MB, 21,080 ops
    module, _ = parse(text, "big.loom")
    data = write_module(module)
    assert print_module(read_module(data)) == text
    assert write_module(read_module(data)) == data
