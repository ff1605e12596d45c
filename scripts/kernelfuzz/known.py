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


def _zero_constant(v: Any) -> bool:
    """A float zero constant once lavapipe's compiler has folded: a constant,
    a splat of one, a lane of an all-zero vector constant, the bits of an
    integer zero, or what a loop that never runs passes on of its inits."""
    op = getattr(v, "op", None)
    if op is None:
        return False
    if op.name in ("vector.splat", "vector.extract", "scalar.bitcast"):
        return _zero_constant(op.operands[0])
    if op.name == "scf.while":
        init = _never_iterates(op, v.index)
        return init is not None and _zero_constant(init)
    if op.name not in ("scalar.constant", "vector.constant"):
        return False
    value = op.attr("value")
    values = value if isinstance(value, list) else [value]
    return all(x == 0 and not isinstance(x, bool) for x in values)


def _never_true(v: Any) -> bool:
    """A condition NIR folds to false: `x one x`, `x olt x`, `x ogt x`, or an `andi` with one."""
    op = getattr(v, "op", None)
    if op is None:
        return False
    if op.name == "scalar.cmpf":
        return op.attr("predicate") in ("one", "olt", "ogt") and op.operands[0] is op.operands[1]
    return op.name == "scalar.andi" and any(_never_true(x) for x in op.operands)


def _never_iterates(loop: Any, k: int) -> Any:
    """The init a `scf.while` passes on as its result `k` when its first
    condition is never true (the loop is dead to a folding compiler), else None."""
    before = loop.region("before")
    cond = before.terminator
    if cond is None or not _never_true(cond.operands[0]):
        return None
    passed = cond.operands[1 + k]
    if passed in before.args:
        return loop.operands[before.args.index(passed)]
    return None


def fold_constant_zero(module: Module) -> int:
    """lavapipe's shortcuts, modelled: every mulf with a constant (+-)0.0
    operand, and every divf whose dividend is a constant (+-)0.0, becomes +0.0."""
    from loomcli.ir.builder import create, substitute

    n = 0
    for op in list(module.walk()):
        if op.name in ("scalar.mulf", "vector.mulf"):
            zero = any(_zero_constant(v) for v in op.operands)
        elif op.name == "scalar.divf":
            zero = _zero_constant(op.operands[0])
        else:
            continue
        if zero:
            kind = "vector.constant" if op.name.startswith("vector.") else "scalar.constant"
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
    of a zero vector. Confirmed per test: the interpreter runs the module
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
