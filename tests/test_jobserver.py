"""The GNU make jobserver client: MAKEFLAGS, tokens taken and returned, and
never O_NONBLOCK on an inherited description."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from loomcli.runtime import jobserver
from loomcli.runtime.jobserver import IMPLICIT, Jobserver, TokenGate, connect, parse_makeflags


@pytest.mark.parametrize("flags,auth,dry", [
    ("", None, False),
    (" -j3 --jobserver-auth=3,4", "3,4", False),
    ("n -j3 --jobserver-auth=3,4", "3,4", True),
    ("-n --jobserver-fds=5,6", "5,6", True),
    ("k -j --jobserver-fds=5,6 --jobserver-auth=fifo:/tmp/x", "fifo:/tmp/x", False),
    ("--jobserver-auth=fifo:/a --jobserver-auth=7,8", "7,8", False),
    ("ks -j2 --jobserver-auth=3,4 -- CC=gcc --jobserver-auth=9,9", "3,4", False),
])
def test_makeflags(flags: str, auth: str | None, dry: bool) -> None:
    parsed = parse_makeflags(flags)
    assert (parsed.auth, parsed.dry_run) == (auth, dry)


def pipe_with_tokens(n: int) -> tuple[int, int]:
    r, w = os.pipe()
    os.write(w, b"+" * n)
    return r, w


def test_tokens_are_taken_and_all_returned() -> None:
    r, w = pipe_with_tokens(2)
    before = fcntl.fcntl(r, fcntl.F_GETFL)
    js, warning, _ = connect({"MAKEFLAGS": f" -j3 --jobserver-auth={r},{w}"})
    assert js is not None and warning is None
    assert fcntl.fcntl(r, fcntl.F_GETFL) == before and not before & os.O_NONBLOCK
    gate = TokenGate(js, 8)
    slots = [gate.acquire() for _ in range(3)]
    assert slots[0] == IMPLICIT and [s.token for s in slots[1:]] == [b"+", b"+"]
    # A fourth task waits for a slot; cancelling lets it go without one.
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(gate.acquire()))
    waiter.start()
    gate.release(slots[1])
    waiter.join()
    assert got[0] is not None and got[0].token == b"+"
    for s in [slots[0], slots[2], got[0]]:
        gate.release(s)
    gate.close()
    js.close()
    os.set_blocking(r, False)
    assert os.read(r, 16) == b"++"  # exactly the two tokens are back in make's pipe
    os.close(r)
    os.close(w)


def test_cancel_releases_a_waiting_acquire() -> None:
    r, w = pipe_with_tokens(0)
    js = Jobserver(f"{r},{w}")
    gate = TokenGate(js, 4)
    assert gate.acquire() == IMPLICIT
    got: list[object] = ["unset"]
    waiter = threading.Thread(target=lambda: got.__setitem__(0, gate.acquire()))
    waiter.start()
    gate.cancel()
    waiter.join()
    assert got[0] is None
    gate.close()
    js.close()
    os.close(r)
    os.close(w)


def test_fifo_jobserver(tmp_path: Path) -> None:
    fifo = tmp_path / "jobs"
    os.mkfifo(fifo)
    keep = os.open(fifo, os.O_RDWR)  # the server's end keeps the FIFO open
    os.write(keep, b"ab")
    js, warning, _ = connect({"MAKEFLAGS": f"-j3 --jobserver-auth=fifo:{fifo}"})
    assert js is not None and warning is None
    gate = TokenGate(js, 3)
    slots = [gate.acquire() for _ in range(3)]
    assert sorted(s.token for s in slots[1:]) == [b"a", b"b"]
    for s in slots:
        gate.release(s)
    gate.close()
    js.close()
    os.set_blocking(keep, False)
    assert sorted(os.read(keep, 16)) == sorted(b"ab")
    os.close(keep)


@pytest.mark.parametrize("makeflags", ["-j2 --jobserver-auth=998,999", "-j2 --jobserver-auth=-2,-2",
                                       "-j2 --jobserver-auth=fifo:/nonexistent/jobs", "-j2 --jobserver-auth=x"])
def test_an_unusable_jobserver_is_one_warning(makeflags: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobserver, "make_run", lambda: None)  # not under a make: this process says it
    js, warning, _ = connect({"MAKEFLAGS": makeflags})
    assert js is None and warning is not None and "serially" in warning


class _Breaking:
    """A jobserver whose pool goes away after `tokens` tokens."""

    def __init__(self, tokens: int) -> None:
        from loomcli.runtime.jobserver import JobserverError

        self.error = JobserverError
        self.tokens = tokens
        self.read_fd, self.write_fd = os.pipe()
        os.write(self.write_fd, b"x")  # always readable: the gate polls it
        self.put_back: list[bytes] = []

    def try_take(self) -> bytes | None:
        if self.tokens == 0:
            raise self.error("the jobserver pipe was closed")
        self.tokens -= 1
        return b"t"

    def put(self, token: bytes) -> None:
        raise self.error("a token cannot be given back (Broken pipe)")


def test_a_jobserver_that_breaks_midway_is_one_warning_and_serial_work() -> None:
    """End of file or a bad descriptor during a build is not an error: one
    warning, and the rest runs on the implicit slot."""
    warnings: list[str] = []
    js = _Breaking(tokens=1)
    gate = TokenGate(js, 4, warn=warnings.append)  # type: ignore[arg-type]
    first, second = gate.acquire(), gate.acquire()
    assert first == IMPLICIT and second is not None and second.token == b"t"
    waiter: list[object] = []
    thread = threading.Thread(target=lambda: waiter.append(gate.acquire()))
    thread.start()  # the pool breaks: this one waits for a slot instead of failing
    gate.release(second)  # cannot be given back: no second warning, no exception
    gate.release(first)
    thread.join(timeout=60)
    assert waiter and waiter[0] == IMPLICIT
    assert len(warnings) == 1 and "building the rest serially" in warnings[0]
    gate.close()
    os.close(js.read_fd)
    os.close(js.write_fd)


@pytest.mark.parametrize("auth", ["0,1", "1,2", "{f},{f}", "{r1},{w2}", "fifo:{regular}", "fifo:{link}",
                                  "fifo:/dev/null", "fifo:/dev/zero", "fifo:", "99999999999999999999,5"])
def test_only_a_pipe_or_fifo_is_a_jobserver(tmp_path: Path, auth: str) -> None:
    regular = tmp_path / "regular"
    regular.write_bytes(b"ABCDEFGHIJ")
    link = tmp_path / "GMfifo1"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link.symlink_to(fifo)  # even a link to a real FIFO: make never makes one
    f = os.open(regular, os.O_RDWR)
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        js, warning, _ = connect({"MAKEFLAGS": "-j3 --jobserver-auth=" + auth.format(
            f=f, r1=r1, w2=w2, regular=regular, link=link)})
        assert js is None and warning is not None and "serially" in warning, warning
        assert regular.read_bytes() == b"ABCDEFGHIJ"
    finally:
        for fd in (f, r1, w1, r2, w2):
            os.close(fd)


@pytest.mark.parametrize(("tool", "says"), [
    ("", "Mark the make recipe that runs loom with '+' (or run it through $(MAKE))"),
    ("CMake 3.25.1 with Unix Makefiles", "under CMake 3.25.1 with Unix Makefiles (jobserver descriptor "
                                         "998"),
])
def test_the_unusable_jobserver_warning_says_what_to_do(tool: str, says: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobserver, "make_run", lambda: None)
    _, warning, _ = connect({"MAKEFLAGS": "-j2 --jobserver-auth=998,999", "LOOM_BUILD_TOOL": tool})
    assert warning is not None and says in warning


def _fake_proc(root: Path, tree: list[tuple[int, str, int, int]]) -> None:
    """/proc/<pid>/stat of (pid, comm, ppid, start time)."""
    for pid, comm, ppid, start in tree:
        (root / str(pid)).mkdir(parents=True)
        rest = ["S", str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 10
        (root / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")


def test_make_run_is_the_outermost_make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # loom <- sh <- gmake (a sub-make of CMake) <- sh <- make <- bash
    _fake_proc(tmp_path, [(50, "sh", 40, 7), (40, "gmake", 30, 6), (30, "sh", 20, 5), (20, "make", 10, 4),
                          (10, "bash", 1, 3)])
    monkeypatch.setattr(os, "getppid", lambda: 50)
    assert jobserver.make_run(str(tmp_path)) == "20-4"
    monkeypatch.setattr(os, "getppid", lambda: 10)
    assert jobserver.make_run(str(tmp_path)) is None


def test_only_the_first_loom_of_a_make_run_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    monkeypatch.setattr(jobserver, "make_run", lambda: "999999999-1")  # a run that has ended by now
    assert jobserver.first_of_make_run(env) is True
    assert jobserver.first_of_make_run(env) is False
    assert connect({**env, "MAKEFLAGS": "-j2 --jobserver-auth=998,999"})[1] is None
    stat = Path("/proc/self/stat").read_text()
    live = f"{os.getpid()}-{stat[stat.rfind(')') + 2:].split()[19]}"
    monkeypatch.setattr(jobserver, "make_run", lambda: live)  # another run, still going
    assert jobserver.first_of_make_run(env) is True
    # An ended run's marker goes when the next run claims its own.
    assert sorted(p.name for p in (tmp_path / "loom" / "make-runs").iterdir()) == [live]
