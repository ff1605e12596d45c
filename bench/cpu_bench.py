"""The cpu device against the reference interpreter, and its two ways of
running a workgroup.

    PYTHONPATH=<tree> python bench/cpu_bench.py [--rounds R] [--size N] [--interpreter-size M]

1. samples/matmul.loom's kernel on an N x N x N case (default 256): the
   time of one launch on the interpreter and on the cpu device (the whole
   launch as `loom test` makes it: the worker round trip and the buffer
   copies included), in alternating rounds; medians and their ratio, in
   wall time and in CPU time (user + system of the process that ran it).
   With `--interpreter-size M` the interpreter runs an M x M x M case
   instead (both devices run it too, to show the scaling), and its time is
   extrapolated to N by the work, (N / M)^3: the interpreter's time per
   multiply-add is the same at every size (one invocation's loop body is
   the same ops, M or N times), which the M-sized rounds of the cpu device
   and the printed per-element times let one check.
2. A barrier-free kernel (saxpy, 2^20 elements) run by the work-item loop
   and, forced, as fibers: the native times' medians and their ratio (what
   the loop saves).

The machine this runs on may be shared: the figures are medians of paired
rounds and the ratios are what to quote.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def matmul_file(folder: Path, n: int) -> Path:
    kernel = (ROOT / "samples" / "matmul.loom").read_text().split("check.case")[0]
    t = f"tensor<{n}x{n}xf32>"
    case = f"""check.case @big {{
  %m = check.literal value({n}) : index
  %a = check.generate.fill value(1.0) : tensor<{n}x{n}xf32>
  %b = check.generate.fill value(2.0) : tensor<{n}x{n}xf32>
  %c = check.generate.fill value(0.0) : tensor<{n}x{n}xf32>
  %want = check.generate.fill value({2.0 * n}) : tensor<{n}x{n}xf32>
  kernel.launch @matmul_f32[%m, %m](%m, %m, %m, %a, %b, %c) : [index, index](index, index, index, {t}, {t}, {t})
  check.expect.equal actual(%c) expected(%want) : tensor<{n}x{n}xf32>
  check.return
}}
"""
    path = folder / "matmul_big.loom"
    path.write_text(kernel + case)
    return path


class Timed:
    """A launcher whose launches are timed."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.times = inner, []

    def launch(self, op: Any, workload: Any, args: Any) -> None:
        start = time.perf_counter()
        self.inner.launch(op, workload, args)
        self.times.append(time.perf_counter() - start)


def run_case(module: Any, launcher: Any, path: Path, name: str) -> float:
    from loomcli.check.cases import CaseRunner

    timed = Timed(launcher)
    [result] = CaseRunner(module, timed, path=str(path)).run_case(module.symbols()[name])
    if not result.passed:
        raise SystemExit(f"@{name} failed: {result.diagnostics}")
    return timed.times[0]


def program_for(path: Path, profile: Any, roots: list[str]) -> Any:
    from loomcli.check.launch import Program
    from loomcli.emit.artifacts import emit
    from loomcli.service.front import CompileOptions, compile_module

    compiled = compile_module(CompileOptions(input=str(path), profile=profile, roots=roots, for_execution=True))
    art = emit(compiled.module, profile, "cpu-object")
    return Program.build(compiled.module, profile, art.data, art.kernels, target_checked=True)


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time of this process (or of `pid`, from /proc)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def matmul(rounds: int, n: int, m: int, runner: Any) -> None:
    from loomcli.check.cpu import CpuLauncher
    from loomcli.check.interpreter import InterpreterLauncher
    from loomcli.frontend import load_module
    from loomcli.service.front import CompileOptions, compile_module
    from loomcli.targets.profiles import REFERENCE

    scale = (n / m) ** 3
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "small").mkdir()
        big, small = matmul_file(folder, n), matmul_file(folder / "small", m)
        big_module, small_module = load_module(str(big)), load_module(str(small))
        reference = compile_module(CompileOptions(input=str(small), profile=REFERENCE, roots=["@matmul_f32"],
                                                  for_execution=True)).module
        program = program_for(big, runner.profile, ["@matmul_f32"])
        small_program = program_for(small, runner.profile, ["@matmul_f32"])
        runner.start()
        worker = runner.worker.proc.pid
        interp, interp_cpu, cpu, cpu_cpu, cpu_small = [], [], [], [], []
        for _ in range(rounds):
            c0 = cpu_seconds()
            interp.append(run_case(small_module, InterpreterLauncher(reference, REFERENCE, str(small), 10**12),
                                   small, "big"))
            interp_cpu.append(cpu_seconds() - c0)
            c0, w0 = cpu_seconds(), cpu_seconds(worker)
            cpu.append(run_case(big_module, CpuLauncher(runner, program, str(big)), big, "big"))
            cpu_cpu.append(cpu_seconds() - c0 + cpu_seconds(worker) - w0)
            if m != n:
                cpu_small.append(run_case(small_module, CpuLauncher(runner, small_program, str(small)), small, "big"))
            print(f"  round: interpreter {m}^3 {interp[-1]:.2f} s (cpu time {interp_cpu[-1]:.2f} s), "
                  f"cpu device {n}^3 {cpu[-1] * 1e3:.1f} ms (cpu time {cpu_cpu[-1] * 1e3:.0f} ms)", flush=True)
    mi, mic = statistics.median(interp) * scale, statistics.median(interp_cpu) * scale
    mc, mcc = statistics.median(cpu), statistics.median(cpu_cpu)
    where = f"measured at {m}^3 and scaled by (N/M)^3 = {scale:.0f}, " if m != n else ""
    print(f"matmul {n}x{n}x{n}: interpreter median {mi:.1f} s ({where}cpu time {mic:.1f} s), "
          f"cpu device median {mc * 1e3:.1f} ms (cpu time {mcc * 1e3:.0f} ms), {rounds} rounds: "
          f"cpu {mi / mc:.0f}x faster (cpu time {mic / mcc:.0f}x)")
    if cpu_small:
        print(f"  cpu device at {m}^3: median {statistics.median(cpu_small) * 1e3:.2f} ms; "
              f"per multiply-add: interpreter {statistics.median(interp) / m ** 3 * 1e6:.2f} us")


def loop_or_fibers(rounds: int, runner: Any) -> None:
    """saxpy's kernel, native times by the work-item loop and as fibers."""
    from loomcli.check.launch import pack_push_constants

    program = program_for(ROOT / "samples" / "saxpy.loom", runner.profile, ["@saxpy"])
    entry = program.kernels["saxpy"]
    assert not entry.manifest["fibers"]
    fibers = dataclasses.replace(entry, manifest=dict(entry.manifest, fibers=True))
    n = 1 << 20
    args = {p.index: 0 for p in entry.abi.params}
    for p in entry.abi.scalars:
        args[p.index] = n if p.type in ("index", "i32", "i64") else 2.0
    kernarg = pack_push_constants(entry.abi, [args[i] for i in range(len(args))])
    buffers = [bytearray(4 * n) for _ in entry.abi.buffers]
    pointers = [(p.byte_offset, k) for k, p in enumerate(entry.abi.buffers)]
    groups = ((n + 255) // 256, 1, 1)
    size = (256, 1, 1)
    loop, fiber = [], []
    for _ in range(rounds):
        loop.append(statistics.median(runner.run(program, entry, groups, size, kernarg, buffers, pointers, True)))
        fiber.append(statistics.median(runner.run(program, fibers, groups, size, kernarg, buffers, pointers, True)))
    ml, mf = statistics.median(loop), statistics.median(fiber)
    print(f"saxpy 2^20: work-item loop median {ml / 1e6:.2f} ms, fibers median {mf / 1e6:.2f} ms "
          f"({rounds} rounds): fibers cost {mf / ml:.1f}x")


def main() -> None:
    from loomcli.check.cpu import CpuRunner
    from loomcli.targets.profiles import parse_target

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--interpreter-size", type=int, default=None, metavar="M",
                    help="run the interpreter at M^3 and extrapolate to --size (default: --size)")
    ap.add_argument("--skip-matmul", action="store_true")
    ap.add_argument("--skip-saxpy", action="store_true")
    args = ap.parse_args()
    runner = CpuRunner(parse_target("cpu:x86-64"))
    try:
        if not args.skip_saxpy:
            loop_or_fibers(args.rounds, runner)
        if not args.skip_matmul:
            matmul(args.rounds, args.size, args.interpreter_size or args.size, runner)
    finally:
        runner.close()


if __name__ == "__main__":
    main()
