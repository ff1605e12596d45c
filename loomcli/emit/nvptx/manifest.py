"""Manifest facts of an NVPTX artifact (TOOLCHAIN.md section 8, docs/nvptx.md).

Parameters come from the device ABI (`loomcli.targets.abi`): each is one
`.param` of the entry, in order, at its natural alignment, which is exactly
the slot rule, so `byte_offset` is the offset in the parameter space that
`cuLaunchKernel`'s argument buffer (`CU_LAUNCH_PARAM_BUFFER_POINTER`)
uses. Resources come from `ptxas -v` when a cubin is built; PTX, assembly
and LLVM IR carry only the workgroup storage loom allocates.
"""

from __future__ import annotations

import re
from typing import Any

from loomcli.emit.nvptx.ptxas import KernelInfo
from loomcli.ir.core import Module, Operation
from loomcli.targets import abi
from loomcli.targets.profiles import Profile

_VERSION = re.compile(rb"^\.version (\d+\.\d+)", re.MULTILINE)


def target_entry(profile: Profile, ptx: bytes | None, ptxas_version: str | None) -> dict[str, Any]:
    from loomcli.emit.nvptx.target import TRIPLE

    entry: dict[str, Any] = {"family": "nvptx", "selector": profile.selector, "triple": TRIPLE,
                             "subgroup_size": 32}
    m = _VERSION.search(ptx or b"")
    if m is not None:
        entry["ptx_version"] = m.group(1).decode()
    if ptxas_version is not None:
        entry["ptxas_version"] = ptxas_version
    return entry


def kernel_entries(module: Module, kernels: list[Operation], profiles: dict[str, Profile],
                   info: dict[str, KernelInfo] | None) -> list[dict[str, Any]]:
    out = []
    for kernel in kernels:
        k = abi.kernel_abi(kernel, "nvptx")
        profile = profiles[k.export]
        entry: dict[str, Any] = k.manifest_head()
        size = abi.workgroup_size_constants(kernel)
        if size is not None:
            entry["workgroup_size"] = list(size)
        entry["param_space_size"] = k.args_bytes
        entry["parameters"] = [p.manifest("nvptx") for p in k.params]
        storage = abi.workgroup_storage_bytes(kernel, 32, profile.max_flat_workgroup_size)
        facts = (info or {}).get(k.export)
        if facts is None:
            entry["resources"] = {"workgroup_storage_bytes": storage}
        else:
            entry["resources"] = {"registers": facts.registers, "workgroup_storage_bytes": facts.shared_bytes,
                                  "barriers": facts.barriers, "stack_frame_bytes": facts.stack_frame_bytes,
                                  "spill_store_bytes": facts.spill_store_bytes,
                                  "spill_load_bytes": facts.spill_load_bytes}
        out.append(entry)
    return out
