"""Emission: compiled Loom IR -> target artifacts.

Every emitter returns an `Artifact`: the bytes plus the manifest facts it
knows (per-kernel parameters, resources, workgroup size). Emitters share the
device ABI of `loomcli.targets.abi`; a target contributes a profile
(`loomcli.targets.profiles`), a row of `BACKENDS` (its stages, and where
each format stops: `loomcli.emit.stages`) and the stage functions, never a
copy of the pipeline (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomcli.emit.stages import Dump, Stage, StageList, load

if TYPE_CHECKING:
    from loomcli.ir.core import Module
    from loomcli.targets.profiles import Profile

FORMATS = {  # artifact format -> file suffix (in the order `--format` lists them)
    "amdgpu-hsaco": ".hsaco",
    "spirv-binary": ".spv",
    "nvptx-ptx": ".ptx",
    "nvptx-cubin": ".cubin",
    "cpu-object": ".o",
    "llvmir-text": ".ll",
    "asm": ".s",
}
SUFFIX_FORMATS = {suffix: fmt for fmt, suffix in FORMATS.items()}


@dataclass(frozen=True)
class Backend:
    """One row of the emitter table: a target family's stages
    (`loomcli.emit.stages`), where each output format stops, and what its
    LLVM worker is. Stage functions are "module:function" paths, imported
    only when run, so nothing pays for LLVM or SPIR-V it does not emit."""

    stages: StageList
    worker: str | None = None  # () -> None: start the worker process its LLVM stages use, early,
    #                            so it warms up while the front end runs
    llvm: bool = False         # emits through LLVM: its version feeds cache keys, build workers preload it

    @property
    def formats(self) -> tuple[str, ...]:
        """The artifact formats it writes; the first is its native one."""
        return self.stages.formats

    @property
    def native_format(self) -> str:
        return self.formats[0]

    @property
    def suffix(self) -> str:
        """The native artifact's file suffix (`.hsaco`)."""
        return FORMATS[self.native_format]

    def emit(self, module: Module, profile: Profile, fmt: str, dump: Dump | None = None) -> Artifact:
        """`module`'s kernels for `profile` as `fmt`: the stages up to the one `fmt` stops at."""
        from loomcli.errors import LoomError

        stop = self.stages.stops.get(fmt)
        if stop is None:
            raise LoomError(f"internal: {fmt} is not a {profile.family} format", 3)
        job = self.stages.run(module, profile, stop, dump, self.worker_starter())
        kernels, target = load(self.stages.manifest)(job)
        return Artifact(fmt, job.outputs[stop], kernels, target)

    def start_worker(self, fmt: str) -> None:
        """Start the worker emitting `fmt` will use, if any (a warm-up: emission starts it anyway)."""
        start = self.worker_starter()
        if start is not None and fmt in self.stages.stops and self.stages.uses_worker(fmt):
            start()

    def worker_starter(self) -> Callable[[], None] | None:
        return load(self.worker) if self.worker is not None else None


LLVM_WORKER = "loomcli.emit.llvm.backend:start_worker"


def _stages(*rows: tuple[str, str, str | None], stops: dict[str, str], manifest: str,
            worker: tuple[str, ...] = (), check: dict[str, str] | None = None) -> StageList:
    """A stage list from (name, run, after) rows; `worker` names the stages
    that run in the LLVM worker, `check` the stages' checks."""
    return StageList(tuple(Stage(name, run, after, name in worker, (check or {}).get(name))
                           for name, run, after in rows), stops, manifest)


_AMDGPU = "loomcli.emit.amdgpu:"
_NVPTX = "loomcli.emit.nvptx:"
_SPIRV = "loomcli.emit.spirv:"
_CPU = "loomcli.emit.cpu:"

# The emitter table, keyed by target family.
BACKENDS: dict[str, Backend] = {
    # llir -> asm | obj -> hsaco
    "amdgpu": Backend(_stages(("llir", _AMDGPU + "lower_stage", None),
                              ("asm", _AMDGPU + "asm_stage", "llir"),
                              ("obj", _AMDGPU + "object_stage", "llir"),
                              ("hsaco", _AMDGPU + "link_stage", "obj"),
                              stops={"amdgpu-hsaco": "hsaco", "llvmir-text": "llir", "asm": "asm"},
                              manifest=_AMDGPU + "manifest_facts", worker=("asm", "obj")),
                      worker=LLVM_WORKER, llvm=True),
    # spirv -> disasm
    "spirv": Backend(_stages(("spirv", _SPIRV + "spirv_stage", None),
                             ("disasm", _SPIRV + "disassembly_stage", "spirv"),
                             stops={"spirv-binary": "spirv", "asm": "disasm"}, manifest=_SPIRV + "manifest_facts")),
    # llir -> ptx -> cubin. The PTX is native: it needs no ptxas, and the CUDA
    # driver compiles it for the GPU it runs on; `asm` is the same PTX.
    "nvptx": Backend(_stages(("llir", _NVPTX + "lower_stage", None),
                             ("ptx", _NVPTX + "ptx_stage", "llir"),
                             ("cubin", _NVPTX + "cubin_stage", "ptx"),
                             stops={"nvptx-ptx": "ptx", "nvptx-cubin": "cubin", "llvmir-text": "llir", "asm": "ptx"},
                             manifest=_NVPTX + "manifest_facts", worker=("ptx",),
                             check={"cubin": _NVPTX + "find_ptxas"}),
                     worker=LLVM_WORKER, llvm=True),
    # llir -> asm | obj. The host, for `loom test --device cpu`: an object
    # the cpu device loads and runs (docs/cpu.md).
    "cpu": Backend(_stages(("llir", _CPU + "lower_stage", None),
                           ("asm", _CPU + "asm_stage", "llir"),
                           ("obj", _CPU + "object_stage", "llir"),
                           stops={"cpu-object": "obj", "llvmir-text": "llir", "asm": "asm"},
                           manifest=_CPU + "manifest_facts", worker=("asm", "obj")),
                   worker=LLVM_WORKER, llvm=True),
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


@dataclass
class Artifact:
    format: str                                   # a key of FORMATS
    data: bytes
    kernels: list[dict[str, Any]] = field(default_factory=list)   # manifest "kernels" entries
    target: dict[str, Any] = field(default_factory=dict)          # manifest "target" object
