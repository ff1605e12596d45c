"""AMDGPU as data for the shared LLVM lowering (LLVM AMDGPUUsage, code object v5/v6).

Everything the lowering needs to know about AMDGPU is in `llvm_target`:
address spaces, the `amdgpu_kernel` convention and its attributes, the code
object version flag, and snippets for coordinates (workitem/workgroup ids
are intrinsics; workgroup sizes and counts are the v5 implicit kernel
arguments `hidden_group_size_*` and `hidden_block_count_*`), barriers,
lane shuffles (`ds_bpermute`) and broadcasts.
"""

from __future__ import annotations

from dataclasses import replace

from loomcli.emit.llvm.target import LLVMTarget
from loomcli.targets.profiles import Profile

TRIPLE = "amdgcn-amd-amdhsa"
# LLVM 22's AMDGPU data layout; the code generator checks it against the target machine.
DATALAYOUT = ("e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-"
              "p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-"
              "v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9")

ADDRESS_SPACES = {"generic": 0, "global": 1, "workgroup": 3, "constant": 4, "private": 5}

# Code object v5 implicit kernel arguments (byte offset, LLVM type) after the explicit ones.
HIDDEN_BLOCK_COUNT = ((0, "i32"), (4, "i32"), (8, "i32"))
HIDDEN_GROUP_SIZE = ((12, "i16"), (14, "i16"), (16, "i16"))

# Chips with a fixed wave64 (gfx9 family); the others run wave32 or wave64.
_WAVE64_ONLY = frozenset({"gfx90a", "gfx942", "gfx950", "gfx9-generic", "gfx9-4-generic"})

def _implicit_load(offset: int, ty: str) -> tuple[str, ...]:
    head = ("%ia = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()",
            f"%p = getelementptr inbounds i8, ptr addrspace(4) %ia, i64 {offset}")
    attach = "!invariant.load !{}, !noundef !{}"
    if ty == "i16":
        return (*head, f"%v = load i16, ptr addrspace(4) %p, align 2, {attach}", "%out = zext i16 %v to i32")
    return (*head, f"%out = load i32, ptr addrspace(4) %p, align 4, {attach}")


def _coordinates(wave: int) -> dict[str, tuple[str, ...]]:
    c: dict[str, tuple[str, ...]] = {}
    for d, axis in enumerate("xyz"):
        c[f"workitem.id.{axis}"] = (f"%out = call i32 @llvm.amdgcn.workitem.id.{axis}()",)
        c[f"workgroup.id.{axis}"] = (f"%out = call i32 @llvm.amdgcn.workgroup.id.{axis}()",)
        c[f"workgroup.size.{axis}"] = _implicit_load(*HIDDEN_GROUP_SIZE[d])
        c[f"workgroup.count.{axis}"] = _implicit_load(*HIDDEN_BLOCK_COUNT[d])
    if wave == 64:
        c["subgroup.lane.id"] = ("%lo = call i32 @llvm.amdgcn.mbcnt.lo(i32 -1, i32 0)",
                                 "%out = call i32 @llvm.amdgcn.mbcnt.hi(i32 -1, i32 %lo)")
    else:
        c["subgroup.lane.id"] = ("%out = call i32 @llvm.amdgcn.mbcnt.lo(i32 -1, i32 0)",)
    c["subgroup.size"] = ("%out = call i32 @llvm.amdgcn.wavefrontsize()",)
    return c


def _active_lanes(wave: int) -> tuple[str, ...]:
    if wave == 64:
        return ("%b = call i64 @llvm.amdgcn.ballot.i64(i1 true)",
                "%n = call i64 @llvm.ctpop.i64(i64 %b)",
                "%out = trunc i64 %n to i32")
    return ("%b = call i32 @llvm.amdgcn.ballot.i32(i1 true)",
            "%out = call i32 @llvm.ctpop.i32(i32 %b)")


def wave_size(profile: Profile) -> int:
    return profile.subgroup_size or (64 if profile.selector in _WAVE64_ONLY else 32)


def features(profile: Profile) -> str:
    """Subtarget features: the wave size on chips that have both."""
    if profile.selector in _WAVE64_ONLY:
        return ""
    return f"+wavefrontsize{wave_size(profile)}"


def llvm_target(profile: Profile) -> LLVMTarget:
    """The shared lowering's view of an AMDGPU profile."""
    wave = wave_size(profile)
    version = profile.code_object_version or (6 if profile.is_generic else 5)
    return LLVMTarget(
        name=profile.name,
        triple=TRIPLE,
        datalayout=DATALAYOUT,
        cpu=profile.selector,
        features=features(profile),
        index_bits=profile.index_bitwidth,
        offset_bits=profile.offset_bitwidth,
        subgroup_size=wave,
        address_space=ADDRESS_SPACES,
        kernel_cc="amdgpu_kernel",
        kernel_attributes=('"amdgpu-flat-work-group-size"="{flat_lo},{flat_hi}"',
                           '"uniform-work-group-size"="true"'),
        kernel_metadata_folded=("!reqd_work_group_size !{{i32 {x}, i32 {y}, i32 {z}}}",),
        module_flags=(f'!{{i32 1, !"amdhsa_code_object_version", i32 {version * 100}}}',),
        coordinates=_coordinates(wave),
        syncscope={"subgroup": "wavefront", "workgroup": "workgroup", "device": "agent", "system": ""},
        control_barrier={"workgroup": ("call void @llvm.amdgcn.s.barrier()",),
                         "subgroup": ("call void @llvm.amdgcn.wave.barrier()",)},
        shuffle=("%a = shl i32 %in1, 2",
                 "%out = call i32 @llvm.amdgcn.ds.bpermute(i32 %a, i32 %in0)"),
        broadcast_first=("%out = call i32 @llvm.amdgcn.readfirstlane.i32(i32 %in0)",),
        active_lanes=_active_lanes(wave),
        # Loom buffers are ordinary (coarse-grained) device memory: atomics below
        # system scope may use the hardware's atomic instructions.
        atomic_metadata=("amdgpu.no.fine.grained.memory", "amdgpu.no.remote.memory"),
    )


def kernel_target(module_target: LLVMTarget, module_profile: Profile, kernel_profile: Profile) -> LLVMTarget:
    """A kernel pinned to a record with another wave size runs with its own
    subtarget features (a function attribute); everything else is shared."""
    if wave_size(kernel_profile) == wave_size(module_profile):
        return module_target
    wave = wave_size(kernel_profile)
    return replace(module_target, subgroup_size=wave, coordinates=_coordinates(wave),
                   active_lanes=_active_lanes(wave),
                   function_attributes=(f'"target-features"="{features(kernel_profile)}"',))
