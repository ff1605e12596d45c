"""What an LLVM-based target contributes to the shared lowering: data only.

The lowering in `loomcli.emit.llvm.lower` is written once. A target hands it
an `LLVMTarget`: address spaces, the calling convention and attributes of a
kernel, module flags, and small *snippets* of LLVM IR for the few things
every GPU spells differently (coordinates, control barriers, lane shuffles).

A snippet is a tuple of LLVM IR instruction lines. `%in0`, `%in1`, ... name
its inputs and `%out` its result; every other `%name` is a local that the
lowering renames to a fresh value. Calls inside snippets are declared
automatically from their call sites, so a snippet needs no `declare` lines.
Nothing in the shared lowering asks which target it is compiling for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Snippet = tuple[str, ...]


@dataclass(frozen=True)
class AtomicRMW:
    """One `view.atomic.rmw` as an instruction selector sees it."""

    kind: str        # the Loom kind: "addi", "addf", "xchgf", ...
    llty: str        # LLVM type of the value: "i32", "i64", "float", "double"
    space: str       # Loom memory space of the view: "global", "workgroup", "generic"
    pointer: str     # LLVM type of the pointer, e.g. "ptr addrspace(1)"
    scope: str       # Loom scope: "subgroup", "workgroup", "device", "system"
    ordering: str    # Loom ordering: "relaxed", ..., "seq_cst"


# A target's selector for atomics: a snippet (`%in0` the pointer, `%in1` the
# value, `%out` the old value), or None for LLVM's `atomicrmw`.
AtomicSelector = Callable[[AtomicRMW], "Snippet | None"]

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
    kernel_cc: str                    # calling convention of kernels, e.g. "amdgpu_kernel"
    # Kernel function attributes; `{flat_lo}`/`{flat_hi}` are the flat
    # workgroup size bounds (equal when the size folds).
    kernel_attributes: tuple[str, ...]
    # `!name !{...}` attachments of a kernel whose workgroup size folds;
    # `{x}`, `{y}`, `{z}` are the sizes.
    kernel_metadata_folded: tuple[str, ...]
    module_flags: tuple[str, ...]     # metadata tuples, e.g. '!{i32 1, !"key", i32 500}'
    # Coordinates: "workitem.id.x", "workgroup.id.x", "workgroup.size.x",
    # "workgroup.count.x" (and y, z), "subgroup.lane.id", "subgroup.size".
    coordinates: Mapping[str, Snippet]
    syncscope: Mapping[str, str]      # Loom scope -> LLVM syncscope ("" is the system scope)
    control_barrier: Mapping[str, Snippet]  # Loom scope (workgroup, subgroup) -> barrier
    shuffle: Snippet                  # %out (i32) = %in0 (i32) of lane %in1 (i32)
    broadcast_first: Snippet          # %out (i32) = %in0 (i32) of the first active lane
    active_lanes: Snippet             # %out (i32) = number of active lanes of the subgroup
    # Metadata kinds attached (as `!{}`) to atomics of every scope but system.
    atomic_metadata: tuple[str, ...] = ()
    # Attributes of every function lowered with this target (a kernel's own
    # wave size, say); device functions called from it get them too.
    function_attributes: tuple[str, ...] = ()
    # Kernel attributes only when the workgroup size folds (`{x}`, `{y}`,
    # `{z}`), and only when it does not (`{flat_hi}`).
    kernel_attributes_folded: tuple[str, ...] = ()
    kernel_attributes_dynamic: tuple[str, ...] = ()
    # Control barriers (by Loom scope) that also order memory at their own
    # scope, as acquire and release would: no fences around them.
    ordering_barriers: frozenset[str] = frozenset()
    # (Loom combining kind, LLVM type) -> a snippet reducing `%in0` over the
    # active lanes into `%out` on every lane; other kinds take the shuffles.
    subgroup_reduce: Mapping[tuple[str, str], Snippet] = field(default_factory=dict)
    # Where LLVM's own lowering of `atomicrmw` falls short of the language
    # (NVPTX in LLVM 22 drops orderings and scopes), the target selects.
    select_atomic: AtomicSelector | None = None

    def space(self, memory_space: str) -> int:
        return self.address_space[memory_space]
