"""One compile session as `loom compile` and `loom build` run it: settings
read once (`-j`, `LOOM_JOBS`, `MAKEFLAGS`, the cache), a sink chosen for the
amount of work (in this process for one task, the warm pool for more, or for
one task too when a fork server was prestarted), every
task timed for `--trace` (or `LOOM_TRACE_DIR`), and a teardown that returns
every jobserver token and leaves no process behind on success, failure,
Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

from loomcli import settings
from loomcli.cache import Cache, open_cache
from loomcli.errors import atomic_write
from loomcli.runtime import forkserver
from loomcli.runtime.interrupts import sigterm_as_interrupt
from loomcli.runtime.jobserver import Jobserver, JobserverServer, TokenGate, connect
from loomcli.runtime.pool import TaskEvent, WorkerPool, resolve_jobs
from loomcli.runtime.tasks import InlineExecutor, Task, TaskResult
from loomcli.service.dispatch import CompileService


class TimedInline(InlineExecutor):
    """`InlineExecutor` that records a `TaskEvent` per task and holds the implicit slot meanwhile."""

    def __init__(self, gate: TokenGate, on_event: Callable[[TaskEvent], None] | None = None) -> None:
        super().__init__()
        self.gate = gate
        self.events: list[TaskEvent] = []
        self.on_event = on_event

    def submit(self, task: Task) -> Future[TaskResult]:
        slot = self.gate.acquire()
        start = time.time_ns()
        try:
            future = super().submit(task)
        finally:
            self.gate.release(slot)
        end = time.time_ns()
        event = TaskEvent(task.label or task.function, 0, os.getpid(), start // 1000, max(1, (end - start) // 1000),
                          future.result().status)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
        return future


@dataclass
class Session:
    service: CompileService
    cache: Cache | None
    jobs: int
    dry_run: bool
    jobserver: Jobserver | None
    gate: TokenGate
    sink: TimedInline | WorkerPool
    warnings: list[str] = field(default_factory=list)

    @property
    def events(self) -> list[TaskEvent]:
        return self.sink.events

    def warm(self) -> None:
        """Start the pool's workers now (nothing for an inline session)."""
        if isinstance(self.sink, WorkerPool):
            self.sink.warm()


def preload_for(targets: list[str], extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Modules a worker prepares before its first task: the compile entry
    point (and `extra`), and LLVM when a target that emits through it is built."""
    from loomcli.emit import backend_for
    from loomcli.targets.profiles import parse_target

    mods = ["loomcli.service.compile", *extra]
    if any(backend_for(parse_target(t)).llvm for t in targets):
        mods.append("loomcli.emit.llvm.codegen")
    return tuple(mods)


@contextlib.contextmanager
def compile_session(jobs: int | None, tasks_hint: int, targets: list[str], no_cache: bool = False,
                    warn: Callable[[str], None] | None = None, trace_path: str | None = None,
                    on_event: Callable[[TaskEvent], None] | None = None,
                    on_start: Callable[[Task, int], None] | None = None,
                    preload: tuple[str, ...] = (), jobserver_style: str = "fifo",
                    cache: Cache | None = None) -> Iterator[Session]:
    """A session with a sink sized for `tasks_hint` tasks (see the module docstring).
    A parallel session without an inherited jobserver serves its own
    (`JobserverServer` of `jobserver_style`) to the processes it starts.
    `cache` is one the caller already opened (and looked up before
    scheduling); without it the session opens one unless `no_cache`."""
    warned: list[str] = []

    def say(message: str) -> None:
        warned.append(message)
        if warn is not None:
            warn(message)

    explicit = jobs
    n = resolve_jobs(jobs)
    jobserver, problem, dry_run = connect()
    if problem is not None:
        say(problem)
        n = 1  # an advertised but unusable jobserver: serial work
    elif jobserver is not None and explicit is None:
        n = resolve_jobs(None)  # the tokens bound concurrency; -j only caps the workers
    if cache is None:
        cache = open_cache(no_cache, warn=say)
    width = max(1, min(n, tasks_hint))
    serving = jobserver is None and problem is None and not dry_run and width > 1
    with sigterm_as_interrupt(), _served_jobserver(serving, n, jobserver_style, say) as server:
        if server is not None:
            jobserver = server.client()
        gate = TokenGate(jobserver, width, warn=say)
        modules = preload_for(targets, preload)
        # A fork server prestarted by the entry point serves this pool, unless
        # its workers must inherit a pipe jobserver newer than it. Being warm
        # already, it serves even a single task: inline, LLVM would start in
        # a child process of its own (`loomcli.emit.llvm.backend.codegen`).
        early = forkserver.adopt(modules) if not (serving and jobserver_style == "pipe") else None
        sink: TimedInline | WorkerPool
        if width <= 1 and early is None:
            sink = TimedInline(gate, on_event)
        else:
            sink = WorkerPool(width, modules, gate, on_event=on_event, on_start=on_start, server=early)
        session = Session(CompileService(sink, cache), cache, width, dry_run, jobserver, gate, sink, warned)
        interrupted = False
        try:
            yield session
        except BaseException:
            interrupted = True
            raise
        finally:
            if isinstance(sink, WorkerPool):
                sink.close(cancel=interrupted)
            else:
                sink.close()
            gate.close()
            if jobserver is not None:
                jobserver.close()
            if cache is not None:
                cache.record_totals()
                if not interrupted:
                    _prune_if_large(cache)
            if trace_path is None and not dry_run:  # make -n writes nothing
                trace_path = _trace_file_in(settings.trace_dir() or "")
            if trace_path is not None:
                write_trace(trace_path, sink.events, jobserver, gate)


def _trace_file_in(folder: str) -> str | None:
    """A new file in `folder` (`LOOM_TRACE_DIR`, made if missing) for this
    session's trace; None for no folder. The folder is where every compile
    session without --trace writes its trace: the way to see what each loom
    did when a build system (CMake, make, Bazel) runs it with its own arguments."""
    if not folder:
        return None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=f"loom-{os.getpid()}-", suffix=".trace.json", dir=folder)
    except OSError as e:
        from loomcli.errors import UsageError

        raise UsageError(f"LOOM_TRACE_DIR={folder}: cannot write a trace there ({e.strerror or e})") from None
    os.close(fd)
    return path


@contextlib.contextmanager
def _served_jobserver(wanted: bool, jobs: int, style: str,
                      say: Callable[[str], None]) -> Iterator[JobserverServer | None]:
    """Our own jobserver while the session runs, advertised in this
    process's MAKEFLAGS (so every process it starts inherits it), then
    audited and removed, the old MAKEFLAGS restored, on every exit path."""
    if not wanted:
        yield None
        return
    server = JobserverServer(jobs, style)
    saved = settings.makeflags()
    try:
        os.environ["MAKEFLAGS"] = server.environ(dict(os.environ))["MAKEFLAGS"]
        yield server
    finally:
        if saved is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = saved
        missing = server.close()
        if missing:
            say(f"jobserver: {missing} of {server.tokens} tokens were not returned by the processes loom started")


def _prune_if_large(cache: Cache) -> None:
    if cache.stats.stores:
        _, size = cache.usage()
        if size > cache.max_size:
            cache.prune()


def write_trace(path: str, events: list[TaskEvent], jobserver: Jobserver | None = None,
                gate: TokenGate | None = None) -> None:
    """Chrome trace-event JSON (Perfetto opens it): one complete ("X") event
    per compile task, microseconds since the Unix epoch, pid/tid per worker;
    `otherData` says which jobserver bounded the tasks (make's `auth` text or
    null), the slot limit and how many tokens loom took from it."""
    doc = {"traceEvents": [
        {"name": e.label, "cat": "compile", "ph": "X", "ts": e.start_us, "dur": e.dur_us, "pid": e.pid,
         "tid": e.worker, "args": {"status": e.status}}
        for e in sorted(events, key=lambda e: (e.start_us, e.worker))
    ], "displayTimeUnit": "ms", "otherData": {
        "jobserver": jobserver.auth if jobserver is not None else None,
        "slots": gate.limit if gate is not None else None,
        "tokens_taken": gate.tokens_taken if gate is not None else 0,
    }}
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode())
