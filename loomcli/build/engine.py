"""`loom build`: every kernel set of a project, for every target, through
the cache and the worker pool (TOOLCHAIN.md sections 4, 6, 9 and 10).

One item is one kernel set for one target. Its *source key* hashes
everything its bytes depend on (the sources and the sources of the
libraries it uses, the project config, pipeline, roots, target, output
names, loom's own code and LLVM's version), never paths outside the project,
`-j` or the cache state. An item is then, cheapest first:

- up to date: `out-dir/.loom-build.json` records the same key and the files
  on disk still have the recorded sha256 (no parsing, no compiling);
- cached: the cache holds the outcome under the source key (no front end);
- compiled: the set's front end runs once here in the coordinator (parse,
  verify, link against the libraries, bind the config), then each target
  is one `CompileRequest` to the compile service: the request-level cache,
  else a task in the pool.

Outputs are written as they complete, each atomically; the state file is
written last, so a killed build only makes the next one redo work.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from loomcli.build.project import KernelSet, Project, library_closure
from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit import BACKENDS
from loomcli.errors import LoomError, atomic_write
from loomcli.jobs.compile import CompileOutcome, CompileRequest
from loomcli.jobs.pool import TaskEvent

STATE_FILE = ".loom-build.json"
STATE_SCHEMA = 1
SOURCE_KEY_SCHEMA = "loom-build-item-1"


class Progress(Protocol):
    """What a build reports as it goes (see loomcli.build.progress)."""

    def plan(self, targets: list[str], totals: dict[str, int]) -> None: ...

    def item(self, target: str, name: str, state: str) -> None: ...  # up-to-date | cached | compiled | failed

    def started(self, label: str) -> None: ...

    def finished(self, event: TaskEvent) -> None: ...

    def message(self, text: str) -> None: ...  # a line that must not disturb a live display


@dataclass(frozen=True)
class BuildOptions:
    targets: tuple[str, ...] = ()       # replaces [build] targets when given
    out_dir: str | None = None          # replaces [build] out-dir when given (relative to the cwd)
    jobs: int | None = None
    no_cache: bool = False
    keep_going: bool = False
    trace: str | None = None


@dataclass(frozen=True)
class Item:
    kernels: KernelSet
    target: str
    key: str
    folder: str                 # out-dir/<family>-<selector>

    @property
    def label(self) -> str:
        return f"{self.kernels.name} {self.target}"

    @property
    def family(self) -> str:
        return self.target.split(":")[0]

    def files(self) -> dict[str, str]:
        """Output role -> file name."""
        name = self.kernels.name
        return {"artifact": name + BACKENDS[self.family].suffix, "launch_config": f"{name}.launch.loombc",
                "manifest": f"{name}.manifest.json"}


@dataclass
class BuildReport:
    targets: list[str]
    out_dir: str
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # target -> state -> n
    failures: list[str] = field(default_factory=list)                # item labels
    exit_code: int = 0
    outputs: list[str] = field(default_factory=list)                 # out-dir-relative paths, sorted
    pending: list[str] = field(default_factory=list)                 # what this build could not do yet
    dry_run: bool = False

    def count(self, state: str) -> int:
        return sum(c.get(state, 0) for c in self.counts.values())


def build_project(project: Project, options: BuildOptions, progress: Progress,
                  diagnostics: Callable[[list[Diagnostic]], None], warn: Callable[[str], None]) -> BuildReport:
    """Build every kernel set of `project` for every target. Failures are
    reported through `diagnostics` and counted; the report's exit code says
    how the build ended (0, 1 input failed, 3 infrastructure)."""
    from loomcli.jobs.session import compile_session
    from loomcli.targets.profiles import parse_target

    targets = [parse_target(t).name for t in (options.targets or project.targets)]
    if not targets:
        raise LoomError(f"{project.file}: no targets: set [build] targets or pass --target", 2)
    targets = list(dict.fromkeys(targets))
    out_dir = os.path.abspath(options.out_dir) if options.out_dir is not None else project.path(project.out_dir)
    report = BuildReport(targets, out_dir)
    for c in project.commands:
        report.pending.append(f"[[command]] {c.name!r}")
    sources = _SourceReader(project)
    items = [Item(ks, t, _source_key(project, ks, t, sources), os.path.join(out_dir, t.replace(":", "-")))
             for ks in project.kernels for t in targets]
    report.counts = {t: {} for t in targets}
    totals = {t: sum(1 for i in items if i.target == t) for t in targets}
    progress.plan(targets, totals)
    state = _load_state(out_dir)
    todo: list[Item] = []
    for item in items:
        if _up_to_date(item, state):
            _done(report, progress, item, "up-to-date")
        else:
            todo.append(item)
    # Entries of items built elsewhere (other targets) stay; those about to be rebuilt go.
    rebuilding = {_state_name(i) for i in todo}
    new_state: dict[str, Any] = {k: v for k, v in state.items() if k not in rebuilding}
    if not todo:
        if options.trace is not None:
            from loomcli.jobs.session import write_trace

            write_trace(options.trace, [])  # nothing ran: an empty trace, not a stale one
        _finish(report, out_dir, new_state, items)
        return report
    _clean_strays(out_dir)
    sets = list(dict.fromkeys(i.kernels for i in todo))
    with compile_session(options.jobs, len(todo), targets, no_cache=options.no_cache, warn=warn,
                         trace_path=options.trace, on_event=progress.finished,
                         on_start=lambda task, ordinal: progress.started(task.label)) as session:
        if session.dry_run:
            report.dry_run = True
            for item in todo:
                progress.message(f"would build {item.label}")
            return report
        cache = session.cache
        pending: dict[Future[CompileOutcome], Item] = {}
        libraries = _Libraries(project, sources)
        stop = False
        for ks in sets:
            mine = [i for i in todo if i.kernels == ks]
            misses = []
            for item in mine:
                data = cache.get(item.key) if cache is not None else None
                outcome = _decode(data) if data is not None else None
                if outcome is not None and outcome.ok:
                    new_state[_state_name(item)] = _write(item, outcome)
                    _done(report, progress, item, "cached")
                else:
                    misses.append(item)
            if not misses:
                continue
            try:
                module_bytes, roots = _front_end(project, ks, libraries, sources)
            except CompileError as e:
                diagnostics(e.diagnostics)
                for item in misses:
                    _failed(report, progress, item, 1)
                if not options.keep_going:
                    stop = True
                    break
                continue
            for item in misses:
                names = item.files()
                request = CompileRequest(module=module_bytes, target=item.target,
                                         format=BACKENDS[item.family].native_format,
                                         roots=roots, linked=True, pipeline=project.pipeline, launch_config=True,
                                         manifest=True, artifact_name=names["artifact"],
                                         launch_config_name=names["launch_config"],
                                         path=sources.shown(ks.srcs[0]))
                pending[session.service.submit(request, item.label)] = item
            stop = _collect(pending, report, progress, diagnostics, cache, new_state, options, block=False)
            if stop:
                break
        while pending and not stop:
            stop = _collect(pending, report, progress, diagnostics, cache, new_state, options, block=True)
        if stop:
            for future in pending:
                future.cancel()
            raise _Stop(report, new_state, items)
    _finish(report, out_dir, new_state, items)
    return report


class _Stop(Exception):
    """The first failure without --keep-going: leave the session (cancelling the rest)."""

    def __init__(self, report: BuildReport, state: dict[str, Any], items: list[Item]) -> None:
        super().__init__("build stopped")
        self.report = report
        self.state = state
        self.items = items


def run_build(project: Project, options: BuildOptions, progress: Progress,
              diagnostics: Callable[[list[Diagnostic]], None], warn: Callable[[str], None]) -> BuildReport:
    """`build_project`, with the first failure (no --keep-going) ending it cleanly."""
    try:
        return build_project(project, options, progress, diagnostics, warn)
    except _Stop as stop:
        _finish(stop.report, stop.report.out_dir, stop.state, stop.items)
        return stop.report


def _collect(pending: dict[Future[CompileOutcome], Item], report: BuildReport, progress: Progress,
             diagnostics: Callable[[list[Diagnostic]], None], cache: Any, state: dict[str, Any],
             options: BuildOptions, block: bool) -> bool:
    """Write what has completed; True when the build must stop."""
    if not pending:
        return False
    done, _ = wait(list(pending), timeout=None if block else 0, return_when=FIRST_COMPLETED)
    stop = False
    for future in sorted(done, key=lambda f: pending[f].label):
        item = pending.pop(future)
        outcome = future.result()
        if outcome.ok:
            if outcome.diagnostics:
                diagnostics(list(outcome.diagnostics))
            state[_state_name(item)] = _write(item, outcome)
            if cache is not None:
                cache.put(item.key, outcome.encode())
            _done(report, progress, item, "compiled")
            continue
        if outcome.status == "failed":
            diagnostics(list(outcome.diagnostics))
            _failed(report, progress, item, 1)
        else:
            progress.message(f"loom: error: {item.label}: {outcome.message}")
            _failed(report, progress, item, outcome.exit_code or 3)
        stop = stop or not options.keep_going
    return stop


def _done(report: BuildReport, progress: Progress, item: Item, state: str) -> None:
    counts = report.counts[item.target]
    counts[state] = counts.get(state, 0) + 1
    progress.item(item.target, item.kernels.name, state)


def _failed(report: BuildReport, progress: Progress, item: Item, code: int) -> None:
    _done(report, progress, item, "failed")
    report.failures.append(item.label)
    # Infrastructure (3) outranks an input failure (1); an interruption keeps its own code.
    report.exit_code = max(report.exit_code, code) if code != 130 else 130


def _decode(data: bytes) -> CompileOutcome | None:
    try:
        return CompileOutcome.decode(data)
    except (ValueError, KeyError, TypeError):
        return None


# ---------------------------------------------------------------- inputs


class _SourceReader:
    """Project files, read once per build."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.data: dict[str, bytes] = {}

    def read(self, rel: str) -> bytes:
        if rel not in self.data:
            with open(self.project.path(rel), "rb") as f:
                self.data[rel] = f.read()
        return self.data[rel]

    def shown(self, rel: str) -> str:
        from loomcli.frontend import display_path

        return display_path(self.project.path(rel))


def _source_key(project: Project, ks: KernelSet, target: str, sources: _SourceReader) -> str:
    from loomcli import __version__
    from loomcli.jobs.compile import compiler_fingerprint, llvm_version

    h = hashlib.sha256()

    def part(*values: str | bytes) -> None:
        for v in values:
            b = v.encode() if isinstance(v, str) else v
            h.update(len(b).to_bytes(8, "little") + b)

    part(SOURCE_KEY_SCHEMA, __version__, compiler_fingerprint(), llvm_version(), target, project.pipeline,
         json.dumps(project.config, sort_keys=True, default=str), "\0".join(ks.roots), ks.name)
    for rel in ks.srcs:
        part("src", rel, sources.read(rel))
    for lib in library_closure(project, ks.libraries):
        for rel in project.library(lib).srcs:
            part("lib", lib, rel, sources.read(rel))
    return h.hexdigest()


class _Libraries:
    """Each [[library]] merged once into one module, indexed as a link input keyed by its name."""

    def __init__(self, project: Project, sources: _SourceReader) -> None:
        self.project = project
        self.sources = sources
        self.inputs: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        if name not in self.inputs:
            from loomcli.frontend import load_bytes
            from loomcli.link.index import LinkIndex, input_from_module
            from loomcli.link.linker import link

            lib = self.project.library(name)
            items = [input_from_module(load_bytes(self.sources.read(rel), self.sources.shown(rel)),
                                       _stem(rel)) for rel in lib.srcs]
            _unique_keys(items)
            deps = [self.get(d) for d in library_closure(self.project, lib.libraries)]
            index = LinkIndex(tuple(items) + tuple(deps))
            merged = link(index, [], "merge", path=f"{name}")
            self.inputs[name] = input_from_module(merged.module, name, library=True)
        return self.inputs[name]


def _stem(rel: str) -> str:
    return os.path.splitext(os.path.basename(rel))[0]


def _unique_keys(items: list[Any]) -> None:
    seen: dict[str, str] = {}
    for item in items:
        if item.key in seen:
            raise LoomError(f"{seen[item.key]} and {item.path} share the stem `{item.key}` in one set; rename one", 1)
        seen[item.key] = item.path


def _front_end(project: Project, ks: KernelSet, libraries: _Libraries,
               sources: _SourceReader) -> tuple[bytes, tuple[str, ...]]:
    """Parse, verify, link and bind one kernel set; its linked module's bytes and roots."""
    from loomcli.bytecode import write_module
    from loomcli.diagnostics import has_errors
    from loomcli.frontend import load_bytes
    from loomcli.ir.gcpause import gc_paused
    from loomcli.link.index import LinkIndex, input_from_module
    from loomcli.link.linker import link
    from loomcli.passes.bind import bind_module
    from loomcli.pipeline import LinkOptions, collect_bindings, default_roots

    with gc_paused():
        inputs = []
        errors: list[Diagnostic] = []
        for rel in ks.srcs:
            try:
                inputs.append(input_from_module(load_bytes(sources.read(rel), sources.shown(rel)), _stem(rel)))
            except CompileError as e:
                errors += e.diagnostics
        if errors:
            raise CompileError(errors)
        _unique_keys(inputs)
        libs = sorted((libraries.get(n) for n in library_closure(project, ks.libraries)), key=lambda i: i.key)
        index = LinkIndex(tuple(inputs) + tuple(libs))
        roots = list(ks.roots) or default_roots(index)
        result = link(index, roots, "link" if roots else "merge", path=sources.shown(ks.srcs[0]))
        options = LinkOptions(inputs=[], project_config=project.config, project_path=project.file)
        bindings = collect_bindings(options, index)
        warnings = bind_module(result.module, bindings, False, origins=result.origins)
        if has_errors(warnings):
            raise CompileError(warnings)
        return write_module(result.module, keep_debug=True), tuple(roots)


# ---------------------------------------------------------------- outputs and state


def _state_name(item: Item) -> str:
    return f"{item.target.replace(':', '-')}/{item.kernels.name}"


def _write(item: Item, outcome: CompileOutcome) -> dict[str, Any]:
    os.makedirs(item.folder, exist_ok=True)
    names = item.files()
    blobs = {"artifact": outcome.artifact, "launch_config": outcome.launch_config, "manifest": outcome.manifest}
    files = {}
    for role, name in names.items():
        atomic_write(os.path.join(item.folder, name), blobs[role])
        files[name] = hashlib.sha256(blobs[role]).hexdigest()
    return {"key": item.key, "files": files}


def _load_state(out_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(out_dir, STATE_FILE)) as f:
            doc = json.load(f)
        if doc.get("schema") == STATE_SCHEMA and isinstance(doc.get("items"), dict):
            return doc["items"]
    except (OSError, ValueError, AttributeError):
        pass
    return {}


def _up_to_date(item: Item, state: dict[str, Any]) -> bool:
    entry = state.get(_state_name(item))
    if not isinstance(entry, dict) or entry.get("key") != item.key:
        return False
    files = entry.get("files")
    if not isinstance(files, dict) or set(files) != set(item.files().values()):
        return False
    for name, digest in files.items():
        try:
            with open(os.path.join(item.folder, name), "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != digest:
                    return False
        except OSError:
            return False
    return True


def _finish(report: BuildReport, out_dir: str, state: dict[str, Any], items: list[Item]) -> None:
    if state or os.path.isdir(out_dir):
        os.makedirs(out_dir, exist_ok=True)
        doc = {"schema": STATE_SCHEMA, "items": dict(sorted(state.items()))}
        atomic_write(os.path.join(out_dir, STATE_FILE), (json.dumps(doc, indent=1) + "\n").encode())
    report.outputs = sorted(f"{_state_name(i).split('/')[0]}/{f}" for i in items if _state_name(i) in state
                            for f in state[_state_name(i)]["files"])


def _clean_strays(out_dir: str) -> None:
    """Temporary files a killed build left behind (never a finished output)."""
    if not os.path.isdir(out_dir):
        return
    for folder, _, files in os.walk(out_dir):
        for name in files:
            if name.startswith(".loom-") and name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))

