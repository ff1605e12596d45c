"""Errors, exit codes and atomic output writing: the bottom layer every stage may use.

Exit codes (TOOLCHAIN.md section 5): 0 success; 1 the input failed to
compile (diagnostics, raised as `loomcli.diagnostics.CompileError`); 2 usage
error; 3 environment or infrastructure failure. This module imports nothing
from loom and nothing heavy, so any layer can raise these without pulling in
the command line.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

EXIT_OK, EXIT_COMPILE, EXIT_USAGE, EXIT_ENV = 0, 1, 2, 3


class LoomError(Exception):
    """A driver-level failure printed as `loom: error: ...`."""

    def __init__(self, message: str, exit_code: int = EXIT_ENV) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UsageError(LoomError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


EXIT_INTERRUPTED = 130


class Interrupted(LoomError):
    """Ctrl-C (or SIGTERM) once a command has cleaned up: `loom: error: interrupted`, exit 130."""

    def __init__(self) -> None:
        super().__init__("interrupted", EXIT_INTERRUPTED)


def atomic_write(path: str, data: bytes, mode: int | None = None, own: bool = False) -> None:
    """Write `data` to `path` so that it appears complete or not at all (an
    anonymous or temporary file in the same folder, then a link or a rename):
    a failure or a kill never leaves a partial or stale output.
    Special files are written in place and symlinks through to their target:
    see `write_outputs`, which also publishes several outputs all or nothing.
    `own`: a file only loom writes (its bookkeeping): whatever stands at
    `path` (a link, a FIFO) is replaced, never followed or written into."""
    write_outputs([(path, data)], mode=mode, own=own)


# ---------------------------------------------------------------- publishing outputs
#
# `write_outputs` publishes all of a command's outputs or none:
#   * every regular-file output is first written in full where nobody sees it,
#     then all are put in place, so a failure (or a kill) leaves neither a
#     partial file nor some outputs without the others. On Linux that is an
#     anonymous file (O_TMPFILE) in the destination's folder, linked to its
#     name when the name is free (one directory change per output, and a
#     killed loom leaves nothing behind), else linked under a temporary name
#     and renamed over the old file; elsewhere a named temporary file;
#   * character and block devices, FIFOs and sockets are written directly,
#     never replaced (`-o /dev/null` stays a device);
#   * a symlink is written through to its target, atomically, beside the target;
#   * an output that is one of the inputs, or two outputs that are one file,
#     is a usage error;
#   * an I/O error names the output path, never the temporary file.

STDOUT = "-"


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _io_error(e: OSError, path: str) -> OSError:
    """The same error, naming the output the user asked for."""
    return OSError(e.errno, e.strerror or str(e), path)


def _destination(path: str, own: bool = False) -> tuple[str, bool, bool]:
    """(where to write, whether to write it in place, whether it exists):
    symlinks resolve to their target; special files are written in place.
    `own` (loom's own files): the path itself, whatever stands there replaced."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path, False, False
    except OSError as e:
        raise _io_error(e, path) from None
    real = path
    if stat.S_ISLNK(st.st_mode) and not own:
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
        except FileNotFoundError:  # a dangling link: the file is made at its target
            return real, False, False
        except OSError as e:
            raise _io_error(e, path) from None
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", path)
    return real, not own and not stat.S_ISREG(st.st_mode), True


def write_outputs(outputs: Sequence[tuple[str, bytes]], inputs: Iterable[str] = (),
                  mode: int | None = None, own: bool = False, distinct: bool = False) -> None:
    """Publish every `(path, data)` of one command, all or nothing (see the
    module docstring). `-` is standard output. `inputs` are the files the
    command read; writing over one of them is a usage error. `own`: see
    `atomic_write`. `distinct`: the caller knows the outputs are distinct
    files and none is an input (`loom build`'s names, checked at load), so
    they are not compared. Ctrl-C and SIGTERM wait until the outputs are
    out (`interrupts_held`)."""
    with interrupts_held():
        _write_outputs(outputs, inputs, mode, own, distinct)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM off meanwhile (in the main thread, where
    Python runs signal handlers; elsewhere nothing changes), then deliver
    the first that came to the handler that was there: publishing a set of
    outputs is never cut in two by an interrupt."""
    import signal

    caught: list[int] = []
    wanted = (signal.SIGINT, signal.SIGTERM)
    try:
        old = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in wanted}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        if caught:
            signal.raise_signal(caught[0])


def _write_outputs(outputs: Sequence[tuple[str, bytes]], inputs: Iterable[str], mode: int | None, own: bool,
                   distinct: bool) -> None:
    seen: dict[tuple[int, int] | str, str] = {}
    for path in inputs:
        if path != STDOUT:
            seen[_identity(path) or os.path.realpath(path)] = path
    plan: list[tuple[str, str, bool, bool, bytes]] = []  # (path, destination, in place, exists, data)
    outs: set[tuple[int, int] | str] = set()
    # One output and no inputs can clash with nothing: no identity to compute
    # (a realpath per new file, which a build of many outputs felt).
    alone = distinct or (len(outputs) == 1 and not seen)
    for path, data in outputs:
        if path == STDOUT:
            plan.append((path, path, True, True, data))
            continue
        real, direct, exists = _destination(path, own)
        if not alone:
            key = _identity(real) or os.path.realpath(real)
            if key in seen and key not in outs:
                raise UsageError(f"output {path} is also an input")
            if key in outs:
                raise UsageError(f"output {path} is written twice")
            outs.add(key)
            seen[key] = path
        plan.append((path, real, direct, exists, data))
    staged: list[_Staged] = []
    links = _Links()
    try:
        for path, real, direct, exists, data in plan:
            if not direct:
                staged.append(_stage(path, real, exists, data, mode, links))
        for path, real, direct, _, data in plan:
            if direct:
                _write_direct(path, real, data)
        for output in staged:
            output.publish(links)
    finally:
        for output in staged:
            output.discard()
        links.close()


class _Links:
    """`/proc/self/fd`, opened once per `write_outputs`: an anonymous file
    (O_TMPFILE) is given its name by linking it from there. None where the
    system has no O_TMPFILE or no /proc: outputs are then staged as named
    temporary files."""

    def __init__(self) -> None:
        self.proc: int | None = None
        self.opened = False

    def folder(self) -> int | None:
        if not self.opened:
            self.opened = True
            if hasattr(os, "O_TMPFILE"):
                try:
                    self.proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError:
                    pass
        return self.proc

    def close(self) -> None:
        if self.proc is not None:
            os.close(self.proc)
            self.proc = None


class _Staged:
    """One output written in full but not yet visible at its path. It is an
    anonymous file (`fd`) where the system has them: one that a failed or
    killed loom leaves nowhere, and that a single link publishes when the
    path is free. Elsewhere, or when the path exists and must be replaced
    by a rename, it is (also) a named temporary file beside the destination."""

    __slots__ = ("exists", "fd", "real", "shown", "tmp")

    def __init__(self, shown: str, real: str, exists: bool) -> None:
        self.shown = shown
        self.real = real
        self.exists = exists
        self.fd = -1
        self.tmp: str | None = None

    def publish(self, links: _Links) -> None:
        try:
            if self.fd >= 0:
                proc = links.folder()
                assert proc is not None
                if not self.exists:
                    try:
                        os.link(str(self.fd), self.real, src_dir_fd=proc, follow_symlinks=True)
                        return
                    except FileExistsError:  # it appeared meanwhile: replace it like any other
                        pass
                self.tmp = _temp_file(os.path.dirname(os.path.abspath(self.real)),
                                      lambda tmp: os.link(str(self.fd), tmp, src_dir_fd=proc, follow_symlinks=True))[0]
            assert self.tmp is not None
            os.replace(self.tmp, self.real)
            self.tmp = None
        except OSError as e:
            raise _io_error(e, self.shown) from None

    def discard(self) -> None:
        """Close the anonymous file and remove a temporary name left unpublished."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None


_T = TypeVar("_T")


def _temp_file(folder: str, create: Callable[[str], _T]) -> tuple[str, _T]:
    """`create` a new `.loom-*.tmp` beside an output, under a random name
    (another while one is taken)."""
    for _ in range(100):
        tmp = os.path.join(folder, f".loom-{os.urandom(6).hex()}.tmp")
        try:
            return tmp, create(tmp)
        except FileExistsError:
            continue
    raise FileExistsError(17, "no free temporary name", folder)


def _stage(path: str, real: str, exists: bool, data: bytes, mode: int | None, links: _Links) -> _Staged:
    """Write `data` where nobody sees it yet (see `_Staged`). Created 0o666,
    the umask applies as for any new file; `mode` is set exactly."""
    folder = os.path.dirname(os.path.abspath(real))
    output = _Staged(path, real, exists)
    try:
        if links.folder() is not None:
            try:
                output.fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666)
            except OSError:  # a file system without anonymous files: a named one (or its error) below
                pass
        if output.fd < 0:
            output.tmp, fd = _temp_file(
                folder, lambda tmp: os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
        else:
            fd = output.fd
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if mode is not None:
                os.fchmod(fd, mode)
        finally:
            if fd != output.fd:
                os.close(fd)
    except BaseException as e:
        output.discard()
        if isinstance(e, OSError):
            raise _io_error(e, path) from None
        raise
    return output


def _write_direct(path: str, real: str, data: bytes) -> None:
    if real == STDOUT:
        stream = getattr(sys.stdout, "buffer", None)
        if stream is None:
            raise LoomError("standard output is closed", EXIT_ENV)
        try:
            stream.write(data)
            stream.flush()
        except (ValueError, AttributeError):  # closed after start-up
            raise LoomError("standard output is closed", EXIT_ENV) from None
        return
    try:
        with open(real, "wb") as f:
            f.write(data)
    except OSError as e:
        raise _io_error(e, path) from None
