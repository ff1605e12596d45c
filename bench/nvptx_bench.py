"""NVPTX code quality and compile time against clang (not a test).

    python bench/nvptx_bench.py [--repeat N] [--arch sm_90]

For saxpy, the reduction and matmul (samples/*.loom, and the same kernels in
CUDA C++ in bench/nvptx_kernels.cu; matmul also as `matmul/wide`, against a
.cu version whose element offsets are 64-bit as Loom's `offset` type is) it
prints, per kernel:

  * registers, from `ptxas -v` on each PTX (same ptxas, same -arch);
  * PTX instructions in the entry (lines ending in `;`, declarations aside);
  * SASS instructions: the cubin's `.text.<kernel>` size / 16 bytes (sm_70+
    encode each instruction in 128 bits; the size includes the end padding);
  * compile time, median of N runs: in process, the front end and passes
    (`compile_module`) and emission to .ptx and to .cubin per kernel; and
    `loom compile --no-cache` of saxpy in a fresh process against
    `clang-19 --cuda-device-only -nocudalib -nocudainc -O3 -S` of the .cu.

Goal: registers and instructions equal or better than clang's. Tools that are
missing are reported, not faked (clang-19 is `apt-get install clang-19`).
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
sys.path.insert(0, str(ROOT))

KERNELS = [("saxpy", "saxpy.loom"), ("sum_f32", "reduction.loom"), ("matmul_f32", "matmul.loom")]
# Rows of the table: (label, loom kernel, sample, the .cu kernel it is compared with). matmul twice: the .cu's
# 32-bit index arithmetic, and the 64-bit element offsets that Loom's `offset` type computes.
ROWS = [(k, k, s, k) for k, s in KERNELS] + [("matmul/wide", "matmul_f32", "matmul.loom", "matmul_f32_wide")]
CLANG = ["--cuda-device-only", "-nocudalib", "-nocudainc", "--no-cuda-version-check", "-O3", "-S", "-x", "cuda"]


def ptx_instructions(ptx: str, kernel: str) -> int:
    start = ptx.index(f".entry {kernel}(")
    body = ptx[ptx.index("{", start):]
    body = body[:body.index("\n}\n")]
    return sum(1 for line in body.splitlines()
               if line.strip().endswith(";") and not line.strip().startswith((".reg", ".shared", ".local", "//")))


def sass_instructions(cubin: bytes, kernel: str) -> int:
    from loomcli.emit.elf import read_elf

    section = read_elf(cubin).section(f".text.{kernel}")
    return section.size // 16 if section is not None else -1


def timed(argv: list[str], repeat: int, cwd: Path) -> float | None:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        r = subprocess.run(argv, cwd=cwd, capture_output=True)
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            print(f"  ({' '.join(argv[:4])} ... failed: {r.stderr.decode().strip()[:300]})")
            return None
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--arch", default="sm_90")
    args = ap.parse_args()
    from loomcli.emit.nvptx.ptxas import assemble, find_ptxas, version

    ptxas = find_ptxas()
    clang = shutil.which("clang-19")
    if ptxas is None:
        sys.exit("ptxas not found: pip install 'loom-compiler[cuda]'")
    print(f"ptxas {version(ptxas)} ({ptxas}); clang-19: {clang or 'missing'}; -arch={args.arch}")
    loom = [sys.executable, "-m", "loomcli"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        clang_ptx = ""
        clang_info = {}
        clang_cubin = b""
        if clang:
            subprocess.run([clang, *CLANG, f"--cuda-gpu-arch={args.arch}", str(ROOT / "bench" / "nvptx_kernels.cu"),
                            "-o", str(out / "clang.ptx")], check=True, capture_output=True)
            clang_ptx = (out / "clang.ptx").read_text()
            built = assemble(clang_ptx.encode(), args.arch, ptxas)
            clang_info, clang_cubin = built.kernels, built.cubin
        print(f"{'kernel':<11} {'regs loom/clang':>16} {'PTX insts loom/clang':>21} {'SASS insts loom/clang':>22}")
        for label, kernel, sample, theirs_name in ROWS:
            path = str(ROOT / "samples" / sample)
            subprocess.run(loom + ["compile", path, "--target", f"nvptx:{args.arch}", "-o", str(out / "k.ptx"),
                                   "--no-cache"], check=True, capture_output=True)
            ptx = (out / "k.ptx").read_text()
            built = assemble(ptx.encode(), args.arch, ptxas)
            ours = (built.kernels[kernel].registers, ptx_instructions(ptx, kernel),
                    sass_instructions(built.cubin, kernel))
            theirs = ((clang_info[theirs_name].registers, ptx_instructions(clang_ptx, theirs_name),
                       sass_instructions(clang_cubin, theirs_name)) if clang else ("-", "-", "-"))
            print(f"{label:<11} {f'{ours[0]}/{theirs[0]}':>16} {f'{ours[1]}/{theirs[1]}':>21} "
                  f"{f'{ours[2]}/{theirs[2]}':>22}")
        print(f"\ncompile time, median of {args.repeat}")
        print("  in process: front end + passes, then emission (lowering, LLVM in the warm worker, ptxas)")
        from loomcli.emit.artifacts import emit
        from loomcli.emit.llvm.backend import start_worker
        from loomcli.service.front import CompileOptions, compile_module
        from loomcli.targets.profiles import parse_target

        profile = parse_target(f"nvptx:{args.arch}")
        start_worker()
        for kernel, sample in KERNELS:
            path = str(ROOT / "samples" / sample)
            front, to_ptx, to_cubin = [], [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                module = compile_module(CompileOptions(input=path, profile=profile)).module
                t1 = time.perf_counter()
                emit(module, profile, "nvptx-ptx")
                t2 = time.perf_counter()
                emit(module, profile, "nvptx-cubin")
                t3 = time.perf_counter()
                front.append(t1 - t0)
                to_ptx.append(t2 - t1)
                to_cubin.append(t3 - t2)
            print(f"  {kernel:<11} front end {statistics.median(front) * 1e3:6.0f} ms   .ptx "
                  f"{statistics.median(to_ptx) * 1e3:6.0f} ms   .cubin {statistics.median(to_cubin) * 1e3:6.0f} ms")
        print("  one process per run (what a build step pays, start-up and worker included):")
        base = loom + ["compile", str(ROOT / "samples" / "saxpy.loom"), "--target", f"nvptx:{args.arch}",
                       "--no-cache", "-o"]
        t_ptx = timed(base + ["k.ptx"], args.repeat, out)
        t_cubin = timed(base + ["k.cubin"], args.repeat, out)
        t_clang = timed([clang, *CLANG, f"--cuda-gpu-arch={args.arch}", str(ROOT / "bench" / "nvptx_kernels.cu"),
                         "-o", "c.ptx"], args.repeat, out) if clang else None

        def ms(t: float | None) -> str:
            return f"{t * 1e3:.0f} ms" if t is not None else "-"

        print(f"  saxpy: loom .ptx {ms(t_ptx)}, loom .cubin {ms(t_cubin)}; "
              f"clang-19 .ptx of all three kernels {ms(t_clang)}")

if __name__ == "__main__":
    main()
