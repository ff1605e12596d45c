"""The cpu device against the reference interpreter, and its two ways of
running a workgroup.

    PYTHONPATH=<tree> python bench/cpu_bench.py [--rounds R] [--size N]

1. samples/matmul.loom's kernel on an N x N x N case (default 256): the
   time of one launch on the interpreter and on the cpu device (the whole
   launch as `loom test` makes it: the worker round trip and the buffer
   copies included), in alternating rounds; medians and their ratio.
2. A barrier-free kernel (saxpy, 2^20 elements) run by the work-item loop
   and, forced, as fibers: the native times' medians and their ratio (what
   the loop saves).

The machine this runs on may be shared: the figures are medians of paired
rounds and the ratios are what to quote.
"""

from __future__ import annotations

import argparse
import dataclasses
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


def matmul(rounds: int, n: int, runner: Any) -> None:
    from loomcli.check.cpu import CpuLauncher
    from loomcli.check.interpreter import InterpreterLauncher
    from loomcli.frontend import load_module
    from loomcli.service.front import CompileOptions, compile_module
    from loomcli.targets.profiles import REFERENCE

    with tempfile.TemporaryDirectory() as tmp:
        path = matmul_file(Path(tmp), n)
        module = load_module(str(path))
        reference = compile_module(CompileOptions(input=str(path), profile=REFERENCE, roots=["@matmul_f32"],
                                                  for_execution=True)).module
        program = program_for(path, runner.profile, ["@matmul_f32"])
        interp, cpu = [], []
        for _ in range(rounds):
            interp.append(run_case(module, InterpreterLauncher(reference, REFERENCE, str(path), 10**12), path, "big"))
            cpu.append(run_case(module, CpuLauncher(runner, program, str(path)), path, "big"))
            print(f"  round: interpreter {interp[-1]:.2f} s, cpu {cpu[-1] * 1e3:.1f} ms", flush=True)
    mi, mc = statistics.median(interp), statistics.median(cpu)
    print(f"matmul {n}x{n}x{n}: interpreter median {mi:.2f} s, cpu median {mc * 1e3:.1f} ms "
          f"({rounds} rounds): cpu {mi / mc:.0f}x faster")


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
    ap.add_argument("--skip-matmul", action="store_true")
    args = ap.parse_args()
    runner = CpuRunner(parse_target("cpu:x86-64"))
    try:
        loop_or_fibers(args.rounds, runner)
        if not args.skip_matmul:
            matmul(args.rounds, args.size, runner)
    finally:
        runner.close()


if __name__ == "__main__":
    main()
