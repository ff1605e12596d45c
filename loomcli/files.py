"""Reading inputs and publishing outputs, for every command (click-free).

Inputs: `read_input` reads a file, or standard input for `-`, up to
`MAX_INPUT_BYTES` (64 MiB); a larger input is refused before it is read
(regular files by their size, anything else - pipes, devices - after reading
one byte past the limit), since parsing costs about 60 bytes of memory per
input byte.

Outputs: `write_outputs` (it lives in `loomcli.errors`, beside
`atomic_write`, and is re-exported here) publishes all of a command's outputs
or none; special files are written in place, symlinks through to their
target, and an output that is an input is a usage error.
"""

from __future__ import annotations

import math
import os
import stat
import sys
from typing import BinaryIO

from loomcli.errors import EXIT_COMPILE, EXIT_ENV, LoomError, write_outputs

__all__ = ["MAX_INPUT_BYTES", "finite_float", "read_input", "write_outputs"]

MAX_INPUT_BYTES = 64 << 20
STDIN = "-"


def read_input(path: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of input `path` (`-`: standard input). Raises OSError for
    I/O problems and LoomError (exit 1) for an input above `limit`."""
    if path == STDIN:
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:
            raise LoomError("standard input is closed", EXIT_ENV)
        return _bounded(stream, "<stdin>", limit)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", path)
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            raise _too_large(path, limit)
        return _bounded(f, path, limit)


def _bounded(stream: BinaryIO, shown: str, limit: int) -> bytes:
    data = stream.read(limit + 1)
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
