"""Run functions in a warm worker process, so a crash there cannot take loom down.

LLVM reports some errors by aborting the process (`LLVM ERROR: Cannot
select`, assertion failures). Code generation therefore runs in a child
process: `python -m loomcli.runtime.isolated MODULE...` imports the named
modules (calling their `warm()` if they have one), then serves requests on
stdin/stdout until stdin closes.

A request names a function as `"package.module:function"` and carries a
JSON header and a byte payload; the function is called as
`function(header, payload)` and returns bytes. Framing, both ways, is
little-endian: `u32 header length, u32 payload length, header, payload`; a
reply starts with one status byte (0 ok, 1 the function raised: the header
is then `{"error": message}`).

`Worker` is the parent side: it starts the child lazily, keeps it warm
between requests, and turns a dead child into `LoomError(..., 3)` naming the
signal (SIGABRT from LLVM) or the exit status with the last lines LLVM
printed. A new child starts on the next request. `shared_worker()` is the
process-wide worker the emitters use; a pool can hold several `Worker`s.
The child ignores SIGINT: Ctrl-C reaches the coordinator, which closes it.

A process that is itself a worker (a pool worker, `loomcli.runtime.pool`) is
already the crash isolation: there `shared_worker()` runs functions in this
process instead of starting a grandchild, so LLVM stays warm in the worker.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, NoReturn

from loomcli.runtime.spawn import child_env, inherited_fds

_FRAME = struct.Struct("<II")
_STATUS = struct.Struct("<B")


class WorkerCrash(Exception):
    """The worker process died while serving a request."""

    def __init__(self, returncode: int, stderr: str) -> None:
        super().__init__(returncode, stderr)
        self.returncode = returncode
        self.stderr = stderr

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode < 0 else None

    def describe(self) -> str:
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = "unknown"
            return f"signal {self.signal}, {name}"
        return f"exit status {self.returncode}"

    def last_lines(self, n: int = 3) -> str:
        lines = [line.strip() for line in self.stderr.strip().splitlines() if line.strip()]
        return " | ".join(lines[:n])


class RemoteError(Exception):
    """The function raised in the worker; the worker is still healthy."""


def await_exit(pid: int, timeout: float | None) -> None:
    """Return once process `pid` has ended or after `timeout` seconds (None:
    no limit), whichever comes first; reaping it is the caller's business. A
    pidfd wakes us the moment it ends, where `Popen.wait(timeout)` polls and
    notices only after its next sleep, up to milliseconds later, at every
    worker and server exit of every build."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (Linux before 5.3): poll
        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is None or time.monotonic() < deadline:
            try:
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return
            except ChildProcessError:
                return
            time.sleep(0.001)
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


def end_process(proc: Any, timeout: float) -> None:
    """Give child `proc` (a `subprocess.Popen` or a stand-in) `timeout`
    seconds to end, then kill it; it is reaped either way."""
    if proc.poll() is None:  # running, and not reaped: the pid is still this child's
        await_exit(proc.pid, timeout)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class Worker:
    """One warm child process serving one request at a time.

    `entry` is the module the child runs (`python -m entry *args`); a pool
    starts its workers through `loomcli.runtime.pool` with the same framing."""

    def __init__(self, preload: Sequence[str] = (), entry: str = "loomcli.runtime.isolated",
                 args: Sequence[str] | None = None) -> None:
        self.preload = tuple(preload)
        self.entry = entry
        self.args = tuple(args) if args is not None else self.preload
        self.proc: Any = None  # a subprocess.Popen, or a forked worker's stand-in
        self.stderr: Any = None
        self.lock = threading.Lock()
        self.calls = 0  # answered by this worker's processes

    def start(self) -> None:
        """Start the child now (it warms up while the caller does other work)."""
        with self.lock:
            self._ensure()

    def _ensure(self) -> Any:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        self._reap()
        self.proc = self._spawn()
        return self.proc

    def _spawn(self) -> Any:
        """A new child process (a `subprocess.Popen`, or what quacks like one),
        its stderr in `self.stderr`."""
        env = child_env()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        # The jobserver MAKEFLAGS advertises stays usable in the child (a pipe
        # one needs its descriptors; every other descriptor is closed).
        return subprocess.Popen([sys.executable, "-m", self.entry, *self.args],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
                                close_fds=True, pass_fds=inherited_fds(env))

    def _reap(self) -> None:
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
            end_process(self.proc, 5)
        self.proc = None
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None

    def _crash(self, proc: Any) -> WorkerCrash:
        end_process(proc, 10)
        code = proc.returncode
        text = ""
        if self.stderr is not None:
            self.stderr.seek(0)
            text = self.stderr.read()[-8192:].decode("utf-8", "replace")
        self._reap()
        return WorkerCrash(code, text)

    def call(self, function: str, header: dict[str, Any], payload: bytes = b"") -> bytes:
        """`function(header, payload)` in the child. Raises WorkerCrash if the
        child dies (it is restarted on the next call), RemoteError if the
        function raised."""
        with self.lock:
            proc = self._ensure()
            assert proc.stdin is not None and proc.stdout is not None
            request: dict[str, Any] = {"call": function, "header": header}
            moved = self._moved()
            if moved:
                request["context"] = moved
            head = json.dumps(request).encode()
            try:
                proc.stdin.write(_FRAME.pack(len(head), len(payload)) + head + payload)
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise self._crash(proc) from None
            status = _read_exact(proc.stdout, 1)
            frame = _read_exact(proc.stdout, _FRAME.size) if status is not None else None
            if status is None or frame is None:
                raise self._crash(proc)
            hlen, plen = _FRAME.unpack(frame)
            reply_head = _read_exact(proc.stdout, hlen)
            reply = _read_exact(proc.stdout, plen)
            if reply_head is None or reply is None:
                raise self._crash(proc)
            self.calls += 1
            if status[0] != 0:
                raise RemoteError(json.loads(reply_head).get("error", "unknown error"))
            return reply

    def _moved(self) -> dict[str, Any]:
        """What of the child's context changed since it started (`serve`'s
        `context` updates): nothing for a worker that lives one pool long."""
        return {}

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def end_input(self) -> None:
        """Close the child's requests, so it ends on its own while the caller
        ends other children; `close` then reaps it."""
        with self.lock:
            if self.proc is not None and self.proc.stdin is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass

    def close(self) -> None:
        with self.lock:
            self._reap()


class InProcessWorker:
    """`Worker`'s interface, run in this process: what `shared_worker()` is in
    a process that is itself an isolated worker."""

    def __init__(self) -> None:
        self.functions: dict[str, Callable[[dict[str, Any], bytes], bytes]] = {}

    def start(self) -> None:
        pass

    def call(self, function: str, header: dict[str, Any], payload: bytes = b"") -> bytes:
        if function not in self.functions:
            module, _, attr = function.partition(":")
            self.functions[function] = getattr(importlib.import_module(module), attr)
        try:
            return self.functions[function](header, payload)
        except Exception as e:
            raise RemoteError(f"{type(e).__name__}: {e}") from e

    @property
    def pid(self) -> int | None:
        return os.getpid()

    def close(self) -> None:
        pass


_shared: dict[tuple[str, ...], Worker] = {}
_shared_lock = threading.Lock()
_in_process: list[InProcessWorker] = []  # set once when this process is a worker


def become_worker() -> None:
    """Mark this process as an isolated worker (called once, at its start)."""
    if not _in_process:
        _in_process.append(InProcessWorker())


def shared_worker(preload: Sequence[str] = ()) -> Worker | InProcessWorker:
    """The process-wide worker for `preload`, created (not started) once; in a
    worker process, this process itself."""
    if _in_process:
        return _in_process[0]
    key = tuple(preload)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Worker(key)
            if len(_shared) == 1:
                atexit.register(_close_shared)
        return _shared[key]


def _close_shared() -> None:
    for w in _shared.values():
        w.close()


# ---------------------------------------------------------------- the child


def serve(stdin: BinaryIO, stdout: BinaryIO, context: Any = None) -> None:
    """Answer requests until stdin closes. With a `context` (a pool worker's
    `WorkerContext`), functions are called as `function(header, payload, context)`.

    A request runs with the cyclic collector paused, and what it left is
    collected once its reply is out (generations 0 and 1: everything older
    was there before it). A compile builds a module of many objects that
    live until it ends; collected as usual they were scanned again with
    each collection while it ran (a kernel set's Python work: 9.9 ms ->
    9.2 ms of CPU).

    A request may move the worker first (`context`, for a pool worker kept
    from one build to the next, `loomcli.runtime.pool`): `scratch`, its new
    private folder (made here), and `makeflags`, the MAKEFLAGS its
    processes see now (null: none)."""
    functions: dict[str, Callable[..., bytes]] = {}
    while True:
        frame = _read_exact(stdin, _FRAME.size)
        if frame is None:
            return
        hlen, plen = _FRAME.unpack(frame)
        head = _read_exact(stdin, hlen)
        payload = _read_exact(stdin, plen)
        if head is None or payload is None:
            return
        status, reply_head, reply = 0, b"", b""
        gc.disable()
        try:
            request = json.loads(head)
            if "context" in request:
                context = _move(context, request["context"])
            name = request["call"]
            if name not in functions:
                module, _, attr = name.partition(":")
                functions[name] = getattr(importlib.import_module(module), attr)
            if context is None:
                reply = functions[name](request.get("header", {}), payload)
            else:
                reply = functions[name](request.get("header", {}), payload, context)
        except Exception as e:  # reported to the parent; the worker stays up
            status, reply_head = 1, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
        stdout.write(_STATUS.pack(status) + _FRAME.pack(len(reply_head), len(reply)) + reply_head + reply)
        stdout.flush()
        gc.collect(1)
        gc.enable()


def _move(context: Any, moved: dict[str, Any]) -> Any:
    """`serve`'s context after a `context` update."""
    if "makeflags" in moved:
        if moved["makeflags"] is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = moved["makeflags"]
    if "scratch" in moved and context is not None:
        from loomcli.runtime.tasks import WorkerContext

        os.makedirs(moved["scratch"], exist_ok=True)
        context = WorkerContext(context.ordinal, moved["scratch"])
    return context


def prepare_child(preload: Sequence[str], bound_to_parent: bool = False) -> BinaryIO:
    """Common start of every worker child: ignore SIGINT, keep fd 1 for
    replies only, import (and warm) the preloaded modules. Returns the reply stream.
    `bound_to_parent` is for children whose parent thread lives as long as
    they are used (pool slots): Linux ties the signal to that thread."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if bound_to_parent:
        die_with_parent()
    # Replies go to a private copy of stdout; anything else printed to fd 1
    # (by Python or by LLVM) goes to stderr and cannot corrupt the framing.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    become_worker()
    warm_and_freeze(preload)
    return replies


def warm_and_freeze(preload: Sequence[str]) -> None:
    """Import `preload` (calling each module's `warm()`), then freeze what
    that built: it lives as long as the process (and, in a fork server or a
    template, every process forked from it), so the collector need never scan
    it again, nor write to (and so copy) the pages a forked child shares."""
    keep_freed_memory()
    for name in preload:
        module = importlib.import_module(name)
        warm = getattr(module, "warm", None)
        if warm is not None:
            warm()
    gc.collect()
    gc.freeze()


# glibc's mallopt parameters (malloc.h), and what a warm process sets them to.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEPT_FREE = 256 << 20   # free memory at the top of the heap kept for the next command, at most
_MMAP_ABOVE = 32 << 20   # glibc's largest threshold: blocks below it come from the heap


def keep_freed_memory() -> None:
    """A process that serves one request after another (a worker, a fork
    server and what it forks, the resident server's template) keeps the
    memory a request freed for the next one. By default glibc gives the top
    of its heap back after each request and maps every block of 128 KiB or
    more anew; each page of it then faults again when the next request
    touches it: about 800 page faults, 2 to 3 ms, per served compile. The
    cost is a resident size at the largest request's peak, which a worker
    has anyway. Not glibc (no `mallopt`), or not Linux: nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_TRIM_THRESHOLD, _KEPT_FREE)
    mallopt(_M_MMAP_THRESHOLD, _MMAP_ABOVE)


def die_with_parent(parent: int | None = None) -> None:
    """Linux: the kernel sends SIGKILL when the parent dies, so a killed
    coordinator leaves no worker behind (elsewhere, stdin closing ends it).
    `parent`: the pid the parent had before this process started, to tell
    whether it died before the signal was set."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() == 1 or (parent is not None and os.getppid() != parent):  # the parent is already gone
            os._exit(0)
    except (OSError, AttributeError):
        pass


def end_child() -> NoReturn:
    """A worker child's orderly end, once its stdin closed. Nothing of it
    outlives the process (each reply is flushed as it is sent; scratch
    folders belong to the parent), so it skips the interpreter's
    finalization and LLVM's static destructors: 60 to 120 ms per worker
    that the parent would wait for at the end of every build."""
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str]) -> None:
    replies = prepare_child(argv)
    serve(sys.stdin.buffer, replies)
    end_child()


if __name__ == "__main__":
    main(sys.argv[1:])
