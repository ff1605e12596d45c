"""AMDGPU emission: compiled Loom IR -> LLVM IR -> code object (`.hsaco`).

`emit_amdgpu(module, profile, fmt)` runs the shared lowering
(`loomcli.emit.llvm`) with AMDGPU's target data (`.target`), hands the LLVM
IR to a warm worker process for LLVM's optimizer and code generator
(`loomcli.runtime.isolated`, `loomcli.emit.llvm.codegen`), links the relocatable
object into a shared object in Python (`.elf`), and reads the kernels'
`NT_AMDGPU_METADATA` (`.msgpack`) for the manifest (`.manifest`).

The lowering and the worker are shared with every LLVM-based target
(`loomcli.emit.llvm.backend`). Formats: `amdgpu-hsaco` (the code object), `llvmir-text` (the LLVM IR handed
to LLVM, before its optimizer), `asm` (AMDGPU assembly after optimization).
Nothing here imports llvmlite; only the worker does.
"""

from __future__ import annotations

from typing import Any

from loomcli.emit import Artifact
from loomcli.emit.stages import StageJob
from loomcli.errors import LoomError
from loomcli.ir.core import Module, Operation
from loomcli.targets.profiles import Profile

__all__ = ["codegen", "emit_amdgpu", "lower"]


def lower(module: Module, profile: Profile) -> tuple[str, list[Operation], dict[str, Profile]]:
    """The LLVM IR of the module's kernels for `profile`, the kernels, and
    each kernel's profile (by export name)."""
    from loomcli.emit.amdgpu.target import kernel_target, llvm_target
    from loomcli.emit.llvm import backend

    return backend.lower(module, profile, llvm_target(profile), kernel_target)


def codegen(ir: str, profile: Profile, emit: str) -> bytes:
    """LLVM's optimizer and code generator, in the warm worker process."""
    from loomcli.emit.amdgpu.target import llvm_target
    from loomcli.emit.llvm import backend

    return backend.codegen(ir, llvm_target(profile), emit)


def emit_amdgpu(module: Module, profile: Profile, fmt: str) -> Artifact:
    """Emit `module`'s kernels for `profile` as `fmt` (see `loomcli.emit.BACKENDS`)."""
    from loomcli.emit import BACKENDS

    return BACKENDS["amdgpu"].emit(module, profile, fmt)


# The stages (`loomcli.emit.BACKENDS`): llir -> asm | obj -> hsaco.


def lower_stage(job: StageJob, _: bytes) -> bytes:
    ir, job.facts["kernels"], job.facts["profiles"] = lower(job.module, job.profile)
    return ir.encode()


def asm_stage(job: StageJob, ir: bytes) -> bytes:
    return codegen(ir.decode(), job.profile, "assembly")


def object_stage(job: StageJob, ir: bytes) -> bytes:
    return codegen(ir.decode(), job.profile, "object")


def link_stage(job: StageJob, obj: bytes) -> bytes:
    from loomcli.emit.amdgpu.link import link_shared
    from loomcli.emit.elf import ElfError

    try:
        return link_shared(obj)
    except ElfError as e:
        raise LoomError(f"internal: linking the code object for {job.profile.name} failed: {e}", 3) from e


def manifest_facts(job: StageJob) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The manifest's kernels (their resources read from the code object,
    when there is one) and target."""
    from loomcli.emit.amdgpu.manifest import kernel_entries, target_entry

    kernels = kernel_entries(job.module, job.facts["kernels"], job.facts["profiles"], job.outputs.get("hsaco"))
    return kernels, target_entry(job.profile)
