"""Back ends as stage lists (`loomcli.emit.stages`): each output format stops
at one stage, runs only the stages on its path, and any stage can be
stopped at and its outputs dumped."""

from __future__ import annotations

import importlib
import inspect
import itertools
import pkgutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from loomcli.emit import BACKENDS, FORMATS
from loomcli.emit.artifacts import Emission
from loomcli.emit.stages import Stage, StageList, load
from loomcli.errors import UsageError
from loomcli.service.front import CompileOptions, compile_module
from loomcli.targets.profiles import parse_target

SAXPY = str(Path(__file__).resolve().parent.parent / "samples" / "saxpy.loom")
ELF_RELOCATABLE, ELF_SHARED = 1, 3


@cache
def compiled(target: str) -> Any:
    return compile_module(CompileOptions(input=SAXPY, profile=parse_target(target))).module


@pytest.mark.parametrize(("family", "stages"), [
    ("amdgpu", "llir -> asm | obj -> hsaco"),
    ("nvptx", "llir -> ptx -> cubin"),
    ("spirv", "spirv -> disasm"),
])
def test_each_back_end_declares_its_stages(family: str, stages: str) -> None:
    assert BACKENDS[family].stages.describe() == stages


def test_every_format_stops_at_a_stage_of_its_back_end() -> None:
    for family, backend in BACKENDS.items():
        assert set(backend.formats) <= set(FORMATS), family
        for fmt in backend.formats:
            path = backend.stages.path(backend.stages.stops[fmt])
            assert path[0].after is None and all(s.after == p.name for p, s in itertools.pairwise(path)), (family, fmt)


def test_every_stage_names_a_function() -> None:
    """Paths are checked here, not at import (`loomcli.emit` imports no
    emitter); with the packages' submodules imported, since a submodule
    shadows a package's function of the same name."""
    for backend in BACKENDS.values():
        paths = [backend.stages.manifest] + [p for s in backend.stages.stages for p in (s.run, s.check) if p]
        for path in paths:
            package = importlib.import_module(path.partition(":")[0])
            for sub in pkgutil.iter_modules(getattr(package, "__path__", [])):
                importlib.import_module(f"{package.__name__}.{sub.name}")
            assert inspect.isfunction(load(path)), path


@pytest.mark.parametrize(("fmt", "path"), [
    ("llvmir-text", ["llir"]),
    ("asm", ["llir", "asm"]),
    ("amdgpu-hsaco", ["llir", "obj", "hsaco"]),
])
def test_a_format_runs_only_the_stages_on_its_path(fmt: str, path: list[str]) -> None:
    seen: list[str] = []
    artifact = BACKENDS["amdgpu"].emit(compiled("amdgpu:gfx1100"), parse_target("amdgpu:gfx1100"), fmt,
                                       dump=lambda stage, _: seen.append(stage))
    assert seen == path
    assert artifact.format == fmt and artifact.kernels


def test_llvm_ir_alone_starts_no_llvm_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("the LLVM worker was started")

    monkeypatch.setattr("loomcli.emit.llvm.backend.start_worker", refuse)
    p = parse_target("amdgpu:gfx1100")
    assert BACKENDS["amdgpu"].emit(compiled("amdgpu:gfx1100"), p, "llvmir-text").data.startswith(b"target datalayout")
    with pytest.raises(AssertionError, match="worker was started"):
        BACKENDS["amdgpu"].emit(compiled("amdgpu:gfx1100"), p, "asm")


def test_a_stage_no_format_stops_at_can_be_stopped_at_and_dumped() -> None:
    p = parse_target("amdgpu:gfx1100")
    emission = Emission(compiled("amdgpu:gfx1100"), p)
    dumped: dict[str, bytes] = {}
    outputs = emission.stage_outputs("obj", dumped.__setitem__)
    assert dumped == outputs and list(outputs) == ["llir", "obj"]
    assert outputs["llir"] == emission.artifact("llvmir-text").data
    assert outputs["obj"][:4] == b"\x7fELF" and outputs["obj"][16] == ELF_RELOCATABLE
    hsaco = emission.artifact("amdgpu-hsaco").data
    assert hsaco[16] == ELF_SHARED


def test_an_unknown_stage_is_a_usage_error() -> None:
    emission = Emission(compiled("spirv:vulkan1.3"), parse_target("spirv:vulkan1.3"))
    with pytest.raises(UsageError, match="spirv has no stage obj; its stages: spirv -> disasm"):
        emission.stage_outputs("obj")
    assert emission.stage_outputs("disasm")["disasm"].decode() == emission.artifact("asm").data.decode()


@pytest.mark.parametrize(("stages", "stops", "error"), [
    ((Stage("b", "m:f", "a"), Stage("a", "m:g")), {"x": "a"}, "stage b follows a, which is not an earlier stage"),
    ((Stage("a", "m:f"),), {"x": "b"}, "format x stops at b, which is not a stage"),
])
def test_a_malformed_stage_list_is_refused(stages: tuple[Stage, ...], stops: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        StageList(stages, stops, "m:manifest")


def test_loom_targets_stages_lists_each_back_end_and_its_stops(capsys: pytest.CaptureFixture[str]) -> None:
    from loomcli.cli import main

    with pytest.raises(SystemExit) as e:
        main(["targets", "--stages"])
    assert e.value.code in (0, None)
    assert capsys.readouterr().out.splitlines() == [
        "amdgpu: llir -> asm | obj -> hsaco; amdgpu-hsaco=hsaco llvmir-text=llir asm=asm",
        "spirv: spirv -> disasm; spirv-binary=spirv asm=disasm",
        "nvptx: llir -> ptx -> cubin; nvptx-ptx=ptx nvptx-cubin=cubin llvmir-text=llir asm=ptx",
        "cpu: llir -> asm | obj; cpu-object=obj llvmir-text=llir asm=asm",
    ]


@pytest.mark.parametrize(("target", "stage", "starts"), [
    ("amdgpu:gfx1100", "obj", b"\x7fELF"),
    ("amdgpu:gfx1100", "asm", b"\t.amdgcn_target"),
    ("nvptx:sm_90", "llir", b"target datalayout"),
    ("spirv:vulkan1.3", "spirv", b"\x03\x02\x23\x07"),
])
def test_compile_stops_at_a_stage_of_each_back_end(tmp_path: Path, target: str, stage: str, starts: bytes) -> None:
    from loomcli.cli import main

    out = tmp_path / "k.out"
    with pytest.raises(SystemExit) as e:
        main(["compile", SAXPY, "--target", target, "--stop-at", stage, "-o", str(out)])
    assert e.value.code in (0, None)
    emission = Emission(compiled(target), parse_target(target))
    assert out.read_bytes() == emission.stage_outputs(stage)[stage] and out.read_bytes().startswith(starts)
