"""loom's native client (`loom server client`, loomcli/runtime/client.c): a
served command handed over without a Python start-up must be the command,
and whatever the client is not sure of must run through the loom program it
stands in for.

Each test builds the client for a launcher of its own: a `loom` script
that notes each run in a file, so a test sees whether Python loom ran
(`launched`) besides whether a server served (`requests`). The servers and
their hooks are test_server's.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_server import (
    CASES,
    ROOT,
    SAMPLES,
    SAXPY,
    Loom,
    assert_same,
    blocked,
    ended,
    loom,
    outcome,
    signal_reaches_the_command,
    wait_for,
    workspace,
)

__all__ = ["loom"]  # the fixture, used by name

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the resident server is Linux only"),
    pytest.mark.skipif(not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")),
                       reason="no C compiler to build the native client with (scripts/install-system-deps.sh)"),
]

# What the client hands over (everything else runs through the launcher).
SERVED = sorted(name for name in CASES if not name.startswith("build"))


@dataclass
class Native:
    loom: Loom
    program: Path   # the native client
    launcher: Path  # the loom script it stands in for
    notes: Path     # one line per run of the launcher

    def run(self, *args: str, **kw) -> subprocess.CompletedProcess[bytes]:
        return self.loom.run(*args, program=[str(self.program)], **kw)

    def launched(self) -> int:
        return len(self.notes.read_text().splitlines()) if self.notes.exists() else 0

    def start(self) -> None:
        """Start the server through the launcher, as a first `auto` command would."""
        for _ in range(100):  # a tree edited a moment ago is not judged by its stamps yet
            r = self.loom.run("server", "start", program=[str(self.launcher)])
            if b"changed a moment ago" not in r.stderr:
                break
            time.sleep(0.1)
        assert r.returncode == 0, r.stderr
        assert list((self.loom.runtime / "loom").glob("launcher-*.via"))


def launcher_script(folder: Path, notes: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "loom"
    script.write_text(f"#!{sys.executable}\nwith open({str(notes)!r}, 'a') as f:\n    f.write('ran\\n')\n"
                      "from loomcli.entry import main\nmain()\n")
    script.chmod(0o755)
    return script


def build_client(loom: Loom, launcher: Path, program: Path) -> None:
    r = loom.run("server", "client", "-o", str(program), "--launcher", str(launcher))
    assert r.returncode == 0, r.stderr
    assert program.stat().st_mode & 0o111


@pytest.fixture
def native(loom: Loom, tmp_path: Path) -> Native:
    notes = tmp_path / "launched"
    launcher = launcher_script(tmp_path / "bin", notes)
    program = tmp_path / "bin" / "loom-client"
    build_client(loom, launcher, program)
    return Native(loom, program, launcher, notes)


@pytest.mark.parametrize("name", SERVED)
def test_a_natively_served_command_is_the_command(native: Native, tmp_path: Path, name: str) -> None:
    native.start()
    launched = native.launched()
    served = outcome(native.loom, tmp_path, name, "", program=[str(native.program)])  # counts one request
    assert native.launched() == launched  # no Python started on the client's side
    assert_same(served, outcome(native.loom, tmp_path, name, "off"))


@pytest.mark.parametrize("args, env, code, served, text", [
    (["fmt", SAXPY], {"LOOM_SERVER": "auto"}, 0, "native", b"kernel.def"),
    (["fmt", SAXPY], {"LOOM_SERVER": "off"}, 0, "", b"kernel.def"),
    (["fmt", SAXPY], {"LOOM_SERVER": "sometimes"}, 2, "", b"LOOM_SERVER='sometimes'"),
    (["fmt", SAXPY], {"LOOM_SERVER_IDLE": "soon"}, 2, "", b"LOOM_SERVER_IDLE='soon'"),
    (["fmt", SAXPY], {"LOOM_SERVER_IDLE": " 30 "}, 0, "native", b"kernel.def"),
    # Another interpreter environment: the server cannot tell what that Python would do; Python loom can.
    (["fmt", SAXPY], {"PYTHONWARNINGS": "ignore"}, 0, "python", b"kernel.def"),
    (["fmt", SAXPY], {"MAKEFLAGS": "-j2 --jobserver-auth=x,y"}, 0, "python", b"kernel.def"),
    (["--version"], {}, 0, "", b"loom"),
    (["launch-eval", "none.loombc", "@k", "1"], {}, 1, "", b"none.loombc"),
])
def test_what_the_client_hands_over_and_what_it_runs_through_loom(native: Native, tmp_path: Path, args: list[str],
                                                                  env: dict[str, str], code: int, served: str,
                                                                  text: bytes) -> None:
    """`served`: "native" (the server ran it, no Python here), "python" (the launcher ran and
    handed it over itself) or "" (it ran in the launcher's process)."""
    native.start()
    work = workspace(tmp_path)
    requests, launched = native.loom.requests(), native.launched()
    r = native.run(*args, cwd=work, **env)
    assert r.returncode == code, r.stderr
    assert text in r.stdout + r.stderr
    assert native.loom.requests() - requests == (1 if served else 0)
    assert native.launched() - launched == (0 if served == "native" else 1)


def test_no_server_or_a_changed_launcher_runs_through_loom(native: Native, tmp_path: Path) -> None:
    work = workspace(tmp_path)
    expected = native.loom.run("fmt", SAXPY, cwd=work, mode="off").stdout
    r = native.run("fmt", SAXPY, cwd=work)  # no server, LOOM_SERVER unset: in process
    assert (r.returncode, r.stdout, native.launched()) == (0, expected, 1)
    r = native.run("fmt", SAXPY, cwd=work, mode="auto")  # it starts one, through the launcher
    assert (r.returncode, r.stdout, native.launched()) == (0, expected, 2)
    wait_for(lambda: native.loom.status()["running"], "the server to start")
    wait_for(lambda: list((native.loom.runtime / "loom").glob("launcher-*.via")), "the launcher's link")
    r = native.run("fmt", SAXPY, cwd=work)
    assert (r.returncode, r.stdout, native.launched(), native.loom.requests()) == (0, expected, 2, 1)
    with open(native.launcher, "a") as f:  # a reinstalled loom: its server no longer answers for it
        f.write("# changed\n")
    r = native.run("fmt", SAXPY, cwd=work)
    assert (r.returncode, r.stdout, native.launched(), native.loom.requests()) == (0, expected, 3, 2)
    native.loom.run("server", "stop")
    assert not (native.loom.runtime / "loom").exists()  # no socket, link or folder left
    r = native.run("fmt", SAXPY, cwd=work)
    assert (r.returncode, r.stdout, native.launched()) == (0, expected, 4)


def test_a_changed_loom_never_serves_the_native_client_from_an_old_server(loom: Loom, tmp_path: Path) -> None:
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "loomcli", copy / "loomcli", ignore=shutil.ignore_patterns("__pycache__"))
    changed = Native(Loom(dict(loom.env, PYTHONPATH=os.pathsep.join([str(copy), loom.env["PYTHONPATH"]])),
                          loom.runtime, loom.servers), tmp_path / "bin" / "loom-client",
                     launcher_script(tmp_path / "bin", tmp_path / "launched"), tmp_path / "launched")
    build_client(changed.loom, changed.launcher, changed.program)
    changed.start()
    old = changed.loom.status()
    work = workspace(tmp_path)
    launched = changed.launched()  # the start (tried again while the new tree was too new to judge)
    assert changed.run("fmt", SAXPY, cwd=work).returncode == 0
    assert (changed.loom.requests(), changed.launched()) == (1, launched)  # served natively
    with open(copy / "loomcli" / "errors.py", "a") as f:
        f.write("\n# a change\n")
    r = changed.run("fmt", SAXPY, cwd=work)
    assert r.returncode == 0 and r.stderr == b"" and changed.launched() == launched + 1
    sys.path.insert(0, str(ROOT))
    from loomcli.runtime.resident import ask

    answer = ask(str(loom.runtime / "loom"), Path(old["socket"]).stem, b"status")
    assert answer is not None and answer[1]["requests"] == 1  # the old server ran nothing more


def test_a_killed_native_client_ends_its_command_and_the_server_serves_on(native: Native, tmp_path: Path) -> None:
    native.start()
    client, work, child = blocked(native.loom, tmp_path, program=[str(native.program)])
    client.kill()
    client.wait(timeout=60)
    wait_for(lambda: ended(child), "the command to end")
    assert list((work / "out").iterdir()) == []  # nothing partial, no temporary file
    r = native.run("fmt", SAXPY, cwd=work)
    assert r.returncode == 0, r.stderr
    assert native.loom.requests() == 2 and native.launched() == 1


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 130), (signal.SIGHUP, -signal.SIGHUP)])
def test_signals_reach_the_natively_served_command(native: Native, tmp_path: Path, sig: int, code: int) -> None:
    native.start()
    signal_reaches_the_command(native.loom, tmp_path, sig, code, program=[str(native.program)])


def test_a_crashed_natively_served_command_is_its_exit_3(native: Native, tmp_path: Path) -> None:
    native.start()
    client, work, _ = blocked(native.loom, tmp_path, hook="crash", program=[str(native.program)])
    _, err = client.communicate(timeout=120)
    assert client.returncode == 3
    assert "loom: error: internal: the command crashed in the loom server (signal 6)" in err.decode()
    assert list((work / "out").iterdir()) == []


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
@pytest.mark.parametrize("style", ["pipe", "fifo"])
def test_make_j_with_natively_served_compiles_keeps_its_tokens(native: Native, tmp_path: Path, style: str) -> None:
    version = subprocess.run(["make", "--version"], capture_output=True, text=True).stdout
    if style == "fifo" and not re.search(r"GNU Make (4\.[4-9]|[5-9])", version):
        pytest.skip("this make has no FIFO jobserver")
    native.start()
    work = workspace(tmp_path)
    targets = " ".join(f"--target spirv:vulkan1.{v}" for v in (1, 2, 3))
    rules = {f"c{i}": f"+{native.program} compile {SAXPY if i % 2 else '../in/matmul.loom'} --out-dir out-{i} "
                      f"-j 4 {targets}" for i in range(4)}
    (work / "Makefile").write_text("all: " + " ".join(rules) + "\n"
                                   + "".join(f"{name}:\n\t{cmd}\n" for name, cmd in rules.items()))
    options = [f"--jobserver-style={style}"] if "4.3" not in version else []
    r = subprocess.run(["make", "-j3", *options, "--no-print-directory"], cwd=work,
                       env=native.loom.env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "jobserver" not in r.stderr.lower() and "token" not in r.stderr.lower(), r.stderr
    assert native.loom.requests() == 4 and native.launched() == 1  # the start only
    for i in range(4):
        assert len(list((work / f"out-{i}").glob("*.spv"))) == 3


def test_building_the_client_needs_a_launcher_and_a_compiler(loom: Loom, tmp_path: Path) -> None:
    out = tmp_path / "client"
    r = loom.run("server", "client", "-o", str(out))  # `python -m loomcli` is no launcher
    assert r.returncode == 2 and b"pass --launcher" in r.stderr
    r = loom.run("server", "client", "-o", str(out), "--launcher", str(SAMPLES / "saxpy.loom"))
    assert r.returncode == 2 and b"not an executable file" in r.stderr
    launcher = launcher_script(tmp_path / "bin", tmp_path / "notes")
    r = loom.run("server", "client", "-o", str(out), "--launcher", str(launcher), "--cc", str(tmp_path / "no-cc"))
    assert r.returncode == 3 and b"cannot run the C compiler" in r.stderr
    r = loom.run("server", "client", "-o", str(out), "--launcher", str(launcher), "--cc", "false")
    assert (r.returncode, r.stderr) == (3, b"loom: error: the C compiler false failed on the native client: "
                                           b"exit status 1\n")
    # The program is published like any output: a folder or a missing parent is one line, exit 3.
    for target, why in [(tmp_path / "bin", b"Is a directory"), (tmp_path / "none" / "client", b"No such file")]:
        r = loom.run("server", "client", "-o", str(target), "--launcher", str(launcher))
        assert r.returncode == 3 and r.stderr.startswith(b"loom: error: ") and why in r.stderr, r.stderr
        assert r.stderr.count(b"\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "hooks", "servers"]  # nothing partial
