"""Bazel's persistent worker protocol (JSON) over the warm template (`loom worker`).

Bazel starts `loom worker --persistent_worker` once and writes it one
WorkRequest per action (`{"arguments": [...], "requestId": N, "sandboxDir": D, ...}`)
on stdin; the worker answers each with a WorkResponse on stdout
(`{"exitCode": C, "output": "...", "requestId": N}`, one line). Requests
are a stream of JSON objects, not lines: Bazel 4.2 prints each over several
lines. Each request runs as the resident server runs a client's command
(`loomcli.runtime.template`): a child forked from the warm template, in the
request's sandbox folder when Bazel gives one (else the worker's folder,
the execution root), with the worker's environment, stdin on /dev/null and
stdout and stderr on one pipe whose text becomes the response's `output`.
So a worker action writes the bytes the same command line writes when
Bazel runs it as a process of its own. Requests with an id (multiplex) run
at once, each in its own child, and are answered as they end; a `cancel`
request ends its child (SIGTERM) and is answered `wasCancelled`. A child
that crashes is its request's exit 3; the worker serves on.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from loomcli.runtime.template import Request, Stream, fork_request

MAX_REQUEST = 64 << 20  # a request's text; Bazel's are a few kilobytes


class ProtocolError(ValueError):
    """What Bazel wrote is not a stream of WorkRequest objects."""


def split_objects(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The complete top-level JSON objects at the start of `buffer` and what
    follows them (an object still arriving). Braces are counted outside
    strings, so an object may span any number of lines or reads."""
    found = []
    depth = 0
    start = -1
    in_string = escaped = False
    consumed = 0
    for i, byte in enumerate(buffer):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte == 0x7B:  # {
            if depth == 0:
                start = i
            depth += 1
        elif byte == 0x7D:  # }
            depth -= 1
            if depth < 0:
                raise ProtocolError("a `}` that closes nothing")
            if depth == 0:
                found.append(buffer[start:i + 1])
                consumed = i + 1
        elif depth == 0 and byte not in b" \t\r\n":
            if found:  # the requests before it are served first
                return found, buffer[i:]
            raise ProtocolError(f"{bytes([byte])!r} between requests")
    return found, buffer[consumed:]


@dataclass
class Job:
    """One request being served: its child, the pipe its output arrives on."""

    request_id: int
    pid: int
    pidfd: int
    output: int
    text: bytearray = field(default_factory=bytearray)
    code: int | None = None      # once reaped
    drained: bool = False        # the pipe reached its end
    cancelled: bool = False


class PersistentWorker:
    def __init__(self, run: Callable[[list[str]], Any], requests: BinaryIO, responses: BinaryIO) -> None:
        self.run = run
        self.requests = requests
        self.responses = responses
        self.jobs: dict[int, Job] = {}   # by request id
        self.abandoned = False           # Bazel closed stdin: nobody reads the answers
        self.by_fd: dict[int, Job] = {}  # pidfds and output pipes
        self.poller = select.poll()
        self.devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        # How this interpreter wraps its standard streams (as a process of the action's own would).
        self.streams = (Stream.of(sys.__stdin__), Stream.of(sys.__stdout__), Stream.of(sys.__stderr__))

    def serve(self) -> None:
        """Answer requests until Bazel closes stdin (or writes what is not a request)."""
        source = self.requests.fileno()
        self.poller.register(source, select.POLLIN)
        pending = b""
        open_input = True
        broken: ProtocolError | None = None
        while open_input or self.jobs:
            for fd, _ in self.poller.poll():
                if fd == source:
                    chunk = os.read(source, 1 << 16)
                    if not chunk:
                        open_input = False
                        self.poller.unregister(source)
                        self._abandon()
                        continue
                    pending += chunk
                    try:
                        if len(pending) > MAX_REQUEST:
                            raise ProtocolError("a request larger than 64 MiB")
                        while True:
                            objects, pending = split_objects(pending)
                            if not objects:
                                break
                            for text in objects:
                                self._request(text)
                    except ProtocolError as e:  # the requests taken so far are still answered
                        broken = e
                        open_input = False
                        self.poller.unregister(source)
                elif fd in self.by_fd:
                    self._progress(self.by_fd[fd], fd)
        if broken is not None:
            raise broken

    def _request(self, text: bytes) -> None:
        try:
            message = json.loads(text)
            request_id = int(message.get("requestId", 0))
            arguments = [str(a) for a in message.get("arguments", [])]
        except (ValueError, TypeError, AttributeError) as e:
            raise ProtocolError(f"not a WorkRequest: {e}") from None
        if message.get("cancel"):
            job = self.jobs.get(request_id)
            if job is not None and job.code is None:
                job.cancelled = True
                os.kill(job.pid, signal.SIGTERM)  # unreaped: the pid is still this child's
            return
        if request_id in self.jobs:
            raise ProtocolError(f"request {request_id} is already running")
        sandbox = message.get("sandboxDir") or "."
        read, write = os.pipe()
        try:
            request = Request(tuple(arguments), dict(os.environb), _umask(), str(sandbox),
                              {0: self.devnull, 1: write, 2: write}, self.streams)
            pid = fork_request(request, self.run)
        finally:
            os.close(write)
        job = Job(request_id, pid, os.pidfd_open(pid), read)
        self.jobs[request_id] = job
        for fd in (job.pidfd, job.output):
            self.by_fd[fd] = job
            self.poller.register(fd, select.POLLIN)

    def _progress(self, job: Job, fd: int) -> None:
        if fd == job.output:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                job.text += chunk
                return
            job.drained = True
        else:
            _, status = os.waitpid(job.pid, 0)
            job.code = os.waitstatus_to_exitcode(status)
        self.poller.unregister(fd)
        del self.by_fd[fd]
        os.close(fd)
        if job.drained and job.code is not None:
            del self.jobs[job.request_id]
            self._respond(job)

    def _respond(self, job: Job) -> None:
        if self.abandoned:
            return
        code = job.code if job.code is not None and job.code >= 0 else 3
        output = job.text.decode("utf-8", "replace")
        if job.code is not None and job.code < 0 and not job.cancelled:
            output += f"loom: error: internal: the command crashed in the loom worker (signal {-job.code})\n"
        response: dict[str, Any] = {"exitCode": code, "output": output, "requestId": job.request_id}
        if job.cancelled:
            response["wasCancelled"] = True
        try:
            self.responses.write(json.dumps(response).encode() + b"\n")
            self.responses.flush()
        except OSError:  # Bazel went away
            self.abandoned = True

    def _abandon(self) -> None:
        """Bazel closed stdin: nobody waits for the answers any more."""
        self.abandoned = True
        for job in self.jobs.values():
            if job.code is None:
                os.kill(job.pid, signal.SIGTERM)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
