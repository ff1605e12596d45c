"""The resident compile server (TOOLCHAIN.md section 12): one process per
user and loom build that keeps a warm template (`loomcli.runtime.template`)
and runs each client's command line in a child forked from it.

One thread, one `poll` loop over the listening socket, the connections and
a pidfd per running child (`loomcli.runtime.served` describes where the
socket lives and the protocol):
- a connection is served only if its peer is this user (`SO_PEERCRED`);
  its request is a list of byte tokens, checked, never code or pickled data;
- `run` forks a child with the request's descriptors, folder, environment
  and umask (or hands the request to a warm child: one whose last command
  left it as it found it, see `template.fork_spare`; it says that command's
  status on its control socket instead of ending); the client's forwarded signals go to that child; when the
  child ends, its status goes back; when the client goes away first (killed,
  even by SIGKILL), the child is sent SIGTERM (loom's interrupt path:
  tokens returned, nothing partial left) and SIGKILL after `GRACE` seconds;
- `status` answers a JSON document; `stop` stops accepting at once,
  lets the running commands finish, then removes the socket, the lock and
  the folder (if nothing else is in it) and exits; the stopper's
  connection closes as the process ends, so `loom server stop` waits for it;
- after `idle` seconds without a client the server stops the same way.
The lock (`served.take_lock`) is held for the process's whole life.
"""

from __future__ import annotations

import errno
import io
import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loomcli.runtime import served
from loomcli.runtime.template import (
    FORWARDED,
    Request,
    Spare,
    Stream,
    fork_request,
    fork_spare,
    hear,
    most_warm,
    status_said,
)

# The commands whose child may serve another request after it (`template.fork_spare`):
# each is a function of its inputs (what a build keeps between requests, its decoded
# libraries, is keyed by name and content); whether one left its process as it found it
# is checked after each run (a build's pool, its threads and fork server end with it).
# `test` starts devices, whose state in native code no check sees; its children end.
AGAIN = frozenset({"build", "compile", "emit", "fmt", "frontier", "link", "opt"})
GRACE = 10.0          # seconds a command whose client went away has to end before SIGKILL
REQUEST_TIMEOUT = 30.0  # seconds a connection may take to send its request
MAX_FDS = 16
# A request names the descriptor numbers its command gets (its jobserver
# pipe's): one past Linux's largest possible descriptor table is refused, not
# a crash of the command's start.
MAX_FD_NUMBER = 1 << 20
# Out of descriptors (EMFILE), `accept` fails while the listener stays
# readable, and the loop spun at full speed while every client waited (200
# idle connections under a limit of 80 descriptors: `loom server status`
# took 57 s). Now the oldest connections still sending their requests are
# refused (their clients run the commands themselves), with HEADROOM of them for
# what a run needs (its request's descriptors, a pidfd, the next spare),
# or, when every descriptor serves a running command, the listener is not
# polled until one ends.
HEADROOM = 8
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def serves_again(argv: Sequence[str]) -> bool:
    """Whether the child of command line `argv` may serve again (see AGAIN)."""
    return bool(argv) and argv[0] in AGAIN


class Refused(ValueError):
    """A request the server does not run (the client then runs it itself)."""


@dataclass
class Connection:
    sock: socket.socket
    opened: float
    data: bytearray = field(default_factory=bytearray)  # appended to in place: a 16 MiB request is not quadratic
    fds: list[int] = field(default_factory=list)
    pid: int | None = None         # the command's child, once forked
    pidfd: int | None = None
    worker: Spare | None = None    # the command's child, if it may serve again: its control socket
    said: bytes = b""              # what that child has said on it so far
    signalled: bool = False        # a signal was forwarded to the command: its child ends after it
    stopper: bool = False          # a `stop` that waits for the end


@dataclass
class Orphan:
    """A command whose client went away: it is SIGKILLed at `deadline` if still running."""

    pid: int
    pidfd: int
    deadline: float


@dataclass(frozen=True)
class Native:
    """What a native client's request (`client.c`) must match to be run, as
    the server's starter had it: the launcher it ran (and that file's stat
    data), its environment that shapes Python (`served.shapes_python`), and
    the wrapping its interpreter gave the standard streams, which the
    client cannot say (it is not Python): (encoding, errors) of stdin,
    stdout and stderr, and whether they were buffered (not `-u`). `key`
    recomputes the server key for loom's code as it is on disk now (the
    runtime knows no compiler: the command layer hands it in)."""

    launcher: bytes
    stamp: tuple[int, int, int, int]
    origin: dict[bytes, bytes]
    streams: tuple[tuple[str, str], ...]
    buffered: bool
    key: Callable[[], str | None]

    @classmethod
    def of(cls, launcher: str | None, origin: str | None, key: Callable[[], str | None]) -> Native | None:
        """For a server started through `launcher` by a client whose
        environment was `origin` (JSON; None: this process's); None if none."""
        if launcher is None:
            return None
        try:
            st = os.stat(launcher)
            given = json.loads(origin) if origin is not None else {
                k: v for k, v in os.environ.items() if served.shapes_python(k)}
            env = {os.fsencode(k): os.fsencode(v) for k, v in given.items()}
        except (OSError, ValueError, TypeError, AttributeError):
            return None
        wrappers = [s for s in (sys.stdin, sys.stdout, sys.stderr)
                    if isinstance(s, io.TextIOWrapper) and isinstance(s.errors, str)]
        if len(wrappers) != 3:  # not what the interpreter made: what a client's makes cannot be told
            return None
        return cls(os.fsencode(launcher), _stamp(st), env, tuple((w.encoding, str(w.errors)) for w in wrappers),
                   not wrappers[1].write_through, key)

    def run_tokens(self, key: bytes, tokens: list[bytes], fds: list[int]) -> list[bytes]:
        """A native request's tokens (after the operation: the launcher, the
        umask, the open standard streams' numbers, then as `run`) as the
        `run` request the launcher's loom would have sent; `Refused` if it
        would not have come here or would have said something else."""
        try:
            launcher, umask, present, *rest = tokens
            numbers = [int(n) for n in present.split(b",")] if present else []
            jobs = int(rest[0])
            argc = int(rest[1 + jobs])
            envc = int(rest[2 + jobs + argc])
            env_items = rest[3 + jobs + argc:]
        except (ValueError, IndexError):
            raise Refused("malformed request") from None
        if launcher != self.launcher or numbers != sorted(set(numbers)) or not set(numbers) <= {0, 1, 2} \
                or len(fds) < 1 + len(numbers) or jobs < 0 or argc < 0 or envc != len(env_items):
            raise Refused("not a request this server can take")
        try:
            if _stamp(os.stat(self.launcher)) != self.stamp:
                raise Refused("the launcher changed")
        except OSError:
            raise Refused("the launcher is gone") from None
        if self.key() != key.decode():  # loom's code or llvmlite changed, or too recently to judge
            raise Refused("loom changed")
        env = dict(item.partition(b"=")[::2] for item in env_items)
        added = _coerced_locale(env, self.origin)
        if {k: v for k, v in env.items() if served.shapes_python(os.fsdecode(k))} != self.origin:
            raise Refused("another interpreter environment")
        streams: list[bytes] = []
        for n in range(3):
            if n not in numbers:
                streams += [b"", b"", b"", b""]
                continue
            encoding, errors = self.streams[n]
            line = self.buffered and (n == 2 or os.isatty(fds[1 + numbers.index(n)]))
            streams += [encoding.encode(), errors.encode(), b"1" if line else b"0", b"0" if self.buffered else b"1"]
        if added is not None:
            rest = [*rest[:2 + jobs + argc], str(envc + 1).encode(), *env_items, added]
        return [served.MAGIC, key, b"run", umask, *streams, *rest]


# Python's locale coercion (PEP 538): under the C locale it sets LC_CTYPE to the first of these it can use.
_COERCED = (b"C.UTF-8", b"C.utf8", b"UTF-8")


def _coerced_locale(env: dict[bytes, bytes], origin: dict[bytes, bytes]) -> bytes | None:
    """The `LC_CTYPE=...` item the launcher's interpreter would have added to
    `env` (and is added to it), as the starter's did; None if none."""
    if env.get(b"LC_ALL") or env.get(b"PYTHONCOERCECLOCALE") in (b"0", b"warn") or b"LC_CTYPE" in env:
        return None
    target = origin.get(b"LC_CTYPE", b"")
    if (env.get(b"LANG") or b"C") in (b"C", b"POSIX") and target in _COERCED:
        env[b"LC_CTYPE"] = target
        return b"LC_CTYPE=" + target
    return None


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


class Server:
    def __init__(self, place: str, key: str, describe: dict[str, Any], run: Callable[[list[str]], Any],
                 idle: float, lock: int, native: Native | None = None) -> None:
        self.place = place
        self.key = key
        self.describe = describe  # version, code_hash: what `status` says besides the counters
        self.run = run
        self.idle = idle
        self.lock = lock
        self.path = served.socket_path(place, key)
        self.native = native
        self.link = served.launcher_link(place, os.fsdecode(native.launcher)) if native is not None else None
        self.started = time.monotonic()
        self.requests = 0
        self.listener: socket.socket | None = None
        self.connections: dict[int, Connection] = {}   # by socket descriptor
        self.children: dict[int, Connection] = {}      # by pidfd
        self.orphans: dict[int, Orphan] = {}           # by pidfd
        self.spare: Spare | None = None               # the next request's child, forked ahead
        self.warm: dict[int, Spare] = {}               # children that served and wait again, by pidfd
        self.workers: dict[int, Connection] = {}       # running commands, by their child's control socket
        # As many warm children as commands can run at once (make -j as the CPUs): each holds
        # the template's pages it copied (about 20 MB).
        self.most_warm = most_warm()
        self.refill = False                            # fork a spare once nothing else waits
        self.stopping = False
        self.paused = False  # the listener is not polled: out of descriptors (`_accept`)
        self.last = time.monotonic()
        self.poller = select.poll()

    # ------------------------------------------------------------ life

    def listen(self) -> None:
        """Bind the socket (one a dead server left is removed: we hold the lock)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        try:
            sock.bind(self.path)
        finally:
            os.umask(old)
        sock.listen(128)
        sock.setblocking(False)
        self.listener = sock
        self.poller.register(sock, select.POLLIN)
        if self.link is not None:  # the native client's way in: this server now answers for the launcher
            temporary = f"{self.link}.{os.getpid()}"
            try:
                os.symlink(os.path.basename(self.path), temporary)
                os.replace(temporary, self.link)
            except OSError:
                self.link = None
        self._refill()

    def _unlink(self) -> None:
        """Remove the socket, and the launcher's link if it is still ours."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        if self.link is not None:
            try:
                if os.readlink(self.link) == os.path.basename(self.path):
                    os.unlink(self.link)
            except OSError:
                pass

    def serve(self) -> None:
        """Serve until stopped or idle; then clean up."""

        def stop_now(signum: int, frame: object) -> None:
            raise _Stop

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, stop_now)
        try:
            while not (self.stopping and not self.children):
                try:
                    events = self.poller.poll(0 if self.refill else self._timeout())
                    if not events and self.refill:
                        # Nothing waits (a child's end, a request): fork the next spare now. Forking
                        # the whole template costs milliseconds, and no reply waits for it.
                        self.refill = False
                        self._refill()
                        continue
                except _Stop:
                    self._stop()
                    continue
                for fd, _ in events:
                    self._ready(fd)
                self._tick()
        finally:
            self._cleanup()

    def _timeout(self) -> int:
        now = time.monotonic()
        deadlines = [o.deadline for o in self.orphans.values()]
        deadlines += [c.opened + REQUEST_TIMEOUT for c in self.connections.values() if c.pid is None and not c.stopper]
        if not self.connections and not self.children and not self.stopping:
            deadlines.append(self.last + self.idle)
        if not deadlines:
            return -1
        return max(0, int((min(deadlines) - now) * 1000) + 1)

    def _tick(self) -> None:
        now = time.monotonic()
        for orphan in self.orphans.values():
            if now >= orphan.deadline:
                _signal(orphan.pidfd, signal.SIGKILL)
                orphan.deadline = float("inf")
        for conn in list(self.connections.values()):
            if conn.pid is None and not conn.stopper and now >= conn.opened + REQUEST_TIMEOUT:
                self._drop(conn)
        if not self.connections and not self.children and now >= self.last + self.idle:
            self._stop()

    def _stop(self) -> None:
        """Accept nothing more; the loop ends once the running commands have."""
        self.stopping = True
        self._drop_spare()
        self._drop_warm()
        if self.listener is not None:
            self.poller.unregister(self.listener)
            self.listener.close()
            self.listener = None
            self._unlink()
        for conn in list(self.connections.values()):
            if conn.pid is None and not conn.stopper:
                self._refuse(conn)

    def _cleanup(self) -> None:
        self._drop_spare()
        self._drop_warm()
        if self.listener is not None:
            self.listener.close()
            self._unlink()
        for pidfd in list(self.children) + list(self.orphans):  # only on an error of the loop itself
            _signal(pidfd, signal.SIGKILL)
        try:
            os.unlink(served.lock_path(self.place, self.key))
        except FileNotFoundError:
            pass
        try:
            os.rmdir(self.place)
        except OSError:  # another loom build's server lives there too
            pass
        # The lock and the stoppers' connections close as the process ends.

    # ------------------------------------------------------------ events

    def _ready(self, fd: int) -> None:
        if self.listener is not None and fd == self.listener.fileno():
            self._accept()
        elif self.spare is not None and fd == self.spare.pidfd:  # the spare died (killed by someone)
            self._drop_spare()
        elif fd in self.children:
            self._ended(self.children.pop(fd))
        elif fd in self.workers:
            self._said(self.workers[fd])
        elif fd in self.warm:  # a warm child died (killed by someone)
            self.poller.unregister(fd)
            self._end_spare(self.warm.pop(fd))
        elif fd in self.orphans:
            orphan = self.orphans.pop(fd)
            self.poller.unregister(fd)
            _reap(orphan.pid)
            os.close(orphan.pidfd)
            self._resume()
        elif fd in self.connections:
            self._readable(self.connections[fd])

    def _accept(self) -> None:
        assert self.listener is not None
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            if e.errno in _OUT_OF_DESCRIPTORS:
                waiting = sorted((c for c in self.connections.values() if c.pid is None and not c.stopper),
                                 key=lambda c: c.opened)
                for conn in waiting[:HEADROOM]:  # the oldest ones still sending requests run their commands
                    self._refuse(conn)
                if not waiting:  # every descriptor serves a command: new clients wait in the backlog
                    self.poller.modify(self.listener, 0)
                    self.paused = True
            return
        cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        uid = int.from_bytes(cred[4:8], sys.byteorder)
        if uid != os.geteuid():  # only this user's commands; another's is closed unanswered
            sock.close()
            return
        sock.setblocking(False)
        self.last = time.monotonic()
        self.connections[sock.fileno()] = Connection(sock, self.last)
        self.poller.register(sock, select.POLLIN)

    def _readable(self, conn: Connection) -> None:
        try:
            data, fds, flags, _ = socket.recv_fds(conn.sock, 1 << 16, MAX_FDS)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds, flags = b"", [], 0
        if conn.pid is not None or conn.stopper:
            for fd in fds:  # nothing more is passed once the request is complete
                os.close(fd)
            if not data:
                self._gone(conn)
            else:
                conn.data += data
                self._signals(conn)
            return
        if conn.data and fds:  # descriptors come with the request's first bytes only
            for fd in fds:
                os.close(fd)
            fds = []
            flags |= socket.MSG_CTRUNC
        conn.fds += fds
        conn.data += data
        if not data or flags & socket.MSG_CTRUNC or len(conn.data) > 4 + served.MAX_REQUEST:
            self._drop(conn)
            return
        if len(conn.data) < 4:
            return
        size = int.from_bytes(conn.data[:4], "little")
        if size > served.MAX_REQUEST:
            self._drop(conn)
            return
        if len(conn.data) < 4 + size:
            return
        body, conn.data = bytes(conn.data[4:4 + size]), conn.data[4 + size:]
        try:
            self._request(conn, body.split(b"\0"))
        except Refused:
            self._refuse(conn)

    def _request(self, conn: Connection, tokens: list[bytes]) -> None:
        if len(tokens) >= 3 and tokens[:3] == [served.MAGIC, b"", b"native"] and self.native is not None \
                and not self.stopping:
            tokens = self.native.run_tokens(self.key.encode(), tokens[3:], conn.fds)
        if len(tokens) < 3 or tokens[0] != served.MAGIC or tokens[1] != self.key.encode():
            raise Refused("not a request for this server")
        op = tokens[2]
        if op == b"status":
            self._send(conn, self.status())
            self._drop(conn)
        elif op == b"stop":
            conn.stopper = True
            self._close_fds(conn)
            self._stop()
        elif op == b"run" and not self.stopping:
            request = parse_run(tokens[3:], conn.fds)
            self.last = time.monotonic()
            try:
                conn.worker, conn.pid, conn.pidfd = self._start(request, tokens, conn.fds)
            except OSError as e:
                raise Refused(f"cannot fork: {e}") from None
            finally:
                self._close_fds(conn)
            self.children[conn.pidfd] = conn
            self.poller.register(conn.pidfd, select.POLLIN)
            if conn.worker is not None:
                self.workers[conn.worker.control.fileno()] = conn
                self.poller.register(conn.worker.control, select.POLLIN)
            self.requests += 1
            conn.sock.sendall(served.frame(b"A", 0))
            self._signals(conn)
            self.refill = True
        else:
            raise Refused("unknown or untimely operation")

    def _start(self, request: Request, tokens: list[bytes], fds: list[int]) -> tuple[Spare | None, int, int]:
        """The child of `request` (the one that may serve again, its pid and
        pidfd): the child that served last, else the spare, handed the
        request as received; else a new fork."""
        while self.warm or self.spare is not None:
            spare: Spare | None = self.warm.popitem()[1] if self.warm else self.spare
            if spare is self.spare:
                self.spare = None
            assert spare is not None
            self.poller.unregister(spare.pidfd)
            try:
                served.send_request(spare.control, tokens, fds)
                return spare, spare.pid, spare.pidfd
            except OSError:  # it died meanwhile
                self._end_spare(spare)
        pid = fork_request(request, self.run)
        return None, pid, os.pidfd_open(pid)

    def _refill(self) -> None:
        """Fork the next request's child now, while nobody waits for it."""
        if self.spare is None and not self.stopping:
            try:
                self.spare = fork_spare(receive, self.run, serves_again)
            except OSError:  # out of processes or memory: the next request forks its own
                return
            self.poller.register(self.spare.pidfd, select.POLLIN)

    def _drop_spare(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None:
            self.poller.unregister(spare.pidfd)
            self._end_spare(spare)

    def _drop_warm(self) -> None:
        for pidfd in list(self.warm):
            self.poller.unregister(pidfd)
            self._end_spare(self.warm.pop(pidfd))

    @staticmethod
    def _end_spare(spare: Spare) -> None:
        spare.control.close()  # it ends on its own; SIGKILL spares it the wait
        _signal(spare.pidfd, signal.SIGKILL)
        _reap(spare.pid)
        os.close(spare.pidfd)

    def _signals(self, conn: Connection) -> None:
        """Forward the client's signal frames to its command."""
        while len(conn.data) >= served.FRAME:
            kind, value = conn.data[:1], int.from_bytes(conn.data[1:served.FRAME], "little", signed=True)
            conn.data = conn.data[served.FRAME:]
            if kind == b"S" and value in FORWARDED and conn.pidfd is not None:
                conn.signalled = True
                _signal(conn.pidfd, value)

    def _said(self, conn: Connection) -> None:
        """The command's child said something on its control socket: `X`
        code, the command ended with that code and the child waits for
        another request; the end of the stream, it ends instead (its pidfd
        then says how)."""
        worker = conn.worker
        assert worker is not None and conn.pidfd is not None
        conn.said, whole = hear(worker.control, conn.said)
        if not whole:
            return
        code = status_said(conn.said)
        if code is None:
            self._let_go(conn)
            _signal(worker.pidfd, signal.SIGKILL)  # it said something else: it serves nobody again
            return
        self._let_go(conn, close=False)
        self.children.pop(conn.pidfd)
        self.poller.unregister(conn.pidfd)
        conn.pidfd = None
        if conn.signalled or self.stopping or len(self.warm) >= self.most_warm:
            self._end_spare(worker)
        else:
            self.warm[worker.pidfd] = worker
            self.poller.register(worker.pidfd, select.POLLIN)
        self._reply(conn, served.frame(b"X", code))

    def _let_go(self, conn: Connection, close: bool = True) -> None:
        """Stop listening to the command's child's control socket; `close`
        it too: the child will not serve again."""
        worker, conn.worker = conn.worker, None
        if worker is not None:
            self.workers.pop(worker.control.fileno())
            self.poller.unregister(worker.control)
            if close:
                worker.control.close()

    def _ended(self, conn: Connection) -> None:
        """The command's child has ended: its status goes to the client."""
        assert conn.pid is not None and conn.pidfd is not None
        self._let_go(conn)
        self.poller.unregister(conn.pidfd)
        code = _reap(conn.pid)
        os.close(conn.pidfd)
        conn.pidfd = None
        self._reply(conn, served.frame(b"X", code) if code >= 0 else served.frame(b"K", -code))

    def _reply(self, conn: Connection, reply: bytes) -> None:
        """The command's end goes to its client."""
        try:
            conn.sock.setblocking(True)
            conn.sock.sendall(reply)
        except OSError:
            pass
        self._drop(conn)
        self.last = time.monotonic()

    def _gone(self, conn: Connection) -> None:
        """The client went away: its command is ended (see the module docstring)."""
        self._let_go(conn)
        if conn.pidfd is not None:
            self.children.pop(conn.pidfd, None)
            _signal(conn.pidfd, signal.SIGTERM)
            assert conn.pid is not None
            self.orphans[conn.pidfd] = Orphan(conn.pid, conn.pidfd, time.monotonic() + GRACE)
            conn.pidfd = None
        self._drop(conn)

    # ------------------------------------------------------------ replies

    def status(self) -> dict[str, Any]:
        return {"running": True, "pid": os.getpid(), **self.describe,
                "uptime_s": round(time.monotonic() - self.started, 3), "requests": self.requests,
                "socket": self.path}

    def _send(self, conn: Connection, document: dict[str, Any]) -> None:
        data = json.dumps(document, sort_keys=True).encode()
        try:
            conn.sock.setblocking(True)
            conn.sock.sendall(served.frame(b"J", len(data)) + data)
        except OSError:
            pass

    def _refuse(self, conn: Connection) -> None:
        try:
            conn.sock.send(served.frame(b"R", 0))
        except OSError:
            pass
        self._drop(conn)

    def _close_fds(self, conn: Connection) -> None:
        for fd in conn.fds:
            os.close(fd)
        conn.fds = []

    def _drop(self, conn: Connection) -> None:
        """Forget the connection (its command, if any, is tracked by its pidfd)."""
        self._close_fds(conn)
        if self.connections.pop(conn.sock.fileno(), None) is not None:
            self.poller.unregister(conn.sock)
        conn.sock.close()
        self._resume()

    def _resume(self) -> None:
        """Poll the listener again once descriptors may be free (see `_accept`)."""
        if self.paused and self.listener is not None:
            self.poller.modify(self.listener, select.POLLIN)
            self.paused = False


class _Stop(Exception):
    """SIGTERM, SIGINT or SIGHUP: stop as `loom server stop` would."""


def _signal(pidfd: int, signum: int) -> None:
    """Signal the child of `pidfd` (never another process, even if its pid was reused)."""
    try:
        signal.pidfd_send_signal(pidfd, signum)
    except OSError:  # it has ended already
        pass


def _reap(pid: int) -> int:
    """Reap the ended child: its exit code, or minus the signal that killed it."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return -signal.SIGKILL
    return os.waitstatus_to_exitcode(status)


# ---------------------------------------------------------------- requests


def parse_run(tokens: list[bytes], fds: list[int]) -> Request:
    """A `run` request's tokens (after the operation) and descriptors as a
    `Request` (see `served.serve`, which writes them); `Refused` if malformed."""
    rest = iter(tokens)

    def take(n: int) -> list[bytes]:
        return [next(rest) for _ in range(n)]

    def count() -> int:
        n = int(next(rest))
        if not 0 <= n <= len(tokens):
            raise ValueError(n)
        return n

    try:
        umask = int(next(rest))
        streams: list[Stream | None] = []
        for _ in range(3):
            encoding, errors, line, through = (t.decode("ascii") for t in take(4))
            streams.append(_stream(encoding, errors, line, through) if encoding else None)
        extra = [int(t) for t in take(count())]
        argv = tuple(os.fsdecode(t) for t in take(count()))
        env_items = take(count())
        if next(rest, None) is not None:
            raise ValueError("trailing tokens")
    except (StopIteration, ValueError, UnicodeError):
        raise Refused("malformed request") from None
    environ: dict[bytes, bytes] = {}
    for item in env_items:
        name, eq, value = item.partition(b"=")
        if eq and name:
            environ[name] = value
    numbers = [n for n, s in enumerate(streams) if s is not None] + extra
    if len(fds) != 1 + len(numbers) or len(set(numbers)) != len(numbers) or not 0 <= umask <= 0o777 \
            or any(not 3 <= n < MAX_FD_NUMBER for n in extra):
        raise Refused("the descriptors do not match the request")
    return Request(argv, environ, umask, fds[0], dict(zip(numbers, fds[1:])),
                   (streams[0], streams[1], streams[2]))


def run_tokens(request: Request) -> tuple[list[bytes], list[int]]:
    """`request` (its folder a descriptor) as a `run` request's tokens after
    the operation and its descriptors: what `parse_run` reads back. A closed
    stream's descriptor is not sent; the child has that number closed."""
    assert isinstance(request.cwd, int)
    tokens, fds = [str(request.umask).encode()], [request.cwd]
    for number, stream in enumerate(request.streams):
        if stream is None:
            tokens += [b"", b"", b"", b""]
            continue
        tokens += [stream.encoding.encode(), stream.errors.encode(), b"1" if stream.line_buffering else b"0",
                   b"1" if stream.write_through else b"0"]
        fds.append(request.fds[number])
    extra = sorted(n for n in request.fds if n > 2)
    env = [name + b"=" + value for name, value in request.environ.items()]
    tokens += [str(len(extra)).encode(), *(str(n).encode() for n in extra),
               str(len(request.argv)).encode(), *(os.fsencode(a) for a in request.argv), str(len(env)).encode(), *env]
    return tokens, fds + [request.fds[n] for n in extra]


def _stream(encoding: str, errors: str, line: str, through: str) -> Stream:
    """A standard stream's wrapping as a client's interpreter can have it: a
    text encoding and an error handler Python knows, flags 0 or 1; else the
    request is malformed (its child would fail to start)."""
    import codecs

    try:
        info = codecs.lookup(encoding)
        codecs.lookup_error(errors)
    except LookupError:
        raise ValueError("not a stream's wrapping") from None
    if not getattr(info, "_is_text_encoding", True) or line not in ("0", "1") or through not in ("0", "1"):
        raise ValueError("not a stream's wrapping")
    return Stream(encoding, errors, line == "1", through == "1")


def receive(control: socket.socket) -> Request:
    """In a spare: the request the server hands over (its tokens, framed as
    a client sends them, and its descriptors); the server letting go of the
    spare (the control socket closing) ends the process."""
    data, fds, _, _ = socket.recv_fds(control, 1 << 16, MAX_FDS)
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "little"):
        chunk = control.recv(1 << 20) if data else b""
        if not chunk:
            os._exit(0)
        data += chunk
    size = int.from_bytes(data[:4], "little")
    return parse_run(data[4:4 + size].split(b"\0")[3:], fds)


# ---------------------------------------------------------------- asking a server


def ask(place: str, key: str, op: bytes) -> tuple[socket.socket, dict[str, Any] | None] | None:
    """Send `op` ("status" or "stop") to the server of `key`: the connection
    and, for status, its answer; None if no server answers."""
    raw = served.connect(place, key)
    if raw is None:
        return None
    sock = socket.socket(fileno=raw.detach())  # type: ignore[attr-defined]
    try:
        served.send_request(sock, [served.MAGIC, key.encode(), op])
        if op != b"status":
            return sock, None
        reply = served.read_frame(sock)
        if reply is None or reply[0] != b"J":
            sock.close()
            return None
        data = b""
        while len(data) < reply[1]:
            chunk = sock.recv(reply[1] - len(data))
            if not chunk:
                break
            data += chunk
        sock.close()
        return sock, json.loads(data)
    except (OSError, ValueError):
        sock.close()
        return None
