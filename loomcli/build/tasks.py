"""The task `loom build` schedules: one kernel set, every target it misses.

The front end (parse, verify, link against the libraries, bind the project
config) runs once per set, in the worker, and each target is then the same
back half as every compile request (`loomcli.service.compile.outcome_for`).
Libraries are the worker's prepared state: the coordinator merges each
[[library]] into one bytecode module once per build; a worker decodes each
distinct library once (by content digest) and reuses it for every set.

Header (JSON): `set`, `srcs` (names shown in diagnostics), `roots`,
`pipeline`, `config` (the project's [config] table), `project_file`,
`libraries` ([name, digest]), `lengths` (bytes of each source, then of each
library, in order), `targets` ([target, format, artifact name, launch-config
name]). Payload: the sources' bytes, then the libraries' bytecode.
Reply: `u32 n | JSON {"front": ok?, "lengths": [...]} | encoded
CompileOutcomes` (one per target, or the front end's failure). No pickle.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.runtime.tasks import WorkerContext
from loomcli.service.compile import CompileOutcome, outcome_for, outcome_or_failure

TASK_FUNCTION = "loomcli.build.tasks:kernel_set_task"
_U32 = struct.Struct("<I")

# Prepared state of this (worker) process: decoded libraries by content digest.
_LIBRARIES: dict[str, Any] = {}


def split(payload: bytes, lengths: list[int]) -> list[bytes]:
    if sum(lengths) != len(payload) or any(n < 0 for n in lengths):
        raise ValueError("payload lengths do not match")
    out, pos = [], 0
    for n in lengths:
        out.append(payload[pos:pos + n])
        pos += n
    return out


def source_key(path: str) -> str:
    """A source's key in a set's link index: its file name's stem."""
    return os.path.splitext(os.path.basename(path))[0]


def check_unique_keys(items: list[Any]) -> None:
    """Link inputs of one set (or library) must have distinct keys."""
    seen: dict[str, str] = {}
    for item in items:
        if item.key in seen:
            from loomcli.errors import LoomError

            raise LoomError(f"{seen[item.key]} and {item.path} share the stem `{item.key}` in one set; rename one", 1)
        seen[item.key] = item.path


def _library(name: str, digest: str, data: bytes) -> Any:
    if digest not in _LIBRARIES:
        from loomcli.frontend import load_bytes
        from loomcli.link.index import input_from_module

        _LIBRARIES[digest] = input_from_module(load_bytes(data, name, verify=False), name, library=True)
    return _LIBRARIES[digest]


def front_end(header: dict[str, Any], sources: list[bytes], libraries: list[bytes]) -> Any:
    """Parse, verify, link and bind one kernel set: a `FrontEnd`."""
    from loomcli.frontend import load_bytes
    from loomcli.ir.gcpause import gc_paused
    from loomcli.link.index import LinkIndex, input_from_module
    from loomcli.passes.pipeline import parse_pipeline
    from loomcli.pipeline import LinkOptions, bound_front_end, collect_bindings, link_roots

    with gc_paused():
        pipeline = parse_pipeline(header["pipeline"])
        inputs = []
        errors: list[Diagnostic] = []
        for shown, data in zip(header["srcs"], sources):
            try:
                inputs.append(input_from_module(load_bytes(data, shown), source_key(shown)))
            except CompileError as e:
                errors += e.diagnostics
        if errors:
            raise CompileError(errors)
        check_unique_keys(inputs)
        libs = [_library(name, digest, data) for (name, digest), data in zip(header["libraries"], libraries)]
        index = LinkIndex(tuple(inputs) + tuple(sorted(libs, key=lambda i: i.key)))
        result = link_roots(index, header["roots"], header["srcs"][0])
        options = LinkOptions(inputs=[], project_config=header["config"], project_path=header["project_file"])
        return bound_front_end(result.module, collect_bindings(options, index), pipeline, result.origins)


def run_kernel_set(header: dict[str, Any], payload: bytes) -> tuple[bool, list[CompileOutcome]]:
    """(whether the front end succeeded, outcomes): one per target, or the
    front end's one failed outcome that stands for every target."""
    from loomcli.targets.profiles import parse_target

    n = len(header["srcs"])
    blobs = split(payload, header["lengths"])
    fronts: list[Any] = []
    failed = outcome_or_failure(lambda: fronts.append(front_end(header, blobs[:n], blobs[n:])) or CompileOutcome("ok"))
    if not failed.ok:
        return False, [failed]
    front = fronts[0]
    return True, [outcome_or_failure(lambda t=target, f=fmt, a=artifact, ln=launch: outcome_for(
        front, parse_target(t), f, True, True, a, ln)) for target, fmt, artifact, launch in header["targets"]]


def kernel_set_task(header: dict[str, Any], payload: bytes, context: WorkerContext) -> bytes:
    """The task function (see the module docstring for the byte layout)."""
    front_ok, outcomes = run_kernel_set(header, payload)
    encoded = [o.encode() for o in outcomes]
    head = json.dumps({"front": front_ok, "lengths": [len(e) for e in encoded]}, sort_keys=True).encode()
    return _U32.pack(len(head)) + head + b"".join(encoded)


def decode_reply(data: bytes) -> tuple[bool, list[CompileOutcome]]:
    """Inverse of `kernel_set_task`'s reply; ValueError when malformed."""
    try:
        (n,) = _U32.unpack_from(data, 0)
        head = json.loads(data[4:4 + n])
        return bool(head["front"]), [CompileOutcome.decode(b) for b in split(data[4 + n:], head["lengths"])]
    except (struct.error, KeyError, TypeError) as e:
        raise ValueError(f"malformed kernel-set reply: {e}") from None


def warm() -> None:
    """Worker start-up: the compile entry point's prepared state."""
    from loomcli.service.compile import warm as warm_compile

    warm_compile()
