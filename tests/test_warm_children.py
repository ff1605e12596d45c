"""A server child that serves again (`loomcli.runtime.template.fork_spare`):
after a command that left its process as it found it, the child says the
exit status on its control socket and takes the next request; after
anything else it ends, as every child did before. Each case forks a real
spare from this process and hands it requests as the server does; the
commands are small functions, so what each leaves behind is known.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from loomcli.runtime import served, template
from loomcli.runtime.resident import receive

pytestmark = pytest.mark.skipif(not template.available(), reason="the warm template is Linux only")


def serves_again(argv: Sequence[str]) -> bool:
    """The command lines whose child may serve again here: `compile`'s."""
    return argv[:1] == ("compile",)


def _leave_thread() -> None:
    threading.Thread(target=select.select, args=([], [], [], 30), daemon=True).start()


def _leave_module() -> None:
    sys.modules["loom_test_left_behind"] = type(sys)("loom_test_left_behind")


def _leave_descriptor() -> None:
    os.open(os.devnull, os.O_RDONLY)


def _leave_process() -> None:
    if os.fork() == 0:  # running or a zombie when the command ends: unreaped either way
        os._exit(0)


def _leave_handler() -> None:
    import signal

    signal.signal(signal.SIGUSR1, lambda *_: None)


def _leave_path() -> None:
    sys.path.append("/nowhere")


def _exit(code: object) -> Callable[[], None]:
    def run() -> None:
        sys.exit(code)
    return run


# name -> (what the command does, its exit status, whether its child serves again)
COMMANDS: dict[str, tuple[Callable[[], None], int, bool]] = {
    "clean": (lambda: None, 0, True),
    "input error": (_exit(1), 1, True),
    "usage error": (_exit(2), 2, True),
    "message": (_exit("loom: error: something"), 1, True),
    "infrastructure failure": (_exit(3), 3, False),
    "interrupted": (_exit(130), 130, False),
    "a thread left running": (_leave_thread, 0, False),
    "a module imported": (_leave_module, 0, False),
    "a descriptor left open": (_leave_descriptor, 0, False),
    "a process left running": (_leave_process, 0, False),
    "a signal handler set": (_leave_handler, 0, False),
    "the import path changed": (_leave_path, 0, False),
}


def command(argv: list[str]) -> object:
    """The child's command line: `compile NAME` runs COMMANDS[NAME] and
    writes what it saw on its stdout; `other` names a command whose child may not serve again."""
    print(f"{os.getpid()} {os.getcwd()} {os.environ.get('WHO')} {os.umask(0)}", flush=True)
    if argv[0] == "compile":
        COMMANDS[argv[1]][0]()
    return 0


class Child:
    """A spare forked from this process, and the requests handed to it."""

    def __init__(self) -> None:
        self.spare = template.fork_spare(receive, command, serves_again)

    def run(self, argv: list[str], cwd: Path, who: str, umask: int) -> tuple[bytes, int | None]:
        """Hand it `argv`; what the command wrote (read to its end: the child
        must have let go of the pipe) and the status it said, None if it ended instead."""
        read, write = os.pipe()
        folder = os.open(cwd, os.O_PATH | os.O_DIRECTORY)
        text = [b"utf-8", b"strict", b"0", b"0"]
        env = [b"WHO=" + who.encode(), b"PATH=" + os.environb.get(b"PATH", b"/usr/bin")]
        tokens = [served.MAGIC, b"key", b"run", str(umask).encode(), *text, *text, *text, b"0",
                  str(len(argv)).encode(), *(a.encode() for a in argv), str(len(env)).encode(), *env]
        try:
            served.send_request(self.spare.control, tokens, [folder, 0, write, 2])
        finally:
            os.close(folder)
            os.close(write)
        with os.fdopen(read, "rb") as f:
            out = f.read()
        said = b""
        while len(said) < served.FRAME:
            chunk = self.spare.control.recv(served.FRAME - len(said))
            if not chunk:
                return out, None
            said += chunk
        assert said[:1] == b"X"
        return out, int.from_bytes(said[1:], "little", signed=True)

    def end(self) -> int:
        """Let go of it: its exit status once it has ended."""
        self.spare.control.close()
        _, status = os.waitpid(self.spare.pid, 0)
        os.close(self.spare.pidfd)
        return os.waitstatus_to_exitcode(status)


@pytest.fixture
def child() -> Iterator[Child]:
    instance = Child()
    yield instance
    instance.end()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_child_serves_again_only_as_it_was_found(child: Child, tmp_path: Path, name: str) -> None:
    _, status, again = COMMANDS[name]
    out, said = child.run(["compile", name], tmp_path, "first", 0o022)
    pid = int(out.split()[0])
    assert pid == child.spare.pid
    if not again:
        assert said is None
        assert child.end() == status
        child.spare = template.fork_spare(receive, command, serves_again)  # for the fixture to end
        return
    assert said == status
    # The next request is its own: its folder, environment and umask, in the same process.
    other = tmp_path / "other"
    other.mkdir()
    out, said = child.run(["compile", "clean"], other, "second", 0o077)
    assert out.split() == [str(pid).encode(), str(other).encode(), b"second", b"63"]
    assert said == 0


def test_a_command_outside_the_set_ends_its_child(child: Child, tmp_path: Path) -> None:
    out, said = child.run(["other"], tmp_path, "first", 0o022)
    assert out.split()[0] == str(child.spare.pid).encode()
    assert said is None


def test_a_child_ends_when_the_server_lets_go(child: Child, tmp_path: Path) -> None:
    assert child.run(["compile", "clean"], tmp_path, "first", 0o022)[1] == 0
    assert child.end() == 0
    child.spare = template.fork_spare(receive, command, serves_again)


def test_a_wanted_descriptor_number_moves_the_control_socket(child: Child, tmp_path: Path) -> None:
    """A request may want the number the child's control socket has (a
    jobserver pipe's, say): the socket moves, the request gets its number."""
    assert child.run(["compile", "clean"], tmp_path, "first", 0o022)[1] == 0
    fds = Path(f"/proc/{child.spare.pid}/fd")
    (number,) = [int(p.name) for p in fds.iterdir() if os.readlink(p).startswith("socket:")]
    read, write = os.pipe()
    folder = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    wanted = os.open(os.devnull, os.O_RDONLY)
    text = [b"utf-8", b"strict", b"0", b"0"]
    tokens = [served.MAGIC, b"key", b"run", b"18", *text, *text, *text, b"1", str(number).encode(),
              b"2", b"compile", b"clean", b"0"]
    try:
        served.send_request(child.spare.control, tokens, [folder, 0, write, 2, wanted])
    finally:
        for fd in (folder, write, wanted):
            os.close(fd)
    with os.fdopen(read, "rb") as f:
        assert f.read().split()[0] == str(child.spare.pid).encode()
    assert child.spare.control.recv(served.FRAME) == b"X\0\0\0\0"
    assert child.run(["compile", "clean"], tmp_path, "again", 0o022)[1] == 0


def test_a_child_ends_after_its_share_of_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(template, "SERVES_PER_CHILD", 2)
    instance = Child()
    assert instance.run(["compile", "clean"], tmp_path, "1", 0o022)[1] == 0
    assert instance.run(["compile", "clean"], tmp_path, "2", 0o022)[1] is None
    assert instance.end() == 0


def test_a_request_handed_to_a_child_reads_back_as_itself(tmp_path: Path) -> None:
    """`run_tokens` (how a persistent worker hands a request to a child) is what `parse_run`
    reads back: argv, environment, umask, folder, streams (a closed one sends no descriptor)
    and every descriptor at its number."""
    from loomcli.runtime.resident import parse_run, run_tokens

    folder = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    read, write = os.pipe()
    try:
        request = template.Request(("compile", "k ü.loom", "-o", "-"), {b"A": b"1", b"B": b"x=y", b"C": b""}, 0o027,
                                   folder, {0: read, 1: write, 7: read},
                                   (template.Stream("utf-8", "strict", False, False),
                                    template.Stream("latin-1", "surrogateescape", True, True), None))
        tokens, fds = run_tokens(request)
        assert fds == [folder, read, write, read]
        assert parse_run(tokens, fds) == request
    finally:
        for fd in (folder, read, write):
            os.close(fd)
