"""The embedding API (TOOLCHAIN.md section 15): `import loomcli as loom`.

Sources, catalogs, targets and compilers are immutable values; a compile
goes through the service's one front end (`loomcli.service.front`, inputs
held in memory) and its one back half (`loomcli.service.compile.produce`),
the code `loom compile`, `loom build` and the frontier run. A source that
does not compile gives a `Result` with `ok == False`; misuse raises
`UsageError`, an infrastructure failure `LoomError` (exit code 3).
Nothing here reads or writes a file but `Source.from_path`.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.errors import LoomError, UsageError
from loomcli.launch.program import Launch  # the evaluator's own result: immutable, str() = the launch-eval line

if TYPE_CHECKING:
    from loomcli.frontier.product import Request as KernelRequest
    from loomcli.launch.program import LaunchFunction
    from loomcli.link.index import LinkInput

__all__ = [
    "Artifact", "CommandResult", "Compiler", "Diagnostic", "Launch", "LaunchProgram", "LinkIndex", "LoomError",
    "Request", "Result", "Source", "Target", "TaskPool", "UsageError", "build_command_product", "targets",
]

_TASK_FUNCTION = "loomcli.api:compile_task"
_U32 = struct.Struct("<I")


# ---------------------------------------------------------------- sources, catalogs, targets


@dataclass(frozen=True)
class Source:
    """Loom text or `.loombc` bytes in memory, with the name diagnostics show."""

    data: bytes
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes) or not isinstance(self.name, str) or not self.name:
            raise UsageError("a Source holds bytes and a non-empty name")

    @classmethod
    def from_text(cls, text: str, name: str = "<memory>.loom") -> Source:
        if not isinstance(text, str):
            raise UsageError(f"Source.from_text takes a str, not {type(text).__name__}")
        return cls(text.encode(), name)

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "<memory>.loombc") -> Source:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise UsageError(f"Source.from_bytes takes bytes, not {type(data).__name__}")
        return cls(bytes(data), name)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> Source:
        from loomcli.files import read_input

        try:
            return cls(read_input(os.fspath(path)), os.fspath(path))
        except OSError as e:
            raise UsageError(f"cannot read {os.fspath(path)}: {e.strerror or e}") from None


@dataclass(frozen=True)
class LinkIndex:
    """A frozen library catalog: sources whose public symbols a compile may
    link. Each source is parsed, verified and indexed once, when the catalog
    is made; compiles sharing it (from any thread) read it and never change
    it (the linker copies what it takes)."""

    sources: tuple[Source, ...]
    _inputs: tuple[LinkInput, ...] = field(repr=False, compare=False)
    _diagnostics: tuple[Diagnostic, ...] = field(repr=False, compare=False)  # why a source did not load

    def __init__(self, sources: Iterable[Source]) -> None:
        items = tuple(sources)
        if not all(isinstance(s, Source) for s in items):
            raise UsageError("LinkIndex takes Source values")
        from loomcli.frontend import load_bytes
        from loomcli.link.index import input_from_module

        inputs, diagnostics = [], []
        for s in items:
            try:
                inputs.append(input_from_module(load_bytes(s.data, s.name), _stem(s.name), library=True))
            except CompileError as e:
                diagnostics += e.diagnostics
        object.__setattr__(self, "sources", items)
        object.__setattr__(self, "_inputs", tuple(inputs))
        object.__setattr__(self, "_diagnostics", tuple(diagnostics))

    def inputs(self) -> tuple[LinkInput, ...]:
        """The indexed libraries; CompileError if a source did not load."""
        if self._diagnostics:
            raise CompileError(list(self._diagnostics))
        return self._inputs


@dataclass(frozen=True)
class Target:
    """An immutable target profile, `family:selector` (`amdgpu:gfx1100`, `spirv:vulkan1.3`, `nvptx:sm_90`)."""

    name: str

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise UsageError(f"Target takes a str, not {type(text).__name__}")
        from loomcli.targets.profiles import parse_target

        object.__setattr__(self, "name", parse_target(text).name)

    @property
    def family(self) -> str:
        return self.name.partition(":")[0]

    def __str__(self) -> str:
        return self.name


def targets() -> tuple[Target, ...]:
    """Every target this compiler emits for."""
    from loomcli.targets.profiles import all_targets

    return tuple(Target(t) for t in all_targets())


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Artifact:
    format: str                 # an output name: spirv-binary, amdgpu-hsaco, launch-config, manifest, ...
    name: str                   # a file name for it: "saxpy.spv"
    data: bytes


_SUFFIX = {"loom-bytecode": ".loombc", "loom-text": ".loom", "launch-config": ".launch.loombc",
           "manifest": ".manifest.json"}


@dataclass(frozen=True)
class Result:
    """What a compile produced: artifacts, or diagnostics saying why not."""

    ok: bool
    diagnostics: tuple[Diagnostic, ...] = ()
    artifacts: Mapping[str, Artifact] = field(default_factory=dict)
    exports: tuple[str, ...] = ()


def _suffix(output: str) -> str:
    from loomcli.emit import FORMATS
    from loomcli.service.compile import STAGE

    if output.startswith(STAGE):  # one back-end stage's bytes: `saxpy.obj` (as `loom compile --dump-stages`)
        return "." + output[len(STAGE):]
    return FORMATS.get(output) or _SUFFIX[output]


# ---------------------------------------------------------------- the compiler


def _target_text(target: Target | str | None) -> str:
    if target is None:
        return ""
    if isinstance(target, Target):
        return target.name
    if isinstance(target, str):
        return Target(target).name
    raise UsageError(f"target takes a Target or str, not {type(target).__name__}")


def _sources(value: Any, what: str) -> tuple[Source, ...]:
    items = (value,) if isinstance(value, Source) else tuple(value)
    if not all(isinstance(s, Source) for s in items):
        raise UsageError(f"{what} takes Source values")
    return items


def _config(config: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    if config is None:
        return ()
    if not isinstance(config, Mapping):
        raise UsageError("config takes a mapping of key -> value")
    from loomcli.launch.program import format_value

    return tuple((str(k).lstrip("@"), v if isinstance(v, str) else format_value(v)) for k, v in config.items())


@dataclass(frozen=True)
class _Job:
    """One compile as plain data: what runs in this process or in a pool worker."""

    sources: tuple[Source, ...]                  # the source, then the config modules
    libraries: LinkIndex | None
    target: str
    roots: tuple[str, ...]
    config: tuple[tuple[str, str], ...]
    require_resolved_config: bool
    outputs: tuple[str, ...]
    pipeline: str
    linked: bool = False

    def run(self) -> Result:
        from loomcli.pipeline import ConfigSources
        from loomcli.service.compile import produce
        from loomcli.service.front import FrontEndOptions, Memory, front_end
        from loomcli.service.front import Source as Input
        from loomcli.service.request import TARGET_FORMATS
        from loomcli.targets.profiles import parse_target

        profile = parse_target(self.target) if self.target else None
        try:
            libraries = self.libraries.inputs() if self.libraries is not None else ()
            inputs = [Input(s.data, s.name, key=_stem(s.name) if i == 0 else f"{_stem(s.name)}.config{i}")
                      for i, s in enumerate(self.sources)]
            config = ConfigSources(flags=tuple(f"{k}={v}" for k, v in self.config))
            options = FrontEndOptions(self.roots, config, self.pipeline, self.require_resolved_config)
            front = front_end(Memory(inputs, libraries, linked=self.linked), options)
            stem = _stem(self.sources[0].name)
            first = next((n for n in self.outputs if n in TARGET_FORMATS), "")
            made = produce(front, profile, self.outputs, stem + _suffix(first) if first else "",
                           stem + _suffix("launch-config") if "launch-config" in self.outputs else "")
        except CompileError as e:
            return Result(False, tuple(e.diagnostics))
        except UsageError:
            raise
        except LoomError as e:
            if e.exit_code in (1, 2):  # the caller's inputs clash (two sources, one key)
                raise UsageError(str(e)) from None
            raise
        artifacts = {n: Artifact(n, stem + _suffix(n), data) for n, data in made.outputs.items()}
        return Result(True, made.warnings, artifacts, made.exports)

    def encode(self) -> tuple[dict[str, Any], bytes]:
        libraries = self.libraries.sources if self.libraries is not None else ()
        blobs = [s.data for s in self.sources + libraries]
        header = {"sources": [s.name for s in self.sources], "libraries": [s.name for s in libraries],
                  "lengths": [len(b) for b in blobs], "target": self.target, "roots": list(self.roots),
                  "config": [list(c) for c in self.config], "require": self.require_resolved_config,
                  "outputs": list(self.outputs), "pipeline": self.pipeline, "linked": self.linked}
        return header, b"".join(blobs)

    @classmethod
    def decode(cls, header: Mapping[str, Any], payload: bytes) -> _Job:
        pos, sources = 0, []
        for name, n in zip(header["sources"] + header["libraries"], header["lengths"]):
            sources.append(Source(payload[pos:pos + n], name))
            pos += n
        k = len(header["sources"])
        libraries = LinkIndex(sources[k:]) if sources[k:] else None  # indexed once, for this job
        return cls(tuple(sources[:k]), libraries, header["target"], tuple(header["roots"]),
                   tuple((a, b) for a, b in header["config"]), header["require"], tuple(header["outputs"]),
                   header["pipeline"], header["linked"])


def _stem(name: str) -> str:
    base = os.path.basename(name)
    for suffix in (".loombc", ".loom"):
        if base.endswith(suffix):
            return base[:-len(suffix)] or "m"
    return os.path.splitext(base)[0] or "m"


class Compiler:
    """A prepared pass program; immutable, so `compile` may run on many threads at once."""

    def __init__(self, pipeline: str = "default") -> None:
        if not isinstance(pipeline, str):
            raise UsageError(f"pipeline takes a str, not {type(pipeline).__name__}")
        from loomcli.passes.pipeline import parse_pipeline

        parse_pipeline(pipeline)  # bad pipeline text is misuse, raised now
        self._pipeline = pipeline

    @property
    def pipeline(self) -> str:
        return self._pipeline

    def job(self, source: Source, *, target: Target | str | None = None, roots: Sequence[str] = (),
            libraries: LinkIndex | None = None, config: Mapping[str, Any] | None = None,
            config_modules: Sequence[Source] = (), require_resolved_config: bool = False,
            outputs: Sequence[str] = ("loom-bytecode",)) -> _Job:
        if not isinstance(source, Source):
            raise UsageError(f"compile takes a Source, not {type(source).__name__}")
        if libraries is not None and not isinstance(libraries, LinkIndex):
            raise UsageError("libraries takes a LinkIndex")
        names = (outputs,) if isinstance(outputs, str) else tuple(outputs)
        from loomcli.service.compile import OUTPUT_NAMES, STAGE

        for name in names:
            if name not in OUTPUT_NAMES and not (isinstance(name, str) and name.startswith(STAGE)):
                raise UsageError(f"unknown output {name!r}; the outputs: {', '.join(OUTPUT_NAMES)}, stage:NAME")
        if not names:
            raise UsageError("outputs is empty")
        text = _target_text(target)
        from loomcli.service.request import MODULE_FORMATS

        if not text and any(n not in MODULE_FORMATS for n in names):
            raise UsageError(f"outputs {', '.join(n for n in names if n not in MODULE_FORMATS)} need a target")
        return _Job((source,) + _sources(config_modules, "config_modules"),
                    libraries, text,
                    tuple("@" + str(r).lstrip("@") for r in roots), _config(config),
                    bool(require_resolved_config), names, self._pipeline)

    def compile(self, source: Source, *, target: Target | str | None = None, roots: Sequence[str] = (),
                libraries: LinkIndex | None = None, config: Mapping[str, Any] | None = None,
                config_modules: Sequence[Source] = (), require_resolved_config: bool = False,
                outputs: Sequence[str] = ("loom-bytecode",)) -> Result:
        """Compile `source` into `outputs`; a source that does not compile is a Result with `ok == False`."""
        return self.job(source, target=target, roots=roots, libraries=libraries, config=config,
                        config_modules=config_modules, require_resolved_config=require_resolved_config,
                        outputs=outputs).run()

    def request_job(self, request: Request, *, target: Target | str | None = None,
                    outputs: Sequence[str] = ("loom-bytecode",)) -> _Job:
        if not isinstance(request, Request):
            raise UsageError(f"compile_request takes a Request, not {type(request).__name__}")
        job = self.job(Source(request.data, request.name + ".loombc"), target=target, roots=request.roots,
                       outputs=outputs)
        return _Job(job.sources, None, job.target, job.roots, (), False, job.outputs, job.pipeline, linked=True)

    def compile_request(self, request: Request, *, target: Target | str | None = None,
                        outputs: Sequence[str] = ("loom-bytecode",)) -> Result:
        """Compile one frontier kernel request (its module is already linked)."""
        return self.request_job(request, target=target, outputs=outputs).run()


def compile_task(header: Mapping[str, Any], payload: bytes, context: object) -> bytes:
    """The pool's task function: a job in, an encoded Result out (no pickle)."""
    try:
        result = _Job.decode(header, payload).run()
    except LoomError as e:
        return _encode_error(e)
    head = {"ok": result.ok, "diagnostics": [asdict(d) for d in result.diagnostics], "exports": list(result.exports),
            "artifacts": [[a.format, a.name, len(a.data)] for a in result.artifacts.values()]}
    text = json.dumps(head, sort_keys=True).encode()
    return _U32.pack(len(text)) + text + b"".join(a.data for a in result.artifacts.values())


def _encode_error(e: LoomError) -> bytes:
    text = json.dumps({"error": str(e), "exit_code": e.exit_code}).encode()
    return _U32.pack(len(text)) + text


def _decode_result(data: bytes) -> Result:
    (n,) = _U32.unpack_from(data, 0)
    head = json.loads(data[4:4 + n])
    if "error" in head:
        raise (UsageError(head["error"]) if head["exit_code"] == 2 else LoomError(head["error"], head["exit_code"]))
    pos, artifacts = 4 + n, {}
    for fmt, name, length in head["artifacts"]:
        artifacts[fmt] = Artifact(fmt, name, data[pos:pos + length])
        pos += length
    return Result(head["ok"], tuple(Diagnostic(**d) for d in head["diagnostics"]), artifacts, tuple(head["exports"]))


# ---------------------------------------------------------------- the task pool


class TaskPool:
    """Compiles in warm worker processes (`loomcli.runtime.pool`): at most
    `max_workers`, fewer where the process may use fewer CPUs."""

    def __init__(self, max_workers: int = 4) -> None:
        if not isinstance(max_workers, int) or isinstance(max_workers, bool) or max_workers < 1:
            raise UsageError("max_workers takes a positive int")
        from loomcli.runtime.pool import WorkerPool
        from loomcli.runtime.tasks import usable_cpus

        self._pool = WorkerPool(min(max_workers, usable_cpus()), preload=("loomcli.api",))
        self._default = Compiler()

    @property
    def worker_count(self) -> int:
        return self._pool.worker_count

    def submit_compile(self, source_or_request: Source | Request, *, compiler: Compiler | None = None,
                       **kwargs: Any) -> Future[Result]:
        """Queue one compile; the future gives its Result, or raises LoomError
        (exit code 3) when the worker itself failed."""
        from loomcli.runtime.tasks import Task

        if compiler is not None and not isinstance(compiler, Compiler):
            raise UsageError("compiler takes a Compiler")
        compiler = compiler or self._default
        if isinstance(source_or_request, Request):
            job = compiler.request_job(source_or_request, **kwargs)
        else:
            job = compiler.job(source_or_request, **kwargs)
        header, payload = job.encode()
        return self._submit(Task(_TASK_FUNCTION, header, payload, job.sources[0].name))

    def _submit(self, task: Any) -> Future[Result]:
        inner = self._pool.submit(task)
        outer: Future[Result] = Future()

        def done(f: Future[Any]) -> None:
            try:
                task = f.result()
                if not task.ok:
                    raise LoomError(f"a compile worker failed: {task.message or task.status}", 3)
                outer.set_result(_decode_result(task.value))
            except LoomError as e:
                outer.set_exception(e)
            except Exception as e:  # a malformed reply is infrastructure too
                outer.set_exception(LoomError(f"a compile worker failed: {e}", 3))

        inner.add_done_callback(done)
        return outer

    def shutdown(self) -> None:
        self._pool.close()

    def __enter__(self) -> TaskPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# ---------------------------------------------------------------- launch programs


class LaunchProgram:
    """A loaded launch-config artifact; no LLVM. Evaluation reads the loaded
    module only, so one program may be shared by many threads."""

    def __init__(self, data: bytes, name: str = "<launch-config>") -> None:
        if not isinstance(data, (bytes, bytearray)):
            raise UsageError(f"LaunchProgram takes bytes, not {type(data).__name__}")
        from loomcli.launch.program import LaunchProgram as Loaded

        try:
            self._program = Loaded.load(bytes(data), name)
        except CompileError as e:
            raise UsageError("; ".join(str(d) for d in e.diagnostics)) from None

    def lookup(self, export: str) -> LaunchFunction:
        try:
            return self._program.lookup(export)
        except CompileError as e:
            raise UsageError("; ".join(str(d) for d in e.diagnostics)) from None

    def invoke(self, fn: LaunchFunction, workload: Sequence[Any]) -> Launch:
        """The launch of `fn` for `workload`; a workload the contract rejects raises UsageError."""
        try:
            return self._program.invoke(fn, list(workload))
        except CompileError as e:
            raise UsageError("; ".join(str(d) for d in e.diagnostics)) from None


# ---------------------------------------------------------------- the frontier


@dataclass(frozen=True)
class Request:
    data: bytes                              # .loombc of the kernel request
    roots: tuple[str, ...]
    bindings: tuple[tuple[int, int], ...]    # (requirement, root): provisional, never in the key
    key: str                                 # content hash of data, roots and route
    route: str                               # "compiled-module"
    name: str                                # "kernel-N"


@dataclass(frozen=True)
class Program:
    symbol: str
    data: bytes                              # .loomcmd
    entry_requirements: tuple[int, ...]


@dataclass(frozen=True)
class Requirement:
    symbol: str
    external: bool


@dataclass(frozen=True)
class CommandResult:
    ok: bool
    diagnostics: tuple[Diagnostic, ...] = ()
    programs: tuple[Program, ...] = ()
    requirements: tuple[Requirement, ...] = ()

    def summary(self, program: int = 0) -> str:
        """`command=run requirements=4 compiled=3 external=1`."""
        p = self.programs[program]
        kinds = [self.requirements[r].external for r in p.entry_requirements]
        return (f"command={p.symbol} requirements={len(kinds)} compiled={kinds.count(False)} "
                f"external={kinds.count(True)}")


def _request(r: KernelRequest) -> Request:
    return Request(r.data, tuple(r.roots), tuple((b.requirement, b.root) for b in r.bindings), r.key,
                   r.route.removeprefix("loom."), r.name)


def build_command_product(source: Source, *, roots: Sequence[str] = (), libraries: LinkIndex | None = None,
                          target: Target | str | None = None, config: Mapping[str, Any] | None = None,
                          spec: Mapping[str, Any] | None = None,
                          request_sink: Callable[[Request], None] | None = None) -> CommandResult:
    """The command bytes and requirements of `source`'s command programs; each
    kernel request goes to `request_sink` as soon as it exists."""
    if not isinstance(source, Source):
        raise UsageError(f"build_command_product takes a Source, not {type(source).__name__}")
    if libraries is not None and not isinstance(libraries, LinkIndex):
        raise UsageError("libraries takes a LinkIndex")
    from loomcli.frontier.product import FrontierOptions
    from loomcli.frontier.product import build_command_product as build
    from loomcli.service.front import Memory
    from loomcli.service.front import Source as Input
    from loomcli.targets.profiles import parse_target

    text = _target_text(target)

    class Sink:
        def publish(self, request: KernelRequest) -> None:
            if request_sink is not None:
                request_sink(_request(request))

    specs = [f"@{str(k).lstrip('@')}={v}" for k, v in (spec or {}).items()]
    flags = [f"{k}={v}" for k, v in _config(config)]
    try:
        libs = libraries.inputs() if libraries is not None else ()
        inputs = Memory((Input(source.data, source.name, key=_stem(source.name)),), libs)
        options = FrontierOptions(source.name, roots=tuple(roots), config=flags, spec=specs,
                                  profile=parse_target(text) if text else None, name=_stem(source.name))
        product = build(options, Sink() if request_sink is not None else None, inputs=inputs)
    except CompileError as e:
        return CommandResult(False, tuple(e.diagnostics))
    programs = tuple(Program(p.symbol, p.data, tuple(p.requirements)) for p in product.programs)
    requirements = tuple(Requirement(r.symbol, r.kind == "external") for r in product.requirements)
    return CommandResult(True, tuple(product.warnings), programs, requirements)
