"""CPU emission: compiled Loom IR -> LLVM IR -> an x86-64 ELF object (`.o`).

The stages (`loomcli.emit.BACKENDS`) are `llir -> asm | obj`. `llir` runs
the shared lowering with the host's target data (`.target`: calls into
the run-time for coordinates, barriers and lane exchanges) and adds one
entry point per kernel that unpacks the kernel's argument block (the
device ABI's kernarg layout, the one AMDGPU and NVPTX use); `asm` and
`obj` link the run-time (`.runtime`) and run LLVM's optimizer and code
generator in the warm worker (`loomcli.emit.llvm.backend`). The object is
what `loom test --device cpu` loads and runs (`loomcli.check.cpu`).
Formats: `cpu-object`, `llvmir-text` (the lowering and the entry points,
before the run-time is linked and LLVM optimizes), `asm` (x86-64 assembly
after optimization). Nothing here imports llvmlite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loomcli.emit import Artifact
from loomcli.emit.stages import StageJob
from loomcli.ir.core import Module, Operation
from loomcli.targets import abi
from loomcli.targets.profiles import Profile

if TYPE_CHECKING:
    from loomcli.emit.llvm import ir as ll
    from loomcli.emit.llvm.lower import KernelPlan

ENTRY_SUFFIX = ".loom_cpu_entry"   # the entry point of kernel K is `K.loom_cpu_entry(ptr kernarg)`


def entry_name(export: str) -> str:
    return export + ENTRY_SUFFIX


def _slot_type(p: abi.Param) -> ll.Type:
    """The LLVM type of a parameter's kernarg slot, as the lowering declares the kernel's parameter."""
    from loomcli.emit.llvm import ir as ll

    if p.kind == "buffer":
        return ll.pointer(0)
    if p.type in ("f32", "f64"):
        return ll.FLOAT if p.type == "f32" else ll.DOUBLE
    return ll.I64 if p.byte_length == 8 else ll.I32


def add_entry_points(module: ll.Module, plans: list[KernelPlan]) -> None:
    """`K.loom_cpu_entry(ptr %args)` for each kernel K: loads each parameter
    from its kernarg slot and calls the kernel (the lowering's parameters,
    in order)."""
    from loomcli.emit.llvm import ir as ll

    attributes = module.attributes(["nounwind"])
    for plan in plans:
        info = abi.kernel_abi(plan.kernel, "cpu")
        b = ll.FunctionBuilder(module)
        block = b.argument(ll.pointer(0), "args")
        values = []
        for p in info.params:
            at = b.gep(ll.I8, block, ll.const_int(ll.I64, p.byte_offset), hint=f"{p.name}.at")
            values.append(b.load(_slot_type(p), at, p.byte_length, hint=p.name))
        kernel = ll.Callee("@" + plan.export, ll.VOID, [v.type for v in values], defined=True)
        b.call(kernel, values)
        b.ret()
        b.define(module.global_name(entry_name(plan.export)), ll.VOID, [(block, "")], attributes)


def needs_fibers(module: Module, kernel: Operation) -> bool:
    """Whether the kernel, or a function it calls, has a convergent op (a
    barrier, a reduction): then its invocations run as fibers."""
    from loomcli.ir.ops import CALL, CONVERGENT

    symbols = module.symbols()
    seen: set[str] = set()
    stack = [kernel]
    while stack:
        fn = stack.pop()
        for op in fn.walk():
            if op.opdef.has(CONVERGENT):
                return True
            callee = op.attr("callee", None) if op.opdef.has(CALL) else None
            if isinstance(callee, str) and callee not in seen and callee in symbols:
                seen.add(callee)
                stack.append(symbols[callee])
    return False


def kernel_entries(module: Module, kernels: list[Operation]) -> list[dict[str, Any]]:
    out = []
    for kernel in kernels:
        info = abi.kernel_abi(kernel, "cpu")
        entry: dict[str, Any] = info.manifest_head()
        size = abi.workgroup_size_constants(kernel)
        if size is not None:
            entry["workgroup_size"] = list(size)
        entry["parameters"] = [p.manifest("cpu") for p in info.params]
        entry["entry"] = entry_name(info.export)
        entry["fibers"] = needs_fibers(module, kernel)
        out.append(entry)
    return out


def target_entry(profile: Profile) -> dict[str, Any]:
    from loomcli.emit.cpu.target import TRIPLE

    return {"family": "cpu", "selector": profile.selector, "triple": TRIPLE,
            "subgroup_size": profile.subgroup_size}


def emit_cpu(module: Module, profile: Profile, fmt: str) -> Artifact:
    """Emit `module`'s kernels for `profile` as `fmt` (see `loomcli.emit.BACKENDS`)."""
    from loomcli.emit import BACKENDS

    return BACKENDS["cpu"].emit(module, profile, fmt)


# The stages (`loomcli.emit.BACKENDS`): llir -> asm | obj.


def lower_stage(job: StageJob, _: bytes) -> bytes:
    from loomcli.emit.cpu.target import llvm_target
    from loomcli.emit.llvm import backend

    ir, job.facts["kernels"], _profiles = backend.lower(job.module, job.profile, llvm_target(job.profile),
                                                        extend=add_entry_points)
    return ir.encode()


def _codegen(job: StageJob, ir: bytes, emit: str) -> bytes:
    from loomcli.emit.cpu.runtime import RUNTIME_IR
    from loomcli.emit.cpu.target import llvm_target
    from loomcli.emit.llvm import backend

    return backend.codegen(ir.decode(), llvm_target(job.profile), emit, link=(RUNTIME_IR,))


def asm_stage(job: StageJob, ir: bytes) -> bytes:
    return _codegen(job, ir, "assembly")


def object_stage(job: StageJob, ir: bytes) -> bytes:
    return _codegen(job, ir, "object")


def manifest_facts(job: StageJob) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return kernel_entries(job.module, job.facts["kernels"]), target_entry(job.profile)
