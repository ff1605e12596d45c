"""AMDGPU emission: compiled Loom IR -> LLVM IR -> code object (`.hsaco`).

`emit_amdgpu(module, profile, fmt)` runs the shared lowering
(`loomcli.emit.llvm`) with AMDGPU's target data (`.target`), hands the LLVM
IR to a warm worker process for LLVM's optimizer and code generator
(`loomcli.jobs.isolated`, `loomcli.emit.llvm.codegen`), links the relocatable
object into a shared object in Python (`.elf`), and reads the kernels'
`NT_AMDGPU_METADATA` (`.msgpack`) for the manifest (`.manifest`).

Formats: `amdgpu-hsaco` (the code object), `llvmir-text` (the LLVM IR handed
to LLVM, before its optimizer), `asm` (AMDGPU assembly after optimization).
Nothing here imports llvmlite; only the worker does.
"""

from __future__ import annotations

import os

from loomcli.emit import Artifact
from loomcli.errors import LoomError
from loomcli.ir.core import Module, Operation
from loomcli.targets.profiles import Profile

CODEGEN = "loomcli.emit.llvm.codegen"
FORMATS = ("amdgpu-hsaco", "llvmir-text", "asm")


def _kernel_profile(module: Module, kernel: Operation, profile: Profile) -> Profile:
    """A kernel pinned to a target record compiles with the record's profile."""
    if "target" not in kernel.attrs:
        return profile
    try:
        from loomcli.targets.checks import profile_for
    except ImportError:  # pragma: no cover - records not available
        return profile
    return profile_for(module, kernel, profile) or profile


def lower(module: Module, profile: Profile) -> tuple[str, list[Operation], dict[str, Profile]]:
    """The LLVM IR of the module's kernels for `profile`, the kernels, and
    each kernel's profile (by export name)."""
    from loomcli.emit.amdgpu.target import kernel_target, llvm_target
    from loomcli.emit.llvm.lower import LoweringError, lower_module, plan_kernel
    from loomcli.targets.abi import exported_kernels

    target = llvm_target(profile)
    kernels = exported_kernels(module)
    plans = []
    profiles = {}
    try:
        for kernel in kernels:
            kp = _kernel_profile(module, kernel, profile)
            plan = plan_kernel(kernel, kernel_target(target, profile, kp), kp.max_flat_workgroup_size)
            profiles[plan.export] = kp
            plans.append(plan)
        return lower_module(module, plans, target), kernels, profiles
    except LoweringError as e:
        raise LoomError(f"internal: cannot lower to LLVM IR for {profile.name}: {e}") from e


def codegen(ir: str, profile: Profile, emit: str) -> bytes:
    """LLVM's optimizer and code generator, in the warm worker process."""
    from loomcli.emit.amdgpu.target import DATALAYOUT, TRIPLE, features
    from loomcli.jobs.isolated import RemoteError, WorkerCrash, shared_worker

    header = {"triple": TRIPLE, "cpu": profile.selector, "features": features(profile), "datalayout": DATALAYOUT,
              "emit": emit, "opt": 3}
    try:
        return shared_worker((CODEGEN,)).call(f"{CODEGEN}:compile_ir", header, ir.encode())
    except WorkerCrash as crash:
        if "No module named 'llvmlite'" in crash.stderr:
            raise LoomError("AMDGPU code generation needs llvmlite 0.50 or newer (pip install 'llvmlite>=0.50')",
                            3) from None
        detail = crash.stderr.strip() if os.environ.get("LOOM_DEBUG") not in (None, "", "0") else crash.last_lines()
        detail = detail or "LLVM printed nothing"
        if crash.signal is not None:
            raise LoomError(f"internal: LLVM aborted while generating code for {profile.name} "
                            f"(signal {crash.signal}); {detail}", 3) from None
        raise LoomError(f"internal: LLVM failed while generating code for {profile.name} "
                        f"(exit status {crash.returncode}); {detail}", 3) from None
    except RemoteError as e:
        raise LoomError(f"internal: LLVM rejected the IR generated for {profile.name}: {e}", 3) from None


def start_worker() -> None:
    """Start (or keep) the code generation worker; it warms up meanwhile."""
    from loomcli.jobs.isolated import shared_worker

    shared_worker((CODEGEN,)).start()


def emit_amdgpu(module: Module, profile: Profile, fmt: str) -> Artifact:
    """Emit `module`'s kernels for `profile` as `fmt` (see FORMATS)."""
    from loomcli.emit.amdgpu.manifest import kernel_entries, target_entry

    if fmt not in FORMATS:
        raise LoomError(f"internal: {fmt} is not an AMDGPU format", 3)
    if fmt != "llvmir-text":
        start_worker()
    ir, kernels, profiles = lower(module, profile)
    target = target_entry(profile)
    if fmt == "llvmir-text":
        return Artifact(fmt, ir.encode(), kernel_entries(module, kernels, profiles, None), target)
    if fmt == "asm":
        data = codegen(ir, profile, "assembly")
        return Artifact(fmt, data, kernel_entries(module, kernels, profiles, None), target)
    from loomcli.emit.amdgpu.elf import ElfError, link_shared

    obj = codegen(ir, profile, "object")
    try:
        hsaco = link_shared(obj)
    except ElfError as e:
        raise LoomError(f"internal: linking the code object for {profile.name} failed: {e}", 3) from e
    return Artifact(fmt, hsaco, kernel_entries(module, kernels, profiles, hsaco), target)
