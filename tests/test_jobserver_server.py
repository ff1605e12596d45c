"""loom as a jobserver (TOOLCHAIN.md section 6, `JobserverServer`): without
make's jobserver, a parallel loom serves N-1 tokens to the processes it
starts (a FIFO in a private 0700 folder, or a pipe with
--jobserver-style pipe), audits them and removes the FIFO at exit, also
after SIGTERM. Nothing here depends on timing."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from task_hooks import task_hook
from test_build import make_project

from loomcli.runtime.jobserver import JobserverServer, TokenGate, connect, parse_makeflags

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("style", ["fifo", "pipe"])
def test_a_served_pool_has_n_minus_1_tokens_and_audits_them(style: str) -> None:
    server = JobserverServer(4, style)
    env = server.environ({"MAKEFLAGS": "ks -j9 --jobserver-auth=7,8 -- CC=gcc"})
    flags = parse_makeflags(env["MAKEFLAGS"])
    assert flags.auth == server.auth and env["MAKEFLAGS"].startswith("ks -j4 ")
    assert env["MAKEFLAGS"].endswith(" -- CC=gcc")  # make's variable assignments stay last
    if style == "fifo":
        folder = Path(server.auth[5:]).parent
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    client, warning, _ = connect(env)
    assert client is not None and warning is None
    gate = TokenGate(client, 8)
    slots = [gate.acquire() for _ in range(4)]  # the implicit slot and all three tokens
    assert [s.token for s in slots[1:]] == [b"+"] * 3 and client.try_take() is None
    kept = slots.pop()
    for s in slots:
        gate.release(s)
    assert server.close() == 1  # the audit: one token never came back
    gate.close()
    client.close()
    assert kept.token == b"+"
    if style == "fifo":
        assert not folder.exists()


# A probe inside each pool worker's task (`task_hooks`), where a task would
# use the jobserver: it connects to the jobserver its MAKEFLAGS advertises,
# takes a token and gives it back, and writes what it saw to
# LOOM_TEST_PROBE_DIR. With LOOM_TEST_PROBE_HANG set the task then never
# ends, so the build is certainly still running when the test sends SIGTERM.
PROBE = task_hook('''\
import json, os, select, time


def _probe():
    from loomcli.runtime.jobserver import connect

    makeflags = os.environ.get("MAKEFLAGS", "")
    client, warning, _ = connect()
    took = False
    if client is not None:
        deadline = time.monotonic() + 120  # a bound against a hang, not a timing assumption
        while not took and time.monotonic() < deadline:
            token = client.try_take()
            if token is None:
                select.select([client.read_fd], [], [], 1)
                continue
            client.put(token)
            took = True
        client.close()
    report = os.path.join(os.environ["LOOM_TEST_PROBE_DIR"], f"worker-{os.getpid()}.json")
    with open(report + ".tmp", "w") as f:
        json.dump({"makeflags": makeflags, "warning": warning, "took": took}, f)
    os.replace(report + ".tmp", report)
    if os.environ.get("LOOM_TEST_PROBE_HANG"):
        while True:
            time.sleep(60)


def _wrap(task):
    def probed_task(header, payload, context):
        _probe()
        return task(header, payload, context)

    return probed_task
''')


def probe_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    probes = tmp_path / "probes"
    probes.mkdir(exist_ok=True)
    (probes / "sitecustomize.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CI")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(probes), env.get("PYTHONPATH", "")])
    env["LOOM_CACHE"] = "0"
    env["LOOM_TEST_PROBE_DIR"] = str(probes)
    env.update(extra)
    return env


def reports(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "probes").glob("worker-*.json"))]


# -j 3: two tokens for loom's two workers, which use at most one, so a probe always gets one.
@pytest.mark.parametrize("style", ["fifo", "pipe"])
def test_workers_see_a_working_jobserver_and_it_is_gone_after_exit(tmp_path: Path, style: str) -> None:
    project = make_project(tmp_path / "p", sets=2, per_set=1)
    r = subprocess.run([sys.executable, "-m", "loomcli", "build", str(project), "-q", "-j", "3",
                        "--jobserver-style", style], env=probe_env(tmp_path), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and r.stderr == "", r.stderr  # no audit warning: every token came back
    seen = reports(tmp_path)
    assert 1 <= len(seen) <= 2  # one per worker that ran a task (two sets, two workers)
    for report in seen:
        auth = parse_makeflags(report["makeflags"]).auth
        assert report["warning"] is None and report["took"], report
        assert "-j3" in report["makeflags"].split()
        assert auth is not None and auth.startswith("fifo:") == (style == "fifo")
        if style == "fifo":
            assert not Path(auth[5:]).parent.exists()  # the FIFO and its folder are gone
        else:
            assert "--jobserver-fds=" + auth in report["makeflags"]  # what make < 4.2 reads


def test_the_fifo_folder_is_removed_after_sigterm(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", sets=2, per_set=1)
    # -j 3: two tokens for loom's two workers, which use at most one, so a probe always gets one.
    proc = subprocess.Popen([sys.executable, "-m", "loomcli", "build", str(project), "-q", "-j", "3"],
                            env=probe_env(tmp_path, LOOM_TEST_PROBE_HANG="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300  # a bound against a hang, not a timing assumption
    while not reports(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = reports(tmp_path)
    assert seen, proc.communicate(timeout=60)
    folder = Path(parse_makeflags(seen[0]["makeflags"]).auth[5:]).parent
    assert folder.exists()  # the build is running and serving its pool
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert not folder.exists()


def test_no_server_without_parallel_work_or_under_make(tmp_path: Path) -> None:
    """-j 1 (work in this process) serves nothing; an inherited jobserver is used, not replaced."""
    project = make_project(tmp_path / "p", sets=2, per_set=1)
    r = subprocess.run([sys.executable, "-m", "loomcli", "build", str(project), "-q", "-j", "1"],
                       env=probe_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and reports(tmp_path) == [], r.stderr
    fifo = tmp_path / "make.fifo"
    os.mkfifo(fifo)
    holder = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    os.write(holder, b"+++")  # loom (two workers) takes at most one: the probes can always get one
    make_env = probe_env(tmp_path, MAKEFLAGS=f" -j4 --jobserver-auth=fifo:{fifo}")
    r = subprocess.run([sys.executable, "-m", "loomcli", "build", str(project), "-q", "-j", "2", "--no-cache",
                        "--out-dir", str(tmp_path / "out2")], env=make_env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert {parse_makeflags(s["makeflags"]).auth for s in reports(tmp_path)} == {f"fifo:{fifo}"}
    assert os.read(holder, 16) == b"+++"  # make's tokens are all back
    os.close(holder)
