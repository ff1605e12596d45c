"""`program-N.loomcmd`: portable command-program bytes (layout: docs/commands.md).

One file holds one prepared command program: its symbol, the target it was
prepared for, its specialization arguments, its buffer parameters and the
serial/concurrent tree of dispatches. Integers are little-endian and fixed
width; strings are length-prefixed UTF-8. The writer is deterministic and
produces the canonical tree only; the reader treats its input as hostile:
every count, length, ordinal and value is checked against what remains and
against the canonical form, and any violation is BYTECODE/001 (magic,
version) or BYTECODE/003 (anything else) - never an exception of Python's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.frontier.prepare import Argument, Dispatch, Group, Node

MAGIC = b"LOOMCMD\0"
VERSION = 1
FORMAT = "loom-command"

# Argument type codes; 0 is a program buffer.
TYPE_CODES = {"buffer": 0, "i1": 1, "i8": 2, "i16": 3, "i32": 4, "i64": 5, "f16": 6, "bf16": 7, "f32": 8,
              "f64": 9, "index": 10, "offset": 11}
TYPE_NAMES = {code: name for name, code in TYPE_CODES.items()}
SERIAL, CONCURRENT, DISPATCH = 0, 1, 2
KINDS = {"serial": SERIAL, "concurrent": CONCURRENT}
MAX_DEPTH = 256  # deeper trees are refused: real programs nest a handful of levels
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class SpecArgument:
    name: str
    argument: Argument


@dataclass(frozen=True)
class CommandFile:
    """What a `.loomcmd` holds."""

    symbol: str
    target: str                      # "" when prepared without a target
    spec: tuple[SpecArgument, ...]
    buffers: tuple[str, ...]         # names of the program's buffer parameters
    root: Group                      # serial


# ---------------------------------------------------------------- values <-> 64-bit slots


def _slot(arg: Argument) -> int:
    from loomcli.ir.types import SCALAR_TYPES
    from loomcli.semantics.fold import float_bits, pattern

    if arg.is_buffer:
        return int(arg.value)
    t = SCALAR_TYPES[arg.type]
    if t.category == "float":
        return float_bits(t, arg.value)
    width = 64 if arg.type in ("index", "offset") else t.bits
    return pattern(int(arg.value), width)


def _from_slot(code: int, bits: int) -> Argument:
    """Raises ValueError for a pattern the type cannot hold."""
    from loomcli.ir.types import SCALAR_TYPES
    from loomcli.launch.program import BadValue, value_from_bits

    name = TYPE_NAMES[code]
    if code == 0:
        return Argument("buffer", bits)
    try:
        return Argument(name, value_from_bits(bits, SCALAR_TYPES[name]))
    except BadValue as e:
        raise ValueError(str(e)) from None


# ---------------------------------------------------------------- writing


def write_command(program: CommandFile) -> bytes:
    """The bytes of `program` (its tree must be canonical: see `prepare.make_group`)."""
    out = bytearray(MAGIC)
    out += U32.pack(VERSION) + U32.pack(0)
    _str(out, program.symbol)
    _str(out, program.target)
    out += U32.pack(len(program.spec))
    for s in program.spec:
        _str(out, s.name)
        _arg(out, s.argument)
    out += U32.pack(len(program.buffers))
    for name in program.buffers:
        _str(out, name)
    stack: list[Node] = [program.root]
    while stack:
        node = stack.pop()
        if isinstance(node, Group):
            out.append(KINDS[node.kind])
            out += U32.pack(len(node.children))
            stack.extend(reversed(node.children))
        else:
            out.append(DISPATCH)
            out += U32.pack(node.requirement)
            for v in node.workgroups + node.workgroup_size:
                out += U32.pack(v)
            out += U32.pack(len(node.arguments))
            for a in node.arguments:
                _arg(out, a)
    return bytes(out)


def _str(out: bytearray, s: str) -> None:
    data = s.encode("utf-8")
    out += U32.pack(len(data)) + data


def _arg(out: bytearray, a: Argument) -> None:
    out.append(TYPE_CODES[a.type])
    out += U64.pack(_slot(a))


# ---------------------------------------------------------------- reading


class _Malformed(Exception):
    def __init__(self, offset: int, why: str) -> None:
        super().__init__(why)
        self.offset = offset
        self.why = why


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int, what: str) -> bytes:
        if n > len(self.data) - self.at:
            raise _Malformed(self.at, f"{what} needs {n} bytes, {len(self.data) - self.at} remain")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def u8(self, what: str) -> int:
        return self.take(1, what)[0]

    def u32(self, what: str) -> int:
        return U32.unpack(self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return U64.unpack(self.take(8, what))[0]

    def count(self, what: str, item_bytes: int) -> int:
        """A count whose items (at least `item_bytes` each) must fit in what remains."""
        at = self.at
        n = self.u32(what)
        if n * item_bytes > len(self.data) - self.at:
            raise _Malformed(at, f"{what} {n} exceeds the {len(self.data) - self.at} bytes that remain")
        return n

    def string(self, what: str) -> str:
        n = self.count(f"{what} length", 1)
        at = self.at
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed(at, f"{what} is not UTF-8") from None

    def argument(self, what: str, buffers: int) -> Argument:
        at = self.at
        code = self.u8(f"{what} type")
        if code not in TYPE_NAMES:
            raise _Malformed(at, f"{what} has unknown type code {code}")
        bits = self.u64(f"{what} value")
        if code == 0 and bits >= buffers:
            raise _Malformed(at, f"{what} names buffer {bits} of {buffers}")
        try:
            return _from_slot(code, bits)
        except ValueError as e:
            raise _Malformed(at, f"{what}: {e}") from None


def read_command(data: bytes, path: str = "<loomcmd>") -> CommandFile:
    """Decode `.loomcmd` bytes; CompileError (BYTECODE/001, BYTECODE/003) on anything malformed."""
    if not data.startswith(MAGIC):
        raise CompileError([Diagnostic.make("BYTECODE/001", path, (0, 0), v="(no LOOMCMD magic)")])
    r = _Reader(data)
    r.at = len(MAGIC)
    try:
        version = r.u32("version")
        if version != VERSION:
            raise CompileError([Diagnostic.make("BYTECODE/001", path, (0, 0), v=str(version))])
        at = r.at
        if r.u32("flags"):
            raise _Malformed(at, "flags must be 0")
        symbol = r.string("symbol")
        if not symbol:
            raise _Malformed(at, "empty program symbol")
        target = r.string("target")
        spec = tuple(SpecArgument(r.string("spec name"), r.argument("spec argument", 0))
                     for _ in range(r.count("spec count", 13)))
        buffers = tuple(r.string("buffer name") for _ in range(r.count("buffer count", 4)))
        root = _read_tree(r, len(buffers))
        if r.at != len(data):
            raise _Malformed(r.at, f"{len(data) - r.at} bytes follow the program")
    except _Malformed as m:
        raise CompileError([Diagnostic.make("BYTECODE/003", path, (0, 0), offset=m.offset, why=m.why)]) from None
    return CommandFile(symbol, target, spec, buffers, root)


def _read_tree(r: _Reader, buffers: int) -> Group:
    """The node tree, read without recursion; canonical form is checked as it is read."""
    at = r.at
    if r.u8("root kind") != SERIAL:
        raise _Malformed(at, "the root node must be serial")
    # Each open group: [kind, children left, children read].
    stack: list[tuple[int, int, list[Node]]] = [(SERIAL, r.count("root children", 1), [])]
    while True:
        kind, left, children = stack[-1]
        if left == 0:
            stack.pop()
            group = Group("serial" if kind == SERIAL else "concurrent", tuple(children))
            if not stack:
                return group
            stack[-1][2].append(group)
            continue
        stack[-1] = (kind, left - 1, children)
        at = r.at
        node_kind = r.u8("node kind")
        if node_kind in (SERIAL, CONCURRENT):
            if node_kind == kind:
                raise _Malformed(at, "a group nested in a group of its own kind")
            n = r.count("group children", 1)
            if n < 2:
                raise _Malformed(at, f"a nested group with {n} children")
            if len(stack) >= MAX_DEPTH:
                raise _Malformed(at, f"groups nested deeper than {MAX_DEPTH}")
            stack.append((node_kind, n, []))
        elif node_kind == DISPATCH:
            requirement = r.u32("requirement")
            geometry = [r.u32("geometry") for _ in range(6)]
            nargs = r.count("argument count", 9)
            args = tuple(r.argument(f"argument {i}", buffers) for i in range(nargs))
            children.append(Dispatch(requirement, tuple(geometry[:3]), tuple(geometry[3:]), args))  # type: ignore[arg-type]
        else:
            raise _Malformed(at, f"unknown node kind {node_kind}")


# ---------------------------------------------------------------- printing


def format_argument(a: Argument, buffers: Sequence[str]) -> str:
    from loomcli.launch.program import format_value

    if a.is_buffer:
        return "%" + buffers[a.value]
    return f"{format_value(a.value)}:{a.type}"


def print_command(program: CommandFile) -> str:
    """The tree, one node per line, indented two spaces per depth."""
    spec = "".join(f" %{s.name}={format_argument(s.argument, ())}" for s in program.spec)
    head = f"program @{program.symbol}{spec} launch({', '.join('%' + b for b in program.buffers)})"
    if program.target:
        head += f" target={program.target}"
    lines = [head]

    def walk(node: Node, depth: int) -> None:
        pad = "  " * depth
        if isinstance(node, Group):
            lines.append(pad + node.kind)
            for c in node.children:
                walk(c, depth + 1)
            return
        args = "".join(" " + format_argument(a, program.buffers) for a in node.arguments)
        lines.append(f"{pad}dispatch requirement={node.requirement} workgroups={_triple(node.workgroups)} "
                     f"workgroup_size={_triple(node.workgroup_size)}{args}")

    for child in program.root.children:
        walk(child, 1)
    return "\n".join(lines) + "\n"


def _triple(t: tuple[int, ...]) -> str:
    return "x".join(map(str, t))

