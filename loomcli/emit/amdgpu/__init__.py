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

from loomcli.emit import Artifact
from loomcli.emit.llvm.backend import start_worker
from loomcli.errors import LoomError
from loomcli.ir.core import Module, Operation
from loomcli.targets.profiles import Profile

__all__ = ["FORMATS", "codegen", "emit_amdgpu", "lower", "start_worker"]

FORMATS = ("amdgpu-hsaco", "llvmir-text", "asm")


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
    """Emit `module`'s kernels for `profile` as `fmt` (see FORMATS)."""
    from loomcli.emit.amdgpu.manifest import kernel_entries, target_entry

    if fmt not in FORMATS:
        raise LoomError(f"internal: {fmt} is not an AMDGPU format", 3)
    if fmt != "llvmir-text":
        start_worker()
    ir, kernels, profiles = lower(module, profile)
    target = target_entry(profile)
    if fmt == "llvmir-text":
        return Artifact(fmt, ir.encode(), kernel_entries(module, kernels, profiles, None), target)
    if fmt == "asm":
        data = codegen(ir, profile, "assembly")
        return Artifact(fmt, data, kernel_entries(module, kernels, profiles, None), target)
    from loomcli.emit.amdgpu.link import ElfError, link_shared

    obj = codegen(ir, profile, "object")
    try:
        hsaco = link_shared(obj)
    except ElfError as e:
        raise LoomError(f"internal: linking the code object for {profile.name} failed: {e}", 3) from e
    return Artifact(fmt, hsaco, kernel_entries(module, kernels, profiles, hsaco), target)
