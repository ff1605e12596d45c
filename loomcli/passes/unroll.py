"""`unroll`: fully unroll `scf.for` loops with constant bounds and a small trip count.

A loop `[lo to hi step s]` with constant lo, hi and s > 0 runs
ceil((hi - lo) / s) times; when that is at most `max-trip-count` and the
copies add at most `max-ops` ops, its body is copied once per iteration
(the IV a constant, carried values threaded through) and the last yields
replace its results. Inner loops are unrolled first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loomcli.ir.builder import legalize_names
from loomcli.ir.core import Module, Operation, Value
from loomcli.ir.ops import SCF_FOR
from loomcli.passes.canonicalize import constant_fits_uses
from loomcli.passes.registry import ModulePass, PassContext, option
from loomcli.passes.rewrite import Rewriter
from loomcli.semantics.fold import NOT_CONSTANT, constant_of


def trip_count(loop: Operation) -> int | None:
    """How often `loop` runs, when its bounds and step are constant (step > 0)."""
    lo, hi, step = (constant_of(loop.operand(name)) for name in ("lower", "upper", "step"))
    if NOT_CONSTANT in (lo, hi, step) or step <= 0:
        return None
    return max(0, -(-(hi - lo) // step))


def _body_size(loop: Operation) -> int:
    return sum(1 for op in loop.region("body").ops for _ in op.walk())


def _constants_fit(loop: Operation, trip: int) -> bool:
    """Every constant the copies substitute (IVs, constant carried values,
    constant results) suits its uses, so the unrolled loop still verifies."""
    body = loop.region("body")
    iv, carried_args = body.args[0], body.args[1:]
    lo, step = constant_of(loop.operand("lower")), constant_of(loop.operand("step"))
    carried: list[Any] = [constant_of(v) for v in loop.operand_group("inits")]
    yields = body.ops[-1].operands
    for k in range(trip):
        iv_value = lo + k * step
        if not constant_fits_uses(iv, iv_value):
            return False
        for arg, c in zip(carried_args, carried):
            if c is not NOT_CONSTANT and not constant_fits_uses(arg, c):
                return False
        env = {iv: iv_value, **dict(zip(carried_args, carried))}
        carried = [env[v] if v in env else constant_of(v) for v in yields]
    return all(c is NOT_CONSTANT or constant_fits_uses(r, c) for r, c in zip(loop.results, carried))


def unroll_loop(loop: Operation, trip: int, rw: Rewriter) -> None:
    body = loop.region("body")
    iv = body.args[0]
    lo, step = constant_of(loop.operand("lower")), constant_of(loop.operand("step"))
    namer = rw.namer(loop)
    carried: list[Value] = loop.operand_group("inits")
    region = loop.parent
    assert region is not None
    first = region.ops.index(loop)
    for k in range(trip):
        iv_value = rw.constant_before(loop, lo + k * step, loop.operand("lower").type, namer.fresh(iv.name))
        mapping: dict[Value, Value] = {iv: iv_value, **dict(zip(body.args[1:], carried))}
        carried = rw.clone_region_before(body, loop, mapping, namer)
    copies = region.ops[first:region.ops.index(loop)]
    rw.carry_comments(loop, copies[0] if copies else None)
    rw.replace_op_with_new_values(loop, carried, copies)


def unroll(module: Module, max_trip_count: int = 16, max_ops: int = 4096) -> int:
    """Unroll eligible loops of `module`; returns how many were unrolled."""
    rw = Rewriter(module)
    loops = [op for op in module.walk() if op.opdef is SCF_FOR]
    done = 0
    for loop in reversed(loops):  # later in pre-order first: inner loops before outer ones
        if loop.parent is None:
            continue
        trip = trip_count(loop)
        if trip is None or trip > max_trip_count or trip * _body_size(loop) > max_ops:
            continue
        if not _constants_fit(loop, trip):
            continue
        unroll_loop(loop, trip, rw)
        done += 1
    legalize_names(module)
    return done


@dataclass(frozen=True)
class Unroll(ModulePass):
    name = "unroll"
    summary = "Fully unroll scf.for loops with constant bounds and a small trip count."

    max_trip_count: int = option("unroll loops that run at most this many times", 16, minimum=0)
    max_ops: int = option("unroll only if the copies add at most this many ops per loop", 4096, minimum=1)

    def run(self, module: Module, ctx: PassContext) -> None:
        unroll(module, self.max_trip_count, self.max_ops)


__all__ = ["Unroll", "trip_count", "unroll", "unroll_loop"]
