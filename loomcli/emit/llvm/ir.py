"""LLVM IR as typed values: a small builder and its printer.

The shared lowering (`loomcli.emit.llvm.lower`) and the targets' hooks
(`loomcli.emit.llvm.target`) build LLVM IR through this module only: types
are objects (`i32`, `<4 x float>`, `ptr addrspace(3)`), every value carries
its type, and each instruction is one method that checks its operands'
types and prints itself. Nothing reads LLVM text back. The printed module
is LLVM's textual IR, the form `llvmlite.binding.parse_assembly` (and
`llvm-as`) read; this module itself imports no LLVM.

Why not `llvmlite.ir`: it prints its own way (so every `.ll` artifact would
change), it would load llvmlite where the lowering runs (outside the LLVM
worker), and it builds and prints several times slower than these few forms.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache

# ---------------------------------------------------------------- types


class Type:
    """An LLVM type; one object per type (the constructors below intern)."""

    __slots__ = ("mangle", "text")

    def __init__(self, text: str, mangle: str) -> None:
        self.text = text
        self.mangle = mangle     # the type's part of an overloaded intrinsic's name (`v4f32`)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<llvm {self.text}>"


class IntType(Type):
    __slots__ = ("bits",)

    def __init__(self, bits: int) -> None:
        super().__init__(f"i{bits}", f"i{bits}")
        self.bits = bits


class FloatType(Type):
    __slots__ = ("bits",)

    def __init__(self, name: str, mangle: str, bits: int) -> None:
        super().__init__(name, mangle)
        self.bits = bits


class VectorType(Type):
    __slots__ = ("count", "element")

    def __init__(self, count: int, element: Type) -> None:
        super().__init__(f"<{count} x {element}>", f"v{count}{element.mangle}")
        self.count = count
        self.element = element


class PointerType(Type):
    __slots__ = ("space",)

    def __init__(self, space: int) -> None:
        super().__init__(f"ptr addrspace({space})", f"p{space}")
        self.space = space


class ArrayType(Type):
    __slots__ = ("count", "element")

    def __init__(self, count: int, element: Type) -> None:
        super().__init__(f"[{count} x {element}]", f"a{count}{element.mangle}")
        self.count = count
        self.element = element


class StructType(Type):
    __slots__ = ("elements",)

    def __init__(self, elements: tuple[Type, ...]) -> None:
        super().__init__("{ " + ", ".join(t.text for t in elements) + " }", "s")
        self.elements = elements


@cache
def int_type(bits: int) -> IntType:
    return IntType(bits)


@cache
def vector(count: int, element: Type) -> VectorType:
    return VectorType(count, element)


@cache
def pointer(space: int) -> PointerType:
    return PointerType(space)


@cache
def array(count: int, element: Type) -> ArrayType:
    return ArrayType(count, element)


@cache
def struct_of(elements: tuple[Type, ...]) -> StructType:
    return StructType(elements)


VOID = Type("void", "isVoid")
I1, I8, I16, I32, I64 = (int_type(n) for n in (1, 8, 16, 32, 64))
HALF = FloatType("half", "f16", 16)
FLOAT = FloatType("float", "f32", 32)
DOUBLE = FloatType("double", "f64", 64)


def lanes_of(t: Type) -> int | None:
    """The lane count of a vector type, None for a scalar."""
    return t.count if isinstance(t, VectorType) else None


def bits_of(t: Type) -> int:
    """The width of an integer or float type."""
    if isinstance(t, (IntType, FloatType)):
        return t.bits
    raise IRTypeError(f"{t} has no bit width")


def space_of(t: Type) -> int:
    """The address space of a pointer type."""
    if isinstance(t, PointerType):
        return t.space
    raise IRTypeError(f"{t} is not a pointer")


def like(t: Type, element: Type) -> Type:
    """`element`, or a vector of it with `t`'s lanes (`i1` for `<4 x float>`: `<4 x i1>`)."""
    return vector(t.count, element) if isinstance(t, VectorType) else element


# ---------------------------------------------------------------- values


class Value:
    """A typed value: an instruction's result, an argument, a global or a constant."""

    __slots__ = ("ref", "type")

    def __init__(self, type: Type, ref: str) -> None:
        self.type = type
        self.ref = ref          # its spelling as an operand: `%x`, `@g`, `42`, `zeroinitializer`

    def __str__(self) -> str:
        return f"{self.type.text} {self.ref}"

    def __repr__(self) -> str:
        return f"<llvm {self.type.text} {self.ref}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Value) and self.ref == other.ref and self.type is other.type

    def __hash__(self) -> int:
        return hash(self.ref)


class Constant(Value):
    """A constant; `value` is the integer of an integer literal (i1 aside), else None."""

    __slots__ = ("value", "zero")

    def __init__(self, type: Type, ref: str, value: int | None = None, zero: bool = False) -> None:
        super().__init__(type, ref)
        self.value = value
        self.zero = zero


def const_int(t: Type, value: int) -> Constant:
    """An integer literal (i1: `true`/`false`). Integer literals fold (`value`)."""
    if t is I1:
        return Constant(t, "true" if value else "false", None, not value)
    return Constant(t, str(value), value, value == 0)


def literal(t: Type, value: int) -> Constant:
    """An integer literal of `t` written as digits (an `i1` too, where a wider
    literal was narrowed)."""
    return Constant(t, str(value), value, value == 0)


def const_float(t: Type, value: float) -> Constant:
    """A float or double constant, written as the hex of its double (exact)."""
    if not isinstance(t, FloatType):
        raise IRTypeError(f"a float constant of {t}")
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    return Constant(t, f"0x{bits:016X}", None, bits == 0)


def const_half(bits: int) -> Constant:
    return Constant(HALF, f"0xH{bits:04X}", None, bits == 0)


def splat(t: Type, lane: Constant) -> Constant:
    """A vector constant of equal lanes."""
    if not isinstance(t, VectorType):
        raise IRTypeError(f"a vector constant of {t}")
    if lane.zero:
        return Constant(t, "zeroinitializer", None, True)
    return Constant(t, "<" + ", ".join([str(lane)] * t.count) + ">")


def poison(t: Type) -> Value:
    return Constant(t, "poison")


def null(t: PointerType) -> Value:
    return Constant(t, "null")


def int_value(v: Value) -> int | None:
    """The integer of an integer literal, else None."""
    return v.value if isinstance(v, Constant) else None


class IRTypeError(Exception):
    """An instruction built from operands of the wrong types (a lowering bug)."""


def _same(*values: Value) -> Type:
    t = values[0].type
    for v in values[1:]:
        if v.type is not t:
            raise IRTypeError(f"operands of different types: {', '.join(str(x) for x in values)}")
    return t


# ---------------------------------------------------------------- callees, metadata, attributes


class Callee:
    """A function a call names: an intrinsic or other declaration, or a
    function of this module (`defined`: no declaration)."""

    __slots__ = ("defined", "name", "param_attrs", "params", "ret")

    def __init__(self, name: str, ret: Type, params: Sequence[Type], param_attrs: Sequence[str] = (),
                 defined: bool = False) -> None:
        self.name = name        # with its sigil: `@llvm.amdgcn.workitem.id.x`
        self.ret = ret
        self.params = tuple(params)
        self.param_attrs = tuple(param_attrs) or ("",) * len(self.params)
        self.defined = defined

    def declaration(self) -> str:
        params = ", ".join(f"{t} {a}" if a else t.text for t, a in zip(self.params, self.param_attrs))
        return f"declare {self.ret} {self.name}({params})"


@cache
def intrinsic(name: str, ret: Type, *params: Type) -> Callee:
    """`@name` returning `ret`, declared where first called."""
    return Callee("@" + name, ret, params)


def overloaded(base: str, t: Type, arity: int) -> Callee:
    """An intrinsic overloaded on one type: `llvm.<base>.<t>`, taking and returning `t`."""
    return intrinsic(f"llvm.{base}.{t.mangle}", t, *([t] * arity))


class MDString:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return f'!"{_escape(self.text)}"'


class MDRef:
    """A numbered metadata node of a module (`!3`)."""

    __slots__ = ("ref",)

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def __str__(self) -> str:
        return self.ref


MDItem = Value | MDString | MDRef
# `!kind !N` attachments of an instruction or function, in order.
Attachments = tuple[tuple[str, MDRef], ...]


def string_attribute(key: str, value: str) -> str:
    """A function attribute `"key"="value"` (enum attributes are their bare names)."""
    return f'"{key}"="{_escape(value)}"'


def _escape(text: str) -> str:
    """An LLVM string's contents: printable ASCII stays, the rest is `\\XX`."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return text
    return "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else
                   "".join(f"\\{b:02X}" for b in c.encode()) for c in text)


def _attached(attachments: Attachments) -> str:
    return "".join(f", !{kind} {node}" for kind, node in attachments)


def _sync(syncscope: str) -> str:
    return f' syncscope("{syncscope}")' if syncscope else ""


# ---------------------------------------------------------------- the module


class Module:
    """One LLVM module: globals, functions, declarations, attribute groups and metadata."""

    def __init__(self, triple: str, datalayout: str) -> None:
        self.triple = triple
        self.datalayout = datalayout
        self.globals: list[str] = []
        self.functions: list[str] = []
        self.declarations: dict[str, str] = {}
        self.metadata: dict[str, str] = {}
        self.attribute_groups: dict[str, str] = {}
        self.flags: list[MDRef] = []
        self.taken: set[str] = set()

    def node(self, *items: MDItem) -> MDRef:
        """The numbered node `!{items}`, one per distinct content."""
        text = "!{" + ", ".join(map(str, items)) + "}"
        if text not in self.metadata:
            self.metadata[text] = f"!{len(self.metadata)}"
        return MDRef(self.metadata[text])

    def distinct_node(self, *items: MDItem) -> MDRef:
        """A new `distinct !{!self, items}` (alias scopes and their domains)."""
        ref = f"!{len(self.metadata)}"
        self.metadata["distinct !{" + ", ".join([ref, *map(str, items)]) + "}"] = ref
        return MDRef(ref)

    def flag(self, behavior: int, key: str, value: int) -> None:
        """A module flag `!{i32 behavior, !"key", i32 value}`."""
        self.flags.append(self.node(const_int(I32, behavior), MDString(key), const_int(I32, value)))

    def attributes(self, items: Sequence[str]) -> str:
        """The attribute group `#N` holding `items`."""
        text = " ".join(items)
        if text not in self.attribute_groups:
            self.attribute_groups[text] = f"#{len(self.attribute_groups)}"
        return self.attribute_groups[text]

    def declare(self, callee: Callee) -> None:
        if not callee.defined and callee.name not in self.declarations:
            self.declarations[callee.name] = callee.declaration()

    def global_name(self, base: str) -> str:
        """A fresh global symbol for `base` (quoted where it is not an identifier)."""
        if base.startswith("llvm."):  # LLVM reserves the prefix for intrinsics
            base = "loom." + base
        quoted = _escape(base)
        name = base if _is_identifier(base) else f'"{quoted}"'
        n = 1
        while name in self.taken:
            name = f'"{quoted}.{n}"'
            n += 1
        self.taken.add(name)
        return "@" + name

    def add_global(self, name: str, t: Type, space: int, align: int, linkage: str = "internal") -> Value:
        """A global of type `t` in `space`, its contents undefined (`poison`)."""
        self.globals.append(f"{name} = {linkage} addrspace({space}) global {t} poison, align {align}")
        return Value(pointer(space), name)

    def text(self) -> str:
        out = [f'target datalayout = "{self.datalayout}"', f'target triple = "{self.triple}"', ""]
        if self.globals:
            out += self.globals + [""]
        for f in self.functions:
            out += [f, ""]
        out += [self.declarations[k] for k in sorted(self.declarations)]
        if self.declarations:
            out.append("")
        for text, ref in self.attribute_groups.items():
            out.append(f"attributes {ref} = {{ {text} }}")
        if self.attribute_groups:
            out.append("")
        if self.flags:
            out.append(f"!llvm.module.flags = !{{{', '.join(map(str, self.flags))}}}")
        for text, ref in self.metadata.items():
            out.append(f"{ref} = {text}")
        return "\n".join(out) + "\n"


def _is_identifier(name: str) -> bool:
    """A global name LLVM reads unquoted: `[A-Za-z_][A-Za-z0-9_]*`."""
    return name.isascii() and (name[:1].isalpha() or name[:1] == "_") and all(c.isalnum() or c == "_" for c in name)


# ---------------------------------------------------------------- functions


MAX_NAME_HINT = 64
# What may stand in an LLVM local name as we write them: the rest becomes `_`.
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_.$-]")


class PendingBranch:
    """A `br label %target` printed once the successor has said what goes
    before it (casts that merge address spaces)."""

    __slots__ = ("pre", "target")

    def __init__(self, target: str) -> None:
        self.target = target
        self.pre: list[str] = []

    def __str__(self) -> str:
        return "\n".join(["  " + line for line in self.pre] + [f"  br label %{self.target}"])


class Phi:
    """A phi whose incoming values are known later (loop-carried values)."""

    __slots__ = ("incoming", "value")

    def __init__(self, value: Value) -> None:
        self.value = value
        self.incoming: list[tuple[Value, str]] = []

    def __str__(self) -> str:
        arms = ", ".join(f"[ {v.ref}, %{label} ]" for v, label in self.incoming)
        return f"  {self.value.ref} = phi {self.value.type} {arms}"


Line = str | PendingBranch | Phi
Mark = tuple[int, str]


class FunctionBuilder:
    """Instructions of one function body, in blocks, with fresh local names."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.lines: list[Line] = []
        self.prologue: list[Line] = []
        self.out = self.lines
        self.names: set[str] = set()
        self.last_suffix: dict[str, int] = {}
        self.block = "entry"

    # ------------------------------------------------------------ names and placement

    def fresh(self, hint: str = "t") -> str:
        # Loom names are only hints: kept short, since LLVM cuts local names
        # past 1024 characters and two long names would then collide.
        base = _NOT_NAME_CHAR.sub("_", hint[:MAX_NAME_HINT]) or "t"
        if base[0].isdigit():
            base = "v" + base
        # The first free of `base`, `base.1`, `base.2`, ...: names are never
        # given back, so the search resumes after the last one `base` took
        # (linear in the names, not quadratic for a hint used many times).
        n = self.last_suffix.get(base, -1) + 1
        name = f"{base}.{n}" if n else base
        while name in self.names:
            n += 1
            name = f"{base}.{n}"
        self.last_suffix[base] = n
        self.names.add(name)
        return name

    def argument(self, t: Type, hint: str) -> Value:
        """A fresh local for a parameter."""
        return Value(t, "%" + self.fresh(hint))

    def _emit(self, text: str) -> None:
        self.out.append("  " + text)

    def _def(self, t: Type, text: str, hint: str) -> Value:
        v = Value(t, "%" + self.fresh(hint))
        self.out.append(f"  {v.ref} = {text}")
        return v

    @contextmanager
    def at_entry(self) -> Iterator[None]:
        """Instructions built inside go to the top of the entry block."""
        saved = self.out
        self.out = self.prologue
        try:
            yield
        finally:
            self.out = saved

    def start_block(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    def mark(self) -> Mark:
        return len(self.lines), self.block

    def rewind(self, mark: Mark) -> None:
        """Drop what was built since `mark` (names stay taken)."""
        del self.lines[mark[0]:]
        self.block = mark[1]

    def define(self, name: str, ret: Type, params: Sequence[tuple[Value, str]], attributes: str,
               cc: str = "", linkage: str = "", attachments: Attachments = ()) -> None:
        """Add the function, its body as built, to the module: `params` are
        (argument, its attributes), `attributes` an attribute group."""
        args = ", ".join(f"{v.type} {a} {v.ref}" if a else str(v) for v, a in params)
        head = " ".join(w for w in ("define", linkage, cc, ret.text, f"{name}({args})", attributes) if w)
        head += "".join(f" !{kind} {node}" for kind, node in attachments)
        self.module.functions.append("\n".join([head + " {", "entry:", *map(str, self.prologue),
                                                *map(str, self.lines), "}"]))

    # ------------------------------------------------------------ control flow

    def br(self, label: str) -> None:
        self._emit(f"br label %{label}")

    def cond_br(self, cond: Value, then: str, otherwise: str) -> None:
        self._emit(f"br {cond}, label %{then}, label %{otherwise}")

    def pending_br(self, label: str) -> PendingBranch:
        p = PendingBranch(label)
        self.lines.append(p)
        return p

    def cast_before(self, p: PendingBranch, op: str, v: Value, t: Type, hint: str) -> Value:
        """`op v to t`, placed before the pending branch `p`."""
        r = Value(t, "%" + self.fresh(hint))
        p.pre.append(f"{r.ref} = {op} {v} to {t}")
        return r

    def ret(self, v: Value | None = None) -> None:
        self._emit("ret void" if v is None else f"ret {v}")

    def phi(self, incoming: Sequence[tuple[Value, str]], hint: str) -> Value:
        """One value from the predecessors (the value itself when all agree)."""
        if len(set(v for v, _ in incoming)) == 1:
            return incoming[0][0]
        t = _same(*(v for v, _ in incoming))
        return self._def(t, f"phi {t} " + ", ".join(f"[ {v.ref}, %{label} ]" for v, label in incoming), hint)

    def phi_later(self, t: Type, hint: str) -> Phi:
        """A phi named now, placed with `place` and filled in later."""
        return Phi(Value(t, "%" + self.fresh(hint)))

    def place(self, phi: Phi) -> None:
        self.lines.append(phi)

    # ------------------------------------------------------------ arithmetic

    def binop(self, op: str, a: Value, b: Value, flags: str = "", hint: str = "t") -> Value:
        t = _same(a, b)
        return self._def(t, f"{op}{' ' + flags if flags else ''} {t} {a.ref}, {b.ref}", hint)

    def fneg(self, v: Value, flags: str = "", hint: str = "t") -> Value:
        return self._def(v.type, f"fneg {flags + ' ' if flags else ''}{v}", hint)

    def icmp(self, predicate: str, a: Value, b: Value, hint: str = "t") -> Value:
        t = _same(a, b)
        return self._def(like(t, I1), f"icmp {predicate} {t} {a.ref}, {b.ref}", hint)

    def fcmp(self, predicate: str, a: Value, b: Value, flags: str = "", hint: str = "t") -> Value:
        t = _same(a, b)
        return self._def(like(t, I1), f"fcmp {flags + ' ' if flags else ''}{predicate} {t} {a.ref}, {b.ref}", hint)

    def cast(self, op: str, v: Value, t: Type, hint: str = "t") -> Value:
        """`op v to t`; a no-op cast to the same type is `v` itself."""
        if v.type is t and op in ("bitcast", "zext", "sext", "trunc"):
            return v
        return self._def(t, f"{op} {v} to {t}", hint)

    def freeze(self, v: Value, hint: str = "t") -> Value:
        return self._def(v.type, f"freeze {v}", hint)

    def select(self, cond: Value, a: Value, b: Value, hint: str = "t") -> Value:
        if a == b:
            return a
        t = _same(a, b)
        return self._def(t, f"select {cond}, {a}, {b}", hint)

    # ------------------------------------------------------------ calls

    def call(self, callee: Callee, args: Sequence[Value], flags: str = "", hint: str = "t",
             attributes: str = "") -> Value | None:
        """A call (declaring `callee` where needed); its result, None for void."""
        if tuple(a.type for a in args) != callee.params:
            raise IRTypeError(f"{callee.name} takes ({', '.join(map(str, callee.params))}), "
                              f"given ({', '.join(map(str, args))})")
        self.module.declare(callee)
        text = (f"call {flags + ' ' if flags else ''}{callee.ret} {callee.name}({', '.join(map(str, args))})"
                f"{' ' + attributes if attributes else ''}")
        if callee.ret is VOID:
            self._emit(text)
            return None
        return self._def(callee.ret, text, hint)

    def call_value(self, callee: Callee, args: Sequence[Value], flags: str = "", hint: str = "t") -> Value:
        r = self.call(callee, args, flags, hint)
        if r is None:
            raise IRTypeError(f"{callee.name} returns nothing")
        return r

    def inline_asm(self, ret: Type, asm: str, constraints: str, args: Sequence[Value], hint: str = "t") -> Value:
        """`call ret asm sideeffect "asm", "constraints"(args)`."""
        text = f'call {ret} asm sideeffect "{_escape(asm)}", "{_escape(constraints)}"({", ".join(map(str, args))})'
        return self._def(ret, text, hint)

    def assume_alignment(self, ptr: Value, align: int) -> None:
        """`llvm.assume` with an `align` operand bundle."""
        self.module.declare(ASSUME)
        self._emit(f'call void @llvm.assume(i1 true) [ "align"({ptr}, {const_int(I64, align)}) ]')

    # ------------------------------------------------------------ memory

    def gep(self, element: Type, ptr: Value, index: Value, hint: str = "t") -> Value:
        """`getelementptr inbounds element, ptr, index`."""
        return self._def(ptr.type, f"getelementptr inbounds {element}, {ptr}, {index}", hint)

    def alloca(self, element: Type, count: int, align: int, space: int, hint: str = "t") -> Value:
        return self._def(pointer(space), f"alloca {element}, {const_int(I32, count)}, align {align}, "
                                          f"addrspace({space})", hint)

    def load(self, t: Type, ptr: Value, align: int, attachments: Attachments = (), hint: str = "t") -> Value:
        return self._def(t, f"load {t}, {ptr}, align {align}{_attached(attachments)}", hint)

    def store(self, v: Value, ptr: Value, align: int, attachments: Attachments = ()) -> None:
        self._emit(f"store {v}, {ptr}, align {align}{_attached(attachments)}")

    def atomicrmw(self, op: str, ptr: Value, v: Value, syncscope: str, ordering: str, align: int,
                  attachments: Attachments = (), hint: str = "t") -> Value:
        return self._def(v.type, f"atomicrmw {op} {ptr}, {v}{_sync(syncscope)} {ordering}, align {align}"
                                 f"{_attached(attachments)}", hint)

    def fence(self, syncscope: str, ordering: str) -> None:
        self._emit(f"fence{_sync(syncscope)} {ordering}")

    # ------------------------------------------------------------ vectors and aggregates

    def extractelement(self, vec: Value, index: Value, hint: str = "t") -> Value:
        t = vec.type
        assert isinstance(t, VectorType), t
        return self._def(t.element, f"extractelement {vec}, {index}", hint)

    def insertelement(self, vec: Value, v: Value, index: Value, hint: str = "t") -> Value:
        return self._def(vec.type, f"insertelement {vec}, {v}, {index}", hint)

    def broadcast(self, vec: Value, hint: str = "t") -> Value:
        """Every lane of `vec` set to its lane 0 (a zero shuffle mask)."""
        t = vec.type
        assert isinstance(t, VectorType), t
        mask = vector(t.count, I32)
        return self._def(t, f"shufflevector {vec}, {t} poison, {mask} zeroinitializer", hint)

    def insertvalue(self, agg: Value, v: Value, index: int, hint: str = "t") -> Value:
        return self._def(agg.type, f"insertvalue {agg}, {v}, {index}", hint)

    def extractvalue(self, agg: Value, index: int, hint: str = "t") -> Value:
        t = agg.type
        assert isinstance(t, StructType), t
        return self._def(t.elements[index], f"extractvalue {agg}, {index}", hint)


ASSUME = Callee("@llvm.assume", VOID, (I1,), ("noundef",))


__all__ = [
    "DOUBLE", "FLOAT", "HALF", "I1", "I8", "I16", "I32", "I64", "VOID",
    "ArrayType", "Attachments", "Callee", "Constant", "FloatType", "FunctionBuilder", "IRTypeError", "IntType",
    "MDRef", "MDString", "Module", "PendingBranch", "Phi", "PointerType", "StructType", "Type", "Value",
    "VectorType", "array", "bits_of", "const_float", "const_half", "const_int", "int_type", "int_value", "intrinsic",
    "lanes_of", "like", "literal", "null", "overloaded", "pointer", "poison", "space_of", "splat", "string_attribute",
    "struct_of", "vector",
]
