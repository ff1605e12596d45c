"""`loom build` benchmark: medians and ratios in one run (not a test).

    python bench/build_bench.py [--repeat N] [--kernels 200] [--sets 50]

A generated project of 200 small, distinct kernels in 50 kernel sets with
one library, for amdgpu:gfx1100, against the same kernels as 200 OpenCL C
files built by `make -j2` with clang-19 (`-x cl -target amdgcn-amd-amdhsa
-mcpu=gfx1100 -O3 -nogpulib`, one linked code object per file).

Rows and goals:
  loom build -j2 cold (empty cache)     at least 3x faster than make -j2 + clang-19
  loom build -j1 cold                   -j2 at least 1.8x faster than -j1
  loom build -j2 no-op                  at most 3% of the cold -j2 build
  loom build -j2 cache-only (outputs deleted)  at most 15% of the cold -j2 build
  peak memory of each worker, the fork server and the coordinator
                                        (RSS as VmHWM, and PSS)
The interpreter's own start-up (`python -c pass`, this Python with its
site hooks) is timed too: every `loom` run pays it, and a no-op build is
little more, so the no-op row is also shown beyond it.
Missing tools are reported, not faked.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPS = ("fmaf", "addf", "mulf")

LIBRARY = """\
// The library every kernel set links against.
func.def public pure inline @mix(%a: f32, %b: f32) -> (f32) {
  %h = scalar.constant 0.5 : f32
  %r = scalar.fmaf %a, %h, %b : f32
  func.return %r : f32
}
"""

LIBRARY_CL = """\
// OpenCL twin of lib/mix.loom.
static inline float mix_ab(float a, float b) { return fma(a, 0.5f, b); }
"""


def kernel_text(i: int) -> tuple[str, str]:
    """Kernel i in Loom and in OpenCL C: a chain of 1-3 arithmetic steps with distinct constants."""
    steps = 1 + i % 3
    loom_body, cl_body = [], []
    prev, prev_cl = "%xi", "xi"
    for s in range(steps):
        c = f"{1.0 + i * 0.01 + s * 0.5:.2f}"
        op = OPS[(i + s) % len(OPS)]
        loom_body.append(f"    %c{s} = scalar.constant {c} : f32")
        if op == "fmaf":
            loom_body.append(f"    %t{s} = scalar.fmaf {prev}, %c{s}, %yi : f32")
            cl_body.append(f"float t{s} = fma({prev_cl}, {c}f, yi);")
        else:
            loom_body.append(f"    %t{s} = scalar.{op} {prev}, %c{s} : f32")
            cl_body.append(f"float t{s} = {prev_cl} {'+' if op == 'addf' else '*'} {c}f;")
        prev, prev_cl = f"%t{s}", f"t{s}"
    group = (64, 128, 256)[i % 3]
    loom = f"""\
func.decl public pure @mix(%a: f32, %b: f32) -> (f32)

kernel.def export("k{i}") @k{i}(%n: index) {{
  %one = index.constant 1 : index
  %group = index.constant {group} : index
  %bias = index.constant {group - 1} : index
  %padded = index.add %n, %bias : index
  %groups = index.div %padded, %group : index
  kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%group, %one, %one) : index
}} launch(%n: index, %x: buffer, %y: buffer) {{
  %zero = index.constant 0 : offset
  %i = kernel.workitem.dispatch.id<x> : index
  %xv = buffer.view %x[%zero] : buffer -> view<[%n]xf32>
  %yv = buffer.view %y[%zero] : buffer -> view<[%n]xf32>
  %live = index.cmp ult, %i, %n : index
  scf.if %live {{
    %xi = view.load %xv[%i] : view<[%n]xf32> -> f32
    %yi = view.load %yv[%i] : view<[%n]xf32> -> f32
{chr(10).join(loom_body)}
    %r = func.call pure @mix({prev}, %xi) : (f32, f32) -> (f32)
    view.store %r, %yv[%i] : f32, view<[%n]xf32>
  }}
  kernel.return
}}
"""
    cl = f"""\
#include "mix.h"
__kernel __attribute__((reqd_work_group_size({group}, 1, 1)))
void k{i}(long n, __global const float* restrict x, __global float* restrict y) {{
  size_t i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x();
  if (i < (size_t)n) {{
    float xi = x[i];
    float yi = y[i];
    {' '.join(cl_body)}
    y[i] = mix_ab({prev_cl}, xi);
  }}
}}
"""
    return loom, cl


def generate(folder: Path, kernels: int, sets: int) -> tuple[Path, Path]:
    project = folder / "project"
    (project / "lib").mkdir(parents=True)
    (project / "lib" / "mix.loom").write_text(LIBRARY)
    cl = folder / "opencl"
    cl.mkdir()
    (cl / "mix.h").write_text(LIBRARY_CL)
    toml = ['[project]\nname = "bench"\nversion = "1.0"\n\n[build]\ntargets = ["amdgpu:gfx1100"]\n',
            '[[library]]\nname = "mix"\nsrcs = ["lib/mix.loom"]\n']
    per_set = kernels // sets
    for s in range(sets):
        d = project / "kernels" / f"set{s}"
        d.mkdir(parents=True)
        for j in range(per_set):
            i = s * per_set + j
            loom, c = kernel_text(i)
            (d / f"k{i}.loom").write_text(loom)
            (cl / f"k{i}.cl").write_text(c)
        toml.append(f'[[kernels]]\nname = "set{s}"\nsrcs = ["kernels/set{s}/*.loom"]\nlibraries = ["mix"]\n')
    (project / "loom.toml").write_text("\n".join(toml))
    names = " ".join(f"k{i}.hsaco" for i in range(sets * per_set))
    (cl / "Makefile").write_text(
        f"CLANG ?= clang-19\nall: {names}\n%.hsaco: %.cl mix.h\n"
        "\t$(CLANG) -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=gfx1100 -O3 -nogpulib $< -o $@\n")
    return project, cl


CPU: dict[str, list[float]] = {}


def timed(argv: list[str], cwd: Path, env: dict[str, str], key: str = "") -> float:
    """Wall seconds of one run; the CPU seconds of it and every process it
    waited for (workers, clang) go to CPU[key]. On a shared machine CPU time
    is the steadier figure."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed: {r.stderr.decode()[-800:]}")
    CPU.setdefault(key, []).append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return dt


class PeakMemory:
    """Samples the coordinator, the fork server and the pool workers while a
    build runs: peak RSS (VmHWM, shared pages counted in full) and peak PSS
    (shared pages split among the processes that share them: what a forked
    worker really adds)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker.encode()
        self.peaks: dict[int, tuple[str, int, int]] = {}  # pid -> (role, VmHWM KiB, Pss KiB)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            seen: dict[int, tuple[str, int, int, int]] = {}
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/environ", "rb") as f:
                        if self.marker not in f.read():
                            continue
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode()
                    with open(f"/proc/{entry}/status") as f:
                        fields = dict(line.split(":", 1) for line in f)
                    hwm, ppid = int(fields["VmHWM"].split()[0]), int(fields["PPid"])
                    with open(f"/proc/{entry}/smaps_rollup") as f:
                        pss = next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
                except (OSError, StopIteration, ValueError, KeyError):
                    continue
                seen[int(entry)] = (cmd, ppid, hwm, pss)
            for pid, (cmd, ppid, hwm, pss) in seen.items():
                if "loomcli.runtime.forkserver" in cmd:  # workers are forks of the server: same command line
                    role = "worker" if "loomcli.runtime.forkserver" in seen.get(ppid, ("",))[0] else "fork server"
                else:
                    role = "worker" if "loomcli.runtime.pool" in cmd else "coordinator" if " build " in cmd else "other"
                _, old_hwm, old_pss = self.peaks.get(pid, ("", 0, 0))
                self.peaks[pid] = (role, max(hwm, old_hwm), max(pss, old_pss))
            time.sleep(0.02)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kernels", type=int, default=200)
    ap.add_argument("--sets", type=int, default=50)
    args = ap.parse_args()
    import compileall

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compileall.compile_dir(str(ROOT / "loomcli"), quiet=1)  # as an installed package runs
    loom = [sys.executable, "-m", "loomcli", "build", "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        project, cl = generate(folder, args.kernels, args.sets)
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "LOOM_CACHE")}
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        out = project / "build"
        results: dict[str, list[float]] = {k: [] for k in ("clang", "cold2", "cold1", "noop", "cache", "python")}
        clang = shutil.which("clang-19")
        for r in range(args.repeat):
            for jobs, key in ((2, "cold2"), (1, "cold1")):
                shutil.rmtree(out, ignore_errors=True)
                env["LOOM_CACHE_DIR"] = str(folder / f"cache-{key}-{r}")
                results[key].append(timed(loom + ["-j", str(jobs), str(project)], folder, env, key))
            results["noop"].append(timed(loom + ["-j", "2", str(project)], folder, env, "noop"))
            results["python"].append(timed([sys.executable, "-c", "pass"], folder, env, "python"))
            shutil.rmtree(out)
            results["cache"].append(timed(loom + ["-j", "2", str(project)], folder, env, "cache"))
            if clang:
                for f in cl.glob("*.hsaco"):
                    f.unlink()
                results["clang"].append(timed(["make", "-j2", "-s"], cl, env, "clang"))
        # Peak memory: one more cold -j2 build, sampled from /proc.
        shutil.rmtree(out)
        env["LOOM_CACHE_DIR"] = str(folder / "cache-memory")
        mem = PeakMemory(f"LOOM_CACHE_DIR={env['LOOM_CACHE_DIR']}")
        mem.thread.start()
        timed(loom + ["-j", "2", str(project)], folder, env)
        mem.stop.set()
        mem.thread.join()
    med = {k: statistics.median(v) if v else None for k, v in results.items()}
    print(f"{args.kernels} kernels in {args.sets} sets, amdgpu:gfx1100, medians of {args.repeat}:")
    cpu = {k: statistics.median(v) for k, v in CPU.items() if v}
    rows = [("make -j2 + clang-19 (.cl files)", "clang"), ("loom build -j2 cold", "cold2"),
            ("loom build -j1 cold", "cold1"), ("loom build -j2 no-op", "noop"),
            ("loom build -j2 cache-only", "cache"), ("python -c pass (start-up alone)", "python")]
    print(f"  {'':40s} {'wall':>12s} {'cpu':>12s}")
    for name, key in rows:
        value = med[key]
        if value is None:
            print(f"  {name:40s} missing clang-19")
        else:
            print(f"  {name:40s} {value * 1000:9.1f} ms {cpu[key] * 1000:9.1f} ms")
    cold = med["cold2"]
    assert cold is not None and med["cold1"] is not None and med["noop"] is not None and med["cache"] is not None
    if med["clang"] is not None:
        print(f"  clang / loom -j2 cold     {med['clang'] / cold:6.2f}x wall, {cpu['clang'] / cpu['cold2']:6.2f}x cpu"
              "   (goal >= 3)")
    print(f"  loom -j1 / -j2 cold       {med['cold1'] / cold:6.2f}x wall   (goal >= 1.8)")
    print(f"  no-op / cold              {med['noop'] / cold * 100:6.2f}% wall, "
          f"{cpu['noop'] / cpu['cold2'] * 100:6.2f}% cpu   (goal <= 3%)")
    start = med["python"] or 0.0
    print(f"  no-op beyond start-up     {(med['noop'] - start) * 1000:6.1f} ms, "
          f"{(med['noop'] - start) / cold * 100:.2f}% of the cold build's wall")
    print(f"  cache-only / cold         {med['cache'] / cold * 100:6.2f}% wall, "
          f"{cpu['cache'] / cpu['cold2'] * 100:6.2f}% cpu   (goal <= 15%)")
    for role in ("coordinator", "fork server", "worker"):
        peaks = sorted((hwm, pss) for r, hwm, pss in mem.peaks.values() if r == role)
        if peaks:
            print(f"  peak RSS / PSS per {role:11s}  "
                  f"{', '.join(f'{hwm / 1024:.0f} / {pss / 1024:.0f} MiB' for hwm, pss in peaks)}")


if __name__ == "__main__":
    main()
