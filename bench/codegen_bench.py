"""Code generation benchmarks: medians and ratios in one run (not a test).

    python bench/codegen_bench.py [--repeat N]

Rows:
  loom saxpy -> .hsaco   vs  clang-19 -x cl -target amdgcn-amd-amdhsa -mcpu=gfx1100 -O3 -nogpulib  (bench/saxpy.cl)
  loom saxpy -> .spv     vs  glslc --target-env=vulkan1.3                                            (bench/saxpy.comp)
  one module for three targets at once (--out-dir) vs for one target (the front end runs once)
Goal: ratios at most 1.0 against clang and glslc. Tools that are missing are reported, not faked.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def installed_like() -> None:
    """Time loom as an installed package runs: with its bytecode cached (pip
    compiles it at install time). Some shells set PYTHONDONTWRITEBYTECODE,
    which would make every run compile every module from source."""
    import compileall
    import os

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compileall.compile_dir(str(ROOT / "loomcli"), quiet=1)


def median_run(argv: list[str], repeat: int, cwd: Path) -> float | None:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        r = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            print(f"  ({' '.join(argv[:3])} ... failed: {r.stderr.decode().strip()[:200]})")
            return None
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=11)
    args = ap.parse_args()
    loom = [sys.executable, "-m", "loomcli"]
    installed_like()
    rows: list[tuple[str, float | None, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        saxpy = str(ROOT / "samples" / "saxpy.loom")
        t_hsaco = median_run(loom + ["compile", saxpy, "--target", "amdgpu:gfx1100", "-o", "s.hsaco"], args.repeat, out)
        clang = shutil.which("clang-19")
        t_clang = (median_run([clang, "-x", "cl", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-O3",
                               "-nogpulib", str(BENCH / "saxpy.cl"), "-o", "c.hsaco"], args.repeat, out)
                   if clang else None)
        rows.append(("loom saxpy -> .hsaco", t_hsaco, ""))
        rows.append(("clang-19 saxpy.cl -> .hsaco", t_clang, "missing" if not clang else ""))
        t_spv = median_run(loom + ["compile", saxpy, "--target", "spirv:vulkan1.3", "-o", "s.spv"], args.repeat, out)
        glslc = shutil.which("glslc")
        t_glslc = (median_run([glslc, "--target-env=vulkan1.3", str(BENCH / "saxpy.comp"), "-o", "g.spv"],
                              args.repeat, out) if glslc else None)
        rows.append(("loom saxpy -> .spv", t_spv, ""))
        rows.append(("glslc saxpy.comp -> .spv", t_glslc, "missing" if not glslc else ""))
        matmul = str(ROOT / "samples" / "matmul.loom")
        one = median_run(loom + ["compile", matmul, "--out-dir", "one", "--target", "amdgpu:gfx1100"], args.repeat, out)
        three = median_run(loom + ["compile", matmul, "--out-dir", "three", "--target", "amdgpu:gfx1100",
                                   "--target", "amdgpu:gfx942", "--target", "spirv:vulkan1.3"], args.repeat, out)
        rows.append(("matmul, one target", one, ""))
        rows.append(("matmul, three targets at once", three, ""))
    print(f"{'benchmark':<32} {'median':>10}   (n={args.repeat})")
    for name, t, note in rows:
        print(f"{name:<32} {t * 1e3:>8.1f} ms  {note}" if t is not None else f"{name:<32} {'-':>10}   {note}")

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}" if a and b else "n/a"

    print(f"ratio loom/clang (.hsaco): {ratio(t_hsaco, t_clang)}   (goal <= 1.0)")
    print(f"ratio loom/glslc (.spv):   {ratio(t_spv, t_glslc)}   (goal <= 1.0)")
    print(f"three targets / one target: {ratio(three, one)}")


if __name__ == "__main__":
    main()
