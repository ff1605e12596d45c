"""What `loom --version` says about LLVM (TOOLCHAIN.md section 14), without
loading it: llvmlite's own version is in its `_version.py`; the LLVM
version it carries is only known to its 170 MB shared library. That one is
asked once, by a child process, and recorded beside the compile cache
(`<cache>/llvm-version.json`, keyed by a digest of llvmlite's `_version.py`),
so every later `loom --version` reads two small files. With the cache off
(`LOOM_CACHE=0`) nothing is written and the child is asked every time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from loomcli.service.fingerprint import llvm_version, llvm_version_file

RECORD = "llvm-version.json"
_ASK = "import llvmlite.binding as b; print('.'.join(map(str, b.llvm_version_info)))"


def llvmlite_version() -> str | None:
    """llvmlite's version from its `_version.py` (None: no llvmlite)."""
    path = llvm_version_file()
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            m = re.search(r"""^version_version\s*=\s*['"]([^'"]+)['"]""", f.read(), re.M)
    except OSError:
        return None
    return m.group(1) if m else None


def llvm_release() -> str | None:
    """The LLVM version llvmlite carries (`22.1.0`), None when there is no
    llvmlite or it cannot load."""
    from loomcli.cache import default_root, enabled

    digest = llvm_version()
    if digest in ("none", "unknown"):
        return None
    root = default_root()
    path = os.path.join(root, RECORD) if root is not None else None
    if path is not None and enabled():
        try:
            with open(path, "rb") as f:
                record = json.loads(f.read(4096))
            if isinstance(record, dict) and record.get("digest") == digest and isinstance(record.get("llvm"), str):
                return record["llvm"]
        except (OSError, ValueError):
            pass  # none yet, or damaged: ask again
    try:
        r = subprocess.run([sys.executable, "-c", _ASK], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    release = r.stdout.strip()
    if r.returncode != 0 or not re.fullmatch(r"[0-9]+(\.[0-9]+)*", release):
        return None
    if path is not None and enabled():
        from loomcli.errors import atomic_write

        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write(path, json.dumps({"digest": digest, "llvm": release}).encode())
        except OSError:
            pass  # a cache folder we cannot write: asked again next time
    return release
