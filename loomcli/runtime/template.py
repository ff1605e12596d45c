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
request (isolation by fork). The one exception is a resident server's
child that serves again (`fork_spare`): only after a command that left its
process exactly as it found it, checked (`Settled`).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from loomcli.runtime import pool, served, spawn
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


def most_warm() -> int:
    """How many children that served may wait for another request: one per usable CPU, at least two."""
    return max(2, len(os.sched_getaffinity(0)))


def _never(argv: Sequence[str]) -> bool:
    return False


def hear(control: socket.socket, said: bytes) -> tuple[bytes, bool]:
    """Read, without blocking, what a `Spare` serving a request says on its
    control socket after `said`: all it has said, and whether that is all it
    says before its next request (a whole status frame, or the end of its
    stream: it ends instead; a failed read counts as that end)."""
    try:
        data = control.recv(served.FRAME - len(said), socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return said, False
    except OSError:
        data = b""
    said += data
    return said, not data or len(said) >= served.FRAME


def status_said(said: bytes) -> int | None:
    """The exit status in what a child said (`X` and the status, `served.frame`); None if it said anything else."""
    if said[:1] != b"X" or len(said) < served.FRAME:
        return None
    return int.from_bytes(said[1:served.FRAME], "little", signed=True)


def fork_spare(receive: Callable[[socket.socket], Request], run: Callable[[list[str]], Any],
               again: Callable[[Sequence[str]], bool] = _never) -> Spare:
    """A `Spare` that takes its request from `receive(control)` (which may
    end the process if the template lets go of it) and runs it as
    `fork_request`'s child would. It keeps no descriptor of the template's
    but its end of the control socket: it holds no lock, no client and no
    listening socket while it waits.

    A command line for which `again(argv)` holds that ends with 0, 1 or 2 and leaves the
    process as it found it (`Settled`) does not end the child: it lets go
    of the request (`_release`), says its exit status over `control` (frame
    `X`) and waits for the next request there. Every fork pays for the
    template's pages it writes (Python's reference counts write to every
    object a command touches: about 4,500 copied pages, 20 ms of a 40 ms
    compile here); a child that serves again has copied them already."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    control = [theirs]  # the child's end (`_place` may move it)
    first = [True]

    def request() -> Request:
        gc.disable()  # nothing of the template's is finalized while its descriptors are gone
        if first:  # the first request: let go of everything of the template's
            first.clear()
            ours.detach()  # closed below, with everything else of the template's
            spawn.close_all_but({theirs.fileno()})
        try:
            return receive(control[0])
        finally:
            gc.enable()

    try:
        pid = _fork(request, run, (control, again))
    finally:
        theirs.close()
    return Spare(pid, os.pidfd_open(pid), ours)


def _fork(request: Callable[[], Request], run: Callable[[list[str]], Any],
          reuse: tuple[list[socket.socket], Callable[[Sequence[str]], bool]] | None = None) -> int:
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
    served = 0
    try:
        while True:
            taken = request()
            _become(taken, old, template, reuse[0] if reuse else None)
            found = Settled.now() if reuse is not None and reuse[1](taken.argv) else None
            if found is not None:
                pool.keep_between_commands()  # a build's workers serve its next build too
            code = 3
            try:
                code = run(list(taken.argv))
            except SystemExit as e:
                code = e.code
            served += 1
            if found is None:
                break
            code = _status(code)
            if served >= SERVES_PER_CHILD or not _settle(taken, found, code, reuse[0][0]):  # type: ignore[index]
                break
            signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # as in a fresh spare, until the next request
    except BaseException:  # a bug of the child's own start: its request's exit 3, never the template's
        try:
            traceback.print_exc()
        finally:
            code = 3
    end(code)


# A child that serves again ends after this many commands: LLVM's context keeps every
# constant and name it was given, so a child's memory grows a little with each.
SERVES_PER_CHILD = 500

# The exit statuses after which a child may serve again: success, the input failed to
# compile, a usage error. After 3 (an infrastructure failure) or a signal it ends.
SETTLED_STATUSES = (0, 1, 2)


@dataclass(frozen=True)
class Settled:
    """What a command must leave as it found it for its child to serve
    again. What every request sets anew (folder, environment, umask,
    standard streams, argv, the usual signal handlers and mask) is not in
    it; its descriptors, threads, modules and import path, other signal
    handlers, timers and collector settings are. A worker pool a command
    parked for the next one (`loomcli.runtime.pool`) is not: its
    descriptors and its fork server are left out."""

    descriptors: frozenset[str]
    threads: int
    modules: tuple[str, ...]
    path: tuple[str, ...]
    handlers: tuple[Any, ...]
    timer: tuple[float, float]
    collector: tuple[bool, tuple[int, ...]]
    recursion: int
    group: tuple[int, int]

    @staticmethod
    def now() -> Settled:
        parked = {str(fd) for fd in pool.parked_descriptors()}
        return Settled(frozenset(os.listdir("/proc/self/fd")) - parked, len(os.listdir("/proc/self/task")),
                       tuple(sys.modules), tuple(sys.path),
                       tuple(signal.getsignal(s) for s in _HANDLED), signal.getitimer(signal.ITIMER_REAL),
                       (gc.isenabled(), gc.get_threshold()), sys.getrecursionlimit(), (os.getpgrp(), os.getsid(0)))


# Signals a command could take a handler of that `_become` does not set again.
_HANDLED = tuple(s for s in signal.valid_signals()
                 if s not in (signal.SIGKILL, signal.SIGSTOP) and s < signal.SIGRTMIN)


def _settle(request: Request, found: Settled, status: int, control: socket.socket) -> bool:
    """After `request`'s command ended with `status`: run its exit handlers
    and flush its output as its process's end would, then, if it left the
    process as `found`, let go of the request (`_release`) and say `status`
    over `control`. Whether this child serves again; if not, the caller ends it."""
    atexit._run_exitfuncs()
    _flush_standard()
    if status not in SETTLED_STATUSES or Settled.now() != found or _has_children():
        return False
    _release(request)
    if "warnings" in sys.modules:  # a warning shown "once" by this command is shown by the next too
        sys.modules["warnings"]._filters_mutated()
    try:
        control.sendall(b"X" + status.to_bytes(4, "little", signed=True))  # `served.frame`
    except OSError:  # the server let go of this child meanwhile
        return False
    return True


def _has_children() -> bool:
    """Whether a process this command started still runs or was never
    reaped (a parked pool's fork server aside)."""
    parked = pool.parked_children()
    if parked:
        try:
            children = set()
            for task in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{task}/children") as f:
                    children |= {int(pid) for pid in f.read().split()}
        except OSError:  # no way to tell them apart
            return True
        return bool(children - parked)
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


def _release(request: Request) -> None:
    """Let go of everything of `request`: its descriptors (the standard
    ones become /dev/null: a reader of the requester's pipe sees its end
    when the requester ends) and its folder."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for number in request.fds:
        if number > 2:
            os.close(number)
    for number in (0, 1, 2):
        os.dup2(null, number, inheritable=False)
    os.close(null)
    os.chdir("/")


def _flush_standard() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a reader that went away, a closed stream: nothing more to say
            pass


def end(code: object) -> NoReturn:
    """End this process with `code` as `sys.exit` would, without the
    interpreter's finalization (freeing a warm compiler's objects one by one
    costs tens of milliseconds at every request; every file loom writes is
    closed before its command returns). Exit handlers run and output is flushed."""
    status = _status(code)
    try:
        atexit._run_exitfuncs()
    finally:
        _flush_standard()
        os._exit(status & 0xFF)


def _status(code: object) -> int:
    """The exit status `sys.exit(code)` gives (a code that is not a number is printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        print(code, file=sys.stderr)
    except (OSError, ValueError, AttributeError):
        pass
    return 1


# ---------------------------------------------------------------- the child's start


def _become(request: Request, mask: Any, template: int, control: list[socket.socket] | None = None) -> None:
    """Turn this fresh fork (or a child that served before) into the
    requester's process (see the module docstring); `control`: the socket
    it keeps, in a list `_place` may put a moved one in. It dies with the
    template (`template`: its pid): a command nobody can answer for any
    more must not go on writing outputs."""
    die_with_parent(template)
    if isinstance(request.cwd, int):
        os.fchdir(request.cwd)
    else:
        os.chdir(request.cwd)
    if any(number > 2 for number in request.fds):
        pool.end_parked()  # a jobserver pipe: it may want the parked pool's numbers, and a kept worker lacks it
    _place(request.fds, control, pool.parked_descriptors())
    os.umask(request.umask)
    os.environ.clear()
    for name, value in request.environ.items():
        os.environb[name] = value
    if "tempfile" in sys.modules:  # the template may have asked for the temp folder; TMPDIR is the request's now
        import tempfile

        tempfile.tempdir = None
    atexit._clear()  # the template's exit handlers are not this process's
    sys.argv = [request.program, *request.argv]
    # (The interpreter's own `sys.__stdin__` and the others are the requester's too: typeshed calls them final.)
    sys.stdin = sys.__stdin__ = _text(0, "r", request.streams[0])  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = _text(1, "w", request.streams[1])  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = _text(2, "w", request.streams[2])  # type: ignore[misc]
    # A fresh interpreter's handlers: Ctrl-C is KeyboardInterrupt, SIGPIPE is ignored (a closed
    # reader is an EPIPE), the rest take their default action.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    become_worker()
    spawn.forks_warm()


def _place(fds: Mapping[int, int], control: list[socket.socket] | None, parked: set[int]) -> None:
    """Put each descriptor at its number (`fds`: number -> descriptor now)
    and close every other one but the socket in `control` (moved out of the
    way first if its number is wanted) and the `parked` pool's (never
    wanted: numbers above 2 end the pool first): the template's sockets and
    every other request's descriptors stay out of this command and what it
    starts. The template's objects that named the closed ones are never
    finalized here: the child never returns into its parent's loop and ends
    with `os._exit`."""
    import fcntl

    above = max([2, *fds, *parked]) + 1
    keep = set(parked)
    if control is not None:
        if control[0].fileno() in fds:
            moved_control = fcntl.fcntl(control[0].fileno(), fcntl.F_DUPFD_CLOEXEC, above)
            control[0].detach()  # its number is the request's now (closed below)
            control[0] = socket.socket(fileno=moved_control)
        keep.add(control[0].fileno())
    moved = {number: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above) for number, fd in fds.items()}
    spawn.close_all_but(set(moved.values()) | keep)
    for number, fd in moved.items():
        os.dup2(fd, number)  # inheritable, as the requester's own descriptors are
        os.close(fd)


def _text(fd: int, mode: str, spec: Stream | None) -> io.TextIOWrapper | None:
    """A standard stream as Python's start-up makes it, with the requester's
    wrapping; None when the requester had it closed."""
    if spec is None:
        return None
    buffer = open(fd, mode + "b", closefd=False)  # noqa: SIM115 - a standard stream, never closed
    buffer.raw.name = ("<stdin>", "<stdout>", "<stderr>")[fd]  # type: ignore[attr-defined]  # a Buffered{Reader,Writer}
    text = io.TextIOWrapper(buffer, encoding=spec.encoding, errors=spec.errors, newline="\n",
                            line_buffering=spec.line_buffering, write_through=spec.write_through)
    text.mode = mode  # type: ignore[misc]
    return text
