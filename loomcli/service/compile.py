"""One compile entry point for every producer: `loom compile`, `loom build`
and the product frontier (seed 000: "request -> cache -> compile").

A `CompileRequest` is immutable and self-contained: the bytes of a module
that holds everything its roots need (a linked module, or a frontier kernel
request), the roots, the target, the format, config bindings, the pipeline
text and the artifact options. `compile_request` turns it into a
`CompileOutcome` in this process; `compile_task` is the same as a task
function for any `TaskSink` (bytes in, bytes out, no pickle); `cache_key`
names everything that decides the outcome's bytes and nothing else (no
paths, no `-j`, no verbosity).

The outcome keeps status apart from diagnostics: `ok` (artifacts, maybe
warnings), `failed` (the input did not compile; diagnostics say why, exit
1) or `error` (a driver-level failure: a message and an exit code).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from typing import TYPE_CHECKING, Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit import FORMATS
from loomcli.errors import LoomError
from loomcli.runtime.tasks import Task, TaskResult, TaskSink, WorkerContext

if TYPE_CHECKING:
    from loomcli.cache import Cache

TASK_FUNCTION = "loomcli.service.compile:compile_task"
TARGET_FORMATS = tuple(FORMATS)   # every artifact format of the emitter table
MODULE_FORMATS = ("loom-bytecode", "loom-text")

_OUTCOME_MAGIC = b"LOOMOUT\x01"
_U32 = struct.Struct("<I")


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
        return out

    @classmethod
    def from_header(cls, header: dict[str, Any], module: bytes) -> CompileRequest:
        known = {f.name for f in fields(cls)} - {"module"}
        unknown = set(header) - known
        if unknown:
            raise ValueError(f"unknown compile request fields: {sorted(unknown)}")
        values = dict(header)
        values["roots"] = tuple(values.get("roots", ()))
        values["config"] = tuple((str(k), str(v)) for k, v in values.get("config", ()))
        values["files"] = tuple((int(k), str(f)) for k, f in values.get("files", ()))
        return cls(module=module, **values)

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
            "lengths": [len(self.artifact), len(self.launch_config), len(self.manifest)],
        }
        text = json.dumps(head, sort_keys=True, separators=(",", ":")).encode()
        return b"".join([_OUTCOME_MAGIC, _U32.pack(len(text)), text, self.artifact, self.launch_config,
                         self.manifest])

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
        if len(lengths) != 3 or any(not isinstance(x, int) or x < 0 for x in lengths) \
                or pos + sum(lengths) != len(data):
            raise ValueError("compile outcome lengths do not match")
        blobs = []
        for length in lengths:
            blobs.append(data[pos:pos + length])
            pos += length
        diags = tuple(Diagnostic(**d) for d in head["diagnostics"])
        return cls(head["status"], blobs[0], blobs[1], blobs[2], diags, tuple(head["selections"]),
                   head["message"], head["exit_code"], head.get("extra", {}))


# ---------------------------------------------------------------- compiling


def compile_request(request: CompileRequest) -> CompileOutcome:
    """Link the request's roots, bind its config, specialize for its target,
    run its pipeline and produce the artifacts, in this process."""
    return outcome_or_failure(lambda: _compile(request))


def _compile(request: CompileRequest) -> CompileOutcome:
    from loomcli.frontend import load_bytes
    from loomcli.ir.core import stamp_file
    from loomcli.ir.gcpause import gc_paused
    from loomcli.link.config import BindingCollector
    from loomcli.link.index import LinkIndex, input_from_module
    from loomcli.passes.pipeline import parse_pipeline
    from loomcli.pipeline import bound_front_end, link_roots
    from loomcli.targets.profiles import parse_target

    if request.format not in TARGET_FORMATS + MODULE_FORMATS:
        raise LoomError(f"unknown format {request.format}", 2)
    profile = parse_target(request.target) if request.target else None
    if profile is None and (request.format in TARGET_FORMATS or request.launch_config):
        raise LoomError(f"emitting {request.format if request.format in TARGET_FORMATS else 'a launch config'} "
                        f"needs a target", 2)
    with gc_paused():
        pipeline = parse_pipeline(request.pipeline)
        module = load_bytes(request.module, request.path, verify=False)
        for k, file in request.files:
            if 0 <= k < len(module.ops):
                stamp_file(module.ops[k], file)
        origins: dict[str, str] = {}
        if not request.linked:
            index = LinkIndex((input_from_module(module, os.path.splitext(os.path.basename(module.path))[0] or "m"),))
            result = link_roots(index, request.roots, module.path)
            module, origins = result.module, result.origins
        collector = BindingCollector()
        collector.add_flags(f"{k}={v}" for k, v in request.config)
        collector.add_module_defs(module)
        if collector.diags:
            raise CompileError(collector.diags)
        front = bound_front_end(module, collector.result(), pipeline, origins, request.require_resolved_config)
    return outcome_for(front, profile, request.format, request.launch_config, request.manifest,
                       request.artifact_name, request.launch_config_name)


def outcome_for(front: Any, profile: Any, fmt: str, launch_config: bool = False, manifest: bool = False,
                artifact_name: str = "", launch_config_name: str = "") -> CompileOutcome:
    """The back half shared by every producer: specialize a front end's
    module for `profile`, run its pipeline, emit `fmt` and the side artifacts.
    Raises CompileError / LoomError (`compile_request` and callers turn them
    into outcomes)."""
    from loomcli.pipeline import specialize

    # Artifacts and launch configs need every reachable config.get bound (17.22).
    compiled = specialize(front, profile, for_execution=fmt in TARGET_FORMATS or launch_config)
    selections = tuple(d.describe() for d in compiled.decisions)
    artifact_bytes, launch_bytes, manifest_bytes = b"", b"", b""
    artifact = None
    extra: dict[str, Any] = {}
    emission = None
    if profile is not None:
        from loomcli.emit.artifacts import Emission

        emission = Emission(compiled.module, profile)  # TARGET checks once, for every output
    if fmt == "loom-bytecode":
        from loomcli.bytecode import write_module

        artifact_bytes = write_module(compiled.module, keep_debug=False)
    elif fmt == "loom-text":
        from loomcli.text.printer import print_module

        artifact_bytes = print_module(compiled.module).encode()
    else:
        assert emission is not None
        artifact = emission.artifact(fmt)
        artifact_bytes = artifact.data
        extra["exports"] = [k.get("export") for k in artifact.kernels if k.get("export") is not None]
    if launch_config:
        assert emission is not None
        launch_bytes = emission.launch_config()
    if manifest:
        from loomcli.emit.artifacts import manifest as build_manifest

        if artifact is None:
            raise LoomError("--manifest describes a target artifact (.hsaco, .spv, .ptx, .cubin, .ll, .s)", 2)
        manifest_bytes = build_manifest(artifact, artifact_name, launch_config_name or None)
    return CompileOutcome("ok", artifact_bytes, launch_bytes, manifest_bytes, tuple(compiled.warnings), selections,
                          extra=extra)


def outcome_or_failure(make: Any) -> CompileOutcome:
    """`make()` as an outcome: input errors become `failed`, driver errors `error`."""
    try:
        return make()
    except CompileError as e:
        return CompileOutcome("failed", diagnostics=tuple(e.diagnostics))
    except LoomError as e:
        return CompileOutcome("error", message=str(e), exit_code=e.exit_code)


def compile_task(header: dict[str, Any], payload: bytes, context: WorkerContext) -> bytes:
    """The task function: a request's header and module bytes in, an encoded outcome out."""
    return compile_request(CompileRequest.from_header(header, payload)).encode()


def warm() -> None:
    """Worker start-up: import and prepare what every task uses (parser,
    verifier, linker, pass programs, emitters, launch configs) before the
    first task arrives. In a fork server this is done once for every worker
    it forks: each module missing here is imported again by every worker's
    first task (they are imported lazily for the command line's sake)."""
    import loomcli.bytecode.reader
    import loomcli.bytecode.writer
    import loomcli.emit.amdgpu
    import loomcli.emit.amdgpu.link
    import loomcli.emit.amdgpu.manifest
    import loomcli.emit.amdgpu.msgpack
    import loomcli.emit.amdgpu.target
    import loomcli.emit.artifacts
    import loomcli.emit.elf
    import loomcli.emit.launch_config
    import loomcli.emit.llvm.lower
    import loomcli.emit.spirv
    import loomcli.emit.spirv.emitter
    import loomcli.emit.spirv.lower
    import loomcli.emit.spirv.writer
    import loomcli.frontend
    import loomcli.ir.structural
    import loomcli.ir.verifier
    import loomcli.launch
    import loomcli.launch.program
    import loomcli.link.linker
    import loomcli.passes.collectives
    import loomcli.passes.expand_math
    import loomcli.passes.facts
    import loomcli.passes.pipeline
    import loomcli.passes.select
    import loomcli.passes.specialize
    import loomcli.pipeline
    import loomcli.semantics.evaluate
    import loomcli.semantics.launch
    import loomcli.targets.checks
    import loomcli.targets.records
    import loomcli.text.parser

    loomcli.passes.pipeline.parse_pipeline("default")


# ---------------------------------------------------------------- cache key

KEY_SCHEMA = "loom-compile-key-1"


def ptxas_version() -> str:
    """The version of the ptxas a cubin would be built with ("none" without one)."""
    from loomcli.emit.nvptx.ptxas import find_ptxas

    path = find_ptxas()
    return _ptxas_version(path) if path is not None else "none"


@cache
def _ptxas_version(path: str) -> str:
    from loomcli.emit.nvptx.ptxas import version

    try:
        return version(path)
    except OSError:
        return "unusable"


def cache_key(request: CompileRequest) -> str:
    """The content address of a request's outcome (TOOLCHAIN.md section 10)."""
    from loomcli import __version__
    from loomcli.emit import backend_for
    from loomcli.service.fingerprint import compiler_fingerprint, llvm_version
    from loomcli.targets.profiles import parse_target

    header = request.header()
    del header["path"], header["files"]
    if not request.manifest:  # the names only appear in the manifest
        del header["artifact_name"], header["launch_config_name"]
    profile = parse_target(request.target) if request.target else None
    facts = {
        "schema": KEY_SCHEMA, "loom": __version__, "compiler": compiler_fingerprint(),
        "llvm": llvm_version() if profile is not None and backend_for(profile).llvm else "",
        # NVIDIA's assembler writes the cubin: its version decides the bytes.
        "ptxas": ptxas_version() if request.format == "nvptx-cubin" else "",
        "profile": repr(profile) if profile is not None else "",
        "request": header,
    }
    h = hashlib.sha256(json.dumps(facts, sort_keys=True, separators=(",", ":")).encode())
    h.update(b"\0module\0")
    h.update(request.module)
    return h.hexdigest()


# ---------------------------------------------------------------- cache, then scheduling


class CompileService:
    """Requests in, outcome futures out: the cache is checked before the
    sink (a hit creates no task), identical requests in flight share one
    task, and successful outcomes are stored. Infrastructure failures
    (a crashed worker) become `error` outcomes with exit code 3."""

    def __init__(self, sink: TaskSink, cache: Cache | None = None) -> None:
        self.sink = sink
        self.cache = cache
        self.hits = 0
        self.compiled = 0
        self._inflight: dict[str, Future[CompileOutcome]] = {}
        self._lock = threading.Lock()

    def submit(self, request: CompileRequest, label: str = "") -> Future[CompileOutcome]:
        key = cache_key(request) if self.cache is not None else None
        if key is not None:
            with self._lock:
                shared = self._inflight.get(key)
            if shared is not None:
                return shared
            assert self.cache is not None
            data = self.cache.get(key)
            if data is not None:
                try:
                    outcome = CompileOutcome.decode(data)
                except (ValueError, KeyError, TypeError):
                    outcome = None  # verified bytes we cannot read: a stale layout; compile again
                if outcome is not None and outcome.ok:
                    self.hits += 1
                    done: Future[CompileOutcome] = Future()
                    done.set_result(outcome)
                    return done
        self.compiled += 1
        result: Future[CompileOutcome] = Future()
        if key is not None:
            with self._lock:
                self._inflight[key] = result
        task_future = self.sink.submit(request.task(label))
        task_future.add_done_callback(lambda f: self._finish(f, result, key))
        return result

    def _finish(self, task_future: Future[TaskResult], result: Future[CompileOutcome], key: str | None) -> None:
        task_result = task_future.result()
        if task_result.ok:
            try:
                outcome = CompileOutcome.decode(task_result.value)
            except (ValueError, KeyError, TypeError) as e:
                outcome = CompileOutcome("error", message=f"internal: unreadable compile result: {e}", exit_code=3)
        elif task_result.status == "crashed":
            outcome = CompileOutcome("error", message=f"internal: {task_result.message}", exit_code=3)
        elif task_result.status == "cancelled":
            outcome = CompileOutcome("error", message="interrupted", exit_code=130)
        else:
            outcome = CompileOutcome("error", message=f"internal: {task_result.message}", exit_code=3)
        if key is not None and self.cache is not None and outcome.ok:
            self.cache.put(key, outcome.encode())
        if key is not None:
            with self._lock:
                self._inflight.pop(key, None)
        result.set_result(outcome)
