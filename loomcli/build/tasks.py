"""The task `loom build` schedules: one kernel set, every target it misses.

The front end (parse, verify, link against the libraries, bind the project
config) runs once per set, in the worker, through the one front end
(`loomcli.service.front`, sources in memory), and each target is then the
same back half as every compile request (`loomcli.service.compile.outcome_for`).
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

The coordinator imports this module for the layout alone; the compiler is
imported by the task function, in the worker (prepared by `warm`).
"""

from __future__ import annotations

import json
import os
import struct
from typing import TYPE_CHECKING

from loomcli.runtime.tasks import Header, WorkerContext
from loomcli.service.request import CompileOutcome, Outputs, outcome_or_failure

if TYPE_CHECKING:
    from loomcli.link.index import LinkInput
    from loomcli.pipeline import FrontEnd

TASK_FUNCTION = "loomcli.build.tasks:kernel_set_task"
_U32 = struct.Struct("<I")

# Prepared state of this process (a pool worker, or a warm server child that serves
# build after build): decoded libraries by name and content digest. The name is part of
# the key: it is the input's link key (what `module.import` names), and two libraries of
# one content under two names are two inputs.
_LIBRARIES: dict[tuple[str, str], LinkInput] = {}


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


def _library(name: str, digest: str, data: bytes) -> LinkInput:
    key = (name, digest)
    if key not in _LIBRARIES:
        from loomcli.frontend import load_bytes
        from loomcli.link.index import input_from_module

        _LIBRARIES[key] = input_from_module(load_bytes(data, name, verify=False), name, library=True)
    return _LIBRARIES[key]


def front_end(header: Header, sources: list[bytes], libraries: list[bytes]) -> FrontEnd:
    """Parse, verify, link and bind one kernel set."""
    from loomcli.pipeline import ConfigSources
    from loomcli.service.front import FrontEndOptions, Memory, Source
    from loomcli.service.front import front_end as run_front_end

    inputs = Memory([Source(data, shown, source_key(shown)) for shown, data in zip(header["srcs"], sources)],
                    [_library(name, digest, data) for (name, digest), data in zip(header["libraries"], libraries)])
    config = ConfigSources(project=header["config"], project_path=header["project_file"],
                           project_lines=header.get("config_lines"))
    return run_front_end(inputs, FrontEndOptions(header["roots"], config, header["pipeline"]))


def run_kernel_set(header: Header, payload: bytes) -> tuple[bool, list[CompileOutcome]]:
    """(whether the front end succeeded, outcomes): one per target, or the
    front end's one failed outcome that stands for every target."""
    from loomcli.service.compile import outcome_for
    from loomcli.targets.profiles import parse_target

    n = len(header["srcs"])
    blobs = split(payload, header["lengths"])
    fronts: list[FrontEnd] = []

    def run_front_end() -> CompileOutcome:
        fronts.append(front_end(header, blobs[:n], blobs[n:]))
        return CompileOutcome("ok")

    failed = outcome_or_failure(run_front_end)
    if not failed.ok:
        return False, [failed]
    front = fronts[0]

    def back_half(target: str, outputs: Outputs, last: bool) -> CompileOutcome:
        return outcome_or_failure(lambda: outcome_for(front, parse_target(target), outputs, consume=last))

    targets = header["targets"]
    return True, [back_half(target, Outputs(fmt, True, True, artifact, launch), i == len(targets) - 1)
                  for i, (target, fmt, artifact, launch) in enumerate(targets)]


def kernel_set_task(header: Header, payload: bytes, context: WorkerContext) -> bytes:
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
