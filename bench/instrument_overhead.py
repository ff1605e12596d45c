"""What the instrumentation of `loom test` builds costs on a Vulkan device.

    PYTHONPATH=<tree> python bench/instrument_overhead.py [--rounds 7]

For each workload (a memory-bound saxpy of 2^20 elements, a 256x256x256
tiled matmul staging tiles in workgroup memory) the kernels
are compiled once, then emitted twice: as built (what `loom compile` and
`loom test --bench` run) and instrumented (what `loom test` checks with,
LANGUAGE.md 17.37). Rounds alternate the two sides (the order flips every
round); each side times the case's launches the way `--bench` does (device
timestamps, at least 5 runs, median). Printed per workload: the median of
the per-round ratios instrumented / plain, both sides' median device times,
and the median process CPU time (user + sys, lavapipe's threads included)
one dispatch took, which load on a shared machine disturbs less than wall
time.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
from pathlib import Path
from typing import Any

from loomcli.check.cases import CaseRunner, samples
from loomcli.check.launch import Program, Timing, VulkanLauncher
from loomcli.check.vulkan import VulkanRunner
from loomcli.emit.artifacts import emit
from loomcli.frontend import load_module
from loomcli.ir.clone import clone_module
from loomcli.passes.instrument import instrument
from loomcli.service.front import CompileOptions, compile_module
from loomcli.targets.profiles import parse_target

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def kernels_of(sample: str) -> str:
    """A sample's text up to its first check case."""
    text = (SAMPLES / sample).read_text()
    return text[:text.index("check.case")]


WORKLOADS = {
    "saxpy n=2^20": kernels_of("saxpy.loom") + """\
check.case @w {
  %n = check.literal value(1048576) : index
  %a = check.literal value(2.0) : f32
  %x = check.generate.iota offset(0.0) step(1.0) : tensor<[%n]xf32>
  %y = check.generate.fill value(1.0) : tensor<[%n]xf32>
  kernel.launch @saxpy[%n](%n, %a, %x, %y) : [index](index, f32, tensor<[%n]xf32>, tensor<[%n]xf32>)
  check.return
}
""",
    "matmul 256^3": kernels_of("matmul.loom") + """\
check.case @w {
  %m = check.literal value(256) : index
  %a = check.generate.fill value(1.0) : tensor<256x256xf32>
  %b = check.generate.fill value(2.0) : tensor<256x256xf32>
  %c = check.generate.fill value(0.0) : tensor<256x256xf32>
  kernel.launch @matmul_f32[%m, %m](%m, %m, %m, %a, %b, %c) : [index, index](index, index, index, \
tensor<256x256xf32>, tensor<256x256xf32>, tensor<256x256xf32>)
  check.return
}
""",
}


def programs(path: Path, runner: VulkanRunner) -> tuple[Program, Program]:
    profile = parse_target(f"spirv:{runner.info.vulkan_env}")
    roots = sorted({"@" + op.attr("callee") for op in load_module(str(path)).walk() if op.name == "kernel.launch"})
    compiled = compile_module(CompileOptions(input=str(path), profile=profile, roots=roots, for_execution=True))
    plain = clone_module(compiled.module)
    probes = instrument(compiled.module, profile)

    def build(module, probes):  # type: ignore[no-untyped-def]
        artifact = emit(module, profile, "spirv-binary")
        return Program.build(module, profile, artifact.data, artifact.kernels, target_checked=True, probes=probes)
    return build(plain, {}), build(compiled.module, probes)


def time_side(runner: VulkanRunner, program: Program, path: Path) -> tuple[float, float]:
    """(median device ns of the case's launches, CPU seconds per dispatch) of one timed run."""
    module = load_module(str(path))
    case = module.symbols()["w"]
    timings: list[Timing] = []
    spent = [0.0]
    dispatch = runner.dispatch

    def timed_dispatch(*args: Any, **kw: Any) -> list[float]:
        before = resource.getrusage(resource.RUSAGE_SELF)
        try:
            return dispatch(*args, **kw)
        finally:
            after = resource.getrusage(resource.RUSAGE_SELF)
            spent[0] += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    runner.dispatch = timed_dispatch  # type: ignore[method-assign]
    try:
        CaseRunner(module, VulkanLauncher(runner, program, str(path), timings), path=str(path)).run_sample(
            case, samples(case)[0])
    finally:
        runner.dispatch = dispatch  # type: ignore[method-assign]
    runs = sum(len(t.times) for t in timings)
    return sum(t.median_ns for t in timings), spent[0] / max(runs, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    runner = VulkanRunner()
    print(f"device: {runner.info.describe()}; {args.rounds} rounds, order alternating")
    try:
        with tempfile.TemporaryDirectory() as folder:
            for name, text in WORKLOADS.items():
                path = Path(folder) / "w.loom"
                path.write_text(text)
                plain, instrumented = programs(path, runner)
                ratios, times = [], {"plain": [], "instrumented": []}
                cpu: dict[str, list[float]] = {"plain": [], "instrumented": []}
                for r in range(args.rounds):
                    sides = [("plain", plain), ("instrumented", instrumented)]
                    got = {}
                    for side, program in sides if r % 2 == 0 else sides[::-1]:
                        ns, seconds = time_side(runner, program, path)
                        got[side] = ns
                        times[side].append(ns)
                        cpu[side].append(seconds)
                    ratios.append(got["instrumented"] / got["plain"])
                print(f"{name}: instrumented/plain {statistics.median(ratios):.2f}x "
                      f"(rounds {min(ratios):.2f}..{max(ratios):.2f}); median device time "
                      f"plain {statistics.median(times['plain']) / 1e6:.3f} ms, "
                      f"instrumented {statistics.median(times['instrumented']) / 1e6:.3f} ms; "
                      f"CPU per dispatch plain {statistics.median(cpu['plain']) * 1e3:.1f} ms, "
                      f"instrumented {statistics.median(cpu['instrumented']) * 1e3:.1f} ms")
    finally:
        runner.close()


if __name__ == "__main__":
    main()
