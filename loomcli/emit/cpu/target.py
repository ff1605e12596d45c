"""The host CPU as data for the shared LLVM lowering.

Everything a GPU reads from special registers or does in hardware is a call
into the CPU run-time (`loomcli.emit.cpu.runtime`), which is linked into the
module before LLVM's optimizer, so the calls inline: coordinates read the
scheduler's state, barriers yield the invocation's fiber, a lane shuffle
goes through one slot per invocation between two subgroup barriers. One
address space (0) holds every Loom memory space; scopes are all the
system's (one thread runs a launch, so any scope is as cheap).
"""

from __future__ import annotations

from loomcli.emit.llvm.ir import I32, VOID, Callee, FunctionBuilder, Type, Value, const_int
from loomcli.emit.llvm.target import Barrier, Coordinate, LLVMTarget
from loomcli.targets.profiles import Profile

TRIPLE = "x86_64-unknown-linux-gnu"
# LLVM 22's x86-64 ELF data layout; the code generator checks it against the target machine.
DATALAYOUT = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
ADDRESS_SPACES = {"generic": 0, "global": 0, "workgroup": 0, "constant": 0, "private": 0}
SYNCSCOPE = {"subgroup": "", "workgroup": "", "device": "", "system": ""}


def _runtime(name: str, ret: Type = I32, *params: Type) -> Callee:
    """A function of the run-time (declared here, defined by the linked run-time)."""
    return Callee("@loom_cpu_" + name, ret, params)


SHUFFLE = _runtime("shuffle", I32, I32, I32)
LANE_ID = _runtime("lane_id")
SUBGROUP_SIZE = _runtime("subgroup_size")
ACTIVE_LANES = _runtime("active_lanes")


def _axis(fn: str, k: int) -> Coordinate:
    callee = _runtime(fn, I32, I32)
    return lambda b, hint: b.call_value(callee, [const_int(I32, k)], hint=hint)


def _plain(callee: Callee) -> Coordinate:
    return lambda b, hint: b.call_value(callee, [], hint=hint)


def _coordinates() -> dict[str, Coordinate]:
    c: dict[str, Coordinate] = {}
    for k, axis in enumerate("xyz"):
        for key, fn in (("workitem.id", "workitem_id"), ("workgroup.id", "workgroup_id"),
                        ("workgroup.size", "workgroup_size"), ("workgroup.count", "workgroup_count")):
            c[f"{key}.{axis}"] = _axis(fn, k)
    c["subgroup.lane.id"] = _plain(LANE_ID)
    c["subgroup.size"] = _plain(SUBGROUP_SIZE)
    return c


def _barrier(scope: str) -> Barrier:
    callee = _runtime(f"{scope}_barrier", VOID)

    def barrier(b: FunctionBuilder) -> None:
        b.call(callee, [])
    return barrier


def _shuffle(b: FunctionBuilder, word: Value, lane: Value, hint: str) -> Value:
    return b.call_value(SHUFFLE, [word, lane], hint=hint)


def _broadcast_first(b: FunctionBuilder, word: Value, hint: str) -> Value:
    # Lane 0 is always active: a subgroup is a run of consecutive invocations.
    return b.call_value(SHUFFLE, [word, const_int(I32, 0)], hint=hint)


COORDINATES = _coordinates()
BARRIERS = {"workgroup": _barrier("workgroup"), "subgroup": _barrier("subgroup")}


def llvm_target(profile: Profile) -> LLVMTarget:
    """The shared lowering's view of a cpu profile."""
    return LLVMTarget(
        name=profile.name,
        triple=TRIPLE,
        datalayout=DATALAYOUT,
        cpu=profile.selector,
        features="",
        index_bits=profile.index_bitwidth,
        offset_bits=profile.offset_bitwidth,
        subgroup_size=profile.subgroup_size,
        address_space=ADDRESS_SPACES,
        kernel_cc="",
        kernel_attributes=(),
        kernel_metadata_folded=(),
        module_flags=(),
        coordinates=COORDINATES,
        syncscope=SYNCSCOPE,
        control_barrier=BARRIERS,
        shuffle=_shuffle,
        broadcast_first=_broadcast_first,
        active_lanes=_plain(ACTIVE_LANES),
    )
