"""Front-end benchmarks: prints a table of medians (not a test; no timing asserts).

    python bench/run.py [--repeat N] [--bytes B]

Rows:
  startup      `loom --version` against `python3 -c pass` (target: ratio <= 3)
  parse+verify text throughput on a generated ~1 MB module (target: >= 2 MB/s)
  bc write     bytecode writing throughput
  bc read      bytecode reading throughput (target: >= 3x text parse)
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.generate import generate


def median_time(fn, repeat: int) -> float:
    """Median wall time; garbage left by earlier runs is collected before each
    run so one run does not pay for another (as `timeit` does)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_process(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--bytes", type=int, default=1_000_000)
    args = ap.parse_args()

    from loomcli.bytecode import read_module, write_module
    from loomcli.ir.verifier import verify
    from loomcli.text.parser import parse

    rows: list[tuple[str, str, str]] = []
    # Time loom as an installed package runs: bytecode cached (pip compiles it at
    # install time), whatever PYTHONDONTWRITEBYTECODE this shell sets.
    import compileall

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "loomcli"), quiet=1)
    loom = shutil.which("loom")
    launcher = [loom] if loom else [sys.executable, "-m", "loomcli"]
    # Resolve shims (pyenv) once so both commands pay the same launcher cost.
    base = median_time(lambda: run_process([sys.executable, "-c", "pass"]), args.repeat)
    start = median_time(lambda: run_process([sys.executable, "-m", "loomcli", "--version"]), args.repeat)
    rows.append(("startup: python3 -c pass", f"{base * 1e3:.1f} ms", ""))
    rows.append(("startup: loom --version", f"{start * 1e3:.1f} ms", f"{start / base:.2f}x python (target <= 3x)"))
    if loom:
        script = median_time(lambda: run_process(launcher + ["--version"]), args.repeat)
        rows.append(("startup: loom script", f"{script * 1e3:.1f} ms", "console script incl. launcher"))

    text = generate(args.bytes)
    mb = len(text.encode()) / 1e6

    def parse_verify() -> None:
        module, findings = parse(text, "bench.loom")
        verify(module, findings)

    t_parse = median_time(parse_verify, args.repeat)
    rows.append((f"parse+verify ({mb:.2f} MB)", f"{t_parse * 1e3:.0f} ms", f"{mb / t_parse:.2f} MB/s (target >= 2)"))
    t_parse_only = median_time(lambda: parse(text, "bench.loom"), args.repeat)
    rows.append(("parse only", f"{t_parse_only * 1e3:.0f} ms", f"{mb / t_parse_only:.2f} MB/s"))

    module, _ = parse(text, "bench.loom")
    data = write_module(module)
    t_write = median_time(lambda: write_module(module), args.repeat)
    t_read = median_time(lambda: read_module(data, "bench.loombc"), args.repeat)
    bmb = len(data) / 1e6
    rows.append((f"bytecode write ({bmb:.2f} MB)", f"{t_write * 1e3:.0f} ms", f"{mb / t_write:.2f} MB/s of text"))
    rows.append(("bytecode read", f"{t_read * 1e3:.0f} ms",
                 f"{t_parse_only / t_read:.2f}x faster than text parse (target >= 3x)"))

    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{width}}  {'median':>10}  notes   (n={args.repeat}, cpus={os.cpu_count()})")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>10}  {note}")


if __name__ == "__main__":
    main()
