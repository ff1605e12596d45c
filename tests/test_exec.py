"""Execution tests: `loom test` compiles tests/exec/*.loom and three samples to
SPIR-V and runs their check cases on a Vulkan device (lavapipe on a CPU-only
machine). Every case must pass; each expected value was worked out by hand
(the comments in the files say how).

A case that fails because of the SPIR-V emitter, not the runner, is listed
in EMITTER_XFAIL with the reason, so the suite stays green while the emitter
catches up; it turns into an XPASS once fixed.
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
FILES = sorted((ROOT / "tests" / "exec").glob("*.loom")) + [
    ROOT / "samples" / f"{name}.loom" for name in ("saxpy", "reduction", "matmul")]
REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no Vulkan device: {REASON}")

# (file stem, case) -> why it fails on the current SPIR-V emitter.
EMITTER_XFAIL: dict[tuple[str, str], str] = {}

SUMMARY = re.compile(r"(\d+) passed, (\d+) failed\Z")


def loom(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


@cache
def run_file(path: Path) -> subprocess.CompletedProcess[str]:
    """One `loom test` run per file, shared by the file's cases."""
    return loom("test", str(path.relative_to(ROOT)))


def case_names(path: Path) -> list[str]:
    return [op.attr("sym") for op in load_module(str(path)).ops if op.name == "check.case"]


CASES = [pytest.param(path, case, id=f"{path.stem}-{case}",
                      marks=[pytest.mark.xfail(reason=EMITTER_XFAIL[(path.stem, case)], strict=False)]
                      if (path.stem, case) in EMITTER_XFAIL else [])
         for path in FILES for case in case_names(path)]


def test_enough_execution_tests() -> None:
    assert len(list((ROOT / "tests" / "exec").glob("*.loom"))) >= 15


@pytest.mark.parametrize("path, case", CASES)
def test_case_passes(path: Path, case: str) -> None:
    r = run_file(path)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stdout.splitlines() if re.match(rf"(PASS|FAIL) @{re.escape(case)}( \[|$)", line)]
    assert lines, f"no result line for @{case}:\n{r.stdout}{r.stderr}"
    failed = [line for line in lines if line.startswith("FAIL")]
    assert not failed, "\n".join(failed) + "\n" + r.stderr


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_summary_counts_cases(path: Path) -> None:
    if any((path.stem, c) in EMITTER_XFAIL for c in case_names(path)):
        pytest.skip("has cases the emitter fails")
    r = run_file(path)
    last = r.stdout.splitlines()[-1]
    assert SUMMARY.match(last), r.stdout
    assert last == f"{len(case_names(path))} passed, 0 failed"
    assert r.returncode == 0, r.stderr


def test_a_failing_expectation_reports_check_001_and_exit_1(tmp_path: Path) -> None:
    source = (ROOT / "samples" / "saxpy.loom").read_text()
    wrong = tmp_path / "wrong.loom"
    wrong.write_text(source.replace("offset(1.0) step(2.0)", "offset(1.0) step(2.5)"))
    r = loom("test", str(wrong))
    assert r.returncode == 1
    assert r.stdout.splitlines() == ["PASS @saxpy_case [n=1]", "FAIL @saxpy_case [n=128]",
                                     "FAIL @saxpy_case [n=1009]", "0 passed, 1 failed"]
    line = source.splitlines().index(
        "  check.expect.equal actual(%y) expected(%want) : tensor<[%n]xf32>") + 1
    assert (f"{wrong}:{line}:3: error [CHECK/001]: at [1]: actual 3.0, expected 3.5 (sample @saxpy_case [n=128])"
            in r.stderr)


def test_several_files_one_summary_and_case_filter() -> None:
    r = loom("test", "samples/saxpy.loom", "tests/exec/multi_launch.loom", "--case", "@loop_case")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["PASS @loop_case", "1 passed, 0 failed"]
    r = loom("test", "samples/saxpy.loom", "samples/reduction.loom", "-q")
    assert r.returncode == 0 and r.stdout == ""


def test_bench_times_the_selected_samples() -> None:
    r = loom("test", "samples/saxpy.loom", "--bench")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == ["PASS @saxpy_case [n=1]", "PASS @saxpy_case [n=128]", "PASS @saxpy_case [n=1009]"]
    assert re.fullmatch(r"BENCH @saxpy_big \[n=1009\] @saxpy: median [0-9.]+ [num]?s \(min [0-9.]+ [num]?s, \d+ runs\)",
                        lines[3]), lines[3]
    assert lines[4:] == ["1 passed, 0 failed"]
    r = loom("test", "--bench", "@saxpy_big", "samples/saxpy.loom")
    assert r.returncode == 0 and any(line.startswith("BENCH @saxpy_big") for line in r.stdout.splitlines())
    r = loom("test", "--bench", "@nope", "samples/saxpy.loom")
    assert r.returncode == 2 and "no check.benchmark @nope" in r.stderr


def test_compile_errors_fail_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.loom"
    bad.write_text((ROOT / "samples" / "saxpy.loom").read_text().replace("scalar.fmaf %alpha", "scalar.fmaf %nope"))
    r = loom("test", str(bad))
    assert r.returncode == 1
    assert "error [PARSE/001]" in r.stderr or "error [DOMINANCE/001]" in r.stderr
    assert "Traceback" not in r.stderr
