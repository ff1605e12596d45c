"""Compiled Loom IR -> LLVM IR text, written once for every LLVM-based target.

The input is a compiled module (linked, config bound, templates selected,
the default pipeline run); the output is the text of one LLVM module. A
target contributes data only (`loomcli.emit.llvm.target.LLVMTarget`).

Representation of Loom values in LLVM:

* `index` and `offset` are integers of the target's `index_bits` /
  `offset_bits` (LANGUAGE.md 17.27): arithmetic whose exact result leaves the
  range is UB, so it carries `nsw` (and `nuw` for offsets);
* integers and floats map to LLVM's, except `bf16`, which is held in
  `float` and stored as 16 bits (`widen-bf16` made its arithmetic f32
  between conversions, so only a conversion to bf16 rounds); an `i1` is
  stored as a byte;
* a buffer is a `Ref`: a pointer in the address space of its root (kernel
  arguments global, `buffer.alloca<workgroup>` one workgroup block per
  kernel, `<private>` an `alloca`); a view adds its base byte offset and its
  element strides (the last is 1); extents come from the view's type;
* device functions become internal LLVM functions, one per combination of
  address spaces of their buffer and view arguments; views travel as
  (pointer, base, strides);
* `scf` regions become basic blocks and phis.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit.llvm.target import AtomicRMW, LLVMTarget
from loomcli.ir.core import Module, Operation, Region, Value
from loomcli.ir.ops import TERMINATOR
from loomcli.ir.types import (
    BF16,
    BUFFER,
    ELEMENT_BYTES,
    F16,
    F32,
    F64,
    I1,
    INDEX,
    OFFSET,
    ScalarType,
    ShapedType,
    Type,
    is_float,
    is_vector,
    is_view,
)
from loomcli.semantics.fold import NOT_CONSTANT, canonical, constant_of, float_bits, pattern, round_float, signed
from loomcli.targets import abi

FLOAT_TYPES = {F16: "half", BF16: "float", F32: "float", F64: "double"}
MEMORY_TYPES = {"i1": "i8", "bf16": "i16"}
ORDERING = {"relaxed": "monotonic", "acquire": "acquire", "release": "release", "acq_rel": "acq_rel",
            "seq_cst": "seq_cst"}
RMW = {"xchgi": "xchg", "xchgf": "xchg", "addi": "add", "subi": "sub", "andi": "and", "ori": "or", "xori": "xor",
       "minsi": "min", "maxsi": "max", "minui": "umin", "maxui": "umax", "addf": "fadd",
       "minimumf": "fminimum", "maximumf": "fmaximum", "minnumf": "fmin", "maxnumf": "fmax"}
INT_BINARY = {"addi": "add", "subi": "sub", "muli": "mul", "shli": "shl", "divsi": "sdiv", "divui": "udiv",
              "remsi": "srem", "remui": "urem", "andi": "and", "ori": "or", "xori": "xor", "shrsi": "ashr",
              "shrui": "lshr"}
INT_MINMAX = {"minsi": "smin", "maxsi": "smax", "minui": "umin", "maxui": "umax"}
FLOAT_BINARY = {"addf": "fadd", "subf": "fsub", "mulf": "fmul", "divf": "fdiv"}
FLOAT_MINMAX = {"minimumf": "minimum", "maximumf": "maximum", "minnumf": "minnum", "maxnumf": "maxnum"}
UNARY_MATH = {"sqrtf": "sqrt", "expf": "exp", "exp2f": "exp2", "logf": "log", "log2f": "log2", "sinf": "sin",
              "cosf": "cos", "tanhf": "tanh", "floorf": "floor", "ceilf": "ceil", "absf": "fabs"}
CALLS = ("func.call", "template.call")

_LOCAL = re.compile(r"%([A-Za-z_$][\w.$-]*)")
_CALL = re.compile(r"call (?P<ret>[^@]*?) @(?P<name>[\w.$-]+)\((?P<args>.*)\)")


MAX_NAME_HINT = 64

class LoweringError(Exception):
    """Compiled IR the lowering cannot handle (an internal error: the verifier
    and the passes should have ruled it out)."""


@dataclass(frozen=True)
class Ref:
    """A buffer or view held in registers."""

    ptr: str
    space: int
    base: str = "0"                # i64 byte offset of a view's element 0 in its root
    strides: tuple[str, ...] = ()  # i64 element strides of a view, one per axis (the last is "1")
    alias: str = ""                # `, !alias.scope !A, !noalias !B` of accesses (buffer.assume.noalias)


def is_ref_type(t: Type) -> bool:
    return t is BUFFER or is_view(t)


def _digits(s: str) -> bool:
    return s.lstrip("-").isdigit()


def float_literal(llty: str, t: Type, value: float) -> str:
    """An LLVM IR float constant: hex of the double for float/double, 0xH for half."""
    if llty == "half":
        return f"0xH{float_bits(F16, round_float(F16, value)):04X}"
    rounded = round_float(t, value) if t in (BF16, F32, F64, F16) else value
    if llty == "float":
        rounded = round_float(F32, rounded)
    return f"0x{struct.unpack('<Q', struct.pack('<d', rounded))[0]:016X}"


# ---------------------------------------------------------------- module


@dataclass
class KernelPlan:
    """What the lowering needs about one kernel besides its body."""

    kernel: Operation
    target: LLVMTarget
    export: str
    workgroup_size: tuple[int, int, int] | None
    max_flat_workgroup_size: int
    lds_bytes: int
    lds_align: int
    alloca_offsets: dict[int, int]     # id(buffer.alloca<workgroup> op) -> byte offset


def plan_kernel(kernel: Operation, target: LLVMTarget, max_flat: int) -> KernelPlan:
    """Workgroup memory of a kernel: its allocas by the walk of LANGUAGE.md
    section 8 (the reduction scratch among them: `expand-collectives` made
    it the last one)."""
    offsets: dict[int, int] = {}
    offset, align = 0, 1
    for op in kernel.region("body").ops:
        if op.name == "buffer.alloca" and op.attr("kind", None) == "workgroup":
            a = op.attr("align", 1)
            offset = -(-offset // a) * a
            offsets[id(op)] = offset
            size = constant_of(op.operand("bytes"))
            if not isinstance(size, int):
                raise LoweringError(f"workgroup alloca of @{kernel.attr('sym')} has no constant size")
            offset += size
            align = max(align, a)
    return KernelPlan(kernel, target, abi.export_name(kernel), abi.workgroup_size_constants(kernel), max_flat,
                      offset, align, offsets)


class ModuleLowering:
    """Module-wide state: functions, declarations, metadata, attribute groups."""

    def __init__(self, module: Module, target: LLVMTarget) -> None:
        self.module = module
        self.target = target
        self.symbols = module.symbols()
        self.globals: list[str] = []
        self.functions: list[str] = []
        self.declarations: dict[str, str] = {}
        self.metadata: dict[str, str] = {}
        self.attribute_groups: dict[str, str] = {}
        self.device_functions: dict[tuple[str, tuple[int, ...]], DeviceFunction] = {}
        self.taken: set[str] = set()
        self.noalias_groups = 0
        self.module_flags = [self.md(flag) for flag in target.module_flags]

    # ------------------------------------------------------------ module pieces

    def md(self, text: str) -> str:
        """A numbered metadata node for `text` (deduplicated)."""
        if text not in self.metadata:
            self.metadata[text] = f"!{len(self.metadata)}"
        return self.metadata[text]

    def distinct_md(self, body: str) -> str:
        """A new distinct, self-referential node `distinct !{!self, body}`."""
        ref = f"!{len(self.metadata)}"
        self.metadata[f"distinct !{{{ref}, {body}}}"] = ref
        return ref

    def attributes(self, items: list[str]) -> str:
        text = " ".join(items)
        if text not in self.attribute_groups:
            self.attribute_groups[text] = f"#{len(self.attribute_groups)}"
        return self.attribute_groups[text]

    def declare(self, name: str, ret: str, args: list[str]) -> None:
        if name not in self.declarations:
            self.declarations[name] = f"declare {ret} @{name}({', '.join(args)})"

    def global_name(self, base: str) -> str:
        if base.startswith("llvm."):  # LLVM reserves the prefix for intrinsics
            base = "loom." + base
        name = base if re.fullmatch(r"[A-Za-z_][\w]*", base) else f'"{base}"'
        n = 1
        while name in self.taken:
            name = f'"{base}.{n}"'
            n += 1
        self.taken.add(name)
        return "@" + name

    # ------------------------------------------------------------ entry points

    def lower_kernel(self, plan: KernelPlan) -> None:
        FunctionLowering(self, plan.target, plan).lower_kernel()

    def device_function(self, callee: Operation, spaces: tuple[int, ...], target: LLVMTarget | None = None
                        ) -> DeviceFunction:
        """`callee` lowered for the address spaces of its buffer/view
        arguments and for the caller's target (a kernel may have its own
        wave size; its callees must match it)."""
        target = target or self.target
        key = (callee.attr("sym"), spaces, target.function_attributes)
        if key not in self.device_functions:
            fn = FunctionLowering(self, target, None).lower_device_function(callee, spaces)
            self.device_functions[key] = fn
        return self.device_functions[key]

    def text(self) -> str:
        t = self.target
        out = [f'target datalayout = "{t.datalayout}"', f'target triple = "{t.triple}"', ""]
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
        if self.module_flags:
            out.append(f"!llvm.module.flags = !{{{', '.join(self.module_flags)}}}")
        for text, ref in self.metadata.items():
            out.append(f"{ref} = {text}")
        return "\n".join(out) + "\n"


@dataclass(frozen=True)
class DeviceFunction:
    name: str
    params: tuple[str, ...]         # LLVM parameter types
    results: tuple[Type, ...]       # Loom result types
    result_spaces: tuple[int, ...]  # address space of each buffer/view result
    ret: str                        # LLVM return type


def lower_module(module: Module, plans: list[KernelPlan], target: LLVMTarget) -> str:
    """The LLVM IR text of `plans`' kernels and the device functions they call."""
    lowering = ModuleLowering(module, target)
    lowering.taken.update(plan.export for plan in plans)  # kernel symbols are exactly their export names
    for plan in plans:
        lowering.lower_kernel(plan)
    return lowering.text()


# ---------------------------------------------------------------- functions


class Pending:
    """A branch whose text is written when its successor knows what to add
    before it (casts that merge address spaces)."""

    __slots__ = ("index", "pre", "target")

    def __init__(self, index: int, target: str) -> None:
        self.index = index
        self.target = target
        self.pre: list[str] = []


class FunctionLowering:
    """Lowers one kernel or device function body into LLVM IR lines."""

    def __init__(self, mod: ModuleLowering, target: LLVMTarget, plan: KernelPlan | None) -> None:
        self.mod = mod
        self.t = target
        self.plan = plan
        self.index_ty = f"i{target.index_bits}"
        self.off_ty = f"i{target.offset_bits}"
        self.lines: list[str] = []
        self.prologue: list[str] = []
        self.out = self.lines
        self.names: set[str] = set()
        self.block = "entry"
        self.values: dict[Value, Any] = {}
        self.cache: dict[Any, Any] = {}
        self.lds: str | None = None

    # ------------------------------------------------------------ names and text

    def fresh(self, hint: str = "t") -> str:
        # Loom names are only hints: kept short, since LLVM cuts local names
        # past 1024 characters and two long names would then collide.
        base = re.sub(r"[^\w.$-]", "_", hint[:MAX_NAME_HINT]) or "t"
        if base[0].isdigit():
            base = "v" + base
        name, n = base, 0
        while name in self.names:
            n += 1
            name = f"{base}.{n}"
        self.names.add(name)
        return name

    def emit(self, line: str) -> None:
        self.out.append("  " + line)

    def inst(self, text: str, hint: str = "t") -> str:
        r = "%" + self.fresh(hint)
        self.emit(f"{r} = {text}")
        return r

    def start_block(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    def branch(self, target: str) -> Pending:
        p = Pending(len(self.lines), target)
        self.lines.append("")
        return p

    def finish(self, p: Pending) -> None:
        self.lines[p.index] = "\n".join(["  " + line for line in p.pre] + [f"  br label %{p.target}"])

    @contextmanager
    def at_entry(self) -> Iterator[None]:
        saved = self.out
        self.out = self.prologue
        try:
            yield
        finally:
            self.out = saved

    def error(self, op: Operation, why: str) -> LoweringError:
        return LoweringError(f"{op.name} at {op.loc[0]}:{op.loc[1]}: {why}")

    # ------------------------------------------------------------ types

    def ty(self, t: Type) -> str:
        if isinstance(t, ShapedType):
            if t.name != "vector":
                raise LoweringError(f"no register type for {t}")
            return f"<{t.dims[0]} x {self.ty(t.elem)}>"
        if t is INDEX:
            return self.index_ty
        if t is OFFSET:
            return self.off_ty
        if t in FLOAT_TYPES:
            return FLOAT_TYPES[t]
        if isinstance(t, ScalarType) and t.category == "int":
            return f"i{t.bits}"
        raise LoweringError(f"no register type for {t}")

    @staticmethod
    def mem_ty(elem: ScalarType) -> str:
        return MEMORY_TYPES.get(elem.name) or {"f16": "half", "f32": "float", "f64": "double"}.get(elem.name) \
            or elem.name

    def ptr_ty(self, space: int) -> str:
        return f"ptr addrspace({space})"

    @staticmethod
    def suffix(llty: str) -> str:
        """Intrinsic name mangling of a type."""
        m = re.fullmatch(r"<(\d+) x (\S+)>", llty)
        if m:
            return f"v{m.group(1)}{FunctionLowering.suffix(m.group(2))}"
        return {"half": "f16", "float": "f32", "double": "f64", "bfloat": "bf16"}.get(llty, llty)

    # ------------------------------------------------------------ constants

    def constant(self, value: Any, t: Type) -> str:
        if is_vector(t):
            elem = t.elem
            lane = self.constant(value, elem)
            ety = self.ty(elem)
            n = t.dims[0]
            if lane in ("0", "false", "0x0000000000000000", "0xH0000"):
                return "zeroinitializer"
            return "<" + ", ".join([f"{ety} {lane}"] * n) + ">"
        v = canonical(value, t)
        if t is I1:
            return "true" if v else "false"
        if is_float(t):
            return float_literal(self.ty(t), t, v)
        bits = int(self.ty(t)[1:])  # the held width (an index may be narrower than 64 bits)
        return str(signed(pattern(int(v), bits), bits))

    # ------------------------------------------------------------ instruction helpers

    def call(self, ret: str, name: str, args: list[tuple[str, str]], flags: str = "", hint: str = "t",
             suffix: str = "") -> str:
        self.mod.declare(name, ret, [a for a, _ in args])
        text = f"call {flags + ' ' if flags else ''}{ret} @{name}({', '.join(f'{a} {v}' for a, v in args)}){suffix}"
        if ret == "void":
            self.emit(text)
            return ""
        return self.inst(text, hint)

    def intrinsic(self, base: str, llty: str, args: list[str], flags: str = "", hint: str = "t") -> str:
        return self.call(llty, f"llvm.{base}.{self.suffix(llty)}", [(llty, a) for a in args], flags, hint)

    def binop(self, op: str, llty: str, a: str, b: str, flags: str = "", hint: str = "t") -> str:
        return self.inst(f"{op}{' ' + flags if flags else ''} {llty} {a}, {b}", hint)

    def cast(self, op: str, src: str, v: str, dst: str, hint: str = "t") -> str:
        if src == dst and op in ("bitcast", "zext", "sext", "trunc"):
            return v
        return self.inst(f"{op} {src} {v} to {dst}", hint)

    def select(self, c: str, llty: str, a: str, b: str, hint: str = "t") -> str:
        if a == b:
            return a
        return self.inst(f"select i1 {c}, {llty} {a}, {llty} {b}", hint)

    def resize(self, v: str, src_bits: int, dst_bits: int, signed: bool, nneg: bool = False) -> str:
        """An integer of `src_bits` as `dst_bits`: extended (signed or not) or truncated."""
        if src_bits == dst_bits:
            return v
        if _digits(v):
            return v if not (not signed and v.startswith("-")) else str(int(v) & ((1 << src_bits) - 1))
        if src_bits > dst_bits:
            return self.cast("trunc", f"i{src_bits}", v, f"i{dst_bits}")
        if signed and src_bits > 1:
            return self.cast("sext", f"i{src_bits}", v, f"i{dst_bits}")
        op = "zext nneg" if nneg else "zext"
        return self.cast(op, f"i{src_bits}", v, f"i{dst_bits}")

    def to_offset(self, v: str) -> str:
        """A non-negative index as an offset-width integer."""
        return self.resize(v, self.t.index_bits, self.t.offset_bits, signed=False, nneg=True)

    def add64(self, a: str, b: str) -> str:
        if a == "0":
            return b
        if b == "0":
            return a
        if _digits(a) and _digits(b):
            return str(int(a) + int(b))
        return self.binop("add", self.off_ty, a, b, "nuw nsw")

    def mul64(self, a: str, b: str) -> str:
        if a == "1":
            return b
        if b == "1":
            return a
        if a == "0" or b == "0":
            return "0"
        if _digits(a) and _digits(b):
            return str(int(a) * int(b))
        return self.binop("mul", self.off_ty, a, b, "nuw nsw")

    def snippet(self, lines: tuple[str, ...], inputs: list[str], hint: str = "t") -> str:
        """Expand a target snippet; returns its `%out`."""
        renamed: dict[str, str] = {f"in{i}": v for i, v in enumerate(inputs)}
        out = ""

        def rename(m: re.Match[str]) -> str:
            nonlocal out
            name = m.group(1)
            if name not in renamed:
                renamed[name] = "%" + self.fresh(hint if name == "out" else name)
                if name == "out":
                    out = renamed[name]
            return renamed[name]

        for line in lines:
            text = _LOCAL.sub(rename, line)
            if "!{}" in text:
                text = text.replace("!{}", self.mod.md("!{}"))
            for m in _CALL.finditer(line):
                args = [a.strip() for a in _split_args(m.group("args"))]
                self.mod.declare(m.group("name"), m.group("ret").strip(), [a.rsplit(" ", 1)[0] for a in args])
            self.emit(text)
        return out

    def round_bf16(self, v: str, llty: str = "float") -> str:
        """A float (or float vector) rounded to bf16 precision, to nearest-even,
        in integer arithmetic on the bits (exact for subnormals and overflow,
        whatever the target's bf16 support; NaN stays NaN)."""
        ity = llty.replace("float", "i32")
        m = re.fullmatch(r"<(\d+) x \S+>", llty)

        def k(c: int) -> str:
            return str(c) if m is None else "<" + ", ".join([f"i32 {c}"] * int(m.group(1))) + ">"

        bits = self.cast("bitcast", llty, v, ity)
        odd = self.binop("and", ity, self.binop("lshr", ity, bits, k(16)), k(1))
        bumped = self.binop("add", ity, self.binop("add", ity, bits, k(0x7FFF)), odd)
        rounded = self.cast("bitcast", ity, self.binop("and", ity, bumped, k(-65536)), llty)
        nan = self.inst(f"fcmp uno {llty} {v}, {v}")
        cty = "i1" if m is None else f"<{m.group(1)} x i1>"
        return self.inst(f"select {cty} {nan}, {llty} {v}, {llty} {rounded}", "bf16")

    # ------------------------------------------------------------ values

    def val(self, v: Value) -> Any:
        try:
            return self.values[v]
        except KeyError:
            raise LoweringError(f"value %{v.name} used before it was lowered") from None

    def bind(self, v: Value, x: Any) -> None:
        self.values[v] = x

    def index_operands(self, op: Operation) -> list[str]:
        """The per-axis indices of an indexed access (`%v[%i, 0]`)."""
        dynamic = iter(op.operand_group("indices"))
        return [self.val(next(dynamic)) if t is None else str(t) for t in op.attr("indices")]

    # ------------------------------------------------------------ function shells

    def lower_kernel(self) -> None:
        plan = self.plan
        assert plan is not None
        kernel = plan.kernel
        t = self.t
        if plan.lds_bytes:
            self.lds = self.mod.global_name(f"{plan.export}.lds")
            self.mod.globals.append(f"{self.lds} = internal addrspace({t.space('workgroup')}) global "
                                    f"[{plan.lds_bytes} x i8] poison, align {plan.lds_align}")
        info = abi.kernel_abi(kernel, "amdgpu")
        params = []
        body = kernel.region("body")
        for p, arg in zip(info.params, body.args):
            name = "%" + self.fresh(p.name)
            if p.kind == "buffer":
                params.append(f"{self.ptr_ty(t.space('global'))} noundef {name}")
                self.bind(arg, Ref(name, t.space("global")))
                continue
            slot = self.slot_type(arg.type)
            params.append(f"{slot} noundef {name}")
            with self.at_entry():
                self.bind(arg, self.from_slot(name, slot, arg.type))
        size = plan.workgroup_size
        if size is not None:
            flat = size[0] * size[1] * size[2]
            lo = hi = flat
        else:
            lo, hi = 1, plan.max_flat_workgroup_size
        attrs = [a.format(flat_lo=lo, flat_hi=hi) for a in t.kernel_attributes] + list(t.function_attributes)
        if size is not None:
            attrs += [a.format(x=size[0], y=size[1], z=size[2]) for a in t.kernel_attributes_folded]
        else:
            attrs += [a.format(flat_hi=hi) for a in t.kernel_attributes_dynamic]
        group = self.mod.attributes(["nounwind", *attrs])
        md = ""
        if size is not None:
            for item in t.kernel_metadata_folded:
                kind, _, node = item.format(x=size[0], y=size[1], z=size[2]).partition(" ")
                md += f" {kind} {self.mod.md(node)}"
        self.lower_body(body)
        self.emit("ret void")
        header = f"define {t.kernel_cc} void @{plan.export}({', '.join(params)}) {group}{md} {{"
        self.mod.functions.append("\n".join([header, "entry:", *self.prologue, *self.lines, "}"]))

    def slot_type(self, t: Type) -> str:
        """The LLVM type of a scalar kernel argument slot (abi.SLOT_BYTES)."""
        size = abi.SLOT_BYTES[abi.type_name(t)]
        if size == 8:
            return "double" if t is F64 else "i64"
        return "float" if t is F32 else "i32"

    def from_slot(self, v: str, slot: str, t: Type) -> str:
        if slot in ("float", "double"):
            return v
        bits = 64 if slot == "i64" else 32
        if t is BF16:
            return self.cast("bitcast", "i32", self.binop("shl", "i32", v, "16"), "float")
        if t is F16:
            return self.cast("bitcast", "i16", self.resize(v, 32, 16, False), "half")
        if t is INDEX:
            return self.resize(v, bits, self.t.index_bits, True)
        if t is OFFSET:
            return self.resize(v, bits, self.t.offset_bits, False)
        return self.resize(v, bits, t.bits, True)  # type: ignore[attr-defined]

    def param_types(self, t: Type, space: int) -> list[str]:
        if t is BUFFER:
            return [self.ptr_ty(space)]
        if is_view(t):
            rank = len(t.dims)
            return [self.ptr_ty(space)] + [self.off_ty] * rank
        return [self.ty(t)]

    def lower_device_function(self, callee: Operation, spaces: tuple[int, ...]) -> DeviceFunction:
        body = callee.region("body")
        sym = callee.attr("sym")
        suffix = "" if all(s == self.t.space("global") for s in spaces) else "." + ".".join(map(str, spaces))
        if self.t.function_attributes:
            suffix += f".wave{self.t.subgroup_size}"
        name = self.mod.global_name(sym + suffix)
        params: list[str] = []
        types: list[str] = []
        refs = iter(spaces)
        for arg in body.args:
            if is_ref_type(arg.type):
                space = next(refs)
                ptr = "%" + self.fresh(arg.name)
                params.append(f"{self.ptr_ty(space)} {ptr}")
                types.append(self.ptr_ty(space))
                if arg.type is BUFFER:
                    self.bind(arg, Ref(ptr, space))
                    continue
                base = "%" + self.fresh(arg.name + ".base")
                rank = len(arg.type.dims)  # type: ignore[attr-defined]
                strides = ["%" + self.fresh(f"{arg.name}.stride{k}") for k in range(rank - 1)]
                params += [f"{self.off_ty} {base}"] + [f"{self.off_ty} {s}" for s in strides]
                types += [self.off_ty] * rank
                self.bind(arg, Ref(ptr, space, base, (*strides, "1")))
            else:
                v = "%" + self.fresh(arg.name)
                params.append(f"{self.ty(arg.type)} {v}")
                types.append(self.ty(arg.type))
                self.bind(arg, v)
        term = self.lower_body(body)
        results = [self.val(v) for v in (term.operands if term is not None else [])]
        comps: list[tuple[str, str]] = []
        result_spaces = []
        for v, r in zip(term.operands if term is not None else [], results):
            if is_ref_type(v.type):
                result_spaces.append(r.space)
                comps += self.ref_components(r, v.type)
            else:
                comps.append((self.ty(v.type), r))
        if not comps:
            ret = "void"
            self.emit("ret void")
        elif len(comps) == 1:
            ret = comps[0][0]
            self.emit(f"ret {ret} {comps[0][1]}")
        else:
            ret = "{ " + ", ".join(c for c, _ in comps) + " }"
            agg = "poison"
            for i, (cty, cv) in enumerate(comps):
                agg = self.inst(f"insertvalue {ret} {agg}, {cty} {cv}, {i}", "ret")
            self.emit(f"ret {ret} {agg}")
        attrs = ["nounwind", *self.t.function_attributes]
        inlining = callee.attr("inlining", None)
        if inlining == "inline":
            attrs.append("alwaysinline")
        elif inlining == "noinline":
            attrs.append("noinline")
        group = self.mod.attributes(attrs)
        header = f"define internal {ret} {name}({', '.join(params)}) {group} {{"
        self.mod.functions.append("\n".join([header, "entry:", *self.prologue, *self.lines, "}"]))
        rtypes = tuple(callee.signature().results)
        return DeviceFunction(name, tuple(types), rtypes, tuple(result_spaces), ret)

    def ref_components(self, r: Ref, t: Type) -> list[tuple[str, str]]:
        comps = [(self.ptr_ty(r.space), r.ptr)]
        if is_view(t):
            comps += [(self.off_ty, r.base)] + [(self.off_ty, s) for s in r.strides[:-1]]
        return comps

    # ------------------------------------------------------------ regions

    def lower_body(self, region: Region) -> Operation | None:
        """Lower a region's ops; returns its terminator (None if elided)."""
        for op in region.ops:
            if op.opdef.has(TERMINATOR):
                return op
            handler = HANDLERS.get(op.name)
            if handler is None:
                raise self.error(op, "cannot be lowered to LLVM IR")
            handler(self, op)
        return None

    def yielded(self, term: Operation | None) -> list[Any]:
        return [self.val(v) for v in term.operands] if term is not None else []

    def merge(self, t: Type, incoming: list[tuple[Any, str, Pending | None]], hint: str) -> Any:
        """One value from several predecessors: a phi (per component for refs).
        Refs in different address spaces meet in the generic space, cast in
        each predecessor (whose branch is still pending)."""
        if not is_ref_type(t):
            llty = self.ty(t)
            return self.phi(llty, [(v, label) for v, label, _ in incoming], hint)
        spaces = {v.space for v, _, _ in incoming}
        space = spaces.pop() if len(spaces) == 1 else self.t.space("generic")
        adjusted = []
        for v, label, pending in incoming:
            if v.space != space:
                assert pending is not None
                name = "%" + self.fresh(hint + ".flat")
                pending.pre.append(f"{name} = addrspacecast {self.ptr_ty(v.space)} {v.ptr} to {self.ptr_ty(space)}")
                v = replace(v, ptr=name, space=space)
            adjusted.append((v, label))
        ptr = self.phi(self.ptr_ty(space), [(v.ptr, label) for v, label in adjusted], hint)
        if not is_view(t):
            return Ref(ptr, space)
        base = self.phi(self.off_ty, [(v.base, label) for v, label in adjusted], hint + ".base")
        rank = len(t.dims)
        strides = tuple(self.phi(self.off_ty, [(v.strides[k], label) for v, label in adjusted], hint + ".stride")
                        for k in range(rank - 1))
        return Ref(ptr, space, base, (*strides, "1"))

    def phi(self, llty: str, incoming: list[tuple[str, str]], hint: str) -> str:
        if len({v for v, _ in incoming}) == 1:
            return incoming[0][0]
        return self.inst(f"phi {llty} " + ", ".join(f"[ {v}, %{label} ]" for v, label in incoming), hint)

    def carried_slots(self, types: list[Type], inits: list[Any], generic: set[int], hint: str, defer: bool = True
                      ) -> tuple[list[Any], list[tuple[int, str, str, str]]]:
        """Header values for loop-carried values: a phi name per component,
        placed by `place_slots` and written by `fill_carried` after the body."""
        values: list[Any] = []
        slots: list[tuple[int, str, str, str]] = []

        def slot(llty: str, h: str) -> str:
            name = "%" + self.fresh(h)
            slots.append((-1, llty, name, h))
            return name

        for i, (t, init) in enumerate(zip(types, inits)):
            if not is_ref_type(t):
                values.append(slot(self.ty(t), hint))
                continue
            space = self.t.space("generic") if i in generic else init.space
            ptr = slot(self.ptr_ty(space), hint)
            if is_view(t):
                base = slot(self.off_ty, hint + ".base")
                strides = tuple(slot(self.off_ty, hint + ".stride") for _ in range(len(t.dims) - 1))
                values.append(Ref(ptr, space, base, (*strides, "1")))
            else:
                values.append(Ref(ptr, space))
        return values, slots

    def place_slots(self, slots: list[tuple[int, str, str, str]]) -> None:
        for k, (_, llty, name, h) in enumerate(slots):
            slots[k] = (len(self.lines), llty, name, h)
            self.lines.append("")

    def coerce(self, values: list[Any], types: list[Type], header: list[Any]) -> tuple[list[Any], set[int]]:
        """Carried values on their way into a loop header, cast here to the
        header's generic space where it is generic; returns the carried refs
        whose space differs from a non-generic header (the loop is then
        lowered again with those generic)."""
        out: list[Any] = []
        bad: set[int] = set()
        generic = self.t.space("generic")
        for i, (t, v) in enumerate(zip(types, values)):
            if is_ref_type(t) and v.space != header[i].space:
                if header[i].space != generic:
                    bad.add(i)
                else:
                    ptr = self.cast("addrspacecast", self.ptr_ty(v.space), v.ptr, self.ptr_ty(generic))
                    v = replace(v, ptr=ptr, space=generic)
            out.append(v)
        return out, bad

    def fill_carried(self, slots: list[tuple[int, str, str, str]], types: list[Type],
                     edges: list[tuple[list[Any], str]]) -> None:
        """Write the header phis of loop-carried values."""
        per_edge: list[list[str]] = []
        for values, _ in edges:
            comps: list[str] = []
            for t, v in zip(types, values):
                if is_ref_type(t):
                    comps += [v.ptr] + ([v.base, *v.strides[:-1]] if is_view(t) else [])
                else:
                    comps.append(v)
            per_edge.append(comps)
        for k, (index, llty, name, _) in enumerate(slots):
            incoming = ", ".join(f"[ {comps[k]}, %{label} ]" for comps, (_, label) in zip(per_edge, edges))
            self.lines[index] = f"  {name} = phi {llty} {incoming}"


def _split_args(text: str) -> list[str]:
    """Split a call's argument list at top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


# ---------------------------------------------------------------- op handlers

HANDLERS: dict[str, Any] = {}


def handles(*names: str):
    def register(fn):
        for n in names:
            HANDLERS[n] = fn
        return fn
    return register


def _flags(op: Operation) -> str:
    return " ".join(op.attr_or("flags", ()))


def _result(fl: FunctionLowering, op: Operation, v: Any) -> None:
    fl.bind(op.results[0], v)


def _hint(op: Operation) -> str:
    return op.results[0].name if op.results and op.results[0].name else "t"


@handles("index.constant", "scalar.constant", "vector.constant")
def _constant(fl: FunctionLowering, op: Operation) -> None:
    _result(fl, op, fl.constant(op.attr("value"), op.result().type))


@handles("config.get")
def _config_get(fl: FunctionLowering, op: Operation) -> None:
    c = constant_of(op.results[0])
    if c is NOT_CONSTANT:
        raise CompileError([Diagnostic.make("CONFIG/003", fl.mod.module.path, op.loc, k=op.attr("ref", None))])
    _result(fl, op, fl.constant(c, op.results[0].type))


@handles("target.subgroup.size", "kernel.subgroup.size")
def _subgroup_size(fl: FunctionLowering, op: Operation) -> None:
    if fl.t.subgroup_size is not None:
        _result(fl, op, str(fl.t.subgroup_size))
        return
    _result(fl, op, fl.coordinate("subgroup.size"))


# ---- index


def _int_bits(fl: FunctionLowering, t: Type) -> int:
    if t is INDEX:
        return fl.t.index_bits
    if t is OFFSET:
        return fl.t.offset_bits
    return t.bits  # type: ignore[attr-defined]


@handles("index.cast")
def _index_cast(fl: FunctionLowering, op: Operation) -> None:
    src, dst = op.operand("value").type, op.result().type
    v = fl.val(op.operand("value"))
    sb, db = _int_bits(fl, src), _int_bits(fl, dst)
    if src is INDEX and dst is OFFSET:
        r = fl.resize(v, sb, db, signed=False, nneg=True)
    elif dst is INDEX and src.category == "int":  # type: ignore[attr-defined]
        r = fl.resize(v, sb, db, signed=src is not I1)
    elif dst is OFFSET and src.category == "int":  # type: ignore[attr-defined]
        r = fl.resize(v, sb, db, signed=False)
    else:  # index/offset -> integer, offset -> index: truncate (or extend the held bits)
        r = fl.resize(v, sb, db, signed=src is INDEX)
    _result(fl, op, r)


def _index_flags(t: Type) -> str:
    return "nuw nsw" if t is OFFSET else "nsw"


@handles("index.add", "index.sub", "index.mul")
def _index_arith(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    a, b = (fl.val(v) for v in op.operands)
    _result(fl, op, fl.binop(op.name[6:], fl.ty(t), a, b, _index_flags(t), _hint(op)))


@handles("index.div", "index.rem")
def _index_div(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    a, b = (fl.val(v) for v in op.operands)
    _result(fl, op, fl.binop("udiv" if op.name == "index.div" else "urem", fl.ty(t), a, b, hint=_hint(op)))


@handles("index.min", "index.max")
def _index_minmax(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    name = ("s" if t is INDEX else "u") + op.name[6:]
    _result(fl, op, fl.intrinsic(name, fl.ty(t), [fl.val(v) for v in op.operands], hint=_hint(op)))


@handles("index.andi", "index.ori", "index.xori")
def _index_bits(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    a, b = (fl.val(v) for v in op.operands)
    _result(fl, op, fl.binop(op.name[6:-1], fl.ty(t), a, b, hint=_hint(op)))


@handles("index.shli", "index.shrsi", "index.shrui")
def _index_shift(fl: FunctionLowering, op: Operation) -> None:
    """Shifts take 0 <= b <= 63 on the 64-bit value (LANGUAGE.md 7.1). An index
    held narrower shifts left or arithmetically right by at most width-1 (a
    larger amount only gives a representable result for 0, or the sign);
    `shrui` shifts the sign-extended 64-bit pattern."""
    t = op.results[0].type
    llty = fl.ty(t)
    bits = _int_bits(fl, t)
    a, b = (fl.val(v) for v in op.operands)
    kind = op.name[6:]
    if kind == "shrui" and bits < 64:
        wide = fl.resize(a, bits, 64, signed=True)
        shifted = fl.binop("lshr", "i64", wide, fl.resize(b, bits, 64, signed=False))
        _result(fl, op, fl.resize(shifted, 64, bits, signed=False))
        return
    if bits < 64:
        b = fl.intrinsic("umin", llty, [b, str(bits - 1)])
    if kind == "shli":
        _result(fl, op, fl.binop("shl", llty, a, b, _index_flags(t), _hint(op)))
    else:
        _result(fl, op, fl.binop("ashr" if kind == "shrsi" else "lshr", llty, a, b, hint=_hint(op)))


@handles("index.madd")
def _index_madd(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    a, b, c = (fl.val(v) for v in op.operands)
    m = fl.binop("mul", fl.ty(t), a, b, _index_flags(t))
    _result(fl, op, fl.binop("add", fl.ty(t), m, c, _index_flags(t), _hint(op)))


@handles("index.scale")
def _index_scale(fl: FunctionLowering, op: Operation) -> None:
    i, s = (fl.val(v) for v in op.operands)
    _result(fl, op, fl.mul64(fl.to_offset(i), s))


@handles("index.cmp", "scalar.cmpi")
def _icmp(fl: FunctionLowering, op: Operation) -> None:
    t = op.operand("lhs").type
    a, b = (fl.val(v) for v in op.operands)
    _result(fl, op, fl.inst(f"icmp {op.attr('predicate')} {fl.ty(t)} {a}, {b}", _hint(op)))


@handles("index.assume", "buffer.assume.memory_space")
def _assume(fl: FunctionLowering, op: Operation) -> None:
    for r, v in zip(op.results, op.operands):
        fl.bind(r, fl.val(v))


@handles("buffer.assume.noalias")
def _noalias(fl: FunctionLowering, op: Operation) -> None:
    """Accesses through different results never overlap: one alias scope per
    result in a fresh domain; an access names its scope and the others'."""
    mod = fl.mod
    mod.noalias_groups += 1
    domain = mod.distinct_md(f'!"loom.noalias.{mod.noalias_groups}"')
    scopes = [mod.distinct_md(f'{domain}, !"{r.name}"') for r in op.results]
    for i, (r, v) in enumerate(zip(op.results, op.operands)):
        own = mod.md("!{" + scopes[i] + "}")
        others = mod.md("!{" + ", ".join(s for j, s in enumerate(scopes) if j != i) + "}")
        fl.bind(r, replace(fl.val(v), alias=f", !alias.scope {own}, !noalias {others}"))


@handles("buffer.assume.alignment")
def _assume_alignment(fl: FunctionLowering, op: Operation) -> None:
    ref: Ref = fl.val(op.operand("buffer"))
    align = op.attr("dict", {}).get("minimum_alignment", 1)
    fl.mod.declare("llvm.assume", "void", ["i1 noundef"])
    fl.emit(f'call void @llvm.assume(i1 true) [ "align"({fl.ptr_ty(ref.space)} {ref.ptr}, i64 {align}) ]')
    _result(fl, op, ref)


# ---- scalar


@handles(*(f"scalar.{n}" for n in INT_BINARY))
def _int_binary(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    a, b = (fl.val(v) for v in op.operands)
    _result(fl, op, fl.binop(INT_BINARY[op.name[7:]], fl.ty(t), a, b, _flags(op), _hint(op)))


@handles(*(f"scalar.{n}" for n in INT_MINMAX))
def _int_minmax(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    _result(fl, op, fl.intrinsic(INT_MINMAX[op.name[7:]], fl.ty(t), [fl.val(v) for v in op.operands],
                                 hint=_hint(op)))


@handles(*(f"scalar.{n}" for n in FLOAT_BINARY), *(f"vector.{n}" for n in ("addf", "mulf")))
def _float_binary(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    a, b = (fl.val(v) for v in op.operands)
    name = op.name.split(".")[1]
    _result(fl, op, fl.binop(FLOAT_BINARY[name], fl.ty(t), a, b, _flags(op), _hint(op)))


@handles("vector.addi", "vector.muli")
def _vector_int(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    a, b = (fl.val(v) for v in op.operands)
    _result(fl, op, fl.binop("add" if op.name == "vector.addi" else "mul", fl.ty(t), a, b, hint=_hint(op)))


@handles(*(f"scalar.{n}" for n in FLOAT_MINMAX))
def _float_minmax(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    _result(fl, op, fl.intrinsic(FLOAT_MINMAX[op.name[7:]], fl.ty(t), [fl.val(v) for v in op.operands],
                                 _flags(op), _hint(op)))


@handles("scalar.fmaf", "vector.fmaf")
def _fma(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    args = [fl.val(v) for v in op.operands]
    _result(fl, op, fl.intrinsic("fma", fl.ty(t), args, _flags(op), _hint(op)))


@handles("scalar.negf")
def _negf(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    flags = _flags(op)
    _result(fl, op, fl.inst(f"fneg {flags + ' ' if flags else ''}{fl.ty(t)} {fl.val(op.operand('value'))}", _hint(op)))


# The transcendental functions reach this point only where the profile lists
# them as native (`Profile.native_math`); `expand-math` legalized the others
# into Loom ops, so each op here is one intrinsic.
@handles(*(f"scalar.{n}" for n in UNARY_MATH))
def _unary_math(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    fn = UNARY_MATH[op.name[7:]]
    _result(fl, op, fl.intrinsic(fn, fl.ty(t), [fl.val(op.operand("value"))], _flags(op), _hint(op)))


@handles("scalar.rsqrtf")
def _rsqrt(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    llty = fl.ty(t)
    flags = _flags(op)
    root = fl.intrinsic("sqrt", llty, [fl.val(op.operand("value"))], flags)
    one = float_literal(llty, t, 1.0)
    _result(fl, op, fl.binop("fdiv", llty, one, root, flags, _hint(op)))


@handles("scalar.powf")
def _pow(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    _result(fl, op, fl.intrinsic("pow", fl.ty(t), [fl.val(v) for v in op.operands], _flags(op)))


@handles("scalar.cmpf")
def _fcmp(fl: FunctionLowering, op: Operation) -> None:
    t = op.operand("lhs").type
    a, b = (fl.val(v) for v in op.operands)
    flags = _flags(op)
    _result(fl, op, fl.inst(f"fcmp {flags + ' ' if flags else ''}{op.attr('predicate')} {fl.ty(t)} {a}, {b}",
                            _hint(op)))


@handles("scalar.sitofp", "scalar.uitofp")
def _int_to_float(fl: FunctionLowering, op: Operation) -> None:
    src, dst = op.operand("value").type, op.result().type
    _result(fl, op, fl.cast(op.name[7:], fl.ty(src), fl.val(op.operand("value")), fl.ty(dst), _hint(op)))


@handles("scalar.fptosi", "scalar.fptoui")
def _float_to_int(fl: FunctionLowering, op: Operation) -> None:
    src, dst = op.operand("value").type, op.result().type
    _result(fl, op, fl.cast(op.name[7:], fl.ty(src), fl.val(op.operand("value")), fl.ty(dst), _hint(op)))


_FLOAT_RANK = {"half": 1, "float": 2, "double": 3}


def convert_float(fl: FunctionLowering, v: str, src: Type, dst: Type) -> str:
    """A float of type `src` as `dst`: bf16 goes through float and is
    rounded there (f64 -> bf16 rounds to f32 first, as the folder does)."""
    s, d = fl.ty(src), fl.ty(dst)
    if s != d:
        if src is F16 and dst is BF16:
            v = fl.cast("fpext", s, v, d)
        else:
            v = fl.cast("fpext" if _FLOAT_RANK[s] < _FLOAT_RANK[d] else "fptrunc", s, v, d)
    if dst is BF16 and src is not BF16:
        v = fl.round_bf16(v)
    return v


@handles("scalar.extf", "scalar.fptrunc")
def _float_cast(fl: FunctionLowering, op: Operation) -> None:
    value = op.operand("value")
    _result(fl, op, convert_float(fl, fl.val(value), value.type, op.result().type))


@handles("scalar.extsi", "scalar.extui", "scalar.trunci")
def _int_cast(fl: FunctionLowering, op: Operation) -> None:
    src, dst = op.operand("value").type, op.result().type
    kind = {"extsi": "sext", "extui": "zext", "trunci": "trunc"}[op.name[7:]]
    _result(fl, op, fl.cast(kind, fl.ty(src), fl.val(op.operand("value")), fl.ty(dst), _hint(op)))


@handles("scalar.bitcast")
def _bitcast(fl: FunctionLowering, op: Operation) -> None:
    src, dst = op.operand("value").type, op.result().type
    v = fl.val(op.operand("value"))
    if src is BF16:  # float holding a bf16 value -> its 16 bits
        bits = fl.binop("lshr", "i32", fl.cast("bitcast", "float", v, "i32"), "16")
        v, src = fl.resize(bits, 32, 16, False), ScalarType("i16", "int", 16)
    if dst is BF16:
        wide = fl.resize(v, 16, 32, False)
        _result(fl, op, fl.cast("bitcast", "i32", fl.binop("shl", "i32", wide, "16"), "float", _hint(op)))
        return
    _result(fl, op, fl.cast("bitcast", fl.ty(src), v, fl.ty(dst), _hint(op)))


@handles("scf.select")
def _select(fl: FunctionLowering, op: Operation) -> None:
    c, a, b = (fl.val(v) for v in op.operands)
    t = op.results[0].type
    if not is_ref_type(t):
        _result(fl, op, fl.select(c, fl.ty(t), a, b))
        return
    if a.space != b.space:
        generic = fl.t.space("generic")
        a = replace(a, ptr=fl.cast("addrspacecast", fl.ptr_ty(a.space), a.ptr, fl.ptr_ty(generic)), space=generic)
        b = replace(b, ptr=fl.cast("addrspacecast", fl.ptr_ty(b.space), b.ptr, fl.ptr_ty(generic)), space=generic)
    ptr = fl.select(c, fl.ptr_ty(a.space), a.ptr, b.ptr)
    if not is_view(t):
        _result(fl, op, Ref(ptr, a.space))
        return
    base = fl.select(c, fl.off_ty, a.base, b.base)
    strides = tuple(fl.select(c, fl.off_ty, x, y) for x, y in zip(a.strides, b.strides))
    _result(fl, op, Ref(ptr, a.space, base, strides))


# ---- control flow


@handles("scf.if")
def _if(fl: FunctionLowering, op: Operation) -> None:
    cond = fl.val(op.operand("condition"))
    then_label = fl.fresh("if.then")
    merge_label = fl.fresh("if.end")
    else_region = op.region("else")
    has_else = bool(op.results) or any(not o.opdef.has(TERMINATOR) for o in else_region.ops)
    else_label = fl.fresh("if.else") if has_else else merge_label
    fl.emit(f"br i1 {cond}, label %{then_label}, label %{else_label}")
    fl.start_block(then_label)
    then_values = fl.yielded(fl.lower_body(op.region("then")))
    then_end, then_br = fl.block, fl.branch(merge_label)
    if has_else:
        fl.start_block(else_label)
        else_values = fl.yielded(fl.lower_body(else_region))
        else_end, else_br = fl.block, fl.branch(merge_label)
    fl.start_block(merge_label)
    for i, r in enumerate(op.results):
        incoming = [(then_values[i], then_end, then_br), (else_values[i], else_end, else_br)]
        fl.bind(r, fl.merge(r.type, incoming, r.name or "if"))
    fl.finish(then_br)
    if has_else:
        fl.finish(else_br)


@handles("scf.for")
def _for(fl: FunctionLowering, op: Operation) -> None:
    lo, hi, step = (fl.val(op.operand(name)) for name in ("lower", "upper", "step"))
    body = op.region("body")
    iv_t = op.operand("lower").type
    carried_t = [a.type for a in body.args[1:]]
    generic: set[int] = set()
    mark, pre0 = len(fl.lines), fl.block
    while True:
        inits = [fl.val(v) for v in op.operand_group("inits")]
        header, body_label, exit_label = fl.fresh("for.cond"), fl.fresh("for.body"), fl.fresh("for.end")
        values, slots = fl.carried_slots(carried_t, inits, generic, "carried", defer=True)
        inits, _ = fl.coerce(inits, carried_t, values)
        pre = fl.block
        fl.emit(f"br label %{header}")
        fl.start_block(header)
        fl.place_slots(slots)
        iv_slot = len(fl.lines)
        fl.lines.append("")
        iv = "%" + fl.fresh(body.args[0].name or "iv")
        cmp = "ult" if iv_t is OFFSET else "slt"
        c = fl.inst(f"icmp {cmp} {fl.ty(iv_t)} {iv}, {hi}", "for.cmp")
        fl.emit(f"br i1 {c}, label %{body_label}, label %{exit_label}")
        fl.start_block(body_label)
        fl.bind(body.args[0], iv)
        for a, v in zip(body.args[1:], values):
            fl.bind(a, v)
        yields = fl.yielded(fl.lower_body(body))
        yields, bad = fl.coerce(yields, carried_t, values)
        nxt = fl.binop("add", fl.ty(iv_t), iv, step, _index_flags(iv_t), "for.next")
        latch = fl.block
        fl.emit(f"br label %{header}")
        if not bad:
            break
        generic |= bad
        del fl.lines[mark:]
        fl.block = pre0
    fl.fill_carried(slots, carried_t, [(inits, pre), (yields, latch)])
    fl.lines[iv_slot] = f"  {iv} = phi {fl.ty(iv_t)} [ {lo}, %{pre} ], [ {nxt}, %{latch} ]"
    fl.start_block(exit_label)
    for r, v in zip(op.results, values):
        fl.bind(r, v)


@handles("scf.while")
def _while(fl: FunctionLowering, op: Operation) -> None:
    before, after = op.region("before"), op.region("after")
    carried_t = [a.type for a in before.args]
    generic: set[int] = set()
    mark, pre0 = len(fl.lines), fl.block
    while True:
        inits = [fl.val(v) for v in op.operand_group("inits")]
        head, do_label, exit_label = fl.fresh("while.cond"), fl.fresh("while.body"), fl.fresh("while.end")
        values, slots = fl.carried_slots(carried_t, inits, generic, "carried", defer=True)
        inits, _ = fl.coerce(inits, carried_t, values)
        pre = fl.block
        fl.emit(f"br label %{head}")
        fl.start_block(head)
        fl.place_slots(slots)
        for a, v in zip(before.args, values):
            fl.bind(a, v)
        cond_op = fl.lower_body(before)
        if cond_op is None or cond_op.name != "scf.condition":
            raise fl.error(op, "the before region must end in scf.condition")
        c, *forwarded = fl.yielded(cond_op)
        fl.emit(f"br i1 {c}, label %{do_label}, label %{exit_label}")
        fl.start_block(do_label)
        for a, v in zip(after.args, forwarded):
            fl.bind(a, v)
        yields = fl.yielded(fl.lower_body(after))
        yields, bad = fl.coerce(yields, carried_t, values)
        latch = fl.block
        fl.emit(f"br label %{head}")
        if not bad:
            break
        generic |= bad
        del fl.lines[mark:]
        fl.block = pre0
    fl.fill_carried(slots, carried_t, [(inits, pre), (yields, latch)])
    fl.start_block(exit_label)
    for r, v in zip(op.results, forwarded):
        fl.bind(r, v)


@handles(*CALLS)
def _call(fl: FunctionLowering, op: Operation) -> None:
    callee = fl.mod.symbols.get(op.attr("callee"))
    if callee is None or callee.name not in ("func.def", "template.def"):
        raise fl.error(op, f"@{op.attr('callee')} has no definition in the compiled module")
    args = [fl.val(v) for v in op.operands]
    spaces = tuple(a.space for v, a in zip(op.operands, args) if is_ref_type(v.type))
    fn = fl.mod.device_function(callee, spaces, fl.t)
    actuals: list[str] = []
    for v, a in zip(op.operands, args):
        if is_ref_type(v.type):
            actuals.append(a.ptr)
            if is_view(v.type):
                actuals += [a.base, *a.strides[:-1]]
        else:
            actuals.append(a)
    inlining = op.attr_or("inlining")
    suffix = ""
    if inlining:
        suffix = " " + fl.mod.attributes(["alwaysinline" if inlining == "inline" else "noinline"])
    args_text = ", ".join(f"{t} {a}" for t, a in zip(fn.params, actuals))
    if fn.ret == "void":
        fl.emit(f"call void {fn.name}({args_text}){suffix}")
        return
    r = fl.inst(f"call {fn.ret} {fn.name}({args_text}){suffix}", _hint(op) if op.results else "call")
    comps: list[str]
    if not fn.ret.startswith("{"):
        comps = [r]
    else:
        n = fn.ret.count(",") + 1
        comps = [fl.inst(f"extractvalue {fn.ret} {r}, {i}") for i in range(n)]
    it = iter(comps)
    spaces_it = iter(fn.result_spaces)
    for res in op.results:
        if is_ref_type(res.type):
            space = next(spaces_it)
            ptr = next(it)
            if is_view(res.type):
                base = next(it)
                strides = tuple(next(it) for _ in range(len(res.type.dims) - 1))
                fl.bind(res, Ref(ptr, space, base, (*strides, "1")))
            else:
                fl.bind(res, Ref(ptr, space))
        else:
            fl.bind(res, next(it))


# ---- buffers and views


@handles("buffer.alloca")
def _alloca(fl: FunctionLowering, op: Operation) -> None:
    if op.attr("kind", None) == "workgroup":
        plan = fl.plan
        if plan is None or id(op) not in plan.alloca_offsets:
            raise fl.error(op, "workgroup alloca outside a kernel body's top level")
        space = fl.t.space("workgroup")
        if fl.lds is None:  # the kernel's workgroup memory is 0 bytes: nothing may be accessed
            _result(fl, op, Ref("null", space))
            return
        offset = plan.alloca_offsets[id(op)]
        ptr = fl.lds if offset == 0 else fl.inst(
            f"getelementptr inbounds i8, {fl.ptr_ty(space)} {fl.lds}, i32 {offset}", _hint(op))
        _result(fl, op, Ref(ptr, space))
        return
    size = constant_of(op.operand("bytes"))
    if not isinstance(size, int):
        raise fl.error(op, "private alloca size does not fold")
    space = fl.t.space("private")
    with fl.at_entry():
        ptr = fl.inst(f"alloca i8, i32 {max(size, 1)}, align {op.attr('align', 1)}, addrspace({space})",
                      _hint(op))
    _result(fl, op, Ref(ptr, space))


@handles("buffer.pack")
def _pack(fl: FunctionLowering, op: Operation) -> None:
    sizes = [fl.val(v) for v in op.operand_group("sizes")]
    aligns = op.attr("aligns")

    def align_up(x: str, a: int) -> str:
        if a == 1:
            return x
        if _digits(x):
            return str(-(-int(x) // a) * a)
        bumped = fl.binop("add", fl.off_ty, x, str(a - 1), "nuw nsw")
        return fl.binop("and", fl.off_ty, bumped, str(-a))

    offsets = ["0"]
    for k in range(1, len(sizes)):
        offsets.append(align_up(fl.add64(offsets[-1], sizes[k - 1]), aligns[k]))
    total = align_up(fl.add64(offsets[-1], sizes[-1]), max(aligns))
    for r, v in zip(op.results, [total, *offsets]):
        fl.bind(r, v)


def _extent(fl: FunctionLowering, d: Any) -> str:
    return str(d) if isinstance(d, int) else fl.to_offset(fl.val(d))


@handles("buffer.view")
def _buffer_view(fl: FunctionLowering, op: Operation) -> None:
    buf: Ref = fl.val(op.operand("buffer"))
    base = fl.val(op.operand("offset"))
    t = op.result().type
    strides = ["1"]
    for d in reversed(t.dims[1:]):  # type: ignore[attr-defined]
        strides.insert(0, fl.mul64(strides[0], _extent(fl, d)))
    _result(fl, op, Ref(buf.ptr, buf.space, base, tuple(strides), buf.alias))


def _element_offset(fl: FunctionLowering, view: Ref, indices: list[str]) -> str:
    total = "0"
    for i, s in zip(indices, view.strides):
        total = fl.add64(total, fl.mul64(fl.to_offset(i), s))
    return total


def element_address(fl: FunctionLowering, view: Ref, elem: ScalarType, indices: list[str]) -> str:
    mty = fl.mem_ty(elem)
    ptr = view.ptr
    pty = fl.ptr_ty(view.space)
    if view.base != "0":
        ptr = fl.inst(f"getelementptr inbounds i8, {pty} {ptr}, {fl.off_ty} {view.base}", "base")
    offset = _element_offset(fl, view, indices)
    if offset == "0":
        return ptr
    return fl.inst(f"getelementptr inbounds {mty}, {pty} {ptr}, {fl.off_ty} {offset}", "addr")


@handles("view.subview")
def _subview(fl: FunctionLowering, op: Operation) -> None:
    view: Ref = fl.val(op.operand("view"))
    elem = op.operand("view").type.elem  # type: ignore[attr-defined]
    offset = _element_offset(fl, view, fl.index_operands(op))
    base = fl.add64(view.base, fl.mul64(offset, str(ELEMENT_BYTES[elem])))
    _result(fl, op, replace(view, base=base))


def load_value(fl: FunctionLowering, ptr: str, space: int, elem: ScalarType, lanes: int | None, hint: str,
               alias: str = "") -> str:
    """A load of one element (or `lanes` consecutive ones) in register form."""
    mty = fl.mem_ty(elem)
    lty = mty if lanes is None else f"<{lanes} x {mty}>"
    v = fl.inst(f"load {lty}, {fl.ptr_ty(space)} {ptr}, align {ELEMENT_BYTES[elem]}{alias}", hint)
    rty = fl.ty(elem) if lanes is None else f"<{lanes} x {fl.ty(elem)}>"
    if elem is I1:
        return fl.cast("trunc", lty, v, rty)
    if elem is BF16:
        wide = lty.replace("i16", "i32")
        sixteen = "16" if lanes is None else "<" + ", ".join(["i32 16"] * lanes) + ">"
        shifted = fl.binop("shl", wide, fl.cast("zext", lty, v, wide), sixteen)
        return fl.cast("bitcast", wide, shifted, rty)
    return v


def store_value(fl: FunctionLowering, v: str, ptr: str, space: int, elem: ScalarType, lanes: int | None,
                alias: str = "") -> None:
    mty = fl.mem_ty(elem)
    lty = mty if lanes is None else f"<{lanes} x {mty}>"
    rty = fl.ty(elem) if lanes is None else f"<{lanes} x {fl.ty(elem)}>"
    if elem is I1:
        v = fl.cast("zext", rty, v, lty)
    elif elem is BF16:
        wide = lty.replace("i16", "i32")
        sixteen = "16" if lanes is None else "<" + ", ".join(["i32 16"] * lanes) + ">"
        bits = fl.binop("lshr", wide, fl.cast("bitcast", rty, v, wide), sixteen)
        v = fl.cast("trunc", wide, bits, lty)
    fl.emit(f"store {lty} {v}, {fl.ptr_ty(space)} {ptr}, align {ELEMENT_BYTES[elem]}{alias}")


@handles("view.load", "vector.load")
def _load(fl: FunctionLowering, op: Operation) -> None:
    view: Ref = fl.val(op.operand("view"))
    elem = op.operand("view").type.elem  # type: ignore[attr-defined]
    ptr = element_address(fl, view, elem, fl.index_operands(op))
    t = op.results[0].type
    lanes = t.dims[0] if is_vector(t) else None
    _result(fl, op, load_value(fl, ptr, view.space, elem, lanes, _hint(op), view.alias))


@handles("view.store", "vector.store")
def _store(fl: FunctionLowering, op: Operation) -> None:
    view: Ref = fl.val(op.operand("view"))
    elem = op.operand("view").type.elem  # type: ignore[attr-defined]
    ptr = element_address(fl, view, elem, fl.index_operands(op))
    t = op.operand("value").type
    lanes = t.dims[0] if is_vector(t) else None
    store_value(fl, fl.val(op.operand("value")), ptr, view.space, elem, lanes, view.alias)


@handles("view.atomic.rmw")
def _atomic(fl: FunctionLowering, op: Operation) -> None:
    view: Ref = fl.val(op.operand("view"))
    elem = op.operand("view").type.elem  # type: ignore[attr-defined]
    ptr = element_address(fl, view, elem, fl.index_operands(op))
    d = op.attr("dict")
    scope = str(d["scope"])
    ordering = ORDERING[str(d["ordering"])]
    ss = fl.t.syncscope[scope]
    sync = f' syncscope("{ss}")' if ss else ""
    md = "" if scope == "system" else "".join(f", !{k} {fl.mod.md('!{}')}" for k in fl.t.atomic_metadata)
    llty = fl.ty(elem)
    x = fl.val(op.operand("value"))
    if fl.t.select_atomic is not None:
        spaces = {fl.t.space(name): name for name in ("generic", "workgroup", "global")}
        request = AtomicRMW(op.attr("kind"), llty, spaces.get(view.space, "generic"), fl.ptr_ty(view.space), scope,
                            str(d["ordering"]))
        selected = fl.t.select_atomic(request)
        if selected is not None:
            _result(fl, op, fl.snippet(selected, [ptr, x], _hint(op)))
            return
    text = (f"atomicrmw {RMW[op.attr('kind')]} {fl.ptr_ty(view.space)} {ptr}, {llty} {x}{sync} {ordering}, "
            f"align {ELEMENT_BYTES[elem]}{view.alias}{md}")
    _result(fl, op, fl.inst(text, _hint(op)))


# ---- vectors


@handles("vector.splat")
def _splat(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    vty = fl.ty(t)
    ety = fl.ty(t.elem)  # type: ignore[attr-defined]
    one = fl.inst(f"insertelement {vty} poison, {ety} {fl.val(op.operand('value'))}, i64 0")
    n = t.dims[0]  # type: ignore[attr-defined]
    _result(fl, op, fl.inst(f"shufflevector {vty} {one}, {vty} poison, <{n} x i32> zeroinitializer", _hint(op)))


@handles("vector.extract")
def _extract(fl: FunctionLowering, op: Operation) -> None:
    t = op.operand("vector").type
    (k,) = fl.index_operands(op)
    kty = "i64" if _digits(k) else fl.index_ty
    _result(fl, op, fl.inst(f"extractelement {fl.ty(t)} {fl.val(op.operand('vector'))}, {kty} {k}", _hint(op)))


@handles("vector.insert")
def _insert(fl: FunctionLowering, op: Operation) -> None:
    t = op.operand("vector").type
    (k,) = fl.index_operands(op)
    kty = "i64" if _digits(k) else fl.index_ty
    ety = fl.ty(t.elem)  # type: ignore[attr-defined]
    text = f"insertelement {fl.ty(t)} {fl.val(op.operand('vector'))}, {ety} {fl.val(op.operand('value'))}, {kty} {k}"
    _result(fl, op, fl.inst(text, _hint(op)))


def combine(fl: FunctionLowering, kind: str, t: Type, a: str, b: str) -> str:
    """`a <kind> b` for a combining kind of LANGUAGE.md 7.5."""
    llty = fl.ty(t)
    if kind in ("addi", "muli", "andi", "ori", "xori"):
        return fl.binop(INT_BINARY[kind], llty, a, b)
    if kind in INT_MINMAX:
        return fl.intrinsic(INT_MINMAX[kind], llty, [a, b])
    if kind in ("addf", "mulf"):
        return fl.binop(FLOAT_BINARY[kind], llty, a, b)
    return fl.intrinsic(FLOAT_MINMAX[kind], llty, [a, b])


@handles("vector.reduce")
def _vector_reduce(fl: FunctionLowering, op: Operation) -> None:
    t = op.operand("vector").type
    elem = t.elem  # type: ignore[attr-defined]
    v = fl.val(op.operand("vector"))
    lanes = [fl.inst(f"extractelement {fl.ty(t)} {v}, i64 {k}") for k in range(t.dims[0])]  # type: ignore[attr-defined]
    while len(lanes) > 1:  # every kind may associate (LANGUAGE.md 7.5): a balanced tree
        lanes = [combine(fl, op.attr("kind"), elem, lanes[k], lanes[k + 1]) if k + 1 < len(lanes) else lanes[k]
                 for k in range(0, len(lanes), 2)]
    _result(fl, op, combine(fl, op.attr("kind"), elem, fl.val(op.operand("init")), lanes[0]))


# ---- kernels: coordinates, barriers, collectives


def coordinate(fl: FunctionLowering, key: str) -> str:
    """A coordinate snippet, computed once in the entry block; index-typed."""
    if key not in fl.cache:
        with fl.at_entry():
            v = fl.snippet(fl.t.coordinates[key], [], key.replace(".", "_"))
            fl.cache[key] = fl.resize(v, 32, fl.t.index_bits, signed=False, nneg=True)
    return fl.cache[key]


FunctionLowering.coordinate = coordinate  # type: ignore[attr-defined]


def workgroup_size(fl: FunctionLowering, d: int) -> str:
    plan = fl.plan
    if plan is not None and plan.workgroup_size is not None:
        return str(plan.workgroup_size[d])
    return coordinate(fl, f"workgroup.size.{'xyz'[d]}")


def workitem_id(fl: FunctionLowering, d: int) -> str:
    if workgroup_size(fl, d) == "1":
        return "0"
    return coordinate(fl, f"workitem.id.{'xyz'[d]}")


@handles("kernel.workitem.id", "kernel.workgroup.id", "kernel.workgroup.size", "kernel.workgroup.count",
         "kernel.workitem.dispatch.id", "kernel.subgroup.lane.id")
def _coordinate(fl: FunctionLowering, op: Operation) -> None:
    name = op.name[7:]
    if name == "subgroup.lane.id":
        _result(fl, op, coordinate(fl, name))
        return
    kind = op.attr("kind")
    d = "xyz".index(kind)
    if name == "workitem.id":
        r = workitem_id(fl, d)
    elif name == "workgroup.size":
        r = workgroup_size(fl, d)
    elif name in ("workgroup.id", "workgroup.count"):
        r = coordinate(fl, f"{name}.{kind}")
    else:  # dispatch id = workgroup id * size + workitem id, once per kernel
        key = ("dispatch", d)
        if key not in fl.cache:
            with fl.at_entry():
                group = fl.binop("mul", fl.index_ty, coordinate(fl, f"workgroup.id.{kind}"),
                                 workgroup_size(fl, d), "nuw nsw")
                tid = workitem_id(fl, d)
                fl.cache[key] = group if tid == "0" else fl.binop("add", fl.index_ty, group, tid, "nuw nsw",
                                                                   f"dispatch_id_{kind}")
        r = fl.cache[key]
    _result(fl, op, r)


def barrier(fl: FunctionLowering, scope: str, ordering: str, control: str) -> None:
    if scope == control and control in fl.t.ordering_barriers:  # the barrier is the fence
        fl.snippet(fl.t.control_barrier[control], [])
        return
    ss = fl.t.syncscope[scope]
    sync = f'syncscope("{ss}") ' if ss else ""
    if ordering in ("release", "acq_rel"):
        fl.emit(f"fence {sync}release")
    fl.snippet(fl.t.control_barrier[control], [])
    if ordering in ("acquire", "acq_rel"):
        fl.emit(f"fence {sync}acquire")


@handles("kernel.barrier")
def _barrier(fl: FunctionLowering, op: Operation) -> None:
    scope = op.attr("scope")
    barrier(fl, scope, op.attr("ordering"), scope)


def _to_words(fl: FunctionLowering, t: Type, v: str) -> list[str]:
    """A scalar as the i32 words a lane shuffle moves."""
    llty = fl.ty(t)
    if llty in ("i64", "double"):
        vec = fl.cast("bitcast", llty, v, "<2 x i32>")
        return [fl.inst(f"extractelement <2 x i32> {vec}, i64 {k}") for k in range(2)]
    if llty == "float":
        return [fl.cast("bitcast", "float", v, "i32")]
    if llty == "half":
        return [fl.cast("zext", "i16", fl.cast("bitcast", "half", v, "i16"), "i32")]
    return [fl.resize(v, int(llty[1:]), 32, signed=False)]


def _from_words(fl: FunctionLowering, t: Type, words: list[str]) -> str:
    llty = fl.ty(t)
    if llty in ("i64", "double"):
        vec = fl.inst(f"insertelement <2 x i32> poison, i32 {words[0]}, i64 0")
        vec = fl.inst(f"insertelement <2 x i32> {vec}, i32 {words[1]}, i64 1")
        return fl.cast("bitcast", "<2 x i32>", vec, llty)
    if llty == "float":
        return fl.cast("bitcast", "i32", words[0], "float")
    if llty == "half":
        return fl.cast("bitcast", "i16", fl.cast("trunc", "i32", words[0], "i16"), "half")
    return fl.resize(words[0], 32, int(llty[1:]), signed=False)


def subgroup_reduce(fl: FunctionLowering, kind: str, t: Type, v: str) -> str:
    """Every active lane gets the combination of the subgroup's values.

    The active lanes of a subgroup at a convergent point are a prefix
    0..n-1 (a short last subgroup has fewer), so lane L folds in lane L+k
    when L+k < n, for k = 1, 2, 4, ...: lane 0 ends with the total, which
    is then broadcast. Any kind works and partial subgroups are exact.
    A target with a reduction instruction for (kind, type) uses it instead."""
    native = fl.t.subgroup_reduce.get((kind, fl.ty(t)))
    if native is not None:
        return fl.snippet(native, [v], "reduced")
    lane = fl.resize(coordinate(fl, "subgroup.lane.id"), fl.t.index_bits, 32, signed=False)
    with fl.at_entry():
        n = fl.snippet(fl.t.active_lanes, [], "active")
    width = fl.t.subgroup_size or 64
    k = 1
    while k < width:
        src = fl.binop("add", "i32", lane, str(k), "nuw nsw", "src")
        words = [fl.snippet(fl.t.shuffle, [w, src], "peer") for w in _to_words(fl, t, v)]
        other = _from_words(fl, t, words)
        ok = fl.inst(f"icmp ult i32 {src}, {n}", "in_range")
        v = fl.select(ok, fl.ty(t), combine(fl, kind, t, v, other), v)
        k *= 2
    words = [fl.snippet(fl.t.broadcast_first, [w], "first") for w in _to_words(fl, t, v)]
    return _from_words(fl, t, words)


@handles("kernel.subgroup.reduce")
def _subgroup_reduce(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    _result(fl, op, subgroup_reduce(fl, op.attr("kind"), t, fl.val(op.operand("value"))))
