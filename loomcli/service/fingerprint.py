"""What identifies the compiler itself in cache keys: a hash of loom's own
code and LLVM's version. Light to import (no loomcli, no llvmlite), so a
no-op `loom build` can compute its keys without loading the compiler."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # functools and typing cost the resident server's client more than its whole check
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

def once(compute: Callable[[], T]) -> Callable[[], T]:
    """`compute()`, computed on the first call only (`functools.cache` for a
    function of no arguments, without importing functools)."""
    memo: list[T] = []

    def value() -> T:
        if not memo:
            memo.append(compute())
        return memo[0]

    value.__doc__ = compute.__doc__
    value.__name__ = compute.__name__
    return value


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


@once
def _code_tree() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """loom's code: (absolute path of every folder, and (`/`-separated path
    under loomcli/, absolute path) of every .py file), each sorted."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folders, found = [], []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        folders.append(folder)
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                found.append((path[len(root) + 1:].replace(os.sep, "/"), path))
    return tuple(folders), tuple(found)


def _code_files() -> tuple[tuple[str, str], ...]:
    return _code_tree()[1]


@once
def compiler_fingerprint() -> str:
    """A hash of loom's own compiler code (every .py under loomcli/), so a
    changed compiler never reuses an old entry."""
    import hashlib

    h = hashlib.sha256()
    for rel, path in _code_files():
        h.update(rel.encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()


def code_stamps() -> list[tuple[str, list[int]]] | None:
    """(absolute path, `stat_stamp`) of every folder and .py file of loom's
    code: while all are unchanged, a recorded `compiler_fingerprint` still
    holds (a file added or removed changes its folder's stamp). None when
    one is too recent to be trusted."""
    import time

    now = time.time_ns()
    folders, files = _code_tree()
    stamps = []
    for path in (*folders, *(path for _, path in files)):
        stamp = stat_stamp(os.stat(path), now)
        if stamp is None:
            return None
        stamps.append((path, stamp))
    return stamps


def compiler_stamp(stamps: list[tuple[str, list[int]]] | None) -> str | None:
    """`code_stamps` in one digest, as the state file records it."""
    if stamps is None:
        return None
    import hashlib

    h = hashlib.sha256()
    for path, stamp in stamps:
        h.update(f"{path}\0{stamp}\0".encode())
    return h.hexdigest()


@once
def _llvm() -> tuple[str, str | None, list[int] | None]:
    """(version digest, path of llvmlite's `_version.py`, its `stat_stamp`
    taken before it was read)."""
    import hashlib
    import importlib.util
    import time

    spec = importlib.util.find_spec("llvmlite")
    if spec is None or spec.origin is None:
        return "none", None, None
    path = os.path.join(os.path.dirname(spec.origin), "_version.py")
    try:
        now = time.time_ns()
        with open(path, "rb") as f:
            stamp = stat_stamp(os.fstat(f.fileno()), now)
            return hashlib.sha256(f.read()).hexdigest()[:16], path, stamp
    except OSError:
        return "unknown", None, None


def llvm_version() -> str:
    """The llvmlite (and so LLVM) version, read from its `_version.py`
    without importing llvmlite or `importlib.metadata` (both slow to load)."""
    return _llvm()[0]


def warm() -> None:
    """A warm template's start (`loomcli.runtime.template`): the digests every
    compile's cache key reads, computed once for all its children."""
    compiler_fingerprint()
    llvm_version()


def llvm_version_file() -> str | None:
    """The `_version.py` of the llvmlite that would be imported (None: none)."""
    return _llvm()[1]


def llvm_version_stamp() -> tuple[str, list[int]] | None:
    """(path, stamp) of the file `llvm_version` read; None if none or too recent."""
    _, path, stamp = _llvm()
    return (path, stamp) if path is not None and stamp is not None else None


def _llvmlite_file() -> str | None:
    """The `_version.py` of the first llvmlite on `sys.path`: one stat per
    entry, where the import system's own search costs milliseconds (it
    lists every folder). Plain packages only; another finder's llvmlite is
    simply not named."""
    import sys

    for entry in sys.path:
        path = os.path.join(entry or os.curdir, "llvmlite", "_version.py")
        if os.path.isfile(path):
            return os.path.abspath(path)
    return None


def server_key() -> str | None:
    """The name of this loom build's resident server
    (`loomcli.runtime.served`): loom's version and code (the stamps of
    `code_stamps`, which change with any edit), the interpreter and the
    flags that change what it does, and the llvmlite it would import. None
    while loom's code or llvmlite changed too recently to be judged by
    stamps: then no server is used (a changed loom never uses an old one)."""
    import _blake2
    import sys
    import time

    from loomcli import __version__

    stamps = code_stamps()
    llvm = _llvmlite_file()
    try:
        llvm_stamp = stat_stamp(os.stat(llvm), time.time_ns()) if llvm is not None else []
    except OSError:
        llvm_stamp = []
    if stamps is None or llvm_stamp is None:
        return None
    flags = sys.flags
    parts = ["loom-server-1", __version__, sys.executable, sys.version, _code_tree()[0][0], str(stamps), str(llvm),
             str(llvm_stamp), sys.getfilesystemencoding(), sys.getfilesystemencodeerrors(),
             str((flags.optimize, flags.utf8_mode, flags.dev_mode, flags.isolated, flags.ignore_environment,
                  flags.no_site, flags.no_user_site, flags.bytes_warning, flags.int_max_str_digits)),
             str(sorted(sys._xoptions.items()))]
    return _blake2.blake2b("\0".join(parts).encode("utf-8", "surrogateescape"), digest_size=10).hexdigest()
