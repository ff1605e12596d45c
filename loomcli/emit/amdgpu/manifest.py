"""Manifest facts of an AMDGPU artifact (TOOLCHAIN.md section 8).

Parameters come from the device ABI (`loomcli.targets.abi`); everything LLVM
decides (hidden arguments, kernarg segment, registers, spills, LDS) comes
from the code object's `NT_AMDGPU_METADATA` note. Facts an artifact does not
carry (assembly and LLVM IR have no code object) are omitted.
"""

from __future__ import annotations

from typing import Any

from loomcli.ir.core import Module, Operation
from loomcli.targets import abi
from loomcli.targets.profiles import Profile

NT_AMDGPU_METADATA = 32


def target_entry(profile: Profile) -> dict[str, Any]:
    from loomcli.emit.amdgpu.target import TRIPLE, wave_size

    return {"family": "amdgpu", "selector": profile.selector, "triple": TRIPLE,
            "code_object_version": profile.code_object_version or (6 if profile.is_generic else 5),
            "subgroup_size": wave_size(profile)}


def code_object_metadata(hsaco: bytes) -> dict[str, Any]:
    """The decoded NT_AMDGPU_METADATA map of a code object."""
    from loomcli.emit.amdgpu.msgpack import unpackb
    from loomcli.emit.elf import notes, read_elf

    for owner, ntype, desc in notes(read_elf(hsaco)):
        if owner == "AMDGPU" and ntype == NT_AMDGPU_METADATA:
            value = unpackb(desc)
            if not isinstance(value, dict):
                raise ValueError("NT_AMDGPU_METADATA is not a map")
            return value
    raise ValueError("the code object has no NT_AMDGPU_METADATA note")


def kernel_metadata(hsaco: bytes) -> dict[str, dict[str, Any]]:
    """Each kernel's metadata map, by kernel name."""
    return {k[".name"]: k for k in code_object_metadata(hsaco).get("amdhsa.kernels", [])}


def kernel_entries(module: Module, kernels: list[Operation], profiles: dict[str, Profile],
                   hsaco: bytes | None) -> list[dict[str, Any]]:
    from loomcli.emit.amdgpu.target import wave_size

    metadata = kernel_metadata(hsaco) if hsaco is not None else {}
    out = []
    for kernel in kernels:
        info = abi.kernel_abi(kernel, "amdgpu")
        profile = profiles[info.export]
        entry: dict[str, Any] = info.manifest_head()
        size = abi.workgroup_size_constants(kernel)
        if size is not None:
            entry["workgroup_size"] = list(size)
        md = metadata.get(info.export)
        if md is not None:
            entry["kernarg_segment_size"] = md[".kernarg_segment_size"]
            entry["kernarg_segment_align"] = md[".kernarg_segment_align"]
        entry["parameters"] = [p.manifest("amdgpu") for p in info.params]
        if md is not None:
            hidden = [a for a in md.get(".args", []) if str(a.get(".value_kind", "")).startswith("hidden_")]
            entry["hidden_arguments"] = [{"value_kind": a[".value_kind"], "byte_offset": a[".offset"],
                                          "byte_length": a[".size"]} for a in hidden]
            entry["resources"] = {
                "vgpr_count": md[".vgpr_count"], "sgpr_count": md[".sgpr_count"],
                "workgroup_storage_bytes": md[".group_segment_fixed_size"],
                "private_segment_fixed_size": md[".private_segment_fixed_size"],
                "vgpr_spill_count": md.get(".vgpr_spill_count", 0),
                "sgpr_spill_count": md.get(".sgpr_spill_count", 0)}
            if ".agpr_count" in md:
                entry["resources"]["agpr_count"] = md[".agpr_count"]
        else:
            entry["resources"] = {"workgroup_storage_bytes": abi.workgroup_storage_bytes(
                kernel, wave_size(profile), profile.max_flat_workgroup_size)}
        out.append(entry)
    return out
