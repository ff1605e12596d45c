"""Errors, exit codes and atomic output writing: the bottom layer every stage may use.

Exit codes (TOOLCHAIN.md section 5): 0 success; 1 the input failed to
compile (diagnostics, raised as `loomcli.diagnostics.CompileError`); 2 usage
error; 3 environment or infrastructure failure. This module imports nothing
from loom and nothing heavy, so any layer can raise these without pulling in
the command line.
"""

from __future__ import annotations

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
    see `loomcli.files.write_outputs`, which also publishes several outputs
    all or nothing."""
    from loomcli.files import write_outputs

    write_outputs([(path, data)], mode=mode)
