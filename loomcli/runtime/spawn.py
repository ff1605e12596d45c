"""Starting loom's child processes, light enough to run first thing.

A `loom build` that its no-op check did not answer almost always compiles,
and its pool's fork server (`loomcli.runtime.forkserver`) needs about 0.25 s
to warm up. `prestart` starts that server before click, the project or any
compiler module is imported, with nothing but `os`, `sys` and `_socket`:
through `subprocess` and the fork server's module it would first spend
about 60 ms importing, time in which the other core stays idle and after
which the whole warm-up comes. The pool adopts it (`forkserver.adopt`
calls `take`); a build with nothing to compile kills it at exit. Every
fork server, prestarted or started by a pool, comes from `start_server`.

Also here, because `prestart` needs them and they import nothing heavy:
what `MAKEFLAGS` says (`parse_makeflags`), the pipe descriptors of the
jobserver it advertises that a child must inherit (`inherited_fds`), and a
child's environment (`child_env`).
"""

from __future__ import annotations

import _thread
import os
import stat
import sys

TYPE_CHECKING = False  # collections.abc would cost the resident server's client more than its whole work
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


class MakeFlags:
    """What `MAKEFLAGS` says about the jobserver and dry runs."""

    __slots__ = ("auth", "dry_run")

    def __init__(self, auth: str | None, dry_run: bool) -> None:
        self.auth = auth          # "R,W" or "fifo:PATH"; the last one given
        self.dry_run = dry_run    # make -n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MakeFlags) and (self.auth, self.dry_run) == (other.auth, other.dry_run)

    def __repr__(self) -> str:
        return f"MakeFlags(auth={self.auth!r}, dry_run={self.dry_run!r})"


def parse_makeflags(value: str | None) -> MakeFlags:
    """What `MAKEFLAGS` says about the jobserver and dry runs."""
    auth = None
    dry_run = False
    words = (value or "").split()
    for i, word in enumerate(words):
        if word == "--":  # variable assignments follow
            break
        if word.startswith("--jobserver-auth=") or word.startswith("--jobserver-fds="):
            auth = word.partition("=")[2]
        elif word.startswith("-") and not word.startswith("--"):
            if "n" in word[1:] and not any(c.isdigit() for c in word[1:]) and "=" not in word:
                dry_run = True
        elif i == 0 and "=" not in word:  # GNU make's leading word of one-letter flags, e.g. "ks" or "n"
            dry_run = dry_run or "n" in word
    return MakeFlags(auth, dry_run)


def inherited_fds(environ: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """The pipe descriptors MAKEFLAGS advertises that are open here: a
    child process must inherit them to use the jobserver it is told about."""
    from loomcli import settings

    auth = parse_makeflags(settings.makeflags(environ)).auth
    if auth is None or auth.startswith("fifo:"):
        return ()
    fds = []
    for part in auth.split(","):
        try:
            fd = int(part)
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                fds.append(fd)
        except (ValueError, OSError, OverflowError):  # not a number, not open, past any descriptor
            continue
    return tuple(fds)


def child_env() -> dict[str, str]:
    """The environment of a worker child: ours, with this loomcli first on PYTHONPATH."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# ---------------------------------------------------------------- the fork server, started first


class SpawnedProcess:
    """The part of `subprocess.Popen` that `ForkServer` and
    `isolated.end_process` use, for a process `os.posix_spawn` started."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._lock = _thread.allocate_lock()  # one waitpid at a time: a status is read once

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped by someone else: its status is lost
                    self.returncode = -9
                else:
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            from loomcli.runtime.isolated import await_exit

            await_exit(self.pid, timeout)  # without the lock: `poll` never blocks
            if self.poll() is None:
                import subprocess

                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:  # not reaped: the pid is still this child's
            os.kill(self.pid, 9)     # SIGKILL (`signal` would cost an import here)


class Started:
    """A fork server `start_server` started: its process, the coordinator's
    end of its socket, its stderr file, and the modules it preloads."""

    def __init__(self, process: SpawnedProcess, sock: int, stderr: int, preload: tuple[str, ...]) -> None:
        self.process = process
        self.sock = sock
        self.stderr = stderr
        self.preload = preload

    def discard(self) -> None:
        """Kill it and close our descriptors (the kernel reaps it once loom has exited)."""
        self.process.kill()
        for fd in (self.sock, self.stderr):
            os.close(fd)


def start_server(preload: Sequence[str]) -> Started:
    """Start `python -m loomcli.runtime.forkserver FD BOUND MODULE...` (Linux):
    its stdin and stdout /dev/null, its stderr an unnamed file, every
    inherited descriptor closed but the jobserver pipe MAKEFLAGS names
    (posix_spawn has no close_fds; our own are close-on-exec already).
    Bound to our life (PR_SET_PDEATHSIG) when started from the main
    thread: a pool's slot thread ends before its pool closes the server.
    In a warm template's child (`forks_warm`) that has no other thread yet,
    the server is a fork of this process instead: warm at once."""
    if _warm and _single_threaded():
        return _fork_server(preload)
    import _socket

    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    opened: list[int] = []
    try:
        from loomcli import settings

        stderr = _unnamed_file(settings.tmpdir())
        opened.append(stderr)
        devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        opened.append(devnull)
        env = child_env()
        fd = theirs.fileno()
        keep = {fd, *inherited_fds(env)}
        os.set_inheritable(fd, True)
        actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1),
                                          (os.POSIX_SPAWN_DUP2, stderr, 2)]
        actions += [(os.POSIX_SPAWN_CLOSE, other) for other in _inheritable_fds() if other not in keep]
        threading = sys.modules.get("threading")  # never imported: this is the only thread
        bound = threading is None or threading.current_thread() is threading.main_thread()
        pid = os.posix_spawn(sys.executable,
                             [sys.executable, "-m", "loomcli.runtime.forkserver", str(fd), "1" if bound else "0",
                              *preload], env, file_actions=actions)
    except BaseException:
        ours.close()
        for fd in opened:
            os.close(fd)
        raise
    finally:
        theirs.close()
    os.close(devnull)
    return Started(SpawnedProcess(pid), ours.detach(), stderr, tuple(preload))


_started: list[Started] = []  # at most one, until a pool takes it or the process exits
_warm: list[bool] = []  # set once in a warm template's child (`forks_warm`)


def forks_warm() -> None:
    """Mark this process as a child of a warm template
    (`loomcli.runtime.template`): everything a fork server preloads is
    imported here already, so `start_server` forks one from this process."""
    if not _warm:
        _warm.append(True)


def _single_threaded() -> bool:
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


def _fork_server(preload: Sequence[str]) -> Started:
    """A fork server forked from this warm process: what `start_server`
    would start, minus the interpreter's start and the imports. The child
    gets the same descriptors a started one would, the default SIGTERM and
    SIGHUP (a session's handlers are this process's), and serves its socket
    until it closes (`loomcli.runtime.forkserver.serve_forks`)."""
    import _socket
    import signal

    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    opened: list[int] = []
    try:
        from loomcli import settings

        stderr = _unnamed_file(settings.tmpdir())
        opened.append(stderr)
        devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        opened.append(devnull)
        fd = theirs.fileno()
        keep = {0, 1, 2, fd, *inherited_fds()}
        for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        pid = os.fork()
        if pid == 0:
            try:
                for target, source in ((0, devnull), (1, devnull), (2, stderr)):
                    os.dup2(source, target)
                close_all_but(keep)
                for sig in (signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                from loomcli.runtime.forkserver import serve_forks

                serve_forks(fd, True, preload)
            finally:
                os._exit(70)
    except BaseException:
        ours.close()
        for opened_fd in opened:
            os.close(opened_fd)
        raise
    finally:
        theirs.close()
    os.close(devnull)
    return Started(SpawnedProcess(pid), ours.detach(), stderr, tuple(preload))


def close_all_but(keep: set[int]) -> None:
    """Close every descriptor of this process but those in `keep`."""
    try:
        limit = os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        limit = 65536
    low = 0
    for fd in sorted(keep):
        if low < fd:  # os.closerange(0, 0) would close everything (close_range(0, -1))
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(low + 1, limit))


def prestart(preload: Sequence[str]) -> None:
    """Start a fork server preloading `preload` now (see the module
    docstring). Linux only; where that fails, the pool starts its server
    itself, as it would anyway."""
    if _started or not sys.platform.startswith("linux"):
        return
    try:
        _started.append(start_server(preload))
    except Exception:  # an optimisation only: the pool starts its own server, or says what is wrong
        return
    import atexit

    atexit.register(_discard)


def take(preload: Sequence[str]) -> Started | None:
    """The prestarted server, if there is one that imports at least `preload`
    (handed out once)."""
    if _started and set(preload) <= set(_started[0].preload):
        return _started.pop()
    return None


def _discard() -> None:
    while _started:
        _started.pop().discard()


def _unnamed_file(folder: str) -> int:
    """A read-write file in `folder` that no name reaches: an O_TMPFILE, else
    a new file removed at once (file systems without anonymous files)."""
    try:
        return os.open(folder, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError:
        path = os.path.join(folder, f".loom-{os.urandom(6).hex()}.stderr")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.unlink(path)
        return fd


def _inheritable_fds() -> list[int]:
    """Descriptors above 2 that a child would inherit."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    fds = []
    for name in names:
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                fds.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return fds
