"""The middle of the compiler as plain Python calls: link, bind, select, passes.

Commands are thin shells over these functions; a build (and later its
workers) calls them directly. Every function raises `CompileError` for
input errors and returns warnings alongside its result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic, has_errors
from loomcli.ir.core import Module
from loomcli.ir.gcpause import gc_paused
from loomcli.link.config import BindingCollector
from loomcli.link.index import LinkIndex
from loomcli.link.linker import LinkResult, link
from loomcli.passes.bind import ConfigBindings, bind_module
from loomcli.targets.profiles import Profile


@dataclass(frozen=True)
class LinkOptions:
    inputs: Sequence[str]
    libraries: Sequence[str] = ()
    roots: Sequence[str] = ()
    mode: str = "auto"
    include_exports: bool = False
    allow_unresolved: bool = False
    require_resolved_config: bool = False
    config: Sequence[str] = ()
    config_files: Sequence[str] = ()
    project_config: Mapping[str, Any] | None = None
    project_path: str = "loom.toml"
    strip_checks: bool = False


@dataclass
class Linked:
    result: LinkResult
    bindings: ConfigBindings
    index: LinkIndex
    warnings: list[Diagnostic] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)

    @property
    def module(self) -> Module:
        return self.result.module

    @property
    def plan(self) -> list[str]:
        return self.result.plan


def collect_bindings(options: LinkOptions, index: LinkIndex) -> ConfigBindings:
    from loomcli.frontend import display_path

    collector = BindingCollector()
    collector.add_flags(options.config)
    for path in options.config_files:
        collector.add_file(path, display_path(path))
    if options.project_config:
        collector.add_project(options.project_config, options.project_path)
    for item in index.inputs:
        if any(s.op_name == "config.def" for s in item.symbols):
            collector.add_module_defs(item.module())
    if collector.diags:
        raise CompileError(collector.diags)
    return collector.result()


def link_and_bind(options: LinkOptions, path: str = "<linked>") -> Linked:
    """Link the inputs, then apply every config binding (LANGUAGE.md 11-12)."""
    with gc_paused():
        return _link_and_bind(options, path)


def _link_and_bind(options: LinkOptions, path: str) -> Linked:
    index = LinkIndex.build(options.inputs, options.libraries)
    # A linked module is named for its first input: stable whatever the output is called.
    return _link_bind(options, index, index.inputs[0].path if index.inputs else path)


def _link_bind(options: LinkOptions, index: LinkIndex, path: str) -> Linked:
    """Link `options.roots` of the index into a module called `path`, then bind config."""
    result = link(index, list(options.roots), options.mode, options.include_exports, options.allow_unresolved, path)
    bindings = collect_bindings(options, index)
    diags = bind_module(result.module, bindings, options.require_resolved_config, origins=result.origins)
    if has_errors(diags):
        raise CompileError(diags)
    if options.strip_checks:
        result.module.body.ops[:] = [op for op in result.module.ops
                                     if op.name not in ("check.case", "check.benchmark")]
    from loomcli.ir.verifier import verify

    invalid = [d for d in verify(result.module) if d.severity == "error"]
    if invalid:  # never hand out a module that does not verify: say why instead
        raise CompileError(invalid)
    files = [item.path for item in index.inputs] + list(options.config_files)
    return Linked(result, bindings, index, diags, files)


def link_roots(index: LinkIndex, roots: Sequence[str], path: str) -> LinkResult:
    """Link `roots` of `index` (every exported kernel of its inputs when none
    are named; a merge when there are none either) into a module called `path`."""
    roots = list(roots) or default_roots(index)
    return link(index, roots, "link" if roots else "merge", path=path)


def bound_front_end(module: Module, bindings: ConfigBindings, pipeline: Any, origins: Mapping[str, str] | None = None,
                    require_resolved_config: bool = False) -> FrontEnd:
    """Apply `bindings` to a linked `module` and wrap it as the `FrontEnd`
    every target compiles from: the end of the front half that a compile
    request (`loomcli.service.compile`) and a `loom build` kernel set
    (`loomcli.build.tasks`) share."""
    warnings = bind_module(module, bindings, require_resolved_config, origins=origins)
    if has_errors(warnings):
        raise CompileError(warnings)
    return FrontEnd(module, bindings, pipeline, warnings, [])


def default_roots(index: LinkIndex) -> list[str]:
    """Roots of `loom compile` when none are named: every exported kernel of the inputs."""
    roots = []
    for item in index.inputs:
        if not item.library:
            roots += ["@" + s.symbol for s in item.symbols if s.op_name == "kernel.def" and s.export is not None]
    return roots


def write_depfile(path: str, target: str, deps: Sequence[str]) -> None:
    """Write `depfile(target, deps)` to `path`."""
    from loomcli.errors import atomic_write

    atomic_write(path, depfile(target, deps))


def depfile(target: str, deps: Sequence[str]) -> bytes:
    """A gcc-compatible depfile: the first target is the output, then every file read."""

    def esc(p: str) -> str:
        return p.replace("\\", "\\\\").replace(" ", "\\ ").replace("#", "\\#").replace("$", "$$")

    seen: dict[str, None] = {}
    for d in deps:
        seen.setdefault(d, None)
    lines = [f"{esc(target)}:"] + [f" {esc(d)}" for d in seen]
    return (" \\\n".join(lines) + "\n").encode()


@dataclass(frozen=True)
class CompileOptions:
    input: str
    libraries: Sequence[str] = ()
    roots: Sequence[str] = ()
    config: Sequence[str] = ()
    config_files: Sequence[str] = ()
    pipeline: str = "default"
    profile: Profile | None = None
    require_resolved_config: bool = False
    project_config: Mapping[str, Any] | None = None
    # The result is emitted, interpreted or evaluated: every reachable
    # config.get must be bound (CONFIG/003, LANGUAGE.md 17.22).
    for_execution: bool = False


@dataclass
class Compiled:
    module: Module
    decisions: list[Any]
    warnings: list[Diagnostic]
    files_read: list[str]
    profile: Profile | None = None


@dataclass
class FrontEnd:
    """The target-independent half of a compile: read, verify, link, bind,
    pipeline text parsed. Built once however many targets follow; never
    changed by `specialize`, which works on a clone."""

    module: Module
    bindings: ConfigBindings
    pipeline: Any
    warnings: list[Diagnostic]
    files_read: list[str]


COMPILED_FOR = "loom.compiled_for"  # the target record a compiled module carries


def compile_module(options: CompileOptions) -> Compiled:
    """Link the input's roots against the libraries, bind config, select
    templates for the profile and run the pass pipeline.

    The cyclic collector pauses meanwhile: a compile builds mostly
    long-lived IR, and with a large index alive every collection would
    rescan it (measured: link time per kernel doubled from 200 to 800
    kernels). The garbage of one compile is collected after it.
    """
    with gc_paused():
        return specialize(front_end(options), options.profile, options.for_execution)


def front_end(options: CompileOptions) -> FrontEnd:
    from loomcli.passes.pipeline import parse_pipeline

    with gc_paused():
        pipeline = parse_pipeline(options.pipeline)  # a bad pipeline fails before any work
        index = LinkIndex.build([options.input], options.libraries)
        roots = list(options.roots) or default_roots(index)
        link_options = LinkOptions(inputs=[options.input], libraries=options.libraries, roots=roots,
                                   mode="link" if roots else "merge", config=options.config,
                                   config_files=options.config_files, project_config=options.project_config,
                                   require_resolved_config=options.require_resolved_config)
        linked = _link_bind(link_options, index, _compiled_path(options.input))
        return FrontEnd(linked.module, linked.bindings, pipeline, linked.warnings, linked.files_read)


# Target specialization: registered passes that run before the pass pipeline.
SPECIALIZE_FOR_TARGET = "select-templates{mode=final},specialize-target"
SPECIALIZE_WITHOUT_TARGET = "select-templates{mode=early}"


def specialize(front: FrontEnd, profile: Profile | None, for_execution: bool = False) -> Compiled:
    """Run target specialization (`SPECIALIZE_FOR_TARGET`, or
    `SPECIALIZE_WITHOUT_TARGET` when there is no profile) and then the
    front end's pipeline, on a clone of its module. A module compiled for a
    target records it (a target record named @loom.compiled_for).
    `for_execution`: the result will be emitted or run, so a reachable unbound
    `config.get` is CONFIG/003 before selection or the pipeline can hide it."""
    from dataclasses import replace

    from loomcli.ir.clone import clone_op
    from loomcli.passes.pipeline import Pipeline, parse_pipeline
    from loomcli.passes.registry import PassContext
    from loomcli.passes.specialize import SelectTemplates

    with gc_paused():
        module = Module(front.module.path)
        for op in front.module.ops:
            module.body.append(clone_op(op))
        steps = parse_pipeline(SPECIALIZE_FOR_TARGET if profile is not None else SPECIALIZE_WITHOUT_TARGET)
        if for_execution:
            steps = Pipeline(tuple(replace(p, require_resolved=True) if isinstance(p, SelectTemplates) else p
                                   for p in steps.passes))
        ctx = PassContext(config=front.bindings, target=profile)
        Pipeline(steps.passes + front.pipeline.passes).run(module, ctx)
        decisions, diags = ctx.decisions, ctx.warnings
        if profile is not None and profile.record_op is not None:  # the reference profile has no record
            module.body.append(_target_record(profile))
        return Compiled(module, decisions, front.warnings + diags, front.files_read, profile)


def _target_record(profile: Profile) -> Any:
    from loomcli.ir.core import Operation
    from loomcli.ir.ops import OPS

    assert profile.record_op is not None
    return Operation(OPS[profile.record_op], attrs={"kind": profile.chip, "sym": COMPILED_FOR, "dict": {}})


def compiled_target(module: Module) -> str | None:
    """The target a compiled module was specialized for (`family:selector`), if any."""
    from loomcli.targets.records import is_record, record_target

    for op in module.ops:
        if op.attrs.get("sym") == COMPILED_FOR and is_record(op):
            return record_target(op)
    return None


def _compiled_path(input_path: str) -> str:
    from loomcli.frontend import display_path

    return display_path(input_path)
