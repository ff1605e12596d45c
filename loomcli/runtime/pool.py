"""The standard worker pool: one `TaskSink` backed by warm worker processes.

One coordinator (this process) owns scheduling. Each of at most `jobs`
slots is a coordinator thread that owns one worker process with a dense
ordinal and a private scratch folder; the process is started once (lazily,
or early with `warm`) with the prepared immutable state its preloaded
modules build, then serves small requests over the framing of
`loomcli.runtime.isolated` and returns bytes. On Linux the workers are forked
from one warm server (`loomcli.runtime.forkserver`), so that state is built
once per pool and shared; elsewhere each worker is its own interpreter. A
worker process is its own crash isolation: LLVM runs inside it
(`shared_worker()` is the process itself there), and a worker that dies
fails only the task it was running (status "crashed") and is replaced on
that slot's next task.

Concurrency is bounded twice: by the slot count (`-j`, `LOOM_JOBS`, usable
CPUs) and by a `TokenGate` (the implicit slot plus make's jobserver tokens
when there is one). A slot holds a token only while its worker runs a task.

`close(cancel=True)` is the Ctrl-C / SIGTERM path: queued tasks resolve as
"cancelled", running workers (and the fork server) are killed, every token
goes back and every thread and process is joined before `close` returns;
no orphan remains.

A process that runs command after command (a resident server's child that
serves again, `loomcli.runtime.template`) keeps its pool's fork server and
workers from one command to the next instead (`keep_between_commands`):
a fresh worker copies the pages it writes of its parent's memory on its
first task (17 ms of a 28 ms task) after the fork server itself was forked
and warmed (8 ms before the first task). A pool that ends normally parks
them (at most one worker per usable CPU); the next pool of the
process takes them if its workers would be the same processes anyway:
the same preloaded modules, environment (MAKEFLAGS aside), folder and
umask, and no jobserver pipe to inherit. Each kept worker is moved to the
new pool's scratch folder and told the MAKEFLAGS of now with its first
task there (`isolated.serve`'s `context`). A parked pool holds no thread
and no folder; its processes die with the process that parked them.
"""

from __future__ import annotations

import collections
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from loomcli import settings
from loomcli.errors import UsageError
from loomcli.runtime import forkserver
from loomcli.runtime.isolated import RemoteError, Worker, WorkerCrash
from loomcli.runtime.jobserver import TokenGate
from loomcli.runtime.tasks import Task, TaskResult, WorkerContext, usable_cpus


@dataclass(frozen=True)
class TaskEvent:
    """One task as it ran: for `--trace` and progress displays."""

    label: str
    worker: int
    pid: int
    start_us: int  # microseconds since the Unix epoch
    dur_us: int
    status: str


# The most workers (and jobserver tokens) one loom serves. Our jobserver holds
# jobs - 1 one-byte tokens in a pipe of 64 KiB: `-j 99999999999` asked for a
# 100 GB write (MemoryError) and `-j 70000` overfilled the pipe, losing
# tokens. A larger count is clamped, as no machine runs more workers usefully.
MAX_JOBS = settings.MAX_JOBS


def resolve_jobs(explicit: int | None, environ: Mapping[str, str] | None = None) -> int:
    """The worker bound: `-j N`, else `LOOM_JOBS`, else the usable CPUs;
    at most MAX_JOBS."""
    if explicit is not None:
        if explicit < 1:
            raise UsageError(f"-j {explicit}: the job count must be at least 1")
        return min(explicit, MAX_JOBS)
    n = settings.jobs(environ)
    if n is not None:
        return n
    return usable_cpus()


class WorkerPool:
    """A bounded pool of warm worker processes (see the module docstring)."""

    def __init__(self, jobs: int, preload: Sequence[str] = (), gate: TokenGate | None = None,
                 on_event: Callable[[TaskEvent], None] | None = None,
                 on_start: Callable[[Task, int], None] | None = None, fork: bool | None = None,
                 server: forkserver.ForkServer | None = None) -> None:
        self._jobs = max(1, jobs)
        self._preload = tuple(preload)
        # Workers forked from one warm server (`loomcli.runtime.forkserver`; `server`:
        # one already started, which the pool now owns) where the platform
        # allows; `fork=False` starts each as its own interpreter.
        use_fork = forkserver.available() if fork is None else fork
        # What this pool's workers are forked with; a parked pool serves only an identical one.
        self._origin = _Origin.now(self._preload) if use_fork and server is None and _keeping else None
        kept = _unpark(self._origin) if self._origin is not None else None
        if kept is not None:
            server = kept.server
            self._origin = kept.origin
        self._kept: list[forkserver.ForkedWorker] = kept.workers if kept is not None else []
        self._server = server if server is not None else forkserver.ForkServer(self._preload) if use_fork else None
        self._own_gate = gate is None
        self._gate = gate if gate is not None else TokenGate(None, self._jobs)
        self._on_event = on_event
        self._on_start = on_start
        self._queue: collections.deque[tuple[Task, Future[TaskResult]]] = collections.deque()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._workers: list[Worker] = []
        self._idle = 0
        self._closing = False
        self._cancelled = False
        self._scratch = tempfile.mkdtemp(prefix="loom-pool-")
        self.events: list[TaskEvent] = []

    @property
    def worker_count(self) -> int:
        return self._jobs

    # ------------------------------------------------------------ producer side

    def warm(self, n: int | None = None) -> None:
        """Start `n` workers now (default: all), so they get ready while the
        coordinator does other work. Returns at once: each slot thread starts
        its own worker."""
        with self._cond:
            want = min(self._jobs, n if n is not None else self._jobs)
            while len(self._workers) < want:
                self._new_slot()

    def submit(self, task: Task) -> Future[TaskResult]:
        future: Future[TaskResult] = Future()
        with self._cond:
            if self._closing:
                raise RuntimeError("the worker pool is closed")
            self._queue.append((task, future))
            if self._idle == 0 and len(self._threads) < self._jobs:
                self._new_slot()
            self._cond.notify()
        return future

    def close(self, cancel: bool = False) -> None:
        """Finish (or with `cancel`, abandon) the queued work, stop every
        worker and thread, return every token, remove the scratch folders."""
        with self._cond:
            self._closing = True
            if cancel:
                self._cancelled = True
                while self._queue:
                    _, future = self._queue.popleft()
                    if future.set_running_or_notify_cancel():
                        future.set_result(TaskResult("cancelled", message="interrupted"))
            self._cond.notify_all()
        if cancel:
            self._gate.cancel()
            if self._server is not None:
                self._server.kill()
            for worker in list(self._workers):
                proc = worker.proc
                if proc is not None and proc.poll() is None:
                    proc.kill()
        for thread in list(self._threads):
            thread.join()
        self._workers += self._kept  # kept workers no slot took: they end or are parked again
        self._kept = []
        if not cancel and self._park():
            return
        for worker in self._workers:  # all of them end at once, not one after another
            worker.end_input()
        if self._server is not None:
            self._server.close()  # kills and reaps any worker still there
        for worker in self._workers:
            worker.close()
        if self._own_gate:
            self._gate.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _park(self) -> bool:
        """Park the server and the workers still running for this process's
        next pool (see the module docstring); whether they were."""
        if self._origin is None or self._server is None or self._server.pid is None:
            return False
        kept: list[forkserver.ForkedWorker] = []  # ordinals 0, 1, ...: the first that cannot be kept ends the rest
        ended: list[Worker] = []
        for worker in self._workers:
            if (not ended and isinstance(worker, forkserver.ForkedWorker) and worker.pid is not None
                    and len(kept) < usable_cpus() and worker.calls < KEPT_WORKER_CALLS):
                kept.append(worker)
            else:
                ended.append(worker)
        for worker in ended:
            worker.end_input()
        for worker in ended:
            worker.close()
        if self._own_gate:
            self._gate.close()
        shutil.rmtree(self._scratch, ignore_errors=True)
        _parked.append(_Parked(self._server, kept, self._origin))
        return True

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(cancel=exc is not None)

    # ------------------------------------------------------------ slots

    def _new_slot(self) -> Worker:
        """A slot thread and its worker, which the thread starts; call with the lock held."""
        ordinal = len(self._workers)
        scratch = os.path.join(self._scratch, f"worker-{ordinal}")
        worker: Worker
        if self._kept:
            worker = self._kept.pop(0)  # a kept worker of the same ordinal, moved here with its next task
            worker.move_to(scratch)
        elif self._server is not None:
            self._server.start()  # from the submitting thread, which outlives the slot threads
            worker = forkserver.ForkedWorker(self._server, ordinal, scratch)
        else:
            worker = Worker(self._preload, entry="loomcli.runtime.pool", args=[str(ordinal), scratch, *self._preload])
        self._workers.append(worker)
        thread = threading.Thread(target=self._serve, args=(ordinal, worker), name=f"loom-slot-{ordinal}",
                                  daemon=True)
        thread.start()
        self._threads.append(thread)  # after start: a signal in between must not leave close() an unstarted thread
        return worker

    def _serve(self, ordinal: int, worker: Worker) -> None:
        try:
            worker.start()  # warm before the first task; a failure is reported by that task
        except OSError:
            pass
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if not self._queue:
                    return
                task, future = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = self._run(ordinal, worker, task)
            except Exception as e:
                # A bug on the coordinator's side of one task (a request that
                # does not encode, say): that task fails and is reported, and
                # the slot keeps serving. Escaping would kill this thread with
                # a raw traceback and leave the future unresolved forever.
                result = TaskResult("raised", message=f"internal: {type(e).__name__}: {e}", worker=ordinal)
            future.set_result(result)

    def _run(self, ordinal: int, worker: Worker, task: Task) -> TaskResult:
        slot = self._gate.acquire()
        if slot is None or self._cancelled:
            self._gate.release(slot)
            return TaskResult("cancelled", message="interrupted")
        start = time.time_ns()
        pid = -1
        try:
            if self._on_start is not None:
                self._on_start(task, ordinal)
            try:
                worker.start()
                pid = worker.pid or -1
                value = worker.call(task.function, dict(task.header), task.payload)
                result = TaskResult("ok", value, worker=ordinal)
            except WorkerCrash as crash:
                if self._cancelled:
                    result = TaskResult("cancelled", message="interrupted", worker=ordinal)
                else:
                    detail = crash.last_lines()
                    result = TaskResult("crashed", message=f"worker {ordinal} died ({crash.describe()})"
                                        + (f": {detail}" if detail else ""), worker=ordinal)
            except RemoteError as e:
                result = TaskResult("raised", message=str(e), worker=ordinal)
            except OSError as e:  # the worker could not even start
                result = TaskResult("crashed", message=f"worker {ordinal} could not start: {e}", worker=ordinal)
            end = time.time_ns()
            # The task's event is recorded while it still holds its slot, so
            # observers never see more tasks running than the gate allows.
            event = TaskEvent(task.label or task.function, ordinal, pid, start // 1000,
                              max(1, (end - start) // 1000), result.status)
            with self._cond:
                self.events.append(event)
            if self._on_event is not None:
                self._on_event(event)
        finally:
            self._gate.release(slot)
        return result


# ---------------------------------------------------------------- pools kept between commands


# A kept worker ends after this many tasks: LLVM's context keeps every constant
# and name it was given, so a worker's memory grows a little with each.
KEPT_WORKER_CALLS = 2000


@dataclass(frozen=True)
class _Origin:
    """What a pool's workers are forked with, besides MAKEFLAGS (which each
    kept worker is told again) and their scratch folders (moved)."""

    preload: tuple[str, ...]
    environ: tuple[tuple[str, str], ...]
    folder: str
    umask: int

    @staticmethod
    def now(preload: tuple[str, ...]) -> _Origin | None:
        """This process's, or None when its workers must inherit a jobserver pipe."""
        from loomcli.runtime.spawn import inherited_fds

        if inherited_fds():
            return None
        try:
            folder = os.getcwd()
        except OSError:
            return None
        umask = _umask()
        environ = tuple(sorted((k, v) for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")))
        return _Origin(preload, environ, folder, umask)

    def serves(self, wanted: _Origin) -> bool:
        return set(wanted.preload) <= set(self.preload) and (self.environ, self.folder, self.umask) == (
            wanted.environ, wanted.folder, wanted.umask)


def _umask() -> int:
    """This process's umask, read without setting it (a thread creating a
    file meanwhile would get the value set); where Linux does not say, set
    and restored."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@dataclass
class _Parked:
    server: forkserver.ForkServer
    workers: list[forkserver.ForkedWorker]
    origin: _Origin


_keeping: list[bool] = []   # this process keeps its pools between commands
_parked: list[_Parked] = []  # at most one


def keep_between_commands() -> None:
    """Mark this process as one that runs command after command (see the module docstring)."""
    if not _keeping:
        _keeping.append(True)


def _unpark(wanted: _Origin) -> _Parked | None:
    """The parked pool, if it serves a pool of `wanted`; one that does not is ended."""
    if not _parked:
        return None
    kept = _parked.pop()
    if kept.origin.serves(wanted) and kept.server.pid is not None:
        return kept
    _end(kept)
    return None


def _end(kept: _Parked) -> None:
    for worker in kept.workers:
        worker.end_input()
    kept.server.close()  # kills and reaps any worker still there
    for worker in kept.workers:
        worker.close()


def parked_descriptors() -> set[int]:
    """The descriptors the parked pool holds (a command that leaves only those left none)."""
    return set().union(*(w.descriptors() for p in _parked for w in p.workers),
                       *(p.server.descriptors() for p in _parked))


def parked_children() -> set[int]:
    """The pids of this process's children the parked pool holds (its fork server)."""
    return {pid for p in _parked for pid in [p.server.pid] if pid is not None}


def end_parked() -> None:
    """End the parked pool now (a request wants descriptor numbers it may hold)."""
    while _parked:
        _end(_parked.pop())


# ---------------------------------------------------------------- the worker


def _worker_main(argv: list[str]) -> None:
    """`python -m loomcli.runtime.pool ORDINAL SCRATCH MODULE...`: one pool worker."""
    from loomcli.runtime.isolated import end_child, prepare_child, serve

    ordinal, scratch, *preload = argv
    replies = prepare_child(preload, bound_to_parent=True)
    os.makedirs(scratch, exist_ok=True)
    serve(sys.stdin.buffer, replies, WorkerContext(int(ordinal), scratch))
    end_child()


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
