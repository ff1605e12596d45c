"""What an LLVM-based target contributes to the shared lowering: data, and a
few small functions.

The lowering in `loomcli.emit.llvm.lower` is written once. A target hands it
an `LLVMTarget`: address spaces, the calling convention and attributes of a
kernel, module flags, and *hooks* for the few things every GPU spells
differently (coordinates, control barriers, lane shuffles, native subgroup
reductions, atomics). A hook is a small function that builds its
instructions with the function's typed builder (`loomcli.emit.llvm.ir`)
and returns its value, named by the hint the lowering passes; intrinsics
it calls are declared by the builder. Nothing in the shared lowering asks
which target it is compiling for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from loomcli.emit.llvm.ir import FunctionBuilder, PointerType, Type, Value


@dataclass(frozen=True)
class AtomicRMW:
    """One `view.atomic.rmw` as an instruction selector sees it."""

    kind: str              # the Loom kind: "addi", "addf", "xchgf", ...
    type: Type             # LLVM type of the value: i32, i64, float, double
    space: str             # Loom memory space of the view: "global", "workgroup", "generic"
    pointer: PointerType   # LLVM type of the pointer
    scope: str             # Loom scope: "subgroup", "workgroup", "device", "system"
    ordering: str          # Loom ordering: "relaxed", ..., "seq_cst"


# The hooks. Each gets the builder and the name its result should take.
Coordinate = Callable[[FunctionBuilder, str], Value]               # -> an i32
Barrier = Callable[[FunctionBuilder], None]
Shuffle = Callable[[FunctionBuilder, Value, Value, str], Value]    # (i32 word, i32 lane) -> the lane's word
Broadcast = Callable[[FunctionBuilder, Value, str], Value]         # i32 word -> the first active lane's
LaneCount = Callable[[FunctionBuilder, str], Value]                # -> i32 active lanes
SubgroupReduce = Callable[[FunctionBuilder, Value, str], Value]    # value -> reduced over the active lanes
Atomic = Callable[[FunctionBuilder, Value, Value, str], Value]     # (pointer, value) -> the old value
# A target's selector for atomics: its own instructions, or None for LLVM's `atomicrmw`.
AtomicSelector = Callable[[AtomicRMW], "Atomic | None"]
# A string function attribute (`"key"="value"`); in kernel attributes the value
# is a template: `{flat_lo}`/`{flat_hi}` (flat workgroup size bounds) and
# `{x}`, `{y}`, `{z}` (a workgroup size that folds).
Attribute = tuple[str, str]


@dataclass(frozen=True)
class LLVMTarget:
    name: str                         # for messages: "amdgpu:gfx1100"
    triple: str
    datalayout: str
    cpu: str
    features: str
    index_bits: int                   # an `index` is held in this many bits (LANGUAGE.md 17.27)
    offset_bits: int
    subgroup_size: int | None         # fixed wave/subgroup size, None: read it at run time
    # Loom memory space -> LLVM address space; "generic" is the flat space
    # values fall back to when control flow merges two spaces.
    address_space: Mapping[str, int]
    kernel_cc: str                    # calling convention of kernels, e.g. "amdgpu_kernel" ("": C)
    kernel_attributes: tuple[Attribute, ...]
    # Metadata kinds attached to a kernel whose workgroup size folds, as
    # `!kind !{i32 x, i32 y, i32 z}`.
    kernel_metadata_folded: tuple[str, ...]
    module_flags: tuple[tuple[int, str, int], ...]   # (behavior, key, value): `!{i32 1, !"key", i32 500}`
    # Coordinates: "workitem.id.x", "workgroup.id.x", "workgroup.size.x",
    # "workgroup.count.x" (and y, z), "subgroup.lane.id", "subgroup.size".
    coordinates: Mapping[str, Coordinate]
    syncscope: Mapping[str, str]      # Loom scope -> LLVM syncscope ("" is the system scope)
    control_barrier: Mapping[str, Barrier]  # Loom scope (workgroup, subgroup) -> barrier
    shuffle: Shuffle
    broadcast_first: Broadcast
    active_lanes: LaneCount
    # Metadata kinds attached (as `!{}`) to atomics of every scope but system.
    atomic_metadata: tuple[str, ...] = ()
    # Attributes of every function lowered with this target (a kernel's own
    # wave size, say); device functions called from it get them too.
    function_attributes: tuple[Attribute, ...] = ()
    # Kernel attributes only when the workgroup size folds, and only when it does not.
    kernel_attributes_folded: tuple[Attribute, ...] = ()
    kernel_attributes_dynamic: tuple[Attribute, ...] = ()
    # Control barriers (by Loom scope) that also order memory at their own
    # scope, as acquire and release would: no fences around them.
    ordering_barriers: frozenset[str] = frozenset()
    # (Loom combining kind, LLVM type) -> a reduction over the active lanes
    # onto every lane; other kinds take the shuffles.
    subgroup_reduce: Mapping[tuple[str, Type], SubgroupReduce] = field(default_factory=dict)
    # Where LLVM's own lowering of `atomicrmw` falls short of the language
    # (NVPTX in LLVM 22 drops orderings and scopes), the target selects.
    select_atomic: AtomicSelector | None = None

    def space(self, memory_space: str) -> int:
        return self.address_space[memory_space]
