"""Pool workers forked from one warm process, so warm-up is paid once per pool.

Starting a pool worker costs about 0.3 s of CPU: an interpreter, the
compiler's imports, LLVM's initialization. Paid once per slot, that is 0.6 s
of a two-core build that lasts 2.5 s, spent while the cores should be
compiling. Here one server process (`python -m loomcli.runtime.forkserver FD
BOUND MODULE...`) imports and warms the preloaded modules once, then forks a
worker per request: every worker starts warm in about a millisecond, and
the prepared state (parsed pass programs, op tables, LLVM's target
registry) is shared copy-on-write instead of built again per worker (seed
001: prepared state shared, never rebuilt per job).

The coordinator talks to the server over a `SOCK_SEQPACKET` socket pair,
one JSON packet per request and one per reply, strictly in turn:
- `{"op": "fork", "ordinal": N, "scratch": PATH}` with three descriptors
  attached (the worker's request pipe, its reply pipe, its stderr file):
  forks a worker that serves the pool's framing on those pipes
  (`loomcli.runtime.isolated.serve`) with `WorkerContext(N, PATH)`; reply
  `{"pid": P}`.
- `{"op": "poll", "pid": P}` / `{"op": "wait", "pid": P, "timeout": S}`:
  the worker's return code once it has ended (`subprocess`'s convention:
  negative for a signal), else `null`.
The server reaps a worker only when asked, so a worker's pid cannot be
reused while the coordinator may still signal it. That also makes a pidfd
the coordinator opens on a worker's pid safe: it becomes readable when the
worker ends, so the slot asks whether its worker still runs (three times
a task) without a round trip to the server; only a worker that has ended
is polled there, to reap it and learn its return code. When the socket closes
(the pool is done, or the coordinator died) the server kills and reaps any
worker left and exits; the kernel kills a worker whose server died (Linux's
`PR_SET_PDEATHSIG`), so killing the coordinator leaves nothing behind.

`ForkedWorker` is `isolated.Worker` with its process forked here instead of
started; a worker that dies is replaced by another fork, and a server that
died is started again. Where fork and descriptor passing are not available
(not Linux), the pool starts each worker as its own interpreter.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from loomcli import settings
from loomcli.runtime import spawn
from loomcli.runtime.isolated import (
    Worker,
    await_exit,
    die_with_parent,
    end_child,
    end_process,
    prepare_child,
    serve,
)
from loomcli.runtime.tasks import WorkerContext

_PACKET = 65536  # requests and replies are small JSON


def available() -> bool:
    """Whether pool workers can be forked from a server on this platform."""
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds") and hasattr(os, "waitstatus_to_exitcode")


class ServerGone(OSError):
    """The fork server ended (killed, or it failed to start)."""


class ForkServer:
    """The coordinator's side: starts the server once (again if it died) and
    forwards fork, poll and wait requests to it, one at a time."""

    def __init__(self, preload: Sequence[str]) -> None:
        self.preload = tuple(preload)
        self._proc: spawn.SpawnedProcess | None = None
        self._sock: socket.socket | None = None
        self._stderr: Any = None
        self._lock = threading.Lock()
        self.generation = 0  # which server process: a worker is known only to the one that forked it
        self._ended = False  # closed or killed: no server is started again
        self._answered = False  # the running server has replied: it is warm and reads its socket

    def start(self) -> None:
        """Start the server now, without waiting for it to be warm (nor for
        a request in flight: then it runs already)."""
        if self._alive():
            return
        with self._lock:
            self._ensure()

    def _adopt(self, started: spawn.Started) -> None:
        """Serve through a server `spawn.start_server` started: one this
        object started, or one prestarted before it existed (`adopt`)."""
        self.generation += 1
        self._answered = False
        self._proc = started.process
        self._sock = socket.socket(fileno=started.sock)
        self._stderr = os.fdopen(started.stderr, "w+b")

    def serves(self, generation: int) -> bool:
        """Whether the server of `generation` is still running."""
        return generation == self.generation and self._alive()

    def _alive(self) -> bool:
        return self._sock is not None and self._proc is not None and self._proc.poll() is None

    def _ensure(self) -> socket.socket:
        if self._alive():
            assert self._sock is not None
            return self._sock
        self._stop()
        if self._ended:
            raise ServerGone("the worker pool is closing")
        self._adopt(spawn.start_server(self.preload))
        assert self._sock is not None
        return self._sock

    def _request(self, message: dict[str, Any], fds: Sequence[int] = (), generation: int | None = None
                 ) -> dict[str, Any]:
        """The server's reply; a fork (no `generation`) starts a server if
        none runs, a question about a worker goes only to the server that
        forked it."""
        with self._lock:
            if generation is None:
                sock = self._ensure()
            elif generation == self.generation and self._sock is not None:
                sock = self._sock
            else:
                raise ServerGone("the fork server that started this worker has ended")
            try:
                if fds:
                    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))
                else:
                    sock.send(json.dumps(message).encode())
                reply = sock.recv(_PACKET)
            except OSError:
                reply = b""
            if not reply:
                raise ServerGone(f"the fork server ended ({self._describe_end()})")
            self._answered = True
            answer: dict[str, Any] = json.loads(reply)
            answer["generation"] = self.generation
            return answer

    def _describe_end(self) -> str:
        """Why the server is gone: its exit status and the last line it printed."""
        proc, text, code = self._proc, "", None
        if proc is not None:
            end_process(proc, 10)  # alive but not answering: killed, it will not be used again
            code = proc.returncode
        if self._stderr is not None:
            self._stderr.seek(0)
            lines = self._stderr.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
            text = f": {lines[-1].strip()}" if lines else ""
        self._stop()
        return f"exit status {code}{text}"

    def fork(self, ordinal: int, scratch: str, stdin: int, stdout: int, stderr: int) -> tuple[int, int]:
        """A new worker serving `stdin`/`stdout` (pipe ends the caller then
        closes) and writing to `stderr`: its pid and the server's generation.
        The worker's MAKEFLAGS is ours now, not the server's from its start:
        a jobserver loom serves may be newer than the server."""
        reply = self._request({"op": "fork", "ordinal": ordinal, "scratch": scratch,
                               "makeflags": settings.makeflags()}, (stdin, stdout, stderr))
        return int(reply["pid"]), int(reply["generation"])

    def poll(self, pid: int, generation: int) -> int | None:
        return self._request({"op": "poll", "pid": pid}, generation=generation)["code"]

    def wait(self, pid: int, generation: int, timeout: float | None = None) -> int | None:
        return self._request({"op": "wait", "pid": pid, "timeout": timeout}, generation=generation)["code"]

    def close(self) -> None:
        with self._lock:
            self._ended = True
            self._stop()

    @property
    def pid(self) -> int | None:
        """The running server's pid."""
        proc = self._proc
        return proc.pid if proc is not None and self._alive() else None

    def descriptors(self) -> set[int]:
        """The descriptors this process holds for the server (a parked pool's: `loomcli.runtime.pool`)."""
        return {f.fileno() for f in (self._sock, self._stderr) if f is not None}

    def kill(self) -> None:
        """The cancel path: end the server, and with it every worker, now,
        even while a request waits for it (that request then fails)."""
        self._ended = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()  # the server kills what is left, reaps it and exits
            self._sock = None
        if self._proc is not None and not self._answered:
            # Never used (a prestarted server a build had no work for), so
            # killed. A thread reaps it: the kernel takes 10 ms to tear down a
            # process holding LLVM, time the build's end need not wait for.
            proc = self._proc
            proc.kill()
            threading.Thread(target=proc.wait, name="loom-reap", daemon=True).start()
            self._proc = None
        if self._proc is not None:
            end_process(self._proc, 10)
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


class ForkedProcess:
    """The part of `subprocess.Popen` a `Worker` uses, for a forked worker."""

    def __init__(self, server: ForkServer, pid: int, generation: int, stdin: int, stdout: int) -> None:
        self.server = server
        self.pid = pid
        self.generation = generation
        self.stdin = os.fdopen(stdin, "wb")
        self.stdout = os.fdopen(stdout, "rb")
        self.returncode: int | None = None
        self.pidfd = _pidfd(pid)  # readable once the worker has ended (see the module docstring)

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.pidfd is not None and not select.select([self.pidfd], [], [], 0)[0]:
                return None  # running: no need to ask the server
            try:
                self._set(self.server.poll(self.pid, self.generation))
            except ServerGone:
                self._set(-signal.SIGKILL)  # the server's death killed its workers
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self._set(self.server.wait(self.pid, self.generation, timeout))
            except ServerGone:
                self._set(-signal.SIGKILL)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
        return self.returncode

    def _set(self, code: int | None) -> None:
        """The worker's return code, once known: its pidfd has served."""
        self.returncode = code
        if code is not None and self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def kill(self) -> None:
        # Safe against pid reuse: a worker's pid stays its own until its server
        # reaps it, which it does only when asked (poll/wait set returncode)
        # or when it ends, killing its workers anyway.
        if self.returncode is None and self.server.serves(self.generation):
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _pidfd(pid: int) -> int | None:
    """A pidfd of the server's worker `pid` (close-on-exec); None where the
    kernel has none (before Linux 5.3): then every poll asks the server."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class ForkedWorker(Worker):
    """A pool worker whose process comes from a `ForkServer`."""

    def __init__(self, server: ForkServer, ordinal: int, scratch: str) -> None:
        super().__init__(server.preload)
        self.server = server
        self.ordinal = ordinal
        self.scratch = scratch  # the folder of this worker's pool (a kept worker moves with it)
        self._given: tuple[str, str | None] | None = None  # (scratch, MAKEFLAGS) its process has

    def _spawn(self) -> Any:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        try:
            pid, generation = self.server.fork(self.ordinal, self.scratch, request_r, reply_w, self.stderr.fileno())
        except BaseException:
            for fd in (request_w, reply_r):
                os.close(fd)
            raise
        finally:
            os.close(request_r)
            os.close(reply_w)
        self._given = (self.scratch, settings.makeflags())
        return ForkedProcess(self.server, pid, generation, request_w, reply_r)

    def move_to(self, scratch: str) -> None:
        """A kept worker joins a new pool: its next task tells it `scratch`
        (which it makes, as a fresh worker makes its own) and the MAKEFLAGS
        of now, even where they are the names it had."""
        self.scratch = scratch
        self._given = None

    def _moved(self) -> dict[str, Any]:
        """A kept worker's new pool: its folder there and today's MAKEFLAGS."""
        now = (self.scratch, settings.makeflags())
        if now == self._given:
            return {}
        self._given = now
        return {"scratch": now[0], "makeflags": now[1]}

    def descriptors(self) -> set[int]:
        """The descriptors this process holds for the worker (a parked pool's: `loomcli.runtime.pool`)."""
        proc, held = self.proc, set()
        if proc is not None:
            held |= {proc.stdin.fileno(), proc.stdout.fileno()}
            if proc.pidfd is not None:
                held.add(proc.pidfd)
        if self.stderr is not None:
            held.add(self.stderr.fileno())
        return held


# ------------------------------------------------- a server started before it is known to be needed


def adopt(preload: Sequence[str]) -> ForkServer | None:
    """The server `loomcli.runtime.spawn.prestart` started, as a `ForkServer`, if
    there is one that imports at least `preload` (handed out once)."""
    started = spawn.take(preload)
    if started is None:
        return None
    server = ForkServer(started.preload)
    server._adopt(started)
    return server


# ---------------------------------------------------------------- the server


def _server_main(argv: list[str]) -> None:
    """`python -m loomcli.runtime.forkserver FD BOUND MODULE...`"""
    fd, bound, *preload = argv
    serve_forks(int(fd), bound == "1", preload)


def serve_forks(fd: int, bound: bool, preload: Sequence[str]) -> NoReturn:
    """The server's loop on socket `fd`, once `preload` is imported (here, or
    already by the warm process this one was forked from: `spawn.start_server`)."""
    sock = socket.socket(fileno=fd)
    # The socket closing ends the server (the pool is done, or the
    # coordinator died); when the coordinator's main thread started it, being
    # bound to that thread also ends one that hangs before it reads the socket.
    prepare_child(preload, bound_to_parent=bound)
    workers: set[int] = set()
    try:
        while True:
            try:
                packet, fds, _, _ = socket.recv_fds(sock, _PACKET, 3)
            except OSError:
                break
            if not packet:
                break
            request = json.loads(packet)
            if request["op"] == "fork":
                sys.stderr.flush()  # nothing buffered may be written twice
                server = os.getpid()
                pid = os.fork()
                if pid == 0:
                    _worker(sock, fds, request, server)
                for f in fds:
                    os.close(f)
                workers.add(pid)
                reply: dict[str, Any] = {"pid": pid}
            else:
                pid = int(request["pid"])
                reply = {"code": _reap(pid, request["op"] == "wait", request.get("timeout")) if pid in workers
                         else None}
                if reply["code"] is not None:
                    workers.discard(pid)
            sock.send(json.dumps(reply).encode())
    finally:
        for pid in workers:  # the coordinator is done or gone: nothing may outlive it
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    end_child()


def _reap(pid: int, block: bool, timeout: float | None) -> int | None:
    """The worker's return code once it ended, else None (after `timeout`
    seconds when blocking; None: no limit)."""
    code = _reaped(pid)
    if code is None and block:
        await_exit(pid, timeout)
        code = _reaped(pid)
    return code


def _reaped(pid: int) -> int | None:
    """Reap the worker if it has ended: its return code, else None."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return -signal.SIGKILL
    return os.waitstatus_to_exitcode(status) if done else None


def _worker(sock: socket.socket, fds: list[int], request: dict[str, Any], server: int) -> NoReturn:
    """The forked child: serve the pool's framing on the passed pipes. It
    never returns into the server's loop, whatever happens."""
    try:
        sock.close()
        requests, replies, stderr = fds
        os.dup2(stderr, 2)
        os.dup2(2, 1)  # stray prints (Python's or LLVM's) go to the worker's stderr
        os.close(stderr)
        die_with_parent(server)
        if request.get("makeflags") is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = request["makeflags"]
        scratch = request["scratch"]
        os.makedirs(scratch, exist_ok=True)
        serve(os.fdopen(requests, "rb"), os.fdopen(replies, "wb"), WorkerContext(int(request["ordinal"]), scratch))
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(70)
    end_child()


if __name__ == "__main__":
    _server_main(sys.argv[1:])
