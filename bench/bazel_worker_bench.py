"""Bazel persistent workers' figure (issue 21): paired medians, not a test.

    python bench/bazel_worker_bench.py [--repeat N] [--bazel-version 4.2.3|7.7.1]

A workspace of 40 `loom_kernels` targets (two targets each: amdgpu:gfx1100
and spirv:vulkan1.3, 80 compile actions) is built clean (`bazel clean`
first, the Bazel server warm) with workers and with workers off, in
alternating order, so a machine shared with other work slows both alike.
Workers are turned on and off with `--@loom_rules//:persistent_workers=on|off`
(on Bazel 4.2 with `--experimental_worker_allow_json_protocol` on both sides);
Bazel 7.7.1 runs in the chroot of scripts/setup-bazel.sh, as the tests do; the
whole bench runs inside it, since a Bazel client entering the chroot anew does
not reuse the server an earlier one started.
Besides wall time, each build's CPU time is counted (user + system of the
Bazel server, its reaped children and its live descendants such as the
workers, before and after), which a loaded machine disturbs less. Bytecode
is cached (PYTHONDONTWRITEBYTECODE unset), as in a user's install.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from bazel_harness import ENTER, Bazel, Bazels  # noqa: E402 - the tests' way to reach each Bazel

TARGETS = 40
TICK = os.sysconf("SC_CLK_TCK")

BUILD_HEAD = 'load("@loom_rules//:defs.bzl", "loom_kernels")\n\n'
KERNELS = 'loom_kernels(\n    name = "k{n}",\n    srcs = ["k{n}.loom"],\n' \
          '    targets = ["amdgpu:gfx1100", "spirv:vulkan1.3"],\n)\n\n'
LOCAL_REPOSITORY = 'load("@bazel_tools//tools/build_defs/repo:local.bzl", "local_repository")\n\n'


def workspace(folder: Path, modern: bool) -> Path:
    import shutil

    shutil.copytree(ROOT / "bazel", folder / "rules", ignore=shutil.ignore_patterns("bazel-*", "examples"))
    ws = folder / "ws"
    (ws / "k").mkdir(parents=True)
    (ws / "WORKSPACE").write_text('workspace(name = "bench")\n\n' + (LOCAL_REPOSITORY if modern else "") +
                                  'local_repository(name = "loom_rules", path = "../rules")\n\n'
                                  'load("@loom_rules//:repositories.bzl", "loom_register_toolchains")\n\n'
                                  'loom_register_toolchains()\n')
    saxpy = (ROOT / "samples" / "saxpy.loom").read_text()
    build = [BUILD_HEAD]
    for n in range(TARGETS):
        # A distinct comment per target, so no two actions share an output (or a cache entry).
        (ws / "k" / f"k{n}.loom").write_text(saxpy + f"\n// target {n}\n")
        build.append(KERNELS.format(n=n))
    (ws / "k" / "BUILD").write_text("".join(build))
    return ws


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system seconds of the process and its reaped children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / TICK


def tree_cpu(root: int) -> float:
    """CPU seconds of `root` and every live descendant (each with its reaped children)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := _stat(int(entry))) is not None:
            stats[int(entry)] = found
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo += children.get(pid, [])
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--bazel-version", default="4.2.3")
    ap.add_argument("--flags", default="", help="more Bazel flags for both sides, e.g. --flags=--noworker_multiplex")
    ap.add_argument("--inside", metavar="DIR", help=argparse.SUPPRESS)  # running in the chroot, in DIR
    ns = ap.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if ns.inside:
        bench(Bazel(ns.bazel_version, in_chroot=False), Path(ns.inside), ns)
        return
    with tempfile.TemporaryDirectory(prefix="loom-bazel-bench-") as tmp:
        found = Bazels(Path(tmp))[ns.bazel_version]
        if not found.in_chroot:
            bench(found, Path(tmp), ns)
            return
        enter = [str(ENTER), "--cwd", str(ROOT)]
        for folder in found.binds:
            enter += ["--bind", folder]
        subprocess.run([*enter, "--", sys.executable, *sys.argv, "--inside", tmp], check=True)


def bench(bazel_binary: Bazel, tmp: Path, ns: argparse.Namespace) -> None:
    ws = workspace(tmp, bazel_binary.modern)
    loom = tmp / "loom"
    loom.write_text(f"#!/bin/sh\nPYTHONPATH='{ROOT}' exec '{sys.executable}' -m loomcli \"$@\"\n")
    loom.chmod(0o755)
    startup = ["bazel", "--nohome_rc", f"--output_user_root={tmp}/root", "--max_idle_secs=600"]
    flags = ["--color=no", "--curses=no", "--symlink_prefix=/"]
    if bazel_binary.modern:
        flags += ["--lockfile_mode=off", "--noenable_bzlmod", "--enable_workspace"]
    else:
        flags.append("--experimental_worker_allow_json_protocol")
    flags += ns.flags.split()

    def bazel(*args: str) -> str:
        argv, env = bazel_binary.command([*startup, *args], ws, {"LOOM_BIN": str(loom)})
        proc = subprocess.run(argv, cwd=ws, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"bazel {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return proc.stdout

    sides = {"workers off": "--@loom_rules//:persistent_workers=off",
             "workers": "--@loom_rules//:persistent_workers=on"}
    for flag in sides.values():  # analysis and the loom repository, once per side
        bazel("build", *flags, flag, "//...")
    server = int(bazel("info", *flags, "server_pid").strip())
    times: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(ns.repeat):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            bazel("clean")
            before = tree_cpu(server)
            start = time.perf_counter()
            bazel("build", *flags, sides[name], "//...")
            times[name].append(time.perf_counter() - start)
            cpu[name].append(tree_cpu(server) - before)
    restarted = int(bazel("info", *flags, "server_pid").strip()) != server
    bazel("shutdown")
    print(f"{TARGETS} loom_kernels targets x 2 targets, clean build, {ns.repeat} paired rounds "
          f"(Bazel {ns.bazel_version}{' ' + ns.flags if ns.flags else ''}), medians")
    print("  rounds (wall s, CPU s):", {name: list(zip([round(t, 2) for t in times[name]],
                                                       [round(c, 2) for c in cpu[name]], strict=True))
                                        for name in sides})
    if restarted:
        print("  (the Bazel server restarted during the rounds: CPU figures are not whole)")
    off, on = statistics.median(times["workers off"]), statistics.median(times["workers"])
    cpu_off, cpu_on = statistics.median(cpu["workers off"]), statistics.median(cpu["workers"])
    print(f"  workers off  {off:7.2f} s wall  {cpu_off:7.2f} s CPU")
    print(f"  workers      {on:7.2f} s wall  {cpu_on:7.2f} s CPU   {on / off:.2f}x wall  "
          f"{cpu_on / cpu_off if cpu_off else float('nan'):.2f}x CPU")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
