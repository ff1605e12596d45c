"""The devices a fuzzed test runs on, each one entry of `DEVICES`.

A device compiles a module for its profile and runs it two ways: a check
case through the same launcher `loom test` uses (which evaluates the launch
configuration as every device does), and one dispatch of a compiled kernel
with a given geometry (what a command program's `.loomcmd` holds). Adding a
device is one class with `compile`, `launcher` and `executable`, and one
entry of `DEVICES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from loomcli.ir.core import Module
from loomcli.targets.profiles import Profile


class RunError(Exception):
    """A kernel that compiled but did not run (an EXEC diagnostic, a device error)."""


class Executable(Protocol):
    def dispatch(self, groups: tuple[int, int, int], size: tuple[int, int, int], args: Sequence[Any]) -> None:
        """Run once; `args` per device parameter: a bytearray (a buffer, updated in
        place) or a scalar's canonical value. Raises RunError."""


class Device(Protocol):
    name: str
    profile: Profile
    subgroup_size: int          # what kernel.subgroup.size reads when it runs

    def compile(self, path: str, roots: Sequence[str], config: Sequence[str]) -> Module:
        """`path` compiled for execution on this device (raises CompileError)."""

    def launcher(self, module: Module, path: str) -> Any:
        """A check-case launcher (`loomcli.check.cases.Launcher`) for `module`."""

    def executable(self, module: Module, symbol: str, path: str) -> Executable:
        """Kernel `symbol` of `module`, ready to dispatch."""


def compile_for(profile: Profile, path: str, roots: Sequence[str], config: Sequence[str]) -> Module:
    from loomcli.service.front import CompileOptions, compile_module

    return compile_module(CompileOptions(input=path, profile=profile, roots=list(roots), config=list(config),
                                         for_execution=True)).module


# ---------------------------------------------------------------- the reference interpreter


@dataclass
class InterpreterDevice:
    """The reference interpreter; with `subgroup_size`, the reference profile
    with that fixed subgroup size (the reference run for a device whose
    subgroups have another size)."""

    subgroup_size: int = 0
    name: str = "interpreter"

    def __post_init__(self) -> None:
        from loomcli.targets.profiles import REFERENCE, with_overrides

        if self.subgroup_size and self.subgroup_size != REFERENCE.subgroup_size:
            self.profile = with_overrides(REFERENCE, subgroup_size=self.subgroup_size)
        else:
            self.profile = REFERENCE
        self.subgroup_size = self.profile.subgroup_size or 32

    def compile(self, path: str, roots: Sequence[str], config: Sequence[str]) -> Module:
        return compile_for(self.profile, path, roots, config)

    def launcher(self, module: Module, path: str) -> Any:
        from loomcli.check.interpreter import InterpreterLauncher

        return InterpreterLauncher(module, self.profile, path)

    def executable(self, module: Module, symbol: str, path: str) -> Executable:
        return _Interpreted(module, self.profile, module.symbols()[symbol])


class _Interpreted:
    def __init__(self, module: Module, profile: Profile, kernel: Any) -> None:
        from loomcli.check.interpreter import Interpreter

        self.interpreter = Interpreter(module, profile)
        self.kernel = kernel

    def dispatch(self, groups: tuple[int, int, int], size: tuple[int, int, int], args: Sequence[Any]) -> None:
        from loomcli.check.interpreter import ExecFailure, Root

        device = [Root(a, f"%arg{i}") if isinstance(a, bytearray) else a for i, a in enumerate(args)]
        try:
            self.interpreter.run_kernel(self.kernel, device, groups, size)
        except ExecFailure as e:
            raise RunError(f"{e.code} at line {e.op.loc[0]}: {e.fields}") from None


# ---------------------------------------------------------------- Vulkan


class VulkanDevice:
    """SPIR-V on the Vulkan device `loom test` picks (lavapipe here), for the
    profile `loom test` uses (its Vulkan version, no fixed subgroup size)."""

    name = "vulkan"

    def __init__(self) -> None:
        from loomcli.check.session import vulkan_profile
        from loomcli.check.vulkan import VulkanRunner

        self.runner = VulkanRunner()
        self.profile = vulkan_profile(None, self.runner)
        self.subgroup_size = self.runner.info.subgroup_size

    def compile(self, path: str, roots: Sequence[str], config: Sequence[str]) -> Module:
        return compile_for(self.profile, path, roots, config)

    def _program(self, module: Module) -> Any:
        from loomcli.check.launch import Program
        from loomcli.emit.artifacts import emit

        art = emit(module, self.profile, "spirv-binary")   # the gateway: TARGET checks run here
        return Program.build(module, self.profile, art.data, art.kernels, target_checked=True)

    def launcher(self, module: Module, path: str) -> Any:
        from loomcli.check.launch import VulkanLauncher

        return VulkanLauncher(self.runner, self._program(module), path)

    def executable(self, module: Module, symbol: str, path: str) -> Executable:
        return _OnVulkan(self.runner, self._program(module), symbol)


class _OnVulkan:
    def __init__(self, runner: Any, program: Any, symbol: str) -> None:
        self.runner, self.program, self.entry = runner, program, program.kernels[symbol]

    def dispatch(self, groups: tuple[int, int, int], size: tuple[int, int, int], args: Sequence[Any]) -> None:
        from loomcli.check.launch import pack_push_constants
        from loomcli.errors import LoomError

        abi = self.entry.abi
        try:
            pipeline = self.runner.pipeline(self.program.code, abi.export, len(abi.buffers), abi.args_bytes,
                                            self.entry.required_subgroup_size)
        except LoomError as e:
            raise RunError(str(e)) from None
        if pipeline.local_size is not None and tuple(pipeline.local_size) != tuple(size):
            raise RunError(f"LocalSize {pipeline.local_size} differs from the dispatch's workgroup size {size}")
        owned: dict[int, tuple[bytearray, Any]] = {}
        bound = []
        try:
            for param in abi.buffers:
                data = args[param.index]
                if id(data) not in owned:
                    buf = self.runner.buffer(len(data))
                    buf.write(data)
                    owned[id(data)] = (data, buf)
                bound.append(owned[id(data)][1])
            self.runner.dispatch(pipeline, bound, pack_push_constants(abi, args), groups)
            for data, buf in owned.values():
                data[:] = buf.read(len(data))
        except LoomError as e:
            raise RunError(str(e)) from None
        finally:
            for _, buf in owned.values():
                self.runner.release(buf)


# ---------------------------------------------------------------- the cpu device


class CpuDevice:
    """The shared LLVM lowering, compiled for this machine and run natively
    (`loom test --device cpu`), with its subgroups of 8."""

    name = "cpu"

    def __init__(self) -> None:
        from loomcli.check.cpu import CpuRunner
        from loomcli.check.session import cpu_profile

        self.profile = cpu_profile(None)
        self.runner = CpuRunner(self.profile)
        self.subgroup_size = self.profile.subgroup_size or 1

    def compile(self, path: str, roots: Sequence[str], config: Sequence[str]) -> Module:
        return compile_for(self.profile, path, roots, config)

    def _program(self, module: Module) -> Any:
        from loomcli.check.launch import Program
        from loomcli.emit.artifacts import emit

        art = emit(module, self.profile, "cpu-object")   # the gateway: TARGET checks run here
        return Program.build(module, self.profile, art.data, art.kernels, target_checked=True)

    def launcher(self, module: Module, path: str) -> Any:
        from loomcli.check.cpu import CpuLauncher

        return CpuLauncher(self.runner, self._program(module), path)

    def executable(self, module: Module, symbol: str, path: str) -> Executable:
        return _OnCpu(self.runner, self._program(module), symbol)


class _OnCpu:
    def __init__(self, runner: Any, program: Any, symbol: str) -> None:
        self.runner, self.program, self.entry = runner, program, program.kernels[symbol]

    def dispatch(self, groups: tuple[int, int, int], size: tuple[int, int, int], args: Sequence[Any]) -> None:
        from loomcli.check.launch import pack_push_constants
        from loomcli.errors import LoomError

        abi = self.entry.abi
        buffers: list[bytearray] = []
        index: dict[int, int] = {}
        pointers = []
        for param in abi.buffers:
            data = args[param.index]
            if id(data) not in index:
                index[id(data)] = len(buffers)
                buffers.append(data)
            pointers.append((param.byte_offset, index[id(data)]))
        try:
            self.runner.run(self.program, self.entry, groups, size, pack_push_constants(abi, args), buffers,
                            pointers)
        except LoomError as e:
            raise RunError(str(e)) from None


# ---------------------------------------------------------------- the list


def _vulkan() -> Device | str:
    from loomcli.check.vulkan import VulkanUnavailable

    try:
        return VulkanDevice()
    except VulkanUnavailable as e:
        return f"no Vulkan device: {e}"


# name -> a function making the device, or saying why it cannot be had here.
DEVICES: dict[str, Callable[[], Device | str]] = {
    "interpreter": InterpreterDevice,
    "vulkan": _vulkan,
    "cpu": CpuDevice,
}
