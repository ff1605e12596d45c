"""The conformance suite (tests/conformance/): at least 60 kernels whose
check cases run on the reference interpreter, on the cpu device (the LLVM
lowering, natively) and on Vulkan (lavapipe in CI).

All files run in one `loom test` process per device. Every case must pass
on each, except the `ub_` cases, which execute undefined behaviour: the
interpreter must trap them (EXEC/002), and Vulkan and the cpu device must
run them (any result; the cpu's division trap fails the sample with
EXEC/002). Where a driver legitimately differs from the exact result, the
case itself accepts both results and says why (gen_fma_*: unfused Fma).
The `gen_` files come from tests/conformance/generate.py, which computes
the expected values from its own model of the language.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from loomcli.check.vulkan import unavailable_reason
from loomcli.frontend import load_module

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "conformance"
FILES = sorted(SUITE.glob("*.loom"))
VULKAN = unavailable_reason()
LINE = re.compile(r"^(PASS|FAIL) @(\S+)(?: \[[^\]]*\])?$", re.M)


def cases() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in FILES:
        for op in load_module(str(path)).ops:
            if op.name == "check.case":
                assert op.attr("sym") not in found, f"case @{op.attr('sym')} is in two files"
                found[op.attr("sym")] = path
    return found


CASES = cases()


@cache
def run(device: str) -> tuple[dict[str, list[str]], str]:
    """One `loom test` over the whole suite: verdicts per case, and stderr."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LOOM_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "loomcli", "test", "--device", device,
                        *(str(p.relative_to(ROOT)) for p in FILES)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    verdicts: dict[str, list[str]] = {}
    for m in LINE.finditer(r.stdout):
        verdicts.setdefault(m.group(2), []).append(m.group(1))
    return verdicts, r.stderr


def test_suite_size() -> None:
    assert len(FILES) >= 60
    assert all(any(p == path for p in CASES.values()) for path in FILES), "every file has a case"


def test_generated_files_are_current(tmp_path: Path) -> None:
    """The checked-in gen_*.loom are what generate.py writes."""
    sys.path.insert(0, str(SUITE))
    try:
        import generate  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(SUITE))
    for name, (title, kernel, notes) in generate.files().items():
        assert (SUITE / f"gen_{name}.loom").read_text() == kernel.render(title, notes, name), name


DEVICES = ["interpreter", "cpu", pytest.param("vulkan", marks=pytest.mark.skipif(
    VULKAN is not None, reason=f"no Vulkan device: {VULKAN}"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_case(case: str, device: str) -> None:
    verdicts, stderr = run(device)
    assert "internal" not in stderr and "Traceback" not in stderr, stderr[-2000:]
    got = verdicts.get(case)
    assert got, f"no result for @{case} ({CASES[case].name}) on {device}"
    if not case.startswith("ub_"):
        assert set(got) == {"PASS"}, f"@{case} in {CASES[case].name} on {device}:\n" + "\n".join(
            line for line in stderr.splitlines() if CASES[case].name in line)
    elif device == "interpreter":
        assert set(got) == {"FAIL"}, f"@{case}: the interpreter must trap undefined behaviour"


def test_interpreter_traps_undefined_behaviour() -> None:
    _, stderr = run("interpreter")
    ub = [c for c in CASES if c.startswith("ub_")]
    assert len(ub) >= 3
    assert stderr.count("error [EXEC/002]: undefined behaviour") >= len(ub)
