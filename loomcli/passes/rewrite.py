"""The one way passes change IR: a `Rewriter` and a worklist pattern driver.

Every mutation goes through `Rewriter`, which keeps use lists right, keeps
types and predicates that name a replaced value pointing at its
replacement (a dim `[%n]` or `index.assume` subject is not a use), and tells
a listener what changed. `apply_patterns` is the greedy driver in the
manner of MLIR's and xDSL's: a table maps op names to pattern functions;
ops are visited from a worklist seeded in program order, and an op that
changes requeues the ops it affects, until nothing matches or
`max_iterations` sweeps are done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from loomcli.ir.builder import Namer, create, isolated_region, refs_of, remap_refs, top_level_op
from loomcli.ir.clone import clone_op
from loomcli.ir.core import Module, Operation, OpResult, Region, Value
from loomcli.ir.ops import PURE, TERMINATOR
from loomcli.ir.types import INDEX, OFFSET, Type
from loomcli.semantics.fold import to_literal

Pattern = Callable[[Operation, "Rewriter"], bool]
PatternTable = Mapping[str, Sequence[Pattern]]

class RewriteListener:
    """Told about every change a `Rewriter` makes."""

    def inserted(self, op: Operation) -> None:
        """`op` was inserted or moved (called for nested ops too)."""

    def modified(self, op: Operation) -> None:
        """An operand, type or predicate of `op` changed."""

    def erased(self, op: Operation) -> None:
        """`op` is about to be erased (called for nested ops too, outermost first)."""


class Rewriter:
    """Mutations of one module that keep its invariants."""

    def __init__(self, module: Module, listener: RewriteListener | None = None) -> None:
        self.module = module
        self.listener = listener or RewriteListener()
        # How often each value is named by a type or predicate (never by an operand).
        self._named: dict[Value, int] = {}
        for op in module.walk():
            self._count(op, 1)
        self._namers: dict[Region | None, Namer] = {}

    # ------------------------------------------------------------ names

    def namer(self, where: Operation | Region) -> Namer:
        """The name allocator of the isolated region holding `where` (one per region, kept)."""
        region = isolated_region(where)
        namer = self._namers.get(region)
        if namer is None:
            namer = self._namers[region] = Namer(region)
        return namer

    def fresh_name(self, where: Operation | Region, base: str) -> str:
        return self.namer(where).fresh(base)

    # ------------------------------------------------------------ queries

    def _count(self, op: Operation, delta: int) -> None:
        named = self._named
        for v in refs_of(op):
            named[v] = named.get(v, 0) + delta

    def named_by_types(self, v: Value) -> bool:
        return self._named.get(v, 0) > 0

    def is_used(self, v: Value) -> bool:
        return bool(v.uses) or self.named_by_types(v)

    def is_trivially_dead(self, op: Operation) -> bool:
        """A pure op without regions whose results nothing uses or names."""
        return (op.opdef.has(PURE) and not op.regions and not op.opdef.has(TERMINATOR)
                and not any(self.is_used(r) for r in op.results))

    # ------------------------------------------------------------ insertion

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        region = anchor.parent
        assert region is not None, "anchor is detached"
        region.ops.insert(region.ops.index(anchor), op)
        op.parent = region
        self._inserted(op)
        return op

    def insert_at_end(self, region: Region, op: Operation) -> Operation:
        region.append(op)
        self._inserted(op)
        return op

    def _inserted(self, op: Operation) -> None:
        for inner in op.walk():
            self._count(inner, 1)
            self.listener.inserted(inner)

    def create_before(self, anchor: Operation, name: str, operands: Sequence[Value] = (),
                      result_types: Sequence[Type] = (), attrs: Mapping[str, Any] | None = None,
                      names: Sequence[str] = ()) -> Operation:
        return self.insert_before(anchor, create(name, operands, result_types, attrs, names, anchor.loc))

    def constant_before(self, anchor: Operation, value: Any, t: Type, name: str) -> OpResult:
        """Materialize a constant of type `t` (canonical value, see fold.py) before `anchor`."""
        opname = "index.constant" if t is INDEX or t is OFFSET else "scalar.constant"
        op = self.create_before(anchor, opname, (), (t,), {"value": to_literal(value, t)}, (name,))
        return op.result()

    # ------------------------------------------------------------ changing uses

    def set_operand(self, op: Operation, i: int, v: Value) -> None:
        old = op.operands[i]
        if old is v:
            return
        old.uses.remove((op, i))
        op.operands[i] = v
        v.uses.append((op, i))
        self.listener.modified(op)

    def replace_value(self, old: Value, new: Value) -> None:
        """Every use of `old`, and every type or predicate naming it, now means `new`."""
        if old is new:
            return
        users = [op for op, _ in old.uses]
        old.replace_all_uses_with(new)
        for op in users:
            self.listener.modified(op)
        if self.named_by_types(old):
            root = top_level_op(old)
            scope: Iterable[Operation] = root.walk() if root is not None else self.module.walk()
            mapping = {old: new}
            for op in list(scope):
                if any(v is old for v in refs_of(op)):
                    self._count(op, -1)
                    remap_refs(op, mapping)
                    self._count(op, 1)
                    self.listener.modified(op)

    def replace_op(self, op: Operation, values: Sequence[Value]) -> None:
        """Replace the results of `op` by `values`, then erase it."""
        assert len(values) == len(op.results), (op.name, len(values))
        for r, v in zip(op.results, values):
            self.replace_value(r, v)
        self.erase_op(op)

    # ------------------------------------------------------------ erasing and moving

    def erase_op(self, op: Operation) -> None:
        """Detach `op` (and what it nests); its results must be unused."""
        for r in op.results:
            if r.uses:
                raise RuntimeError(f"erasing {op.name} while %{r.name} still has uses")
        inner_ops = list(op.walk())
        for inner in inner_ops:
            self.listener.erased(inner)
        for inner in reversed(inner_ops):
            inner.drop_operand_uses()
            self._count(inner, -1)
        region = op.parent
        if region is not None:
            region.ops.remove(op)
        op.parent = None

    def carry_comments(self, op: Operation, to: Operation | None = None) -> None:
        """Move the comments of `op`, which is going away, to `to` (by default
        the op after it)."""
        if op.comments and to is not None:
            to.comments[:0] = op.comments
            op.comments = []
        elif op.comments and op.parent is not None:
            ops = op.parent.ops
            at = ops.index(op)
            if at + 1 < len(ops):
                ops[at + 1].comments[:0] = op.comments
                op.comments = []

    def move_before(self, op: Operation, anchor: Operation) -> None:
        if op.parent is not None:
            op.parent.ops.remove(op)
        region = anchor.parent
        assert region is not None
        region.ops.insert(region.ops.index(anchor), op)
        op.parent = region
        for inner in op.walk():
            self.listener.inserted(inner)

    def replace_op_with_new_values(self, op: Operation, values: Sequence[Value],
                                   new_ops: Iterable[Operation]) -> None:
        """`replace_op` where `new_ops` were just moved or copied in front of
        `op`: a value one of them defines takes the name of the result it
        replaces, so `%r = scf.if %true {...}` still leaves a `%r`."""
        fresh = set(new_ops)
        renamed: set[Value] = set()
        for r, v in zip(op.results, values):
            if r.name and v not in renamed and getattr(v, "op", None) in fresh:
                renamed.add(v)
                v.name = r.name
        self.replace_op(op, values)

    def inline_region_before(self, region: Region, anchor: Operation, args: Sequence[Value]) -> list[Value]:
        """Move the ops of `region` before `anchor`, its arguments replaced by
        `args`; erases its terminator and returns the terminator's operands."""
        for a, v in zip(region.args, args):
            self.replace_value(a, v)
        term = region.ops[-1]
        results = list(term.operands)
        self.erase_op(term)
        ops = list(region.ops)
        region.ops.clear()
        dest = anchor.parent
        assert dest is not None
        at = dest.ops.index(anchor)
        dest.ops[at:at] = ops
        for op in ops:
            op.parent = dest
            for inner in op.walk():
                self.listener.inserted(inner)
        return results

    def clone_region_before(self, region: Region, anchor: Operation, mapping: dict[Value, Value],
                            namer: Namer | None = None, comments: bool = False) -> list[Value]:
        """Copy the ops of `region` but its terminator before `anchor`
        (`mapping` must bind the region's arguments; names come from `namer`,
        by default the anchor's); returns the copied terminator's operands."""
        namer = namer or self.namer(anchor)
        for op in region.ops[:-1]:
            self.insert_before(anchor, clone_op(op, mapping, namer, comments))
        return [mapping.get(v, v) for v in region.ops[-1].operands]


# ---------------------------------------------------------------- the greedy driver


class _Worklist(RewriteListener):
    def __init__(self) -> None:
        self.stack: list[Operation] = []
        self.queued: set[Operation] = set()
        self.erased_ops: set[Operation] = set()

    def push(self, op: Operation) -> None:
        if op not in self.queued and op not in self.erased_ops:
            self.queued.add(op)
            self.stack.append(op)

    def pop(self) -> Operation | None:
        while self.stack:
            op = self.stack.pop()
            self.queued.discard(op)
            if op not in self.erased_ops:
                return op
        return None

    def inserted(self, op: Operation) -> None:
        self.erased_ops.discard(op)
        self.push(op)

    def modified(self, op: Operation) -> None:
        self.push(op)

    def erased(self, op: Operation) -> None:
        self.erased_ops.add(op)
        for v in op.operands:  # an operand's definition may be dead now
            owner = getattr(v, "op", None)
            if owner is not None:
                self.push(owner)


def apply_patterns(module: Module, table: PatternTable, *, max_iterations: int = 10, erase_dead: bool = True,
                   max_rewrites: int = 1_000_000, every_op: Sequence[Pattern] = ()) -> bool:
    """Apply `table` (op name -> patterns; `every_op`: patterns tried on every
    op after its own) until a fixed point or `max_iterations` sweeps. With `erase_dead`,
    trivially dead pure ops are erased on the way. Returns whether anything
    changed. Deterministic: the worklist is seeded in program order and
    every change requeues in a fixed order."""
    worklist = _Worklist()
    rewriter = Rewriter(module, worklist)
    generic = tuple(every_op)
    changed_any = False
    for _ in range(max(1, max_iterations)):
        for op in reversed(list(module.walk())):
            worklist.push(op)
        changed = False
        rewrites = 0
        while rewrites < max_rewrites:
            current = worklist.pop()
            if current is None:
                break
            if current.parent is None:
                continue
            if erase_dead and rewriter.is_trivially_dead(current):
                rewriter.carry_comments(current)
                rewriter.erase_op(current)
                changed = True
                rewrites += 1
                continue
            for pattern in (*table.get(current.opdef.name, ()), *generic):
                if pattern(current, rewriter):
                    changed = True
                    rewrites += 1
                    break
        worklist.stack.clear()
        worklist.queued.clear()
        changed_any |= changed
        if not changed:
            break
    return changed_any


__all__ = ["Pattern", "PatternTable", "RewriteListener", "Rewriter", "apply_patterns"]
