"""The resident compile service (TOOLCHAIN.md section 12), with real servers.

Each test gets its own runtime folder (XDG_RUNTIME_DIR), so its servers
are its own. A served command must be indistinguishable from the same
command run in its own process: bytes, stdout, stderr, exit codes, with
relative paths from another folder, stdin and stdout as pipes, a terminal.
That a command was served is read from the server's request count.

To act inside a served command at a known point (kill its client, signal
it, crash it), a `sitecustomize` in the server's PYTHONPATH wraps the
compile entry point of the server's template (`HOOK`); what the wrapper
does is chosen by the request's own environment, so the same server also
serves ordinary commands. Nothing here depends on timing: waits are for
files and processes, with generous caps.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_build import KERNEL, LIBRARY

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the resident server is Linux only")

# Inside the server process only: its template's compile entry point, wrapped.
HOOK = '''
import os, sys

def _install():
    import loomcli.service.compile as c
    inner = c.compile_request

    def compile_request(request):
        folder = os.environ.get("LOOM_TEST_HOOK_DIR")
        if folder and os.environ.get("LOOM_TEST_HOOK") == "pid":  # say which process compiles
            with open(os.path.join(folder, "pids"), "a") as f:
                f.write(f"{os.getpid()}\\n")
            return inner(request)
        if folder:
            with open(os.path.join(folder, "started"), "w") as f:
                f.write(str(os.getpid()))
            if os.environ.get("LOOM_TEST_HOOK") == "crash":
                os.abort()
            while True:  # until a signal ends this command
                import time
                time.sleep(0.05)
        return inner(request)

    c.compile_request = compile_request


class _Finder:
    def find_spec(self, name, path, target=None):
        if name == "loomcli.service.compile":
            sys.meta_path.remove(self)
            import importlib.util
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _install()

            spec.loader.exec_module = exec_module
            return spec
        return None


if "server" in sys.orig_argv and "run" in sys.orig_argv:
    with open(os.path.join(os.environ["LOOM_TEST_SERVERS"], str(os.getpid())), "w"):
        pass
    sys.meta_path.insert(0, _Finder())
'''


LOOM = [sys.executable, "-m", "loomcli"]


@dataclass
class Loom:
    """loom with a private runtime folder; `served` runs with LOOM_SERVER unset."""

    env: dict[str, str]
    runtime: Path
    servers: Path  # one empty file per server process started (named by its pid)

    def run(self, *args: str, cwd: Path | None = None, mode: str | None = None, stdin: bytes | None = None,
            program: list[str] | None = None, **extra: str) -> subprocess.CompletedProcess[bytes]:
        """`loom ARGS` (`program`: another command line that stands for loom)."""
        env = dict(self.env, **extra)
        if mode is not None:
            env["LOOM_SERVER"] = mode
        # Never this checkout's folder: `python -m` would import loom from it, whatever PYTHONPATH says.
        return subprocess.run([*(program or LOOM), *args], cwd=cwd or self.runtime, env=env,
                              input=stdin, capture_output=True, timeout=300)

    def status(self) -> dict:
        r = self.run("server", "status", "--json")
        doc = json.loads(r.stdout)
        assert r.returncode == (0 if doc["running"] else 1), r.stderr
        return doc

    def judged(self) -> bool:
        """Whether this loom's code is old enough for its server to be named (see `server_key`)."""
        return self.run("server", "status").returncode in (0, 1)

    def requests(self) -> int:
        return self.status()["requests"]

    def start(self, *args: str) -> dict:
        for _ in range(100):  # a tree edited a moment ago is not judged by its stamps yet
            r = self.run("server", "start", *args)
            if b"changed a moment ago" not in r.stderr:
                break
            time.sleep(0.1)
        assert r.returncode == 0, r.stderr
        return self.status()


def loom_env(runtime: Path, servers: Path, hooks: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_SERVER", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(hooks)]), XDG_RUNTIME_DIR=str(runtime),
               LOOM_TEST_SERVERS=str(servers), LOOM_CACHE="0")
    return env


@pytest.fixture
def loom(tmp_path: Path) -> Iterator[Loom]:
    runtime = Path(tempfile.mkdtemp(prefix="lx-", dir="/tmp"))  # a socket path has 108 bytes
    hooks = tmp_path / "hooks"
    servers = tmp_path / "servers"
    hooks.mkdir()
    servers.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOK)
    instance = Loom(loom_env(runtime, servers, hooks), runtime, servers)
    yield instance
    instance.run("server", "stop", "--all")
    shutil.rmtree(runtime, ignore_errors=True)


def wait_for(condition, what: str, cap: float = 120.0) -> None:
    deadline = time.monotonic() + cap
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def ended(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie waiting for its reaper has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` but a build's state, which records when its outputs were written."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (".loom-build.json", ".loom-build.noop")}


# ---------------------------------------------------------------- same behaviour, served or not


def workspace(root: Path) -> Path:
    """`root/in` holds the inputs (a project among them), `root/work` is the folder commands run in
    (with an empty `out`)."""
    (root / "in").mkdir(parents=True)
    for name in ("saxpy.loom", "matmul.loom", "frontier.loom"):
        shutil.copy(SAMPLES / name, root / "in" / name)
    shutil.copytree(SAMPLES / "project", root / "in" / "project", ignore=shutil.ignore_patterns("build"))
    (root / "in" / "bad.loom").write_text('kernel.def export("k") @k(%n: index) {\n'
                                          '  %x = scalar.addf %n, %n : f32\n}\n')
    (root / "work" / "out").mkdir(parents=True)
    return root / "work"


SAXPY = "../in/saxpy.loom"
CASES = {
    "compile hsaco": ["compile", SAXPY, "--target", "amdgpu:gfx1100", "-o", "out/k.hsaco"],
    "compile spv, depfile, manifest, launch config": [
        "compile", SAXPY, "--target", "spirv:vulkan1.3", "-o", "out/k.spv", "-MD", "--manifest", "out/m.json",
        "--emit-launch-config", "out/k.launch.loombc"],
    "compile to stdout": ["compile", SAXPY, "--target", "spirv:vulkan1.3", "--format", "spirv-binary", "-o", "-"],
    "compile from stdin": ["compile", "-", "--target", "spirv:vulkan1.3", "-o", "out/k.spv"],
    "compile, several targets at once": ["compile", "../in/matmul.loom", "--out-dir", "out", "-j", "2",
                                         "--target", "amdgpu:gfx1100", "--target", "spirv:vulkan1.3"],
    "compile, an input error": ["compile", "../in/bad.loom", "--target", "spirv:vulkan1.3", "-o", "out/k.spv"],
    "compile, json diagnostics": ["compile", "../in/bad.loom", "--target", "spirv:vulkan1.3", "-o", "out/k.spv",
                                  "--diagnostics", "json"],
    "compile, a missing input": ["compile", "../in/none.loom", "--target", "spirv:vulkan1.3", "-o", "out/k.spv"],
    "compile, a usage error": ["compile", SAXPY, "--bogus"],
    "build": ["build", "../in/project", "--out-dir", "out", "-j", "2", "--progress", "plain"],
    "build, one job, a trace": ["build", "../in/project", "--out-dir", "out", "-j", "1", "--trace", "out/t.json"],
    "frontier": ["frontier", "../in/frontier.loom", "--target", "spirv:vulkan1.3", "--out-dir", "out"],
    "test": ["test", SAXPY, "--device", "interpreter"],
    "fmt": ["fmt", SAXPY],
    "link": ["link", SAXPY, "../in/matmul.loom", "--mode", "merge", "-o", "out/all.loombc"],
    "opt": ["opt", SAXPY, "--pipeline", "default"],
}
VARYING = re.compile(rb"in \d+\.\d+ ?m?s")  # a build's summary says how long it took


Outcome = tuple[int, bytes, bytes, dict[str, bytes]]


def outcome(loom: Loom, root: Path, name: str, mode: str, program: list[str] | None = None) -> Outcome:
    """CASES[name] run in a fresh workspace under `root` (LOOM_SERVER=`mode`, "" unset; by
    `program`, if given): its exit code, stdout, stderr and files, less what differs from run to
    run anyway."""
    args = CASES[name]
    stdin = (SAMPLES / "saxpy.loom").read_bytes() if "-" in args[:2] else None
    shutil.rmtree(root / "ws", ignore_errors=True)
    work = workspace(root / "ws")  # the same paths every time: depfiles and modules name them
    before = loom.requests()
    r = loom.run(*args, cwd=work, mode=mode or None, stdin=stdin, program=program)
    assert loom.requests() - before == (1 if not mode else 0)
    trace = work / "out" / "t.json"
    if trace.exists():  # times and pids differ; what ran does not
        doc = json.loads(trace.read_text())
        trace.write_text(json.dumps(sorted(e["name"] for e in doc["traceEvents"])))
    out, err = VARYING.sub(b"", r.stdout), VARYING.sub(b"", r.stderr)
    return r.returncode, unordered(out) if name.startswith("build") else out, err, files(work)


def unordered(out: bytes) -> bytes:
    """A parallel build's lines: its work finishes in any order, served or not."""
    return b"\n".join(sorted(re.sub(rb"^loom: \[\d+/\d+\] ", b"", line) for line in out.splitlines()))


def assert_same(served: Outcome, direct: Outcome) -> None:
    assert served[0] == direct[0], (served[2], direct[2])
    assert served[1] == direct[1]
    assert served[2] == direct[2]
    assert served[3] == direct[3]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_served_command_is_the_command(loom: Loom, tmp_path: Path, name: str) -> None:
    loom.start()
    served = outcome(loom, tmp_path, name, "")
    assert_same(served, outcome(loom, tmp_path, name, "off"))
    if name == "compile hsaco":
        assert served[0] == 0 and served[3]["out/k.hsaco"].startswith(b"\x7fELF")


def test_a_warm_child_serves_each_command_as_a_fresh_process(loom: Loom, tmp_path: Path) -> None:
    """A compile's child serves the next request (the pids the compile entry
    point sees say so), and every command, served one after another by one
    server, so most of them by a child that served before, is still the
    command run in its own process; `test` ends its child (a build's child serves again)."""
    loom.start()
    hook = tmp_path / "hook"
    hook.mkdir()
    saxpy = str(SAMPLES / "saxpy.loom")

    def compiled_in(ext: str = "spv") -> str:
        """The pid of the process a served compile ran in."""
        r = loom.run("compile", saxpy, "--target", "spirv:vulkan1.3" if ext == "spv" else "amdgpu:gfx1100",
                     "-o", str(tmp_path / f"k.{ext}"), LOOM_TEST_HOOK="pid", LOOM_TEST_HOOK_DIR=str(hook))
        assert r.returncode == 0, r.stderr
        return (hook / "pids").read_text().split()[-1]

    first = compiled_in()
    assert compiled_in() == compiled_in("hsaco") == first
    names = sorted(CASES)
    for name in names[1::2] + names[::2]:  # each after another kind than in the test above
        assert_same(outcome(loom, tmp_path, name, ""), outcome(loom, tmp_path, name, "off"))
        before, first = first, compiled_in()
        assert (first == before) == (CASES[name][0] != "test"), name


PROJECT_TOML = """\
[project]
name = "p"
version = "1.0"

[build]
targets = ["spirv:vulkan1.3"]

[[library]]
name = "helpers"
srcs = ["{library}"]

[[kernels]]
name = "k"
srcs = ["k/*.loom"]
libraries = ["helpers"]
"""
# One warm child's builds, in order: (the project's library file, its op, a kernel that does not compile)
BUILDS = [("lib/h.loom", "addf", False), ("lib/h.loom", "mulf", False), ("other/h.loom", "mulf", False),
          ("lib/h.loom", "mulf", True), ("lib/h.loom", "addf", False)]


def test_a_warm_child_builds_project_after_project_as_a_fresh_process(loom: Loom, tmp_path: Path) -> None:
    """A build's child serves the next build: one child builds a project, the same project
    with its library changed, its library moved, a kernel that does not compile, and the first
    project again, and each build's exit code, stdout, stderr and outputs are a direct run's
    (its trace's pid says one child ran them all)."""
    loom.start()
    work = tmp_path / "work"
    (tmp_path / "bad.loom").write_text('kernel.def export("b") @b(%n: index) {\n  %x = scalar.addf %n, %n : f32\n}\n')

    def build(library: str, op: str, broken: bool, mode: str) -> tuple[Outcome, set[int]]:
        shutil.rmtree(work, ignore_errors=True)
        (work / "k").mkdir(parents=True)
        (work / library).parent.mkdir(parents=True, exist_ok=True)
        (work / library).write_text(LIBRARY.format(helper="h", op=op))
        (work / "loom.toml").write_text(PROJECT_TOML.format(library=library))
        (work / "k" / "a.loom").write_text(KERNEL.format(helper="h", name="k", group=1))
        if broken:
            shutil.copy(tmp_path / "bad.loom", work / "k" / "b.loom")
        r = loom.run("build", ".", "-j", "2", "--progress", "plain", "--trace", "t.json", cwd=work,
                     mode=mode or None)
        events = [e for e in json.loads((work / "t.json").read_text())["traceEvents"] if e.get("ph") == "X"]
        (work / "t.json").unlink()
        return (r.returncode, VARYING.sub(b"", r.stdout), VARYING.sub(b"", r.stderr), files(work)), \
            {e["pid"] for e in events}

    pids, kernels = set(), []
    for library, op, broken in BUILDS:
        served, ran_in = build(library, op, broken, "")
        assert_same(served, build(library, op, broken, "off")[0])
        assert served[0] == (1 if broken else 0), served[2]
        pids |= ran_in
        kernels.append(served[3].get("build/loom/spirv-vulkan1.3/k.spv"))
    assert len(pids) == 1
    assert kernels[0] == kernels[4] != kernels[1] == kernels[2] and kernels[3] is None and None not in kernels[:3]


def descendants(pid: int) -> dict[int, int]:
    """Every process below `pid`, with its depth under it (1: a child)."""
    found: dict[int, int] = {}
    level, depth = [pid], 0
    while level:
        depth += 1
        below = []
        for parent in level:
            for task in os.listdir(f"/proc/{parent}/task") if os.path.isdir(f"/proc/{parent}/task") else ():
                try:
                    below += [int(p) for p in Path(f"/proc/{parent}/task/{task}/children").read_text().split()]
                except OSError:  # it ended meanwhile
                    pass
        found.update((p, depth) for p in below)
        level = below
    return found


def test_a_warm_childs_next_build_runs_in_its_kept_workers(loom: Loom, tmp_path: Path) -> None:
    """A build's child keeps its pool's fork server and workers for its next build: the
    second build's tasks run in the first one's worker processes, each build with a direct
    run's exit code, output and files. A build in another environment gets workers of its
    own (the kept ones end), and the kept ones end with the server."""
    from test_build import make_project

    server = loom.start()["pid"]
    work = make_project(tmp_path / "work", sets=3)

    def build(mode: str, **extra: str) -> tuple[Outcome, set[int]]:
        shutil.rmtree(work / "build", ignore_errors=True)
        r = loom.run("build", ".", "-j", "2", "--trace", "t.json", cwd=work, mode=mode or None, **extra)
        events = [e for e in json.loads((work / "t.json").read_text())["traceEvents"] if e.get("ph") == "X"]
        (work / "t.json").unlink()
        return (r.returncode, unordered(VARYING.sub(b"", r.stdout)), VARYING.sub(b"", r.stderr), files(work)), \
            {e["pid"] for e in events}

    def workers() -> set[int]:  # server -> build child -> fork server -> workers
        return {pid for pid, depth in descendants(server).items() if depth == 3}

    direct, _ = build("off")
    first, ran_first = build("")
    kept = workers()
    second, ran_second = build("")
    assert_same(first, direct)
    assert_same(second, direct)
    assert len(kept) == 2 and ran_first <= kept and ran_second <= kept and workers() == kept
    other, ran_other = build("", LOOM_TEST_NOTE="another environment")
    assert_same(other, direct)
    assert ran_other.isdisjoint(kept) and all(ended(pid) for pid in kept)
    left = set(descendants(server))
    assert loom.run("server", "stop").returncode == 0
    wait_for(lambda: all(ended(pid) for pid in left), "the kept workers to end with the server")


def test_a_terminal_stays_a_terminal(loom: Loom, tmp_path: Path) -> None:
    """A build whose stdout is a terminal shows the live display, served or not."""
    loom.start()
    shown = {}
    for mode in ("", "off"):
        work = workspace(tmp_path / (mode or "served"))
        primary, secondary = pty.openpty()
        # CI, MAKEFLAGS and NO_COLOR each mean "not interactive" to loom and rich; a CI machine sets them.
        env = {k: v for k, v in loom.env.items() if k not in ("CI", "MAKEFLAGS", "MFLAGS", "NO_COLOR")}
        env.update(COLUMNS="100", TERM="xterm")
        if mode:
            env["LOOM_SERVER"] = mode
        proc = subprocess.Popen([sys.executable, "-m", "loomcli", "build", "../in/project", "--out-dir", "out"],
                                cwd=work, env=env, stdin=secondary, stdout=secondary, stderr=secondary)
        os.close(secondary)
        data = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal's other side closed: the command ended
                break
            if not chunk:
                break
            data += chunk
        assert proc.wait(timeout=300) == 0, data
        os.close(primary)
        shown[mode] = data
    for data in shown.values():
        assert b"\x1b[" in data and b"built demo 0.1.0" in data
    assert loom.requests() == 1


def test_what_stays_in_process(loom: Loom, tmp_path: Path) -> None:
    """--version, launch-eval, targets, the server's own commands and a no-op build are never served."""
    loom.start()
    work = workspace(tmp_path)
    r = loom.run("compile", SAXPY, "--target", "spirv:vulkan1.3", "-o", "k.spv", "--emit-launch-config",
                 "k.launch.loombc", cwd=work, mode="off")
    assert r.returncode == 0, r.stderr
    for args in (["--version"], ["launch-eval", "k.launch.loombc", "@saxpy", "1000"], ["targets"],
                 ["server", "status"]):
        r = loom.run(*args, cwd=work)
        assert r.returncode == 0, r.stderr
    assert loom.requests() == 0
    # The no-op check trusts only files older than two seconds (`stat_stamp`): until the
    # sources just copied are, each build is a full one, served, that finds nothing to do.
    served = -1
    while loom.requests() != served:
        served = loom.requests()
        r = loom.run("build", "../in/project", "--out-dir", "out", cwd=work)
        assert r.returncode == 0, r.stderr
        assert served < 100
        time.sleep(0.1)
    assert b"0 compiled, 0 cached, 6 up to date" in r.stdout


CLIENT_PROBE = """\
import os, sys
before = set(sys.modules)
from loomcli import entry
from loomcli.runtime import served, spawn
from loomcli.service import fingerprint
fingerprint.server_key()
served.stream_tokens()
spawn.inherited_fds(os.environ)
served.connect(served.folder(os.environ), "none")
print(" ".join(sorted(set(sys.modules) - before)))
"""


def test_the_client_imports_almost_nothing(tmp_path: Path) -> None:
    """What a served command loads before it hands its command line over: loom's client modules
    and three small ones of Python's; typing, re, enum, json or click would cost it more than its
    whole work. (-S: this machine's site hooks must not preload what loom would import.)"""
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_RUNTIME_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-S", "-c", CLIENT_PROBE], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    loaded = set(r.stdout.split())
    assert "loomcli.runtime.served" in loaded
    assert {m for m in loaded if not m.startswith("loomcli")} <= {"__future__", "_blake2", "_socket"}, loaded


def test_the_template_rehearsal_compiles_for_each_generator() -> None:
    """What the template compiles before its first fork (`loomcli.commands.server.rehearse`) must
    really compile for every generator, or it warms nothing; and it leaves no thread behind (a
    fork copies only the thread that forks)."""
    probe = ("import threading\nfrom loomcli.commands import server\n"
             "print(' '.join(server.rehearse()), threading.active_count())")
    r = subprocess.run([sys.executable, "-c", probe], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["spirv:vulkan1.3", "amdgpu:gfx1100", "nvptx:sm_80", "1"]


# ---------------------------------------------------------------- clients that go away, signals, crashes


def blocked(loom: Loom, tmp_path: Path, hook: str = "block",
            program: list[str] | None = None) -> tuple[subprocess.Popen[bytes], Path, int]:
    """A served compile stopped inside its compile (see HOOK): the client (`program`, else
    loom), the output folder, the child's pid."""
    work = workspace(tmp_path / "blocked")
    marks = tmp_path / "marks"
    marks.mkdir()
    env = dict(loom.env, LOOM_TEST_HOOK_DIR=str(marks), LOOM_TEST_HOOK=hook)
    client = subprocess.Popen([*(program or LOOM), "compile", SAXPY, "--target", "spirv:vulkan1.3",
                               "-o", "out/k.spv", "-MD"], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    wait_for(lambda: (marks / "started").exists() and (marks / "started").read_text(), "the command to start")
    return client, work, int((marks / "started").read_text())


def test_a_killed_client_ends_its_command_and_the_server_serves_on(loom: Loom, tmp_path: Path) -> None:
    loom.start()
    client, work, child = blocked(loom, tmp_path)
    client.kill()
    client.wait(timeout=60)
    wait_for(lambda: ended(child), "the command to end")
    assert list((work / "out").iterdir()) == []  # nothing partial, no temporary file
    again = workspace(tmp_path / "again")
    r = loom.run("compile", SAXPY, "--target", "spirv:vulkan1.3", "-o", "out/k.spv", cwd=again)
    assert r.returncode == 0, r.stderr
    assert (again / "out" / "k.spv").read_bytes()[:4] == b"\x03\x02\x23\x07"
    assert loom.requests() == 2


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 130), (signal.SIGHUP, -signal.SIGHUP)])
def test_signals_reach_the_command(loom: Loom, tmp_path: Path, sig: int, code: int) -> None:
    """Ctrl-C and SIGTERM take loom's interrupt path (exit 130, nothing written); SIGHUP's
    default action ends the command and then the client by the same signal."""
    loom.start()
    signal_reaches_the_command(loom, tmp_path, sig, code)


def signal_reaches_the_command(loom: Loom, tmp_path: Path, sig: int, code: int,
                               program: list[str] | None = None) -> None:
    """A blocked served compile (by `program`, else loom) sent `sig` ends with `code`, writing nothing."""
    client, work, child = blocked(loom, tmp_path, program=program)
    client.send_signal(sig)
    _, err = client.communicate(timeout=120)
    assert client.returncode == code, err
    if code == 130:
        assert err.decode().strip().endswith("loom: error: interrupted")
    wait_for(lambda: ended(child), "the command to end")
    assert list((work / "out").iterdir()) == []


def test_a_crashed_command_is_its_exit_3(loom: Loom, tmp_path: Path) -> None:
    loom.start()
    client, work, _ = blocked(loom, tmp_path, hook="crash")
    _, err = client.communicate(timeout=120)
    assert client.returncode == 3
    assert "crashed in the loom server (signal 6)" in err.decode()
    assert list((work / "out").iterdir()) == []
    assert loom.status()["running"]
    assert loom.run("fmt", str(SAMPLES / "saxpy.loom")).returncode == 0
    assert loom.requests() == 2


# ---------------------------------------------------------------- lifetime and safety


def test_status_start_stop(loom: Loom) -> None:
    down = loom.status()
    assert down["running"] is False and down["pid"] is None
    doc = loom.start()
    assert set(doc) == {"running", "pid", "version", "code_hash", "uptime_s", "requests", "socket"}
    assert doc["running"] and doc["version"] == down["version"] and doc["code_hash"] == down["code_hash"]
    assert len(doc["code_hash"]) == 64 and doc["requests"] == 0
    assert Path(doc["socket"]).parent == loom.runtime / "loom"
    assert oct((loom.runtime / "loom").stat().st_mode & 0o777) == "0o700"
    assert loom.run("server", "start").returncode == 0  # running already: fine
    assert loom.status()["pid"] == doc["pid"]
    human = loom.run("server", "status")
    assert human.returncode == 0 and b"running" in human.stdout
    stop = loom.run("server", "stop")
    assert stop.returncode == 0, stop.stderr
    assert ended(doc["pid"])
    assert not (loom.runtime / "loom").exists()  # no socket, no lock, no folder
    assert loom.run("server", "status").returncode == 1


def test_an_idle_server_exits(loom: Loom) -> None:
    doc = loom.start("--idle-timeout", "1")
    wait_for(lambda: ended(doc["pid"]), "the idle server to exit")
    assert not (loom.runtime / "loom").exists()


def test_concurrent_auto_starts_make_one_server(loom: Loom, tmp_path: Path) -> None:
    work = workspace(tmp_path)
    env = dict(loom.env, LOOM_SERVER="auto")
    clients = [subprocess.Popen([sys.executable, "-m", "loomcli", "fmt", SAXPY], cwd=work, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(6)]
    for c in clients:
        _, err = c.communicate(timeout=300)
        assert c.returncode == 0, err
    wait_for(lambda: loom.status()["running"], "the server to serve")
    assert len(list(loom.servers.iterdir())) == 1
    before = loom.requests()
    assert loom.run("fmt", SAXPY, cwd=work, mode="auto").returncode == 0
    assert loom.requests() == before + 1


def test_no_server_or_a_stale_socket_runs_in_process(loom: Loom, tmp_path: Path) -> None:
    work = workspace(tmp_path)
    doc = loom.start()
    loom.run("server", "stop")
    folder = Path(doc["socket"]).parent
    folder.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(doc["socket"])
    stale.close()  # the file stays; nobody listens
    r = loom.run("compile", SAXPY, "--target", "spirv:vulkan1.3", "-o", "out/k.spv", cwd=work)
    assert r.returncode == 0 and r.stderr == b""
    assert not loom.status()["running"]
    r = loom.run("fmt", SAXPY, cwd=work, mode="auto")  # runs here, and starts a server for the next one
    assert r.returncode == 0 and r.stderr == b""
    wait_for(lambda: loom.status()["running"], "the server to serve")


def test_a_folder_that_is_not_private_is_not_used(loom: Loom, tmp_path: Path) -> None:
    work = workspace(tmp_path)
    folder = loom.runtime / "loom"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    r = loom.run("server", "start")
    assert r.returncode == 3 and b"not a private folder" in r.stderr
    r = loom.run("fmt", SAXPY, cwd=work, mode="auto")
    assert r.returncode == 0 and r.stderr == b""
    assert list(folder.iterdir()) == []
    link = loom.runtime / "elsewhere"
    folder.rmdir()
    link.mkdir(mode=0o700)
    folder.symlink_to(link)
    assert loom.run("server", "start").returncode == 3


@pytest.mark.parametrize("env, message", [
    ({"LOOM_SERVER": "yes"}, "LOOM_SERVER='yes': expected auto or off (unset: use a running server)"),
    ({"LOOM_SERVER_IDLE": "soon"}, "LOOM_SERVER_IDLE='soon': expected whole seconds from 1 to 604800"),
    ({"LOOM_SERVER_IDLE": "0"}, "LOOM_SERVER_IDLE='0': expected whole seconds from 1 to 604800"),
])
def test_bad_settings_are_usage_errors(loom: Loom, env: dict[str, str], message: str) -> None:
    for args in (["fmt", str(SAMPLES / "saxpy.loom")], ["server", "start"]):
        r = loom.run(*args, **env)
        assert r.returncode == 2
        assert r.stderr.decode().splitlines() == [f"loom: error: {message}"]
    r = loom.run("server", "start", "--idle-timeout", "-5")
    assert r.returncode == 2
    assert r.stderr.decode().splitlines() == [
        "loom: error: --idle-timeout='-5': expected whole seconds from 1 to 604800"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_another_user_is_refused(loom: Loom, tmp_path: Path) -> None:
    doc = loom.start()
    folder = Path(doc["socket"]).parent
    for opened in (loom.runtime, folder):  # let the other user reach the socket, as a careless admin might
        opened.chmod(0o711)
    os.chmod(doc["socket"], 0o777)
    body = b"\0".join([b"loom-serve-1", Path(doc["socket"]).stem.encode(), b"status"])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the other user: connects, asks, and reports what came back
        try:
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(doc["socket"])
            try:
                s.sendall(len(body).to_bytes(4, "little") + body)
                answer = s.recv(100)
            except (ConnectionResetError, BrokenPipeError):  # closed with our request unread
                answer = b""
            os.write(write, b"answer:" + answer)
        except BaseException as e:
            os.write(write, repr(e).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        said = f.read()
    os.waitpid(pid, 0)
    assert said == b"answer:"  # connected, then closed without a word
    assert not loom.status()["running"]  # and our own clients no longer trust that folder
    for opened in (loom.runtime, folder):
        opened.chmod(0o700)
    assert loom.status()["running"] and loom.requests() == 0


def test_a_changed_loom_never_uses_an_old_server(loom: Loom, tmp_path: Path) -> None:
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "loomcli", copy / "loomcli", ignore=shutil.ignore_patterns("__pycache__"))
    changed = Loom(dict(loom.env, PYTHONPATH=os.pathsep.join([str(copy), loom.env["PYTHONPATH"]])), loom.runtime,
                   loom.servers)
    old = changed.start()
    work = workspace(tmp_path)
    assert changed.run("fmt", SAXPY, cwd=work).returncode == 0
    assert changed.requests() == 1
    with open(copy / "loomcli" / "errors.py", "a") as f:
        f.write("\n# a change\n")
    r = changed.run("fmt", SAXPY, cwd=work)  # loom changed a moment ago: no server at all
    assert r.returncode == 0 and r.stderr == b""
    wait_for(changed.judged, "the new code to be judged")
    now = changed.status()
    assert now["code_hash"] != old["code_hash"] and not now["running"]
    r = changed.run("fmt", SAXPY, cwd=work)
    assert r.returncode == 0 and r.stderr == b""
    sys.path.insert(0, str(ROOT))
    from loomcli.runtime.resident import ask

    answer = ask(str(loom.runtime / "loom"), Path(old["socket"]).stem, b"status")
    assert answer is not None and answer[1]["requests"] == 1  # the old server ran nothing more


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
@pytest.mark.parametrize("style", ["pipe", "fifo"])
def test_make_j_with_served_compiles_keeps_its_tokens(loom: Loom, tmp_path: Path, style: str) -> None:
    """Multi-target compiles take make's tokens in the server's children and give them back."""
    version = subprocess.run(["make", "--version"], capture_output=True, text=True).stdout
    if style == "fifo" and not re.search(r"GNU Make (4\.[4-9]|[5-9])", version):
        pytest.skip("this make has no FIFO jobserver")
    loom.start()
    work = workspace(tmp_path)
    loom_cmd = f"{sys.executable} -m loomcli"
    targets = " ".join(f"--target spirv:vulkan1.{v}" for v in (1, 2, 3))
    rules = {f"c{i}": f"+{loom_cmd} compile {SAXPY if i % 2 else '../in/matmul.loom'} --out-dir out-{i} -j 4 "
                      f"{targets}" for i in range(4)}
    (work / "Makefile").write_text("all: " + " ".join(rules) + "\n"
                                   + "".join(f"{name}:\n\t{cmd}\n" for name, cmd in rules.items()))
    options = [f"--jobserver-style={style}"] if "4.3" not in version else []
    r = subprocess.run(["make", "-j3", *options, "--no-print-directory"], cwd=work,
                       env=loom.env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "jobserver" not in r.stderr.lower() and "token" not in r.stderr.lower(), r.stderr
    assert loom.requests() == 4
    for i in range(4):
        assert len(list((work / f"out-{i}").glob("*.spv"))) == 3


# ---------------------------------------------------------------- hostile clients (issue 25)


def request(*tokens: bytes) -> bytes:
    body = b"\0".join(tokens)
    return len(body).to_bytes(4, "little") + body


def hostile_requests(key: bytes) -> dict[str, tuple[bytes, int]]:
    """name -> (request bytes, how many of the test's descriptors go with them)."""
    magic = b"loom-serve-1"
    stream, closed = [b"utf-8", b"strict", b"1", b"0"], [b""] * 4
    streams = [*closed, *stream, *closed]  # stdout only
    return {
        "noise": (bytes(range(256)) * 8, 0),
        "a length past the limit": ((2 ** 32 - 1).to_bytes(4, "little") + b"x" * 64, 0),
        "another magic": (request(b"loom-serve-0", key, b"status"), 0),
        "another key": (request(magic, b"0" * 20, b"status"), 0),
        "an unknown operation": (request(magic, key, b"exec"), 0),
        "run without arguments": (request(magic, key, b"run"), 0),
        "a umask past 0777": (request(magic, key, b"run", b"4096", *streams, b"0", b"1", b"fmt", b"0"), 2),
        "a count past the tokens": (request(magic, key, b"run", b"18", *streams, b"9" * 5000), 2),
        "a negative count": (request(magic, key, b"run", b"18", *streams, b"-1"), 2),
        "a descriptor number past any table": (request(magic, key, b"run", b"18", *streams, b"1", b"10" * 8, b"1",
                                                       b"fmt", b"0"), 3),
        "a descriptor number below 3": (request(magic, key, b"run", b"18", *streams, b"1", b"2", b"1", b"fmt",
                                                b"0"), 3),
        "a bytes-to-bytes codec": (request(magic, key, b"run", b"18", *closed, b"hex", b"strict", b"1", b"0", *closed,
                                           b"0", b"1", b"fmt", b"0"), 2),
        "an unknown codec": (request(magic, key, b"run", b"18", *closed, b"klingon", b"strict", b"1", b"0", *closed,
                                     b"0", b"1", b"fmt", b"0"), 2),
        "an unknown error handler": (request(magic, key, b"run", b"18", *closed, b"utf-8", b"shout", b"1", b"0",
                                             *closed, b"0", b"1", b"fmt", b"0"), 2),
        "too few descriptors": (request(magic, key, b"run", b"18", *streams, b"0", b"1", b"fmt", b"0"), 1),
        "trailing tokens": (request(magic, key, b"run", b"18", *streams, b"0", b"1", b"fmt", b"0", b"more"), 2),
    }


def test_hostile_requests_are_refused_and_the_server_serves_on(loom: Loom, tmp_path: Path) -> None:
    """A request the server cannot run as its client's command is refused
    (`R`, or closed unanswered), never run: a descriptor number past any
    table or a stream wrapping Python has no text codec for made the
    command's child fail to start (an internal error for its client)."""
    doc = loom.start()
    key = Path(doc["socket"]).stem.encode()
    folder = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    out_r, out_w = os.pipe()
    extra_r, extra_w = os.pipe()
    try:
        for name, (raw, nfds) in hostile_requests(key).items():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(doc["socket"])
            s.settimeout(120)
            fds = [folder, out_w, extra_r][:nfds]
            if fds:
                socket.send_fds(s, [raw[:1]], fds)
                raw = raw[1:]
            try:
                s.sendall(raw)
                answer = s.recv(64)
            except (ConnectionResetError, BrokenPipeError):
                answer = b""
            s.close()
            assert answer in (b"", b"R\0\0\0\0"), f"{name}: {answer!r}"
    finally:
        for fd in (folder, out_r, out_w, extra_r, extra_w):
            os.close(fd)
    assert loom.requests() == 0
    r = loom.run("fmt", SAXPY, cwd=workspace(tmp_path))
    assert r.returncode == 0 and r.stderr == b"" and loom.requests() == 1


def test_a_server_out_of_descriptors_neither_spins_nor_stalls(loom: Loom, tmp_path: Path) -> None:
    """Idle connections holding every descriptor the server may open made
    `accept` fail (EMFILE) with the listener still readable: the loop spun
    and every new client waited until the idle ones timed out (30 s). Now
    the oldest idle one is refused and the new client is served."""
    import resource

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    r = subprocess.run([sys.executable, "-m", "loomcli", "server", "start"], cwd=loom.runtime, env=loom.env,
                       capture_output=True, timeout=300, preexec_fn=few_descriptors)
    assert r.returncode == 0, r.stderr
    doc = loom.status()
    idle = []
    for _ in range(100):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(doc["socket"])
        idle.append(s)
    try:
        work = workspace(tmp_path)
        # Well inside the 30 s after which the server drops a connection that sends nothing.
        r = subprocess.run([sys.executable, "-m", "loomcli", "fmt", SAXPY], cwd=work, env=loom.env,
                           capture_output=True, timeout=25)
        assert r.returncode == 0 and r.stderr == b"", r.stderr
        assert loom.status()["running"]
    finally:
        for s in idle:
            s.close()
    wait_for(lambda: loom.requests() >= 1, "the request to be counted")
