"""`kernel.launch` of a check case on a device: Vulkan here, the cpu device
in `loomcli.check.cpu`.

A `Program` is one input's launched kernels compiled for a device profile
(SPIR-V, cpu) and emitted once. `VulkanLauncher` runs a launch the way LANGUAGE.md section 13
and the device ABI of TOOLCHAIN.md section 8 say: check the workload
predicates, evaluate the launch configuration on the workload values, copy
each distinct tensor argument into one storage buffer (binding = ordinal
among the kernel's buffer parameters), pack the scalar arguments into the
push-constant block at their ABI offsets, dispatch, and copy the buffers back
into the tensors.
"""

from __future__ import annotations

import statistics
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomcli.check.cases import SampleFailure, Tensor
from loomcli.check.faults import fault_diagnostic, status_buffer
from loomcli.check.vulkan import Buffer, DeviceError, Pipeline, VulkanRunner
from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.core import Module, Operation
from loomcli.ir.types import BF16, F16
from loomcli.launch.program import LaunchFunction, LaunchProgram
from loomcli.semantics.fold import float_bits, pattern, signed
from loomcli.targets.abi import KernelABI, Param, export_name, exported_kernels, kernel_abi
from loomcli.targets.profiles import Profile

if TYPE_CHECKING:
    from loomcli.passes.instrument import KernelProbe

# Benchmarks: at least this many timed runs, more while under the time budget.
BENCH_MIN_RUNS, BENCH_MAX_RUNS, BENCH_BUDGET_S = 5, 200, 0.5


@dataclass(frozen=True)
class KernelEntry:
    abi: KernelABI
    launch: LaunchFunction
    required_subgroup_size: int | None
    manifest: dict[str, Any] = field(default_factory=dict)   # the artifact's entry for the kernel


@dataclass
class Program:
    """The kernels one input launches, compiled and emitted for one device profile."""

    code: bytes                         # the artifact: SPIR-V words, a cpu object
    launches: LaunchProgram
    kernels: dict[str, KernelEntry]     # by kernel symbol
    # Instrumented kernels (loomcli.passes.instrument), by symbol: each takes a
    # status buffer after the case's arguments. Empty: plain kernels (benchmarks).
    probes: dict[str, KernelProbe] = field(default_factory=dict)

    @classmethod
    def build(cls, module: Module, profile: Profile, code: bytes,
              manifest: Sequence[dict[str, Any]] = (), *, target_checked: bool = False,
              probes: dict[str, KernelProbe] | None = None) -> Program:
        """`module` compiled for `profile`; `code` and `manifest` (the artifact's
        kernel entries) emitted from it; `target_checked`: emitted through the
        gateway, which ran the TARGET checks; `probes`: what `instrument` made
        of `module`'s kernels. Raises CompileError (TARGET/*, LAUNCH_CONFIG/*)."""
        from loomcli.emit.launch_config import launch_module

        launches = LaunchProgram(launch_module(module, profile, target_checked=target_checked))
        by_export = {k.get("export"): k for k in manifest}
        kernels = {}
        for op in exported_kernels(module):
            entry = export_name(op)
            fn = launches.lookup(entry)
            required = by_export.get(entry, {}).get("required_subgroup_size") or fn.subgroup_size or None
            kernels[op.attr("sym")] = KernelEntry(kernel_abi(op, profile.family), fn, required,
                                                  by_export.get(entry, {}))
        return cls(code, launches, kernels, probes or {})

    def entry(self, op: Operation) -> KernelEntry:
        """The compiled kernel a `kernel.launch` op names (DeviceError if none)."""
        callee = op.attr("callee")
        found = self.kernels.get(callee)
        if found is None:
            raise DeviceError(f"@{callee} was not compiled for this run")
        return found


def pack_push_constants(abi: KernelABI, values: Sequence[Any]) -> bytes:
    """The push-constant block (a cpu kernel's argument block): each scalar in
    its ABI slot, low bits first; buffer slots are left zero."""
    block = bytearray(abi.args_bytes)
    for param in abi.scalars:
        code, item = _slot(param, values[param.index])
        struct.pack_into(code, block, param.byte_offset, item)
    return bytes(block)


def _slot(param: Param, value: Any) -> tuple[str, Any]:
    t = param.type
    if t == "f32":
        return "<f", value
    if t == "f64":
        return "<d", value
    if t in ("f16", "bf16"):
        return "<I", float_bits(F16 if t == "f16" else BF16, value)
    if param.byte_length == 8:
        return "<Q", pattern(value, 64)
    return "<i", signed(pattern(value, 32), 32)   # i1 as 0/1; i8, i16 sign-extended into the slot


@dataclass
class Timing:
    """Device times of one launch site of a benchmark sample, in nanoseconds."""

    callee: str
    times: list[float] = field(default_factory=list)

    @property
    def median_ns(self) -> float:
        return statistics.median(self.times) if self.times else 0.0


class VulkanLauncher:
    """Runs the `kernel.launch` ops of one input's cases on a `VulkanRunner`.
    With `timings`, each launch is repeated and timed, its times appended there."""

    def __init__(self, runner: VulkanRunner, program: Program, path: str,
                 timings: list[Timing] | None = None) -> None:
        self.runner = runner
        self.program = program
        self.path = path
        self.timings = timings

    def launch(self, op: Operation, workload: list[Any], args: list[Any]) -> None:
        callee = op.attr("callee")
        entry = self.program.entry(op)
        groups, size = self._geometry(op, entry, workload)
        abi = entry.abi
        pipeline = self.runner.pipeline(self.program.code, abi.export, len(abi.buffers), abi.args_bytes,
                                        entry.required_subgroup_size)
        if pipeline.local_size is not None and pipeline.local_size != size:
            raise DeviceError(f"`{abi.export}`: the SPIR-V LocalSize {_dims(pipeline.local_size)} differs from "
                              f"the launch configuration's workgroup size {_dims(size)}")
        # One device buffer per distinct tensor, in order of first use.
        owned: dict[int, tuple[Tensor, Buffer]] = {}
        bound: list[Buffer] = []
        probe = self.program.probes.get(callee)
        status: Buffer | None = None
        try:
            for param in abi.buffers:
                if probe is not None and param.index == probe.status_arg:
                    status = self.runner.buffer(probe.status_bytes)
                    bound.append(status)
                    continue
                tensor = args[param.index]
                if not isinstance(tensor, Tensor):
                    raise SampleFailure(Diagnostic.make("EXEC/002", self.path, op.loc,
                                                        why=f"buffer argument {param.index} is not a tensor"))
                if id(tensor) not in owned:
                    buf = self.runner.buffer(tensor.nbytes)
                    buf.write(tensor.data)
                    owned[id(tensor)] = (tensor, buf)
                bound.append(owned[id(tensor)][1])
            if probe is not None and status is not None:
                status.write(status_buffer(probe, [args[i].nbytes for i in probe.buffer_args]))
            push = pack_push_constants(abi, args)
            if self.timings is None:
                self.runner.dispatch(pipeline, bound, push, groups)
            else:
                self.timings.append(self._time(pipeline, bound, push, groups, callee))
            for tensor, buf in owned.values():
                tensor.data[:] = buf.read(tensor.nbytes)
            if probe is not None and status is not None:
                fault = fault_diagnostic(probe, status.read(probe.status_bytes), self.path)
                if fault is not None:
                    raise SampleFailure(fault)
        finally:
            for _, buf in owned.values():
                self.runner.release(buf)
            if status is not None:
                self.runner.release(status)

    def _time(self, pipeline: Pipeline, bound: list[Buffer], push: bytes, groups: tuple[int, int, int],
              callee: str) -> Timing:
        timing = Timing(callee)
        start = time.perf_counter()
        while len(timing.times) < BENCH_MAX_RUNS:
            timing.times += self.runner.dispatch(pipeline, bound, push, groups, timed=True)
            if len(timing.times) >= BENCH_MIN_RUNS and time.perf_counter() - start > BENCH_BUDGET_S:
                break
        return timing

    def _geometry(self, op: Operation, entry: KernelEntry, workload: list[Any]
                  ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        return launch_geometry(self.program, op, entry, workload, self.path,
                               self.runner.info.max_workgroup_storage_bytes, self.runner.info.describe())


def launch_geometry(program: Program, op: Operation, entry: KernelEntry, workload: list[Any], path: str,
                    storage_limit: int, device: str) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Workload predicates, launch configuration and geometry (LANGUAGE.md 8);
    a violation fails the sample at the launch site."""
    try:
        launch = program.launches.invoke(entry.launch, workload)
    except CompileError as e:
        d = e.diagnostics[0]
        raise SampleFailure(Diagnostic(d.code, d.message, path, op.loc[0], op.loc[1])) from None
    if launch.workgroup_storage_bytes > storage_limit:
        raise DeviceError(f"`{entry.abi.export}` needs {launch.workgroup_storage_bytes} bytes of workgroup "
                          f"memory; {device} has {storage_limit}")
    return launch.workgroups, launch.workgroup_size


def _dims(t: Sequence[int]) -> str:
    return "x".join(map(str, t))
