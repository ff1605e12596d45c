"""NVPTX as data for the shared LLVM lowering (LLVM NVPTXUsage, PTX ISA 7.8+).

Everything the lowering needs to know about NVIDIA GPUs is in `llvm_target`:
address spaces, the `ptx_kernel` convention with `.reqntid`/`.maxntid`,
snippets for coordinates (the `%tid`, `%ctaid`, `%ntid`, `%nctaid` and
`%laneid` special registers), barriers (`bar.sync`, `bar.warp.sync`) and
lane shuffles (`shfl.sync` over the active mask) and 32-bit integer
subgroup reductions (`redux.sync`), and the selector for atomics
(`select_atomic`).

Atomics are the one place where LLVM 22's NVPTX back end falls short of
the language: it lowers `atomicrmw` to `atom` without `.sem` or `.scope`,
which is `.relaxed.gpu` whatever the IR asked for. `select_atomic` spells
the PTX instruction with the ordering and scope the language gives it
(`atom.acq_rel.cta.shared.add.u32`, ...); seq_cst is `fence.sc` followed by
an acquire RMW, as CUDA's libcu++ maps it. Float min/max have no `atom`
instruction and stay with LLVM's compare-and-swap loop, which keeps scope
and ordering.
"""

from __future__ import annotations

from loomcli.emit.llvm.target import AtomicRMW, LLVMTarget
from loomcli.targets.profiles import Profile

TRIPLE = "nvptx64-nvidia-cuda"
# LLVM 22's NVPTX data layout; the code generator checks it against the target machine.
DATALAYOUT = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"

# Private memory is `alloca` in the generic space (the data layout has no
# alloca address space); LLVM moves it to `.local`.
ADDRESS_SPACES = {"generic": 0, "global": 1, "workgroup": 3, "constant": 4, "private": 0}

# PTX has no subgroup (warp) scope for memory: the CTA scope includes it.
SYNCSCOPE = {"subgroup": "block", "workgroup": "block", "device": "device", "system": ""}
PTX_SCOPE = {"subgroup": "cta", "workgroup": "cta", "device": "gpu", "system": "sys"}
PTX_SEM = {"relaxed": "relaxed", "acquire": "acquire", "release": "release", "acq_rel": "acq_rel",
           "seq_cst": "acquire"}
PTX_SPACE = {"global": ".global", "workgroup": ".shared", "generic": ""}

# Loom kind -> (PTX operation, type letter per LLVM type); float min/max are absent.
_ATOM = {
    "addi": ("add", {"i32": "u32", "i64": "u64"}),
    "subi": ("add", {"i32": "u32", "i64": "u64"}),   # adds the negated value: PTX has no atom.sub
    "andi": ("and", {"i32": "b32", "i64": "b64"}),
    "ori": ("or", {"i32": "b32", "i64": "b64"}),
    "xori": ("xor", {"i32": "b32", "i64": "b64"}),
    "minsi": ("min", {"i32": "s32", "i64": "s64"}),
    "maxsi": ("max", {"i32": "s32", "i64": "s64"}),
    "minui": ("min", {"i32": "u32", "i64": "u64"}),
    "maxui": ("max", {"i32": "u32", "i64": "u64"}),
    "xchgi": ("exch", {"i32": "b32", "i64": "b64"}),
    "xchgf": ("exch", {"float": "b32", "double": "b64"}),
    "addf": ("add", {"float": "f32", "double": "f64"}),
}
_CONSTRAINT = {"i32": "r", "i64": "l", "float": "f", "double": "d"}

def select_atomic(a: AtomicRMW) -> tuple[str, ...] | None:
    """`atom{.sem}{.scope}{.space}.op.type` as inline PTX, or None (LLVM's loop)."""
    entry = _ATOM.get(a.kind)
    if entry is None or a.llty not in entry[1]:
        return None
    op, types = entry
    sem, scope = PTX_SEM[a.ordering], PTX_SCOPE[a.scope]
    c = _CONSTRAINT[a.llty]
    fence = f"fence.sc.{scope}; " if a.ordering == "seq_cst" else ""
    asm = f"{fence}atom.{sem}.{scope}{PTX_SPACE[a.space]}.{op}.{types[a.llty]} $0, [$1], $2;"
    value = "%in1"
    lines: list[str] = []
    if a.kind == "subi":
        lines.append(f"%neg = sub {a.llty} 0, %in1")
        value = "%neg"
    lines.append(f'%out = call {a.llty} asm sideeffect "{asm}", "={c},l,{c},~{{memory}}"'
                 f"({a.pointer} %in0, {a.llty} {value})")
    return tuple(lines)


# redux.sync (sm_80+): one instruction reduces a 32-bit integer over the lanes
# of a member mask. Every NVPTX profile is sm_80 or newer.
_REDUX = {"addi": "add", "minsi": "min", "maxsi": "max", "minui": "umin", "maxui": "umax", "andi": "and",
          "ori": "or", "xori": "xor"}
SUBGROUP_REDUCE = {(kind, "i32"): ("%m = call i32 @llvm.nvvm.activemask()",
                                   f"%out = call i32 @llvm.nvvm.redux.sync.{op}(i32 %in0, i32 %m)")
                   for kind, op in _REDUX.items()}


def _coordinates() -> dict[str, tuple[str, ...]]:
    c: dict[str, tuple[str, ...]] = {}
    for axis in "xyz":
        c[f"workitem.id.{axis}"] = (f"%out = call i32 @llvm.nvvm.read.ptx.sreg.tid.{axis}()",)
        c[f"workgroup.id.{axis}"] = (f"%out = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.{axis}()",)
        c[f"workgroup.size.{axis}"] = (f"%out = call i32 @llvm.nvvm.read.ptx.sreg.ntid.{axis}()",)
        c[f"workgroup.count.{axis}"] = (f"%out = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.{axis}()",)
    c["subgroup.lane.id"] = ("%out = call i32 @llvm.nvvm.read.ptx.sreg.laneid()",)
    c["subgroup.size"] = ("%out = call i32 @llvm.nvvm.read.ptx.sreg.warpsize()",)
    return c


def llvm_target(profile: Profile) -> LLVMTarget:
    """The shared lowering's view of an NVPTX profile."""
    # The active lanes of a warp at a convergent point are the lanes a
    # `.sync` instruction names: lanes past a short last warp never exist.
    active = "%m = call i32 @llvm.nvvm.activemask()"
    return LLVMTarget(
        name=profile.name,
        triple=TRIPLE,
        datalayout=DATALAYOUT,
        cpu=profile.selector,
        features="",
        index_bits=profile.index_bitwidth,
        offset_bits=profile.offset_bitwidth,
        subgroup_size=32,
        address_space=ADDRESS_SPACES,
        kernel_cc="ptx_kernel",
        kernel_attributes=(),
        kernel_metadata_folded=(),
        # ptxas rejects .maxntid beside .reqntid; the maximum keeps the register
        # budget within what 1024 invocations may use.
        kernel_attributes_folded=('"nvvm.reqntid"="{x},{y},{z}"',),
        kernel_attributes_dynamic=('"nvvm.maxntid"="{flat_hi}"',),
        module_flags=(),
        coordinates=_coordinates(),
        syncscope=SYNCSCOPE,
        control_barrier={"workgroup": ("call void @llvm.nvvm.barrier0()",),
                         "subgroup": (active, "call void @llvm.nvvm.bar.warp.sync(i32 %m)")},
        # PTX: bar.sync makes the CTA's prior shared and global accesses visible
        # to the CTA (CUDA's __syncthreads is bar.sync alone); bar.warp.sync
        # does so among the warp's participating lanes.
        ordering_barriers=frozenset({"workgroup", "subgroup"}),
        shuffle=(active, "%out = call i32 @llvm.nvvm.shfl.sync.idx.i32(i32 %m, i32 %in0, i32 %in1, i32 31)"),
        broadcast_first=(active, "%first = call i32 @llvm.cttz.i32(i32 %m, i1 true)",
                         "%out = call i32 @llvm.nvvm.shfl.sync.idx.i32(i32 %m, i32 %in0, i32 %first, i32 31)"),
        active_lanes=(active, "%out = call i32 @llvm.ctpop.i32(i32 %m)"),
        subgroup_reduce=SUBGROUP_REDUCE,
        select_atomic=select_atomic,
    )
