"""Typed instruction helpers over one SPIR-V function.

`Builder` wraps a `FunctionWriter`: it maps Loom scalar types to SPIR-V types
(recording the capabilities they need), folds 32-bit index arithmetic on
constants, and builds the structured control flow the emitter needs for its
own expansions (if/else, counted loops). Every control-flow helper leaves
the builder in the merge block, so callers just keep emitting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loomcli.emit.spirv.spec import Cap, Dec, Op
from loomcli.emit.spirv.writer import FunctionWriter, ModuleWriter
from loomcli.ir.types import BF16, F16, F32, F64, I1, I8, I16, I32, I64, INDEX, OFFSET, ScalarType

U32_MASK = 0xFFFFFFFF

# Storage element of a Loom element type: ("u" | "f", bits). i1 is a byte, bf16 its 16 bits.
NATURAL_STORAGE: dict[ScalarType, tuple[str, int]] = {
    I1: ("u", 8), I8: ("u", 8), I16: ("u", 16), BF16: ("u", 16), F16: ("f", 16),
    I32: ("u", 32), F32: ("f", 32), I64: ("u", 64), F64: ("f", 64),
}


class Builder:
    """Instruction helpers for the function being written (`self.fw`)."""

    def __init__(self, m: ModuleWriter, fw: FunctionWriter) -> None:
        self.m = m
        self.fw = fw

    # ------------------------------------------------------------ types

    def vtype(self, t: ScalarType) -> int:
        """The SPIR-V type holding a Loom scalar value (bf16 is carried in f32)."""
        m = self.m
        if t is I1:
            return m.bool()
        if t is INDEX or t is OFFSET:
            return m.int(32)
        if t.category == "int":
            if t.bits == 8:
                m.capability(Cap.Int8)
            elif t.bits == 16:
                m.capability(Cap.Int16)
            return m.int(t.bits)
        if t is BF16:
            return m.float(32)
        if t.bits == 16:
            m.capability(Cap.Float16)
        return m.float(t.bits)

    def uint_t(self, bits: int) -> int:
        """An unsigned integer type used for computation (not storage only)."""
        if bits == 8:
            self.m.capability(Cap.Int8)
        elif bits == 16:
            self.m.capability(Cap.Int16)
        return self.m.int(bits)

    @property
    def u32_t(self) -> int:
        return self.m.int(32)

    @property
    def bool_t(self) -> int:
        return self.m.bool()

    def u32(self, v: int) -> int:
        return self.m.u32(v)

    def const(self, t: ScalarType, v: object) -> int:
        """A constant of a Loom scalar type from its canonical value (fold.py)."""
        m = self.m
        if t is I1:
            return m.bool_const(bool(v))
        if t is INDEX or t is OFFSET:
            return m.u32(int(v))  # type: ignore[call-overload]
        if t.category == "int":
            self.vtype(t)
            return m.uint(t.bits, int(v))  # type: ignore[call-overload]
        if t is BF16:
            return m.fconst(32, float(v))  # type: ignore[arg-type]
        self.vtype(t)
        return m.fconst(t.bits, float(v))  # type: ignore[arg-type]

    def typeof(self, v: int) -> int:
        return self.m.type_of[v]

    def cval(self, v: int) -> object | None:
        return self.m.value_of(v)

    # ------------------------------------------------------------ plain instructions

    def val(self, opcode: int, rtype: int, *operands: int) -> int:
        return self.fw.val(opcode, rtype, *operands)

    def bin(self, opcode: int, a: int, b: int) -> int:
        return self.fw.val(opcode, self.typeof(a), a, b)

    def cmp(self, opcode: int, a: int, b: int) -> int:
        return self.fw.val(opcode, self.m.bool(), a, b)

    def select(self, c: int, a: int, b: int) -> int:
        if a == b:
            return a
        cv = self.cval(c)
        if isinstance(cv, bool):
            return a if cv else b
        return self.fw.val(Op.Select, self.typeof(a), c, a, b)

    def bitcast(self, rtype: int, a: int) -> int:
        return self.fw.val(Op.Bitcast, rtype, a)

    def ext(self, inst: int, *args: int) -> int:
        return self.fw.ext(self.typeof(args[0]), inst, *args)

    def nocontract(self, v: int) -> int:
        self.m.decorate(v, Dec.NoContraction)
        return v

    def logical_not(self, a: int) -> int:
        return self.fw.val(Op.LogicalNot, self.m.bool(), a)

    def land(self, a: int, b: int) -> int:
        return self.fw.val(Op.LogicalAnd, self.m.bool(), a, b)

    def lor(self, a: int, b: int) -> int:
        return self.fw.val(Op.LogicalOr, self.m.bool(), a, b)

    # ------------------------------------------------------------ 32-bit index arithmetic with folding

    def _k(self, v: int) -> int | None:
        c = self.m.value_of(v)
        if isinstance(c, int) and not isinstance(c, bool) and self.m.type_of.get(v) == self.m.int(32):
            return c
        return None

    def iadd(self, a: int, b: int) -> int:
        ka, kb = self._k(a), self._k(b)
        if ka is not None and kb is not None:
            return self.u32(ka + kb)
        if ka == 0:
            return b
        if kb == 0:
            return a
        return self.fw.val(Op.IAdd, self.u32_t, a, b)

    def isub(self, a: int, b: int) -> int:
        ka, kb = self._k(a), self._k(b)
        if ka is not None and kb is not None:
            return self.u32(ka - kb)
        if kb == 0:
            return a
        return self.fw.val(Op.ISub, self.u32_t, a, b)

    def imul(self, a: int, b: int) -> int:
        ka, kb = self._k(a), self._k(b)
        if ka is not None and kb is not None:
            return self.u32(ka * kb)
        if ka == 0 or kb == 0:
            return self.u32(0)
        if ka == 1:
            return b
        if kb == 1:
            return a
        return self.fw.val(Op.IMul, self.u32_t, a, b)

    def ishl(self, a: int, bits: int) -> int:
        if bits == 0:
            return a
        ka = self._k(a)
        if ka is not None:
            return self.u32(ka << bits)
        return self.fw.val(Op.ShiftLeftLogical, self.u32_t, a, self.u32(bits))

    def ishr(self, a: int, bits: int) -> int:
        if bits == 0:
            return a
        ka = self._k(a)
        if ka is not None:
            return self.u32(ka >> bits)
        return self.fw.val(Op.ShiftRightLogical, self.u32_t, a, self.u32(bits))

    # ------------------------------------------------------------ structured control flow

    def if_then(self, cond: int, then: Callable[[], None]) -> None:
        """`if (cond) then()`: a selection construct without results."""
        fw = self.fw
        m = self.m
        then_l, merge = m.new_id(), m.new_id()
        fw.op(Op.SelectionMerge, merge, 0)
        fw.op(Op.BranchConditional, cond, then_l, merge)
        fw.label(then_l)
        then()
        fw.op(Op.Branch, merge)
        fw.label(merge)

    def if_else(self, cond: int, then: Callable[[], Sequence[int]], other: Callable[[], Sequence[int]]) -> list[int]:
        """`cond ? then() : other()` as a selection construct; returns phis of the results."""
        fw = self.fw
        m = self.m
        then_l, else_l, merge = m.new_id(), m.new_id(), m.new_id()
        fw.op(Op.SelectionMerge, merge, 0)
        fw.op(Op.BranchConditional, cond, then_l, else_l)
        fw.label(then_l)
        a = list(then())
        a_end = fw.block
        fw.op(Op.Branch, merge)
        fw.label(else_l)
        b = list(other())
        b_end = fw.block
        fw.op(Op.Branch, merge)
        fw.label(merge)
        return self.merge_phis([(a, a_end), (b, b_end)])

    def merge_phis(self, incoming: Sequence[tuple[Sequence[int], int]]) -> list[int]:
        """Phis joining parallel value lists from (values, predecessor block) pairs."""
        out = []
        for k, first in enumerate(incoming[0][0]):
            vals = [vals[k] for vals, _ in incoming]
            if all(v == first for v in vals):
                out.append(first)
                continue
            p, inst = self.fw.phi(self.typeof(first))
            for v, (_, block) in zip(vals, incoming):
                inst.extend((v, block))
            out.append(p)
        return out

    def loop(self, inits: Sequence[int], cond: Callable[[list[int]], int],
             body: Callable[[list[int]], Sequence[int]]) -> list[int]:
        """`while cond(vals): vals = body(vals)`; returns the final values.

        Header: phis, the condition, OpLoopMerge, a conditional branch to the
        body or the merge block; the body branches to a continue block that
        branches back."""
        fw = self.fw
        m = self.m
        pre = fw.block
        header, body_l, cont, merge = m.new_id(), m.new_id(), m.new_id(), m.new_id()
        fw.op(Op.Branch, header)
        fw.label(header)
        phis = []
        insts = []
        for v in inits:
            p, inst = fw.phi(self.typeof(v))
            inst.extend((v, pre))
            phis.append(p)
            insts.append(inst)
        c = cond(phis)
        fw.op(Op.LoopMerge, merge, cont, 0)
        fw.op(Op.BranchConditional, c, body_l, merge)
        fw.label(body_l)
        nxt = list(body(phis))
        fw.op(Op.Branch, cont)
        fw.label(cont)
        fw.op(Op.Branch, header)
        for inst, v in zip(insts, nxt):
            inst.extend((v, cont))
        fw.label(merge)
        return phis
