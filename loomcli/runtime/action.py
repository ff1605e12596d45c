"""A Bazel action's command line as `loom worker` receives it (the lines of
its params file, or a persistent worker's request): `[--mkdir DIR]...
COMMAND [ARG]...`.

Bazel makes the folders of a local action's outputs, but a remote executor
need not (REAPI 2.0 clients, Bazel before 6, name output files, and
buildbox makes parents only for 2.1's output paths), so each action names
its output folders first and they are made, relative to its working folder
(the sandbox, or the execution root), before the command runs. Light: the
entry point reads it before anything else is imported.
"""

from __future__ import annotations

import os
import sys


def command(argv: list[str]) -> list[str]:
    """The command line after the `--mkdir` folders at the start of `argv` (nothing made)."""
    i = 0
    while i + 1 < len(argv) and argv[i] == "--mkdir":
        i += 2
    return argv[i:]


def prepare(argv: list[str]) -> list[str]:
    """Make the `--mkdir` folders at the start of `argv`; the command line
    that follows them. A folder that cannot be made ends the process (exit 3)."""
    i = 0
    while i + 1 < len(argv) and argv[i] == "--mkdir":
        try:
            os.makedirs(argv[i + 1], exist_ok=True)
        except OSError as e:
            print(f"loom: error: {argv[i + 1]}: {e.strerror}", file=sys.stderr)
            sys.exit(3)
        i += 2
    return argv[i:]
