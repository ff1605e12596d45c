"""The resident server's figures (issue: warm compiles inside CMake and make): paired medians, not a test.

    python bench/server_bench.py [--repeat N] [--rows hsaco,spv,cmake,build] [--sides before,after]

Each round runs every variant of a row once, in a rotating order, so a
machine shared with other work slows all of them alike; the medians and
their ratios are printed. `before` is loom in its own process
(LOOM_SERVER=off), `after` is loom served by a warm server, through `loom`
and (one kernel rows) through the native client (`loom server client`);
`--sides after` leaves the own-process runs out (the anchors always run).
  hsaco   one kernel -> .hsaco, the whole process   vs clang-19 -x cl (bench/saxpy.cl)
  spv     one kernel -> .spv, the whole process     vs glslc (bench/saxpy.comp)
  cmake   CMake + Ninja -j2, 100 loom_add_kernels sets of one kernel, cache off
          vs the same kernels as add_custom_command + clang-19
  build   loom build -j2 (and -j1) of the 200-kernel project, cold cache, vs make -j2 + clang-19;
          then LLVM's share alone (the optimizer and code generator on the build's 50 modules), which
          bounds how much faster than make any loom -j2 build of the project can be
loom runs through a console-script launcher, as an installed loom does;
the anchors come from scripts/install-bench-deps.sh. Bytecode is cached
(PYTHONDONTWRITEBYTECODE unset), as in a user's install.

Beside each wall-clock median is the median CPU time (user + system) of
the whole process tree: the command's own (`RUSAGE_CHILDREN`) plus, for a
served one, what the server's processes used (every live process below
it, a warm child and the workers it keeps among them, and those that
ended, from /proc). A shared machine disturbs CPU time much less than
wall time; quote both.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.build_bench import LIBRARY, LIBRARY_CL, generate, kernel_text

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
CLANG = ["clang-19", "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-O3",
         "-nogpulib"]


Times = tuple[float, float]  # (wall seconds, CPU seconds)
SERVERS: list[int] = []       # the pid of the server the `after` variants use
SIDES = {"before", "after"}   # which loom variants run (--sides)


def sides(variants: dict[str, Callable[[], Times]]) -> dict[str, Callable[[], Times]]:
    """`variants` without the loom sides --sides leaves out (a loom variant's name says its side)."""
    return {n: v for n, v in variants.items()
            if not n.startswith("loom") or any(side in n.split() for side in SIDES)}


def served_cpu() -> float:
    """CPU seconds the server and every process below it (the served
    commands and what they started) have used: each live one's own and
    that of its children that ended (a warm child waits for its next
    command, with the workers it keeps for its next build)."""
    ticks = 0
    level = list(SERVERS)
    while level:
        below = []
        for pid in level:
            try:
                ticks += sum(_times(pid))  # its own and its ended children's
                for task in os.listdir(f"/proc/{pid}/task"):
                    below += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile (its parent counts it next time)
                pass
        level = below
    return ticks / os.sysconf("SC_CLK_TCK")


def _times(pid: int) -> list[int]:
    """utime, stime, cutime, cstime of process `pid`, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return [int(f) for f in fields[11:15]]


def cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + served_cpu()


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> Times:
    c = cpu_now()
    t = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv[:5]))} ... failed: {r.stderr.decode()[-1500:]}")
    return dt, cpu_now() - c


def paired(variants: dict[str, Callable[[], Times]], rounds: int) -> dict[str, Times]:
    """Median (wall, CPU) seconds of each variant over `rounds` rounds, the order rotating each round."""
    names = list(variants)
    times: dict[str, list[Times]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            times[n].append(variants[n]())
    return {n: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for n, t in times.items()}


def report(title: str, med: dict[str, Times], anchor: str) -> None:
    print(f"\n{title} (load average {os.getloadavg()[0]:.1f})")
    print(f"  {'':28s} {'wall':>9s}             {'CPU':>9s}")
    for name, (wall, cpu) in med.items():
        ratios = (f"{wall / med[anchor][0]:5.2f}x", f"{cpu / med[anchor][1]:5.2f}x") if name != anchor else ("", "")
        print(f"  {name:28s} {wall * 1e3:9.1f} ms {ratios[0]:>6s}  {cpu * 1e3:9.1f} ms {ratios[1]:>6s}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rows", default="hsaco,spv,cmake,build")
    ap.add_argument("--sides", default="before,after", help="The loom variants: before (own process), after (served).")
    ap.add_argument("--python", default=sys.executable,
                    help="The interpreter loom runs on (a venv without this machine's site hooks, say).")
    args = ap.parse_args()
    rows = set(args.rows.split(","))
    SIDES.intersection_update(args.sides.split(","))
    import compileall

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if not compileall.compile_dir(str(ROOT / "loomcli"), quiet=1):
        raise SystemExit("compileall failed")
    # A __pycache__ folder it just made changed its folder's stamp: loom trusts no stamp younger than two
    # seconds, so the server could not be named yet (`loomcli.service.fingerprint.RACY_MARGIN_NS`).
    time.sleep(2.1)
    for tool in ("clang-19", "glslc", "cmake", "ninja"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing: scripts/install-bench-deps.sh installs it")
    with tempfile.TemporaryDirectory(prefix="lsb-", dir="/tmp") as tmp:
        folder = Path(tmp)
        runtime = folder / "rt"
        runtime.mkdir(mode=0o700)
        launcher = folder / "loom"
        launcher.write_text(f"#!{args.python}\nfrom loomcli.entry import main\nmain()\n")
        launcher.chmod(0o755)
        base = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "LOOM_SERVER")}
        base.update(PYTHONPATH=str(ROOT), XDG_RUNTIME_DIR=str(runtime), LOOM_CACHE="0")
        off = dict(base, LOOM_SERVER="off")
        on = dict(base)
        subprocess.run([str(launcher), "server", "start"], env=on, check=True)
        status = subprocess.run([str(launcher), "server", "status", "--json"], env=on, check=True,
                                capture_output=True, text=True)
        SERVERS.append(int(json.loads(status.stdout)["pid"]))
        client = str(folder / "loom-client")  # the native client, as the CMake package builds it
        subprocess.run([str(launcher), "server", "client", "-o", client, "--launcher", str(launcher)], env=on,
                       check=True)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the start")
        try:
            loom = str(launcher)
            if "hsaco" in rows or "spv" in rows:
                saxpy = str(ROOT / "samples" / "saxpy.loom")
                py = paired({"python -c pass": lambda: run([args.python, "-c", "pass"], folder, off)}, args.repeat)
                print(f"{args.python} -c pass: {py['python -c pass'][0] * 1e3:.1f} ms, "
                      f"CPU {py['python -c pass'][1] * 1e3:.1f} ms (the interpreter's floor here)")
            if "hsaco" in rows:
                hs = [loom, "compile", saxpy, "--target", "amdgpu:gfx1100", "-o", "s.hsaco"]
                med = paired(sides({
                    "clang-19": lambda: run([*CLANG, str(BENCH / "saxpy.cl"), "-o", "c.hsaco"], folder, off),
                    "loom before (own process)": lambda: run(hs, folder, off),
                    "loom after (warm server)": lambda: run(hs, folder, on),
                    "loom after (native client)": lambda: run([client, *hs[1:]], folder, on)}), args.repeat)
                report("one kernel -> .hsaco, whole process", med, "clang-19")
            if "spv" in rows:
                sp = [loom, "compile", saxpy, "--target", "spirv:vulkan1.3", "-o", "s.spv"]
                med = paired(sides({
                    "glslc": lambda: run(["glslc", "--target-env=vulkan1.3", str(BENCH / "saxpy.comp"), "-o", "g.spv"],
                                         folder, off),
                    "loom before (own process)": lambda: run(sp, folder, off),
                    "loom after (warm server)": lambda: run(sp, folder, on),
                    "loom after (native client)": lambda: run([client, *sp[1:]], folder, on)}), args.repeat)
                report("one kernel -> .spv, whole process", med, "glslc")
            if "cmake" in rows:
                cmake_row(folder, loom, on, off, args.repeat)
            if "build" in rows:
                build_row(folder, loom, on, off, args.repeat, args.python)
        finally:
            subprocess.run([str(launcher), "server", "stop", "--all"], env=on, stdout=subprocess.DEVNULL)


def cmake_row(folder: Path, loom: str, on: dict[str, str], off: dict[str, str], rounds: int) -> None:
    src = folder / "cmake-src"
    src.mkdir()
    (src / "mix.loom").write_text(LIBRARY)
    (src / "mix.h").write_text(LIBRARY_CL)
    loom_lists = ["cmake_minimum_required(VERSION 3.20)\nproject(bench NONE)\nfind_package(Loom REQUIRED)\n"]
    clang_lists = ["cmake_minimum_required(VERSION 3.20)\nproject(bench NONE)\nset(outs)\n"]
    for i in range(100):
        lt, ct = kernel_text(i)
        (src / f"k{i}.loom").write_text(lt)
        (src / f"k{i}.cl").write_text(ct)
        loom_lists.append(f"loom_add_kernels(k{i} SOURCES ../k{i}.loom TARGETS amdgpu:gfx1100 "
                          "LIBRARIES ../mix.loom OUTPUT_DIR kernels)\n")
        clang_lists.append(f"add_custom_command(OUTPUT k{i}.hsaco COMMAND {' '.join(CLANG)} "
                           f"${{CMAKE_SOURCE_DIR}}/../k{i}.cl -o k{i}.hsaco "
                           f"DEPENDS ../k{i}.cl ../mix.h VERBATIM)\nlist(APPEND outs k{i}.hsaco)\n")
    clang_lists.append("add_custom_target(all_kernels ALL DEPENDS ${outs})\n")
    for sub, lists in (("loom", loom_lists), ("clang", clang_lists)):
        (src / sub).mkdir()
        (src / sub / "CMakeLists.txt").write_text("".join(lists))
    cmake_dir = str(ROOT / "loomcli" / "cmake")
    builds = {}
    for name, sub, extra in (("clang", "clang", []), ("before", "loom", ["-DLOOM_USE_SERVER=OFF"]),
                             ("after", "loom", ["-DLOOM_USE_SERVER=ON"])):
        b = folder / f"cmake-{name}"
        subprocess.run(["cmake", "-S", str(src / sub), "-B", str(b), "-G", "Ninja", f"-DLoom_DIR={cmake_dir}",
                        f"-DLOOM_EXECUTABLE={loom}", *extra], env=off, check=True, stdout=subprocess.DEVNULL)
        builds[name] = b

    def build(name: str, env: dict[str, str]) -> Callable[[], Times]:
        def go() -> Times:
            subprocess.run(["cmake", "--build", str(builds[name]), "--target", "clean"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            return run(["cmake", "--build", str(builds[name]), "-j2"], folder, env)
        return go

    med = paired(sides({"clang-19 (add_custom_command)": build("clang", off), "loom before (own processes)":
                        build("before", off), "loom after (warm server)": build("after", on)}), rounds)
    report("CMake + Ninja -j2, 100 sets of one kernel, cache off", med, "clang-19 (add_custom_command)")


def build_row(folder: Path, loom: str, on: dict[str, str], off: dict[str, str], rounds: int,
              python: str) -> None:
    project, cl = generate(folder / "gen", 200, 50)
    out = project / "build"

    def loom_build(jobs: int, env: dict[str, str]) -> Callable[[], Times]:
        def go() -> Times:
            shutil.rmtree(out, ignore_errors=True)
            return run([loom, "build", "-q", "-j", str(jobs), str(project)], folder, env)
        return go

    def make() -> Times:
        for f in cl.glob("*.hsaco"):
            f.unlink()
        return run(["make", "-j2", "-s"], cl, off)

    med = paired(sides({"make -j2 + clang-19": make, "loom build -j2 before": loom_build(2, off),
                        "loom build -j2 after": loom_build(2, on), "loom build -j1 before": loom_build(1, off),
                        "loom build -j1 after": loom_build(1, on)}), rounds)
    report("200 kernels, cold, one target", med, "make -j2 + clang-19")
    make_wall = med["make -j2 + clang-19"][0]
    for when in sorted(SIDES, reverse=True):
        j1, j2 = med[f"loom build -j1 {when}"][0], med[f"loom build -j2 {when}"][0]
        print(f"  {when}: make/loom -j2 {make_wall / j2:5.2f}x faster; -j2 over -j1 {j1 / j2:4.2f}x (wall)")
    llvm, modules = llvm_floor(folder, project, loom, on, rounds, python)
    print(f"  LLVM alone (its optimizer and code generator on the build's {len(modules)} modules, one process): "
          f"{llvm * 1e3:.0f} ms of CPU; two cores need {llvm / 2 * 1e3:.0f} ms of wall for it, so no loom -j2 "
          f"build of this project beats make -j2 by more than {make_wall / (llvm / 2):.1f}x")
    for when in sorted(SIDES, reverse=True):
        rest = med[f"loom build -j1 {when}"][0] - llvm
        print(f"  {when}: the rest of loom build -j1 (Python: front end, lowering, linking, the coordinator, "
              f"start-up) {rest * 1e3:.0f} ms, {rest / (rest + llvm):.0%} of it")


# Times LLVM's part of a build, as a pool worker runs it (loomcli.emit.llvm.codegen in-process).
FLOOR_SCRIPT = """
import statistics, sys, time
from loomcli.emit.amdgpu.target import llvm_target
from loomcli.emit.llvm import codegen
from loomcli.targets.profiles import parse_target
t = llvm_target(parse_target("amdgpu:gfx1100"))
header = {"triple": t.triple, "cpu": t.cpu, "features": t.features, "datalayout": t.datalayout, "emit": "object",
          "opt": 3}
modules = [open(p, "rb").read() for p in sys.argv[2:]]
def once():
    start = time.process_time()
    for ir in modules:
        codegen.compile_ir(header, ir)
    return time.process_time() - start
once()
print(statistics.median(once() for _ in range(int(sys.argv[1]))))
"""


def llvm_floor(folder: Path, project: Path, loom: str, env: dict[str, str], rounds: int,
               python: str) -> tuple[float, list[Path]]:
    """CPU seconds LLVM needs for the LLVM IR modules the build hands it (one
    per kernel set: its kernels linked with the library, lowered as
    `loom compile --format llvmir-text` does), median of `rounds`: the part
    of a build that no Python change can shorten."""
    ll = folder / "llvm-floor"
    ll.mkdir(exist_ok=True)
    modules = []
    for kernels in sorted((project / "kernels").iterdir(), key=lambda d: int(d.name.removeprefix("set"))):
        linked, ir = ll / f"{kernels.name}.loombc", ll / f"{kernels.name}.ll"
        subprocess.run([loom, "link", *sorted(map(str, kernels.glob("*.loom"))), "--library",
                        str(project / "lib" / "mix.loom"), "-o", str(linked)], env=env, check=True)
        subprocess.run([loom, "compile", str(linked), "--target", "amdgpu:gfx1100", "--format", "llvmir-text",
                        "-o", str(ir)], env=env, check=True)
        modules.append(ir)
    out = subprocess.run([python, "-c", FLOOR_SCRIPT, str(rounds), *map(str, modules)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out), modules


if __name__ == "__main__":
    main()
