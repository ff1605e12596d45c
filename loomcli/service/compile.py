"""The one compile entry point for every producer: `loom compile`, `loom
build`, the product frontier and a caller holding a module in memory.

`compile_request` turns a `CompileRequest` (module bytes in, no file
needed) into a `CompileOutcome` in this process: the one front end
(`loomcli.service.front`), then `outcome_for`, the back half a `loom build`
kernel set shares (specialize for the profile, run the pipeline, emit).
`compile_task` is the same as a task function for any `TaskSink` (bytes
in, bytes out, no pickle). `warm` prepares a worker for its first task.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit import Artifact, backend_for
from loomcli.emit.artifacts import Emission, manifest
from loomcli.errors import LoomError, UsageError
from loomcli.ir.core import Module
from loomcli.pipeline import ConfigSources, FrontEnd, specialize
from loomcli.runtime.tasks import Header, WorkerContext
from loomcli.service.front import FrontEndOptions, Memory, Source, front_end
from loomcli.service.request import (
    MODULE_FORMATS,
    TARGET_FORMATS,
    CompileOutcome,
    CompileRequest,
    Outputs,
    outcome_or_failure,
)
from loomcli.targets.profiles import Profile, parse_target


def compile_request(request: CompileRequest) -> CompileOutcome:
    """Link the request's roots, bind its config, specialize for its target,
    run its pipeline and produce the artifacts, in this process."""
    return outcome_or_failure(lambda: _compile(request))


def _compile(request: CompileRequest) -> CompileOutcome:
    profile = _profile(request)
    source = Source(request.module, request.path, files=request.files)
    config = ConfigSources(flags=tuple(f"{k}={v}" for k, v in request.config))
    options = FrontEndOptions(request.roots, config, request.pipeline, request.require_resolved_config)
    return outcome_for(front_end(Memory((source,), linked=request.linked), options), profile, request.outputs,
                       consume=True)


def _profile(request: CompileRequest) -> Profile | None:
    """The request's target, checked against what it asks for (before any work)."""
    names = request.outputs.names
    for name in names:
        if name not in OUTPUT_NAMES and not name.startswith(STAGE):
            raise LoomError(f"unknown output {name}", 2)
    profile = parse_target(request.target) if request.target else None
    needs = [n for n in names if n not in MODULE_FORMATS and n != "manifest"]
    if profile is None and needs:
        raise LoomError(f"emitting {needs[0] if needs[0] != 'launch-config' else 'a launch config'} needs a target", 2)
    return profile


def outcome_for(front: FrontEnd, profile: Profile | None, outputs: Outputs, consume: bool = False) -> CompileOutcome:
    """The back half shared by every producer: specialize a front end's
    module for `profile` (`consume`: its last use, see `specialize`), run
    its pipeline, write `outputs`. Raises CompileError / LoomError
    (`compile_request` and callers turn them into outcomes)."""
    try:
        made = produce(front, profile, outputs.names, outputs.artifact_name, outputs.launch_config_name, consume)
    except CompileError as e:
        _on_target(e.diagnostics, profile, front)
        raise
    _on_target(made.warnings, profile, front)
    return CompileOutcome("ok", made.outputs[outputs.format], made.outputs.get("launch-config", b""),
                          made.outputs.get("manifest", b""), made.warnings, made.selections,
                          extra={"exports": list(made.exports)} if made.target_format else {},
                          also=tuple(made.outputs[name] for name in outputs.also))


def _on_target(diagnostics: Sequence[Diagnostic], profile: Profile | None, front: FrontEnd) -> None:
    """Name the target on what the back half reports (`--diagnostics=json`'s
    `target`); what the front end found holds on every target."""
    if profile is not None:
        before = {id(d) for d in front.warnings}
        for d in diagnostics:
            if d.target is None and id(d) not in before:
                d.target = profile.name


@dataclass(frozen=True)
class Produced:
    """Several outputs of one compile (one specialization, one emission)."""

    outputs: dict[str, bytes]                   # output name -> bytes, in the order asked
    warnings: tuple[Diagnostic, ...]
    selections: tuple[str, ...]
    exports: tuple[str, ...]                    # the target artifact's exports, in root order
    target_format: str = ""                     # the first target format asked for ("" none)


OUTPUT_NAMES = MODULE_FORMATS + TARGET_FORMATS + ("launch-config", "manifest")
# `stage:NAME`: the output of one stage of the target's back end
# (`loomcli.emit.BACKENDS`), one that no format stops at too (`stage:obj`).
STAGE = "stage:"


def produce(front: FrontEnd, profile: Profile | None, names: Sequence[str], artifact_name: str = "",
            launch_config_name: str = "", consume: bool = False) -> Produced:
    """Specialize `front` for `profile` once (`consume`: its last use, see
    `specialize`) and write every output in `names` (`OUTPUT_NAMES`,
    `stage:NAME`); the manifest describes the first target format asked."""
    for name in names:
        if name not in OUTPUT_NAMES and not name.startswith(STAGE):
            raise UsageError(f"unknown output {name}; the outputs: {', '.join(OUTPUT_NAMES)}, stage:NAME")
    executable = any(n not in MODULE_FORMATS and n != "manifest" for n in names)
    if profile is None and executable:
        raise UsageError("target artifacts and launch configs need a target")
    # Artifacts and launch configs need every reachable config.get bound (17.22).
    compiled = specialize(front, profile, for_execution=executable, consume=consume)
    selections = tuple(d.describe() for d in compiled.decisions)
    # TARGET checks once, for every output.
    emission = Emission(compiled.module, profile) if profile is not None else None
    made: dict[str, bytes] = {}
    first: Artifact | None = None
    target_format = ""
    if emission is not None:
        made.update(stage_outputs(emission, [n[len(STAGE):] for n in names if n.startswith(STAGE)]))
    for name in names:
        if name in made or name == "manifest":
            continue
        if name in MODULE_FORMATS:
            made[name] = module_bytes(compiled.module, name)
        elif name in TARGET_FORMATS:
            assert emission is not None
            artifact = emission.artifact(name)
            if first is None:
                first, target_format = artifact, name
            made[name] = artifact.data
        else:
            assert emission is not None
            made[name] = emission.launch_config()
    if "manifest" in names:
        if first is None:
            raise LoomError("--manifest describes a target artifact (.hsaco, .spv, .ptx, .cubin, .ll, .s)", 2)
        made["manifest"] = manifest(first, artifact_name, launch_config_name or None)
    exports = tuple(k["export"] for k in first.kernels if k.get("export") is not None) if first else ()
    ordered = {n: made[n] for n in dict.fromkeys(names)}
    return Produced(ordered, tuple(compiled.warnings), selections, exports, target_format)


def stage_outputs(emission: Emission, stages: Sequence[str]) -> dict[str, bytes]:
    """`stage:NAME` outputs: each stage path runs once, the deepest first, so
    the stages on its way come with it."""
    if not stages:
        return {}
    order = [s.name for s in backend_for(emission.profile).stages.stages]
    done: dict[str, bytes] = {}
    for stage in sorted(dict.fromkeys(stages), key=lambda s: -order.index(s) if s in order else 0):
        if stage not in done:
            done.update(emission.stage_outputs(stage))  # an unknown stage: UsageError naming the stages
    return {STAGE + s: done[s] for s in stages}


def module_bytes(module: Module, fmt: str) -> bytes:
    """A compiled module as `loom-bytecode` or `loom-text`."""
    if fmt == "loom-text":
        from loomcli.text.printer import print_module

        return print_module(module).encode()
    from loomcli.bytecode import write_module

    return write_module(module, keep_debug=False)


def compile_task(header: Header, payload: bytes, context: WorkerContext) -> bytes:
    """The task function: a request's header and module bytes in, an encoded outcome out."""
    return compile_request(CompileRequest.from_header(header, payload)).encode()


# ---------------------------------------------------------------- warm-up

# The compile stages a task runs, bottom to top: the layers between the IR
# and this service (tests/test_layers.py holds them in this order).
STAGES = ("ir", "text", "bytecode", "semantics", "targets", "frontend", "launch", "passes", "link", "pipeline", "emit")


def stage_modules() -> list[str]:
    """Every module of the compile stages, found in the source tree, but LLVM's
    code generator: it is a process of its own, preloaded only by workers
    whose targets emit through LLVM (`loomcli.service.session.preload_for`)."""
    from loomcli.emit.llvm.backend import CODEGEN

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for stage in STAGES:
        if os.path.isfile(os.path.join(root, stage + ".py")):
            found.append(f"loomcli.{stage}")
            continue
        for folder, dirs, files in os.walk(os.path.join(root, stage)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            package = "loomcli." + os.path.relpath(folder, root).replace(os.sep, ".")
            found += [package if name == "__init__.py" else f"{package}.{name[:-3]}"
                      for name in sorted(files) if name.endswith(".py")]
    return [name for name in found if name != CODEGEN]


def warm() -> None:
    """Worker start-up: import every compile stage and prepare the default
    pipeline before the first task arrives. In a fork server this is done
    once for every worker it forks; the stages import each other lazily for
    the command line's sake, so a module missing here would be imported
    again by every worker's first task."""
    from loomcli.passes.pipeline import parse_pipeline

    for name in stage_modules():
        importlib.import_module(name)
    parse_pipeline("default")
