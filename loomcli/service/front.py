"""The one front end: read the inputs, link the roots, bind the config.

Every compile starts here, whoever asks: `loom compile` and `loom test`
(files on disk), a `loom build` kernel set (sources and prepared libraries
in memory, in a worker), a compile request (one module's bytes, perhaps
already linked: the frontier's kernel requests, `loom compile`'s targets)
and a caller that has a module in memory and no file. The inputs differ
only in how they are read (`Files`, `Memory`); linking, binding and the
`FrontEnd` every target is then specialized from are the same code.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from loomcli.diagnostics import CompileError
from loomcli.errors import LoomError
from loomcli.frontend import display_path, load_bytes
from loomcli.ir.core import stamp_file
from loomcli.ir.gcpause import gc_paused
from loomcli.link.index import LinkIndex, LinkInput, input_from_module
from loomcli.link.linker import LinkResult
from loomcli.passes.pipeline import Pipeline, parse_pipeline
from loomcli.pipeline import (
    Compiled,
    ConfigSources,
    FrontEnd,
    bind,
    collect_bindings,
    link_roots,
    specialize,
    verify_linked,
)
from loomcli.targets.profiles import Profile


@dataclass(frozen=True)
class Source:
    """One input held in memory: Loom text or `.loombc` bytes."""

    data: bytes
    path: str                                   # shown in diagnostics
    key: str = ""                               # its `module.import` key; "" = the path's stem
    # (top-level op index, file) for ops linked in from another input, so
    # diagnostics about them name that file (bytecode keeps no file per op)
    files: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class FrontEndOptions:
    roots: Sequence[str] = ()                   # "@sym"; none: every exported kernel of the inputs
    config: ConfigSources = field(default_factory=ConfigSources)
    pipeline: str = "default"
    require_resolved_config: bool = False
    # The linked module is itself an output (loom compile's -o X.loombc and
    # the requests made from it): verify it, not only the inputs.
    verify: bool = False


class Inputs(Protocol):
    """Where a front end's inputs come from."""

    def read(self) -> LinkIndex: ...

    def link(self, index: LinkIndex, roots: Sequence[str]) -> LinkResult: ...

    def files_read(self, index: LinkIndex) -> list[str]: ...


@dataclass(frozen=True)
class Files:
    """Inputs and libraries on disk (`PATH` or `KEY=PATH`), read and checked."""

    inputs: Sequence[str]
    libraries: Sequence[str] = ()

    def read(self) -> LinkIndex:
        return LinkIndex.build(self.inputs, self.libraries)

    def link(self, index: LinkIndex, roots: Sequence[str]) -> LinkResult:
        return link_roots(index, roots, display_path(self.inputs[0]))

    def files_read(self, index: LinkIndex) -> list[str]:
        return [item.path for item in index.inputs]


@dataclass(frozen=True)
class Memory:
    """Sources in memory, verified as they are read, and libraries already
    indexed (a worker's prepared state). `linked`: the one source is a front
    end's own linked module (a compile request's), trusted as written and
    not linked again."""

    sources: Sequence[Source]
    libraries: Sequence[LinkInput] = ()
    linked: bool = False

    def read(self) -> LinkIndex:
        inputs, errors = [], []
        for source in self.sources:
            try:
                module = load_bytes(source.data, source.path, verify=not self.linked)
            except CompileError as e:
                errors += e.diagnostics
                continue
            for k, file in source.files:
                if 0 <= k < len(module.ops):
                    stamp_file(module.ops[k], file)
            inputs.append(input_from_module(module, source.key or _stem(source.path)))
        if errors:
            raise CompileError(errors)
        check_unique_keys(inputs)
        return LinkIndex(tuple(inputs) + tuple(sorted(self.libraries, key=lambda i: i.key)))

    def link(self, index: LinkIndex, roots: Sequence[str]) -> LinkResult:
        if self.linked:
            return LinkResult(index.inputs[0].module())
        return link_roots(index, roots, self.sources[0].path)

    def files_read(self, index: LinkIndex) -> list[str]:
        return []


def front_end(inputs: Inputs, options: FrontEndOptions) -> FrontEnd:
    """Read `inputs`, link the roots, bind the config: the `FrontEnd` every
    target of the compile is specialized from. Raises CompileError for the
    input's faults, LoomError for the caller's."""
    with gc_paused():
        pipeline = parse_pipeline(options.pipeline)  # a bad pipeline fails before any input is read
        return link_and_bind(inputs, inputs.read(), options, pipeline)


def link_and_bind(inputs: Inputs, index: LinkIndex, options: FrontEndOptions, pipeline: Pipeline) -> FrontEnd:
    """The front end on an index already read (the frontier picks its roots from it)."""
    result = inputs.link(index, options.roots)
    bindings = collect_bindings(options.config, index)
    warnings = bind(result.module, bindings, options.require_resolved_config, result.origins)
    if options.verify:
        verify_linked(result.module)
    files = inputs.files_read(index) + list(options.config.files)
    return FrontEnd(result.module, bindings, pipeline, warnings, files, result.origins)


def check_unique_keys(items: Sequence[LinkInput]) -> None:
    """Link inputs held in memory (a kernel set, a library) must have distinct keys."""
    seen: dict[str, str] = {}
    for item in items:
        if item.key in seen:
            raise LoomError(f"{seen[item.key]} and {item.path} share the stem `{item.key}` in one set; rename one", 1)
        seen[item.key] = item.path


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0] or "m"


# ---------------------------------------------------------------- one call, for tests, `loom test` and tools


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
    project_config: dict[str, object] | None = None
    project_path: str = "loom.toml"                 # where project_config came from, for diagnostics
    project_lines: dict[str, int] | None = None     # its keys' lines there
    # The result is emitted, interpreted or evaluated: every reachable
    # config.get must be bound (CONFIG/003, LANGUAGE.md 17.22).
    for_execution: bool = False

    def front_end_inputs(self) -> tuple[Files, FrontEndOptions]:
        config = ConfigSources(self.config, self.config_files, self.project_config, self.project_path,
                               self.project_lines)
        return Files((self.input,), self.libraries), FrontEndOptions(
            self.roots, config, self.pipeline, self.require_resolved_config, verify=True)


def compile_module(options: CompileOptions) -> Compiled:
    """The front end for one input file, then `specialize` for the profile.

    The cyclic collector pauses meanwhile: a compile builds mostly
    long-lived IR, and with a large index alive every collection would
    rescan it (measured: link time per kernel doubled from 200 to 800
    kernels). The garbage of one compile is collected after it.
    """
    with gc_paused():
        return specialize(front_end(*options.front_end_inputs()), options.profile, options.for_execution)
