"""`loom build`: every kernel set of a project, for every target, through
the cache and the worker pool (TOOLCHAIN.md sections 4, 6, 9 and 10).

One item is one kernel set for one target. Its *source key* hashes
everything its bytes depend on (the sources and the sources of the
libraries it uses, the project config, pipeline, roots, target, output
names, loom's own code and LLVM's version), never paths outside the project,
`-j` or the cache state. An item is then, cheapest first:

- up to date: `out-dir/.loom-build.json` records the same key and the files
  on disk still match what it recorded (stat data, else their sha256): no
  parsing, no compiling;
- cached: the cache holds the outcome under the source key (no front end);
- compiled: one task per kernel set goes to the pool with the set's sources
  and the libraries' merged bytecode; the worker runs the set's front end
  once (parse, verify, link, bind the config) and the back half for every
  target the set misses (`loomcli.build.tasks`). Command programs go
  through the frontier's product builder, their kernels through the
  compile service into the same pool.

Outputs are written as they complete, each atomically; the state file is
written last, so a killed build only makes the next one redo work. One
`Build` object owns a build's report, progress display and state.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from loomcli import settings
from loomcli.build.project import CommandSet, KernelSet, Project, library_closure
from loomcli.diagnostics import Diagnostic
from loomcli.emit import BACKENDS
from loomcli.errors import LoomError, atomic_write, write_outputs

if TYPE_CHECKING:  # the compile path is imported only when there is something to compile
    from concurrent.futures import Future

    from loomcli.cache import Cache
    from loomcli.link.index import LinkInput
    from loomcli.runtime.pool import TaskEvent
    from loomcli.runtime.tasks import Header, TaskResult
    from loomcli.service.request import CompileOutcome
    from loomcli.service.session import Session

_Entry = TypeVar("_Entry", "Item", "CommandItem")  # what the build state tracks
StateEntry = dict[str, Any]   # {"key": source key, "files": {name: [sha256, size, mtime_ns]}}
State = dict[str, StateEntry]  # `_state_name(item)` -> its entry
Document = dict[str, Any]     # the state file's JSON: `items` (a State), `inputs` and `compiler` records

STATE_FILE = ".loom-build.json"
STATE_SCHEMA = 3
SOURCE_KEY_SCHEMA = "loom-build-item-2"


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
    jobserver_style: str = "fifo"   # the jobserver served to the workers when make offers none
    werror: bool = False            # -Werror: an item with warnings fails, even one built before


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


@dataclass(frozen=True)
class CommandItem:
    """One [[command]] for one target: its frontier outputs in `folder`."""

    command: CommandSet
    target: str
    key: str
    folder: str                 # out-dir/<family>-<selector>/<name>

    @property
    def label(self) -> str:
        return f"command {self.command.name} {self.target}"


@dataclass
class BuildReport:
    targets: list[str]
    out_dir: str
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # target -> state -> n
    failures: list[str] = field(default_factory=list)                # item labels
    exit_code: int = 0
    outputs: list[str] = field(default_factory=list)                 # out-dir-relative paths, sorted
    dry_run: bool = False

    def count(self, state: str) -> int:
        return sum(c.get(state, 0) for c in self.counts.values())


class Build:
    """One `loom build`: the plan (every item and its source key, from the
    state the last build left) and then what happens to it, in one object
    that owns the report, the progress display, the state to record and the
    compile tasks in flight. Failures are reported through `diagnostics` and
    counted; the report's exit code says how the build ended (0, 1 input
    failed, 3 infrastructure)."""

    def __init__(self, project: Project, options: BuildOptions, progress: Progress,
                 diagnostics: Callable[[list[Diagnostic]], None], warn: Callable[[str], None]) -> None:
        from loomcli.targets.profiles import parse_target

        targets = list(dict.fromkeys(parse_target(t).name for t in (options.targets or project.targets)))
        if not targets:
            raise LoomError(f"{project.file}: no targets: set [build] targets or pass --target", 2)
        self.project, self.options, self.progress = project, options, progress
        self.diagnostics, self.warn = diagnostics, warn
        self.out_dir = os.path.abspath(options.out_dir) if options.out_dir is not None \
            else project.path(project.out_dir)
        self.report = BuildReport(targets, self.out_dir, counts={t: {} for t in targets})
        self.recorded = _load_state(self.out_dir)
        # What the state file will record: every entry it holds (items of
        # other targets included) until an item is rebuilt or restated.
        self.state: State = dict(self.recorded.get("items", {}))
        self.sources = _SourceReader(project, self.recorded)
        self.items = [Item(ks, t, _source_key(project, ks, t, self.sources), self._folder(t))
                      for ks in project.kernels for t in targets]
        self.commands = [CommandItem(c, t, _command_key(project, c, t, self.sources),
                                     os.path.join(self._folder(t), c.name))
                         for c in project.commands for t in targets]
        self.cache: Cache | None = None
        self._pending: dict[Future[TaskResult], list[Item]] = {}
        # Each pending task's future once it is done: waiting on all of them
        # at every collection (`concurrent.futures.wait`) was quadratic.
        self._finished: SimpleQueue[Future[TaskResult]] = SimpleQueue()

    def _folder(self, target: str) -> str:
        return os.path.join(self.out_dir, target.replace(":", "-"))

    @property
    def entries(self) -> list[Item | CommandItem]:
        return [*self.items, *self.commands]

    @property
    def stopped(self) -> bool:
        """The first failure ends a build without --keep-going."""
        return bool(self.report.failures) and not self.options.keep_going

    def run(self) -> BuildReport:
        """Every item the cheapest way: up to date, cached, else compiled."""
        targets = self.report.targets
        self.progress.plan(targets, {t: sum(1 for i in self.entries if i.target == t) for t in targets})
        todo, commands_todo = self._stale(self.items), self._stale(self.commands)
        # Also when all is up to date: a build killed between naming a
        # temporary file and renaming it (the state file, the no-op record,
        # an output of an item that is current again) left it there.
        _clean_strays(self.out_dir)
        if todo or commands_todo:
            from loomcli.cache import open_cache

            self.cache = open_cache(self.options.no_cache, warn=self.warn)
            # Cache before scheduling: every hit is published here, so a build
            # whose stale items all hit opens no compile session (no pool, no
            # served jobserver, no compile imports). `make -n` publishes nothing.
            if self.cache is not None and not _dry_run():
                todo, commands_todo = self._publish_hits(todo), self._publish_hits(commands_todo)
        if todo or commands_todo:
            if not self._compile(todo, commands_todo):
                return self.report  # make -n: nothing is written
        else:
            if self.cache is not None:
                self.cache.record_totals()
            if self.options.trace is not None:
                from loomcli.service.session import write_trace

                write_trace(self.options.trace, [])  # nothing ran: an empty trace, not a stale one
        return self.finish()

    def _stale(self, entries: Sequence[_Entry]) -> list[_Entry]:
        """The entries to build; the others are reported up to date (their
        state entry restated when their outputs' stat data changed)."""
        out = []
        for entry in entries:
            verified = _up_to_date(entry, self.state)
            if verified is not None and verified.get("warned") and self.options.werror:
                verified = None  # its warnings are errors now: it fails as a build that compiled it would
            if verified is None:
                self.state.pop(_state_name(entry), None)
                out.append(entry)
            else:
                self.state[_state_name(entry)] = verified
                self._done(entry, "up-to-date")
        return out

    def _publish_hits(self, entries: Sequence[_Entry]) -> list[_Entry]:
        """Publish the entries the cache holds; the misses."""
        assert self.cache is not None
        misses = []
        for entry in entries:
            hit = _from_cache(entry, self.cache)
            if hit is None:
                misses.append(entry)
            elif self._warned(entry, hit):  # a hit replays the warnings, as `loom compile`'s does
                self.state[_state_name(entry)] = self._publish_hit(entry, hit)
                self._done(entry, "cached")
        return misses

    def _publish_hit(self, entry: Item | CommandItem, hit: CompileOutcome | dict[str, bytes]) -> StateEntry:
        if isinstance(entry, CommandItem):
            assert isinstance(hit, dict)
            return _publish(entry, hit)
        assert not isinstance(hit, dict)
        return _state_entry(_write(entry, hit), hit.diagnostics)

    # ------------------------------------------------------------ compiling

    def _compile(self, todo: list[Item], commands_todo: list[CommandItem]) -> bool:
        """Compile what the cache missed in one session; False: a dry run (`make -n`)."""
        from loomcli.runtime.pool import resolve_jobs
        from loomcli.service.session import compile_session

        sets = list(dict.fromkeys(i.kernels for i in todo))
        hint = len(sets) + (resolve_jobs(self.options.jobs) if commands_todo else 0)
        with compile_session(self.options.jobs, hint, self.report.targets, no_cache=self.cache is None,
                             cache=self.cache, warn=self.warn, trace_path=self.options.trace,
                             on_event=self.progress.finished,
                             on_start=lambda task, ordinal: self.progress.started(task.label),
                             preload=("loomcli.build.tasks",), jobserver_style=self.options.jobserver_style) as session:
            if session.dry_run:
                self.report.dry_run = True
                for label in [i.label for i in todo] + [c.label for c in commands_todo]:
                    self.progress.message(f"would build {label}")
                return False
            self._submit_sets(session, sets, todo)
            # Command programs are built here while the pool compiles the kernel
            # sets; their kernel requests join the same pool through the service.
            for command in commands_todo:
                if self.stopped:
                    break
                self._build_command(command, session)
                self._collect(block=False)
            while self._pending and not self.stopped:
                self._collect(block=True)
            if self.stopped:
                raise _Stop  # leave the session, cancelling what is still queued
        return True

    def _submit_sets(self, session: Session, sets: list[KernelSet], todo: list[Item]) -> None:
        """One task per kernel set, for every target it misses, collecting what is done meanwhile."""
        from loomcli.build.tasks import TASK_FUNCTION
        from loomcli.runtime.tasks import Task

        libraries = _Libraries(self.project, self.sources)
        misses_of: dict[str, list[Item]] = {}
        for item in todo:
            misses_of.setdefault(item.kernels.name, []).append(item)
        for ks in sets:
            if self.stopped:
                return
            misses = misses_of[ks.name]
            if not self._pending:
                session.warm()  # workers start while the coordinator prepares the rest
            try:
                header, payload = _task_input(self.project, ks, misses, libraries, self.sources)
            except _LibraryFailed as e:
                if e.first:
                    self._report(e.outcome, f"[[library]] {e.name!r}")
                for item in misses:
                    self._failed(item, _exit_code(e.outcome))
                continue
            label = f"{ks.name} {','.join(i.target for i in misses)}"
            future = session.sink.submit(Task(TASK_FUNCTION, header, payload, label))
            self._pending[future] = misses
            future.add_done_callback(self._finished.put)
            self._collect(block=False)

    def _collect(self, block: bool) -> None:
        """Publish what has completed (waiting for the first when `block`)."""
        if not self._pending:
            return
        done = []
        try:
            done.append(self._finished.get(block))
            while True:
                done.append(self._finished.get_nowait())
        except Empty:
            pass
        for future in sorted(done, key=lambda f: self._pending[f][0].label):
            self._kernel_set_done(self._pending.pop(future), future.result())

    def _kernel_set_done(self, items: list[Item], result: TaskResult) -> None:
        from loomcli.build.tasks import decode_reply
        from loomcli.service.request import CompileOutcome

        if not result.ok:
            code = 130 if result.status == "cancelled" else 3
            self.progress.message(f"loom: error: {'internal: ' if code == 3 else ''}{items[0].kernels.name}: "
                                  f"{result.message}")
            for item in items:
                self._failed(item, code)
            return
        try:
            front_ok, outcomes = decode_reply(result.value)
        except ValueError as e:
            front_ok, outcomes = False, [CompileOutcome("error", message=f"internal: {e}", exit_code=3)]
        if not front_ok:  # the set's front end failed: one outcome stands for every target
            self._report(outcomes[0], items[0].kernels.name)
            for item in items:
                self._failed(item, _exit_code(outcomes[0]))
            return
        for item, outcome in zip(items, outcomes):
            if not outcome.ok:
                self._report(outcome, item.label)
                self._failed(item, _exit_code(outcome))
                continue
            if self.cache is not None:
                self.cache.put(item.key, outcome.encode())  # whatever -Werror makes of its warnings
            if self._warned(item, outcome):
                self.state[_state_name(item)] = _state_entry(_write(item, outcome), outcome.diagnostics)
                self._done(item, "compiled")

    def _build_command(self, item: CommandItem, session: Session) -> None:
        """One [[command]] for one target (TOOLCHAIN.md sections 7 and 9) that
        the cache missed: the product built here with its kernel requests
        compiled through the session's service."""
        from loomcli.diagnostics import CompileError
        from loomcli.frontier import FrontierOptions, build_command_product
        from loomcli.frontier.compiling import RequestCompiler
        from loomcli.frontier.outputs import product_files
        from loomcli.targets.profiles import parse_target

        project, command = self.project, item.command
        srcs = [project.path(rel) for rel in command.srcs]
        libraries = [project.path(rel) for lib in library_closure(project, command.libraries)
                     for rel in project.library(lib).srcs]
        profile = parse_target(item.target)
        options = FrontierOptions(input=srcs[0], libraries=[*srcs[1:], *libraries], roots=list(command.roots),
                                  profile=profile, project_config=project.config, name=command.name)
        try:
            compiler = RequestCompiler(session.service, profile, project.pipeline)
            try:
                product = build_command_product(options, compiler)
            except CompileError:
                compiler.discard()  # provisional: the children finish (and are cached), nothing binds
                raise
            compiled = compiler.finish(product)
        except CompileError as e:
            self._say(e.diagnostics)
            self._failed(item, 1)
            return
        except LoomError as e:
            self.progress.message(f"loom: error: {item.label}: {e}")
            self._failed(item, e.exit_code)
            return
        files = product_files(product, compiled=compiled.files, bindings=compiled.bindings)
        if session.cache is not None:
            session.cache.put(item.key, _encode_files(files))
        warnings = (*product.warnings, *compiled.warnings)
        if self._warned(item, warnings):
            self.state[_state_name(item)] = _state_entry(_publish(item, files), warnings)
            self._done(item, "compiled")

    # ------------------------------------------------------------ reporting

    def _warned(self, item: Item | CommandItem, said: CompileOutcome | dict[str, bytes] | Sequence[Diagnostic]) -> bool:
        """Report what an item that built said (an outcome's diagnostics; a
        command's files from the cache say nothing); False when -Werror made
        its warnings errors: the item failed (exit 1), its outputs are not
        published."""
        from loomcli.service.request import CompileOutcome

        if isinstance(said, dict):
            return True
        if self._say(said.diagnostics if isinstance(said, CompileOutcome) else said):
            return True
        self._failed(item, 1)
        return False

    def _say(self, diagnostics: Sequence[Diagnostic]) -> bool:
        """Print diagnostics; False when -Werror made warnings among them
        errors (printed as such)."""
        from loomcli.diagnostics import CompileError

        if not diagnostics:
            return True
        try:
            self.diagnostics(list(diagnostics))
        except CompileError as e:
            self.diagnostics(list(e.diagnostics))  # all errors now: nothing left to raise
            return False
        return True

    def _report(self, outcome: CompileOutcome, what: str) -> None:
        if outcome.status == "failed":
            self._say(outcome.diagnostics)
        else:
            self.progress.message(f"loom: error: {what}: {outcome.message}")

    def _done(self, item: Item | CommandItem, state: str) -> None:
        counts = self.report.counts[item.target]
        counts[state] = counts.get(state, 0) + 1
        self.progress.item(item.target, item.kernels.name if isinstance(item, Item)
                           else f"command {item.command.name}", state)

    def _failed(self, item: Item | CommandItem, code: int) -> None:
        self._done(item, "failed")
        self.report.failures.append(item.label)
        # Infrastructure (3) outranks an input failure (1); an interruption keeps its own code.
        self.report.exit_code = max(self.report.exit_code, code) if code != 130 else 130

    # ------------------------------------------------------------ the state file and the no-op record

    def finish(self) -> BuildReport:
        """Write the state file (only when it changes: a no-op build writes
        nothing) and the no-op record, and list the outputs."""
        out_dir, state = self.out_dir, self.state
        if state or os.path.isdir(out_dir):
            doc = {"schema": STATE_SCHEMA, **self.sources.record(), "items": dict(sorted(state.items()))}
            if doc != self.recorded:
                os.makedirs(out_dir, exist_ok=True)
                # Compact: json's C encoder writes only without indent (the file is bookkeeping, not for people).
                atomic_write(os.path.join(out_dir, STATE_FILE),
                             (json.dumps(doc, separators=(",", ":")) + "\n").encode(), own=True)
        self._write_noop_record(self._noop_record())
        self.report.outputs = sorted(f"{i.folder[len(out_dir) + 1:].replace(os.sep, '/')}/{f}"
                                     for i in self.entries if _state_name(i) in state
                                     for f in state[_state_name(i)]["files"])
        return self.report

    def _write_noop_record(self, data: bytes | None) -> None:
        """Write `out-dir/.loom-build.noop` when its bytes change; remove it when there is none."""
        from loomcli.build.noop import NOOP_FILE

        path = os.path.join(self.out_dir, NOOP_FILE)
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        elif _read_bookkeeping(path) != data:
            atomic_write(path, data, own=True)

    def _noop_record(self) -> bytes | None:
        """The stamps that let the same command, run again, see without parsing
        anything that it would do nothing (loomcli.build.noop). Only a build
        that ended with every item built and every stamp old enough to be
        trusted has them."""
        from loomcli import __version__
        from loomcli.build import noop
        from loomcli.service.fingerprint import llvm_version_stamp

        project, sources, state, entries = self.project, self.sources, self.state, self.entries
        llvm = llvm_version_stamp()
        folders = [(folder, stamp) for folder, stamp in project.folder_stamps if stamp is not None]
        if (self.report.failures or not entries or any(_state_name(i) not in state for i in entries)
                or set(sources.file_digests) != set(sources.stamps) or len(folders) != len(project.folder_stamps)
                or sources.code_stamps is None or llvm is None or project.file_stamp is None):
            return None
        stamps = [(project.file_path, project.file_stamp), *folders,
                  *((project.path(rel), recorded[1:]) for rel, recorded in sorted(sources.stamps.items())),
                  *sources.code_stamps, llvm]
        state_file = os.path.join(self.out_dir, STATE_FILE)
        st = os.stat(state_file)
        outputs = [(state_file, st.st_size, st.st_mtime_ns)]
        for item in entries:
            for name, (_, size, mtime) in sorted(state[_state_name(item)]["files"].items()):
                outputs.append((os.path.join(item.folder, name), size, mtime))
        selection = noop.Selection(project.file_path, project.root, self.out_dir, self.options.out_dir is not None,
                                   self.options.targets)
        summary = noop.Summary(project.name, project.version, len(entries), len(self.report.targets))
        return noop.encode(selection, summary, __version__, llvm[0], stamps, outputs)


class _Stop(Exception):
    """The first failure without --keep-going: leave the session (cancelling the rest)."""


def run_build(project: Project, options: BuildOptions, progress: Progress,
              diagnostics: Callable[[list[Diagnostic]], None], warn: Callable[[str], None]) -> BuildReport:
    """Build every kernel set of `project` for every target, with the first
    failure (no --keep-going) ending it cleanly, and SIGTERM taken as Ctrl-C
    from the first step (publishing cache hits happens before any compile
    session)."""
    from loomcli.runtime.interrupts import sigterm_as_interrupt

    with sigterm_as_interrupt():
        build = Build(project, options, progress, diagnostics, warn)
        try:
            return build.run()
        except _Stop:
            return build.finish()


def _dry_run() -> bool:
    from loomcli.runtime.spawn import parse_makeflags

    return parse_makeflags(settings.makeflags()).dry_run


def _exit_code(outcome: CompileOutcome) -> int:
    """A failed outcome's exit code: 1 for the input's fault, else its own (3 by default)."""
    return 1 if outcome.status == "failed" else outcome.exit_code or 3


def _from_cache(item: Item | CommandItem, cache: Cache) -> CompileOutcome | dict[str, bytes] | None:
    """What the cache holds for the item: a kernel set's outcome, a
    command's files; None for a miss (an entry that does not decode is one
    too, and the rebuild overwrites it)."""
    data = cache.get(item.key)
    if data is None:
        return None
    if isinstance(item, CommandItem):
        return _decode_files(data)
    outcome = _decode(data)
    return outcome if outcome is not None and outcome.ok else None


def _state_entry(entry: StateEntry, diagnostics: Sequence[Diagnostic]) -> StateEntry:
    """An item's state entry, marked when its outputs came with warnings (a
    later -Werror build then builds it again, and fails)."""
    if any(d.severity == "warning" for d in diagnostics):
        entry["warned"] = True
    return entry


def _task_input(project: Project, ks: KernelSet, misses: list[Item], libraries: _Libraries,
                sources: _SourceReader) -> tuple[Header, bytes]:
    """The kernel-set task's header and payload (loomcli.build.tasks)."""
    srcs = [sources.read(rel) for rel in ks.srcs]
    libs = [libraries.bytecode(name) for name in library_closure(project, ks.libraries)]
    header = {
        "set": ks.name, "srcs": [sources.shown(rel) for rel in ks.srcs], "roots": list(ks.roots),
        "pipeline": project.pipeline, "config": project.config, "project_file": project.file,
        "config_lines": project.config_lines,
        "libraries": [[name, digest] for name, digest, _ in libs],
        "lengths": [len(b) for b in srcs] + [len(data) for _, _, data in libs],
        "targets": [[i.target, BACKENDS[i.family].native_format, i.files()["artifact"], i.files()["launch_config"]]
                    for i in misses],
    }
    return header, b"".join(srcs) + b"".join(data for _, _, data in libs)


_FILES_MAGIC = b"LOOMFILES1\n"


def _encode_files(files: dict[str, bytes]) -> bytes:
    """A folder's files as one cache entry: names and lengths in JSON, then the bytes."""
    names = sorted(files)
    head = json.dumps([[n, len(files[n])] for n in names]).encode()
    return _FILES_MAGIC + len(head).to_bytes(4, "little") + head + b"".join(files[n] for n in names)


def _decode_files(data: bytes) -> dict[str, bytes] | None:
    try:
        if not data.startswith(_FILES_MAGIC):
            return None
        pos = len(_FILES_MAGIC)
        n = int.from_bytes(data[pos:pos + 4], "little")
        entries = json.loads(data[pos + 4:pos + 4 + n])
        pos += 4 + n
        files = {}
        for name, length in entries:
            if not isinstance(name, str) or "/" in name or name.startswith(".") or not isinstance(length, int):
                return None
            files[name] = data[pos:pos + length]
            pos += length
        return files if pos == len(data) else None
    except (ValueError, TypeError):
        return None


def _publish(item: CommandItem, files: dict[str, bytes]) -> StateEntry:
    """Publish a command's outputs as one set (`_publish_set`)."""
    return _publish_set(item.folder, item.key, files)


def _command_key(project: Project, command: CommandSet, target: str, sources: _SourceReader) -> str:
    """A [[command]]'s content key: its sources, its libraries', the config, roots, name and target."""
    return sources.key("loom-build-command-2", command.srcs, command.libraries, command.roots, command.name, target)


def _decode(data: bytes) -> CompileOutcome | None:
    from loomcli.service.request import CompileOutcome

    try:
        return CompileOutcome.decode(data)
    except (ValueError, KeyError, TypeError):
        return None


# ---------------------------------------------------------------- inputs


class _SourceReader:
    """Project files and loom's own identity, each read or hashed at most once
    per build, with the stat fast path of a no-op build: a file whose stat
    stamp (`loomcli.service.fingerprint.stat_stamp`: size, mtime, ctime, inode,
    recorded only once the file is old enough to be trusted) equals the one
    the state file recorded beside its sha256 is not read; any other file is
    read and hashed. Keys hash these content digests, never stat data, so
    stat data decides only *whether* to hash, not what a key is."""

    def __init__(self, project: Project, recorded: Document | None = None) -> None:
        import time

        self.project = project
        self.recorded = recorded if recorded is not None else {}
        self.now_ns = time.time_ns()
        self.data: dict[str, bytes] = {}
        self.file_digests: dict[str, str] = {}
        self.stamps: dict[str, list[Any]] = {}   # rel -> [sha256, *stamp] to record for the next build
        self.digests: dict[str, str] = {}
        self.compiler_record: list[str] | None = None
        self.code_stamps: list[tuple[str, list[int]]] | None = None   # loom's code, as the key saw it
        self._root_shown: str | None = None  # the project folder's display path ("": shown file by file)

    def compiler(self) -> tuple[str, str]:
        """(loom's code fingerprint, LLVM's version), from the recorded
        fingerprint while the code files' stat stamps are unchanged."""
        from loomcli.service.fingerprint import code_stamps, compiler_fingerprint, compiler_stamp, llvm_version

        if "compiler" not in self.digests:
            self.code_stamps = code_stamps()
            stamp = compiler_stamp(self.code_stamps)
            known = self.recorded.get("compiler")
            if stamp is not None and isinstance(known, list) and len(known) == 2 and known[0] == stamp:
                fingerprint = str(known[1])
            else:
                fingerprint = compiler_fingerprint()
            self.compiler_record = [stamp, fingerprint] if stamp is not None else None
            self.digests["compiler"] = fingerprint
        return self.digests["compiler"], llvm_version()

    def set_digest(self, ks: KernelSet) -> str:
        """Everything a set's outputs depend on but the target: its sources and
        those of every library it uses, the project config, pipeline, roots,
        name, loom's version and code, and LLVM's version."""
        if ks.name not in self.digests:
            self.digests[ks.name] = self.key(SOURCE_KEY_SCHEMA, ks.srcs, ks.libraries, ks.roots, ks.name)
        return self.digests[ks.name]

    def key(self, schema: str, srcs: tuple[str, ...], libraries: tuple[str, ...], roots: tuple[str, ...],
            name: str, *extra: str) -> str:
        from loomcli import __version__

        h = hashlib.sha256()

        def part(*values: str | bytes) -> None:
            for v in values:
                b = v.encode() if isinstance(v, str) else v
                h.update(len(b).to_bytes(8, "little") + b)

        project = self.project
        part(schema, __version__, *self.compiler(), project.pipeline,
             json.dumps(project.config, sort_keys=True, default=str), "\0".join(roots), name, *extra)
        for rel in srcs:
            part("src", rel, self.digest(rel))
        for lib in library_closure(project, libraries):
            for rel in project.library(lib).srcs:
                part("lib", lib, rel, self.digest(rel))
        return h.hexdigest()

    def digest(self, rel: str) -> str:
        """The sha256 of a project file: the recorded one while its stat stamp holds, else hashed now."""
        if rel not in self.file_digests:
            from loomcli.service.fingerprint import stat_stamp

            stamp = stat_stamp(os.stat(self.project.path(rel)), self.now_ns)
            known = self.recorded.get("inputs", {}).get(rel)
            if stamp is not None and isinstance(known, list) and known[1:] == stamp:
                digest = str(known[0])
            else:
                digest = hashlib.sha256(self.read(rel)).hexdigest()
            self.file_digests[rel] = digest
            if stamp is not None:
                self.stamps[rel] = [digest, *stamp]
        return self.file_digests[rel]

    def read(self, rel: str) -> bytes:
        """The bytes of a project file, read once. A file that no longer has the
        content its key was computed from (edited during the build) stops the
        build rather than publish outputs under a key that does not describe them."""
        if rel not in self.data:
            from loomcli.files import read_file

            self.data[rel] = read_file(self.project.path(rel), shown=lambda: self.shown(rel))  # 64 MiB, regular files
            known = self.file_digests.get(rel)
            if known is not None and hashlib.sha256(self.data[rel]).hexdigest() != known:
                raise LoomError(f"{self.shown(rel)}: changed during the build; build again", 1)
        return self.data[rel]

    def record(self) -> Document:
        """What the state file keeps for the next build's fast path."""
        doc: Document = {"inputs": dict(sorted(self.stamps.items()))}
        if self.compiler_record is not None:
            doc["compiler"] = self.compiler_record
        return doc

    def shown(self, rel: str) -> str:
        """`display_path` of the project file `rel` (a normalized path
        inside the project): the project folder's, made once, and `rel`,
        unless the working folder is inside the project (then a file may be
        shown relative to it)."""
        from loomcli.files import display_path  # not loomcli.frontend: a no-op build imports no IR

        if self._root_shown is None:
            root = display_path(self.project.root)
            absolute = os.path.abspath(self.project.root)
            inside = os.path.isabs(root) and (os.getcwd() + os.sep).startswith(absolute.rstrip(os.sep) + os.sep)
            self._root_shown = "" if inside or root == "/" else root
        if not self._root_shown:
            return display_path(self.project.path(rel))
        return rel if self._root_shown == "." else f"{self._root_shown}/{rel}"


def _source_key(project: Project, ks: KernelSet, target: str, sources: _SourceReader) -> str:
    """The item's content key: the set's digest (computed once) and the target."""
    return hashlib.sha256(f"{sources.set_digest(ks)}\0{target}".encode()).hexdigest()


class _Libraries:
    """Each [[library]] merged once into one module, indexed as a link input keyed by its name."""

    def __init__(self, project: Project, sources: _SourceReader) -> None:
        self.project = project
        self.sources = sources
        self.inputs: dict[str, LinkInput] = {}
        self.encoded: dict[str, tuple[str, str, bytes]] = {}
        self.failed: dict[str, CompileOutcome] = {}

    def get(self, name: str) -> LinkInput:
        if name not in self.inputs:
            from loomcli.build.tasks import source_key
            from loomcli.frontend import load_bytes
            from loomcli.link.index import LinkIndex, input_from_module
            from loomcli.link.linker import link
            from loomcli.service.front import check_unique_keys

            lib = self.project.library(name)
            items = [input_from_module(load_bytes(self.sources.read(rel), self.sources.shown(rel)),
                                       source_key(rel)) for rel in lib.srcs]
            check_unique_keys(items)
            deps = [self.get(d) for d in library_closure(self.project, lib.libraries)]
            index = LinkIndex(tuple(items) + tuple(deps))
            merged = link(index, [], "merge", path=f"{name}")
            self.inputs[name] = input_from_module(merged.module, name, library=True)
        return self.inputs[name]

    def bytecode(self, name: str) -> tuple[str, str, bytes]:
        """(name, content digest, bytecode) of a library merged with the
        libraries it uses. A library that fails raises `_LibraryFailed`
        (its diagnostics are reported once, however many sets use it)."""
        if name in self.failed:
            raise _LibraryFailed(name, self.failed[name], first=False)
        if name not in self.encoded:
            from loomcli.bytecode import write_module
            from loomcli.service.request import CompileOutcome, outcome_or_failure

            def merged() -> CompileOutcome:
                data = write_module(self.get(name).module(), keep_debug=True)
                self.encoded[name] = (name, hashlib.sha256(data).hexdigest(), data)
                return CompileOutcome("ok")

            outcome = outcome_or_failure(merged)
            if not outcome.ok:
                self.failed[name] = outcome
                raise _LibraryFailed(name, outcome, first=True)
        return self.encoded[name]


class _LibraryFailed(Exception):
    def __init__(self, name: str, outcome: CompileOutcome, first: bool) -> None:
        super().__init__(name)
        self.name = name
        self.outcome = outcome
        self.first = first


# ---------------------------------------------------------------- outputs and state


def _state_name(item: Item | CommandItem) -> str:
    if isinstance(item, CommandItem):
        return f"{item.target.replace(':', '-')}/{item.command.name}/"
    return f"{item.target.replace(':', '-')}/{item.kernels.name}"


def _write(item: Item, outcome: CompileOutcome) -> StateEntry:
    """Publish a kernel set's code object, launch config and manifest as one set."""
    names = item.files()
    blobs = {"artifact": outcome.artifact, "launch_config": outcome.launch_config, "manifest": outcome.manifest}
    return _publish_set(item.folder, item.key, {names[role]: blobs[role] for role in names})


def _publish_set(folder: str, key: str, files: dict[str, bytes]) -> StateEntry:
    """Publish one item's files as a set, as `loom compile` publishes its
    outputs (`write_outputs`): each written in full where nobody sees it,
    then all put in place one after the other, with Ctrl-C and SIGTERM held
    off meanwhile, so a failure (a full disk) or an interruption leaves the
    old set whole. A kill can only land between two renames; then the
    state file, which records each file's sha256 only once the whole set is
    out, does not vouch for the mix and the next build redoes the item.
    Returns the item's state entry."""
    os.makedirs(folder, exist_ok=True)
    names = sorted(files)
    paths = [os.path.join(folder, name) for name in names]
    write_outputs([(path, files[name]) for path, name in zip(paths, names)], distinct=True)
    recorded = {}
    for path, name in zip(paths, names):
        st = os.stat(path)
        recorded[name] = [hashlib.sha256(files[name]).hexdigest(), st.st_size, st.st_mtime_ns]
    return {"key": key, "files": recorded}


def _load_state(out_dir: str) -> Document:
    """The state file's document (`items`, and the `inputs` and `compiler`
    records of the stat fast path); empty when missing or of another schema."""
    try:
        doc = json.loads(_read_bookkeeping(os.path.join(out_dir, STATE_FILE)) or b"null")
        if (doc.get("schema") == STATE_SCHEMA and isinstance(doc.get("items"), dict)
                and isinstance(doc.get("inputs", {}), dict)):
            return dict(doc)
    except (OSError, ValueError, AttributeError):
        pass
    return {}


# The state file and the no-op record are loom's own, but anything in the
# out-dir may have been replaced: read only as regular files, without
# blocking, up to this size (far above any project's).
MAX_BOOKKEEPING_BYTES = 64 << 20


def _read_bookkeeping(path: str) -> bytes | None:
    """The bytes of a state or record file; None when it is missing, not a
    regular file or too large (the build then starts from nothing)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BOOKKEEPING_BYTES:
            return None
        data = f.read(MAX_BOOKKEEPING_BYTES + 1)
    return data if len(data) <= MAX_BOOKKEEPING_BYTES else None


def _up_to_date(item: Item | CommandItem, state: State) -> StateEntry | None:
    """The item's state entry if the state records this key and every output
    is still what was written: the same size and mtime (as make and ninja
    trust), else the same sha256. An output vouched for by its sha256 gets
    its new size and mtime in a new entry, so the next build trusts its stat
    data again (as ninja's restat). None: the item must be built."""
    entry = state.get(_state_name(item))
    if not isinstance(entry, dict) or entry.get("key") != item.key:
        return None
    files = entry.get("files")
    if not isinstance(files, dict) or not files:
        return None
    if isinstance(item, Item) and set(files) != set(item.files().values()):
        return None
    restat: dict[str, list[Any]] = {}
    for name, recorded in files.items():
        path = os.path.join(item.folder, name)
        try:
            digest, size, mtime = recorded
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:  # a link, a FIFO, another file: rebuild
                return None
            if st.st_mtime_ns == mtime:
                continue
            if _file_digest(path, size) != digest:
                return None
            restat[name] = [digest, st.st_size, st.st_mtime_ns]
        except (OSError, ValueError, TypeError):
            return None
    return {**entry, "files": {**files, **restat}} if restat else entry


def _file_digest(path: str, size: int) -> str | None:
    """The sha256 of a regular file of `size` bytes (read in pieces), or None."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return None
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _clean_strays(out_dir: str) -> None:
    """Temporary files a killed build left behind (never a finished output)."""
    if not os.path.isdir(out_dir):
        return
    for folder, _, files in os.walk(out_dir):
        for name in files:
            if name.startswith(".loom-") and name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))

