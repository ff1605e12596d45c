"""AMDGPU as data for the shared LLVM lowering (LLVM AMDGPUUsage, code object v5/v6).

Everything the lowering needs to know about AMDGPU is in `llvm_target`:
address spaces, the `amdgpu_kernel` convention and its attributes, the code
object version flag, and hooks for coordinates (workitem/workgroup ids are
intrinsics; workgroup sizes and counts are the v5 implicit kernel
arguments `hidden_group_size_*` and `hidden_block_count_*`), barriers,
lane shuffles (`ds_bpermute`) and broadcasts.
"""

from __future__ import annotations

from dataclasses import replace

from loomcli.emit.llvm.ir import (
    I1,
    I8,
    I16,
    I32,
    I64,
    VOID,
    FunctionBuilder,
    Type,
    Value,
    const_int,
    intrinsic,
    pointer,
)
from loomcli.emit.llvm.target import Barrier, Coordinate, LaneCount, LLVMTarget
from loomcli.targets.profiles import Profile

TRIPLE = "amdgcn-amd-amdhsa"
# LLVM 22's AMDGPU data layout; the code generator checks it against the target machine.
DATALAYOUT = ("e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-"
              "p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-"
              "v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9")

ADDRESS_SPACES = {"generic": 0, "global": 1, "workgroup": 3, "constant": 4, "private": 5}

# Code object v5 implicit kernel arguments (byte offset, LLVM type) after the explicit ones.
HIDDEN_BLOCK_COUNT = ((0, I32), (4, I32), (8, I32))
HIDDEN_GROUP_SIZE = ((12, I16), (14, I16), (16, I16))

# Chips with a fixed wave64 (gfx9 family); the others run wave32 or wave64.
_WAVE64_ONLY = frozenset({"gfx90a", "gfx942", "gfx950", "gfx9-generic", "gfx9-4-generic"})

IMPLICITARG_PTR = intrinsic("llvm.amdgcn.implicitarg.ptr", pointer(4))
MBCNT_LO = intrinsic("llvm.amdgcn.mbcnt.lo", I32, I32, I32)
MBCNT_HI = intrinsic("llvm.amdgcn.mbcnt.hi", I32, I32, I32)
ALL_LANES, NO_LANES = const_int(I32, -1), const_int(I32, 0)


def _call(name: str) -> Coordinate:
    callee = intrinsic(name, I32)
    return lambda b, hint: b.call_value(callee, [], hint=hint)


def _implicit_load(offset: int, ty: Type) -> Coordinate:
    """A v5 implicit kernel argument, as i32."""
    def load(b: FunctionBuilder, hint: str) -> Value:
        ia = b.call_value(IMPLICITARG_PTR, [], hint="ia")
        p = b.gep(I8, ia, const_int(I64, offset), "p")
        empty = b.module.node()
        attached = (("invariant.load", empty), ("noundef", empty))
        if ty is I16:
            return b.cast("zext", b.load(I16, p, 2, attached, "v"), I32, hint)
        return b.load(I32, p, 4, attached, hint)
    return load


def _lane_id(wave: int) -> Coordinate:
    def lane(b: FunctionBuilder, hint: str) -> Value:
        if wave == 32:
            return b.call_value(MBCNT_LO, [ALL_LANES, NO_LANES], hint=hint)
        lo = b.call_value(MBCNT_LO, [ALL_LANES, NO_LANES], hint="lo")
        return b.call_value(MBCNT_HI, [ALL_LANES, lo], hint=hint)
    return lane


def _coordinates(wave: int) -> dict[str, Coordinate]:
    c: dict[str, Coordinate] = {}
    for d, axis in enumerate("xyz"):
        c[f"workitem.id.{axis}"] = _call(f"llvm.amdgcn.workitem.id.{axis}")
        c[f"workgroup.id.{axis}"] = _call(f"llvm.amdgcn.workgroup.id.{axis}")
        c[f"workgroup.size.{axis}"] = _implicit_load(*HIDDEN_GROUP_SIZE[d])
        c[f"workgroup.count.{axis}"] = _implicit_load(*HIDDEN_BLOCK_COUNT[d])
    c["subgroup.lane.id"] = _lane_id(wave)
    c["subgroup.size"] = _call("llvm.amdgcn.wavefrontsize")
    return c


def _active_lanes(wave: int) -> LaneCount:
    """The number of active lanes: a ballot of `true`, counted."""
    word = I64 if wave == 64 else I32
    ballot = intrinsic(f"llvm.amdgcn.ballot.{word.mangle}", word, I1)
    ctpop = intrinsic(f"llvm.ctpop.{word.mangle}", word, word)

    def count(b: FunctionBuilder, hint: str) -> Value:
        mask = b.call_value(ballot, [const_int(I1, 1)], hint="b")
        if word is I32:
            return b.call_value(ctpop, [mask], hint=hint)
        return b.cast("trunc", b.call_value(ctpop, [mask], hint="n"), I32, hint)
    return count


def _barrier(name: str) -> Barrier:
    callee = intrinsic(name, VOID)

    def barrier(b: FunctionBuilder) -> None:
        b.call(callee, [])
    return barrier


BPERMUTE = intrinsic("llvm.amdgcn.ds.bpermute", I32, I32, I32)
READFIRSTLANE = intrinsic("llvm.amdgcn.readfirstlane.i32", I32, I32)


def _shuffle(b: FunctionBuilder, word: Value, lane: Value, hint: str) -> Value:
    """`ds_bpermute` addresses lanes in bytes."""
    return b.call_value(BPERMUTE, [b.binop("shl", lane, const_int(I32, 2), hint="a"), word], hint=hint)


def _broadcast_first(b: FunctionBuilder, word: Value, hint: str) -> Value:
    return b.call_value(READFIRSTLANE, [word], hint=hint)


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
        kernel_attributes=(("amdgpu-flat-work-group-size", "{flat_lo},{flat_hi}"),
                           ("uniform-work-group-size", "true")),
        kernel_metadata_folded=("reqd_work_group_size",),
        module_flags=((1, "amdhsa_code_object_version", version * 100),),
        coordinates=_coordinates(wave),
        syncscope={"subgroup": "wavefront", "workgroup": "workgroup", "device": "agent", "system": ""},
        control_barrier={"workgroup": _barrier("llvm.amdgcn.s.barrier"),
                         "subgroup": _barrier("llvm.amdgcn.wave.barrier")},
        shuffle=_shuffle,
        broadcast_first=_broadcast_first,
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
                   function_attributes=(("target-features", features(kernel_profile)),))
