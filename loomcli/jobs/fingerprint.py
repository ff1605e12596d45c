"""What identifies the compiler itself in cache keys: a hash of loom's own
code and LLVM's version. Light to import (no loomcli, no llvmlite), so a
no-op `loom build` can compute its keys without loading the compiler."""

from __future__ import annotations

import hashlib
import os
from functools import cache


@cache
def compiler_fingerprint() -> str:
    """A hash of loom's own compiler code (every .py under loomcli/), so a
    changed compiler never reuses an old entry."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                h.update(path[len(root) + 1:].replace(os.sep, "/").encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
                h.update(b"\0")
    return h.hexdigest()


@cache
def llvm_version() -> str:
    """The llvmlite (and so LLVM) version, read from its `_version.py`
    without importing llvmlite or `importlib.metadata` (both slow to load)."""
    import importlib.util

    spec = importlib.util.find_spec("llvmlite")
    if spec is None or spec.origin is None:
        return "none"
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "_version.py"), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return "unknown"
