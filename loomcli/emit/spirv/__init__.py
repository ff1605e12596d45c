"""The SPIR-V emitter: a compiled Loom module -> a Vulkan compute module.

`emit_spirv(module, profile)` writes SPIR-V directly from the structured IR
(no LLVM): one GLCompute entry point per exported kernel, the device ABI of
`loomcli.targets.abi`, and the manifest facts of TOOLCHAIN.md section 8. See
docs/spirv.md for the design.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loomcli.emit import Artifact
    from loomcli.emit.stages import StageJob
    from loomcli.ir.core import Module
    from loomcli.targets.profiles import Profile

__all__ = ["disassemble", "emit_spirv"]


def emit_spirv(module: Module, profile: Profile) -> Artifact:
    """Emit `module` (compiled for `profile`) as a SPIR-V binary artifact.

    Raises `CompileError` with TARGET diagnostics when a kernel cannot run on
    the profile (workgroup size not constant, push constants too large ...)."""
    from loomcli.emit.spirv.emitter import SpirvEmitter

    return SpirvEmitter(module, profile).run()


# The stages (`loomcli.emit.BACKENDS`): spirv -> disasm.


def spirv_stage(job: StageJob, _: bytes) -> bytes:
    artifact = emit_spirv(job.module, job.profile)
    job.facts["kernels"], job.facts["target"] = artifact.kernels, artifact.target
    return artifact.data


def disassembly_stage(job: StageJob, data: bytes) -> bytes:
    return disassemble(data).encode()


def manifest_facts(job: StageJob) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return job.facts["kernels"], job.facts["target"]


def disassemble(data: bytes) -> str:
    """SPIR-V disassembly of a binary this emitter wrote (`--format asm`)."""
    from loomcli.emit.spirv.disasm import disassemble as run

    return run(data)
