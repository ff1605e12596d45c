"""Errors, exit codes and atomic output writing: the bottom layer every stage may use.

Exit codes (TOOLCHAIN.md section 5): 0 success; 1 the input failed to
compile (diagnostics, raised as `loomcli.diagnostics.CompileError`); 2 usage
error; 3 environment or infrastructure failure. This module imports nothing
from loom and nothing heavy, so any layer can raise these without pulling in
the command line.
"""

from __future__ import annotations

import os
import sys
import tempfile

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
    rename, so a failure or a kill never leaves a partial or stale output."""
    if path == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".loom-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
