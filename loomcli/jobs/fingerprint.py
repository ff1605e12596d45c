"""What identifies the compiler itself in cache keys: a hash of loom's own
code and LLVM's version. Light to import (no loomcli, no llvmlite), so a
no-op `loom build` can compute its keys without loading the compiler."""

from __future__ import annotations

import hashlib
import os
from functools import cache

# Stat data is trusted as a stand-in for content only when the file was last
# changed (mtime and ctime) at least this long before it was recorded: a
# write in the same timestamp tick as the recording (coarse file systems tick
# in 1 or 2 s) would otherwise leave every field equal while the bytes differ
# (git's "racy clean" problem). Such a file is simply hashed again next time.
RACY_MARGIN_NS = 2_000_000_000


def stat_stamp(st: os.stat_result, now_ns: int) -> list[int] | None:
    """What must stay equal for a file's recorded content hash to be reused:
    size, mtime, ctime and inode. Copying a file, editing it or restoring an
    old mtime (`touch -d`, `tar -x`, `cp -p`) changes the ctime or the
    inode, which no user can set. None: changed too recently to be trusted
    (see RACY_MARGIN_NS), so the caller must hash the content."""
    if max(st.st_mtime_ns, st.st_ctime_ns) > now_ns - RACY_MARGIN_NS:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


@cache
def _code_files() -> tuple[tuple[str, str], ...]:
    """(`/`-separated path under loomcli/, absolute path) of every .py file of loom's code, sorted."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                found.append((path[len(root) + 1:].replace(os.sep, "/"), path))
    return tuple(found)


@cache
def compiler_fingerprint() -> str:
    """A hash of loom's own compiler code (every .py under loomcli/), so a
    changed compiler never reuses an old entry."""
    h = hashlib.sha256()
    for rel, path in _code_files():
        h.update(rel.encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()


def compiler_stamp() -> str | None:
    """The stat stamps (`stat_stamp`) of loom's code files in one digest: while
    it is unchanged, a recorded `compiler_fingerprint` still holds and the
    code need not be read. None when a file is too recent to be trusted."""
    import time

    now = time.time_ns()
    h = hashlib.sha256()
    for rel, path in _code_files():
        stamp = stat_stamp(os.stat(path), now)
        if stamp is None:
            return None
        h.update(f"{rel}\0{stamp}\0".encode())
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
