"""AMDGPU code quality against clang-19: VGPRs, SGPRs, instructions, LDS and
spills per kernel, read from the code objects' metadata (gfx1100, -O3).

    python bench/code_quality.py [--chip gfx1100] [--matmul-experiments]

Kernels: saxpy, the reduction and matmul (samples/), a tiled transpose and
a 3-point stencil (bench/quality/); each has an OpenCL C twin in
bench/quality/*.cl, compiled with `clang-19 -x cl -O3 -nogpulib`. A ratio
is loom / clang (goal <= 1.0). Missing tools are reported, not faked.

`--matmul-experiments` compiles matmul's VGPR count several ways, to see
what decides it: Loom's default pipeline through the bundled LLVM; with
Loom's `unroll` pass added (the 16-step inner loop unrolled before LLVM);
and Loom's LLVM IR (`-o x.ll`) through LLVM 19's `llc -O3`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUALITY = ROOT / "bench" / "quality"
KERNELS = [  # (name, loom source, OpenCL twin)
    ("saxpy", ROOT / "samples" / "saxpy.loom", QUALITY / "saxpy.cl"),
    ("reduction", ROOT / "samples" / "reduction.loom", QUALITY / "reduction.cl"),
    ("matmul", ROOT / "samples" / "matmul.loom", QUALITY / "matmul.cl"),
    ("transpose", QUALITY / "transpose.loom", QUALITY / "transpose.cl"),
    ("stencil", QUALITY / "stencil.loom", QUALITY / "stencil.cl"),
]
FIELDS = {"vgpr": r"\.vgpr_count:\s+(\d+)", "sgpr": r"\.sgpr_count:\s+(\d+)",
          "lds": r"\.group_segment_fixed_size:\s+(\d+)", "vgpr_spill": r"\.vgpr_spill_count:\s+(\d+)",
          "sgpr_spill": r"\.sgpr_spill_count:\s+(\d+)"}
INSTRUCTION = re.compile(r"^\s+(?:s_|v_|global_|buffer_|ds_|flat_|scratch_)\w*", re.M)


def stats(asm: str) -> dict[str, int]:
    """Metadata numbers of the first kernel in an assembly file, plus its instruction count."""
    out = {k: int(m.group(1)) if (m := re.search(p, asm)) else -1 for k, p in FIELDS.items()}
    body = asm.split(".Lfunc_end0")[0]
    out["instructions"] = len(INSTRUCTION.findall(body))
    return out


def loom_asm(src: Path, chip: str, tmp: str, pipeline: str = "default") -> str:
    out = os.path.join(tmp, src.stem + ".s")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "loomcli", "compile", str(src), "--target", f"amdgpu:{chip}",
                    "--pipeline", pipeline, "-o", out], check=True, env=env, capture_output=True)
    return Path(out).read_text()


def clang_asm(src: Path, chip: str, tmp: str, clang: str) -> str:
    out = os.path.join(tmp, src.stem + ".cl.s")
    subprocess.run([clang, "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", f"-mcpu={chip}", "-O3",
                    "-nogpulib", "-S", "-o", out, str(src)], check=True, capture_output=True)
    return Path(out).read_text()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chip", default="gfx1100")
    ap.add_argument("--matmul-experiments", action="store_true")
    args = ap.parse_args()
    clang = shutil.which("clang-19")
    keys = ["vgpr", "sgpr", "instructions", "lds", "vgpr_spill", "sgpr_spill"]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'kernel':<10} {'metric':<13} {'loom':>6} {'clang-19':>9} {'ratio':>6}")
        for name, loom_src, cl_src in KERNELS:
            ours = stats(loom_asm(loom_src, args.chip, tmp))
            theirs = stats(clang_asm(cl_src, args.chip, tmp, clang)) if clang else None
            for k in keys:
                c = theirs[k] if theirs else None
                ratio = f"{ours[k] / c:.2f}" if c else ("-" if c == 0 and ours[k] == 0 else "n/a")
                print(f"{name:<10} {k:<13} {ours[k]:>6} {c if c is not None else 'missing':>9} {ratio:>6}")
        if clang is None:
            print("clang-19: missing (install clang-19 for the comparison)")
        if args.matmul_experiments:
            matmul = ROOT / "samples" / "matmul.loom"
            print("\nmatmul VGPRs by route:")
            print(f"  loom default pipeline, bundled LLVM:      {stats(loom_asm(matmul, args.chip, tmp))['vgpr']}")
            unrolled = loom_asm(matmul, args.chip, tmp, "inline,canonicalize,unroll,canonicalize,cse,dce")
            print(f"  loom with its unroll pass, bundled LLVM:  {stats(unrolled)['vgpr']}")
            llc = shutil.which("llc-19") or "/usr/lib/llvm-19/bin/llc"
            if os.path.exists(llc):
                ll = os.path.join(tmp, "matmul.ll")
                env = dict(os.environ, PYTHONPATH=str(ROOT))
                subprocess.run([sys.executable, "-m", "loomcli", "compile", str(matmul), "--target",
                                f"amdgpu:{args.chip}", "-o", ll], check=True, env=env, capture_output=True)
                for extra in ([], ["-amdgpu-schedule-metric-bias=100"]):
                    s = os.path.join(tmp, "matmul.llc.s")
                    r = subprocess.run([llc, "-O3", "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={args.chip}", *extra,
                                        "-o", s, ll], capture_output=True, text=True)
                    label = "loom IR through llc-19 -O3" + (" " + " ".join(extra) if extra else "")
                    got = stats(Path(s).read_text())["vgpr"] if r.returncode == 0 else r.stderr.strip()[:80]
                    print(f"  {label + ':':<42}{got}")
            if clang:
                theirs = stats(clang_asm(QUALITY / "matmul.cl", args.chip, tmp, clang))["vgpr"]
                print(f"  clang-19 OpenCL:                          {theirs}")


if __name__ == "__main__":
    main()
