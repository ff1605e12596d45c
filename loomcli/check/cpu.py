"""The cpu device of `loom test --device cpu`: kernels compiled by the shared
LLVM lowering for the host (`loomcli.emit.cpu`) and run natively.

`CpuRunner` owns a worker process (`loomcli.check.cpu_native`) that loads
each object with LLVM's JIT linker and runs launches there, so a crashing
kernel ends the worker, not `loom test`: the sample fails with a device
error and the next launch starts a fresh worker. `CpuLauncher` runs a
check case's `kernel.launch` as `VulkanLauncher` does on Vulkan: the
workload predicates and launch configuration evaluated from the
launch-config artifact, one buffer per distinct tensor, scalars packed in
the kernel's argument block (the device ABI's kernarg layout), and the
buffers copied back.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from loomcli.check.cases import SampleFailure, Tensor
from loomcli.check.faults import fault_diagnostic, status_buffer
from loomcli.check.launch import (
    BENCH_BUDGET_S,
    BENCH_MAX_RUNS,
    BENCH_MIN_RUNS,
    KernelEntry,
    Program,
    Timing,
    launch_geometry,
    pack_push_constants,
)
from loomcli.check.vulkan import DeviceError
from loomcli.diagnostics import Diagnostic
from loomcli.ir.core import Operation
from loomcli.targets.profiles import Profile

NATIVE = "loomcli.check.cpu_native"
U32_LIMIT = 1 << 32   # the run-time counts workgroups and invocations in 32 bits


class CpuTrap(DeviceError):
    """The kernel ended the worker with a signal: a hardware trap on
    undefined behaviour (SIGFPE: integer division by zero or overflow;
    SIGSEGV: an access far outside memory, or a fiber's stack overflow)."""

    def __init__(self, message: str, signal_name: str) -> None:
        super().__init__(message)
        self.signal_name = signal_name


TRAPS = {"SIGFPE": "an integer division by zero or a divsi/remsi overflow trapped",
         "SIGSEGV": "an access outside the kernel's memory (or a stack overflow) faulted",
         "SIGBUS": "a misaligned or unmapped access faulted"}


class CpuRunner:
    """Runs launches of cpu objects in a warm worker process."""

    def __init__(self, profile: Profile) -> None:
        from loomcli.runtime.isolated import Worker

        self.profile = profile
        self.worker = Worker((NATIVE,))

    def describe(self) -> str:
        return f"the cpu device ({self.profile.name}, one thread)"

    def start(self) -> None:
        self.worker.start()

    def run(self, program: Program, entry: KernelEntry, groups: tuple[int, int, int], size: tuple[int, int, int],
            kernarg: bytes, buffers: Sequence[bytearray], pointers: Sequence[tuple[int, int]],
            bench: bool = False) -> list[float]:
        """One launch; `buffers` are updated in place. Returns the run times
        (nanoseconds) when `bench`. Raises DeviceError."""
        from loomcli.runtime.isolated import RemoteError, WorkerCrash

        export = entry.abi.export
        total = groups[0] * groups[1] * groups[2]
        if total >= U32_LIMIT:
            raise DeviceError(f"`{export}`: {total} workgroups are more than the cpu device runs in one launch")
        if not total:
            return []
        sg = self.profile.subgroup_size or 1
        exports = sorted(k.manifest["entry"] for k in program.kernels.values())
        header = {"entry": entry.manifest["entry"], "exports": exports, "kernarg": len(kernarg),
                  "pointers": [list(p) for p in pointers], "buffers": [len(b) for b in buffers],
                  "geometry": [*groups, *size, sg, 1 if entry.manifest.get("fibers", True) else 0],
                  "bench": [BENCH_MIN_RUNS, BENCH_MAX_RUNS, BENCH_BUDGET_S] if bench else None}
        payload = b"".join([program.code, kernarg, *buffers])
        try:
            reply = self.worker.call(f"{NATIVE}:launch", header, payload)
        except WorkerCrash as crash:
            name = crash.describe().rpartition(", ")[2]
            if name in TRAPS:
                raise CpuTrap(f"`{export}` trapped on the cpu device ({name}): {TRAPS[name]}", name) from None
            raise DeviceError(f"`{export}` crashed the cpu device ({crash.describe()})") from None
        except RemoteError as e:
            raise DeviceError(f"`{export}` could not run on the cpu device: {e}") from None
        status, n = struct.unpack_from("<II", reply)
        times = list(struct.unpack_from(f"<{n}d", reply, 8))
        if status != 0:
            raise DeviceError(f"`{export}` deadlocked on the cpu device: some invocations of a workgroup wait at "
                              f"a barrier the others never reach")
        at = 8 + 8 * n
        for b in buffers:
            b[:] = reply[at:at + len(b)]
            at += len(b)
        return times

    def close(self) -> None:
        self.worker.close()


class CpuLauncher:
    """Runs the `kernel.launch` ops of one input's cases on a `CpuRunner`.
    With `timings`, each launch is repeated and timed, its times appended there."""

    def __init__(self, runner: CpuRunner, program: Program, path: str, timings: list[Timing] | None = None) -> None:
        self.runner = runner
        self.program = program
        self.path = path
        self.timings = timings

    def launch(self, op: Operation, workload: list[Any], args: list[Any]) -> None:
        callee = op.attr("callee")
        entry = self.program.entry(op)
        profile = self.runner.profile
        groups, size = launch_geometry(self.program, op, entry, workload, self.path,
                                       profile.max_workgroup_storage_bytes, self.runner.describe())
        tensors: list[Tensor] = []
        index: dict[int, int] = {}
        pointers = []
        probe = self.program.probes.get(callee)   # an instrumented kernel's status buffer (17.37)
        data: list[bytearray] = []
        status = -1
        for param in entry.abi.buffers:
            if probe is not None and param.index == probe.status_arg:
                status = len(data)
                pointers.append((param.byte_offset, status))
                data.append(bytearray(status_buffer(probe, [args[i].nbytes for i in probe.buffer_args])))
                continue
            tensor = args[param.index]
            if not isinstance(tensor, Tensor):
                raise SampleFailure(Diagnostic.make("EXEC/002", self.path, op.loc,
                                                    why=f"buffer argument {param.index} is not a tensor"))
            if id(tensor) not in index:
                index[id(tensor)] = len(data)
                tensors.append(tensor)
                data.append(bytearray(tensor.data))
            pointers.append((param.byte_offset, index[id(tensor)]))
        try:
            times = self.runner.run(self.program, entry, groups, size, pack_push_constants(entry.abi, args), data,
                                    pointers, bench=self.timings is not None)
        except CpuTrap as trap:
            # Undefined behaviour the hardware caught (instrumented kernels
            # report it first, with the interpreter's detail; this is for
            # the uninstrumented benchmark builds): the sample fails at the launch.
            raise SampleFailure(Diagnostic.make("EXEC/002", self.path, op.loc, why=str(trap))) from None
        if self.timings is not None:
            self.timings.append(Timing(callee, times))
        for tensor in tensors:
            tensor.data[:] = data[index[id(tensor)]]
        if probe is not None and status >= 0:
            fault = fault_diagnostic(probe, bytes(data[status]), self.path)
            if fault is not None:
                raise SampleFailure(fault)
