"""The device ABI v1 (TOOLCHAIN.md section 8), computed once for every emitter.

Both emitters and the artifact manifest read their parameter layout from
here, so a host written against the manifest works for every target:

* scalar parameters take slots in parameter order, each at the next offset
  aligned to its slot size: i1 (as 0/1), i8, i16, f16, bf16, i32, f32 take 4
  bytes; i64, f64, index and offset take 8 (the kernel reads the low
  `index_bitwidth`/`offset_bitwidth` bits);
* SPIR-V: buffers are storage buffers in descriptor set 0, binding = ordinal
  among the kernel's buffer parameters; scalars live in one push-constant
  block with the layout above;
* AMDGPU: kernel arguments are the device parameters in order, a buffer an
  8-byte global pointer, scalars in the same slots; LLVM's hidden arguments
  follow (their layout comes from the code object's metadata);
* NVPTX: the same slots, each one `.param` of the entry (a buffer `.u64`, a
  4-byte slot `.u32`/`.f32`, an 8-byte one `.u64`/`.f64`); PTX aligns each
  parameter to its size, so the offsets are those of the parameter space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loomcli.ir.core import Module, Operation
from loomcli.ir.ops import BUFFER_ALLOCA, KERNEL_DEF, KERNEL_LAUNCH_CONFIG, KERNEL_WORKGROUP_REDUCE
from loomcli.ir.types import BUFFER, ScalarType, Type

SLOT_BYTES = {"i1": 4, "i8": 4, "i16": 4, "f16": 4, "bf16": 4, "i32": 4, "f32": 4,
              "i64": 8, "f64": 8, "index": 8, "offset": 8}
POINTER_BYTES = 8


@dataclass(frozen=True)
class Param:
    """One device parameter as hosts see it."""

    name: str
    kind: str             # "scalar" | "buffer"
    type: str             # Loom type name; "buffer" for buffers
    index: int            # position among all device parameters
    byte_offset: int      # kernarg offset (AMDGPU) or push-constant offset (SPIR-V scalars); -1 if none
    byte_length: int      # slot size; 0 for SPIR-V buffers
    binding: int = -1     # SPIR-V: binding in set 0 (buffers)

    def manifest(self, family: str) -> dict[str, object]:
        d: dict[str, object] = {"name": self.name, "kind": self.kind}
        if self.kind == "scalar":
            d["type"] = self.type
        if family == "spirv" and self.kind == "buffer":
            d["set"] = 0
            d["binding"] = self.binding
        else:
            d["byte_offset"] = self.byte_offset
            d["byte_length"] = self.byte_length
        return d


@dataclass(frozen=True)
class KernelABI:
    export: str
    symbol: str
    workload: tuple[tuple[str, str], ...]   # (name, type) of the workload arguments
    params: tuple[Param, ...]
    args_bytes: int                          # AMDGPU explicit kernarg bytes; SPIR-V push-constant bytes

    def manifest_head(self) -> dict[str, Any]:
        """The fields every family's manifest entry starts with (TOOLCHAIN.md 8)."""
        return {"export": self.export, "symbol": self.symbol,
                "workload": [{"name": n, "type": t} for n, t in self.workload]}

    @property
    def buffers(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind == "buffer")

    @property
    def scalars(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind == "scalar")


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def type_name(t: Type) -> str:
    return t.name if isinstance(t, ScalarType) else str(t)


def export_name(kernel: Operation) -> str:
    """A kernel's entry name: its export name, else its symbol (LANGUAGE.md 17.8).
    Read with `attrs.get`: a `kernel.decl` has no `export` to declare."""
    return kernel.attr("export", None) or kernel.attr("sym")


def kernel_abi(kernel: Operation, family: str) -> KernelABI:
    """The parameter layout of `kernel` for `family` ("amdgpu", "nvptx" or "spirv")."""
    args = kernel.signature("launch").args
    params: list[Param] = []
    offset = 0
    binding = 0
    for i, a in enumerate(args):
        if a.type is BUFFER:
            if family == "spirv":
                params.append(Param(a.name, "buffer", "buffer", i, -1, 0, binding))
                binding += 1
            else:
                offset = _align(offset, POINTER_BYTES)
                params.append(Param(a.name, "buffer", "buffer", i, offset, POINTER_BYTES))
                offset += POINTER_BYTES
            continue
        size = SLOT_BYTES[type_name(a.type)]
        offset = _align(offset, size)
        params.append(Param(a.name, "scalar", type_name(a.type), i, offset, size))
        offset += size
    workload = tuple((a.name, type_name(a.type)) for a in kernel.signature().args)
    return KernelABI(export_name(kernel), kernel.attr("sym"), workload, tuple(params), offset)


def exported_kernels(module: Module, roots: set[str] | None = None) -> list[Operation]:
    """Kernels an artifact contains: exported ones and retained roots, in module order."""
    out = []
    for op in module.ops:
        if op.opdef is KERNEL_DEF and (op.has_attr("export") or op.attr("retain", None)
                                        or (roots is not None and op.attr("sym") in roots)):
            out.append(op)
    return out


def workgroup_allocas_bytes(kernel: Operation) -> int:
    """The alloca walk of LANGUAGE.md section 8: from offset 0, align up to each
    workgroup alloca's `align(N)` and add its size, in body order. Sizes must
    be constants by now (config bound, passes run)."""
    from loomcli.semantics.fold import constant_of

    offset = 0
    for op in kernel.region("body").ops:
        if op.opdef is BUFFER_ALLOCA and op.attr("kind", None) == "workgroup":
            size = constant_of(op.operand("bytes"))
            if not isinstance(size, int):
                raise ValueError(f"workgroup alloca of @{kernel.attr('sym')} has no constant size")
            offset = _align(offset, op.attr("align", 1)) + size
    return offset


def workgroup_size_constants(kernel: Operation) -> tuple[int, int, int] | None:
    """The launch config's workgroup size when it folds to constants (after passes)."""
    from loomcli.semantics.fold import constant_of

    config = kernel.region("config").ops[-1]
    if config.opdef is not KERNEL_LAUNCH_CONFIG:
        return None
    values = [constant_of(v) for v in config.operand_group("workgroup_size")]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return (values[0], values[1], values[2])
    return None


REDUCTION_SLOT_BYTES = 8


def reduction_scratch(kernel: Operation, subgroup_size: int | None, max_flat_workgroup_size: int) -> tuple[int, int]:
    """(byte offset, byte size) of the workgroup scratch that `kernel.workgroup.reduce`
    sites share (LANGUAGE.md 17.28): one 8-byte slot per subgroup of the
    workgroup, after the kernel's own allocas (aligned to 8). The workgroup
    is the folded launch size, else the profile's maximum; a target without a
    fixed subgroup size counts one invocation per subgroup (the worst case).
    Kernels without such a site need none: (offset, 0). Sites run one after
    another, separated by barriers, so they reuse the same slots."""
    base = _align(workgroup_allocas_bytes(kernel), REDUCTION_SLOT_BYTES)
    if not any(op.opdef is KERNEL_WORKGROUP_REDUCE for op in kernel.region("body").walk_ops()):
        return base, 0
    size = workgroup_size_constants(kernel)
    flat = size[0] * size[1] * size[2] if size else max_flat_workgroup_size
    per = subgroup_size or 1
    return base, -(-flat // per) * REDUCTION_SLOT_BYTES


def workgroup_storage_bytes(kernel: Operation, subgroup_size: int | None, max_flat_workgroup_size: int) -> int:
    """The contract's `workgroup_storage_bytes`: allocas plus reduction scratch."""
    base, scratch = reduction_scratch(kernel, subgroup_size, max_flat_workgroup_size)
    return base + scratch if scratch else workgroup_allocas_bytes(kernel)
