"""Known device differences: the filters a difference must pass before it
counts, each with its evidence. A filter either recognizes a class of tests
whose results the device cannot give (`subgroup_rows`), or *confirms* a
driver bug by a model run: the interpreter runs the module with the bug
modelled, and only when that run reproduces every byte the device returned
is the difference put down to the bug (`constant_zero`).

Reproducers for each live beside this package (`kernelfuzz/*.loom`); run
them with `python3 -m loomcli test FILE --device vulkan`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelfuzz.compare import first_difference
from kernelfuzz.devices import Device, compile_for
from kernelfuzz.gen import Test

if TYPE_CHECKING:
    from kernelfuzz.runner import Judge
    from loomcli.ir.core import Module


def subgroup_rows(judge: Judge, test: Test, device: Device, got: Sequence[bytes]) -> bool:
    """Vulkan does not say how a workgroup's invocations form subgroups ("There
    is no direct relationship between SubgroupLocalInvocationId and
    LocalInvocationId or LocalInvocationIndex", Vulkan 1.3, built-in
    variables), and lavapipe forms them from runs of x within each row: in a
    12x2 workgroup its subgroups of 8 are linear ids 0-7, 8-11, 12-19 and
    20-23, where LANGUAGE.md 8 says 0-7, 8-15, 16-23 (subgroup_rows.loom).
    So on Vulkan, subgroup reductions, lane ids and subgroup barriers - and
    workgroup reductions, which expand-collectives builds from them - follow
    the language only when the workgroup is one-dimensional or its x size is a
    multiple of the subgroup size. Tests whose results rest on that layout
    (`Test.layout`) differ on Vulkan outside those shapes."""
    if device.name != "vulkan" or test.layout is None:
        return False
    x, y, z = test.layout
    return y * z > 1 and x % device.subgroup_size != 0


class CompileTimeValues:
    """The values a folding shader compiler knows while it compiles: constants
    and what folds from them, integer self-comparisons (`x uge x`), `x xor x`
    and `x - x`, `and` with a false operand, a select or `scf.if` on a known
    condition, and loops whose trip count and carried values fold (it
    unrolls them), whatever else the loop carries. `of(v)` is v's value, or
    NOT_CONSTANT when the compiler cannot know it."""

    LOOP_LIMIT = 1024          # iterations simulated before a loop counts as unknown

    def __init__(self) -> None:
        self.memo: dict[Any, Any] = {}

    def of(self, v: Any, env: dict[Any, Any] | None = None) -> Any:
        from loomcli.ir.core import OpResult
        from loomcli.semantics.fold import NOT_CONSTANT

        if env is not None and v in env:
            return env[v]
        if not isinstance(v, OpResult):
            return NOT_CONSTANT          # a kernel argument or an unsimulated block argument
        if env is None and v in self.memo:
            return self.memo[v]
        value = self.results(v.op, env)[v.index]
        if env is None:
            self.memo[v] = value
        return value

    def results(self, op: Any, env: dict[Any, Any] | None) -> list[Any]:
        from loomcli.ir.ops import CONVERGENT, COORDINATE, MEMORY
        from loomcli.semantics.fold import NOT_CONSTANT, EvaluationError, constant_of, fold_op

        unknown = [NOT_CONSTANT] * len(op.results)
        name = op.name
        if name in ("scalar.constant", "index.constant"):
            return [constant_of(op.results[0])]
        if name == "scf.while":
            return self.run_while(op, env) or unknown
        if name == "scf.for":
            return self.run_for(op, env) or unknown
        if name == "scf.if":
            cond = self.of(op.operands[0], env)
            if cond is NOT_CONSTANT:
                return unknown
            return self.run(op.regions[0 if cond else 1], [], env) or unknown
        if op.regions or any(op.opdef.has(t) for t in (MEMORY, COORDINATE, CONVERGENT)):
            return unknown
        if len(op.operands) == 2 and op.operands[0] is op.operands[1]:
            if name in ("scalar.cmpi", "index.cmp"):
                from loomcli.passes.canonicalize import _SELF_COMPARE  # our own folder's x P x

                return [_SELF_COMPARE[op.attr("predicate")]]
            if name == "scalar.cmpf" and op.attr("predicate") in ("one", "olt", "ogt", "ueq", "ule", "uge"):
                return [op.attr("predicate").startswith("u")]      # whatever x is, NaN included
            if name in ("scalar.xori", "scalar.subi", "index.sub"):
                return [0]
        args = [self.of(x, env) for x in op.operands]
        if name == "scalar.andi" and any(a is not NOT_CONSTANT and a in (0, False) for a in args):
            return [False if op.results[0].type.name == "i1" else 0]
        if name == "scf.select" and args[0] is not NOT_CONSTANT:
            return [args[1 if args[0] else 2]]
        if NOT_CONSTANT in args:
            return unknown
        try:
            folded = fold_op(op, args)
        except EvaluationError:
            return unknown
        return folded if folded is not None else unknown

    def run(self, region: Any, args: list[Any], env: dict[Any, Any] | None) -> list[Any] | None:
        """The terminator's operands after `region` runs on `args`, or None
        when its ops cannot all be stepped through."""
        inner = dict(env or {})
        inner.update(zip(region.args, args))
        for op in region.ops:
            if op is region.terminator:
                return [self.of(x, inner) for x in op.operands]
            inner.update(zip(op.results, self.results(op, inner)))
        return None

    def run_while(self, op: Any, env: dict[Any, Any] | None) -> list[Any] | None:
        from loomcli.semantics.fold import NOT_CONSTANT

        values = [self.of(x, env) for x in op.operands]
        for _ in range(self.LOOP_LIMIT):
            passed = self.run(op.region("before"), values, env)
            if passed is None or passed[0] is NOT_CONSTANT:
                return None
            if not passed[0]:
                return passed[1:]
            values = self.run(op.region("after"), passed[1:], env)
            if values is None:
                return None
        return None

    def run_for(self, op: Any, env: dict[Any, Any] | None) -> list[Any] | None:
        from loomcli.semantics.fold import NOT_CONSTANT

        lo, hi, step = (self.of(op.operand(n), env) for n in ("lower", "upper", "step"))
        if NOT_CONSTANT in (lo, hi, step) or step <= 0 or (hi - lo) // step > self.LOOP_LIMIT:
            return None
        values = [self.of(x, env) for x in op.operand_group("inits")]
        for i in range(lo, hi, step):
            values = self.run(op.region("body"), [i, *values], env)
            if values is None:
                return None
        return values


def _zero_constant(v: Any, known: CompileTimeValues) -> bool:
    """A float zero lavapipe's compiler knows: what `known` folds to zero, a
    splat of one, a lane of an all-zero vector constant."""
    from loomcli.semantics.fold import NOT_CONSTANT

    op = getattr(v, "op", None)
    if op is not None and op.name in ("vector.splat", "vector.extract"):
        return _zero_constant(op.operands[0], known)
    if op is not None and op.name == "vector.constant":
        value = op.attr("value")           # a list of lanes, or one value for every lane
        return all(x == 0 and not isinstance(x, bool) for x in (value if isinstance(value, list) else [value]))
    value = known.of(v)
    return value is not NOT_CONSTANT and value == 0 and not isinstance(value, bool)


def fold_constant_zero(module: Module) -> int:
    """lavapipe's shortcuts, modelled: every mulf with a constant (+-)0.0
    operand, every divf whose dividend is a constant (+-)0.0, and every
    mulf reduction of a constant zero vector, becomes +0.0."""
    from loomcli.ir.builder import create, substitute

    known = CompileTimeValues()
    n = 0
    for op in list(module.walk()):
        if op.name in ("scalar.mulf", "vector.mulf"):
            zero = any(_zero_constant(v, known) for v in op.operands)
        elif op.name == "scalar.divf":
            zero = _zero_constant(op.operands[0], known)
        elif op.name == "vector.reduce" and op.attr("kind") == "mulf":
            # init * lane 0 * lane 1 ...: with a known-zero vector, the first product is +0.0
            zero = _zero_constant(op.operand("vector"), known)
        else:
            continue
        if zero:
            kind = "vector.constant" if op.name == "vector.mulf" else "scalar.constant"
            substitute(op, create(kind, attrs={"value": 0.0}))   # substitute gives it the results
            n += 1
    return n


@dataclass
class ConstantZeroModel:
    """The interpreter running a module compiled for `device`'s profile with
    `fold_constant_zero` applied, at the device's subgroup size."""

    device: Device
    name: str = "interpreter (lavapipe's x * 0.0 = 0.0 / x = +0.0 modelled)"

    def __post_init__(self) -> None:
        from loomcli.targets.profiles import with_overrides

        self.profile = with_overrides(self.device.profile, subgroup_size=self.device.subgroup_size)
        self.subgroup_size = self.device.subgroup_size
        self.folded = 0

    def compile(self, path: str, roots: Sequence[str], config: Sequence[str]) -> Module:
        module = compile_for(self.device.profile, path, roots, config)
        self.folded = fold_constant_zero(module)
        return module

    def launcher(self, module: Module, path: str) -> Any:
        from loomcli.check.interpreter import InterpreterLauncher

        return InterpreterLauncher(module, self.profile, path)

    def executable(self, module: Module, symbol: str, path: str) -> Any:
        raise NotImplementedError("the model runs check cases only")


def constant_zero(judge: Judge, test: Test, device: Device, got: Sequence[bytes]) -> bool:
    """lavapipe (Mesa 22.3.6, LLVM 15) makes `x * 0.0` and `0.0 / x` +0.0
    whenever the zero is a constant when it compiles the shader: gallivm's
    lp_build_mul returns its zero for a constant zero operand, and
    lp_build_div for a constant zero dividend, before any float control
    applies. So (-2.0) * 0.0 and 0.0 / (-2.0) are +0.0, not -0.0 (and NaN *
    0.0 is +0.0, not NaN), though the device reports
    shaderSignedZeroInfNanPreserveFloat16/32/64 and the module declares
    SignedZeroInfNanPreserve (mulf_by_zero.loom, divf_zero_dividend.loom;
    docs/spirv.md lists it as driver-dependent). A zero is constant to
    lavapipe after its own folding too: a splat of a zero constant, a lane
    of a zero vector, what a loop that never runs passes on
    (dead_loop_zero.loom) or one it unrolls computes (counted_loop_zero.loom),
    and the lanes a mulf reduction multiplies by (reduce_mulf_zero.loom):
    `CompileTimeValues` models that folding. Confirmed per test: the interpreter runs the module
    compiled for Vulkan (for a command program, its launches as a check
    case, as the reference does) with each of those made +0.0, and must
    then return every byte the device did."""
    if device.name != "vulkan":
        return False
    model = ConstantZeroModel(device)
    _, text, _ = judge.reference(test, device)   # a program's launches as a check case, for one
    outcome = judge.run(test, model, text, {})
    return model.folded > 0 and not outcome.why and first_difference(test, got, outcome.outputs) is None


# name -> filter(judge, test, device, the device's tensors): True when the difference is that one.
KNOWN_DIFFERENCES: dict[str, Callable[[Judge, Test, Device, Sequence[bytes]], bool]] = {
    "vulkan-subgroup-rows": subgroup_rows,
    "lavapipe-constant-zero": constant_zero,
}


def explain(judge: Judge, test: Test, device: Device, got: Sequence[bytes]) -> str:
    """The name of the known difference that accounts for the device's results, or ''."""
    for name, accounts in KNOWN_DIFFERENCES.items():
        if accounts(judge, test, device, got):
            return name
    return ""
