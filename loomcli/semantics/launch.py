"""Running a kernel's launch-config region, op by op, with attribution.

One routine serves compile time and launch time. At compile time the
workload is unknown and the region is folded as far as constants reach
(LANGUAGE.md 17.15): each op whose operands are all known is run by the
shared `Evaluator` (a call gets a fresh budget of 10^6 ops); UB or an op
that cannot run leaves its results unknown. At launch time every workload
value is known, so an unknown field means evaluation failed, and the first
failing op says why (UB: LAUNCH_CONFIG/007) and which field it feeds (does
not fold: LAUNCH_CONFIG/008).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loomcli.ir.core import Module, Operation, OpResult, Value
from loomcli.ir.ops import KERNEL_LAUNCH_CONFIG
from loomcli.semantics.evaluate import MAX_STEPS, EvaluationError, Evaluator, NotEvaluable

FIELDS = ("workgroups", "workgroup_size", "cluster_size")
Triple = tuple[Any, Any, Any]


@dataclass
class Failure:
    op: Operation                 # the top-level op of the region that failed
    error: EvaluationError        # UndefinedBehavior or NotEvaluable
    fields: list[str]             # the launch fields that depend on it, in FIELDS order


@dataclass
class ConfigRun:
    values: dict[str, Triple]                       # per field; None where unknown
    failures: list[Failure] = field(default_factory=list)

    def failure_of(self, name: str) -> Failure | None:
        for f in self.failures:
            if name in f.fields:
                return f
        return None


def run_launch_config(module: Module, kernel: Operation, workload: Mapping[Value, Any] | Sequence[Any] | None,
                      subgroup_size: int | None, max_steps: int = MAX_STEPS,
                      evaluator: Evaluator | None = None) -> ConfigRun:
    """Run `kernel`'s launch-config region. `workload` gives values for some
    (a mapping) or all (a sequence, in signature order) of its arguments.
    `evaluator` (of `module`, for `subgroup_size`) may be shared across calls."""
    region = kernel.region("config")
    if evaluator is None:
        evaluator = Evaluator(module, subgroup_size=subgroup_size, max_steps=max_steps)
    env: dict[Value, Any] = {}
    if isinstance(workload, Mapping):
        env.update(workload)
    elif workload is not None:
        env.update(zip(region.args, workload))
    failed: dict[Value, Failure] = {}
    failures: list[Failure] = []
    term = region.terminator
    for op in region.ops:
        if op is term:
            break
        upstream = next((failed[v] for v in op.operands if v in failed), None)
        if upstream is not None:
            for r in op.results:
                failed[r] = upstream
            continue
        if not all(v in env for v in op.operands):
            continue
        evaluator.steps = 0
        try:
            results = evaluator.run_op(op, env)
        except EvaluationError as e:
            f = Failure(op, e, [])
            failures.append(f)
            for r in op.results:
                failed[r] = f
            continue
        for r, v in zip(op.results, results):
            env[r] = v
    values: dict[str, Triple] = {}
    if term is None or term.opdef is not KERNEL_LAUNCH_CONFIG:
        return ConfigRun({name: (None, None, None) for name in FIELDS},
                         [Failure(term or kernel, NotEvaluable("no kernel.launch.config"), list(FIELDS))])
    for name in FIELDS:
        operands = term.operand_group(name)
        if not operands:
            values[name] = (1, 1, 1)
            continue
        values[name] = tuple(env.get(v) for v in operands)  # type: ignore[assignment]
        for v in operands:
            upstream = failed.get(v)
            if upstream is not None and name not in upstream.fields:
                upstream.fields.append(name)
    return ConfigRun(values, [f for f in failures if f.fields])


def field_uses(kernel: Operation) -> dict[Operation, list[str]]:
    """For each op of the launch-config region, the fields it feeds (none: dead)."""
    region = kernel.region("config")
    term = region.terminator
    uses: dict[Operation, list[str]] = {}
    if term is None or term.opdef is not KERNEL_LAUNCH_CONFIG:
        return uses
    for name in FIELDS:
        stack = [v.op for v in term.operand_group(name) if isinstance(v, OpResult) and v.op.parent is region]
        while stack:
            op = stack.pop()
            fields = uses.setdefault(op, [])
            if name in fields:
                continue
            fields.append(name)
            stack += [v.op for v in op.operands if isinstance(v, OpResult) and v.op.parent is region]
    return uses


def fold_launch_config(module: Module, kernel: Operation, subgroup_size: int | None,
                       evaluator: Evaluator | None = None) -> ConfigRun:
    """What the launch configuration folds to with the workload unknown."""
    return run_launch_config(module, kernel, None, subgroup_size, evaluator=evaluator)


__all__ = ["FIELDS", "ConfigRun", "Failure", "field_uses", "fold_launch_config", "run_launch_config"]
