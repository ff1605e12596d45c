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

from typing import Any

from loomcli.emit import Artifact
from loomcli.emit.stages import StageJob
from loomcli.ir.core import Module, Operation
from loomcli.targets.profiles import Profile


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
    """Emit `module`'s kernels for `profile` as `fmt` (see `loomcli.emit.BACKENDS`)."""
    from loomcli.emit import BACKENDS

    return BACKENDS["nvptx"].emit(module, profile, fmt)


# The stages (`loomcli.emit.BACKENDS`): llir -> ptx -> cubin.


def find_ptxas(job: StageJob) -> None:
    from loomcli.emit.nvptx.ptxas import require_ptxas

    job.facts["ptxas"] = require_ptxas()


def lower_stage(job: StageJob, _: bytes) -> bytes:
    ir, job.facts["kernels"], job.facts["profiles"] = lower(job.module, job.profile)
    return ir.encode()


def ptx_stage(job: StageJob, ir: bytes) -> bytes:
    return ptx(ir.decode(), job.profile)


def cubin_stage(job: StageJob, text: bytes) -> bytes:
    from loomcli.emit.nvptx.ptxas import assemble, version

    built = assemble(text, job.profile.selector, job.facts["ptxas"])
    job.facts["ptxas_kernels"], job.facts["ptxas_version"] = built.kernels, version(job.facts["ptxas"])
    return built.cubin


def manifest_facts(job: StageJob) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The manifest's kernels (ptxas's resources, for a cubin) and target (the PTX's version, ptxas's)."""
    from loomcli.emit.nvptx.manifest import kernel_entries, target_entry

    kernels = kernel_entries(job.module, job.facts["kernels"], job.facts["profiles"], job.facts.get("ptxas_kernels"))
    return kernels, target_entry(job.profile, job.outputs.get("ptx"), job.facts.get("ptxas_version"))
