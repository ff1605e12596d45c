"""The warm template: one process that has imported and prepared what loom's
commands need, and forks a child per request to run one command line.

Starting `loom` costs Python, click, llvmlite and LLVM's initialization
before any work is done: about three times clang's whole run for one
kernel. A template pays that once (`isolated.warm_and_freeze`), then each request is a fork
(`fork_request`): the child starts with everything warm, shared copy-on-write
with the template, and becomes the requester's process before it runs the
ordinary command line: it takes the request's descriptors (its standard
streams and make's jobserver pipe, at the same numbers), its folder, its
environment and its umask, rebuilds `sys.stdin`/`stdout`/`stderr` as the
requester's interpreter had them (encoding, errors, line buffering), and
restores the signal handlers a fresh interpreter has. Terminal detection,
`-` for stdin or stdout, exit codes, depfiles and traces then work as in a
process started for the command. Whatever the child does, a crash
included, ends with it; nothing it does reaches the template or the next
request (isolation by fork).

Two front ends share this one template: the resident compile service
(`loomcli.runtime.resident`, `loom server`) and Bazel's persistent workers
(`loom worker`). Inside a child, LLVM runs in the process itself (it is
already the crash isolation: `isolated.become_worker`), and a worker pool
forks its server from the child instead of starting a new interpreter
(`spawn.start_server`).

Linux only: the template needs `fork`, `os.pidfd_open` and descriptor passing
(`available`).
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from loomcli.runtime import spawn
from loomcli.runtime.isolated import become_worker, die_with_parent

# Signals the requester may forward to its command; blocked across the fork
# so that one sent at once reaches the child's own handlers, not the template's.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def available() -> bool:
    """Whether a template can serve requests on this platform."""
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and hasattr(os, "register_at_fork")


@dataclass(frozen=True)
class Stream:
    """How the requester's interpreter wraps one standard stream."""

    encoding: str
    errors: str
    line_buffering: bool
    write_through: bool

    @staticmethod
    def of(stream: Any) -> Stream | None:
        """The wrapping of `stream` (a `sys.stdout`), None if it is closed or not a text file."""
        try:
            return Stream(stream.encoding, stream.errors, bool(stream.line_buffering), bool(stream.write_through))
        except (AttributeError, ValueError):
            return None


@dataclass(frozen=True)
class Request:
    """One command line to run in a child, as its requester would run it."""

    argv: tuple[str, ...]                    # without the program name: ("compile", "k.loom", ...)
    environ: Mapping[bytes, bytes]
    umask: int
    cwd: int | str                           # a descriptor of the folder, or its path
    fds: Mapping[int, int]                   # descriptor number in the child -> descriptor here
    streams: tuple[Stream | None, Stream | None, Stream | None]  # stdin, stdout, stderr; None: closed
    program: str = "loom"                    # the child's sys.argv[0]


def fork_request(request: Request, run: Callable[[list[str]], Any]) -> int:
    """Fork a child that runs `run(argv)` as `request` says and then ends
    with `run`'s exit status (see `end`); return its pid. The template keeps
    no descriptor of the request: the caller closes those it received."""
    return _fork(lambda: request, run)


@dataclass(frozen=True)
class Spare:
    """A child forked before its request: it waits in `receive` on its end of
    `control` while the template serves, so a request handed to it (over
    `control`) starts without waiting for a fork of the whole template."""

    pid: int
    pidfd: int
    control: socket.socket


def fork_spare(receive: Callable[[socket.socket], Request], run: Callable[[list[str]], Any]) -> Spare:
    """A `Spare` that takes its request from `receive(control)` (which may
    end the process if the template lets go of it) and runs it as
    `fork_request`'s child would. It keeps no descriptor of the template's
    but its end of the control socket: it holds no lock, no client and no
    listening socket while it waits."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def request() -> Request:
        ours.detach()  # closed below, with everything else of the template's
        gc.disable()  # nothing of the template's is finalized while its descriptors are gone
        spawn.close_all_but({theirs.fileno()})
        try:
            return receive(theirs)
        finally:
            theirs.close()
            gc.enable()

    try:
        pid = _fork(request, run)
    finally:
        theirs.close()
    return Spare(pid, os.pidfd_open(pid), ours)


def _fork(request: Callable[[], Request], run: Callable[[list[str]], Any]) -> int:
    for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    old = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    template = os.getpid()
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return pid
    code: object = 3
    try:
        taken = request()
        _become(taken, old, template)
        try:
            code = run(list(taken.argv))
        except SystemExit as e:
            code = e.code
    except BaseException:  # a bug of the child's own start: its request's exit 3, never the template's
        try:
            traceback.print_exc()
        finally:
            code = 3
    end(code)


def end(code: object) -> NoReturn:
    """End this process with `code` as `sys.exit` would, without the
    interpreter's finalization (freeing a warm compiler's objects one by one
    costs tens of milliseconds at every request; every file loom writes is
    closed before its command returns). Exit handlers run and output is flushed."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        try:
            print(code, file=sys.stderr)
        except (OSError, ValueError, AttributeError):
            pass
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):  # a reader that went away, a closed stream: nothing more to say
                pass
        os._exit(status & 0xFF)


# ---------------------------------------------------------------- the child's start


def _become(request: Request, mask: Any, template: int) -> None:
    """Turn this fresh fork into the requester's process (see the module docstring).
    It dies with the template (`template`: its pid): a command nobody can
    answer for any more must not go on writing outputs."""
    die_with_parent(template)
    if isinstance(request.cwd, int):
        os.fchdir(request.cwd)
    else:
        os.chdir(request.cwd)
    _place(request.fds)
    os.umask(request.umask)
    os.environ.clear()
    for name, value in request.environ.items():
        os.environb[name] = value
    if "tempfile" in sys.modules:  # the template may have asked for the temp folder; TMPDIR is the request's now
        sys.modules["tempfile"].tempdir = None
    atexit._clear()  # the template's exit handlers are not this process's
    sys.argv = [request.program, *request.argv]
    sys.stdin = sys.__stdin__ = _text(0, "r", request.streams[0])
    sys.stdout = sys.__stdout__ = _text(1, "w", request.streams[1])
    sys.stderr = sys.__stderr__ = _text(2, "w", request.streams[2])
    # A fresh interpreter's handlers: Ctrl-C is KeyboardInterrupt, SIGPIPE is ignored (a closed
    # reader is an EPIPE), the rest take their default action.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    become_worker()
    spawn.forks_warm()


def _place(fds: Mapping[int, int]) -> None:
    """Put each descriptor at its number (`fds`: number -> descriptor now)
    and close every other one: the template's sockets and every other
    request's descriptors stay out of this command and what it starts. The
    template's objects that named the closed ones are never finalized here:
    the child never returns into its parent's loop and ends with `os._exit`."""
    import fcntl

    above = max([2, *fds]) + 1
    moved = {number: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above) for number, fd in fds.items()}
    spawn.close_all_but(set(moved.values()))
    for number, fd in moved.items():
        os.dup2(fd, number)  # inheritable, as the requester's own descriptors are
        os.close(fd)


def _text(fd: int, mode: str, spec: Stream | None) -> io.TextIOWrapper | None:
    """A standard stream as Python's start-up makes it, with the requester's
    wrapping; None when the requester had it closed."""
    if spec is None:
        return None
    buffer = open(fd, mode + "b", closefd=False)  # noqa: SIM115 - a standard stream, never closed
    buffer.raw.name = ("<stdin>", "<stdout>", "<stderr>")[fd]  # type: ignore[union-attr, misc]
    text = io.TextIOWrapper(buffer, encoding=spec.encoding, errors=spec.errors, newline="\n",  # type: ignore[arg-type]
                            line_buffering=spec.line_buffering, write_through=spec.write_through)
    text.mode = mode  # type: ignore[misc]
    return text
