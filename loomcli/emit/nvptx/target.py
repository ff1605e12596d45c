"""NVPTX as data for the shared LLVM lowering (LLVM NVPTXUsage, PTX ISA 7.8+).

Everything the lowering needs to know about NVIDIA GPUs is in `llvm_target`:
address spaces, the `ptx_kernel` convention with `.reqntid`/`.maxntid`,
hooks for coordinates (the `%tid`, `%ctaid`, `%ntid`, `%nctaid` and
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

from loomcli.emit.llvm.ir import DOUBLE, FLOAT, I1, I32, I64, VOID, FunctionBuilder, Type, Value, const_int, intrinsic
from loomcli.emit.llvm.target import Atomic, AtomicRMW, Barrier, Coordinate, LLVMTarget, SubgroupReduce
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
_ATOM: dict[str, tuple[str, dict[Type, str]]] = {
    "addi": ("add", {I32: "u32", I64: "u64"}),
    "subi": ("add", {I32: "u32", I64: "u64"}),   # adds the negated value: PTX has no atom.sub
    "andi": ("and", {I32: "b32", I64: "b64"}),
    "ori": ("or", {I32: "b32", I64: "b64"}),
    "xori": ("xor", {I32: "b32", I64: "b64"}),
    "minsi": ("min", {I32: "s32", I64: "s64"}),
    "maxsi": ("max", {I32: "s32", I64: "s64"}),
    "minui": ("min", {I32: "u32", I64: "u64"}),
    "maxui": ("max", {I32: "u32", I64: "u64"}),
    "xchgi": ("exch", {I32: "b32", I64: "b64"}),
    "xchgf": ("exch", {FLOAT: "b32", DOUBLE: "b64"}),
    "addf": ("add", {FLOAT: "f32", DOUBLE: "f64"}),
}
_CONSTRAINT = {I32: "r", I64: "l", FLOAT: "f", DOUBLE: "d"}


def select_atomic(a: AtomicRMW) -> Atomic | None:
    """`atom{.sem}{.scope}{.space}.op.type` as inline PTX, or None (LLVM's loop)."""
    entry = _ATOM.get(a.kind)
    if entry is None or a.type not in entry[1]:
        return None
    op, types = entry
    sem, scope = PTX_SEM[a.ordering], PTX_SCOPE[a.scope]
    c = _CONSTRAINT[a.type]
    fence = f"fence.sc.{scope}; " if a.ordering == "seq_cst" else ""
    asm = f"{fence}atom.{sem}.{scope}{PTX_SPACE[a.space]}.{op}.{types[a.type]} $0, [$1], $2;"
    constraints = f"={c},l,{c},~{{memory}}"

    def atom(b: FunctionBuilder, ptr: Value, value: Value, hint: str) -> Value:
        if a.kind == "subi":
            value = b.binop("sub", const_int(a.type, 0), value, hint="neg")
        return b.inline_asm(a.type, asm, constraints, [ptr, value], hint)
    return atom


ACTIVEMASK = intrinsic("llvm.nvvm.activemask", I32)
SHFL_IDX = intrinsic("llvm.nvvm.shfl.sync.idx.i32", I32, I32, I32, I32, I32)
CTTZ = intrinsic("llvm.cttz.i32", I32, I32, I1)
CTPOP = intrinsic("llvm.ctpop.i32", I32, I32)
WARP_SYNC = intrinsic("llvm.nvvm.bar.warp.sync", VOID, I32)
ALL_LANES_CLAMP = const_int(I32, 31)


# The active lanes of a warp at a convergent point are the lanes a `.sync`
# instruction names: lanes past a short last warp never exist.
def _active(b: FunctionBuilder) -> Value:
    return b.call_value(ACTIVEMASK, [], hint="m")


def _shuffle(b: FunctionBuilder, word: Value, lane: Value, hint: str) -> Value:
    return b.call_value(SHFL_IDX, [_active(b), word, lane, ALL_LANES_CLAMP], hint=hint)


def _broadcast_first(b: FunctionBuilder, word: Value, hint: str) -> Value:
    mask = _active(b)
    first = b.call_value(CTTZ, [mask, const_int(I1, 1)], hint="first")
    return b.call_value(SHFL_IDX, [mask, word, first, ALL_LANES_CLAMP], hint=hint)


def _active_lanes(b: FunctionBuilder, hint: str) -> Value:
    return b.call_value(CTPOP, [_active(b)], hint=hint)


def _warp_barrier(b: FunctionBuilder) -> None:
    b.call(WARP_SYNC, [_active(b)])


def _barrier0(b: FunctionBuilder) -> None:
    b.call(intrinsic("llvm.nvvm.barrier0", VOID), [])


# redux.sync (sm_80+): one instruction reduces a 32-bit integer over the lanes
# of a member mask. Every NVPTX profile is sm_80 or newer.
_REDUX = {"addi": "add", "minsi": "min", "maxsi": "max", "minui": "umin", "maxui": "umax", "andi": "and",
          "ori": "or", "xori": "xor"}


def _redux(op: str) -> SubgroupReduce:
    callee = intrinsic(f"llvm.nvvm.redux.sync.{op}", I32, I32, I32)

    def reduce(b: FunctionBuilder, v: Value, hint: str) -> Value:
        mask = _active(b)
        return b.call_value(callee, [v, mask], hint=hint)
    return reduce


SUBGROUP_REDUCE: dict[tuple[str, Type], SubgroupReduce] = {(kind, I32): _redux(op) for kind, op in _REDUX.items()}


def _sreg(name: str) -> Coordinate:
    callee = intrinsic(f"llvm.nvvm.read.ptx.sreg.{name}", I32)
    return lambda b, hint: b.call_value(callee, [], hint=hint)


def _coordinates() -> dict[str, Coordinate]:
    c: dict[str, Coordinate] = {}
    for axis in "xyz":
        c[f"workitem.id.{axis}"] = _sreg(f"tid.{axis}")
        c[f"workgroup.id.{axis}"] = _sreg(f"ctaid.{axis}")
        c[f"workgroup.size.{axis}"] = _sreg(f"ntid.{axis}")
        c[f"workgroup.count.{axis}"] = _sreg(f"nctaid.{axis}")
    c["subgroup.lane.id"] = _sreg("laneid")
    c["subgroup.size"] = _sreg("warpsize")
    return c


COORDINATES = _coordinates()
BARRIERS: dict[str, Barrier] = {"workgroup": _barrier0, "subgroup": _warp_barrier}


def llvm_target(profile: Profile) -> LLVMTarget:
    """The shared lowering's view of an NVPTX profile."""
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
        kernel_attributes_folded=(("nvvm.reqntid", "{x},{y},{z}"),),
        kernel_attributes_dynamic=(("nvvm.maxntid", "{flat_hi}"),),
        module_flags=(),
        coordinates=COORDINATES,
        syncscope=SYNCSCOPE,
        control_barrier=BARRIERS,
        # PTX: bar.sync makes the CTA's prior shared and global accesses visible
        # to the CTA (CUDA's __syncthreads is bar.sync alone); bar.warp.sync
        # does so among the warp's participating lanes.
        ordering_barriers=frozenset({"workgroup", "subgroup"}),
        shuffle=_shuffle,
        broadcast_first=_broadcast_first,
        active_lanes=_active_lanes,
        subgroup_reduce=SUBGROUP_REDUCE,
        select_atomic=select_atomic,
    )
