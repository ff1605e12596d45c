"""scripts/fuzz_kernels.py: every family's kernels are valid and free of
undefined behaviour by construction (the interpreter traps UB and the
reference run must pass), a bounded differential run per family agrees
between the devices, the reducer shrinks a planted mismatch, and the known
device differences the comparison filters still hold on this machine's
Vulkan device. Thousands of kernels are run by hand
(`python scripts/fuzz_kernels.py --seed S --count N`), not in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loomcli.check.vulkan import unavailable_reason

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "fuzz_kernels.py"
VULKAN = unavailable_reason()
needs_vulkan = pytest.mark.skipif(VULKAN is not None, reason=f"no Vulkan device: {VULKAN}")
sys.path.insert(0, str(ROOT / "scripts"))

from kernelfuzz.campaign import FAMILIES, generate  # noqa: E402
from kernelfuzz.devices import InterpreterDevice  # noqa: E402
from kernelfuzz.runner import Judge  # noqa: E402


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generated_kernels_are_well_defined(family: str, tmp_path: Path) -> None:
    """The interpreter is every device's reference: its run of each kernel must
    pass (no diagnostic, no trapped UB), and it must agree with the reference
    run, which for templates and command programs the generator's model wrote."""
    judge = Judge([InterpreterDevice()], str(tmp_path))
    for k in range(3):
        test = generate("ci", family, k)
        assert judge.judge(test) == [], test.name


def test_generation_is_deterministic() -> None:
    for family in FAMILIES:
        assert generate("7", family, 3).text == generate("7", family, 3).text
        assert generate("7", family, 3).text != generate("7", family, 4).text


@pytest.mark.parametrize("target", ["amdgpu:gfx1100", "nvptx:sm_90"])
def test_generated_kernels_compile_for_targets_without_a_device(target: str, tmp_path: Path) -> None:
    """The same kernels through the instruction selectors no device here runs
    (nvptx's PTX assembled by ptxas when it is installed)."""
    from kernelfuzz.campaign import compile_only

    for family in FAMILIES:
        test = generate("ci", family, 0)
        assert compile_only(test, target, str(tmp_path)) == "", test.name


def fuzz(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=900)


@needs_vulkan
def test_bounded_differential_run_of_every_family() -> None:
    r = fuzz("--seed", "ci", "--count", "3")
    last = r.stdout.splitlines()[-1]
    assert last.startswith("21 kernels (scalar 3, barrier 3, reduce 3, atomic 3, vector 3, template 3, command 3), "
                           "0 mismatches"), r.stdout + r.stderr
    assert r.returncode == 0


def test_usage_errors_exit_2() -> None:
    assert fuzz("--seed", "x", "--count", "1", "--family", "nope").returncode == 2
    assert fuzz("--seed", "x", "--count", "-1").returncode == 2


# ---------------------------------------------------------------- the reducer


class MuliIsAddi(InterpreterDevice):
    """A planted miscompile: the interpreter with every scalar.muli run as scalar.addi."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "planted"

    def compile(self, path: str, roots: Any, config: Any) -> Any:
        from loomcli.ir.builder import create, substitute

        module = super().compile(path, roots, config)
        for op in list(module.walk()):
            if op.name == "scalar.muli":
                substitute(op, create("scalar.addi", list(op.operands)))
        return module


def test_reducer_shrinks_a_planted_mismatch(tmp_path: Path) -> None:
    from kernelfuzz.reduce import reduce_test, signature

    planted = MuliIsAddi()
    judge = Judge([planted], str(tmp_path))
    finding = next(f for k in range(40) for f in judge.judge(generate("plant", "scalar", k)))
    reduced, final = reduce_test(judge, finding, budget=150)
    before, after = len(finding.test.text.splitlines()), len(reduced.text.splitlines())
    assert after < before * 0.6, (before, after)
    assert "scalar.muli" in reduced.text
    assert signature(final) == signature(finding)
    again = judge.judge(reduced)
    assert [signature(f) for f in again] == [signature(finding)]


def test_reducer_keeps_protected_lines_and_terminators() -> None:
    from kernelfuzz.reduce import Reducer

    text = generate("ci", "template", 1)
    lines = [x.strip() for x in text.text.split("\n")]
    # Anything goes, as long as the module stays valid: everything deletable goes.
    reduced = Reducer(text.text, lambda t: True, text.protected, budget=400).run()
    kept = {x.strip() for x in reduced.split("\n")}
    assert all(p in kept for p in text.protected if p in lines)
    assert "kernel.return" in kept and "check.return" in kept
    assert len(reduced.splitlines()) < len(text.text.splitlines())


# ---------------------------------------------------------------- known device differences


def loom_test(path: Path, device: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "loomcli", "test", "--device", device, str(path)],
                          capture_output=True, text=True, env=env, timeout=600)


@needs_vulkan
@pytest.mark.parametrize("name", ["subgroup_rows.loom", "mulf_by_zero.loom", "divf_zero_dividend.loom",
                                  "dead_loop_zero.loom", "counted_loop_zero.loom",
                                  "reduce_mulf_zero.loom"])
def test_known_differences_still_hold(name: str) -> None:
    """Each filtered difference has a reproducer that passes on the interpreter
    and fails on this Vulkan device; when a driver fixes one, this says so."""
    path = ROOT / "scripts" / "kernelfuzz" / name
    assert loom_test(path, "interpreter").returncode == 0
    r = loom_test(path, "vulkan")
    assert r.returncode == 1 and "CHECK/001" in r.stderr, r.stdout + r.stderr


@needs_vulkan
@pytest.mark.parametrize("name", ["mulf_by_zero.loom", "divf_zero_dividend.loom", "dead_loop_zero.loom",
                                  "counted_loop_zero.loom", "reduce_mulf_zero.loom"])
def test_constant_zero_filter_needs_the_model_to_reproduce_every_byte(name: str, tmp_path: Path) -> None:
    """The filter explains a difference only when the interpreter, with
    lavapipe's folding modelled, returns the device's bytes exactly."""
    from kernelfuzz.devices import VulkanDevice
    from kernelfuzz.gen import Tensor, Test
    from kernelfuzz.known import constant_zero

    text = (ROOT / "scripts" / "kernelfuzz" / name).read_text()
    text = text.replace("  %all = check.generate.fill value(1) : tensor<3xi32>\n", "")
    text = text.replace("  check.expect.equal actual(%out) expected(%all) : tensor<3xi32>\n", "")
    test = Test("scalar", "known", text, (Tensor("in", "tensor<3xf32>", ""), Tensor("out", "tensor<3xi32>", "")))
    device = VulkanDevice()
    judge = Judge([device], str(tmp_path))
    [finding] = judge.judge(test)
    assert finding.explained == "lavapipe-constant-zero"
    from kernelfuzz.runner import run_case

    path = tmp_path / "k.loom"
    path.write_text(text)
    got = run_case(device, str(path), ())
    assert constant_zero(judge, test, device, got.outputs)
    tampered = (got.outputs[0], bytes(12))
    assert not constant_zero(judge, test, device, tampered)
