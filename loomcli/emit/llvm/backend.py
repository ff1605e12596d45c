"""What every LLVM-based back end does the same way: lower a module's
exported kernels with the target's data, and run LLVM's optimizer and code
generator in the warm worker process (`loomcli.runtime.isolated`).

A back end (`loomcli.emit.amdgpu`, `loomcli.emit.nvptx`) passes its
`LLVMTarget` maker and what it does with LLVM's output; nothing here asks
which target it is. Nothing here imports llvmlite; only the worker does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from loomcli.emit.llvm.target import LLVMTarget
from loomcli.errors import LoomError
from loomcli.ir.core import Module, Operation
from loomcli.targets.profiles import Profile

if TYPE_CHECKING:
    from loomcli.emit.llvm.lower import Extend

CODEGEN = "loomcli.emit.llvm.codegen"

# (module target, module profile, kernel profile) -> the kernel's target.
KernelTarget = Callable[[LLVMTarget, Profile, Profile], LLVMTarget]


def kernel_profile(module: Module, kernel: Operation, profile: Profile) -> Profile:
    """A kernel pinned to a target record compiles with the record's profile."""
    if not kernel.has_attr("target"):
        return profile
    from loomcli.targets.checks import profile_for

    return profile_for(module, kernel, profile) or profile


def lower(module: Module, profile: Profile, target: LLVMTarget, kernel_target: KernelTarget | None = None,
          extend: Extend | None = None) -> tuple[str, list[Operation], dict[str, Profile]]:
    """The LLVM IR of the module's kernels for `profile`, the kernels, and
    each kernel's profile (by export name); `extend` adds the target's own
    functions to the module."""
    from loomcli.emit.llvm.lower import LoweringError, lower_module, plan_kernel
    from loomcli.targets.abi import exported_kernels

    kernels = exported_kernels(module)
    plans = []
    profiles = {}
    try:
        for kernel in kernels:
            kp = kernel_profile(module, kernel, profile)
            kt = kernel_target(target, profile, kp) if kernel_target is not None else target
            plan = plan_kernel(kernel, kt, kp.max_flat_workgroup_size)
            profiles[plan.export] = kp
            plans.append(plan)
        return lower_module(module, plans, target, extend), kernels, profiles
    except LoweringError as e:
        raise LoomError(f"internal: cannot lower to LLVM IR for {profile.name}: {e}") from e


def codegen(ir: str, target: LLVMTarget, emit: str, link: tuple[str, ...] = ()) -> bytes:
    """LLVM's optimizer and code generator, in the warm worker process;
    `link`: LLVM IR modules linked in before the optimizer (a run-time)."""
    from loomcli.runtime.isolated import RemoteError, WorkerCrash, shared_worker

    header = {"triple": target.triple, "cpu": target.cpu, "features": target.features,
              "datalayout": target.datalayout, "emit": emit, "opt": 3, "link": list(link)}
    try:
        return shared_worker((CODEGEN,)).call(f"{CODEGEN}:compile_ir", header, ir.encode())
    except WorkerCrash as crash:
        if "No module named 'llvmlite'" in crash.stderr:
            raise LoomError("LLVM code generation needs llvmlite 0.50 or newer (pip install 'llvmlite>=0.50')",
                            3) from None
        from loomcli import settings

        detail = crash.stderr.strip() if settings.debug() else crash.last_lines()
        detail = detail or "LLVM printed nothing"
        if crash.signal is not None:
            raise LoomError(f"internal: LLVM aborted while generating code for {target.name} "
                            f"(signal {crash.signal}); {detail}", 3) from None
        raise LoomError(f"internal: LLVM failed while generating code for {target.name} "
                        f"(exit status {crash.returncode}); {detail}", 3) from None
    except RemoteError as e:
        raise LoomError(f"internal: LLVM rejected the IR generated for {target.name}: {e}", 3) from None


def start_worker() -> None:
    """Start (or keep) the code generation worker; it warms up meanwhile."""
    from loomcli.runtime.isolated import shared_worker

    shared_worker((CODEGEN,)).start()
