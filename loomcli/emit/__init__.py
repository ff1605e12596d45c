"""Emission: compiled Loom IR -> target artifacts.

Every emitter returns an `Artifact`: the bytes plus the manifest facts it
knows (per-kernel parameters, resources, workgroup size). Emitters share the
device ABI of `loomcli.targets.abi`; a target contributes a profile
(`loomcli.targets.profiles`), a row of `BACKENDS` and an instruction
selector, never a copy of the pipeline (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loomcli.ir.core import Module
    from loomcli.targets.profiles import Profile

FORMATS = {  # artifact format -> file suffix (in the order `--format` lists them)
    "amdgpu-hsaco": ".hsaco",
    "spirv-binary": ".spv",
    "nvptx-ptx": ".ptx",
    "nvptx-cubin": ".cubin",
    "llvmir-text": ".ll",
    "asm": ".s",
}
SUFFIX_FORMATS = {suffix: fmt for fmt, suffix in FORMATS.items()}


@dataclass(frozen=True)
class Backend:
    """One row of the emitter table: what a target family writes and where
    its instruction selector lives. Paths are "module:function", imported
    only when used, so nothing pays for LLVM or SPIR-V it does not emit."""

    formats: tuple[str, ...]   # the artifact formats it writes; the first is its native one
    emitter: str               # (module, profile, fmt) -> Artifact, on a module the TARGET checks passed
    worker: str | None = None  # () -> None: start the worker process these formats use (LLVM) early,
    worker_formats: tuple[str, ...] = ()   # so it warms up while the front end runs
    llvm: bool = False         # emits through LLVM: its version feeds cache keys, build workers preload it

    @property
    def native_format(self) -> str:
        return self.formats[0]

    @property
    def suffix(self) -> str:
        """The native artifact's file suffix (`.hsaco`)."""
        return FORMATS[self.native_format]

    def emit(self, module: Module, profile: Profile, fmt: str) -> Artifact:
        return _load(self.emitter)(module, profile, fmt)

    def start_worker(self, fmt: str) -> None:
        """Start the worker emitting `fmt` will use, if any (a warm-up: emission starts it anyway)."""
        if self.worker is not None and fmt in self.worker_formats:
            _load(self.worker)()


# The emitter table, keyed by target family.
BACKENDS: dict[str, Backend] = {
    "amdgpu": Backend(("amdgpu-hsaco", "llvmir-text", "asm"), "loomcli.emit.amdgpu:emit_amdgpu",
                      worker="loomcli.emit.llvm.backend:start_worker", worker_formats=("amdgpu-hsaco", "asm"),
                      llvm=True),
    "spirv": Backend(("spirv-binary", "asm"), "loomcli.emit.spirv:emit_spirv_format"),
    # The PTX first: it needs no ptxas, and the CUDA driver compiles it for the GPU it runs on.
    "nvptx": Backend(("nvptx-ptx", "nvptx-cubin", "llvmir-text", "asm"), "loomcli.emit.nvptx:emit_nvptx",
                     worker="loomcli.emit.llvm.backend:start_worker",
                     worker_formats=("nvptx-ptx", "nvptx-cubin", "asm"), llvm=True),
}
NATIVE_FORMAT = {family: backend.native_format for family, backend in BACKENDS.items()}
LLVM_FAMILIES = tuple(family for family, backend in BACKENDS.items() if backend.llvm)


def backend_for(profile: Profile) -> Backend:
    """The emitter table's row for `profile`. Raises UsageError for a family without one."""
    from loomcli.errors import UsageError

    backend = BACKENDS.get(profile.family)
    if backend is None:
        raise UsageError(f"{profile.name} has no emitter; emission targets: {', '.join(sorted(BACKENDS))}")
    return backend


def families_writing(fmt: str) -> list[str]:
    return [family for family, backend in BACKENDS.items() if fmt in backend.formats]


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass
class Artifact:
    format: str                                   # a key of FORMATS
    data: bytes
    kernels: list[dict[str, Any]] = field(default_factory=list)   # manifest "kernels" entries
    target: dict[str, Any] = field(default_factory=dict)          # manifest "target" object
