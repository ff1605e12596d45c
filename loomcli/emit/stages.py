"""A back end as a named list of stages; an output format is where to stop.

A back end declares its stages as data (`BACKENDS` in `loomcli.emit`):
AMDGPU's are `llir -> asm | obj -> hsaco`, NVPTX's `llir -> ptx -> cubin`,
SPIR-V's `spirv -> disasm`. A stage names the stage whose output it takes
and the function that runs it; each output format names the stage it stops
at. Emitting a format runs the stages on the path to its stop, in order,
and nothing else, so no back end repeats an `if fmt ==` chain; the same
path can stop at any stage (one without a format too: `obj`) and hand
each stage's output to a `dump` callback on the way.

Stage functions are `"module:function"` paths, imported only when run, so
a command that emits nothing imports no emitter (and no LLVM).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loomcli.ir.core import Module
    from loomcli.targets.profiles import Profile

# A stage's output as it happens: (stage name, its bytes).
Dump = Callable[[str, bytes], None]


@dataclass(frozen=True)
class Stage:
    """One step of a back end: `run(job, input) -> output`, where the input
    is the output of `after` (b"" for the first stage, which reads the
    compiled module from the job)."""

    name: str                   # "llir", "obj", "hsaco", ...
    run: str                    # "module:function"
    after: str | None = None    # the stage it follows; None: the first
    worker: bool = False        # runs in the LLVM worker, which is started before the first stage
    # "module:function": (job) -> None, run before any stage of a path through
    # this one (a missing tool is the first thing to say, before any work).
    check: str | None = None


@dataclass
class StageJob:
    """One emission along a stage path: what the stages read (the module,
    the profile) and what they leave for the manifest (`facts`: kernels,
    per-kernel profiles, tool versions ...), besides each stage's output."""

    module: Module
    profile: Profile
    outputs: dict[str, bytes] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StageList:
    """A back end's stages, in order, and where each output format stops."""

    stages: tuple[Stage, ...]
    stops: Mapping[str, str]    # output format -> stage name; the first is the back end's native format
    # "module:function": (job) -> (manifest kernels, manifest target), once the stages ran.
    manifest: str

    def __post_init__(self) -> None:
        names = [s.name for s in self.stages]
        for s in self.stages:
            if s.after is not None and s.after not in names[:names.index(s.name)]:
                raise ValueError(f"stage {s.name} follows {s.after}, which is not an earlier stage")
        for fmt, stop in self.stops.items():
            if stop not in names:
                raise ValueError(f"format {fmt} stops at {stop}, which is not a stage")

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(self.stops)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def path(self, stop: str) -> tuple[Stage, ...]:
        """The stages that run to reach `stop`, first to last."""
        path = [self.stage(stop)]
        while path[-1].after is not None:
            path.append(self.stage(path[-1].after))
        return tuple(reversed(path))

    def describe(self) -> str:
        """The stage list as text: `llir -> asm | obj -> hsaco` (a stage
        after the first of its predecessor's followers is an alternative)."""
        def chain(name: str | None) -> str:
            parts = []
            for follower in (s.name for s in self.stages if s.after == name):
                rest = chain(follower)
                parts.append(f"{follower} -> {rest}" if rest else follower)
            return " | ".join(parts)
        return chain(None)

    def uses_worker(self, fmt: str) -> bool:
        return any(s.worker for s in self.path(self.stops[fmt]))

    def run(self, module: Module, profile: Profile, stop: str, dump: Dump | None = None,
            start_worker: Callable[[], None] | None = None) -> StageJob:
        """Run the stages up to `stop`; `dump` sees each stage's output."""
        path = self.path(stop)
        job = StageJob(module, profile)
        for s in path:
            if s.check is not None:
                load(s.check)(job)
        if start_worker is not None and any(s.worker for s in path):
            start_worker()  # it warms up while the first stages run
        data = b""
        for s in path:
            data = load(s.run)(job, data)
            job.outputs[s.name] = data
            if dump is not None:
                dump(s.name, data)
        return job


def load(path: str) -> Any:
    """The function a `"module:function"` path names, imported now."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
