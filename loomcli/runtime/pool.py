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
        for worker in self._workers:  # all of them end at once, not one after another
            worker.end_input()
        if self._server is not None:
            self._server.close()  # kills and reaps any worker still there
        for worker in self._workers:
            worker.close()
        if self._own_gate:
            self._gate.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

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
        if self._server is not None:
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
