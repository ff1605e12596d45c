"""The cache key of a compile request: its content address (TOOLCHAIN.md section 10).

It names everything that decides the outcome's bytes and nothing else (no
paths, no `-j`, no verbosity): loom's version and code, LLVM's version
where the target emits through it, ptxas's for a cubin, the profile, the
request's header and its module bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache

from loomcli import __version__
from loomcli.emit import backend_for
from loomcli.service.fingerprint import compiler_fingerprint, llvm_version
from loomcli.service.request import CompileRequest
from loomcli.targets.profiles import parse_target

KEY_SCHEMA = "loom-compile-key-1"


def ptxas_version() -> str:
    """The version of the ptxas a cubin would be built with ("none" without one)."""
    from loomcli.emit.nvptx.ptxas import find_ptxas

    path = find_ptxas()
    if path is None:
        return "none"
    try:
        st = os.stat(path)
    except OSError:
        return "unusable"
    # Asked once per process for each file: a process may serve many commands (a warm
    # server child), so a ptxas replaced at the same path is asked again.
    return _ptxas_version(path, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))


@cache
def _ptxas_version(path: str, stamp: tuple[int, ...]) -> str:
    from loomcli.emit.nvptx.ptxas import version

    try:
        return version(path)
    except OSError:
        return "unusable"


def cache_key(request: CompileRequest) -> str:
    """The content address of a request's outcome (TOOLCHAIN.md section 10)."""
    header = request.header()
    del header["path"], header["files"]
    if not request.manifest:  # the names only appear in the manifest
        del header["artifact_name"], header["launch_config_name"]
    profile = parse_target(request.target) if request.target else None
    facts = {
        "schema": KEY_SCHEMA, "loom": __version__, "compiler": compiler_fingerprint(),
        "llvm": llvm_version() if profile is not None and backend_for(profile).llvm else "",
        # NVIDIA's assembler writes the cubin: its version decides the bytes.
        "ptxas": ptxas_version() if {"nvptx-cubin", "stage:cubin"} & set(request.outputs.names) else "",
        "profile": _stable(profile) if profile is not None else "",
        "request": header,
    }
    h = hashlib.sha256(json.dumps(facts, sort_keys=True, separators=(",", ":")).encode())
    h.update(b"\0module\0")
    h.update(request.module)
    return h.hexdigest()


def _stable(value: object) -> object:
    """`value` as JSON that is the same in every process: a set's order (its
    repr) follows string hashing, which differs per process, and once made
    every `loom compile` miss the cache another process filled."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _stable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (set, frozenset)):
        return sorted((_stable(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _stable(v) for k, v in value.items()}
    return value if value is None or isinstance(value, (str, int, float, bool)) else repr(value)
