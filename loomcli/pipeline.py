"""The middle of the compiler as plain Python calls: link, bind, specialize, passes.

A compile is a `FrontEnd` (read, link, bind: assembled once, by
`loomcli.service.front`) and then `specialize` per profile. `loom link` is
`link_and_bind`. Every function raises `CompileError` for input errors and
returns warnings alongside its result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomcli.diagnostics import CompileError, Diagnostic, has_errors
from loomcli.ir.core import Module, Operation
from loomcli.ir.gcpause import gc_paused
from loomcli.ir.ops import CHECK_BENCHMARK, CHECK_CASE
from loomcli.link.config import BindingCollector
from loomcli.link.index import LinkIndex
from loomcli.link.linker import LinkResult, link
from loomcli.passes.bind import ConfigBindings, bind_module
from loomcli.targets.profiles import Profile

if TYPE_CHECKING:
    from loomcli.passes.pipeline import Pipeline
    from loomcli.passes.select import Decision


@dataclass(frozen=True)
class ConfigSources:
    """Where a compile's config bindings come from, lowest precedence last:
    `--config` flags, `--config-file`s, the project's [config] table, and the
    `config.def`s of the inputs (LANGUAGE.md 11-12)."""

    flags: Sequence[str] = ()                   # KEY=VALUE
    files: Sequence[str] = ()
    project: Mapping[str, Any] | None = None
    project_path: str = "loom.toml"
    project_lines: Mapping[str, int] | None = None  # key -> its line in project_path


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

    @property
    def config_sources(self) -> ConfigSources:
        return ConfigSources(self.config, self.config_files, self.project_config, self.project_path)


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


def collect_bindings(config: ConfigSources, index: LinkIndex) -> ConfigBindings:
    """Every binding of `config` and of the index's `config.def`s, merged by precedence."""
    from loomcli.frontend import display_path

    collector = BindingCollector()
    collector.add_flags(config.flags)
    for path in config.files:
        collector.add_file(path, display_path(path))
    if config.project:
        collector.add_project(config.project, config.project_path, config.project_lines)
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
    path = index.inputs[0].path if index.inputs else path
    result = link(index, list(options.roots), options.mode, options.include_exports, options.allow_unresolved, path)
    bindings = collect_bindings(options.config_sources, index)
    diags = bind(result.module, bindings, options.require_resolved_config, result.origins)
    if options.strip_checks:
        result.module.body.ops[:] = [op for op in result.module.ops
                                     if op.opdef not in (CHECK_CASE, CHECK_BENCHMARK)]
    verify_linked(result.module)
    files = [item.path for item in index.inputs] + list(options.config_files)
    return Linked(result, bindings, index, diags, files)


def bind(module: Module, bindings: ConfigBindings, require_resolved: bool,
         origins: Mapping[str, str] | None = None) -> list[Diagnostic]:
    """Apply `bindings` to a linked `module`: its warnings, or CompileError."""
    diags = bind_module(module, bindings, require_resolved, origins=origins)
    if has_errors(diags):
        raise CompileError(diags)
    return diags


def verify_linked(module: Module) -> None:
    """Never hand out a module that does not verify: say why instead."""
    from loomcli.ir.verifier import verify

    invalid = [d for d in verify(module) if d.severity == "error"]
    if invalid:
        raise CompileError(invalid)


def link_roots(index: LinkIndex, roots: Sequence[str], path: str) -> LinkResult:
    """Link `roots` of `index` (every exported kernel of its inputs when none
    are named; a merge when there are none either) into a module called `path`."""
    roots = list(roots) or default_roots(index)
    return link(index, roots, "link" if roots else "merge", path=path)


def default_roots(index: LinkIndex) -> list[str]:
    """Roots of `loom compile` when none are named: every exported kernel of the inputs."""
    roots = []
    for item in index.inputs:
        if not item.library:
            roots += ["@" + s.symbol for s in item.symbols if s.op_name == "kernel.def" and s.export is not None]
    return roots


@dataclass
class Compiled:
    module: Module
    decisions: list[Decision]
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
    pipeline: Pipeline
    warnings: list[Diagnostic]
    files_read: list[str]
    origins: Mapping[str, str] = field(default_factory=dict)  # symbol -> the input it was linked from


COMPILED_FOR = "loom.compiled_for"  # the target record a compiled module carries


# Target specialization: registered passes that run before the pass pipeline.
SPECIALIZE_FOR_TARGET = "select-templates{mode=final},specialize-target"
SPECIALIZE_WITHOUT_TARGET = "select-templates{mode=early}"


def specialize(front: FrontEnd, profile: Profile | None, for_execution: bool = False,
               consume: bool = False) -> Compiled:
    """Run target specialization (`SPECIALIZE_FOR_TARGET`, or
    `SPECIALIZE_WITHOUT_TARGET` when there is no profile) and then the
    front end's pipeline, on a clone of its module (`consume`: on the
    module itself, for a caller that never uses `front` again; a kernel
    set's copy cost 0.4 ms). A module compiled for a
    target records it (a target record named @loom.compiled_for).
    `for_execution`: the result will be emitted or run, so a reachable unbound
    `config.get` is CONFIG/003 before selection or the pipeline can hide it."""
    from dataclasses import replace

    from loomcli.ir.clone import clone_module
    from loomcli.passes.pipeline import Pipeline, parse_pipeline
    from loomcli.passes.registry import PassContext
    from loomcli.passes.specialize import SelectTemplates

    with gc_paused():
        module = front.module if consume else clone_module(front.module)
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


def _target_record(profile: Profile) -> Operation:
    from loomcli.ir.ops import OPS

    assert profile.record_op is not None
    return Operation(OPS[profile.record_op], attrs={"kind": profile.chip, "sym": COMPILED_FOR, "dict": {}})


def compiled_target(module: Module) -> str | None:
    """The target a compiled module was specialized for (`family:selector`), if any."""
    from loomcli.targets.records import is_record, record_target

    for op in module.ops:
        if op.symbol == COMPILED_FOR and is_record(op):
            return record_target(op)
    return None
