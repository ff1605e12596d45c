"""Loom: an ahead-of-time compiler and packager for Loom GPU kernel programs.

`import loomcli as loom` is cheap: the embedding API's names (docs/api.md)
resolve on first use, from `loomcli.api`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing (and the re, enum and functools it imports) would cost every `loom` run ~10 ms
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

API_NAMES = frozenset({
    "Artifact", "CommandResult", "Compiler", "Diagnostic", "Launch", "LaunchProgram", "LinkIndex", "LoomError",
    "Request", "Result", "Source", "Target", "TaskPool", "UsageError", "build_command_product", "targets",
})


def __getattr__(name: str) -> Any:
    if name in API_NAMES:
        import importlib

        return getattr(importlib.import_module("loomcli.api"), name)
    raise AttributeError(f"module 'loomcli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | API_NAMES)
