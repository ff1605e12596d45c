"""A SPIR-V binary writer: ids, module sections, interned types and constants.

Instructions are kept as lists `[opcode, operand...]` and packed into words
once, at the end. Ids are handed out in the order the emitter asks for
them, types and constants are interned on first use (so a type always
precedes its users) and capabilities are emitted sorted: the same module
therefore always gives the same bytes.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable

from loomcli.emit.spirv.spec import (
    ADDRESSING_LOGICAL,
    GENERATOR,
    MAGIC,
    MEMORY_GLSL450,
    Cap,
    Dec,
    Op,
)

Inst = list[int]


def string_words(text: str) -> list[int]:
    """A literal string operand: UTF-8, NUL-terminated, padded to whole words."""
    data = text.encode() + b"\0"
    data += b"\0" * (-len(data) % 4)
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def float_words(bits: int, x: float) -> list[int]:
    if bits == 16:
        return [struct.unpack("<H", struct.pack("<e", x))[0]]
    if bits == 32:
        return [struct.unpack("<I", struct.pack("<f", x))[0]]
    lo, hi = struct.unpack("<II", struct.pack("<d", x))
    return [lo, hi]


# Annotations inside ModuleWriter name these: its methods `int`, `float` and
# `bool` (the SPIR-V types) shadow the builtins there.
Word = int      # a SPIR-V word: a result id, an opcode or a literal operand
Flag = bool
Real = float


class ModuleWriter:
    """Global state of one SPIR-V module being written."""

    def __init__(self, version: tuple[Word, Word]) -> None:
        self.version = version
        self.bound = 1
        self.capabilities: set[int] = {Cap.Shader}
        self.extensions: set[str] = set()
        self.entry_points: list[Inst] = []
        self.execution_modes: list[Inst] = []
        self.annotations: list[Inst] = []
        self.globals: list[Inst] = []        # types, constants and global variables, in creation order
        self.functions: list[FunctionWriter] = []
        self.type_of: dict[int, int] = {}    # result id -> type id
        self.constants: dict[int, object] = {}  # constant id -> Python value (ints as unsigned patterns)
        self._interned: dict[tuple[object, ...], int] = {}
        self._glsl = 0

    # ------------------------------------------------------------ ids and sections

    def new_id(self) -> Word:
        i = self.bound
        self.bound += 1
        return i

    def capability(self, *caps: Word) -> None:
        self.capabilities.update(caps)

    def extension(self, name: str) -> None:
        self.extensions.add(name)

    def decorate(self, target: Word, decoration: Word, *operands: Word) -> None:
        self.annotations.append([Op.Decorate, target, decoration, *operands])

    def member_decorate(self, struct_id: Word, member: Word, decoration: Word, *operands: Word) -> None:
        self.annotations.append([Op.MemberDecorate, struct_id, member, decoration, *operands])

    @property
    def glsl(self) -> Word:
        """The GLSL.std.450 import, created on first use."""
        if not self._glsl:
            self._glsl = self.new_id()
        return self._glsl

    def _intern(self, key: tuple[object, ...], opcode: Word, operands: Iterable[Word]) -> Word:
        found = self._interned.get(key)
        if found is not None:
            return found
        i = self.new_id()
        self.globals.append([opcode, i, *operands])
        self._interned[key] = i
        return i

    def declared_types(self) -> set[tuple[object, ...]]:
        """Keys of the types declared so far: ("float", 32), ("int", 8), ..."""
        return {k for k in self._interned if k and k[0] in ("float", "int")}

    # ------------------------------------------------------------ types

    def void(self) -> Word:
        return self._intern(("void",), Op.TypeVoid, ())

    def bool(self) -> Word:
        return self._intern(("bool",), Op.TypeBool, ())

    def int(self, bits: Word) -> Word:
        """An integer type (all integers are declared unsigned; ops pick signedness).
        Declaring 64-bit integers needs Int64; 8/16-bit capabilities are the
        caller's business, since storage-only uses need only the storage ones."""
        if bits == 64:
            self.capability(Cap.Int64)
        return self._intern(("int", bits), Op.TypeInt, (bits, 0))

    def float(self, bits: Word) -> Word:
        if bits == 64:
            self.capability(Cap.Float64)
        return self._intern(("float", bits), Op.TypeFloat, (bits,))

    def vector(self, elem: Word, n: Word) -> Word:
        return self._intern(("vector", elem, n), Op.TypeVector, (elem, n))

    def array(self, elem: Word, n: Word) -> Word:
        length = self.u32(n)
        return self._intern(("array", elem, n), Op.TypeArray, (elem, length))

    def runtime_array(self, elem: Word, stride: Word) -> Word:
        key = ("rtarray", elem)
        if key not in self._interned:
            i = self._intern(key, Op.TypeRuntimeArray, (elem,))
            self.decorate(i, Dec.ArrayStride, stride)
        return self._interned[key]

    def block_struct(self, members: tuple[Word, ...], offsets: tuple[Word, ...]) -> Word:
        """A `Block`-decorated struct with explicit member offsets."""
        key = ("block", members, offsets)
        if key not in self._interned:
            i = self._intern(key, Op.TypeStruct, members)
            self.decorate(i, Dec.Block)
            for k, off in enumerate(offsets):
                self.member_decorate(i, k, Dec.Offset, off)
        return self._interned[key]

    def struct(self, members: tuple[Word, ...]) -> Word:
        return self._intern(("struct", members), Op.TypeStruct, members)

    def pointer(self, storage: Word, pointee: Word) -> Word:
        return self._intern(("ptr", storage, pointee), Op.TypePointer, (storage, pointee))

    def function_type(self, ret: Word, params: tuple[Word, ...]) -> Word:
        return self._intern(("fn", ret, params), Op.TypeFunction, (ret, *params))

    # ------------------------------------------------------------ constants

    def constant(self, type_id: Word, words: tuple[Word, ...], value: object) -> Word:
        key = ("const", type_id, words)
        found = self._interned.get(key)
        if found is None:
            found = self.new_id()
            self.globals.append([Op.Constant, type_id, found, *words])
            self._interned[key] = found
            self.type_of[found] = type_id
            self.constants[found] = value
        return found

    def u32(self, v: Word) -> Word:
        v &= 0xFFFFFFFF
        return self.constant(self.int(32), (v,), v)

    def uint(self, bits: Word, v: Word) -> Word:
        v &= (1 << bits) - 1
        t = self.int(bits)
        words = (v & 0xFFFFFFFF, v >> 32) if bits == 64 else (v,)
        return self.constant(t, words, v)

    def fconst(self, bits: Word, x: Real) -> Word:
        return self.constant(self.float(bits), tuple(float_words(bits, x)), x)

    def bool_const(self, b: Flag) -> Word:
        key = ("bool", bool(b))
        if key not in self._interned:
            t = self.bool()
            i = self.new_id()
            self.globals.append([Op.ConstantTrue if b else Op.ConstantFalse, t, i])
            self._interned[key] = i
            self.type_of[i] = t
            self.constants[i] = bool(b)
        return self._interned[key]

    def constant_composite(self, type_id: Word, parts: tuple[Word, ...]) -> Word:
        key = ("composite", type_id, parts)
        if key not in self._interned:
            i = self.new_id()
            self.globals.append([Op.ConstantComposite, type_id, i, *parts])
            self._interned[key] = i
            self.type_of[i] = type_id
        return self._interned[key]

    def value_of(self, i: Word) -> object | None:
        """The Python value of a constant id, else None."""
        return self.constants.get(i)

    # ------------------------------------------------------------ variables

    def variable(self, storage: Word, pointee: Word) -> Word:
        """A new global variable (never interned: each call is a distinct object)."""
        ptr = self.pointer(storage, pointee)
        i = self.new_id()
        self.globals.append([Op.Variable, ptr, i, storage])
        self.type_of[i] = ptr
        return i

    def interned_variable(self, key: tuple[object, ...], storage: Word, pointee: Word) -> tuple[Word, Flag]:
        """A global variable shared by every user of `key`; (id, created now)."""
        full = ("var", *key)
        if full in self._interned:
            return self._interned[full], False
        i = self.variable(storage, pointee)
        self._interned[full] = i
        return i, True

    # ------------------------------------------------------------ output

    def to_bytes(self) -> bytes:
        out = array("I", [MAGIC, (self.version[0] << 16) | (self.version[1] << 8), GENERATOR, self.bound, 0])

        def put(inst: Inst) -> None:
            out.append((len(inst) << 16) | inst[0])
            out.extend(inst[1:])

        for cap in sorted(self.capabilities):
            put([Op.Capability, cap])
        for name in sorted(self.extensions):
            put([Op.Extension, *string_words(name)])
        if self._glsl:
            put([Op.ExtInstImport, self._glsl, *string_words("GLSL.std.450")])
        put([Op.MemoryModel, ADDRESSING_LOGICAL, MEMORY_GLSL450])
        for inst in self.entry_points:
            put(inst)
        for inst in self.execution_modes:
            put(inst)
        for inst in self.annotations:
            put(inst)
        for inst in self.globals:
            put(inst)
        for fn in self.functions:
            for inst in fn.header:
                put(inst)
            for inst in fn.body:
                put(inst)
            put([Op.FunctionEnd])
        if out.itemsize != 4:  # pragma: no cover - 'I' is 4 bytes on every platform we run on
            raise RuntimeError("array('I') is not 32-bit here")
        return out.tobytes() if struct.pack("=I", 1) == struct.pack("<I", 1) else _swapped(out)


def _swapped(words: array[int]) -> bytes:  # pragma: no cover - big-endian hosts only
    words = array("I", words)
    words.byteswap()
    return words.tobytes()


class FunctionWriter:
    """One OpFunction: its header (OpFunction, parameters) and its blocks."""

    def __init__(self, m: ModuleWriter, ret: int, params: tuple[int, ...]) -> None:
        self.m = m
        self.id = m.new_id()
        self.ret = ret
        self.fn_type = m.function_type(ret, params)
        self.header: list[Inst] = [[Op.Function, ret, self.id, 0, self.fn_type]]
        self.params: list[int] = []
        for t in params:
            p = m.new_id()
            self.header.append([Op.FunctionParameter, t, p])
            m.type_of[p] = t
            self.params.append(p)
        self.body: list[Inst] = []
        self.block = 0                        # label of the block being written
        self.globals_used: dict[int, None] = {}  # global variables referenced (ordered)
        self.callees: dict[int, FunctionWriter] = {}
        m.functions.append(self)

    def label(self, lid: int | None = None) -> int:
        lid = lid or self.m.new_id()
        self.body.append([Op.Label, lid])
        self.block = lid
        return lid

    def op(self, opcode: int, *operands: int) -> None:
        """An instruction without a result."""
        self.body.append([opcode, *operands])

    def val(self, opcode: int, rtype: int, *operands: int) -> int:
        """An instruction with a result of type `rtype`; returns the result id."""
        i = self.m.new_id()
        self.body.append([opcode, rtype, i, *operands])
        self.m.type_of[i] = rtype
        return i

    def ext(self, rtype: int, inst: int, *operands: int) -> int:
        return self.val(Op.ExtInst, rtype, self.m.glsl, inst, *operands)

    def phi(self, rtype: int) -> tuple[int, Inst]:
        """A phi whose (value, parent) pairs the caller appends to the returned instruction."""
        i = self.m.new_id()
        inst = [Op.Phi, rtype, i]
        self.body.append(inst)
        self.m.type_of[i] = rtype
        return i, inst

    def use_global(self, var: int) -> int:
        self.globals_used[var] = None
        return var
