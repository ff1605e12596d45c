"""Loom's CMake package, used as docs/cmake.md says, with pip's cmake (4.x) and ninja (1.13) and GNU make.

For each generator: a fresh build of cmake/examples, a no-op rebuild that runs
nothing, and a touched library that reruns every kernel set using it and
nothing else. What ran is read from the outputs' modification times (every
loom output is rewritten when its command runs) and, for Ninja, from
`ninja -n -d explain`. How the loom commands shared the build's job slots is
read from loom's own traces (`LOOM_TRACE_DIR`): under `make -j3` every loom
joined make's jobserver and at most three compiles ran at once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_jobserver_make import peak_concurrency

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None and not os.environ.get("CI"),
    reason="no cmake here (pip install '.[test]' installs it)",
)

SETS = {
    "lib/common.loombc": "common",
    **{f"kernels/saxpy.{t}": "saxpy" for t in ("amdgpu-gfx1100", "spirv-vulkan1.3")},
    **{f"kernels/scale.{t}": "scale" for t in ("amdgpu-gfx942", "spirv-vulkan1.3")},
    **{f"kernels/offset.{t}": "offset" for t in ("spirv-vulkan1.3", "nvptx-sm_80")},
}


JOBS = 3
# One per kernel set and target (saxpy, scale and offset, two targets each), and the check of each
# one-source set (saxpy, offset), which runs its front end once for all its targets.
COMPILE_COMMANDS = 8
# Whether the build tool hands loom a jobserver: make -jN serves one to `+` recipes (JOB_SERVER_AWARE);
# ninja 1.13 is a jobserver client only, so under Ninja loom sees none.
SERVES_A_JOBSERVER = {"Ninja": False, "Unix Makefiles": True}


def loom_dir() -> str:
    """What a user types: -DLoom_DIR="$(loom --cmake-dir)"."""
    return subprocess.run(["loom", "--cmake-dir"], capture_output=True, text=True, check=True).stdout.strip()


def test_cmake_dir_is_light_and_holds_the_package() -> None:
    code = ("import sys\nfrom loomcli.cli import main\n"
            "try:\n    main(['--cmake-dir'])\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('llvmlite', 'rich'))\n"
            "assert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    folder = Path(r.stdout.strip())
    assert folder == ROOT / "loomcli" / "cmake"
    assert {p.name for p in folder.glob("*.cmake")} == {"LoomConfig.cmake", "LoomConfigVersion.cmake"}


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def stamps(build: Path) -> dict[str, int]:
    """Modification time of every loom output, keyed by path under the build folder."""
    found = {}
    for pattern in ("lib/*.loombc", "kernels/*.hsaco", "kernels/*.spv", "kernels/*.ptx", "kernels/*.launch.loombc",
                    "kernels/*.manifest.json"):
        for path in build.glob(pattern):
            found[str(path.relative_to(build))] = path.stat().st_mtime_ns
    return found


def rerun_sets(before: dict[str, int], after: dict[str, int]) -> set[str]:
    assert before.keys() == after.keys()
    ran = set()
    for path, stamp in after.items():
        if stamp != before[path]:
            ran |= {name for prefix, name in SETS.items() if path.startswith(prefix)}
    return ran


def test_one_source_for_one_target_is_its_sets_only_command(tmp_path: Path) -> None:
    """A one-source set checks its source once for all its targets; with one target that check
    would only double the loom commands, so its compile is the set's only one, and it still reports
    a source error once and writes nothing."""
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(ROOT / "samples" / "saxpy.loom", source / "saxpy.loom")
    (source / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(one NONE)\nfind_package(Loom REQUIRED)\n"
        "loom_add_kernels(one SOURCES saxpy.loom TARGETS spirv:vulkan1.3)\n"
        "loom_add_kernels(two SOURCES saxpy.loom TARGETS spirv:vulkan1.3 amdgpu:gfx1100)\n")
    build, traces = tmp_path / "build", tmp_path / "traces"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(LOOM_CACHE_DIR=str(tmp_path / "cache"), LOOM_TRACE_DIR=str(traces))
    run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DLoom_DIR={loom_dir()}",
         "-DLOOM_USE_SERVER=OFF"], tmp_path, env)

    def loom_commands(target: str) -> list[str]:
        listed = run(["ninja", "-t", "commands", target], build, env).stdout.splitlines()
        return [c for c in listed if " compile " in c]

    [only] = loom_commands("one")
    assert "--require-resolved-config" in only and ".checked.loombc" not in only
    assert len(loom_commands("two")) == 3  # the check, then one compile per target
    run(["ninja", "one"], build, env)
    assert len(list(traces.glob("loom-*.trace.json"))) == 1
    assert (build / "one.spirv-vulkan1.3.spv").stat().st_size > 0

    saxpy = source / "saxpy.loom"
    saxpy.write_text(saxpy.read_text().replace("index.constant 1 ", "index.constnt 1 ", 1))
    (build / "one.spirv-vulkan1.3.spv").unlink()
    r = subprocess.run(["ninja", "one"], cwd=build, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert (r.stdout + r.stderr).count("error [PARSE/006]") == 1, r.stdout + r.stderr
    assert not (build / "one.spirv-vulkan1.3.spv").exists()


def test_every_file_a_command_reads_is_one_of_its_dependencies(tmp_path: Path) -> None:
    """The package's commands have no DEPFILE (CMake would run each one through a `cmake -E
    cmake_transform_depfile` process of its own): their DEPENDS must name every file loom reads.
    Each loom command of the examples is run again with -MD, and every file its depfile names must
    be an input of its build edge."""
    source = tmp_path / "src"
    shutil.copytree(ROOT / "cmake" / "examples", source)
    build = tmp_path / "build"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(LOOM_CACHE="0", LOOM_SERVER="off")
    run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DLoom_DIR={loom_dir()}",
         "-DLOOM_USE_SERVER=OFF"], tmp_path, env)
    run(["ninja"], build, env)
    assert "cmake_transform_depfile" not in (build / "build.ninja").read_text()

    def absolute(path: str) -> Path:
        return (build / path).resolve()

    outputs = [str(p.relative_to(build)) for p in (*build.glob("kernels/*.hsaco"), *build.glob("kernels/*.spv"),
                                                   *build.glob("kernels/*.ptx"), *build.glob("lib/*.loombc"),
                                                   *build.glob("loom/*/*.loombc"))]
    checked = 0
    for output in sorted(outputs):
        [command] = run(["ninja", "-t", "commands", "-s", output], build, env).stdout.splitlines()
        query = run(["ninja", "-t", "query", output], build, env).stdout.splitlines()
        inputs = {absolute(line.strip()) for line in query[query.index("  input: CUSTOM_COMMAND") + 1:
                                                            query.index("  outputs:")]}
        if " compile " not in command:  # `loom link` has no -MD; it reads exactly its arguments
            continue
        depfile = tmp_path / "reads.d"
        run(["sh", "-c", f"{command} -MD -MF {depfile}"], build, env)
        text = depfile.read_text().replace("\\\n", " ")
        reads = {absolute(p) for p in text.split(":", 1)[1].split()}
        assert reads and reads <= inputs, (output, sorted(map(str, reads - inputs)))
        checked += 1
    assert checked == COMPILE_COMMANDS


@pytest.mark.parametrize("generator", ["Ninja", "Unix Makefiles"])
def test_cmake_examples_build_incrementally(generator: str, tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(ROOT / "cmake" / "examples", source)
    build = tmp_path / "build"
    traces = tmp_path / "traces"
    # No jobserver from whatever runs the tests: only the build tool's. Each loom writes a trace.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(LOOM_CACHE_DIR=str(tmp_path / "cache"), LOOM_TRACE_DIR=str(traces))
    run(["cmake", "-S", str(source), "-B", str(build), "-G", generator, f"-DLoom_DIR={loom_dir()}"], tmp_path, env)
    # Under make -j the loom commands are jobserver-aware recipes: make hands them its jobserver.
    build_cmd = ["cmake", "--build", str(build), "--", f"-j{JOBS}"]

    # A fresh build: every declared output, real and consistent with its manifest.
    fresh = run(build_cmd, tmp_path, env)
    first = stamps(build)
    # Loom's own account of the job slots: one trace per compile command, each one task on the
    # slot the build tool started it with. Under make every loom joined make's one pool (and needed
    # no token beside its implicit slot); the compiles of all commands never overlapped beyond -j3.
    fresh_traces = sorted(traces.glob("loom-*.trace.json"))
    assert len(fresh_traces) == COMPILE_COMMANDS
    bounds = [json.loads(t.read_text())["otherData"] for t in fresh_traces]
    jobservers = {b["jobserver"] for b in bounds}
    if SERVES_A_JOBSERVER[generator]:
        assert len(jobservers) == 1 and None not in jobservers, jobservers
    else:
        assert jobservers == {None}
    assert all((b["slots"], b["tokens_taken"]) == (1, 0) for b in bounds), bounds
    assert 1 <= peak_concurrency(fresh_traces) <= JOBS
    assert len(first) == 1 + 3 * 6
    for name, ext in [("saxpy.amdgpu-gfx1100", "hsaco"), ("scale.spirv-vulkan1.3", "spv"),
                      ("offset.spirv-vulkan1.3", "spv"), ("offset.nvptx-sm_80", "ptx")]:
        manifest = json.loads((build / "kernels" / f"{name}.manifest.json").read_text())
        assert manifest["artifact"]["name"] == f"{name}.{ext}"
        assert manifest["artifact"]["byte_length"] == (build / "kernels" / f"{name}.{ext}").stat().st_size
    launch = subprocess.run(["loom", "launch-eval", str(build / "kernels/scale.spirv-vulkan1.3.launch.loombc"),
                             "@scale", "1000"], capture_output=True, text=True, check=True, env=env)
    assert "workgroups=4x1x1 workgroup_size=256x1x1" in launch.stdout
    # An advertised but unusable jobserver would be one warning per loom command.
    assert "jobserver" not in (fresh.stdout + fresh.stderr).lower()

    # A no-op rebuild runs nothing.
    if generator == "Ninja":
        explain = run(["ninja", "-n", "-d", "explain"], build, env)
        assert "ninja: no work to do." in explain.stdout, explain.stdout + explain.stderr
    run(build_cmd, tmp_path, env)
    assert stamps(build) == first
    assert sorted(traces.glob("loom-*.trace.json")) == fresh_traces  # no loom ran

    # The package runs its commands with LOOM_SERVER=auto: the first one started this user's
    # server (in the tests' private runtime folder), which serves every loom once it is up.
    def served() -> int:
        doc = json.loads(subprocess.run(["loom", "server", "status", "--json"], capture_output=True, text=True,
                                        env=env).stdout)
        return doc["requests"] if doc["running"] else -1

    deadline = time.monotonic() + 120
    while served() < 0:
        assert time.monotonic() < deadline, "the server the build started never answered"
        time.sleep(0.05)
    before = served()

    # Touching the library reruns every set that uses it, and only those.
    library = source / "lib" / "common.loom"
    os.utime(library)  # touch
    run(build_cmd, tmp_path, env)
    after = stamps(build)
    assert rerun_sets(first, after) == {"common", "scale", "offset"}
    # the library's link, scale's merge, offset's check, and two compiles of scale and of offset
    assert served() - before == 7

    # Touching one set's own source reruns that set only (offset.loom is in `scale` and `offset`).
    saxpy = source / "kernels" / "saxpy.loom"
    os.utime(saxpy)
    run(build_cmd, tmp_path, env)
    assert rerun_sets(after, stamps(build)) == {"saxpy"}

    # ctest runs loom_add_test's command with no shell: loom's settings reach it as its
    # environment, and the server runs its check cases too.
    before = served()
    ctest = subprocess.run(["ctest", "--output-on-failure"], cwd=build, env=env, capture_output=True, text=True,
                           timeout=600)
    assert ctest.returncode == 0, ctest.stdout + ctest.stderr
    assert "100% tests passed out of 1" in ctest.stdout
    assert served() - before == 1


@pytest.mark.parametrize("use_server", ["ON", "OFF"])
def test_loom_use_server_says_how_commands_run(use_server: str, tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(ROOT / "cmake" / "examples", source)
    build = tmp_path / "build"
    run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DLoom_DIR={loom_dir()}",
         f"-DLOOM_USE_SERVER={use_server}"], tmp_path, dict(os.environ))
    commands = [line for line in (build / "build.ninja").read_text().splitlines() if " compile " in line]
    assert len(commands) == COMPILE_COMMANDS
    assert all(("LOOM_SERVER=auto" in line) == (use_server == "ON") for line in commands)
    # With the server, the commands call the native client the configure step built, and a loom
    # whose client source changed (an upgrade) re-runs that step, which builds it anew.
    client = str(build / "CMakeFiles" / "loom" / "loom-client")
    assert all((client in line) == (use_server == "ON") for line in commands)
    rerun = next(line for line in (build / "build.ninja").read_text().splitlines()
                 if line.startswith("build build.ninja") and "RERUN_CMAKE" in line)
    assert ("runtime/client.c" in rerun) == (use_server == "ON"), rerun


def test_cmake_reports_a_source_error_once_and_the_jobserver_once_and_runs_ctest(tmp_path: Path) -> None:
    """What CMake before 3.28 does with Unix Makefiles (LOOM_JOB_SERVER_AWARE=OFF gives it here):
    loom's recipes are not marked for make's jobserver, so every loom command sees one it cannot
    use; the build says so once, and that nothing needs doing. A source error under two targets is
    one report (the set's check runs its front end once). loom_add_test's check cases run under
    ctest, and a failing one fails the test with loom's report."""
    source = tmp_path / "src"
    shutil.copytree(ROOT / "cmake" / "examples", source)
    saxpy = source / "kernels" / "saxpy.loom"
    saxpy.write_text(saxpy.read_text().replace("index.constant 1 ", "index.constnt 1 ", 1))
    build = tmp_path / "build"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(LOOM_CACHE_DIR=str(tmp_path / "cache"))
    run(["cmake", "-S", str(source), "-B", str(build), "-G", "Unix Makefiles", f"-DLoom_DIR={loom_dir()}",
         "-DLOOM_JOB_SERVER_AWARE=OFF", "-DLOOM_USE_SERVER=OFF"], tmp_path, env)
    r = subprocess.run(["cmake", "--build", str(build), "--", f"-j{JOBS}", "-k"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert out.count("error [PARSE/006]: unknown operation `index.constnt`; did you mean `index.constant`?") == 1, out
    warnings = [line for line in out.splitlines() if "jobserver" in line]
    assert len(warnings) == 1 and warnings[0].startswith("loom: warning: ") and "harmless, nothing to do" in out, out
    assert not list((build / "kernels").glob("saxpy.*"))
    assert (build / "kernels" / "offset.spirv-vulkan1.3.spv").exists()  # -k: the other sets were built

    ctest = subprocess.run(["ctest", "--output-on-failure"], cwd=build, env=env, capture_output=True, text=True,
                           timeout=600)
    assert ctest.returncode == 0, ctest.stdout + ctest.stderr
    assert "100% tests passed out of 1" in ctest.stdout
    cases = source / "tests" / "offset_test.loom"
    cases.write_text(cases.read_text().replace("offset(0.5) step(1.0)", "offset(0.5) step(2.0)"))
    ctest = subprocess.run(["ctest", "--output-on-failure"], cwd=build, env=env, capture_output=True, text=True,
                           timeout=600)
    assert ctest.returncode != 0
    # Run in the source folder: the report names the user's file as they would.
    assert ("tests/offset_test.loom:11:3: error [CHECK/001]: at [1]: actual 1.5, expected 2.5 "
            "(sample @offset_case [n=100])" in ctest.stdout), ctest.stdout
