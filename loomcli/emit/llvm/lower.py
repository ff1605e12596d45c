"""Compiled Loom IR -> LLVM IR, written once for every LLVM-based target.

The input is a compiled module (linked, config bound, templates selected,
the default pipeline run, legalized); the output is one LLVM module, built
as typed values through `loomcli.emit.llvm.ir`. A target contributes data
and small hooks (`loomcli.emit.llvm.target.LLVMTarget`). Each op lowers
through one small function of `HANDLERS`, the table keyed by op name.

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

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit.llvm import ir as ll
from loomcli.emit.llvm.target import AtomicRMW, LLVMTarget
from loomcli.ir.core import Module, Operation, Region, Value
from loomcli.ir.ops import TERMINATOR, OpTable
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

FLOAT_TYPES: dict[Type, ll.FloatType] = {F16: ll.HALF, BF16: ll.FLOAT, F32: ll.FLOAT, F64: ll.DOUBLE}
MEMORY_TYPES: dict[Type, ll.Type] = {I1: ll.I8, BF16: ll.I16, F16: ll.HALF, F32: ll.FLOAT, F64: ll.DOUBLE}
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
FLOAT_MINMAX = {"minimumf": "minimum", "maximumf": "maximum", "minnumf": "minimumnum", "maxnumf": "maximumnum"}
UNARY_MATH = {"sqrtf": "sqrt", "expf": "exp", "exp2f": "exp2", "logf": "log", "log2f": "log2", "sinf": "sin",
              "cosf": "cos", "tanhf": "tanh", "floorf": "floor", "ceilf": "ceil", "absf": "fabs"}


class LoweringError(Exception):
    """Compiled IR the lowering cannot handle (an internal error: the verifier
    and the passes should have ruled it out)."""


@dataclass(frozen=True)
class Ref:
    """A buffer or view held in registers."""

    ptr: ll.Value
    base: ll.Value | None = None          # a view's byte offset of its element 0 in its root (offset-typed)
    strides: tuple[ll.Value, ...] = ()    # a view's element strides, one per axis (the last is 1)
    alias: ll.Attachments = ()            # `!alias.scope`/`!noalias` of accesses (buffer.assume.noalias)

    @property
    def space(self) -> int:
        return ll.space_of(self.ptr.type)


def is_ref_type(t: Type) -> bool:
    return t is BUFFER or is_view(t)


def float_constant(llty: ll.Type, t: Type, value: float) -> ll.Constant:
    """`value` in Loom type `t`'s precision, as a constant of `llty` (bf16 lives in float)."""
    if llty is ll.HALF:
        return ll.const_half(float_bits(F16, round_float(F16, value)))
    rounded = round_float(t, value) if t in (BF16, F32, F64, F16) else value
    if llty is ll.FLOAT:
        rounded = round_float(F32, rounded)
    return ll.const_float(llty, rounded)


def _is_zero(v: ll.Value) -> bool:
    return ll.int_value(v) == 0


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


def _is_workgroup_alloca(op: Operation) -> bool:
    return HANDLERS.get(op.name) is _alloca and op.attr("kind", None) == "workgroup"


def plan_kernel(kernel: Operation, target: LLVMTarget, max_flat: int) -> KernelPlan:
    """Workgroup memory of a kernel: its allocas by the walk of LANGUAGE.md
    section 8 (the reduction scratch among them: `expand-collectives` made
    it the last one)."""
    offsets: dict[int, int] = {}
    offset, align = 0, 1
    for op in kernel.region("body").ops:
        if _is_workgroup_alloca(op):
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
    """Module-wide state: the LLVM module and the device functions lowered so far."""

    def __init__(self, module: Module, target: LLVMTarget) -> None:
        self.module = module
        self.target = target
        self.symbols = module.symbols()
        self.ir = ll.Module(target.triple, target.datalayout)
        self.device_functions: dict[tuple[Any, ...], ll.Callee] = {}
        self.noalias_groups = 0
        for behavior, key, value in target.module_flags:
            self.ir.flag(behavior, key, value)

    def lower_kernel(self, plan: KernelPlan) -> None:
        FunctionLowering(self, plan.target, plan).lower_kernel()

    def device_function(self, callee: Operation, spaces: tuple[int, ...], target: LLVMTarget | None = None
                        ) -> ll.Callee:
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
        return self.ir.text()


# A target's own functions, added to the module after the kernels (the cpu's entry points).
Extend = Callable[[ll.Module, list[KernelPlan]], None]


def lower_module(module: Module, plans: list[KernelPlan], target: LLVMTarget, extend: Extend | None = None) -> str:
    """The LLVM IR text of `plans`' kernels and the device functions they call."""
    lowering = ModuleLowering(module, target)
    lowering.ir.taken.update(plan.export for plan in plans)  # kernel symbols are exactly their export names
    for plan in plans:
        lowering.lower_kernel(plan)
    if extend is not None:
        extend(lowering.ir, plans)
    return lowering.text()


# ---------------------------------------------------------------- functions


# A loop-carried value's phis, one per component (a ref has several).
Carried = list[ll.Phi]


class FunctionLowering:
    """Lowers one kernel or device function body through an LLVM function builder."""

    def __init__(self, mod: ModuleLowering, target: LLVMTarget, plan: KernelPlan | None) -> None:
        self.mod = mod
        self.t = target
        self.plan = plan
        self.b = ll.FunctionBuilder(mod.ir)
        self.index_ty = ll.int_type(target.index_bits)
        self.off_ty = ll.int_type(target.offset_bits)
        self.values: dict[Value, Any] = {}
        self.cache: dict[Any, Any] = {}
        self.lds: ll.Value | None = None

    def error(self, op: Operation, why: str) -> LoweringError:
        return LoweringError(f"{op.name} at {op.loc[0]}:{op.loc[1]}: {why}")

    # ------------------------------------------------------------ types and constants

    def ty(self, t: Type) -> ll.Type:
        if isinstance(t, ShapedType):
            if t.name != "vector":
                raise LoweringError(f"no register type for {t}")
            return ll.vector(_lane_count(t), self.ty(t.elem))
        if t is INDEX:
            return self.index_ty
        if t is OFFSET:
            return self.off_ty
        if t in FLOAT_TYPES:
            return FLOAT_TYPES[t]
        if isinstance(t, ScalarType) and t.category == "int":
            return ll.int_type(t.bits)
        raise LoweringError(f"no register type for {t}")

    @staticmethod
    def mem_ty(elem: ScalarType) -> ll.Type:
        return MEMORY_TYPES.get(elem) or ll.int_type(elem.bits)

    def ptr_ty(self, space: int) -> ll.PointerType:
        return ll.pointer(space)

    def index(self, n: int) -> ll.Constant:
        return ll.literal(self.index_ty, n)

    def offset(self, n: int) -> ll.Constant:
        return ll.literal(self.off_ty, n)

    def constant(self, value: Any, t: Type) -> ll.Constant:
        if is_vector(t):
            return ll.splat(self.ty(t), self.constant(value, t.elem))
        v = canonical(value, t)
        if t is I1:
            return ll.const_int(ll.I1, int(bool(v)))
        llty = self.ty(t)
        if is_float(t):
            return float_constant(llty, t, v)
        bits = ll.bits_of(llty)  # the held width (an index may be narrower than 64 bits)
        return ll.literal(llty, signed(pattern(int(v), bits), bits))

    # ------------------------------------------------------------ instruction helpers

    def intrinsic(self, base: str, t: ll.Type, args: list[ll.Value], flags: str = "", hint: str = "t") -> ll.Value:
        return self.b.call_value(ll.overloaded(base, t, len(args)), args, flags, hint)

    def resize(self, v: ll.Value, src_bits: int, dst_bits: int, signed: bool, nneg: bool = False) -> ll.Value:
        """An integer of `src_bits` as `dst_bits`: extended (signed or not) or truncated."""
        if src_bits == dst_bits:
            return v
        k = ll.int_value(v)
        if k is not None:  # a literal keeps its digits (unsigned: its bits)
            return ll.literal(ll.int_type(dst_bits), k if signed or k >= 0 else k & ((1 << src_bits) - 1))
        dst = ll.int_type(dst_bits)
        if src_bits > dst_bits:
            return self.b.cast("trunc", v, dst)
        if signed and src_bits > 1:
            return self.b.cast("sext", v, dst)
        return self.b.cast("zext nneg" if nneg else "zext", v, dst)

    def to_offset(self, v: ll.Value) -> ll.Value:
        """A non-negative index as an offset-width integer."""
        return self.resize(v, self.t.index_bits, self.t.offset_bits, signed=False, nneg=True)

    def add64(self, a: ll.Value, b: ll.Value) -> ll.Value:
        x, y = ll.int_value(a), ll.int_value(b)
        if x == 0:
            return b
        if y == 0:
            return a
        if x is not None and y is not None:
            return self.offset(x + y)
        return self.b.binop("add", a, b, "nuw nsw")

    def mul64(self, a: ll.Value, b: ll.Value) -> ll.Value:
        x, y = ll.int_value(a), ll.int_value(b)
        if x == 1:
            return b
        if y == 1:
            return a
        if x == 0 or y == 0:
            return self.offset(0)
        if x is not None and y is not None:
            return self.offset(x * y)
        return self.b.binop("mul", a, b, "nuw nsw")

    def round_bf16(self, v: ll.Value) -> ll.Value:
        """A float rounded to bf16 precision, to nearest-even, in integer
        arithmetic on the bits (exact for subnormals and overflow, whatever
        the target's bf16 support; NaN stays NaN)."""
        b = self.b

        def k(c: int) -> ll.Value:
            return ll.literal(ll.I32, c)

        bits = b.cast("bitcast", v, ll.I32)
        odd = b.binop("and", b.binop("lshr", bits, k(16)), k(1))
        bumped = b.binop("add", b.binop("add", bits, k(0x7FFF)), odd)
        rounded = b.cast("bitcast", b.binop("and", bumped, k(-65536)), ll.FLOAT)
        nan = b.fcmp("uno", v, v)
        return b.select(nan, v, rounded, "bf16")

    # ------------------------------------------------------------ values

    def val(self, v: Value) -> Any:
        try:
            return self.values[v]
        except KeyError:
            raise LoweringError(f"value %{v.name} used before it was lowered") from None

    def bind(self, v: Value, x: Any) -> None:
        self.values[v] = x

    def index_operands(self, op: Operation) -> list[ll.Value]:
        """The per-axis indices of an indexed access (`%v[%i, 0]`)."""
        dynamic = iter(op.operand_group("indices"))
        return [self.val(next(dynamic)) if t is None else self.index(t) for t in op.attr("indices")]

    # ------------------------------------------------------------ function shells

    def lower_kernel(self) -> None:
        plan = self.plan
        assert plan is not None
        kernel = plan.kernel
        t, b = self.t, self.b
        if plan.lds_bytes:
            name = self.mod.ir.global_name(f"{plan.export}.lds")
            self.lds = self.mod.ir.add_global(name, ll.array(plan.lds_bytes, ll.I8), t.space("workgroup"),
                                              plan.lds_align)
        info = abi.kernel_abi(kernel, "amdgpu")
        params: list[tuple[ll.Value, str]] = []
        body = kernel.region("body")
        for p, arg in zip(info.params, body.args):
            if p.kind == "buffer":
                ptr = b.argument(self.ptr_ty(t.space("global")), p.name)
                params.append((ptr, "noundef"))
                self.bind(arg, Ref(ptr))
                continue
            slot = b.argument(self.slot_type(arg.type), p.name)
            params.append((slot, "noundef"))
            with b.at_entry():
                self.bind(arg, self.from_slot(slot, arg.type))
        size = plan.workgroup_size
        if size is not None:
            flat = size[0] * size[1] * size[2]
            lo = hi = flat
        else:
            lo, hi = 1, plan.max_flat_workgroup_size
        attrs = [ll.string_attribute(k, v.format(flat_lo=lo, flat_hi=hi)) for k, v in t.kernel_attributes]
        attrs += [ll.string_attribute(k, v) for k, v in t.function_attributes]
        if size is not None:
            attrs += [ll.string_attribute(k, v.format(x=size[0], y=size[1], z=size[2]))
                      for k, v in t.kernel_attributes_folded]
        else:
            attrs += [ll.string_attribute(k, v.format(flat_hi=hi)) for k, v in t.kernel_attributes_dynamic]
        group = self.mod.ir.attributes(["nounwind", *attrs])
        attached: ll.Attachments = ()
        if size is not None and t.kernel_metadata_folded:
            sizes = self.mod.ir.node(*(ll.const_int(ll.I32, n) for n in size))
            attached = tuple((kind, sizes) for kind in t.kernel_metadata_folded)
        self.lower_body(body)
        b.ret()
        b.define("@" + plan.export, ll.VOID, params, group, cc=t.kernel_cc, attachments=attached)

    def slot_type(self, t: Type) -> ll.Type:
        """The LLVM type of a scalar kernel argument slot (abi.SLOT_BYTES)."""
        size = abi.SLOT_BYTES[abi.type_name(t)]
        if size == 8:
            return ll.DOUBLE if t is F64 else ll.I64
        return ll.FLOAT if t is F32 else ll.I32

    def from_slot(self, v: ll.Value, t: Type) -> ll.Value:
        slot = v.type
        if isinstance(slot, ll.FloatType):
            return v
        bits = ll.bits_of(slot)
        b = self.b
        if t is BF16:
            return b.cast("bitcast", b.binop("shl", v, ll.literal(ll.I32, 16)), ll.FLOAT)
        if t is F16:
            return b.cast("bitcast", self.resize(v, 32, 16, False), ll.HALF)
        if t is INDEX:
            return self.resize(v, bits, self.t.index_bits, True)
        if t is OFFSET:
            return self.resize(v, bits, self.t.offset_bits, False)
        return self.resize(v, bits, t.bits, True)  # type: ignore[attr-defined]

    def lower_device_function(self, callee: Operation, spaces: tuple[int, ...]) -> ll.Callee:
        body = callee.region("body")
        sym = callee.attr("sym")
        t, b = self.t, self.b
        suffix = "" if all(s == t.space("global") for s in spaces) else "." + ".".join(map(str, spaces))
        if t.function_attributes:
            suffix += f".wave{t.subgroup_size}"
        name = self.mod.ir.global_name(sym + suffix)
        params: list[ll.Value] = []
        refs = iter(spaces)
        for arg in body.args:
            if not is_ref_type(arg.type):
                v = b.argument(self.ty(arg.type), arg.name)
                params.append(v)
                self.bind(arg, v)
                continue
            ptr = b.argument(self.ptr_ty(next(refs)), arg.name)
            params.append(ptr)
            if arg.type is BUFFER:
                self.bind(arg, Ref(ptr))
                continue
            base = b.argument(self.off_ty, arg.name + ".base")
            rank = len(arg.type.dims)  # type: ignore[attr-defined]
            strides = [b.argument(self.off_ty, f"{arg.name}.stride{k}") for k in range(rank - 1)]
            params += [base, *strides]
            self.bind(arg, Ref(ptr, base, (*strides, self.offset(1))))
        term = self.lower_body(body)
        comps: list[ll.Value] = []
        for result in term.operands if term is not None else []:
            comps += (self.ref_components(self.val(result), result.type) if is_ref_type(result.type)
                      else [self.val(result)])
        ret = self.return_components(comps)
        attrs = ["nounwind", *(ll.string_attribute(k, v) for k, v in t.function_attributes)]
        inlining = callee.attr_or("inlining")
        if inlining == "inline":
            attrs.append("alwaysinline")
        elif inlining == "noinline":
            attrs.append("noinline")
        group = self.mod.ir.attributes(attrs)
        b.define(name, ret, [(p, "") for p in params], group, linkage="internal")
        return ll.Callee(name, ret, [p.type for p in params], defined=True)

    def return_components(self, comps: list[ll.Value]) -> ll.Type:
        """Return `comps` (one value, a struct of several, or nothing); the return type."""
        b = self.b
        if not comps:
            b.ret()
            return ll.VOID
        if len(comps) == 1:
            b.ret(comps[0])
            return comps[0].type
        ret = ll.struct_of(tuple(c.type for c in comps))
        agg = ll.poison(ret)
        for i, c in enumerate(comps):
            agg = b.insertvalue(agg, c, i, "ret")
        b.ret(agg)
        return ret

    def ref_components(self, r: Ref, t: Type) -> list[ll.Value]:
        if not is_view(t):
            return [r.ptr]
        assert r.base is not None
        return [r.ptr, r.base, *r.strides[:-1]]

    def ref_from(self, t: Type, comps: list[ll.Value]) -> Ref:
        """A ref of Loom type `t` from its components (`ref_components`)."""
        if not is_view(t):
            return Ref(comps[0])
        return Ref(comps[0], comps[1], (*comps[2:], self.offset(1)))

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

    def merge(self, t: Type, incoming: list[tuple[Any, str, ll.PendingBranch | None]], hint: str) -> Any:
        """One value from several predecessors: a phi (per component for refs).
        Refs in different address spaces meet in the generic space, cast in
        each predecessor (whose branch is still pending)."""
        b = self.b
        if not is_ref_type(t):
            return b.phi([(v, label) for v, label, _ in incoming], hint)
        spaces = {v.space for v, _, _ in incoming}
        space = spaces.pop() if len(spaces) == 1 else self.t.space("generic")
        adjusted = []
        for v, label, pending in incoming:
            if v.space != space:
                assert pending is not None
                v = replace(v, ptr=b.cast_before(pending, "addrspacecast", v.ptr, self.ptr_ty(space), hint + ".flat"))
            adjusted.append((v, label))
        ptr = b.phi([(v.ptr, label) for v, label in adjusted], hint)
        if not is_view(t):
            return Ref(ptr)
        base = b.phi([(v.base, label) for v, label in adjusted], hint + ".base")
        rank = len(t.dims)
        strides = tuple(b.phi([(v.strides[k], label) for v, label in adjusted], hint + ".stride")
                        for k in range(rank - 1))
        return Ref(ptr, base, (*strides, self.offset(1)))

    def carried_phis(self, types: list[Type], inits: list[Any], generic: set[int], hint: str
                     ) -> tuple[list[Any], Carried]:
        """Header values for loop-carried values: a phi per component, placed
        by `place_phis` and filled by `fill_carried` after the body."""
        values: list[Any] = []
        phis: Carried = []

        def phi(t: ll.Type, h: str) -> ll.Value:
            p = self.b.phi_later(t, h)
            phis.append(p)
            return p.value

        for i, (t, init) in enumerate(zip(types, inits)):
            if not is_ref_type(t):
                values.append(phi(self.ty(t), hint))
                continue
            space = self.t.space("generic") if i in generic else init.space
            ptr = phi(self.ptr_ty(space), hint)
            if is_view(t):
                base = phi(self.off_ty, hint + ".base")
                strides = tuple(phi(self.off_ty, hint + ".stride") for _ in range(len(t.dims) - 1))
                values.append(Ref(ptr, base, (*strides, self.offset(1))))
            else:
                values.append(Ref(ptr))
        return values, phis

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
                    v = replace(v, ptr=self.b.cast("addrspacecast", v.ptr, self.ptr_ty(generic)))
            out.append(v)
        return out, bad

    def fill_carried(self, phis: Carried, types: list[Type], edges: list[tuple[list[Any], str]]) -> None:
        """The incoming values of the header phis of loop-carried values."""
        per_edge: list[list[ll.Value]] = []
        for values, _ in edges:
            comps: list[ll.Value] = []
            for t, v in zip(types, values):
                comps += self.ref_components(v, t) if is_ref_type(t) else [v]
            per_edge.append(comps)
        for k, phi in enumerate(phis):
            phi.incoming = [(comps[k], label) for comps, (_, label) in zip(per_edge, edges)]


# ---------------------------------------------------------------- op handlers

Handler = Callable[[FunctionLowering, Operation], None]
HANDLERS: OpTable[Handler] = OpTable("emit.llvm.lower.HANDLERS")
handles = HANDLERS.register


def _flags(op: Operation) -> str:
    return " ".join(op.attr_or("flags") or ())


def _result(fl: FunctionLowering, op: Operation, v: Any) -> None:
    fl.bind(op.results[0], v)


def _hint(op: Operation) -> str:
    return op.results[0].name if op.results and op.results[0].name else "t"


def _operands(fl: FunctionLowering, op: Operation) -> list[Any]:
    return [fl.val(v) for v in op.operands]


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
        _result(fl, op, fl.index(fl.t.subgroup_size))
        return
    _result(fl, op, coordinate(fl, "subgroup.size"))


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


def _index_binary(opcode: str, overflow: bool) -> Handler:
    """An index op that is one LLVM binary instruction (with `nsw`/`nuw` where it may overflow)."""
    def lower(fl: FunctionLowering, op: Operation) -> None:
        a, b = _operands(fl, op)
        flags = _index_flags(op.results[0].type) if overflow else ""
        _result(fl, op, fl.b.binop(opcode, a, b, flags, _hint(op)))
    return lower


for _name, _opcode, _overflow in (("add", "add", True), ("sub", "sub", True), ("mul", "mul", True),
                                  ("div", "udiv", False), ("rem", "urem", False), ("andi", "and", False),
                                  ("ori", "or", False), ("xori", "xor", False)):
    HANDLERS[f"index.{_name}"] = _index_binary(_opcode, _overflow)


def _index_minmax(kind: str) -> Handler:
    def lower(fl: FunctionLowering, op: Operation) -> None:
        t = op.results[0].type
        name = ("s" if t is INDEX else "u") + kind
        _result(fl, op, fl.intrinsic(name, fl.ty(t), _operands(fl, op), hint=_hint(op)))
    return lower


HANDLERS["index.min"] = _index_minmax("min")
HANDLERS["index.max"] = _index_minmax("max")


def _index_shift(kind: str) -> Handler:
    """Shifts take 0 <= b <= 63 on the 64-bit value (LANGUAGE.md 7.1). An index
    held narrower shifts left or arithmetically right by at most width-1 (a
    larger amount only gives a representable result for 0, or the sign);
    `shrui` shifts the sign-extended 64-bit pattern."""
    def lower(fl: FunctionLowering, op: Operation) -> None:
        t = op.results[0].type
        bits = _int_bits(fl, t)
        a, b = _operands(fl, op)
        if kind == "lshr" and bits < 64:
            wide = fl.resize(a, bits, 64, signed=True)
            shifted = fl.b.binop("lshr", wide, fl.resize(b, bits, 64, signed=False))
            _result(fl, op, fl.resize(shifted, 64, bits, signed=False))
            return
        if bits < 64:
            b = fl.intrinsic("umin", fl.ty(t), [b, ll.literal(fl.ty(t), bits - 1)])
        _result(fl, op, fl.b.binop(kind, a, b, _index_flags(t) if kind == "shl" else "", _hint(op)))
    return lower


HANDLERS["index.shli"] = _index_shift("shl")
HANDLERS["index.shrsi"] = _index_shift("ashr")
HANDLERS["index.shrui"] = _index_shift("lshr")


@handles("index.madd")
def _index_madd(fl: FunctionLowering, op: Operation) -> None:
    flags = _index_flags(op.results[0].type)
    a, b, c = _operands(fl, op)
    _result(fl, op, fl.b.binop("add", fl.b.binop("mul", a, b, flags), c, flags, _hint(op)))


@handles("index.scale")
def _index_scale(fl: FunctionLowering, op: Operation) -> None:
    i, s = _operands(fl, op)
    _result(fl, op, fl.mul64(fl.to_offset(i), s))


@handles("index.cmp", "scalar.cmpi")
def _icmp(fl: FunctionLowering, op: Operation) -> None:
    a, b = _operands(fl, op)
    _result(fl, op, fl.b.icmp(op.attr("predicate"), a, b, _hint(op)))


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
    domain = mod.ir.distinct_node(ll.MDString(f"loom.noalias.{mod.noalias_groups}"))
    scopes = [mod.ir.distinct_node(domain, ll.MDString(r.name)) for r in op.results]
    for i, (r, v) in enumerate(zip(op.results, op.operands)):
        own = mod.ir.node(scopes[i])
        others = mod.ir.node(*(s for j, s in enumerate(scopes) if j != i))
        fl.bind(r, replace(fl.val(v), alias=(("alias.scope", own), ("noalias", others))))


@handles("buffer.assume.alignment")
def _assume_alignment(fl: FunctionLowering, op: Operation) -> None:
    ref: Ref = fl.val(op.operand("buffer"))
    fl.b.assume_alignment(ref.ptr, op.attr("dict", {}).get("minimum_alignment", 1))
    _result(fl, op, ref)


# ---- scalar


def _binary(opcode: str) -> Handler:
    """One LLVM binary instruction, the op's flags (`nsw`, fast-math) on it."""
    def lower(fl: FunctionLowering, op: Operation) -> None:
        a, b = _operands(fl, op)
        _result(fl, op, fl.b.binop(opcode, a, b, _flags(op), _hint(op)))
    return lower


def _overloaded(name: str) -> Handler:
    """One overloaded intrinsic `llvm.<name>.<type>` (flags on the call)."""
    def lower(fl: FunctionLowering, op: Operation) -> None:
        _result(fl, op, fl.intrinsic(name, fl.ty(op.results[0].type), _operands(fl, op), _flags(op), _hint(op)))
    return lower


for _kind, _opcode in INT_BINARY.items():
    HANDLERS[f"scalar.{_kind}"] = _binary(_opcode)
for _kind, _opcode in FLOAT_BINARY.items():
    HANDLERS[f"scalar.{_kind}"] = _binary(_opcode)
for _kind, _name in INT_MINMAX.items():
    HANDLERS[f"scalar.{_kind}"] = _overloaded(_name)
for _kind, _name in FLOAT_MINMAX.items():
    HANDLERS[f"scalar.{_kind}"] = _overloaded(_name)
# The transcendental functions reach this point only where the profile lists
# them as native (`Profile.native_math`); `expand-math` legalized the others
# into Loom ops, so each op here is one intrinsic.
for _kind, _name in UNARY_MATH.items():
    HANDLERS[f"scalar.{_kind}"] = _overloaded(_name)
HANDLERS["scalar.fmaf"] = HANDLERS["vector.fmaf"] = _overloaded("fma")
HANDLERS["scalar.powf"] = _overloaded("pow")
HANDLERS["vector.addf"] = _binary("fadd")
HANDLERS["vector.mulf"] = _binary("fmul")


def _vector_int(opcode: str) -> Handler:
    def lower(fl: FunctionLowering, op: Operation) -> None:
        a, b = _operands(fl, op)
        _result(fl, op, fl.b.binop(opcode, a, b, hint=_hint(op)))
    return lower


HANDLERS["vector.addi"] = _vector_int("add")
HANDLERS["vector.muli"] = _vector_int("mul")


@handles("scalar.negf")
def _negf(fl: FunctionLowering, op: Operation) -> None:
    _result(fl, op, fl.b.fneg(fl.val(op.operand("value")), _flags(op), _hint(op)))


@handles("scalar.rsqrtf")
def _rsqrt(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    llty = fl.ty(t)
    flags = _flags(op)
    root = fl.intrinsic("sqrt", llty, [fl.val(op.operand("value"))], flags)
    _result(fl, op, fl.b.binop("fdiv", float_constant(llty, t, 1.0), root, flags, _hint(op)))


@handles("scalar.cmpf")
def _fcmp(fl: FunctionLowering, op: Operation) -> None:
    a, b = _operands(fl, op)
    _result(fl, op, fl.b.fcmp(op.attr("predicate"), a, b, _flags(op), _hint(op)))


def _cast(opcode: str) -> Handler:
    def lower(fl: FunctionLowering, op: Operation) -> None:
        dst = fl.ty(op.result().type)
        _result(fl, op, fl.b.cast(opcode, fl.val(op.operand("value")), dst, _hint(op)))
    return lower


for _kind, _opcode in (("sitofp", "sitofp"), ("uitofp", "uitofp"), ("fptosi", "fptosi"), ("fptoui", "fptoui"),
                       ("extsi", "sext"), ("extui", "zext"), ("trunci", "trunc")):
    HANDLERS[f"scalar.{_kind}"] = _cast(_opcode)


def convert_float(fl: FunctionLowering, v: ll.Value, src: Type, dst: Type) -> ll.Value:
    """A float of type `src` as `dst`: bf16 goes through float and is
    rounded there (f64 -> bf16 rounds to f32 first, as the folder does)."""
    s, d = fl.ty(src), fl.ty(dst)
    if s is not d:
        v = fl.b.cast("fpext" if s.bits < d.bits else "fptrunc", v, d)  # type: ignore[attr-defined]
    if dst is BF16 and src is not BF16:
        v = fl.round_bf16(v)
    return v


@handles("scalar.extf", "scalar.fptrunc")
def _float_cast(fl: FunctionLowering, op: Operation) -> None:
    value = op.operand("value")
    _result(fl, op, convert_float(fl, fl.val(value), value.type, op.result().type))


@handles("scalar.bitcast")
def _bitcast(fl: FunctionLowering, op: Operation) -> None:
    src, dst = op.operand("value").type, op.result().type
    v = fl.val(op.operand("value"))
    b = fl.b
    sixteen = ll.literal(ll.I32, 16)
    if src is BF16:  # float holding a bf16 value -> its 16 bits
        v = fl.resize(b.binop("lshr", b.cast("bitcast", v, ll.I32), sixteen), 32, 16, False)
    if dst is BF16:
        wide = fl.resize(v, 16, 32, False)
        _result(fl, op, b.cast("bitcast", b.binop("shl", wide, sixteen), ll.FLOAT, _hint(op)))
        return
    _result(fl, op, b.cast("bitcast", v, fl.ty(dst), _hint(op)))


@handles("scf.select")
def _select(fl: FunctionLowering, op: Operation) -> None:
    c, x, y = _operands(fl, op)
    t = op.results[0].type
    b = fl.b
    if not is_ref_type(t):
        _result(fl, op, b.select(c, x, y))
        return
    if x.space != y.space:
        generic = fl.ptr_ty(fl.t.space("generic"))
        x = replace(x, ptr=b.cast("addrspacecast", x.ptr, generic))
        y = replace(y, ptr=b.cast("addrspacecast", y.ptr, generic))
    ptr = b.select(c, x.ptr, y.ptr)
    if not is_view(t):
        _result(fl, op, Ref(ptr))
        return
    base = b.select(c, x.base, y.base)
    strides = tuple(b.select(c, p, q) for p, q in zip(x.strides, y.strides))
    _result(fl, op, Ref(ptr, base, strides))


# ---- control flow


@handles("scf.if")
def _if(fl: FunctionLowering, op: Operation) -> None:
    b = fl.b
    cond = fl.val(op.operand("condition"))
    then_label = b.fresh("if.then")
    merge_label = b.fresh("if.end")
    else_region = op.region("else")
    has_else = bool(op.results) or any(not o.opdef.has(TERMINATOR) for o in else_region.ops)
    else_label = b.fresh("if.else") if has_else else merge_label
    b.cond_br(cond, then_label, else_label)
    b.start_block(then_label)
    then_values = fl.yielded(fl.lower_body(op.region("then")))
    incoming = [(then_values, b.block, b.pending_br(merge_label))]
    if has_else:
        b.start_block(else_label)
        else_values = fl.yielded(fl.lower_body(else_region))
        incoming.append((else_values, b.block, b.pending_br(merge_label)))
    b.start_block(merge_label)
    for i, r in enumerate(op.results):
        fl.bind(r, fl.merge(r.type, [(values[i], end, br) for values, end, br in incoming], r.name or "if"))


@handles("scf.for")
def _for(fl: FunctionLowering, op: Operation) -> None:
    b = fl.b
    lo, hi, step = (fl.val(op.operand(name)) for name in ("lower", "upper", "step"))
    body = op.region("body")
    iv_t = op.operand("lower").type
    carried_t = [a.type for a in body.args[1:]]
    generic: set[int] = set()
    mark = b.mark()
    while True:
        inits = [fl.val(v) for v in op.operand_group("inits")]
        header, body_label, exit_label = b.fresh("for.cond"), b.fresh("for.body"), b.fresh("for.end")
        values, phis = fl.carried_phis(carried_t, inits, generic, "carried")
        inits, _ = fl.coerce(inits, carried_t, values)
        pre = b.block
        b.br(header)
        b.start_block(header)
        for phi in phis:
            b.place(phi)
        iv = b.phi_later(fl.ty(iv_t), body.args[0].name or "iv")
        b.place(iv)
        c = b.icmp("ult" if iv_t is OFFSET else "slt", iv.value, hi, "for.cmp")
        b.cond_br(c, body_label, exit_label)
        b.start_block(body_label)
        fl.bind(body.args[0], iv.value)
        for a, v in zip(body.args[1:], values):
            fl.bind(a, v)
        yields = fl.yielded(fl.lower_body(body))
        yields, bad = fl.coerce(yields, carried_t, values)
        nxt = b.binop("add", iv.value, step, _index_flags(iv_t), "for.next")
        latch = b.block
        b.br(header)
        if not bad:
            break
        generic |= bad
        b.rewind(mark)
    fl.fill_carried(phis, carried_t, [(inits, pre), (yields, latch)])
    iv.incoming = [(lo, pre), (nxt, latch)]
    b.start_block(exit_label)
    for r, v in zip(op.results, values):
        fl.bind(r, v)


@handles("scf.while")
def _while(fl: FunctionLowering, op: Operation) -> None:
    b = fl.b
    before, after = op.region("before"), op.region("after")
    carried_t = [a.type for a in before.args]
    generic: set[int] = set()
    mark = b.mark()
    while True:
        inits = [fl.val(v) for v in op.operand_group("inits")]
        head, do_label, exit_label = b.fresh("while.cond"), b.fresh("while.body"), b.fresh("while.end")
        values, phis = fl.carried_phis(carried_t, inits, generic, "carried")
        inits, _ = fl.coerce(inits, carried_t, values)
        pre = b.block
        b.br(head)
        b.start_block(head)
        for phi in phis:
            b.place(phi)
        for a, v in zip(before.args, values):
            fl.bind(a, v)
        cond_op = fl.lower_body(before)
        if cond_op is None or cond_op.name != op.opdef.regions[0].terminator:
            raise fl.error(op, "the before region must end in scf.condition")
        c, *forwarded = fl.yielded(cond_op)
        b.cond_br(c, do_label, exit_label)
        b.start_block(do_label)
        for a, v in zip(after.args, forwarded):
            fl.bind(a, v)
        yields = fl.yielded(fl.lower_body(after))
        yields, bad = fl.coerce(yields, carried_t, values)
        latch = b.block
        b.br(head)
        if not bad:
            break
        generic |= bad
        b.rewind(mark)
    fl.fill_carried(phis, carried_t, [(inits, pre), (yields, latch)])
    b.start_block(exit_label)
    for r, v in zip(op.results, forwarded):
        fl.bind(r, v)


@handles("func.call", "template.call")
def _call(fl: FunctionLowering, op: Operation) -> None:
    callee = fl.mod.symbols.get(op.attr("callee"))
    if callee is None or not callee.opdef.regions:
        raise fl.error(op, f"@{op.attr('callee')} has no definition in the compiled module")
    args = _operands(fl, op)
    spaces = tuple(a.space for v, a in zip(op.operands, args) if is_ref_type(v.type))
    fn = fl.mod.device_function(callee, spaces, fl.t)
    actuals: list[ll.Value] = []
    for v, a in zip(op.operands, args):
        actuals += fl.ref_components(a, v.type) if is_ref_type(v.type) else [a]
    inlining = op.attr_or("inlining")
    group = fl.mod.ir.attributes(["alwaysinline" if inlining == "inline" else "noinline"]) if inlining else ""
    r = fl.b.call(fn, actuals, hint=_hint(op) if op.results else "call", attributes=group)
    if r is None:
        return
    ret = fn.ret
    if isinstance(ret, ll.StructType):
        comps = iter([fl.b.extractvalue(r, i) for i in range(len(ret.elements))])
    else:
        comps = iter([r])
    for res in op.results:
        if not is_ref_type(res.type):
            fl.bind(res, next(comps))
            continue
        n = 1 if not is_view(res.type) else 1 + len(res.type.dims)
        fl.bind(res, fl.ref_from(res.type, [next(comps) for _ in range(n)]))


# ---- buffers and views


@handles("buffer.alloca")
def _alloca(fl: FunctionLowering, op: Operation) -> None:
    b = fl.b
    if op.attr("kind", None) == "workgroup":
        plan = fl.plan
        if plan is None or id(op) not in plan.alloca_offsets:
            raise fl.error(op, "workgroup alloca outside a kernel body's top level")
        space = fl.t.space("workgroup")
        if fl.lds is None:  # the kernel's workgroup memory is 0 bytes: nothing may be accessed
            _result(fl, op, Ref(ll.null(fl.ptr_ty(space))))
            return
        offset = plan.alloca_offsets[id(op)]
        ptr = fl.lds if offset == 0 else b.gep(ll.I8, fl.lds, ll.literal(ll.I32, offset), _hint(op))
        _result(fl, op, Ref(ptr))
        return
    size = constant_of(op.operand("bytes"))
    if not isinstance(size, int):
        raise fl.error(op, "private alloca size does not fold")
    with b.at_entry():
        ptr = b.alloca(ll.I8, max(size, 1), op.attr("align", 1), fl.t.space("private"), _hint(op))
    _result(fl, op, Ref(ptr))


@handles("buffer.pack")
def _pack(fl: FunctionLowering, op: Operation) -> None:
    sizes = [fl.val(v) for v in op.operand_group("sizes")]
    aligns = op.attr("aligns")

    def align_up(x: ll.Value, a: int) -> ll.Value:
        if a == 1:
            return x
        k = ll.int_value(x)
        if k is not None:
            return fl.offset(-(-k // a) * a)
        bumped = fl.b.binop("add", x, fl.offset(a - 1), "nuw nsw")
        return fl.b.binop("and", bumped, fl.offset(-a))

    offsets: list[ll.Value] = [fl.offset(0)]
    for k in range(1, len(sizes)):
        offsets.append(align_up(fl.add64(offsets[-1], sizes[k - 1]), aligns[k]))
    total = align_up(fl.add64(offsets[-1], sizes[-1]), max(aligns))
    for r, v in zip(op.results, [total, *offsets]):
        fl.bind(r, v)


def _extent(fl: FunctionLowering, d: Any) -> ll.Value:
    return fl.offset(d) if isinstance(d, int) else fl.to_offset(fl.val(d))


@handles("buffer.view")
def _buffer_view(fl: FunctionLowering, op: Operation) -> None:
    buf: Ref = fl.val(op.operand("buffer"))
    base = fl.val(op.operand("offset"))
    t = op.result().type
    strides: list[ll.Value] = [fl.offset(1)]
    for d in reversed(t.dims[1:]):  # type: ignore[attr-defined]
        strides.insert(0, fl.mul64(strides[0], _extent(fl, d)))
    _result(fl, op, Ref(buf.ptr, base, tuple(strides), buf.alias))


def _element_offset(fl: FunctionLowering, view: Ref, indices: list[ll.Value]) -> ll.Value:
    total: ll.Value = fl.offset(0)
    for i, s in zip(indices, view.strides):
        total = fl.add64(total, fl.mul64(fl.to_offset(i), s))
    return total


def element_address(fl: FunctionLowering, view: Ref, elem: ScalarType, indices: list[ll.Value]) -> ll.Value:
    ptr = view.ptr
    assert view.base is not None
    if not _is_zero(view.base):
        ptr = fl.b.gep(ll.I8, ptr, view.base, "base")
    offset = _element_offset(fl, view, indices)
    if _is_zero(offset):
        return ptr
    return fl.b.gep(fl.mem_ty(elem), ptr, offset, "addr")


@handles("view.subview")
def _subview(fl: FunctionLowering, op: Operation) -> None:
    view: Ref = fl.val(op.operand("view"))
    elem = op.operand("view").type.elem  # type: ignore[attr-defined]
    offset = _element_offset(fl, view, fl.index_operands(op))
    assert view.base is not None
    _result(fl, op, replace(view, base=fl.add64(view.base, fl.mul64(offset, fl.offset(ELEMENT_BYTES[elem])))))


def _sixteen(t: ll.Type) -> ll.Value:
    """The shift between a bf16 and its float: 16, in every lane of `t`."""
    sixteen = ll.literal(ll.I32, 16)
    return ll.splat(t, sixteen) if isinstance(t, ll.VectorType) else sixteen


def load_value(fl: FunctionLowering, ptr: ll.Value, elem: ScalarType, lanes: int | None, hint: str,
               alias: ll.Attachments = ()) -> ll.Value:
    """A load of one element (or `lanes` consecutive ones) in register form."""
    b = fl.b
    mty, ety = fl.mem_ty(elem), fl.ty(elem)
    lty = mty if lanes is None else ll.vector(lanes, mty)
    rty = ety if lanes is None else ll.vector(lanes, ety)
    v = b.load(lty, ptr, ELEMENT_BYTES[elem], alias, hint)
    if elem is I1:
        return b.cast("trunc", v, rty)
    if elem is BF16:
        wide = ll.like(lty, ll.I32)
        return b.cast("bitcast", b.binop("shl", b.cast("zext", v, wide), _sixteen(wide)), rty)
    return v


def store_value(fl: FunctionLowering, v: ll.Value, ptr: ll.Value, elem: ScalarType, lanes: int | None,
                alias: ll.Attachments = ()) -> None:
    b = fl.b
    mty = fl.mem_ty(elem)
    lty = mty if lanes is None else ll.vector(lanes, mty)
    if elem is I1:
        v = b.cast("zext", v, lty)
    elif elem is BF16:
        wide = ll.like(lty, ll.I32)
        v = b.cast("trunc", b.binop("lshr", b.cast("bitcast", v, wide), _sixteen(wide)), lty)
    b.store(v, ptr, ELEMENT_BYTES[elem], alias)


def _lanes(t: Type) -> int | None:
    return _lane_count(t) if is_vector(t) else None


def _lane_count(t: ShapedType) -> int:
    """A vector's lane count (vector shapes are static)."""
    n = t.dims[0]
    assert isinstance(n, int)
    return n


@handles("view.load", "vector.load")
def _load(fl: FunctionLowering, op: Operation) -> None:
    view: Ref = fl.val(op.operand("view"))
    elem = op.operand("view").type.elem  # type: ignore[attr-defined]
    ptr = element_address(fl, view, elem, fl.index_operands(op))
    _result(fl, op, load_value(fl, ptr, elem, _lanes(op.results[0].type), _hint(op), view.alias))


@handles("view.store", "vector.store")
def _store(fl: FunctionLowering, op: Operation) -> None:
    view: Ref = fl.val(op.operand("view"))
    elem = op.operand("view").type.elem  # type: ignore[attr-defined]
    ptr = element_address(fl, view, elem, fl.index_operands(op))
    lanes = _lanes(op.operand("value").type)
    store_value(fl, fl.val(op.operand("value")), ptr, elem, lanes, view.alias)


@handles("view.atomic.rmw")
def _atomic(fl: FunctionLowering, op: Operation) -> None:
    view: Ref = fl.val(op.operand("view"))
    elem = op.operand("view").type.elem  # type: ignore[attr-defined]
    ptr = element_address(fl, view, elem, fl.index_operands(op))
    d = op.attr("dict")
    scope = str(d["scope"])
    t = fl.t
    attached = () if scope == "system" else tuple((k, fl.mod.ir.node()) for k in t.atomic_metadata)
    x = fl.val(op.operand("value"))
    if t.select_atomic is not None:
        spaces = {t.space(name): name for name in ("generic", "workgroup", "global")}
        request = AtomicRMW(op.attr("kind"), x.type, spaces.get(view.space, "generic"), fl.ptr_ty(view.space),
                            scope, str(d["ordering"]))
        selected = t.select_atomic(request)
        if selected is not None:
            _result(fl, op, selected(fl.b, ptr, x, _hint(op)))
            return
    _result(fl, op, fl.b.atomicrmw(RMW[op.attr("kind")], ptr, x, t.syncscope[scope], ORDERING[str(d["ordering"])],
                                   ELEMENT_BYTES[elem], view.alias + attached, _hint(op)))


# ---- vectors


@handles("vector.splat")
def _splat(fl: FunctionLowering, op: Operation) -> None:
    vty = fl.ty(op.results[0].type)
    one = fl.b.insertelement(ll.poison(vty), fl.val(op.operand("value")), ll.literal(ll.I64, 0))
    _result(fl, op, fl.b.broadcast(one, _hint(op)))


def _lane_index(fl: FunctionLowering, k: ll.Value) -> ll.Value:
    """A lane index: a literal as i64, else the index value, frozen. A Loom
    lane index is never poison, and saying so keeps LLVM's VectorCombine off
    a path that aborts (llvm/llvm-project#213423, LLVM 22): scalarizing a
    vector load whose extracts share an index it must freeze itself
    (tests/regressions/shared_lane_index.loom, found by the differential fuzzer)."""
    n = ll.int_value(k)
    return fl.b.freeze(k, "lane") if n is None else ll.literal(ll.I64, n)


@handles("vector.extract")
def _extract(fl: FunctionLowering, op: Operation) -> None:
    (k,) = fl.index_operands(op)
    _result(fl, op, fl.b.extractelement(fl.val(op.operand("vector")), _lane_index(fl, k), _hint(op)))


@handles("vector.insert")
def _insert(fl: FunctionLowering, op: Operation) -> None:
    (k,) = fl.index_operands(op)
    vec, v = fl.val(op.operand("vector")), fl.val(op.operand("value"))
    _result(fl, op, fl.b.insertelement(vec, v, _lane_index(fl, k), _hint(op)))


def combine(fl: FunctionLowering, kind: str, t: Type, a: ll.Value, b: ll.Value) -> ll.Value:
    """`a <kind> b` for a combining kind of LANGUAGE.md 7.5."""
    if kind in ("addi", "muli", "andi", "ori", "xori"):
        return fl.b.binop(INT_BINARY[kind], a, b)
    if kind in INT_MINMAX:
        return fl.intrinsic(INT_MINMAX[kind], fl.ty(t), [a, b])
    if kind in ("addf", "mulf"):
        return fl.b.binop(FLOAT_BINARY[kind], a, b)
    return fl.intrinsic(FLOAT_MINMAX[kind], fl.ty(t), [a, b])


@handles("vector.reduce")
def _vector_reduce(fl: FunctionLowering, op: Operation) -> None:
    t = op.operand("vector").type
    elem = t.elem  # type: ignore[attr-defined]
    v = fl.val(op.operand("vector"))
    lanes = [fl.b.extractelement(v, ll.literal(ll.I64, k)) for k in range(_lanes(t) or 1)]
    kind = op.attr("kind")
    while len(lanes) > 1:  # every kind may associate (LANGUAGE.md 7.5): a balanced tree
        lanes = [combine(fl, kind, elem, lanes[k], lanes[k + 1]) if k + 1 < len(lanes) else lanes[k]
                 for k in range(0, len(lanes), 2)]
    _result(fl, op, combine(fl, kind, elem, fl.val(op.operand("init")), lanes[0]))


# ---- kernels: coordinates, barriers, collectives


def coordinate(fl: FunctionLowering, key: str) -> ll.Value:
    """A coordinate from the target's hook, computed once in the entry block; index-typed."""
    if key not in fl.cache:
        with fl.b.at_entry():
            v = fl.t.coordinates[key](fl.b, key.replace(".", "_"))
            fl.cache[key] = fl.resize(v, 32, fl.t.index_bits, signed=False, nneg=True)
    return fl.cache[key]


def workgroup_size(fl: FunctionLowering, d: int) -> ll.Value:
    plan = fl.plan
    if plan is not None and plan.workgroup_size is not None:
        return fl.index(plan.workgroup_size[d])
    return coordinate(fl, f"workgroup.size.{'xyz'[d]}")


def workitem_id(fl: FunctionLowering, d: int) -> ll.Value:
    if ll.int_value(workgroup_size(fl, d)) == 1:
        return fl.index(0)
    return coordinate(fl, f"workitem.id.{'xyz'[d]}")


def dispatch_id(fl: FunctionLowering, kind: str) -> ll.Value:
    """Workgroup id * size + workitem id, once per kernel."""
    d = "xyz".index(kind)
    key = ("dispatch", d)
    if key not in fl.cache:
        with fl.b.at_entry():
            group = fl.b.binop("mul", coordinate(fl, f"workgroup.id.{kind}"), workgroup_size(fl, d), "nuw nsw")
            tid = workitem_id(fl, d)
            fl.cache[key] = group if _is_zero(tid) else fl.b.binop("add", group, tid, "nuw nsw",
                                                                    f"dispatch_id_{kind}")
    return fl.cache[key]


def _coordinate(get: Callable[[FunctionLowering, str], ll.Value]) -> Handler:
    """A coordinate op of an axis (`<x>`)."""
    def lower(fl: FunctionLowering, op: Operation) -> None:
        _result(fl, op, get(fl, op.attr("kind")))
    return lower


HANDLERS["kernel.workitem.id"] = _coordinate(lambda fl, kind: workitem_id(fl, "xyz".index(kind)))
HANDLERS["kernel.workgroup.size"] = _coordinate(lambda fl, kind: workgroup_size(fl, "xyz".index(kind)))
HANDLERS["kernel.workgroup.id"] = _coordinate(lambda fl, kind: coordinate(fl, f"workgroup.id.{kind}"))
HANDLERS["kernel.workgroup.count"] = _coordinate(lambda fl, kind: coordinate(fl, f"workgroup.count.{kind}"))
HANDLERS["kernel.workitem.dispatch.id"] = _coordinate(dispatch_id)


@handles("kernel.subgroup.lane.id")
def _lane_id(fl: FunctionLowering, op: Operation) -> None:
    _result(fl, op, coordinate(fl, "subgroup.lane.id"))


def barrier(fl: FunctionLowering, scope: str, ordering: str, control: str) -> None:
    t = fl.t
    if scope == control and control in t.ordering_barriers:  # the barrier is the fence
        t.control_barrier[control](fl.b)
        return
    ss = t.syncscope[scope]
    if ordering in ("release", "acq_rel"):
        fl.b.fence(ss, "release")
    t.control_barrier[control](fl.b)
    if ordering in ("acquire", "acq_rel"):
        fl.b.fence(ss, "acquire")


@handles("kernel.barrier")
def _barrier(fl: FunctionLowering, op: Operation) -> None:
    scope = op.attr("scope")
    barrier(fl, scope, op.attr("ordering"), scope)


_WORD_PAIR = ll.vector(2, ll.I32)


def _to_words(fl: FunctionLowering, t: Type, v: ll.Value) -> list[ll.Value]:
    """A scalar as the i32 words a lane shuffle moves."""
    b, llty = fl.b, fl.ty(t)
    if llty is ll.I64 or llty is ll.DOUBLE:
        pair = b.cast("bitcast", v, _WORD_PAIR)
        return [b.extractelement(pair, ll.literal(ll.I64, k)) for k in range(2)]
    if llty is ll.FLOAT:
        return [b.cast("bitcast", v, ll.I32)]
    if llty is ll.HALF:
        return [b.cast("zext", b.cast("bitcast", v, ll.I16), ll.I32)]
    return [fl.resize(v, ll.bits_of(llty), 32, signed=False)]


def _from_words(fl: FunctionLowering, t: Type, words: list[ll.Value]) -> ll.Value:
    b, llty = fl.b, fl.ty(t)
    if llty is ll.I64 or llty is ll.DOUBLE:
        pair = b.insertelement(ll.poison(_WORD_PAIR), words[0], ll.literal(ll.I64, 0))
        pair = b.insertelement(pair, words[1], ll.literal(ll.I64, 1))
        return b.cast("bitcast", pair, llty)
    if llty is ll.FLOAT:
        return b.cast("bitcast", words[0], ll.FLOAT)
    if llty is ll.HALF:
        return b.cast("bitcast", b.cast("trunc", words[0], ll.I16), ll.HALF)
    return fl.resize(words[0], 32, ll.bits_of(llty), signed=False)


def subgroup_reduce(fl: FunctionLowering, kind: str, t: Type, v: ll.Value) -> ll.Value:
    """Every active lane gets the combination of the subgroup's values.

    The active lanes of a subgroup at a convergent point are a prefix
    0..n-1 (a short last subgroup has fewer), so lane L folds in lane L+k
    when L+k < n, for k = 1, 2, 4, ...: lane 0 ends with the total, which
    is then broadcast. Any kind works and partial subgroups are exact.
    A target with a reduction instruction for (kind, type) uses it instead."""
    target, b = fl.t, fl.b
    native = target.subgroup_reduce.get((kind, fl.ty(t)))
    if native is not None:
        return native(b, v, "reduced")
    lane = fl.resize(coordinate(fl, "subgroup.lane.id"), target.index_bits, 32, signed=False)
    with b.at_entry():
        n = target.active_lanes(b, "active")
    width = target.subgroup_size or 64
    k = 1
    while k < width:
        src = b.binop("add", lane, ll.literal(ll.I32, k), "nuw nsw", "src")
        words = [target.shuffle(b, w, src, "peer") for w in _to_words(fl, t, v)]
        other = _from_words(fl, t, words)
        ok = b.icmp("ult", src, n, "in_range")
        v = b.select(ok, combine(fl, kind, t, v, other), v)
        k *= 2
    words = [target.broadcast_first(b, w, "first") for w in _to_words(fl, t, v)]
    return _from_words(fl, t, words)


@handles("kernel.subgroup.reduce")
def _subgroup_reduce(fl: FunctionLowering, op: Operation) -> None:
    t = op.results[0].type
    _result(fl, op, subgroup_reduce(fl, op.attr("kind"), t, fl.val(op.operand("value"))))
