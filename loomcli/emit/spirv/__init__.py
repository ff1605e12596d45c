"""The SPIR-V emitter: a compiled Loom module -> a Vulkan compute module.

`emit_spirv(module, profile)` writes SPIR-V directly from the structured IR
(no LLVM): one GLCompute entry point per exported kernel, the device ABI of
`loomcli.targets.abi`, and the manifest facts of TOOLCHAIN.md section 8. See
docs/spirv.md for the design.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomcli.emit import Artifact
    from loomcli.ir.core import Module
    from loomcli.targets.profiles import Profile

__all__ = ["disassemble", "emit_spirv", "emit_spirv_format"]


def emit_spirv(module: Module, profile: Profile) -> Artifact:
    """Emit `module` (compiled for `profile`) as a SPIR-V binary artifact.

    Raises `CompileError` with TARGET diagnostics when a kernel cannot run on
    the profile (workgroup size not constant, push constants too large ...)."""
    from loomcli.emit.spirv.emitter import SpirvEmitter

    return SpirvEmitter(module, profile).run()


def emit_spirv_format(module: Module, profile: Profile, fmt: str) -> Artifact:
    """The emitter-table entry: `spirv-binary`, or its disassembly for `asm`."""
    from loomcli.emit import Artifact

    artifact = emit_spirv(module, profile)
    if fmt == "asm":
        return Artifact("asm", disassemble(artifact.data).encode(), artifact.kernels, artifact.target)
    return artifact


def disassemble(data: bytes) -> str:
    """SPIR-V disassembly of a binary this emitter wrote (`--format asm`)."""
    from loomcli.emit.spirv.disasm import disassemble as run

    return run(data)
