"""Where a compile's outputs go: depfiles (and, for `loom compile`, the plan of every output)."""

from __future__ import annotations

from collections.abc import Sequence


def depfile(target: str, deps: Sequence[str]) -> bytes:
    """A gcc-compatible depfile: the first target is the output, then every file read."""

    def esc(p: str) -> str:
        return p.replace("\\", "\\\\").replace(" ", "\\ ").replace("#", "\\#").replace("$", "$$")

    seen: dict[str, None] = {}
    for d in deps:
        seen.setdefault(d, None)
    lines = [f"{esc(target)}:"] + [f" {esc(d)}" for d in seen]
    return (" \\\n".join(lines) + "\n").encode()
