"""A small interpreter for pure code on constants.

It runs function and template bodies, and any region of pure ops (a launch
configuration), with the folders of `loomcli.semantics.fold`, so evaluation
and folding share one semantics: UB raises `UndefinedBehavior`, an op it
cannot run (memory, kernel coordinates, an unbound `config.get`, an
unselected `template.apply`) raises `NotEvaluable`, and so does running
past `max_steps` ops (LANGUAGE.md section 17 item 15: 10^6).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loomcli.ir.core import Module, Operation, Region, Value
from loomcli.ir.ops import CONFIG_DEF, FUNCTION, KERNEL_LAUNCH_CONFIG, TERMINATOR, OpTable
from loomcli.semantics.fold import (
    CONSTANT_OPS,
    FOLDERS,
    NOT_CONSTANT,
    EvaluationError,
    NotEvaluable,
    UndefinedBehavior,
    canonical,
    check_predicates,
    constant_value,
    fold_op,
)

MAX_STEPS = 1_000_000

__all__ = ["MAX_STEPS", "EvaluationError", "Evaluator", "NotEvaluable", "UndefinedBehavior", "evaluate_function"]


class Evaluator:
    """Evaluates pure IR of one module on constants.

    `config` binds `config.get` keys (symbol without `@`) to values;
    `subgroup_size` answers `target.subgroup.size`.
    """

    def __init__(self, module: Module, *, config: Mapping[str, Any] | None = None,
                 subgroup_size: int | None = None, max_steps: int = MAX_STEPS, check_where: bool = True) -> None:
        self.module = module
        self.symbols = module.symbols()
        self.config = dict(config or {})
        self.subgroup_size = subgroup_size
        self.max_steps = max_steps
        self.check_where = check_where
        self.steps = 0

    # ------------------------------------------------------------ entry points

    def call(self, fn: Operation | str, args: Sequence[Any]) -> list[Any]:
        """Run a `func.def` or `template.def` on constant arguments; its results."""
        if isinstance(fn, str):
            target = self.symbols.get(fn.lstrip("@"))
            if target is None:
                raise NotEvaluable(f"no symbol `@{fn.lstrip('@')}`")
            fn = target
        if not fn.opdef.has(FUNCTION):
            raise NotEvaluable(f"`@{fn.symbol}` is a {fn.opdef.name}, not a function with a body")
        region = fn.region("body")
        if len(args) != len(region.args):
            raise NotEvaluable(f"`@{fn.attr('sym')}` takes {len(region.args)} arguments, got {len(args)}")
        values = [canonical(a, v.type) for a, v in zip(args, region.args)]
        sig = fn.attr("sig", None)
        if self.check_where and sig is not None and sig.where:
            env = dict(zip(region.args, values))
            check_predicates(sig.where, lambda v: env.get(v, NOT_CONSTANT))
        _, results = self.run_region(region, values)
        return results

    def run_region(self, region: Region, args: Sequence[Any],
                   env: dict[Value, Any] | None = None) -> tuple[Operation, list[Any]]:
        """Run `region` with its arguments bound to `args`; returns its
        terminator and the terminator's operand values."""
        env = {} if env is None else env
        for a, v in zip(region.args, args):
            env[a] = v
        for op in region.ops:
            self.steps += 1
            if self.steps > self.max_steps:
                raise NotEvaluable(f"evaluation exceeded {self.max_steps} operations")
            if op.opdef.has("terminator"):
                return op, [self._get(env, v) for v in op.operands]
            results = self.run_op(op, env)
            for r, v in zip(op.results, results):
                env[r] = v
        raise NotEvaluable("region has no terminator")

    def launch_config(self, kernel: Operation, workload: Sequence[Any]) -> dict[str, tuple[int, ...]]:
        """Run the launch-configuration region of `kernel` on workload values:
        `workgroups`, `workgroup_size` and `cluster_size` (default 1, 1, 1).
        Checking the workload `where` and the geometry is the caller's job."""
        region = kernel.region("config")
        values = [canonical(a, v.type) for a, v in zip(workload, region.args)]
        term, operands = self.run_region(region, values)
        if term.opdef is not KERNEL_LAUNCH_CONFIG:
            raise NotEvaluable(f"`@{kernel.symbol}` has no launch configuration")
        out: dict[str, tuple[int, ...]] = {}
        at = 0
        for key in ("workgroups", "workgroup_size", "cluster_size"):
            n = term.attr(key, 0)
            out[key] = tuple(operands[at:at + n]) if n else (1, 1, 1)
            at += n
        return out

    # ------------------------------------------------------------ ops

    def _get(self, env: dict[Value, Any], v: Value) -> Any:
        try:
            return env[v]
        except KeyError:
            raise NotEvaluable(f"`%{v.name}` has no value here") from None

    def run_op(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        name = op.opdef.name
        handler = _SPECIAL.get(name)
        if handler is not None:
            return handler(self, op, env)
        args = [self._get(env, v) for v in op.operands]
        results = fold_op(op, args, lambda v: env.get(v, NOT_CONSTANT))
        if results is None:
            raise NotEvaluable(f"{name} is not evaluated at compile time")
        return results

    def _constant(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        return [constant_value(op)]

    def _scf_if(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        cond = self._get(env, op.operand("condition"))
        _, values = self.run_region(op.region("then" if cond else "else"), [], env)
        return values

    def _scf_for(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        lo, hi, step = (self._get(env, op.operand(name)) for name in ("lower", "upper", "step"))
        carried = [self._get(env, v) for v in op.operand_group("inits")]
        if step <= 0:
            raise UndefinedBehavior(f"scf.for step {step} is not > 0")
        iv = lo
        body = op.region("body")
        while iv < hi:
            _, carried = self.run_region(body, [iv] + carried, env)
            iv += step
        return carried

    def _scf_while(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        carried = [self._get(env, v) for v in op.operand_group("inits")]
        before, after = op.region("before"), op.region("after")
        while True:
            _, values = self.run_region(before, carried, env)
            if not values[0]:
                return values[1:]
            _, carried = self.run_region(after, values[1:], env)

    def _call(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        callee = self.symbols.get(op.attr("callee", ""))
        if callee is None or not callee.opdef.has(FUNCTION):
            raise NotEvaluable(f"`@{op.attr('callee', None)}` has no body here")
        args = [self._get(env, v) for v in op.operands]
        return self.call(callee, args)

    def _config_get(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        key = op.attr("ref", "")
        if key in self.config:
            return [canonical(self.config[key], op.results[0].type)]
        definition = self.symbols.get(key)
        if definition is not None and definition.opdef is CONFIG_DEF:
            return [canonical(definition.attr("value"), op.result().type)]
        raise NotEvaluable(f"`@{key}` unresolved")

    def _subgroup_size(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        if self.subgroup_size is None:
            raise NotEvaluable("target.subgroup.size needs a target profile")
        return [self.subgroup_size]


# What the evaluator runs beyond the folders.
Handler = Callable[[Evaluator, Operation, dict[Value, Any]], list[Any]]
_SPECIAL: OpTable[Handler] = OpTable("semantics.evaluate._SPECIAL", {
    **{name: Evaluator._constant for name in CONSTANT_OPS},
    "scf.if": Evaluator._scf_if,
    "scf.for": Evaluator._scf_for,
    "scf.while": Evaluator._scf_while,
    "func.call": Evaluator._call,
    "template.call": Evaluator._call,
    "config.get": Evaluator._config_get,
    "target.subgroup.size": Evaluator._subgroup_size,
})


def evaluates(op: Operation) -> bool:
    """Whether the evaluator runs `op` (a terminator ends the region it runs)."""
    name = op.opdef.name
    return name in _SPECIAL or name in FOLDERS or op.opdef.has(TERMINATOR)


def evaluate_function(module: Module, fn: Operation | str, args: Sequence[Any], **options: Any) -> list[Any]:
    """The results of function `fn` of `module` on constant `args` (see `Evaluator`)."""
    return Evaluator(module, **options).call(fn, args)

