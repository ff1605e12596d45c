"""Reading inputs and publishing outputs, for every command (click-free).

Inputs: `read_input` reads a regular file, or standard input for `-`, up
to `MAX_INPUT_BYTES` (64 MiB); a larger input is refused before it is read
(a file by its size, standard input after reading one byte past the limit),
since parsing costs about 60 bytes of memory per input byte. A named input
that is a FIFO, a device or a socket is refused before it is opened for
reading (`read_file`): a FIFO would wait for a writer, `/dev/zero` never
ends; pipes come through `-`.

Outputs: `write_outputs` (it lives in `loomcli.errors`, beside
`atomic_write`, and is re-exported here) publishes all of a command's outputs
or none; special files are written in place, symlinks through to their
target, and an output that is an input is a usage error.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import sys
from collections.abc import Callable
from typing import BinaryIO

from loomcli.errors import EXIT_COMPILE, EXIT_ENV, LoomError, write_outputs

__all__ = ["MAX_INPUT_BYTES", "display_path", "finite_float", "read_file", "read_input", "write_outputs"]

MAX_INPUT_BYTES = 64 << 20
STDIN = "-"


def display_path(path: str) -> str:
    """Paths are shown (and stored) relative to the working folder when under it, `/`-separated."""
    if path == "-":
        return "<stdin>"
    if path in ("<memory>", "<stdin>"):
        return path
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path.replace(os.sep, "/")
    if rel.startswith(".."):
        rel = os.path.abspath(path)
    return rel.replace(os.sep, "/")


# What the user named wrongly (TOOLCHAIN.md section 14: exit 1, as clang and
# glslc), as opposed to a machine that failed to read it (EIO ...: exit 3).
_NAMED_WRONG = (errno.ENOENT, errno.EACCES, errno.EISDIR, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG)


def read_input(path: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of input `path` (`-`: standard input). Raises LoomError
    (exit 1) for a file that is missing, unreadable or a folder, above
    `limit` or not a regular file (see `read_file`), and OSError for other
    I/O problems."""
    if path == STDIN:
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:
            raise LoomError("standard input is closed", EXIT_ENV)
        return _bounded(stream, "<stdin>", limit)
    try:
        return read_file(path, limit)
    except OSError as e:
        if e.errno in _NAMED_WRONG:
            raise LoomError(f"{path}: {e.strerror}", EXIT_COMPILE) from None
        raise


def read_file(path: str, limit: int = MAX_INPUT_BYTES, shown: str | Callable[[], str] | None = None) -> bytes:
    """The bytes of the regular file `path` (symlinks followed), checked
    before reading: a FIFO (whose open would wait for a writer), a device
    (`/dev/zero` never ends), a socket or anything above `limit` is refused
    (LoomError, exit 1; standard input is `-`). The check is made on the
    path, then again on what was opened (without blocking), so a file
    swapped meanwhile is caught too. `shown` names the file in messages
    (a function: made only for one)."""
    def name() -> str:
        return path if shown is None else shown() if callable(shown) else shown

    _check_regular(os.stat(path), name, limit)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        _check_regular(st, name, limit)
        # Asked for its size and one byte more: a read of `limit` bytes makes
        # a 64 MiB buffer first (20 us for a 1 KB source instead of 5 us).
        data = f.read(st.st_size + 1)
        if len(data) <= st.st_size:
            return data
        return _bounded(f, name(), limit, data)  # it grew since: read on, up to the limit


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISSOCK, "a socket"))


def _check_regular(st: os.stat_result, shown: Callable[[], str], limit: int) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", shown())
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
        raise LoomError(f"{shown()}: not a regular file ({kind}); standard input is `-`", EXIT_COMPILE)
    if st.st_size > limit:
        raise _too_large(shown(), limit)


def _bounded(stream: BinaryIO, shown: str, limit: int, start: bytes = b"") -> bytes:
    data = start + stream.read(limit + 1 - len(start))
    if len(data) > limit:
        raise _too_large(shown, limit)
    return data


def _too_large(shown: str, limit: int) -> LoomError:
    return LoomError(f"{shown}: input larger than the {limit >> 20} MiB limit", EXIT_COMPILE)


def finite_float(text: str) -> float:
    """`parse_float` for JSON and TOML inputs (config files, loom.toml). A
    finite number past f64's range would read as infinity and bind as if
    `inf` had been written; like a Loom literal (LANGUAGE.md section 17.5)
    it is refused with ValueError, which the readers report. TOML's own
    `inf` spelling still reads as infinity."""
    value = float(text)
    if math.isinf(value) and text.lstrip("+-") != "inf":
        raise ValueError(f"`{text if len(text) <= 40 else text[:40] + '…'}` rounds to infinity in f64")
    return value
