"""Errors, exit codes and atomic output writing: the bottom layer every stage may use.

Exit codes (TOOLCHAIN.md section 5): 0 success; 1 the input failed to
compile (diagnostics, raised as `loomcli.diagnostics.CompileError`); 2 usage
error; 3 environment or infrastructure failure. This module imports nothing
from loom and nothing heavy, so any layer can raise these without pulling in
the command line.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Sequence

EXIT_OK, EXIT_COMPILE, EXIT_USAGE, EXIT_ENV = 0, 1, 2, 3


class LoomError(Exception):
    """A driver-level failure printed as `loom: error: ...`."""

    def __init__(self, message: str, exit_code: int = EXIT_ENV) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UsageError(LoomError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


def atomic_write(path: str, data: bytes, mode: int | None = None) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a
    rename, so a failure or a kill never leaves a partial or stale output.
    Special files are written in place and symlinks through to their target:
    see `write_outputs`, which also publishes several outputs all or nothing."""
    write_outputs([(path, data)], mode=mode)


# ---------------------------------------------------------------- publishing outputs
#
# `write_outputs` publishes all of a command's outputs or none:
#   * every regular-file output is first staged as a temporary file beside its
#     destination, then all are renamed into place, so a failure (or a kill)
#     leaves neither a partial file nor some outputs without the others;
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


def _destination(path: str) -> tuple[str, bool]:
    """(where to write, whether to write it in place): symlinks resolve to
    their target; special files are written in place."""
    real = os.path.realpath(path) if os.path.islink(path) else path
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real, False
    except OSError as e:
        raise _io_error(e, path) from None
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "Is a directory", path)
    return real, not stat.S_ISREG(mode)


def write_outputs(outputs: Sequence[tuple[str, bytes]], inputs: Iterable[str] = (),
                  mode: int | None = None) -> None:
    """Publish every `(path, data)` of one command, all or nothing (see the
    module docstring). `-` is standard output. `inputs` are the files the
    command read; writing over one of them is a usage error."""
    seen: dict[tuple[int, int] | str, str] = {}
    for path in inputs:
        if path != STDOUT:
            seen[_identity(path) or os.path.realpath(path)] = path
    plan: list[tuple[str, str, bool, bytes]] = []
    outs: set[tuple[int, int] | str] = set()
    # One output and no inputs can clash with nothing: no identity to compute
    # (a realpath per new file, which a build of many outputs felt).
    alone = len(outputs) == 1 and not seen
    for path, data in outputs:
        if path == STDOUT:
            plan.append((path, path, True, data))
            continue
        real, direct = _destination(path)
        if alone:
            plan.append((path, real, direct, data))
            continue
        key = _identity(real) or os.path.realpath(real)
        if key in seen and key not in outs:
            raise UsageError(f"output {path} is also an input")
        if key in outs:
            raise UsageError(f"output {path} is written twice")
        outs.add(key)
        seen[key] = path
        plan.append((path, real, direct, data))
    staged: list[tuple[str, str, str]] = []  # (shown path, temp file, destination)
    try:
        for path, real, direct, data in plan:
            if not direct:
                staged.append((path, _stage(path, real, data, mode), real))
        for path, real, direct, data in plan:
            if direct:
                _write_direct(path, real, data)
        while staged:
            path, tmp, real = staged[0]
            try:
                os.replace(tmp, real)
            except OSError as e:
                raise _io_error(e, path) from None
            staged.pop(0)
    finally:
        for _, tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _stage(path: str, real: str, data: bytes, mode: int | None) -> str:
    folder = os.path.dirname(os.path.abspath(real))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".loom-", suffix=".tmp", dir=folder)
    except OSError as e:
        raise _io_error(e, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise _io_error(e, path) from None
        raise
    return tmp


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
