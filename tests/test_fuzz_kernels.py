"""scripts/fuzz_kernels.py: its kernels are valid and free of undefined
behaviour by construction (the interpreter traps UB), and a bounded run
agrees between the interpreter and Vulkan. Thousands of kernels are run by
hand (`python scripts/fuzz_kernels.py --seed S --count N`), not in CI."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.check.vulkan import unavailable_reason

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "fuzz_kernels.py"
VULKAN = unavailable_reason()


def _fuzz():  # the script is not a package module
    spec = importlib.util.spec_from_file_location("fuzz_kernels", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_kernels", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("k", range(12))
def test_generated_kernels_are_well_defined(k: int, tmp_path: Path) -> None:
    fuzz = _fuzz()
    text, approx = fuzz.generate(f"ci:{k}")
    assert len(approx) == fuzz.APPROX
    path = tmp_path / "k.loom"
    path.write_text(text)
    outputs, why = fuzz.run_on(str(path), "interpreter", None)
    assert why == "", why            # no diagnostic: valid, and no UB trapped
    assert len(outputs) == 3


@pytest.mark.parametrize("target", ["amdgpu:gfx1100", "nvptx:sm_90"])
def test_generated_kernels_compile_for_targets_without_a_device(target: str, tmp_path: Path) -> None:
    """The same kernels through the instruction selectors no device here runs
    (nvptx's PTX assembled by ptxas when it is installed)."""
    fuzz = _fuzz()
    for k in range(12):
        path = tmp_path / f"k{k}.loom"
        path.write_text(fuzz.generate(f"ci:{k}")[0])
        assert fuzz.compile_for(str(path), target) == "", f"kernel ci:{k}"


def test_generation_is_deterministic() -> None:
    fuzz = _fuzz()
    assert fuzz.generate("7:3") == fuzz.generate("7:3")
    assert fuzz.generate("7:3") != fuzz.generate("7:4")


@pytest.mark.skipif(VULKAN is not None, reason=f"no Vulkan device: {VULKAN}")
def test_bounded_differential_run() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(SCRIPT), "--seed", "ci", "--count", "8"], capture_output=True,
                       text=True, env=env, timeout=900)
    assert r.stdout.splitlines()[-1] == "8 kernels, 0 mismatches", r.stdout + r.stderr
    assert r.returncode == 0
