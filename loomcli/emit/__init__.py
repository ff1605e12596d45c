"""Emission: compiled Loom IR -> target artifacts.

Every emitter returns an `Artifact`: the bytes plus the manifest facts it
knows (per-kernel parameters, resources, workgroup size). Emitters share the
device ABI of `loomcli.targets.abi`; a target contributes a profile and a small
final step, never a copy of the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FORMATS = {
    "amdgpu-hsaco": ("amdgpu", ".hsaco"),
    "llvmir-text": ("amdgpu", ".ll"),
    "asm": (None, ".s"),
    "spirv-binary": ("spirv", ".spv"),
}
SUFFIX_FORMATS = {".hsaco": "amdgpu-hsaco", ".ll": "llvmir-text", ".s": "asm", ".spv": "spirv-binary"}
NATIVE_FORMAT = {"amdgpu": "amdgpu-hsaco", "spirv": "spirv-binary"}


@dataclass
class Artifact:
    format: str                                   # a key of FORMATS
    data: bytes
    kernels: list[dict[str, Any]] = field(default_factory=list)   # manifest "kernels" entries
    target: dict[str, Any] = field(default_factory=dict)          # manifest "target" object
