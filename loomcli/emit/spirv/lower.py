"""Lowering of Loom kernel and device-function bodies to SPIR-V instructions.

One `Lowerer` writes one SPIR-V function. Loom values map to:

    scalars          one id (index/offset: 32-bit ints; i1: bool; bf16: f32)
    vector<N x E>    a tuple of N lane ids (vectors are unrolled)
    buffer           `BufferValue`: candidate roots and, if several, a selector id
    view             `ViewValue`: roots, selector, base element, strides

Control flow is structured already: `scf.if` becomes a selection construct
with phis in its merge block, `scf.for`/`scf.while` loop constructs whose
header phis carry the loop values. `LOWER` maps each op name to its
lowering; ops that end regions are handled by their parent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit.spirv import floatmath as fm
from loomcli.emit.spirv.builder import NATURAL_STORAGE, Builder
from loomcli.emit.spirv.memory import Facts, Root, tracked
from loomcli.emit.spirv.spec import GLSL, GROUP_REDUCE, SC, BuiltIn, Cap, Op, Scope, Sem
from loomcli.ir.core import Operation, Region, Value
from loomcli.ir.ops import SCALAR_EXTSI, SCALAR_FPTOSI, SCALAR_SITOFP, OpTable
from loomcli.ir.types import (
    BF16,
    BUFFER,
    ELEMENT_BYTES,
    F16,
    F32,
    I1,
    I32,
    INDEX,
    OFFSET,
    ScalarType,
    ShapedType,
    Type,
    is_float,
    is_vector,
    lane_count,
    scalar,
    shaped,
)
from loomcli.semantics.fold import canonical

if TYPE_CHECKING:
    from loomcli.emit.spirv.emitter import KernelInfo, SpirvEmitter
    from loomcli.emit.spirv.writer import FunctionWriter


@dataclass(frozen=True)
class BufferValue:
    roots: tuple[Root, ...]
    sel: int | None            # u32 id holding a root number when there are several roots


@dataclass(frozen=True)
class ViewValue:
    roots: tuple[Root, ...]
    sel: int | None
    base: int                  # u32 id: element index of element (0, ..., 0)
    strides: tuple[int, ...]   # u32 ids, one per axis except the last (whose stride is 1)


LOWER: OpTable[Callable[[Lowerer, Operation], None]] = OpTable("emit.spirv.lower.LOWER")
lowers = LOWER.register


INDEX_CMP_SIGNED = {"eq": Op.IEqual, "ne": Op.INotEqual, "slt": Op.SLessThan, "sle": Op.SLessThanEqual,
                    "sgt": Op.SGreaterThan, "sge": Op.SGreaterThanEqual, "ult": Op.ULessThan,
                    "ule": Op.ULessThanEqual, "ugt": Op.UGreaterThan, "uge": Op.UGreaterThanEqual}
# Offsets are unsigned 32-bit on spirv: their signed predicates compare unsigned.
UNSIGNED_OF = {Op.SLessThan: Op.ULessThan, Op.SLessThanEqual: Op.ULessThanEqual,
               Op.SGreaterThan: Op.UGreaterThan, Op.SGreaterThanEqual: Op.UGreaterThanEqual}
CMPF = {"oeq": Op.FOrdEqual, "ogt": Op.FOrdGreaterThan, "oge": Op.FOrdGreaterThanEqual, "olt": Op.FOrdLessThan,
        "ole": Op.FOrdLessThanEqual, "one": Op.FOrdNotEqual, "ueq": Op.FUnordEqual, "ugt": Op.FUnordGreaterThan,
        "uge": Op.FUnordGreaterThanEqual, "ult": Op.FUnordLessThan, "ule": Op.FUnordLessThanEqual,
        "une": Op.FUnordNotEqual}
INT_BINARY = {"addi": Op.IAdd, "subi": Op.ISub, "muli": Op.IMul, "divsi": Op.SDiv, "divui": Op.UDiv,
              "remsi": Op.SRem, "remui": Op.UMod, "andi": Op.BitwiseAnd, "ori": Op.BitwiseOr,
              "xori": Op.BitwiseXor, "shli": Op.ShiftLeftLogical, "shrsi": Op.ShiftRightArithmetic,
              "shrui": Op.ShiftRightLogical}
INT_MINMAX = {"minsi": Op.SLessThan, "maxsi": Op.SGreaterThan, "minui": Op.ULessThan, "maxui": Op.UGreaterThan}
# i1 integer ops (true reads -1 signed, 1 unsigned; x/0 and shifts >= 1 are UB).
BOOL_BINARY = {"addi": Op.LogicalNotEqual, "subi": Op.LogicalNotEqual, "xori": Op.LogicalNotEqual,
               "muli": Op.LogicalAnd, "andi": Op.LogicalAnd, "ori": Op.LogicalOr, "minsi": Op.LogicalOr,
               "maxsi": Op.LogicalAnd, "minui": Op.LogicalAnd, "maxui": Op.LogicalOr}
ATOMIC_INT = {"xchgi": Op.AtomicExchange, "addi": Op.AtomicIAdd, "subi": Op.AtomicISub, "andi": Op.AtomicAnd,
              "ori": Op.AtomicOr, "xori": Op.AtomicXor, "minsi": Op.AtomicSMin, "maxsi": Op.AtomicSMax,
              "minui": Op.AtomicUMin, "maxui": Op.AtomicUMax}
ORDERING_SEM = {"relaxed": Sem.Relaxed, "acquire": Sem.Acquire, "release": Sem.Release,
                "acq_rel": Sem.AcquireRelease, "seq_cst": Sem.AcquireRelease}
SCOPES = {"subgroup": Scope.Subgroup, "workgroup": Scope.Workgroup, "device": Scope.Device}
GROUP_INT = {"addi": Op.GroupNonUniformIAdd, "muli": Op.GroupNonUniformIMul, "andi": Op.GroupNonUniformBitwiseAnd,
             "ori": Op.GroupNonUniformBitwiseOr, "xori": Op.GroupNonUniformBitwiseXor,
             "minsi": Op.GroupNonUniformSMin, "maxsi": Op.GroupNonUniformSMax, "minui": Op.GroupNonUniformUMin,
             "maxui": Op.GroupNonUniformUMax, "addf": Op.GroupNonUniformFAdd, "mulf": Op.GroupNonUniformFMul}
GROUP_BOOL = {"addi": Op.GroupNonUniformLogicalXor, "xori": Op.GroupNonUniformLogicalXor,
              "muli": Op.GroupNonUniformLogicalAnd, "andi": Op.GroupNonUniformLogicalAnd,
              "ori": Op.GroupNonUniformLogicalOr, "minsi": Op.GroupNonUniformLogicalOr,
              "maxsi": Op.GroupNonUniformLogicalAnd, "minui": Op.GroupNonUniformLogicalAnd,
              "maxui": Op.GroupNonUniformLogicalOr}
COORDINATES = OpTable("emit.spirv.lower.COORDINATES", {
    "kernel.workitem.id": BuiltIn.LocalInvocationId, "kernel.workgroup.id": BuiltIn.WorkgroupId,
    "kernel.workgroup.count": BuiltIn.NumWorkgroups, "kernel.workitem.dispatch.id": BuiltIn.GlobalInvocationId})
AXIS = {"x": 0, "y": 1, "z": 2}
SB_SEM = Sem.UniformMemory
WG_SEM = Sem.WorkgroupMemory
BARRIER_WG = Sem.AcquireRelease | Sem.WorkgroupMemory


def _trivial(region: Region) -> bool:
    """A region holding only an operand-free terminator."""
    return len(region.ops) == 1 and not region.ops[0].operands


class Lowerer(Builder):
    """Writes one function: a kernel entry point or a device-function specialization."""

    def __init__(self, em: SpirvEmitter, fw: FunctionWriter, facts: Facts, kernel: KernelInfo | None) -> None:
        super().__init__(em.m, fw)
        self.em = em
        self.facts = facts
        self.kernel = kernel
        self.env: dict[Value, Any] = {}

    # ------------------------------------------------------------ plumbing

    def get(self, v: Value) -> Any:
        return self.env[v]

    def fail(self, code: str, at: Operation, **fields: Any) -> CompileError:
        return CompileError([Diagnostic.make(code, self.em.path, at.loc, **fields)])

    def block(self, region: Region) -> Operation:
        """Lower a region's ops up to its terminator; returns the terminator."""
        ops = region.ops
        for op in ops[:-1]:
            handler = LOWER.get(op.name)
            if handler is None:
                raise self.fail("STRUCTURE/003", op, op=op.name, context="a spirv kernel")
            handler(self, op)
        return ops[-1]

    def operands(self, op: Operation) -> list[Any]:
        return [self.env[v] for v in op.operands]

    # ------------------------------------------------------------ value shapes (flattening for phis, calls)

    def roots_of(self, v: Value) -> tuple[Root, ...]:
        return self.facts.of(v)

    def shape(self, t: Type, roots: tuple[Root, ...]) -> list[int]:
        """SPIR-V types of the components of a value of type `t`."""
        if isinstance(t, ShapedType):
            if is_vector(t):
                return [self.vtype(t.elem)] * lane_count(t)
            return ([self.u32_t] if len(roots) > 1 else []) + [self.u32_t] * len(t.dims)
        if t is BUFFER:
            return [self.u32_t] if len(roots) > 1 else []
        return [self.vtype(scalar(t))]

    def _sel(self, value: BufferValue | ViewValue) -> int:
        return value.sel if value.sel is not None else self.u32(value.roots[0].number)

    def flatten(self, t: Type, value: Any, roots: tuple[Root, ...]) -> list[int]:
        """Components of `value` as a value whose candidate roots are `roots`."""
        if isinstance(value, ViewValue):
            return ([self._sel(value)] if len(roots) > 1 else []) + [value.base, *value.strides]
        if isinstance(value, BufferValue):
            return [self._sel(value)] if len(roots) > 1 else []
        if isinstance(value, tuple):
            return list(value)
        return [value]

    def unflatten(self, t: Type, ids: Sequence[int], roots: tuple[Root, ...]) -> Any:
        if t is BUFFER:
            return BufferValue(roots, ids[0] if len(roots) > 1 else None)
        if isinstance(t, ShapedType):
            if is_vector(t):
                return tuple(ids)
            k = 1 if len(roots) > 1 else 0
            return ViewValue(roots, ids[0] if k else None, ids[k], tuple(ids[k + 1:]))
        return ids[0]

    def join(self, targets: Sequence[Value], incoming: list[tuple[list[Any], int]]) -> None:
        """Bind `targets` to phis of the incoming (values, predecessor) pairs."""
        flat_in: list[tuple[list[int], int]] = [([], block) for _, block in incoming]
        sizes = []
        for k, t in enumerate(targets):
            roots = self.roots_of(t)
            for (vals, _), (flat, _) in zip(incoming, flat_in):
                flat.extend(self.flatten(t.type, vals[k], roots))
            sizes.append(len(flat_in[0][0]) if flat_in else 0)
        merged = self.merge_phis(flat_in) if flat_in and flat_in[0][0] else []
        start = 0
        for t, end in zip(targets, sizes):
            self.env[t] = self.unflatten(t.type, merged[start:end], self.roots_of(t))
            start = end

    def header_phis(self, targets: Sequence[Value], inits: list[Any], pre: int) -> list[list[list[int]]]:
        """Loop-header phis for `targets`, fed from `pre` with `inits`; returns the
        phi instructions (per target) for the back edge to complete."""
        insts_per: list[list[list[int]]] = []
        for t, init in zip(targets, inits):
            roots = self.roots_of(t)
            ids = []
            insts = []
            for ty, v in zip(self.shape(t.type, roots), self.flatten(t.type, init, roots)):
                p, inst = self.fw.phi(ty)
                inst.extend((v, pre))
                ids.append(p)
                insts.append(inst)
            self.env[t] = self.unflatten(t.type, ids, roots)
            insts_per.append(insts)
        return insts_per

    def close_phis(self, targets: Sequence[Value], insts_per: list[list[list[int]]], values: list[Any],
                   block: int) -> None:
        for t, insts, v in zip(targets, insts_per, values):
            for inst, c in zip(insts, self.flatten(t.type, v, self.roots_of(t))):
                inst.extend((c, block))

    # ------------------------------------------------------------ memory

    def indices(self, op: Operation) -> list[int]:
        """The per-axis indices of an indexed access (`%v[%i, 0]`)."""
        template = op.attr("indices")
        dynamic = iter(op.operand_group("indices"))
        return [self.u32(t) if t is not None else self.env[next(dynamic)] for t in template]

    def element(self, view: ViewValue, idx: Sequence[int]) -> int:
        e = view.base
        for k, i in enumerate(idx):
            e = self.iadd(e, self.imul(i, view.strides[k]) if k < len(view.strides) else i)
        return e

    def on_roots(self, roots: tuple[Root, ...], sel: int | None, emit: Callable[[Root], list[int]]) -> list[int]:
        """Run `emit` for the one root, or switch over the candidates on `sel`."""
        if len(roots) == 1:
            return emit(roots[0])
        assert sel is not None
        m, fw = self.m, self.fw
        merge = m.new_id()
        labels = [m.new_id() for _ in roots]
        fw.op(Op.SelectionMerge, merge, 0)
        cases: list[int] = []
        for r, lab in zip(roots[1:], labels[1:]):
            cases += (r.number, lab)
        fw.op(Op.Switch, sel, labels[0], *cases)
        incoming = []
        for r, lab in zip(roots, labels):
            fw.label(lab)
            vals = emit(r)
            incoming.append((vals, fw.block))
            fw.op(Op.Branch, merge)
        fw.label(merge)
        return self.merge_phis(incoming) if incoming[0][0] else []

    def storage_type(self, st: tuple[str, int], sb: bool) -> int:
        kind, bits = st
        m = self.m
        if bits == 8:
            m.capability(Cap.StorageBuffer8BitAccess if sb else Cap.Int8)
            if sb and self.em.version < (1, 5):
                m.extension("SPV_KHR_8bit_storage")
        elif bits == 16:
            m.capability(Cap.StorageBuffer16BitAccess if sb else (Cap.Float16 if kind == "f" else Cap.Int16))
        return m.float(bits) if kind == "f" else m.int(bits)

    def pointer(self, root: Root, st: tuple[str, int], e: int) -> int:
        """A pointer to element `e` of the root's array of `st` elements."""
        if root.kind == "buffer":
            t = self.storage_type(st, True)
            var = self.em.storage_buffer(root.binding, st, t)
            self.fw.use_global(var)
            return self.val(Op.AccessChain, self.m.pointer(SC.StorageBuffer, t), var, self.u32(0), e)
        t = self.storage_type(root.storage, False)
        var = self.em.root_variable(root, t)
        self.fw.use_global(var)
        sc = SC.Workgroup if root.kind == "workgroup" else SC.Private
        return self.val(Op.AccessChain, self.m.pointer(sc, t), var, e)

    def from_storage(self, elem: ScalarType, raw: int) -> int:
        if elem is I1:
            return self.cmp(Op.INotEqual, self.val(Op.UConvert, self.u32_t, raw), self.u32(0))
        if elem is BF16:
            return self.bitcast(self.m.float(32), self.ishl(self.val(Op.UConvert, self.u32_t, raw), 16))
        return raw

    def to_storage(self, elem: ScalarType, st_type: int, v: int) -> int:
        if elem is I1:
            return self.val(Op.UConvert, st_type, self.select(v, self.u32(1), self.u32(0)))
        if elem is BF16:
            return self.val(Op.UConvert, st_type, self.ishr(self.bitcast(self.u32_t, v), 16))
        return v

    def to_bits(self, elem: ScalarType, v: int) -> int:
        """The value's bit pattern as an unsigned integer of the element's width."""
        bits = ELEMENT_BYTES[elem] * 8
        if elem is I1:
            return self.select(v, self.m.uint(8, 1), self.uint_zero(8))
        if elem is BF16:
            return self.val(Op.UConvert, self.uint_t(16), self.ishr(self.bitcast(self.u32_t, v), 16))
        if is_float(elem):
            return self.bitcast(self.uint_t(bits), v)
        return v

    def uint_zero(self, bits: int) -> int:
        self.uint_t(bits)
        return self.m.uint(bits, 0)

    def from_bits(self, elem: ScalarType, bits_v: int) -> int:
        if elem is I1:
            return self.cmp(Op.INotEqual, bits_v, self.uint_zero(8))
        if elem is BF16:
            return self.bitcast(self.m.float(32), self.ishl(self.val(Op.UConvert, self.u32_t, bits_v), 16))
        if is_float(elem):
            return self.bitcast(self.vtype(elem), bits_v)
        return bits_v

    def load(self, root: Root, elem: ScalarType, e: int) -> int:
        nat = NATURAL_STORAGE[elem]
        self.vtype(elem)  # the loaded value is computed with: its type's capabilities
        if root.kind == "buffer" or root.storage == nat:
            ptr = self.pointer(root, nat, e)
            raw = self.val(Op.Load, self.storage_type(nat, root.kind == "buffer"), ptr)
            return self.from_storage(elem, raw)
        word_bits = root.storage[1]
        wt = self.storage_type(root.storage, False)
        if word_bits == nat[1]:
            return self.from_bits(elem, self.val(Op.Load, wt, self.pointer(root, root.storage, e)))
        parts = nat[1] // word_bits
        first = self.imul(e, self.u32(parts))
        full_t = self.uint_t(nat[1])
        acc = None
        for j in range(parts):
            w = self.val(Op.Load, wt, self.pointer(root, root.storage, self.iadd(first, self.u32(j))))
            w = self.val(Op.UConvert, full_t, w)
            if j:
                w = self.val(Op.ShiftLeftLogical, full_t, w, self.u32(j * word_bits))
            acc = w if acc is None else self.bin(Op.BitwiseOr, acc, w)
        return self.from_bits(elem, acc)  # type: ignore[arg-type]

    def store(self, root: Root, elem: ScalarType, e: int, v: int) -> None:
        nat = NATURAL_STORAGE[elem]
        if root.kind == "buffer" or root.storage == nat:
            st_t = self.storage_type(nat, root.kind == "buffer")
            ptr = self.pointer(root, nat, e)
            self.fw.op(Op.Store, ptr, self.to_storage(elem, st_t, v))
            return
        word_bits = root.storage[1]
        wt = self.storage_type(root.storage, False)
        bits_v = self.to_bits(elem, v)
        if word_bits == nat[1]:
            self.fw.op(Op.Store, self.pointer(root, root.storage, e), bits_v)
            return
        parts = nat[1] // word_bits
        first = self.imul(e, self.u32(parts))
        for j in range(parts):
            w = bits_v
            if j:
                w = self.val(Op.ShiftRightLogical, self.typeof(bits_v), w, self.u32(j * word_bits))
            w = self.val(Op.UConvert, wt, w)
            self.fw.op(Op.Store, self.pointer(root, root.storage, self.iadd(first, self.u32(j))), w)

    def atomic(self, op: Operation, root: Root, elem: ScalarType, e: int, x: int) -> int:
        """`view.atomic.rmw` on one root; returns the old value."""
        kind = op.attr("kind")
        attrs = op.attr("dict", {})
        ordering = str(attrs.get("ordering", "relaxed"))
        scope_name = str(attrs.get("scope", "device"))
        if scope_name == "system":
            raise self.fail("TARGET/001", op, text=f"scope = system on {self.em.profile.name}")
        if root.kind == "private":  # one invocation owns it: a plain read-modify-write
            old = self.load(root, elem, e)
            new = x if kind in ("xchgi", "xchgf") else fm.combine(self, _combine_kind(kind), elem, old,
                                                                  self._neg_if_sub(kind, x))
            self.store(root, elem, e, new)
            return old
        bits = ELEMENT_BYTES[elem] * 8
        if bits == 64:
            self.m.capability(Cap.Int64Atomics)
        order = ORDERING_SEM[ordering]
        space = SB_SEM if root.kind == "buffer" else WG_SEM
        sem = self.u32(order | space if order else 0)
        scope = self.u32(SCOPES[scope_name])
        ut = self.uint_t(bits) if bits != 32 else self.u32_t
        int_ptr = self.pointer(root, ("u", bits), e)
        if kind in ATOMIC_INT:
            return self.val(ATOMIC_INT[kind], ut, int_ptr, scope, sem, x)
        if kind == "xchgf":
            old = self.val(Op.AtomicExchange, ut, int_ptr, scope, sem, self.bitcast(ut, x))
            return self.bitcast(self.vtype(elem), old)
        if kind == "addf" and bits == 32 and root.kind == "buffer":
            self.m.capability(Cap.AtomicFloat32AddEXT)
            self.m.extension("SPV_EXT_shader_atomic_float_add")
            ptr = self.pointer(root, ("f", 32), e)
            return self.val(Op.AtomicFAddEXT, self.vtype(elem), ptr, scope, sem, x)
        return self.cas_loop(int_ptr, ut, elem, scope, order, space,
                             lambda old: fm.combine(self, kind, elem, old, x))

    def retarget(self, target: Value, source: Value) -> Any:
        """The value of `source` seen as `target`, whose candidate roots may be more."""
        value = self.env[source]
        if not tracked(target.type):
            return value
        roots = self.roots_of(target)
        return self.unflatten(target.type, self.flatten(target.type, value, roots), roots)

    def retarget_ids(self, target: Value, ids: list[int], roots: tuple[Root, ...]) -> Any:
        """Components of a value with candidate `roots`, bound as `target`."""
        value = self.unflatten(target.type, ids, roots)
        if not tracked(target.type):
            return value
        mine = self.roots_of(target)
        return self.unflatten(target.type, self.flatten(target.type, value, mine), mine)

    def _neg_if_sub(self, kind: str, x: int) -> int:
        return self.val(Op.SNegate, self.typeof(x), x) if kind == "subi" else x

    def cas_loop(self, ptr: int, ut: int, elem: ScalarType, scope: int, order: int, space: int,
                 update: Callable[[int], int]) -> int:
        """Atomically replace *ptr by update(*ptr) with a compare-exchange loop; returns the old value.

        The compare-exchange itself is relaxed; the ordering is carried by
        fences outside the loop (release before, acquire after), the same
        synchronization as an ordered RMW. Drivers that put an ordered
        atomic's fence inside the (divergent) loop lose invocations: lavapipe
        does, with Release semantics on OpAtomicCompareExchange."""
        m, fw = self.m, self.fw
        if order in (Sem.Release, Sem.AcquireRelease):
            fw.op(Op.MemoryBarrier, scope, self.u32(Sem.Release | space))
        relaxed = self.u32(0)
        first = self.val(Op.AtomicLoad, ut, ptr, scope, relaxed)
        pre = fw.block
        header, body, cont, merge = m.new_id(), m.new_id(), m.new_id(), m.new_id()
        fw.op(Op.Branch, header)
        fw.label(header)
        old, phi = fw.phi(ut)
        phi.extend((first, pre))
        fw.op(Op.LoopMerge, merge, cont, 0)
        fw.op(Op.Branch, body)
        fw.label(body)
        new = self.bitcast(ut, update(self.bitcast(self.vtype(elem), old)))
        seen = self.val(Op.AtomicCompareExchange, ut, ptr, scope, relaxed, relaxed, new, old)
        done = self.cmp(Op.IEqual, seen, old)
        fw.op(Op.BranchConditional, done, merge, cont)
        fw.label(cont)
        phi.extend((seen, cont))
        fw.op(Op.Branch, header)
        fw.label(merge)
        if order in (Sem.Acquire, Sem.AcquireRelease):
            fw.op(Op.MemoryBarrier, scope, self.u32(Sem.Acquire | space))
        return self.bitcast(self.vtype(elem), old)

    # ------------------------------------------------------------ builtins and barriers

    def builtin(self, which: int, component: int | None = None) -> int:
        var, vec = self.em.builtin(which)
        self.fw.use_global(var)
        v = self.val(Op.Load, vec, var)
        if component is None:
            return v
        return self.val(Op.CompositeExtract, self.u32_t, v, component)

    def barrier(self, exec_scope: int, mem_scope: int, sem: int) -> None:
        self.fw.op(Op.ControlBarrier, self.u32(exec_scope), self.u32(mem_scope), self.u32(sem))

    # ------------------------------------------------------------ reductions

    def promote(self, t: ScalarType, kind: str, v: int) -> tuple[ScalarType, int]:
        """The type a reduction computes in: 8/16-bit integers widen to 32 bits
        (signed kinds sign-extend), f16 widens to f32, bf16 is f32 already."""
        if t.category == "int" and t.bits in (8, 16):
            return I32, self.val(Op.SConvert if kind in ("minsi", "maxsi") else Op.UConvert, self.u32_t, v)
        if t is F16:
            return F32, self.val(Op.FConvert, self.m.float(32), v)
        return t, v  # bf16 is carried in f32 already (widen-bf16 left only kinds exact on it)

    def demote(self, t: ScalarType, wt: ScalarType, v: int) -> int:
        if t.category == "int" and t.bits in (8, 16):
            return self.val(Op.UConvert, self.vtype(t), v)
        if t is F16:
            return self.val(Op.FConvert, self.vtype(t), v)
        return v

    def subgroup_reduce(self, kind: str, t: ScalarType, v: int) -> int:
        """Reduce over the subgroup in the work type `t`; exact for every kind."""
        m = self.m
        m.capability(Cap.GroupNonUniform, Cap.GroupNonUniformArithmetic)
        scope = self.u32(Scope.Subgroup)
        ty = self.typeof(v)
        if t is I1:
            return self.val(GROUP_BOOL[kind], ty, scope, GROUP_REDUCE, v)
        if kind == "addf":
            # A sum is -0 exactly when every operand is -0, whatever the order; FAdd's
            # identity is +0 in SPIR-V (and lavapipe's), which makes that sum +0: a vote fixes it.
            m.capability(Cap.GroupNonUniformVote)
            bits = fm.cbits(t)
            r = self.val(Op.GroupNonUniformFAdd, ty, scope, GROUP_REDUCE, v)
            negative_zero = self.land(self.cmp(Op.FOrdEqual, v, m.fconst(bits, 0.0)), fm.signbit(self, bits, v))
            every = self.val(Op.GroupNonUniformAll, self.bool_t, scope, negative_zero)
            return self.select(every, m.fconst(bits, -0.0), r)
        if kind in GROUP_INT:
            return self.val(GROUP_INT[kind], ty, scope, GROUP_REDUCE, v)
        # minimumf maximumf minnumf maxnumf: FMin/FMax over NaN-free values, then fix
        # NaN and the sign of zero with votes.
        m.capability(Cap.GroupNonUniformVote)
        bits = fm.cbits(t)
        is_min = kind in ("minimumf", "minnumf")
        nan = fm.isnan(self, v)
        clean = self.select(nan, m.fconst(bits, fm.INF if is_min else -fm.INF), v)
        r = self.val(Op.GroupNonUniformFMin if is_min else Op.GroupNonUniformFMax, ty, scope, GROUP_REDUCE, clean)
        zero = m.fconst(bits, 0.0)
        is_zero = self.cmp(Op.FOrdEqual, v, zero)
        sign = fm.signbit(self, bits, v)
        # min: -0 if any lane holds -0; max: +0 if any lane holds +0.
        want = self.land(is_zero, sign if is_min else self.logical_not(sign))
        any_want = self.val(Op.GroupNonUniformAny, self.bool_t, scope, want)
        signed_zero = self.select(any_want, m.fconst(bits, -0.0 if is_min else 0.0),
                                  m.fconst(bits, 0.0 if is_min else -0.0))
        r = self.select(self.cmp(Op.FOrdEqual, r, zero), signed_zero, r)
        vote = Op.GroupNonUniformAny if kind in ("minimumf", "maximumf") else Op.GroupNonUniformAll
        return self.select(self.val(vote, self.bool_t, scope, nan), m.fconst(bits, fm.NAN), r)


def _combine_kind(kind: str) -> str:
    """The combining kind an atomic's read-modify-write applies."""
    return "addi" if kind == "subi" else kind


# ================================================================ op lowerings


@lowers("index.constant")
def _index_constant(lo: Lowerer, op: Operation) -> None:
    lo.env[op.results[0]] = lo.u32(int(op.attr("value")))


@lowers("scalar.constant")
def _scalar_constant(lo: Lowerer, op: Operation) -> None:
    t = scalar(op.results[0].type)
    lo.env[op.results[0]] = lo.const(t, canonical(op.attr("value"), t))


@lowers("index.assume", "buffer.assume.noalias", "buffer.assume.alignment", "buffer.assume.memory_space")
def _identity(lo: Lowerer, op: Operation) -> None:
    for r, v in zip(op.results, op.operands):
        lo.env[r] = lo.env[v]


@lowers("index.add", "index.sub", "index.mul", "index.div", "index.rem", "index.min", "index.max", "index.andi",
        "index.ori", "index.xori", "index.shli", "index.shrsi", "index.shrui")
def _index_binary(lo: Lowerer, op: Operation) -> None:
    a, b = lo.operands(op)
    unsigned = op.results[0].type is OFFSET
    name = op.name[6:]
    if name == "add":
        r = lo.iadd(a, b)
    elif name == "sub":
        r = lo.isub(a, b)
    elif name == "mul":
        r = lo.imul(a, b)
    elif name in ("div", "rem"):
        opcode = {("div", False): Op.SDiv, ("div", True): Op.UDiv, ("rem", False): Op.SRem,
                  ("rem", True): Op.UMod}[(name, unsigned)]
        r = lo.bin(opcode, a, b)
    elif name in ("min", "max"):
        pred = Op.SLessThan if name == "min" else Op.SGreaterThan
        r = lo.select(lo.cmp(UNSIGNED_OF[pred] if unsigned else pred, a, b), a, b)
    elif name in ("andi", "ori", "xori"):
        r = lo.bin({"andi": Op.BitwiseAnd, "ori": Op.BitwiseOr, "xori": Op.BitwiseXor}[name], a, b)
    else:
        # 0 <= b <= 63 while the value has 32 bits: shifts by 32 or more saturate.
        big = lo.cmp(Op.UGreaterThanEqual, b, lo.u32(32))
        if name == "shrsi" and not unsigned:
            r = lo.bin(Op.ShiftRightArithmetic, a, lo.select(big, lo.u32(31), b))
        else:
            opcode = Op.ShiftLeftLogical if name == "shli" else Op.ShiftRightLogical
            r = lo.select(big, lo.u32(0), lo.bin(opcode, a, b))
    lo.env[op.results[0]] = r


@lowers("index.madd")
def _index_madd(lo: Lowerer, op: Operation) -> None:
    a, b, c = lo.operands(op)
    lo.env[op.results[0]] = lo.iadd(lo.imul(a, b), c)


@lowers("index.scale")
def _index_scale(lo: Lowerer, op: Operation) -> None:
    a, b = lo.operands(op)
    lo.env[op.results[0]] = lo.imul(a, b)


@lowers("index.cmp")
def _index_cmp(lo: Lowerer, op: Operation) -> None:
    a, b = lo.operands(op)
    opcode = INDEX_CMP_SIGNED[op.attr("predicate")]
    if op.operand("lhs").type is OFFSET:
        opcode = UNSIGNED_OF.get(opcode, opcode)
    lo.env[op.results[0]] = lo.cmp(opcode, a, b)


@lowers("index.cast")
def _index_cast(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    src, dst = scalar(op.operand("value").type), scalar(op.result().type)
    if src in (INDEX, OFFSET) and dst in (INDEX, OFFSET):
        r = x
    elif dst in (INDEX, OFFSET):  # integer -> index (sign-extend) / offset (zero-extend)
        if src is I1:
            r = lo.select(x, lo.u32(1), lo.u32(0))
        elif src.bits == 32:
            r = x
        else:
            wider = src.bits < 32 and dst is INDEX
            r = lo.val(Op.SConvert if wider else Op.UConvert, lo.u32_t, x)
    else:  # index/offset -> integer: truncate, or extend by the source's signedness
        if dst is I1:
            r = lo.cmp(Op.INotEqual, lo.bin(Op.BitwiseAnd, x, lo.u32(1)), lo.u32(0))
        elif dst.bits == 32:
            r = x
        else:
            extend = dst.bits > 32 and src is INDEX
            r = lo.val(Op.SConvert if extend else Op.UConvert, lo.vtype(dst), x)
    lo.env[op.results[0]] = r


@lowers(*(f"scalar.{n}" for n in list(INT_BINARY) + list(INT_MINMAX)))
def _int_binary(lo: Lowerer, op: Operation) -> None:
    a, b = lo.operands(op)
    name = op.name[7:]
    if op.results[0].type is I1:
        if name in BOOL_BINARY:
            r = lo.cmp(BOOL_BINARY[name], a, b)
        elif name in ("divui", "shli", "shrsi", "shrui"):
            r = a
        else:  # divsi remsi remui: the only defined results are false
            r = lo.m.bool_const(False)
    elif name in INT_MINMAX:
        r = lo.select(lo.cmp(INT_MINMAX[name], a, b), a, b)
    else:
        r = lo.bin(INT_BINARY[name], a, b)
    lo.env[op.results[0]] = r


@lowers("scalar.addf", "scalar.subf", "scalar.mulf", "scalar.divf", "scalar.minimumf", "scalar.maximumf",
        "scalar.minnumf", "scalar.maxnumf")
def _float_binary(lo: Lowerer, op: Operation) -> None:
    a, b = lo.operands(op)
    t = scalar(op.results[0].type)
    lo.env[op.results[0]] = fm.binary(lo, op.name[7:], t, a, b, op.attr("flags", ()))


@lowers(*(f"scalar.{n}" for n in ("sqrtf", "negf", "rsqrtf", "absf", "floorf", "ceilf")))
def _float_unary(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    t = scalar(op.results[0].type)
    lo.env[op.results[0]] = fm.unary(lo, op.name[7:], t, x, op.attr_or("flags", ()))


@lowers("scalar.fmaf")
def _fma(lo: Lowerer, op: Operation) -> None:
    a, b, c = lo.operands(op)
    lo.env[op.results[0]] = fm.fma(lo, scalar(op.results[0].type), a, b, c)


@lowers("scalar.cmpf")
def _cmpf(lo: Lowerer, op: Operation) -> None:
    a, b = lo.operands(op)
    pred = op.attr("predicate")
    if pred in ("ord", "uno"):
        either = lo.lor(fm.isnan(lo, a), fm.isnan(lo, b))
        r = either if pred == "uno" else lo.logical_not(either)
    else:
        r = lo.cmp(CMPF[pred], a, b)
    lo.env[op.results[0]] = r


@lowers("scalar.cmpi")
def _cmpi(lo: Lowerer, op: Operation) -> None:
    a, b = lo.operands(op)
    pred = op.attr("predicate")
    if op.operand("lhs").type is I1:
        if pred in ("eq", "ne"):
            lo.env[op.results[0]] = lo.cmp(Op.LogicalEqual if pred == "eq" else Op.LogicalNotEqual, a, b)
            return
        true = lo.u32(0xFFFFFFFF if pred[0] == "s" else 1)
        a = lo.select(a, true, lo.u32(0))
        b = lo.select(b, true, lo.u32(0))
    lo.env[op.results[0]] = lo.cmp(INDEX_CMP_SIGNED[pred], a, b)


@lowers("scalar.sitofp", "scalar.uitofp")
def _itofp(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    src, dst = scalar(op.operand("value").type), scalar(op.result().type)
    ft = lo.vtype(dst)
    if src is I1:
        one = -1.0 if op.opdef is SCALAR_SITOFP else 1.0
        r = lo.select(x, lo.m.fconst(fm.cbits(dst), one), lo.m.fconst(fm.cbits(dst), 0.0))
    else:
        r = lo.val(Op.ConvertSToF if op.opdef is SCALAR_SITOFP else Op.ConvertUToF, ft, x)
    lo.env[op.results[0]] = r


@lowers("scalar.fptosi", "scalar.fptoui")
def _fptoi(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    src, dst = scalar(op.operand("value").type), scalar(op.result().type)
    if dst is I1:  # the only defined results: true is -1 (signed) or 1 (unsigned)
        bits = fm.cbits(src)
        if op.opdef is SCALAR_FPTOSI:
            r = lo.cmp(Op.FOrdLessThanEqual, x, lo.m.fconst(bits, -1.0))
        else:
            r = lo.cmp(Op.FOrdGreaterThanEqual, x, lo.m.fconst(bits, 1.0))
    else:
        r = lo.val(Op.ConvertFToS if op.opdef is SCALAR_FPTOSI else Op.ConvertFToU, lo.vtype(dst), x)
    lo.env[op.results[0]] = r


@lowers("scalar.extf")
def _extf(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    src, dst = scalar(op.operand("value").type), scalar(op.result().type)
    same = fm.cbits(src) == fm.cbits(dst)
    lo.env[op.results[0]] = x if same else lo.val(Op.FConvert, lo.vtype(dst), x)


@lowers("scalar.fptrunc")
def _fptrunc(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    src, dst = scalar(op.operand("value").type), scalar(op.result().type)
    if dst is BF16:
        if src.bits == 64:
            x = _f64_to_f32_odd(lo, x)
        r = fm.round_bf16(lo, x)
    else:
        r = lo.val(Op.FConvert, lo.vtype(dst), x)
    lo.env[op.results[0]] = r


def _f64_to_f32_odd(lo: Lowerer, x: int) -> int:
    """f64 -> f32 rounded to odd (toward zero, lowest bit set if inexact), so a
    second rounding to bf16 rounds as one rounding from f64 would."""
    f32 = lo.m.float(32)
    r = lo.val(Op.FConvert, f32, x)
    back = lo.val(Op.FConvert, lo.m.float(64), r)
    u = lo.bitcast(lo.u32_t, r)
    # |r| > |x|: step one ulp toward zero (the pattern's magnitude minus one).
    away = lo.cmp(Op.FOrdGreaterThan, lo.fw.ext(lo.typeof(back), GLSL.FAbs, back),
                  lo.fw.ext(lo.typeof(x), GLSL.FAbs, x))
    u = lo.select(away, lo.bin(Op.ISub, u, lo.u32(1)), u)
    inexact = lo.cmp(Op.FOrdNotEqual, back, x)
    u = lo.select(inexact, lo.bin(Op.BitwiseOr, u, lo.u32(1)), u)
    return lo.bitcast(f32, u)


@lowers("scalar.extsi", "scalar.extui", "scalar.trunci")
def _int_cast(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    src, dst = scalar(op.operand("value").type), scalar(op.result().type)
    if src is I1:
        ones = (1 << dst.bits) - 1 if op.opdef is SCALAR_EXTSI else 1
        lo.vtype(dst)
        r = lo.select(x, lo.m.uint(dst.bits, ones), lo.m.uint(dst.bits, 0))
    elif dst is I1:
        one = lo.m.uint(src.bits, 1)
        r = lo.cmp(Op.INotEqual, lo.bin(Op.BitwiseAnd, x, one), lo.m.uint(src.bits, 0))
    else:
        r = lo.val(Op.SConvert if op.opdef is SCALAR_EXTSI else Op.UConvert, lo.vtype(dst), x)
    lo.env[op.results[0]] = r


@lowers("scalar.bitcast")
def _bitcast(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    src, dst = scalar(op.operand("value").type), scalar(op.result().type)
    if src is BF16:
        r = lo.val(Op.UConvert, lo.uint_t(16), lo.ishr(lo.bitcast(lo.u32_t, x), 16))
        if is_float(dst):
            r = lo.bitcast(lo.vtype(dst), r)
    elif dst is BF16:
        bits16 = x if not is_float(src) else lo.bitcast(lo.uint_t(16), x)
        r = lo.bitcast(lo.m.float(32), lo.ishl(lo.val(Op.UConvert, lo.u32_t, bits16), 16))
    else:
        r = lo.bitcast(lo.vtype(dst), x)
    lo.env[op.results[0]] = r


@lowers("scf.select")
def _select(lo: Lowerer, op: Operation) -> None:
    c, a, b = lo.operands(op)
    r = op.results[0]
    t = r.type
    if tracked(t):
        roots = lo.roots_of(r)
        fa, fb = lo.flatten(t, a, roots), lo.flatten(t, b, roots)
        lo.env[r] = lo.unflatten(t, [lo.select(c, x, y) for x, y in zip(fa, fb)], roots)
    elif isinstance(a, tuple):
        lo.env[r] = tuple(lo.select(c, x, y) for x, y in zip(a, b))
    else:
        lo.env[r] = lo.select(c, a, b)


# ------------------------------------------------------------ scf


@lowers("scf.if")
def _if(lo: Lowerer, op: Operation) -> None:
    m, fw = lo.m, lo.fw
    cond = lo.get(op.operand("condition"))
    then_r, else_r = op.region("then"), op.region("else")
    has_else = bool(op.results) or not _trivial(else_r)
    then_l, merge = m.new_id(), m.new_id()
    else_l = m.new_id() if has_else else merge
    fw.op(Op.SelectionMerge, merge, 0)
    fw.op(Op.BranchConditional, cond, then_l, else_l)
    incoming = []
    fw.label(then_l)
    term = lo.block(then_r)
    incoming.append(([lo.env[v] for v in term.operands], fw.block))
    fw.op(Op.Branch, merge)
    if has_else:
        fw.label(else_l)
        term = lo.block(else_r)
        incoming.append(([lo.env[v] for v in term.operands], fw.block))
        fw.op(Op.Branch, merge)
    fw.label(merge)
    if op.results:
        lo.join(op.results, incoming)


@lowers("scf.for")
def _for(lo: Lowerer, op: Operation) -> None:
    m, fw = lo.m, lo.fw
    lower, upper, step = (lo.get(op.operand(name)) for name in ("lower", "upper", "step"))
    inits = [lo.get(v) for v in op.operand_group("inits")]
    body = op.region("body")
    iv, carried = body.args[0], body.args[1:]
    pre = fw.block
    header, body_l, cont, merge = m.new_id(), m.new_id(), m.new_id(), m.new_id()
    fw.op(Op.Branch, header)
    fw.label(header)
    iv_id, iv_phi = fw.phi(lo.u32_t)
    iv_phi.extend((lower, pre))
    lo.env[iv] = iv_id
    phis = lo.header_phis(carried, inits, pre)
    less = Op.ULessThan if iv.type is OFFSET else Op.SLessThan
    going = lo.cmp(less, iv_id, upper)
    fw.op(Op.LoopMerge, merge, cont, 0)
    fw.op(Op.BranchConditional, going, body_l, merge)
    fw.label(body_l)
    term = lo.block(body)
    yields = [lo.env[v] for v in term.operands]
    fw.op(Op.Branch, cont)
    fw.label(cont)
    nxt = lo.bin(Op.IAdd, iv_id, step)
    iv_phi.extend((nxt, cont))
    lo.close_phis(carried, phis, yields, cont)
    fw.op(Op.Branch, header)
    fw.label(merge)
    for r, a in zip(op.results, carried):
        lo.env[r] = lo.retarget(r, a)


@lowers("scf.while")
def _while(lo: Lowerer, op: Operation) -> None:
    m, fw = lo.m, lo.fw
    before, after = op.region("before"), op.region("after")
    inits = [lo.get(v) for v in op.operand_group("inits")]
    pre = fw.block
    header, before_l, do_l, cont, merge = (m.new_id() for _ in range(5))
    fw.op(Op.Branch, header)
    fw.label(header)
    phis = lo.header_phis(before.args, inits, pre)
    fw.op(Op.LoopMerge, merge, cont, 0)
    fw.op(Op.Branch, before_l)
    fw.label(before_l)
    cond_op = lo.block(before)
    go = lo.get(cond_op.operand("condition"))
    forwarded = cond_op.operand_group("values")
    fw.op(Op.BranchConditional, go, do_l, merge)
    fw.label(do_l)
    for a, v in zip(after.args, forwarded):
        lo.env[a] = lo.retarget(a, v)
    term = lo.block(after)
    yields = [lo.env[v] for v in term.operands]
    fw.op(Op.Branch, cont)
    fw.label(cont)
    lo.close_phis(before.args, phis, yields, cont)
    fw.op(Op.Branch, header)
    fw.label(merge)
    for r, v in zip(op.results, forwarded):
        lo.env[r] = lo.retarget(r, v)


# ------------------------------------------------------------ buffers and views


@lowers("buffer.alloca")
def _alloca(lo: Lowerer, op: Operation) -> None:
    lo.env[op.results[0]] = BufferValue(lo.roots_of(op.results[0]), None)


@lowers("buffer.view")
def _buffer_view(lo: Lowerer, op: Operation) -> None:
    buf, off = lo.operands(op)
    t = shaped(op.results[0].type)
    size = ELEMENT_BYTES[t.elem]
    base = lo.ishr(off, size.bit_length() - 1)
    strides: list[int] = []
    stride = lo.u32(1)
    for d in reversed(t.dims[1:]):
        stride = lo.imul(stride, lo.u32(d) if isinstance(d, int) else lo.get(d))
        strides.append(stride)
    strides.reverse()
    roots = lo.roots_of(op.results[0])
    sel = buf.sel if len(roots) > 1 else None
    lo.env[op.results[0]] = ViewValue(roots, sel, base, tuple(strides))


@lowers("view.subview")
def _subview(lo: Lowerer, op: Operation) -> None:
    view: ViewValue = lo.get(op.operand("view"))
    origin = lo.indices(op)
    lo.env[op.results[0]] = ViewValue(view.roots, view.sel, lo.element(view, origin), view.strides)


@lowers("buffer.pack")
def _pack(lo: Lowerer, op: Operation) -> None:
    sizes = lo.operands(op)
    aligns = op.attr("aligns")

    def align_up(x: int, a: int) -> int:
        if a == 1:
            return x
        k = lo._k(x)
        if k is not None:
            return lo.u32((k + a - 1) // a * a)
        return lo.bin(Op.BitwiseAnd, lo.iadd(x, lo.u32(a - 1)), lo.u32(~(a - 1)))

    offsets = [lo.u32(0)]
    for k in range(1, len(sizes)):
        offsets.append(align_up(lo.iadd(offsets[-1], sizes[k - 1]), aligns[k]))
    total = align_up(lo.iadd(offsets[-1], sizes[-1]), max(aligns))
    for r, v in zip(op.results, [total, *offsets]):
        lo.env[r] = v


@lowers("view.load")
def _view_load(lo: Lowerer, op: Operation) -> None:
    view: ViewValue = lo.get(op.operand("view"))
    elem = shaped(op.operand("view").type).elem
    e = lo.element(view, lo.indices(op))
    (r,) = lo.on_roots(view.roots, view.sel, lambda root: [lo.load(root, elem, e)])
    lo.env[op.results[0]] = r


@lowers("view.store")
def _view_store(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    view: ViewValue = lo.get(op.operand("view"))
    elem = shaped(op.operand("view").type).elem
    e = lo.element(view, lo.indices(op))

    def store(root: Root) -> list[int]:
        lo.store(root, elem, e, x)
        return []  # a store has no result

    lo.on_roots(view.roots, view.sel, store)


@lowers("view.atomic.rmw")
def _atomic(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    view: ViewValue = lo.get(op.operand("view"))
    elem = shaped(op.operand("view").type).elem
    e = lo.element(view, lo.indices(op))
    (r,) = lo.on_roots(view.roots, view.sel, lambda root: [lo.atomic(op, root, elem, e, x)])
    lo.env[op.results[0]] = r


# ------------------------------------------------------------ vectors (unrolled lanes)


@lowers("vector.constant")
def _vector_constant(lo: Lowerer, op: Operation) -> None:
    t = shaped(op.results[0].type)
    c = lo.const(t.elem, canonical(op.attr("value"), t.elem))
    lo.env[op.results[0]] = (c,) * lane_count(t)


@lowers("vector.splat")
def _splat(lo: Lowerer, op: Operation) -> None:
    t = shaped(op.results[0].type)
    lo.env[op.results[0]] = (lo.get(op.operand("value")),) * lane_count(t)


@lowers("vector.load")
def _vector_load(lo: Lowerer, op: Operation) -> None:
    view: ViewValue = lo.get(op.operand("view"))
    elem = shaped(op.operand("view").type).elem
    n = lane_count(op.results[0].type)
    e = lo.element(view, lo.indices(op))
    lanes = lo.on_roots(view.roots, view.sel,
                        lambda root: [lo.load(root, elem, lo.iadd(e, lo.u32(k))) for k in range(n)])
    lo.env[op.results[0]] = tuple(lanes)


@lowers("vector.store")
def _vector_store(lo: Lowerer, op: Operation) -> None:
    lanes = lo.get(op.operand("value"))
    view: ViewValue = lo.get(op.operand("view"))
    elem = shaped(op.operand("view").type).elem
    e = lo.element(view, lo.indices(op))

    def emit(root: Root) -> list[int]:
        for k, x in enumerate(lanes):
            lo.store(root, elem, lo.iadd(e, lo.u32(k)), x)
        return []

    lo.on_roots(view.roots, view.sel, emit)


@lowers("vector.extract")
def _extract(lo: Lowerer, op: Operation) -> None:
    lanes = lo.get(op.operand("vector"))
    k = op.attr("indices")[0]
    if k is not None:
        lo.env[op.results[0]] = lanes[k]
        return
    idx = lo.get(op.operand("indices"))
    r = lanes[0]
    for j in range(1, len(lanes)):
        r = lo.select(lo.cmp(Op.IEqual, idx, lo.u32(j)), lanes[j], r)
    lo.env[op.results[0]] = r


@lowers("vector.insert")
def _insert(lo: Lowerer, op: Operation) -> None:
    x = lo.get(op.operand("value"))
    lanes = lo.get(op.operand("vector"))
    k = op.attr("indices")[0]
    if k is not None:
        lo.env[op.results[0]] = lanes[:k] + (x,) + lanes[k + 1:]
        return
    idx = lo.get(op.operand("indices"))
    lo.env[op.results[0]] = tuple(lo.select(lo.cmp(Op.IEqual, idx, lo.u32(j)), x, lane)
                                  for j, lane in enumerate(lanes))


@lowers("vector.reduce")
def _vector_reduce(lo: Lowerer, op: Operation) -> None:
    lanes, acc = lo.operands(op)
    t = scalar(op.results[0].type)
    for lane in lanes:
        acc = fm.combine(lo, op.attr("kind"), t, acc, lane)
    lo.env[op.results[0]] = acc


@lowers("vector.fmaf", "vector.addf", "vector.mulf", "vector.addi", "vector.muli")
def _vector_arith(lo: Lowerer, op: Operation) -> None:
    args = lo.operands(op)
    t = shaped(op.results[0].type).elem
    name = op.name[7:]
    flags = op.attr_or("flags", ())
    out = []
    for lanes in zip(*args):
        if name == "fmaf":
            out.append(fm.fma(lo, t, *lanes))
        elif name in ("addf", "mulf"):
            out.append(fm.arith(lo, fm.FLOAT_BINARY[name], t, lanes[0], lanes[1], flags))
        elif t is I1:
            out.append(lo.cmp(BOOL_BINARY[name], lanes[0], lanes[1]))
        else:
            out.append(lo.bin(INT_BINARY[name], lanes[0], lanes[1]))
    lo.env[op.results[0]] = tuple(out)


# ------------------------------------------------------------ kernel ops


@lowers(*COORDINATES)
def _coordinate(lo: Lowerer, op: Operation) -> None:
    lo.env[op.results[0]] = lo.builtin(COORDINATES[op.name], AXIS[op.attr("kind")])


@lowers("kernel.workgroup.size")
def _workgroup_size(lo: Lowerer, op: Operation) -> None:
    assert lo.kernel is not None
    lo.env[op.results[0]] = lo.u32(lo.kernel.workgroup_size[AXIS[op.attr("kind")]])


@lowers("kernel.subgroup.size")
def _subgroup_size(lo: Lowerer, op: Operation) -> None:
    assert lo.kernel is not None
    fixed = lo.kernel.profile.subgroup_size
    if fixed:
        lo.env[op.results[0]] = lo.u32(fixed)
    else:
        lo.m.capability(Cap.GroupNonUniform)
        lo.env[op.results[0]] = lo.builtin(BuiltIn.SubgroupSize)


@lowers("kernel.subgroup.lane.id")
def _lane_id(lo: Lowerer, op: Operation) -> None:
    lo.m.capability(Cap.GroupNonUniform)
    lo.env[op.results[0]] = lo.builtin(BuiltIn.SubgroupLocalInvocationId)


@lowers("kernel.barrier")
def _barrier(lo: Lowerer, op: Operation) -> None:
    scope = Scope.Subgroup if op.attr("scope", None) == "subgroup" else Scope.Workgroup
    if op.attr("kind", None) == "global":
        sem = ORDERING_SEM[str(op.attr("ordering", "acq_rel"))] | Sem.UniformMemory
    else:
        sem = BARRIER_WG
    lo.barrier(scope, scope, sem)


@lowers("kernel.subgroup.reduce")
def _subgroup_reduce(lo: Lowerer, op: Operation) -> None:
    t = scalar(op.results[0].type)
    kind = op.attr("kind")
    wt, v = lo.promote(t, kind, lo.get(op.operand("value")))
    lo.env[op.results[0]] = lo.demote(t, wt, lo.subgroup_reduce(kind, wt, v))


# ------------------------------------------------------------ calls and leftovers


@lowers("func.call", "template.call")
def _call(lo: Lowerer, op: Operation) -> None:
    args = [lo.facts.roots.get(v) if tracked(v.type) else None for v in op.operands]
    spec = lo.em.function(lo.em.analysis.spec_key(op.attr("callee"), args), op)
    lo.fw.callees[spec.fw.id] = spec.fw
    flat: list[int] = []
    for v, roots in zip(op.operands, spec.param_roots):
        flat.extend(lo.flatten(v.type, lo.env[v], roots))
    r = lo.val(Op.FunctionCall, spec.fw.ret, spec.fw.id, *flat)
    comps = spec.result_components
    if len(comps) == 1:
        ids = [r]
    else:
        ids = [lo.val(Op.CompositeExtract, t, r, k) for k, t in enumerate(comps)]
    start = 0
    for res, roots in zip(op.results, spec.result_roots):
        n = len(lo.shape(res.type, roots))
        lo.env[res] = lo.retarget_ids(res, ids[start:start + n], roots)
        start += n


@lowers("config.get")
def _config_get(lo: Lowerer, op: Operation) -> None:
    raise lo.fail("CONFIG/003", op, k=op.attr("ref", "?"))


@lowers("target.subgroup.size")
def _target_subgroup_size(lo: Lowerer, op: Operation) -> None:
    fixed = lo.em.profile.subgroup_size
    if not fixed:
        raise lo.fail("TARGET/001", op, text="target.subgroup.size")
    lo.env[op.results[0]] = lo.u32(fixed)
