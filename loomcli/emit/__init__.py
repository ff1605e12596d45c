"""Emission: compiled Loom IR -> target artifacts.

Every emitter returns an `Artifact`: the bytes plus the manifest facts it
knows (per-kernel parameters, resources, workgroup size). Emitters share the
device ABI of `loomcli.targets.abi`; a target contributes a profile and a small
final step, never a copy of the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# format -> (the target families that emit it, None: every family; file suffix)
FORMATS = {
    "amdgpu-hsaco": (("amdgpu",), ".hsaco"),
    "llvmir-text": (("amdgpu", "nvptx"), ".ll"),
    "asm": (None, ".s"),
    "spirv-binary": (("spirv",), ".spv"),
    "nvptx-ptx": (("nvptx",), ".ptx"),
    "nvptx-cubin": (("nvptx",), ".cubin"),
}
SUFFIX_FORMATS = {".hsaco": "amdgpu-hsaco", ".ll": "llvmir-text", ".s": "asm", ".spv": "spirv-binary",
                  ".ptx": "nvptx-ptx", ".cubin": "nvptx-cubin"}
# What `--out-dir` writes without `--format`: for NVIDIA the PTX, which needs
# no ptxas and which the CUDA driver compiles for the GPU it runs on.
NATIVE_FORMAT = {"amdgpu": "amdgpu-hsaco", "spirv": "spirv-binary", "nvptx": "nvptx-ptx"}
# family -> "module:function" emitting `(module, profile, fmt) -> Artifact`, imported when used.
EMITTERS = {"amdgpu": "loomcli.emit.amdgpu:emit_amdgpu", "spirv": "loomcli.emit.spirv:emit_spirv_format",
            "nvptx": "loomcli.emit.nvptx:emit_nvptx"}
# Families whose emitters use LLVM's worker process (start it early, it warms up meanwhile).
LLVM_FAMILIES = ("amdgpu", "nvptx")


@dataclass
class Artifact:
    format: str                                   # a key of FORMATS
    data: bytes
    kernels: list[dict[str, Any]] = field(default_factory=list)   # manifest "kernels" entries
    target: dict[str, Any] = field(default_factory=dict)          # manifest "target" object
