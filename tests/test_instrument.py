"""Instrumented `loom test` builds (LANGUAGE.md 17.37, 17.38): a device run
catches the faults the reference interpreter traps, and reports each with
the interpreter's diagnostic; benchmarks and compiled artifacts run the
kernels as built.

Every fault of the table runs on the interpreter and on Vulkan (lavapipe
here); both must give the same diagnostic, word for word. Without the
instrumentation the Vulkan runs pass (the old behaviour of issue 23: a
kernel reading past the end of its buffer passed on Vulkan)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Collect  # type: ignore[import-not-found]

from loomcli.check.session import Session, interpreter_profile, vulkan_profile
from loomcli.check.vulkan import VulkanRunner
from loomcli.diagnostics import Diagnostic

ROOT = Path(__file__).resolve().parent.parent

TEMPLATE = """\
func.def device @peek(%buf: buffer, %at: index) -> (i32) {{
  %base = index.constant 0 : offset
  %four = index.constant 4 : index
  %window = buffer.view %buf[%base] : buffer -> view<[%four]xi32>
  %got = view.load %window[%at] : view<[%four]xi32> -> i32
  func.return %got : i32
}}

kernel.def export("k") @k(%n: index) {{
  %c1 = index.constant 1 : index
  kernel.launch.config workgroups(%c1, %c1, %c1) workgroup_size(%c1, %c1, %c1) : index
}} launch(%n: index, %a: buffer, %b: buffer) {{
  %off = index.constant 0 : offset
  %av = buffer.view %a[%off] : buffer -> view<[%n]xi32>
  %bv = buffer.view %b[%off] : buffer -> view<[%n]xi32>
  %i = kernel.workitem.id<x> : index
  %first = view.load %av[0] : view<[%n]xi32> -> i32
{body}
  kernel.return
}}

check.case @c {{
  %n = check.literal value(16) : index
  %a = check.generate.iota offset({start}) step(1) : tensor<[%n]xi32>
  %b = check.generate.fill value(0) : tensor<[%n]xi32>
  kernel.launch @k[%n](%n, %a, %b) : [index](index, tensor<[%n]xi32>, tensor<[%n]xi32>)
  check.return
}}
"""

# name: (kernel body lines, first element of %a, the diagnostic's message)
FAULTS = {
    # Issue 23's case: a view longer than its buffer, read past the buffer's end.
    "read_past_the_buffer": ("""\
  %m = index.constant 32 : index
  %long = buffer.view %a[%off] : buffer -> view<[%m]xi32>
  %x = view.load %long[20] : view<[%m]xi32> -> i32
  view.store %x, %bv[0] : i32, view<[%n]xi32>""", 0, "out of bounds: %long[20]"),
    "store_outside_the_extents": ("""\
  view.store %first, %bv[%n] : i32, view<[%n]xi32>""", 0, "out of bounds: %bv[16]"),
    "misaligned_view": ("""\
  %two = index.constant 2 : offset
  %odd = buffer.view %a[%two] : buffer -> view<4xi32>
  %x = view.load %odd[1] : view<4xi32> -> i32
  view.store %x, %bv[0] : i32, view<[%n]xi32>""", 0, "out of bounds: %odd[1]"),
    "vector_lanes_past_the_end": ("""\
  %x = vector.load %av[12] : view<[%n]xi32> -> vector<8xi32>
  vector.store %x, %bv[0] : vector<8xi32>, view<[%n]xi32>""", 0, "out of bounds: %av[16]"),
    "subview_outside_its_parent": ("""\
  %w = view.subview %av[12] : view<[%n]xi32> -> view<8xi32>
  %x = view.load %w[0] : view<8xi32> -> i32
  view.store %x, %bv[0] : i32, view<[%n]xi32>""", 0, "out of bounds: %av[12]"),
    "atomic_outside_the_extents": ("""\
  %one = scalar.constant 1 : i32
  %old = view.atomic.rmw<addi> %one, %bv[%n] {ordering = relaxed, scope = device} : i32, view<[%n]xi32> -> i32""",
                                   0, "out of bounds: %bv[16]"),
    "workgroup_alloca_overrun": ("""\
  %bytes = index.constant 16 : offset
  %scratch = buffer.alloca<workgroup> align(4) %bytes : buffer
  %sv = buffer.view %scratch[%off] : buffer -> view<8xi32>
  view.store %first, %sv[5] : i32, view<8xi32>""", 0, "out of bounds: %sv[5]"),
    "inside_a_device_function": ("""\
  %seven = index.constant 7 : index
  %x = func.call @peek(%a, %seven) : (buffer, index) -> (i32)
  view.store %x, %bv[0] : i32, view<[%n]xi32>""", 0, "out of bounds: %window[7]"),
    "divsi_by_zero": ("""\
  %seven = scalar.constant 7 : i32
  %q = scalar.divsi %seven, %first : i32
  view.store %q, %bv[0] : i32, view<[%n]xi32>""", 0, "undefined behaviour: division by zero"),
    "divsi_overflow": ("""\
  %minus = scalar.constant -1 : i32
  %q = scalar.divsi %first, %minus : i32
  view.store %q, %bv[0] : i32, view<[%n]xi32>""", -2147483648,
                       "undefined behaviour: signed division overflow (INT_MIN / -1)"),
    "remui_by_zero": ("""\
  %seven = scalar.constant 7 : i32
  %r = scalar.remui %seven, %first : i32
  view.store %r, %bv[0] : i32, view<[%n]xi32>""", 0, "undefined behaviour: division by zero"),
    "shift_too_far": ("""\
  %one = scalar.constant 1 : i32
  %s = scalar.shli %one, %first : i32
  view.store %s, %bv[0] : i32, view<[%n]xi32>""", 40, "undefined behaviour: shift amount 40 >= 32"),
    "index_div_by_zero": ("""\
  %seven = index.constant 7 : index
  %q = index.div %seven, %i : index
  %qi = index.cast %q : index to i32
  view.store %qi, %bv[0] : i32, view<[%n]xi32>""", 0,
                          "undefined behaviour: index.div needs a >= 0 and b > 0, got 7 and 0"),
    "index_shift_too_far": ("""\
  %amount = index.cast %first : i32 to index
  %one = index.constant 1 : index
  %s = index.shli %one, %amount : index
  %si = index.cast %s : index to i32
  view.store %si, %bv[0] : i32, view<[%n]xi32>""", 70, "undefined behaviour: shift amount 70 is outside [0, 63]"),
}


@pytest.fixture(scope="module")
def runner(vulkan_runner: VulkanRunner) -> VulkanRunner:
    return vulkan_runner


def run(path: Path, device: VulkanRunner | None, bench: str | None = None) -> tuple[Session, Collect]:
    out = Collect()
    profile = interpreter_profile(None) if device is None else vulkan_profile(None, device)
    session = Session(device, profile, out, quiet=True)
    session.run((str(path),), [], bench)
    return session, out


def shown(diags: list[Diagnostic]) -> list[tuple[str, int, int, str]]:
    return [(d.code, d.line, d.column, d.message) for d in diags]


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_device_run_reports_what_the_interpreter_reports(name: str, runner: VulkanRunner,
                                                            tmp_path: Path) -> None:
    body, start, message = FAULTS[name]
    path = tmp_path / f"{name}.loom"
    path.write_text(TEMPLATE.format(body=body, start=start))
    _, interpreted = run(path, None)
    session, device = run(path, runner)
    assert session.failed == 1 and interpreted.lines == device.lines == ["FAIL @c"]
    assert [d.message.removesuffix(" (sample @c)").split(" in `@")[0] for d in interpreted.diags] == [message]
    assert interpreted.diags[0].message.endswith(" (sample @c)")
    assert shown(device.diags) == shown(interpreted.diags)


def test_faults_in_many_invocations_report_one(runner: VulkanRunner, tmp_path: Path) -> None:
    """Every invocation stores past the end; one record comes back, one diagnostic."""
    body = "  %past = index.add %i, %n : index\n  view.store %first, %bv[%past] : i32, view<[%n]xi32>"
    text = TEMPLATE.format(body=body, start=0).replace(
        "kernel.launch.config workgroups(%c1, %c1, %c1) workgroup_size(%c1, %c1, %c1)",
        "%c16 = index.constant 16 : index\n"
        "  kernel.launch.config workgroups(%c1, %c1, %c1) workgroup_size(%c16, %c1, %c1)")
    path = tmp_path / "many.loom"
    path.write_text(text)
    session, device = run(path, runner)
    assert session.failed == 1
    assert len(device.diags) == 1 and device.diags[0].code == "EXEC/001"
    assert device.diags[0].message.startswith("out of bounds: %bv[") and device.diags[0].line == 20


def test_benchmarks_run_the_kernels_loom_compile_writes(runner: VulkanRunner, tmp_path: Path) -> None:
    """17.38: correctness runs instrumented, the timed runs do not; the timed
    SPIR-V is byte for byte what `loom compile` writes for the same target."""
    body = "  view.store %first, %bv[%i] : i32, view<[%n]xi32>"
    path = tmp_path / "bench.loom"
    path.write_text(TEMPLATE.format(body=body, start=3) + "\ncheck.benchmark<@c> @timed {}\n")
    session, out = run(path, runner, bench="")
    assert session.passed == 1 and any(line.startswith("BENCH @timed") for line in out.lines), out.lines
    [(f, _)] = session._benchmarks(session.loaded, "")
    assert f.program is not None and f.program.probes and f.bench_program is not None
    assert not f.bench_program.probes and f.bench_program.code != f.program.code
    spv = tmp_path / "k.spv"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    target = session.profile.name
    done = subprocess.run([sys.executable, "-m", "loomcli", "compile", str(path), "--target", target,
                           "-o", str(spv)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert spv.read_bytes() == f.bench_program.code


@pytest.mark.parametrize("name", list(FAULTS))
def test_the_cpu_device_reports_what_the_interpreter_reports(name: str, tmp_path: Path) -> None:
    """The same instrumentation on the cpu device (the LLVM lowering, run natively)."""
    from loomcli.check.cpu import CpuRunner
    from loomcli.check.session import cpu_profile

    body, start, message = FAULTS[name]
    path = tmp_path / f"{name}.loom"
    path.write_text(TEMPLATE.format(body=body, start=start))
    _, interpreted = run(path, None)
    cpu = CpuRunner(cpu_profile(None))
    try:
        out = Collect()
        session = Session(cpu, cpu.profile, out, quiet=True)
        session.run((str(path),), [], None)
    finally:
        cpu.close()
    assert session.failed == 1 and out.lines == ["FAIL @c"], out.lines
    assert [d.message.removesuffix(" (sample @c)").split(" in `@")[0] for d in out.diags] == [message]
    assert shown(out.diags) == shown(interpreted.diags)
