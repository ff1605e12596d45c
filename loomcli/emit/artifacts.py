"""From a compiled module to files: the emitter for a format, the launch-config
artifact, and the artifact manifest (TOOLCHAIN.md sections 2 and 8).

Emitters are imported only here and only when asked for, so nothing else in
loom pays for LLVM.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from loomcli.diagnostics import CompileError, has_errors
from loomcli.emit import SUFFIX_FORMATS, Artifact, backend_for, families_writing
from loomcli.emit.stages import Dump
from loomcli.ir.core import Module
from loomcli.targets.profiles import Profile


def format_for(output: str, fmt: str | None) -> str | None:
    """The artifact format an output asks for: `--format`, else the suffix (None: not an artifact)."""
    if fmt is not None:
        return fmt
    return SUFFIX_FORMATS.get(os.path.splitext(output)[1])


def check_targets(module: Module, profile: Profile) -> None:
    """The compile-time TARGET checks of every kernel (LANGUAGE.md 17.26-30)."""
    from loomcli.targets.checks import check_module

    diags = check_module(module, profile)
    if has_errors(diags):
        raise CompileError(diags)


def legalize(module: Module, profile: Profile) -> Module:
    """`module` with the profile's legalization passes run, on a clone (the
    compiled module stays as it was: other formats and the launch config
    read it too). When no pass has work, `module` itself: most kernels have
    no reduction or transcendental function, and cloning a large module
    costs more than the passes' look."""
    if not profile.legalize:
        return module
    from loomcli.ir.clone import clone_module
    from loomcli.passes.pipeline import parse_pipeline
    from loomcli.passes.registry import PassContext

    pipeline = parse_pipeline(",".join(profile.legalize))
    ctx = PassContext(target=profile)
    if not any(p.applies(module, ctx) for p in pipeline.passes):
        return module
    lowered = clone_module(module)
    pipeline.run(lowered, ctx)
    return lowered


class Emission:
    """What one compiled module becomes for one profile: artifacts in any
    format and the launch-config artifact. The shared TARGET checks run once,
    before the first output, on the compiled module; then the profile's
    legalization passes run once, and every instruction selector reads their
    result. Emitters and the launch-config builder rely on the checks and do
    not check again."""

    def __init__(self, module: Module, profile: Profile) -> None:
        self.module = module
        self.profile = profile
        self.checked = False
        self._legalized: Module | None = None

    def _check(self) -> None:
        if not self.checked:
            check_targets(self.module, self.profile)
            self.checked = True

    def legalized(self) -> Module:
        """The module the instruction selectors read (TARGET checks first)."""
        self._check()
        if self._legalized is None:
            self._legalized = legalize(self.module, self.profile)
        return self._legalized

    def artifact(self, fmt: str) -> Artifact:
        """The artifact in format `fmt`, from the family's row of the emitter table. Raises CompileError, UsageError."""
        from loomcli.errors import UsageError

        backend = backend_for(self.profile)
        if fmt not in backend.formats:
            raise UsageError(f"format {fmt} is for {' and '.join(families_writing(fmt))} targets, "
                             f"not {self.profile.name}")
        return backend.emit(self.legalized(), self.profile, fmt)

    def stage_outputs(self, stop: str, dump: Dump | None = None) -> dict[str, bytes]:
        """Every stage's output on the family's path to stage `stop` (`llir`,
        `obj`, ... of `loomcli.emit.BACKENDS`), which may be one that no
        format stops at; `dump` sees each as it is made. Raises UsageError."""
        from loomcli.errors import UsageError

        backend = backend_for(self.profile)
        if stop not in [s.name for s in backend.stages.stages]:
            raise UsageError(f"{self.profile.family} has no stage {stop}; its stages: {backend.stages.describe()}")
        return backend.stages.run(self.legalized(), self.profile, stop, dump, backend.worker_starter()).outputs

    def launch_config(self) -> bytes:
        """The `X.launch.loombc` bytes (TARGET checks included if no artifact ran them)."""
        from loomcli.emit.launch_config import build_launch_config

        data = build_launch_config(self.module, self.profile, target_checked=self.checked)
        self.checked = True
        return data


def emit(module: Module, profile: Profile, fmt: str) -> Artifact:
    """Emit `module` (compiled for `profile`) in format `fmt`."""
    return Emission(module, profile).artifact(fmt)


def launch_config(module: Module, profile: Profile) -> bytes:
    return Emission(module, profile).launch_config()


def manifest(artifact: Artifact, name: str, launch_config_name: str | None) -> bytes:
    """The `loom-artifact-manifest` JSON of one artifact."""
    kernels = []
    for k in artifact.kernels:
        entry = dict(k)
        if launch_config_name is not None:
            entry["launch_config"] = launch_config_name
        kernels.append(entry)
    doc: dict[str, Any] = {
        "kind": "loom.artifact_manifest", "schema_version": 1,
        "artifact": {"format": artifact.format, "name": name, "byte_length": len(artifact.data),
                     "sha256": hashlib.sha256(artifact.data).hexdigest()},
        "target": artifact.target,
        "kernels": kernels,
    }
    return (json.dumps(doc, indent=2, sort_keys=False) + "\n").encode()
