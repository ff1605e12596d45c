"""GNU make jobserver client (TOOLCHAIN.md section 6).

Under `make -jN`, `MAKEFLAGS` advertises a token pool: `--jobserver-auth=R,W`
(or the older `--jobserver-fds=R,W`), two inherited pipe descriptors, or
`--jobserver-auth=fifo:PATH`, a named pipe. Every process holds one implicit
slot; each further concurrent job needs a one-byte token read from the pool
and written back when the job ends.

The inherited pipe description is shared with make and every sibling, so we
never set `O_NONBLOCK` on it (that would break make's own blocking reads).
Instead we open `/proc/self/fd/R` (Linux), which gives this process its own
description of the same pipe, and make that one non-blocking; a FIFO is
opened by path, also as our own description. Reads then never block while
holding a lock, and several coordinator threads can wait on one pool.

`TokenGate` is what the pool uses: the implicit slot first, then tokens;
`release` puts back exactly what `acquire` handed out, on every path.

Without an inherited jobserver, a parallel loom is the server
(`JobserverServer`): `-j N` makes a pool of N-1 tokens, a FIFO in a private
0700 temporary folder (or, `--jobserver-style pipe`, an inherited pipe for
clients older than GNU make 4.4), advertised in `MAKEFLAGS` to the
processes loom starts and used by loom's own gate like make's. At exit
every token must be back (the audit) and the FIFO and its folder go.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# Reading MAKEFLAGS lives with the light start-up code that needs it first; it is the jobserver's business too.
from loomcli.runtime.spawn import MakeFlags as MakeFlags
from loomcli.runtime.spawn import inherited_fds as inherited_fds
from loomcli.runtime.spawn import parse_makeflags as parse_makeflags


@dataclass(frozen=True)
class Slot:
    """Leave to run one task: the implicit slot, a local one (no jobserver), or a token."""

    token: bytes | None = None
    implicit: bool = False


IMPLICIT = Slot(implicit=True)  # the slot every process owns without a token
LOCAL = Slot()


class JobserverError(Exception):
    """The advertised jobserver cannot be used (the warning says why)."""


def _check_pipe(fd: int, shown: str, mode: str) -> os.stat_result:
    """The stat of `fd` if it is a FIFO or pipe open for `mode` ("r" or "w");
    else JobserverError. Nothing else is ever read as tokens or written to."""
    try:
        st = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except (OSError, OverflowError):
        raise JobserverError(f"{shown} is not open") from None
    if not stat.S_ISFIFO(st.st_mode):
        raise JobserverError(f"{shown} is not a pipe or FIFO")
    if flags not in ((os.O_RDONLY, os.O_RDWR) if mode == "r" else (os.O_WRONLY, os.O_RDWR)):
        raise JobserverError(f"{shown} is not open for {'reading' if mode == 'r' else 'writing'}")
    return st


class Jobserver:
    """A connection to make's token pool, through descriptions of our own.

    Only a FIFO or a pipe is accepted, checked with fstat after opening: a
    regular file named by `fifo:PATH` would have its bytes taken as tokens
    and written back out of order (loom modified the file), `/dev/null`
    ended the build, `/dev/zero` gave unlimited tokens. The two ends must be
    one pipe (the same inode), descriptors 0-2 are never the jobserver (they
    echoed stdin to stdout), a FIFO path is opened without following a
    symlink (one planted at make's predictable name), and an inherited
    description is never made non-blocking."""

    def __init__(self, auth: str) -> None:
        self.auth = auth
        self.read_fd = -1
        self.write_fd = -1
        self._own_write = False
        try:
            self._connect(auth)
        except BaseException:
            self.close()
            raise

    def _connect(self, auth: str) -> None:
        if auth.startswith("fifo:"):
            path = auth[5:]
            if not path:
                raise JobserverError("--jobserver-auth=fifo: names no FIFO")
            flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                self.read_fd = os.open(path, os.O_RDONLY | flags)
            except OSError as e:
                raise JobserverError(f"cannot open the jobserver FIFO {path}: {e.strerror}") from None
            st = _check_pipe(self.read_fd, path, "r")
            try:
                # Our own description, and we hold the read end: never blocks (no ENXIO).
                self.write_fd = os.open(path, os.O_WRONLY | flags)
            except OSError as e:
                raise JobserverError(f"cannot open the jobserver FIFO {path}: {e.strerror}") from None
            self._own_write = True
            other = _check_pipe(self.write_fd, path, "w")
            if (other.st_dev, other.st_ino) != (st.st_dev, st.st_ino):
                raise JobserverError(f"the jobserver FIFO {path} changed while it was opened")
            return
        try:
            r, w = (int(x) for x in auth.split(","))
        except ValueError:
            raise JobserverError(f"cannot read --jobserver-auth={auth}") from None
        if r < 0 or w < 0:
            raise JobserverError(f"make passed no jobserver descriptors ({auth})")
        if r <= 2 or w <= 2:
            raise JobserverError(f"--jobserver-auth={auth} names standard input, output or error")
        read_st = _check_pipe(r, f"jobserver descriptor {r}", "r")
        write_st = _check_pipe(w, f"jobserver descriptor {w}", "w")
        if (read_st.st_dev, read_st.st_ino) != (write_st.st_dev, write_st.st_ino):
            raise JobserverError(f"jobserver descriptors {r} and {w} are not the two ends of one pipe")
        try:
            # Our own open file description of make's pipe: O_NONBLOCK on it
            # changes nothing for make or the other jobs.
            self.read_fd = os.open(f"/proc/self/fd/{r}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise JobserverError(f"cannot reopen jobserver descriptor {r}: {e.strerror}") from None
        own = os.fstat(self.read_fd)
        if (own.st_dev, own.st_ino) != (read_st.st_dev, read_st.st_ino):
            raise JobserverError(f"jobserver descriptor {r} changed while it was reopened")
        self.write_fd = w

    def try_take(self) -> bytes | None:
        """One token if one is free now, else None. JobserverError: the pool
        is gone (end of file, a descriptor closed meanwhile)."""
        try:
            data = os.read(self.read_fd, 1)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as e:
            raise JobserverError(f"the jobserver cannot be read ({e.strerror})") from None
        if not data:
            raise JobserverError("the jobserver pipe was closed")
        return data

    def put(self, token: bytes) -> None:
        """Give a token back. JobserverError: it cannot be (make went away)."""
        while True:
            try:
                os.write(self.write_fd, token)
                return
            except InterruptedError:
                continue
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    select.select([], [self.write_fd], [])
                    continue
                raise JobserverError(f"a token cannot be given back ({e.strerror})") from None

    def close(self) -> None:
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        if self._own_write and self.write_fd >= 0:
            os.close(self.write_fd)
        self.write_fd = -1


def connect(environ: Mapping[str, str] | None = None) -> tuple[Jobserver | None, str | None, bool]:
    """(jobserver or None, a warning to print or None, dry run) from `MAKEFLAGS`.
    An unusable jobserver means serial work and a warning that says what to
    do with the build tool, said by the first loom command of a make run
    only (`first_of_make_run`): make runs many, and each would say it."""
    from loomcli import settings

    env = os.environ if environ is None else environ
    flags = parse_makeflags(settings.makeflags(environ))
    if flags.auth is None:
        return None, None, flags.dry_run
    try:
        return Jobserver(flags.auth), None, flags.dry_run
    except JobserverError as e:
        if not first_of_make_run(env):
            return None, None, flags.dry_run
        return None, unusable_warning(str(e), env.get("LOOM_BUILD_TOOL", "")), flags.dry_run


def unusable_warning(why: str, build_tool: str) -> str:
    """What to tell the user about make's jobserver they cannot use here.
    `LOOM_BUILD_TOOL` is set by loom's CMake package where CMake cannot mark
    its custom commands for the jobserver (before 3.28, Unix Makefiles): the
    user can do nothing there, and loses nothing but loom's own parallelism
    within one command."""
    if build_tool:
        return (f"make's jobserver does not reach loom's commands under {build_tool} ({why}); harmless, "
                "nothing to do: each command runs serially while make runs several at once "
                "(CMake 3.28 or newer shares the jobserver). Said once per build.")
    return (f"jobserver unusable, building serially: {why}. Mark the make recipe that runs loom with '+' "
            "(or run it through $(MAKE)) to share make's job slots. Said once per make run.")


def make_run(proc: str = "/proc") -> str | None:
    """`<pid>-<start time>` of the outermost `make` this process runs under
    (a CMake build is a make running sub-makes), None where there is none or
    no /proc to see it. A pid with its start time names one process for
    the life of the machine."""
    found, pid = None, os.getppid()
    for _ in range(64):  # a deeper tree is not a build
        if pid <= 1:
            break
        try:
            with open(f"{proc}/{pid}/stat", "rb") as f:
                line = f.read().decode("utf-8", "replace")
        except OSError:
            break
        comm, rest = line[line.find("(") + 1:line.rfind(")")], line[line.rfind(")") + 2:].split()
        if len(rest) < 20:
            break
        if comm in ("make", "gmake"):
            found = f"{pid}-{rest[19]}"
        pid = int(rest[1])
    return found


def first_of_make_run(environ: Mapping[str, str]) -> bool:
    """Whether this is the first loom of its make run to ask (a marker file
    made with O_EXCL in this user's private runtime folder). True when the
    run or the folder cannot be known: a warning twice beats none."""
    run = make_run()
    if run is None:
        return True
    from loomcli.runtime import served

    parent = served.folder(environ)
    place = os.path.join(parent, "make-runs")
    try:
        for folder in (parent, place):
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass
        if not (served.private(parent) and served.private(place)):
            return True
        fd = os.open(os.path.join(place, run), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    except OSError:
        return True
    os.close(fd)
    _forget_ended_runs(place, run)
    return True


def _forget_ended_runs(place: str, current: str) -> None:
    """Remove the markers of make runs that have ended (their pid is gone or is another process now)."""
    for name in os.listdir(place):
        if name == current:
            continue
        pid, _, start = name.partition("-")
        try:
            with open(f"/proc/{int(pid)}/stat", "rb") as f:
                line = f.read().decode("utf-8", "replace")
            alive = line[line.rfind(")") + 2:].split()[19] == start
        except (OSError, ValueError, IndexError):
            alive = False
        if not alive:
            try:
                os.unlink(os.path.join(place, name))
            except OSError:
                pass


JOBSERVER_STYLES = ("fifo", "pipe")
TOKEN = b"+"  # what GNU make writes; clients hand back whatever byte they took


class JobserverServer:
    """Our own token pool of `tokens` tokens (see the module docstring).

    `makeflags` is the MAKEFLAGS value that advertises it; `client()` is a
    `Jobserver` on it for loom's own gate; `close()` audits and removes it
    and returns how many tokens were missing (0: all back)."""

    def __init__(self, jobs: int, style: str = "fifo") -> None:
        if style not in JOBSERVER_STYLES:
            raise ValueError(f"unknown jobserver style {style!r}")
        self.tokens = max(0, jobs - 1)
        self.style = style
        self.folder: str | None = None
        self._fds: list[int] = []
        self._reader = -1     # a non-blocking description of our own, for the audit
        if style == "fifo":
            self.folder = tempfile.mkdtemp(prefix="loom-jobserver-")  # 0700: only this user reaches the FIFO
            path = os.path.join(self.folder, "fifo")
            os.mkfifo(path, 0o600)
            # Held open for reading and writing for the server's lifetime, so a
            # client never sees end-of-file or ENXIO between its opens.
            self._reader = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            self._fds.append(self._reader)
            writer = self._reader
            self.auth = f"fifo:{path}"
            self.makeflags = f"-j{jobs} --jobserver-auth={self.auth}"
        else:
            r, w = os.pipe()
            os.set_inheritable(r, True)
            os.set_inheritable(w, True)
            self._fds += [r, w]
            self._reader = os.open(f"/proc/self/fd/{r}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self._fds.append(self._reader)
            writer = w
            self.auth = f"{r},{w}"
            # make 4.2+ reads --jobserver-auth, older ones --jobserver-fds.
            self.makeflags = f"-j{jobs} --jobserver-fds={self.auth} --jobserver-auth={self.auth}"
        os.write(writer, TOKEN * self.tokens)

    def client(self) -> Jobserver:
        return Jobserver(self.auth)

    def environ(self, base: dict[str, str]) -> dict[str, str]:
        """`base` with MAKEFLAGS advertising this pool (other make flags kept)."""
        env = dict(base)
        flags, sep, assignments = env.get("MAKEFLAGS", "").partition(" -- ")
        words = [w for w in flags.split() if not w.startswith(("--jobserver-auth=", "--jobserver-fds=", "-j"))]
        env["MAKEFLAGS"] = " ".join([*words, self.makeflags]) + (sep + assignments if sep else "")
        return env

    def close(self) -> int:
        """Take every token back, remove the pool; the number of tokens missing."""
        back = 0
        if self._reader >= 0:
            while True:
                try:
                    data = os.read(self._reader, 4096)
                except (BlockingIOError, InterruptedError):
                    break
                if not data:
                    break
                back += len(data)
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []
        self._reader = -1
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        return max(0, self.tokens - back)


class TokenGate:
    """Bounds running tasks: the implicit slot, then one jobserver token each.

    Without a jobserver the gate admits `limit` at once. `acquire` blocks
    until a slot is free or `cancel()` was called (then it returns None);
    `release` returns exactly what `acquire` gave. Safe for many threads.
    A jobserver that breaks meanwhile (make closed the pipe, a descriptor
    went bad) is one warning (`warn`) and the rest of the work is serial:
    the implicit slot only, never an error.
    """

    def __init__(self, jobserver: Jobserver | None, limit: int,
                 warn: Callable[[str], None] | None = None) -> None:
        self.jobserver = jobserver
        self.limit = max(1, limit)
        self._warn = warn
        self._broken = False      # the jobserver failed: no more tokens from it
        self._lock = threading.Lock()
        self._held = 0            # slots held, the implicit one included
        self._implicit_free = True
        self._cancelled = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.tokens_taken = 0     # tokens read from make in total (for tests and traces)

    def acquire(self) -> Slot | None:
        while True:
            with self._lock:
                if self._cancelled:
                    return None
                room = self._held < self.limit
                if room:
                    if self._implicit_free:
                        self._implicit_free = False
                        self._held += 1
                        return IMPLICIT
                    if self.jobserver is None:
                        self._held += 1
                        return LOCAL
                    token = self._take()
                    if token is not None:
                        self._held += 1
                        self.tokens_taken += 1
                        return Slot(token)
                polling = room and self.jobserver is not None and not self._broken
            # Wait for a released slot, or (with room under the limit) for a token.
            fds = [self._wake_r] + ([self.jobserver.read_fd] if polling and self.jobserver is not None else [])
            select.select(fds, [], [])
            self._drain_wake()

    def release(self, slot: Slot | None) -> None:
        if slot is None:
            return
        with self._lock:
            self._held -= 1
            if slot.implicit:
                self._implicit_free = True
            elif slot.token is not None and self.jobserver is not None and not self._broken:
                try:
                    self.jobserver.put(slot.token)
                except JobserverError as e:
                    self._break(e)
        self._wake()

    def _take(self) -> bytes | None:
        """A token, or None (none free, or the jobserver broke); under the lock."""
        if self._broken or self.jobserver is None:
            return None
        try:
            return self.jobserver.try_take()
        except JobserverError as e:
            self._break(e)
            return None

    def _break(self, e: JobserverError) -> None:
        self._broken = True
        if self._warn is not None:
            self._warn(f"jobserver unusable, building the rest serially: {e}")

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"w")
        except BlockingIOError:
            pass

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 64):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1
