"""What the compile entry point takes and returns, as data (seed 000: "request -> cache -> compile").

A `CompileRequest` is immutable and self-contained: the bytes of a module
that holds everything its roots need (a linked module, a frontier kernel
request, or a source held in memory), the roots, the target, the format,
config bindings, the pipeline text and the artifact options. A
`CompileOutcome` keeps status apart from diagnostics: `ok` (artifacts,
maybe warnings), `failed` (the input did not compile; diagnostics say why,
exit 1) or `error` (a driver-level failure: a message and an exit code).
Both travel between processes as bytes (no pickle). Light to import: a
build that only publishes cache hits decodes outcomes without the compiler.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit import FORMATS
from loomcli.errors import LoomError
from loomcli.runtime.tasks import Header, Task

TASK_FUNCTION = "loomcli.service.compile:compile_task"
TARGET_FORMATS = tuple(FORMATS)   # every artifact format of the emitter table
MODULE_FORMATS = ("loom-bytecode", "loom-text")

_OUTCOME_MAGIC = b"LOOMOUT\x01"
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class Outputs:
    """What one compile writes: the format, and whether the launch-config
    artifact and the manifest (with the file names it records) come too."""

    format: str
    launch_config: bool = False
    manifest: bool = False
    artifact_name: str = ""                     # the manifest's artifact.name
    launch_config_name: str = ""                # the manifest's kernels[].launch_config
    also: tuple[str, ...] = ()                  # more outputs of the same specialization (formats, `stage:NAME`)

    @property
    def names(self) -> list[str]:
        """Every output name asked for, in order (`loomcli.service.compile.OUTPUT_NAMES`, `stage:NAME`)."""
        return [self.format, *self.also] + ["launch-config"] * self.launch_config + ["manifest"] * self.manifest


@dataclass(frozen=True)
class CompileRequest:
    module: bytes                               # .loombc (or Loom text) of a self-contained module
    target: str = ""                            # "family:selector"; "" only for module formats
    format: str = "loom-bytecode"               # a TARGET_FORMATS or MODULE_FORMATS entry
    roots: tuple[str, ...] = ()                 # "@sym"; empty: every exported kernel
    linked: bool = False                        # the module is already the linked closure of its roots
    config: tuple[tuple[str, str], ...] = ()    # (key, value text) bindings, flag level
    pipeline: str = "default"
    require_resolved_config: bool = False
    launch_config: bool = False                 # also build the launch-config artifact
    manifest: bool = False                      # also build the artifact manifest
    artifact_name: str = ""                     # the manifest's artifact.name
    launch_config_name: str = ""                # the manifest's kernels[].launch_config
    also: tuple[str, ...] = ()                  # more outputs from the same specialization: formats, `stage:NAME`
    path: str = "<request>"                     # shown in diagnostics about the bytes; not in the key
    # (top-level op index, file) for ops linked in from another input, so
    # diagnostics about them name that file (bytecode keeps no file per op); not in the key
    files: tuple[tuple[int, str], ...] = ()

    def header(self) -> dict[str, Any]:
        """Everything but the module bytes, as JSON-able data."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "module"}
        out["roots"] = list(self.roots)
        out["config"] = [list(pair) for pair in self.config]
        out["files"] = [list(pair) for pair in self.files]
        out["also"] = list(self.also)
        return out

    @classmethod
    def from_header(cls, header: Header, module: bytes) -> CompileRequest:
        known = {f.name for f in fields(cls)} - {"module"}
        unknown = set(header) - known
        if unknown:
            raise ValueError(f"unknown compile request fields: {sorted(unknown)}")
        values = dict(header)
        values["roots"] = tuple(values.get("roots", ()))
        values["config"] = tuple((str(k), str(v)) for k, v in values.get("config", ()))
        values["files"] = tuple((int(k), str(f)) for k, f in values.get("files", ()))
        values["also"] = tuple(str(name) for name in values.get("also", ()))
        return cls(module=module, **values)

    @property
    def outputs(self) -> Outputs:
        return Outputs(self.format, self.launch_config, self.manifest, self.artifact_name, self.launch_config_name,
                       self.also)

    def task(self, label: str = "") -> Task:
        return Task(TASK_FUNCTION, self.header(), self.module, label or f"{self.artifact_name} {self.target}".strip())


@dataclass(frozen=True)
class CompileOutcome:
    status: str                                 # "ok" | "failed" | "error"
    artifact: bytes = b""                       # the requested format's bytes
    launch_config: bytes = b""
    manifest: bytes = b""
    diagnostics: tuple[Diagnostic, ...] = ()    # warnings with "ok"; errors (and warnings) with "failed"
    selections: tuple[str, ...] = ()            # template selection decisions, as printed by --print-selections
    message: str = ""                           # with "error"
    exit_code: int = 0                          # with "error"
    extra: dict[str, Any] = field(default_factory=dict)  # JSON facts for callers (exports, ...)
    also: tuple[bytes, ...] = ()                # the request's `also` outputs, in its order

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def raise_for_status(self) -> None:
        """Turn a failed outcome into the exception the CLI reports."""
        if self.status == "failed":
            raise CompileError(list(self.diagnostics))
        if self.status == "error":
            raise LoomError(self.message, self.exit_code or 3)

    def encode(self) -> bytes:
        head = {
            "status": self.status, "message": self.message, "exit_code": self.exit_code,
            "diagnostics": [asdict(d) for d in self.diagnostics], "selections": list(self.selections),
            "extra": self.extra,
            "lengths": [len(b) for b in self.blobs],
        }
        text = json.dumps(head, sort_keys=True, separators=(",", ":")).encode()
        return b"".join([_OUTCOME_MAGIC, _U32.pack(len(text)), text, *self.blobs])

    @property
    def blobs(self) -> tuple[bytes, ...]:
        return (self.artifact, self.launch_config, self.manifest, *self.also)

    @classmethod
    def decode(cls, data: bytes) -> CompileOutcome:
        """Inverse of `encode`; raises ValueError on anything malformed."""
        if not data.startswith(_OUTCOME_MAGIC) or len(data) < len(_OUTCOME_MAGIC) + 4:
            raise ValueError("not a compile outcome")
        pos = len(_OUTCOME_MAGIC)
        (n,) = _U32.unpack_from(data, pos)
        pos += 4
        if pos + n > len(data):
            raise ValueError("truncated compile outcome")
        head = json.loads(data[pos:pos + n])
        pos += n
        lengths = head["lengths"]
        if not isinstance(lengths, list) or len(lengths) < 3 or any(not isinstance(x, int) or x < 0 for x in lengths) \
                or pos + sum(lengths) != len(data):
            raise ValueError("compile outcome lengths do not match")
        blobs = []
        for length in lengths:
            blobs.append(data[pos:pos + length])
            pos += length
        diags = tuple(Diagnostic(**d) for d in head["diagnostics"])
        return cls(head["status"], blobs[0], blobs[1], blobs[2], diags, tuple(head["selections"]),
                   head["message"], head["exit_code"], head.get("extra", {}), tuple(blobs[3:]))


def outcome_or_failure(make: Callable[[], CompileOutcome]) -> CompileOutcome:
    """`make()` as an outcome: input errors become `failed`, driver errors `error`."""
    try:
        return make()
    except CompileError as e:
        return CompileOutcome("failed", diagnostics=tuple(e.diagnostics))
    except LoomError as e:
        return CompileOutcome("error", message=str(e), exit_code=e.exit_code)
