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

A child may serve again, as the resident server's do (`template.fork_spare`):
after a `compile`, `link`, `frontier` (any command of `resident.AGAIN`)
that left its process as it found it, it lets go of the request (its
output pipe reaches its end), says its exit status on its control socket
and waits for the next request, whose folder, environment and streams it
then takes as a fresh child would. A fresh child copies the template's
pages it writes (about 20 ms of a 40 ms compile); a warm one has. Up to
one warm child per CPU (at least two) waits; a cancelled request's child
never serves again.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from loomcli.runtime import action, served
from loomcli.runtime.resident import receive, run_tokens, serves_again
from loomcli.runtime.template import Request, Spare, Stream, fork_request, fork_spare, hear, most_warm, status_said

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
    child: Spare | None = None   # a child that may serve again: its control socket says the exit status
    text: bytearray = field(default_factory=bytearray)
    code: int | None = None      # once reaped, or said by a child that serves again
    drained: bool = False        # the pipe reached its end
    cancelled: bool = False
    said: bytes = b""            # what the child has said on its control socket so far


class PersistentWorker:
    def __init__(self, run: Callable[[list[str]], Any], requests: BinaryIO, responses: BinaryIO) -> None:
        self.run = run
        self.requests = requests
        self.responses = responses
        self.jobs: dict[int, Job] = {}   # by request id
        self.abandoned = False           # Bazel closed stdin: nobody reads the answers
        self.by_fd: dict[int, Job] = {}  # pidfds, output pipes and control sockets
        self.warm: dict[int, Spare] = {}  # children that served and wait again, by pidfd
        self.most_warm = most_warm()
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
                elif fd in self.warm:  # a warm child ended while it waited
                    self._end_child(self.warm.pop(fd))
        for pidfd in list(self.warm):
            self._end_child(self.warm.pop(pidfd))
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
        sandbox = str(message.get("sandboxDir") or ".")
        read, write = os.pipe()
        try:
            request = Request(tuple(arguments), dict(os.environb), _umask(), sandbox,
                              {0: self.devnull, 1: write, 2: write}, self.streams)
            child = self._hand(request)
            if child is None:  # a fresh child of its own, which ends with the request
                pid = fork_request(request, self.run)
                job = Job(request_id, pid, os.pidfd_open(pid), read)
            else:
                job = Job(request_id, child.pid, child.pidfd, read, child)
        finally:
            os.close(write)
        self.jobs[request_id] = job
        for fd in (job.pidfd, job.output) + ((job.child.control.fileno(),) if job.child else ()):
            self.by_fd[fd] = job
            self.poller.register(fd, select.POLLIN)

    def _hand(self, request: Request) -> Spare | None:
        """A child that may serve again, `request` handed to it: a warm one,
        else one forked now. None when the request cannot be handed over
        (no child of it serves again, its folder cannot be opened: that child
        reports it; an argument with a NUL byte) or no child could be forked."""
        if not _serves_again(request.argv) or any("\0" in a for a in request.argv):
            return None
        try:
            folder = os.open(str(request.cwd), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            tokens, fds = run_tokens(Request(request.argv, request.environ, request.umask, folder, request.fds,
                                             request.streams))
            while True:
                fresh = not self.warm
                if fresh:
                    try:
                        child = fork_spare(receive, self.run, _serves_again)
                    except OSError:
                        return None
                else:
                    child = self.warm.pop(next(iter(self.warm)))
                    self.poller.unregister(child.pidfd)
                try:
                    served.send_request(child.control, [served.MAGIC, b"", b"run", *tokens], fds)
                    return child
                except OSError:  # a warm one died meanwhile: the next one; a fresh one: a child of its own
                    self._end_child(child)
                    if fresh:
                        return None
        finally:
            os.close(folder)

    @staticmethod
    def _end_child(child: Spare) -> None:
        """End a child that waits (it ends on its own once its control socket closes; SIGKILL
        spares it the wait) and reap it."""
        child.control.close()
        try:
            signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(child.pid, 0)
        os.close(child.pidfd)

    def _progress(self, job: Job, fd: int) -> None:
        if fd == job.output:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                job.text += chunk
                return
            job.drained = True
            self._forget(job, fd)
            os.close(fd)
        elif job.child is not None and fd == job.child.control.fileno():
            self._said(job, job.child)
        else:
            _, status = os.waitpid(job.pid, 0)
            job.code = os.waitstatus_to_exitcode(status)
            self._forget(job, fd)
            if job.child is not None:  # it ended instead of saying its status
                self._forget(job, job.child.control.fileno())
                job.child.control.close()
                job.child = None
            os.close(fd)
        if job.drained and job.code is not None:
            del self.jobs[job.request_id]
            self._respond(job)

    def _forget(self, job: Job, fd: int) -> None:
        self.poller.unregister(fd)
        del self.by_fd[fd]

    def _said(self, job: Job, child: Spare) -> None:
        """The child said something on its control socket: `X` and its exit
        status (`served.frame`): the command ended and the child waits for
        another request; anything else, or the end of the stream: it serves
        nobody again (its pidfd then says how it ended)."""
        job.said, whole = hear(child.control, job.said)
        if not whole:
            return
        self._forget(job, child.control.fileno())
        code = status_said(job.said)
        if code is None:
            child.control.close()  # its pidfd says how it ended
            os.kill(job.pid, signal.SIGKILL)
            job.child = None
            return
        job.code = code
        self._forget(job, child.pidfd)
        job.child = None
        if job.cancelled or self.abandoned or len(self.warm) >= self.most_warm:
            self._end_child(child)  # a cancel's SIGTERM may still be on its way to it
        else:
            self.warm[child.pidfd] = child
            self.poller.register(child.pidfd, select.POLLIN)

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


def _serves_again(argv: Sequence[str]) -> bool:
    """Whether the child of an action's command line may serve again (its `--mkdir` folders aside)."""
    return serves_again(action.command(list(argv)))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
