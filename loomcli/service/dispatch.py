"""Requests in, outcome futures out: the cache first, then a task sink.

A cache hit creates no task; identical requests in flight share one;
successful outcomes are stored. Misses go to any `TaskSink` of the
runtime (the warm worker pool, or this process).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

from loomcli.runtime.tasks import TaskResult, TaskSink
from loomcli.service.key import cache_key
from loomcli.service.request import CompileOutcome, CompileRequest

if TYPE_CHECKING:
    from loomcli.cache import Cache


class CompileService:
    """Requests in, outcome futures out: the cache is checked before the
    sink (a hit creates no task), identical requests in flight share one
    task, and successful outcomes are stored. Infrastructure failures
    (a crashed worker) become `error` outcomes with exit code 3."""

    def __init__(self, sink: TaskSink, cache: Cache | None = None) -> None:
        self.sink = sink
        self.cache = cache
        self.hits = 0
        self.compiled = 0
        self._inflight: dict[str, Future[CompileOutcome]] = {}
        self._lock = threading.Lock()

    def submit(self, request: CompileRequest, label: str = "") -> Future[CompileOutcome]:
        key = cache_key(request) if self.cache is not None else None
        if key is not None:
            with self._lock:
                shared = self._inflight.get(key)
            if shared is not None:
                return shared
            assert self.cache is not None
            data = self.cache.get(key)
            if data is not None:
                try:
                    outcome = CompileOutcome.decode(data)
                except (ValueError, KeyError, TypeError):
                    outcome = None  # verified bytes we cannot read: a stale layout; compile again
                if outcome is not None and outcome.ok:
                    self.hits += 1
                    done: Future[CompileOutcome] = Future()
                    done.set_result(outcome)
                    return done
        self.compiled += 1
        result: Future[CompileOutcome] = Future()
        if key is not None:
            with self._lock:
                self._inflight[key] = result
        task_future = self.sink.submit(request.task(label))
        task_future.add_done_callback(lambda f: self._finish(f, result, key))
        return result

    def _finish(self, task_future: Future[TaskResult], result: Future[CompileOutcome], key: str | None) -> None:
        task_result = task_future.result()
        if task_result.ok:
            try:
                outcome = CompileOutcome.decode(task_result.value)
            except (ValueError, KeyError, TypeError) as e:
                outcome = CompileOutcome("error", message=f"internal: unreadable compile result: {e}", exit_code=3)
        elif task_result.status == "crashed":
            outcome = CompileOutcome("error", message=f"internal: {task_result.message}", exit_code=3)
        elif task_result.status == "cancelled":
            outcome = CompileOutcome("error", message="interrupted", exit_code=130)
        else:
            outcome = CompileOutcome("error", message=f"internal: {task_result.message}", exit_code=3)
        if key is not None and self.cache is not None and outcome.ok:
            self.cache.put(key, outcome.encode())
        if key is not None:
            with self._lock:
                self._inflight.pop(key, None)
        result.set_result(outcome)
