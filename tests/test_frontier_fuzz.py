"""`.loomcmd` reader fuzzing: hostile bytes give BYTECODE/001 or /003, never another exception.

Valid files come from generated trees (and the samples); mutations flip,
drop, insert and truncate bytes. A mutant that still decodes must be
canonical: writing what was read gives the same bytes.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli.diagnostics import CompileError
from loomcli.frontier.loomcmd import CommandFile, SpecArgument, print_command, read_command, write_command
from loomcli.frontier.prepare import Argument, Dispatch, Group, Node, make_group

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INTS = {"i1": (0, 1), "i8": (-128, 127), "i16": (-(1 << 15), (1 << 15) - 1), "i32": (-(1 << 31), (1 << 31) - 1),
        "i64": (-(1 << 63), (1 << 63) - 1), "index": (-(1 << 63), (1 << 63) - 1), "offset": (0, (1 << 63) - 1)}


def scalar() -> st.SearchStrategy[Argument]:
    ints = [st.integers(lo, hi).map(lambda v, t=t: Argument(t, bool(v) if t == "i1" else v))
            for t, (lo, hi) in INTS.items()]
    floats = [st.floats(allow_nan=False, width=64).map(lambda v: Argument("f64", v)),
              st.floats(allow_nan=False, width=32).map(lambda v: Argument("f32", v))]
    return st.one_of(*ints, *floats)


def argument(buffers: int) -> st.SearchStrategy[Argument]:
    if buffers == 0:
        return scalar()
    return st.one_of(scalar(), st.integers(0, buffers - 1).map(lambda k: Argument("buffer", k)))


def dispatch(buffers: int) -> st.SearchStrategy[Dispatch]:
    u32 = st.integers(0, (1 << 32) - 1)
    triple = st.tuples(u32, u32, u32)
    return st.builds(Dispatch, u32, triple, triple, st.lists(argument(buffers), max_size=4).map(tuple))


def tree(buffers: int) -> st.SearchStrategy[Node]:
    return st.recursive(dispatch(buffers), lambda inner: st.builds(
        make_group, st.sampled_from(["serial", "concurrent"]), st.lists(inner, max_size=4)), max_leaves=12)


@st.composite
def command_files(draw: st.DrawFn) -> CommandFile:
    buffers = draw(st.lists(st.text(min_size=1, max_size=6), max_size=3))
    root = make_group("serial", [draw(tree(len(buffers))) for _ in range(draw(st.integers(0, 3)))])
    spec = tuple(SpecArgument(draw(st.text(max_size=4)), draw(scalar())) for _ in range(draw(st.integers(0, 2))))
    return CommandFile(draw(st.text(min_size=1, max_size=8)), draw(st.sampled_from(["", "amdgpu:gfx1100"])),
                       spec, tuple(buffers), root)


def _bytecode_only(data: bytes) -> CommandFile | None:
    try:
        return read_command(data, "fuzz.loomcmd")
    except CompileError as e:
        assert {d.code for d in e.diagnostics} <= {"BYTECODE/001", "BYTECODE/003"}, e.diagnostics
        return None


@SETTINGS
@given(command_files())
def test_generated_files_round_trip(program: CommandFile) -> None:
    data = write_command(program)
    back = read_command(data)
    assert back == program
    assert write_command(back) == data
    print_command(back)


def _has_float(program: CommandFile) -> bool:
    def walk(node: Node) -> bool:
        if isinstance(node, Group):
            return any(walk(c) for c in node.children)
        return any(a.type in ("f16", "bf16", "f32", "f64") for a in node.arguments)
    return walk(program.root) or any(s.argument.type.startswith(("f", "bf")) for s in program.spec)


@SETTINGS
@given(command_files(), st.lists(st.tuples(st.sampled_from(["flip", "drop", "insert", "truncate"]),
                                           st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_files_fail_cleanly(program: CommandFile, edits: list[tuple[str, int, int]]) -> None:
    data = bytearray(write_command(program))
    for kind, where, byte in edits:
        at = where % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data[at] ^= byte or 1
        elif kind == "drop" and at < len(data):
            del data[at]
        elif kind == "insert":
            data.insert(at, byte)
        elif kind == "truncate":
            del data[at:]
    back = _bytecode_only(bytes(data))
    if back is not None:
        print_command(back)
        if not _has_float(back):  # float payloads (signalling NaNs) need not survive a round trip
            assert write_command(back) == bytes(data)


@SETTINGS
@given(st.binary(max_size=64))
def test_random_bytes_fail_cleanly(data: bytes) -> None:
    _bytecode_only(b"LOOMCMD\0\x01\0\0\0\0\0\0\0" + data)
    _bytecode_only(data)


def test_deep_nesting_is_refused() -> None:
    leaf = Dispatch(0, (1, 1, 1), (1, 1, 1), ())
    node: Node = leaf
    for depth in range(300):
        node = Group("concurrent" if depth % 2 == 0 else "serial", (node, leaf))
    assert isinstance(node, Group) and node.kind == "serial"
    data = write_command(CommandFile("p", "", (), (), Group("serial", (Group("concurrent", (node, leaf)),))))
    assert _bytecode_only(data) is None


def test_huge_counts_are_refused_without_allocating() -> None:
    head = b"LOOMCMD\0" + (1).to_bytes(4, "little") + bytes(4) + (1).to_bytes(4, "little") + b"p" + bytes(4)
    for tail in (b"\xff\xff\xff\xff", bytes(4) + b"\xff\xff\xff\xff", bytes(8) + b"\0\xff\xff\xff\xff"):
        assert _bytecode_only(head + tail) is None
