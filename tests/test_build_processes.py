"""`loom build` as a process: killed or interrupted at random points and
rebuilt (identical bytes, no stray files, no corrupt cache entry, no orphan
worker), two builds sharing one cache at once, and the rich display under a
real pseudo-terminal. Assertions never depend on timing: wherever a build
is stopped, the result must be the same."""

from __future__ import annotations

import json
import os
import pty
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from task_hooks import task_hook
from test_build import make_project, outputs

from loomcli.cache import Cache, _verify

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("spirv:vulkan1.3", "amdgpu:gfx1100")


def env_for(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "CI", "LOOM_CACHE")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["LOOM_CACHE_DIR"] = str(cache)
    env.update(extra)
    return env


def loom(*argv: str) -> list[str]:
    return [sys.executable, "-m", "loomcli.cli", *argv]


def workers_of(cache: Path) -> list[int]:
    """Live processes (workers included) started with this cache folder in their environment."""
    mark = f"LOOM_CACHE_DIR={cache}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if mark not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        pids.append(int(entry))
    return pids


def wait_gone(cache: Path) -> list[int]:
    deadline = time.monotonic() + 30  # a generous bound for the kernel to deliver SIGKILL, not a timing assertion
    while workers_of(cache) and time.monotonic() < deadline:
        time.sleep(0.05)
    return workers_of(cache)


def strays(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.rglob("*") if p.name.startswith(".loom-") and p.name.endswith(".tmp"))


def test_killed_and_interrupted_builds_then_rebuild_identically(tmp_path: Path) -> None:
    reference = make_project(tmp_path / "reference", sets=6, per_set=1, targets=TARGETS)
    r = subprocess.run(loom("build", str(reference), "-q", "--no-cache"), env=env_for(tmp_path / "unused"),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    want = outputs(reference / "build" / "loom")
    project = make_project(tmp_path / "project", sets=6, per_set=1, targets=TARGETS)
    cache = tmp_path / "cache"
    rng = random.Random(20261201)
    for sig in (signal.SIGKILL, signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
        shutil.rmtree(project / "build" / "loom" / "amdgpu-gfx1100", ignore_errors=True)
        proc = subprocess.Popen(loom("build", str(project), "-j", "2", "--progress", "plain"), env=env_for(cache),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for _ in range(rng.randrange(0, 4)):  # stop it after a random number of finished items
            if not proc.stdout.readline():
                break
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=600)
        assert "Traceback" not in err
        assert proc.returncode in (0, -signal.SIGKILL, 130), (sig, proc.returncode, err)
        assert wait_gone(cache) == [], "a worker outlived its build"
    r = subprocess.run(loom("build", str(project), "-q"), env=env_for(cache), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert outputs(project / "build" / "loom") == want
    assert strays(project) == []
    entries = list(Cache(str(cache)).entries())
    assert entries and all(_verify(Path(p).read_bytes(), Path(p).name) is not None for p, _, _ in entries)


def test_two_builds_sharing_one_cache_at_once(tmp_path: Path) -> None:
    projects = [make_project(tmp_path / f"p{i}", sets=4, per_set=1, targets=TARGETS) for i in range(2)]
    cache = tmp_path / "cache"
    procs = [subprocess.Popen(loom("build", str(p), "-q", "-j", "2"), env=env_for(cache), stderr=subprocess.PIPE,
                              text=True) for p in projects]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    first, second = (outputs(p / "build" / "loom") for p in projects)
    assert first == second and len(first) == 4 * 2 * 3
    shutil.rmtree(projects[0] / "build")
    r = subprocess.run(loom("build", str(projects[0]), "-q"), env=env_for(cache), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and outputs(projects[0] / "build" / "loom") == first


def test_rich_display_in_a_real_terminal(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", sets=3, per_set=1)
    master, slave = pty.openpty()
    env = env_for(tmp_path / "cache", TERM="xterm-256color", COLUMNS="100", LINES="30")
    proc = subprocess.Popen(loom("build", str(project), "-j", "2"), env=env, stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=600) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[" in screen  # a live, redrawn display, not plain lines
    assert "loom build p 1.0" in screen and "spirv:vulkan1.3" in screen and "cached" in screen
    assert "3/3" in screen
    assert "loom: built p 1.0: 3 items for 1 target: 3 compiled" in screen
    assert "loom: [" not in screen  # no plain progress lines in a terminal


@pytest.mark.parametrize("mode,expect", [("plain", "loom: [1/1] compiled set0"), ("none", "")])
def test_progress_modes_under_a_pipe(tmp_path: Path, mode: str, expect: str) -> None:
    project = make_project(tmp_path / "p", sets=1, per_set=1)
    r = subprocess.run(loom("build", str(project), "--progress", mode), env=env_for(tmp_path / "cache"),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stderr == ""
    assert (expect in r.stdout) if expect else r.stdout == ""


# A worker process that dies in the middle of a task, made deterministic
# without a hook in loom (`task_hooks`). The worker that gets set1 SIGKILLs itself while running
# it (once: a marker file remembers it), the same death as an OOM kill or a
# segfault in LLVM, at a known point. set0 waits until set2 has started, so
# the slot holding set0 cannot take set2: the crashed slot must, with a new
# worker process. Each task leaves `started-<set>-<pid>` behind.
KILLER = task_hook('''\
import os, signal, time


def _wrap(task):
    def hooked_task(header, payload, context):
        folder = os.environ["LOOM_TEST_HOOK_DIR"]
        name = header["set"]
        open(os.path.join(folder, f"started-{name}-{os.getpid()}"), "w").close()
        if name == "set1" and not os.path.exists(os.path.join(folder, "killed")):
            open(os.path.join(folder, "killed"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if name == "set0":
            deadline = time.monotonic() + 300  # a bound against a hang, not a timing assumption
            while (not any(f.startswith("started-set2-") for f in os.listdir(folder))
                   and time.monotonic() < deadline):
                time.sleep(0.01)
        return task(header, payload, context)

    return hooked_task
''')


def test_a_worker_dying_mid_task_fails_only_its_item(tmp_path: Path) -> None:
    """The issue's crash contract end to end: only that item fails and is
    reported, its slot gets a new worker, the other items build, exit 3, no
    stray file, no corrupt cache entry, and the next build restores identical bytes."""
    import json

    reference = make_project(tmp_path / "reference", sets=3, per_set=1, targets=TARGETS)
    r = subprocess.run(loom("build", str(reference), "-q", "--no-cache"), env=env_for(tmp_path / "unused"),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    want = outputs(reference / "build" / "loom")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(KILLER)
    project = make_project(tmp_path / "project", sets=3, per_set=1, targets=TARGETS)
    cache = tmp_path / "cache"
    env = env_for(cache, LOOM_TEST_HOOK_DIR=str(hooks))
    env["PYTHONPATH"] += os.pathsep + str(hooks)
    trace = tmp_path / "trace.json"
    r = subprocess.run(loom("build", str(project), "-j", "2", "--keep-going", "--progress", "plain",
                            "--trace", str(trace)), env=env, capture_output=True, text=True, timeout=600)
    assert (hooks / "killed").exists(), r.stderr
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    assert "loom: error: internal: set1: worker " in r.stderr and "died (signal 9, SIGKILL)" in r.stderr, r.stderr
    assert wait_gone(cache) == [], "a worker outlived its build"
    assert outputs(project / "build" / "loom") == {
        name: data for name, data in want.items() if not name.split("/")[-1].startswith("set1.")}
    assert strays(project) == []
    entries = list(Cache(str(cache)).entries())
    assert entries and all(_verify(Path(p).read_bytes(), Path(p).name) is not None for p, _, _ in entries)
    started = {f.name.split("-")[1]: int(f.name.split("-")[2]) for f in hooks.glob("started-*")}
    assert sorted(started) == ["set0", "set1", "set2"] and len(set(started.values())) == 3
    events = {e["name"].split()[0]: e for e in json.loads(trace.read_text())["traceEvents"]}
    assert events["set1"]["args"]["status"] == "crashed"
    assert events["set2"]["tid"] == events["set1"]["tid"]  # the same slot ...
    assert events["set2"]["pid"] == started["set2"] != started["set1"]  # ... with a new worker
    # The next build (no crash now) builds only the failed set, to the same bytes.
    r = subprocess.run(loom("build", str(project), "-q", "--trace", str(trace)), env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert outputs(project / "build" / "loom") == want
    assert [e["name"] for e in json.loads(trace.read_text())["traceEvents"]] == [
        "set1 spirv:vulkan1.3,amdgpu:gfx1100"]


NO_OP_PROBE = """\
import sys
from loomcli.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
heavy = ("llvmlite", "rich", "loomcli.ir", "loomcli.text", "loomcli.frontend", "loomcli.link", "loomcli.runtime.pool",
         "loomcli.service.session", "loomcli.service.compile", "loomcli.emit.llvm")
print("loaded:", " ".join(sorted(m for m in sys.modules if m.startswith(heavy))), file=sys.stderr)
"""


def test_a_no_op_build_loads_no_compiler(tmp_path: Path) -> None:
    """Nothing stale: no parser, IR, linker, LLVM, pool or rich (in a pipe) is imported."""
    project = make_project(tmp_path / "p", sets=2, per_set=1, targets=TARGETS)
    env = env_for(tmp_path / "cache")
    argv = [sys.executable, "-c", NO_OP_PROBE, "build", str(project), "-j", "2"]  # a pipe: plain progress
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0 and "loomcli.ir" in first.stderr, first.stderr  # a real build loads them
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stderr == "loaded: \n", again.stderr
    assert "4 up to date" in again.stdout


@pytest.mark.parametrize(("jobs", "inline"), [("2", False), ("1", True)])
def test_a_single_kernel_set_runs_in_a_worker_of_the_prestarted_server(tmp_path: Path, jobs: str,
                                                                       inline: bool) -> None:
    """One task is compiled inline, unless the entry point prestarted a fork
    server (a parallel `loom build`): then a worker forked from it, already
    warm, compiles it. The bytes are the same either way."""
    project = make_project(tmp_path / "p", sets=1, per_set=1, targets=("amdgpu:gfx1100",))
    trace = tmp_path / "t.json"
    proc = subprocess.Popen([sys.executable, "-m", "loomcli", "build", str(project), "-q", "-j", jobs, "--no-cache",
                             "--trace", str(trace)], env=env_for(tmp_path / "cache"), stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    events = json.loads(trace.read_text())["traceEvents"]
    assert len(events) == 1 and (events[0]["pid"] == proc.pid) == inline
    reference = make_project(tmp_path / "reference", sets=1, per_set=1, targets=("amdgpu:gfx1100",))
    assert subprocess.run(loom("build", str(reference), "-q", "-j", "1", "--no-cache"),
                          env=env_for(tmp_path / "cache"), timeout=600).returncode == 0
    assert outputs(project / "build" / "loom") == outputs(reference / "build" / "loom")
