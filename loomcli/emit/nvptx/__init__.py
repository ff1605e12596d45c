"""NVPTX emission: compiled Loom IR -> LLVM IR -> PTX (`.ptx`) -> cubin (`.cubin`).

`emit_nvptx(module, profile, fmt)` runs the shared lowering with NVPTX's
target data (`.target`: special registers, `bar.sync`, `shfl.sync`, the
atomics selector), LLVM's NVPTX back end in the warm worker process
(`loomcli.emit.llvm.backend`), and for a cubin NVIDIA's `ptxas` (`.ptxas`),
whose `-v` report gives the manifest's resources (`.manifest`).

Formats: `nvptx-ptx` (PTX text, which the CUDA driver also JIT-compiles),
`nvptx-cubin` (needs ptxas), `llvmir-text` (the LLVM IR handed to LLVM,
before its optimizer), `asm` (the same PTX). Nothing here imports llvmlite.
"""

from __future__ import annotations

from loomcli.emit import Artifact
from loomcli.errors import LoomError
from loomcli.ir.core import Module, Operation
from loomcli.targets.profiles import Profile

FORMATS = ("nvptx-ptx", "nvptx-cubin", "llvmir-text", "asm")

def lower(module: Module, profile: Profile) -> tuple[str, list[Operation], dict[str, Profile]]:
    """The LLVM IR of the module's kernels, the kernels, and each kernel's profile."""
    from loomcli.emit.llvm import backend
    from loomcli.emit.nvptx.target import llvm_target

    return backend.lower(module, profile, llvm_target(profile))


def ptx(ir: str, profile: Profile) -> bytes:
    """PTX text for `profile` from the lowering's LLVM IR."""
    from loomcli.emit.llvm import backend
    from loomcli.emit.nvptx.target import llvm_target

    return backend.codegen(ir, llvm_target(profile), "assembly")


def emit_nvptx(module: Module, profile: Profile, fmt: str) -> Artifact:
    """Emit `module`'s kernels for `profile` as `fmt` (see FORMATS)."""
    from loomcli.emit.nvptx.manifest import kernel_entries, target_entry

    if fmt not in FORMATS:
        raise LoomError(f"internal: {fmt} is not an NVPTX format", 3)
    ptxas = None
    if fmt == "nvptx-cubin":
        from loomcli.emit.nvptx.ptxas import require_ptxas

        ptxas = require_ptxas()  # before any work: a missing tool is the first thing to say
    if fmt != "llvmir-text":
        from loomcli.emit.llvm.backend import start_worker

        start_worker()
    ir, kernels, profiles = lower(module, profile)
    if fmt == "llvmir-text":
        return Artifact(fmt, ir.encode(), kernel_entries(module, kernels, profiles, None),
                        target_entry(profile, None, None))
    text = ptx(ir, profile)
    if ptxas is None:
        return Artifact(fmt, text, kernel_entries(module, kernels, profiles, None), target_entry(profile, text, None))
    from loomcli.emit.nvptx.ptxas import assemble, version

    built = assemble(text, profile.selector, ptxas)
    return Artifact(fmt, built.cubin, kernel_entries(module, kernels, profiles, built.kernels),
                    target_entry(profile, text, version(ptxas)))
