"""`expand-collectives`: workgroup reductions as Loom IR (LANGUAGE.md 7.6, 8, 17.28).

Every `%r = kernel.workgroup.reduce<kind> %v : T` of a kernel body becomes

* `kernel.subgroup.reduce<kind> %v` (each back end selects it natively);
* the subgroup's slot index, linear id / `kernel.subgroup.size` (subgroups
  are consecutive runs of linear ids, the last may be short), and lane 0 of
  each subgroup (`kernel.subgroup.lane.id`) storing the partial in its slot;
* a workgroup barrier; every invocation folds slots 0 .. ceil(flat workgroup
  size / subgroup size) - 1 in order with an `scf.for` whose bounds are
  uniform (so the verifier's convergence rules hold for what it nests);
* a second barrier, so the next site may reuse the slots.

The slots live in one `buffer.alloca<workgroup> align(8)` per kernel that
all its sites share, of the size `targets.abi.reduction_scratch` documents
(one 8-byte slot per subgroup of the largest workgroup the kernel may run
with). It is the last workgroup alloca of the body in walk order, so the
alloca walk of the expanded kernel gives the `workgroup_storage_bytes` the
contract reports for the unexpanded one; workgroup allocas that came after
the first site are moved before it (with fresh constant sizes) so that the
scratch dominates every site.

A slot holds the partial in its own type, 8 / size(T) elements per slot;
integers narrower than 32 bits (i1 among them) are kept zero-extended to
i32, an exact round trip that needs no 8- or 16-bit memory access.

The folded result is uniform in fact (every invocation reads the same slots
between the two barriers) but not by the verifier's conservative rule
(LANGUAGE.md 8 lists `workgroup.reduce` results, not loads), so a kernel
that nests a barrier under a condition or loop bound computed from a
reduction expands into IR that STRUCTURE/005 would reject. The pass is
therefore a legalization (`ModulePass.legalizes`): what follows it is
checked without that source-level rule, by `--verify-each` and `loom opt`
alike; its output is for instruction selectors and inspection, not a
source program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.builder import Namer, create, legalize_names
from loomcli.ir.core import BlockArgument, Module, Operation, Region, Value
from loomcli.ir.ops import BUFFER_ALLOCA, KERNEL_DEF
from loomcli.ir.types import BUFFER, ELEMENT_BYTES, I1, I32, INDEX, OFFSET, ScalarType, ShapedType, Type
from loomcli.passes.registry import ModulePass, PassContext
from loomcli.passes.rewrite import Rewriter
from loomcli.semantics.fold import constant_of
from loomcli.targets.abi import REDUCTION_SLOT_BYTES, reduction_scratch
from loomcli.targets.profiles import REFERENCE, Profile

SITE = "kernel.workgroup.reduce"


def _is_site(op: Operation) -> bool:
    return op.opdef.name == SITE


def _is_workgroup_alloca(op: Operation) -> bool:
    return op.opdef is BUFFER_ALLOCA and op.attr("kind") == "workgroup"


def slot_type(t: ScalarType) -> ScalarType:
    """What a slot stores for a partial of type `t`."""
    return I32 if t.category == "int" and t.bits < 32 else t


class _Builder:
    """Creates ops before one anchor, each result with a fresh name."""

    def __init__(self, rw: Rewriter, namer: Namer, anchor: Operation) -> None:
        self.rw, self.namer, self.anchor = rw, namer, anchor

    def op(self, name: str, operands: Sequence[Value] = (), result: Type | None = None,
           attrs: dict[str, Any] | None = None, stem: str = "") -> Operation:
        names = (self.namer.fresh(stem),) if result is not None else ()
        types = (result,) if result is not None else ()
        return self.rw.create_before(self.anchor, name, operands, types, attrs, names)

    def value(self, name: str, operands: Sequence[Value], result: Type, stem: str,
              attrs: dict[str, Any] | None = None) -> Value:
        return self.op(name, operands, result, attrs, stem).result()

    def index(self, value: int, stem: str, t: Type = INDEX) -> Value:
        return self.value("index.constant", (), t, stem, {"value": value})


def _view_type(elem: ScalarType, n: int) -> ShapedType:
    return ShapedType("view", (n,), elem)


class KernelExpansion:
    """The expansion of every reduction site of one kernel."""

    def __init__(self, kernel: Operation, profile: Profile, rw: Rewriter) -> None:
        self.kernel = kernel
        self.body: Region = kernel.region("body")
        self.profile = profile
        self.rw = rw
        self.namer = rw.namer(self.body)
        self.slots = 0                   # 8-byte slots of the scratch (set by `run`)
        self.scratch: Value | None = None

    def run(self, path: str) -> int:
        sites = [op for op in self.body.walk_ops() if _is_site(op)]
        if not sites:
            return 0
        for op in self.body.ops:
            if _is_workgroup_alloca(op):
                nbytes = constant_of(op.operand("bytes"))
                if not isinstance(nbytes, int) or isinstance(nbytes, bool):  # the walk needs every size
                    raise CompileError([Diagnostic.make("STRUCTURE/008", path, op.loc)])
        _, scratch_bytes = reduction_scratch(self.kernel, self.profile.subgroup_size,
                                             self.profile.max_flat_workgroup_size)
        self.slots = scratch_bytes // REDUCTION_SLOT_BYTES
        self.scratch = self._scratch_alloca(scratch_bytes)
        for site in sites:
            self._expand(site)
        return len(sites)

    # ------------------------------------------------------------ the scratch

    def _first_site_at_top(self) -> int:
        """Position of the top-level op of the body that holds the first site."""
        for at, op in enumerate(self.body.ops):
            if any(_is_site(inner) for inner in op.walk()):
                return at
        raise AssertionError("no reduction site")

    def _scratch_alloca(self, nbytes: int) -> Value:
        """The shared scratch, after the body's own workgroup allocas and before the first site."""
        ops = self.body.ops
        first = ops[self._first_site_at_top()]
        workgroup = [op for op in ops if _is_workgroup_alloca(op)]
        for alloca in workgroup:
            if ops.index(alloca) > ops.index(first):
                self._move_before(alloca, first)
        anchor = ops[ops.index(workgroup[-1]) + 1] if workgroup else first
        b = _Builder(self.rw, self.namer, anchor)
        size = b.index(nbytes, "reduce_bytes", OFFSET)
        return b.value("buffer.alloca", (size,), BUFFER, "reduce_scratch",
                       {"kind": "workgroup", "align": REDUCTION_SLOT_BYTES})

    def _move_before(self, alloca: Operation, anchor: Operation) -> None:
        """Move a workgroup alloca before `anchor`; its size, a constant (17.28),
        is materialized again there since its definition may come later."""
        nbytes = constant_of(alloca.operand("bytes"))
        self.rw.move_before(alloca, anchor)
        size = _Builder(self.rw, self.namer, alloca).index(nbytes, alloca.operand("bytes").name or "bytes", OFFSET)
        self.rw.set_operand(alloca, 0, size)

    # ------------------------------------------------------------ one site

    def _expand(self, site: Operation) -> None:
        b = _Builder(self.rw, self.namer, site)
        kind: str = site.attr("kind")
        t = site.result().type
        assert isinstance(t, ScalarType)
        stored = slot_type(t)
        per = REDUCTION_SLOT_BYTES // ELEMENT_BYTES[stored]
        stem = site.result().name or "reduce"

        partial = b.value("kernel.subgroup.reduce", (site.operand("value"),), t, f"{stem}_partial", {"kind": kind})
        zero = b.index(0, "scratch_at", OFFSET)
        assert self.scratch is not None
        slots = b.value("buffer.view", (self.scratch, zero), _view_type(stored, self.slots * per),
                        f"{stem}_slots", {"indices": (None,)})
        sizes = [b.value("kernel.workgroup.size", (), INDEX, f"size_{d}", {"kind": d}) for d in "xyz"]
        ids = [b.value("kernel.workitem.id", (), INDEX, f"id_{d}", {"kind": d}) for d in "xyz"]
        # linear id = x + size_x * (y + size_y * z) (LANGUAGE.md 8)
        yz = b.value("index.madd", (sizes[1], ids[2], ids[1]), INDEX, "yz")
        linear = b.value("index.madd", (sizes[0], yz, ids[0]), INDEX, "linear")
        sg_size = b.value("kernel.subgroup.size", (), INDEX, "sg_size")
        subgroup = b.value("index.div", (linear, sg_size), INDEX, "subgroup")
        lane = b.value("kernel.subgroup.lane.id", (), INDEX, "lane")
        lane_0 = b.index(0, "lane_0")
        leader = b.value("index.cmp", (lane, lane_0), I1, "leader", {"predicate": "eq"})

        # Lane 0 of each subgroup stores the partial in the subgroup's slot.
        store_if = b.op("scf.if", (leader,), None, {"else": False})
        then = store_if.region("then")
        then_end = self.rw.insert_at_end(then, _detached("scf.yield"))
        self.rw.insert_at_end(store_if.region("else"), _detached("scf.yield"))
        tb = _Builder(self.rw, self.namer, then_end)
        word = _widen(tb, partial, t, stored, stem)
        at = self._slot_element(tb, subgroup, per, stem)
        tb.op("view.store", (word, slots, at), None, {"indices": (None,)})
        _barrier(b)

        # Every invocation folds the slots in order.
        flat_xy = b.value("index.mul", (sizes[0], sizes[1]), INDEX, "flat_xy")
        flat = b.value("index.mul", (flat_xy, sizes[2]), INDEX, "flat")
        one = b.index(1, "c1")
        less = b.value("index.sub", (sg_size, one), INDEX, "sg_less")
        rounded = b.value("index.add", (flat, less), INDEX, "flat_up")
        count = b.value("index.div", (rounded, sg_size), INDEX, f"{stem}_count")
        slot_0 = b.index(0, "slot_0")
        first_word = b.value("view.load", (slots, slot_0), stored, f"{stem}_word",
                             {"indices": (None,)})
        first = _narrow(b, first_word, stored, t, f"{stem}_first")
        loop = b.op("scf.for", (one, count, one, first), t, {}, f"{stem}_sum")
        body = loop.region("body")
        iv = self._region_arg(body, INDEX, "j")
        acc = self._region_arg(body, t, "acc")
        yield_op = self.rw.insert_at_end(body, _detached("scf.yield"))
        lb = _Builder(self.rw, self.namer, yield_op)
        at = self._slot_element(lb, iv, per, stem)
        w = lb.value("view.load", (slots, at), stored, f"{stem}_word", {"indices": (None,)})
        part = _narrow(lb, w, stored, t, f"{stem}_part")
        yield_op.add_operand(lb.value(f"scalar.{kind}", (acc, part), t, f"{stem}_acc"))
        _barrier(b)
        self.rw.replace_op_with_new_values(site, loop.results, [loop])

    def _slot_element(self, b: _Builder, slot: Value, per: int, stem: str) -> Value:
        if per == 1:
            return slot
        return b.value("index.mul", (slot, b.index(per, f"per_{per}")), INDEX, f"{stem}_at")

    def _region_arg(self, region: Region, t: Type, stem: str) -> Value:
        arg = BlockArgument(self.namer.fresh(stem), t, region, len(region.args))
        region.args.append(arg)
        return arg


def _detached(name: str) -> Operation:
    return create(name)


def _barrier(b: _Builder) -> None:
    b.op("kernel.barrier", (), None, {"kind": "workgroup", "scope": "workgroup", "ordering": "acq_rel"})


def _widen(b: _Builder, v: Value, t: ScalarType, stored: ScalarType, stem: str) -> Value:
    if stored is t:
        return v
    return b.value("scalar.extui", (v,), stored, f"{stem}_wide")


def _narrow(b: _Builder, v: Value, stored: ScalarType, t: ScalarType, stem: str) -> Value:
    if stored is t:
        return v
    return b.value("scalar.trunci", (v,), t, stem)


def expand_collectives(module: Module, target: Profile | None) -> int:
    """Expand every workgroup reduction of `module`'s kernels for `target`
    (a pinned kernel: its record's profile; no target: the reference
    profile). Returns how many sites were expanded."""
    from loomcli.targets.checks import profile_for

    rw = Rewriter(module)
    expanded = 0
    for kernel in [op for op in module.ops if op.opdef is KERNEL_DEF]:
        if not any(_is_site(op) for op in kernel.region("body").walk_ops()):
            continue
        profile = profile_for(module, kernel, target) or REFERENCE
        expanded += KernelExpansion(kernel, profile, rw).run(module.path)
    if expanded:
        legalize_names(module)
    return expanded


@dataclass(frozen=True)
class ExpandCollectives(ModulePass):
    name = "expand-collectives"
    legalizes = True
    summary = ("Expand kernel.workgroup.reduce into a subgroup reduce, one workgroup scratch slot per subgroup, "
               "barriers and an in-order fold.")

    def removes(self, target: Profile | None) -> frozenset[str]:
        return frozenset({SITE})

    def applies(self, module: Module, ctx: PassContext) -> bool:
        return any(_is_site(op) for kernel in module.ops if kernel.opdef is KERNEL_DEF
                   for op in kernel.region("body").walk_ops())

    def run(self, module: Module, ctx: PassContext) -> None:
        expand_collectives(module, ctx.target)


__all__ = ["ExpandCollectives", "expand_collectives", "slot_type"]
