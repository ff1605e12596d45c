"""The task boundary between what produces work and what executes it (seed 001).

A producer (the product frontier, `loom build`, `loom compile`) derives the
identity of each piece of work, checks the cache, and only on a miss submits
a `Task` to a `TaskSink`. The sink owns scheduling and nothing else: no
compiler policy, no cache, no completion state beyond the future it returns.

Contract of every `TaskSink`:
- each accepted task is executed exactly once;
- the task's function runs with a dense, mutually exclusive worker ordinal
  (`0 <= ordinal < sink.worker_count`) that selects per-worker scratch
  without a lock;
- the returned future resolves to a `TaskResult`; infrastructure failure (a
  worker that died, a function that raised) is the result's `status`, never
  an exception from the future, and is kept apart from what the function
  returned (compile diagnostics travel inside `value`, as the function's own
  result).

Task functions are named `"package.module:function"` so a process pool can
call them in another interpreter; they are called as
`function(header, payload, context)` and return bytes. `header` is JSON-able,
`payload` is bytes: tasks stay small and results come back as bytes.

`InlineExecutor` is the simplest sink: it runs each task at submission, in
this process, as worker 0. The standard pool (`loomcli.runtime.pool`) is the
other implementation.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

TaskStatus = Literal["ok", "crashed", "raised", "cancelled"]
Header = Mapping[str, Any]  # a task's JSON-able options


@dataclass(frozen=True)
class Task:
    """One queueable unit of work: a named function, small JSON options and a byte payload."""

    function: str
    header: Header = field(default_factory=dict)
    payload: bytes = b""
    label: str = ""  # what progress displays and traces call it (e.g. "kernel-3 amdgpu:gfx1100")


@dataclass(frozen=True)
class TaskResult:
    """How a task ended. `status` is infrastructure; `value` is the function's own result."""

    status: TaskStatus
    value: bytes = b""
    message: str = ""  # for a status other than "ok": what went wrong, one line
    worker: int = -1  # the ordinal that ran it (-1: none did)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class WorkerContext:
    """What a task function may use besides its arguments: the worker's
    ordinal and its private scratch folder (`folder`: its path, or what makes
    it on first use). Prepared, immutable state lives in module-level caches
    of the worker process, built once per process."""

    def __init__(self, ordinal: int, folder: str | InlineExecutor) -> None:
        self.ordinal = ordinal
        self._folder = folder

    @property
    def scratch(self) -> str:
        return self._folder if isinstance(self._folder, str) else self._folder.scratch


class TaskSink(Protocol):
    @property
    def worker_count(self) -> int: ...

    def submit(self, task: Task) -> Future[TaskResult]: ...


def resolve(function: str) -> Callable[[Header, bytes, WorkerContext], bytes]:
    """`"package.module:function"` -> the callable (imported on first use)."""
    module_name, _, attr = function.partition(":")
    if not module_name.startswith("loomcli.") or not attr:
        raise ValueError(f"task function {function!r} is not a loomcli function")
    return getattr(importlib.import_module(module_name), attr)


class InlineExecutor:
    """Runs each task when it is submitted, in this process, as worker 0."""

    def __init__(self) -> None:
        self._scratch: str | None = None

    @property
    def worker_count(self) -> int:
        return 1

    @property
    def scratch(self) -> str:
        """The scratch folder, made when a task first asks (most never do:
        a compile in this process would pay a folder made and removed)."""
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="loom-scratch-")
        return self._scratch

    def submit(self, task: Task) -> Future[TaskResult]:
        future: Future[TaskResult] = Future()
        future.set_running_or_notify_cancel()
        try:
            value = resolve(task.function)(task.header, task.payload, WorkerContext(0, self))
            future.set_result(TaskResult("ok", value, worker=0))
        except Exception as e:  # the status carries it; the caller decides what it means
            future.set_result(TaskResult("raised", message=f"{type(e).__name__}: {e}", worker=0))
        return future

    def close(self) -> None:
        if self._scratch is not None:
            import shutil

            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def usable_cpus() -> int:
    """CPUs this process may run on (affinity-aware), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
