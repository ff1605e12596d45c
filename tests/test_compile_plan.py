"""`loom compile`'s output plan (loomcli.service.outputs), called directly, without click or a compile."""

from __future__ import annotations

import re
from typing import Any

import pytest

from loomcli.errors import EXIT_USAGE, LoomError, UsageError
from loomcli.service.outputs import OutputRequest, PlannedOutput, plan_outputs
from loomcli.service.request import CompileOutcome, CompileRequest


def plan(**fields: Any) -> list[tuple[str, str, str, str | None, str | None]]:
    """(target, format, path, launch config, manifest) of every planned output."""
    return [(o.profile.name if o.profile else "", o.format, o.path, o.launch_config, o.manifest)
            for o in plan_outputs(OutputRequest("src/k.loom", **fields)).outputs]


@pytest.mark.parametrize("fields,expected", [
    # -o: the format from the suffix, or --format.
    ({"outputs": ["k.loombc"]}, [("", "loom-bytecode", "k.loombc", None, None)]),
    ({"outputs": ["k.loom"]}, [("", "loom-text", "k.loom", None, None)]),
    ({"outputs": ["out/k.spv"], "targets": ["spirv:vulkan1.3"]},
     [("spirv:vulkan1.3", "spirv-binary", "out/k.spv", None, None)]),
    ({"outputs": ["k.bin"], "format": "amdgpu-hsaco", "targets": ["gfx1100"]},
     [("amdgpu:gfx1100", "amdgpu-hsaco", "k.bin", None, None)]),
    ({"outputs": ["k.ll"], "targets": ["amdgpu:gfx942"]}, [("amdgpu:gfx942", "llvmir-text", "k.ll", None, None)]),
    ({"outputs": ["k.loombc"], "targets": ["gfx1100"]}, [("amdgpu:gfx1100", "loom-bytecode", "k.loombc", None, None)]),
    # -o -: standard output, binary refused only on a terminal.
    ({"outputs": ["-"], "format": "spirv-binary", "targets": ["spirv:vulkan1.3"]},
     [("spirv:vulkan1.3", "spirv-binary", "-", None, None)]),
    ({"outputs": ["-"], "format": "loom-text", "stdout_is_terminal": True}, [("", "loom-text", "-", None, None)]),
    # -o - with a target and no --format: the target's native format (TOOLCHAIN.md section 14).
    ({"outputs": ["-"], "targets": ["spirv:vulkan1.3"]}, [("spirv:vulkan1.3", "spirv-binary", "-", None, None)]),
    ({"outputs": ["-"], "targets": ["gfx1100"]}, [("amdgpu:gfx1100", "amdgpu-hsaco", "-", None, None)]),
    ({"outputs": ["-"], "targets": ["nvptx:sm_90"]}, [("nvptx:sm_90", "nvptx-ptx", "-", None, None)]),
    # Side files beside -o are the paths given.
    ({"outputs": ["k.hsaco"], "targets": ["gfx1100"], "launch_config": "k.launch.loombc", "manifest": "m.json"},
     [("amdgpu:gfx1100", "amdgpu-hsaco", "k.hsaco", "k.launch.loombc", "m.json")]),
    # Several -o for one target: formats from their suffixes, side files by theirs; a bare
    # --manifest / --emit-launch-config goes beside the artifact.
    ({"outputs": ["o/k.spv", "k.launch.loombc"], "manifest": "", "targets": ["spirv:vulkan1.3"]},
     [("spirv:vulkan1.3", "spirv-binary", "o/k.spv", "k.launch.loombc", "o/k.manifest.json")]),
    ({"outputs": ["k.hsaco", "k.ll", "m.manifest.json"], "launch_config": "", "targets": ["gfx1100"]},
     [("amdgpu:gfx1100", "amdgpu-hsaco", "k.hsaco", "k.launch.loombc", "m.manifest.json")]),
    ({"out_dir": "d", "targets": ["gfx1100"], "manifest": ""},
     [("amdgpu:gfx1100", "amdgpu-hsaco", "d/k.amdgpu-gfx1100.hsaco", None, "d/k.amdgpu-gfx1100.manifest.json")]),
    # --stop-at: the one -o is that stage's bytes, whatever its suffix.
    ({"outputs": ["k.o"], "stop_at": "obj", "targets": ["gfx1100"]},
     [("amdgpu:gfx1100", "stage:obj", "k.o", None, None)]),
    # --out-dir: <stem>.<family>-<selector><ext>, each back end's native format unless --format.
    ({"out_dir": "d", "targets": ["gfx1100", "spirv:vulkan1.3", "nvptx:sm_90"]},
     [("amdgpu:gfx1100", "amdgpu-hsaco", "d/k.amdgpu-gfx1100.hsaco", None, None),
      ("spirv:vulkan1.3", "spirv-binary", "d/k.spirv-vulkan1.3.spv", None, None),
      ("nvptx:sm_90", "nvptx-ptx", "d/k.nvptx-sm_90.ptx", None, None)]),
    ({"out_dir": "d", "format": "llvmir-text", "targets": ["gfx1100", "gfx942"]},
     [("amdgpu:gfx1100", "llvmir-text", "d/k.amdgpu-gfx1100.ll", None, None),
      ("amdgpu:gfx942", "llvmir-text", "d/k.amdgpu-gfx942.ll", None, None)]),
    # With --out-dir the side options name folders of per-target files.
    ({"out_dir": "d", "targets": ["gfx1100", "gfx942"], "launch_config": "l", "manifest": "m"},
     [("amdgpu:gfx1100", "amdgpu-hsaco", "d/k.amdgpu-gfx1100.hsaco", "l/k.amdgpu-gfx1100.launch.loombc",
       "m/k.amdgpu-gfx1100.manifest.json"),
      ("amdgpu:gfx942", "amdgpu-hsaco", "d/k.amdgpu-gfx942.hsaco", "l/k.amdgpu-gfx942.launch.loombc",
       "m/k.amdgpu-gfx942.manifest.json")]),
])
def test_outputs(fields: dict[str, Any], expected: list[tuple[str, str, str, str | None, str | None]]) -> None:
    assert plan(**fields) == expected


def test_more_outputs_and_dumped_stages() -> None:
    (one,) = plan_outputs(OutputRequest("k.loom", outputs=["k.hsaco", "k.s"], targets=["gfx1100"],
                                        dump_stages="d")).outputs
    assert one.also == (("asm", "k.s"), ("stage:llir", "d/k.llir"), ("stage:asm", "d/k.asm"),
                        ("stage:obj", "d/k.obj"), ("stage:hsaco", "d/k.hsaco"))
    two = plan_outputs(OutputRequest("k.loom", out_dir="o", targets=["gfx1100", "spirv:vulkan1.3"], dump_stages="d"))
    assert [o.also for o in two.outputs] == [
        (("stage:llir", "d/k.amdgpu-gfx1100.llir"), ("stage:obj", "d/k.amdgpu-gfx1100.obj"),
         ("stage:hsaco", "d/k.amdgpu-gfx1100.hsaco")),
        (("stage:spirv", "d/k.spirv-vulkan1.3.spirv"),)]
    assert two.folders == ("d", "o")
    (request,) = plan_outputs(OutputRequest("k.loom", outputs=["k.ll", "k.hsaco"], manifest="",
                                            targets=["gfx1100"])).requests(CompileRequest(module=b""))
    assert (request.format, request.also, request.artifact_name) == ("llvmir-text", ("amdgpu-hsaco",), "k.ll")


@pytest.mark.parametrize("fields,message", [
    ({}, "missing -o OUT or --out-dir DIR"),
    ({"outputs": ["k.spv"], "out_dir": "d", "targets": ["gfx1100"]}, "-o and --out-dir exclude each other"),
    ({"outputs": ["k.hsaco"], "targets": ["gfx1100", "gfx942"]}, "several --target values need --out-dir"),
    ({"out_dir": "d"}, "--out-dir needs at least one --target"),
    ({"out_dir": "d", "targets": ["gfx1100", "gfx942"], "depfile": "k.d"},
     "-MF names one depfile; with several targets use -MD"),
    ({"outputs": ["k.bin"]}, "-o k.bin: cannot tell the format from the suffix; pass --format"),
    ({"outputs": ["-"]}, "-o -: cannot tell the format from the suffix; pass --format"),
    ({"outputs": ["-"], "targets": ["spirv:vulkan1.3"], "stdout_is_terminal": True},
     "refusing to write binary output to a terminal; use -o FILE"),
    ({"outputs": ["k.spv"]}, "emitting spirv-binary needs --target"),
    ({"outputs": ["-"], "format": "spirv-binary", "targets": ["spirv:vulkan1.3"], "stdout_is_terminal": True},
     "refusing to write binary output to a terminal; use -o FILE"),
    ({"outputs": ["-"], "format": "loom-bytecode", "stdout_is_terminal": True},
     "refusing to write binary output to a terminal; use -o FILE"),
    ({"outputs": ["k.loombc"], "launch_config": "k.launch.loombc"}, "--emit-launch-config needs --target"),
    ({"outputs": ["k.loombc"], "targets": ["gfx1100"], "manifest": "m.json"}, "--manifest describes a target artifact"),
    ({"out_dir": "d", "format": "loom-text", "targets": ["gfx1100"], "manifest": "m"},
     "--manifest describes a target artifact"),
    ({"outputs": ["k.spv", "l.spv"], "targets": ["spirv:vulkan1.3"]}, "-o k.spv and -o l.spv both write spirv-binary"),
    ({"outputs": ["k.spv", "k.spv.manifest.json", "m.manifest.json"], "targets": ["spirv:vulkan1.3"]},
     "-o k.spv.manifest.json and -o m.manifest.json both name the manifest"),
    ({"outputs": ["k.launch.loombc"], "targets": ["spirv:vulkan1.3"]}, "-o names only side files"),
    ({"outputs": ["k.spv", "k.launch.loombc"], "launch_config": "l", "targets": ["spirv:vulkan1.3"]},
     "-o k.launch.loombc and --emit-launch-config both name the launch-config"),
    ({"outputs": ["k.spv", "k.s"], "format": "asm", "targets": ["spirv:vulkan1.3"]},
     "--format names the format of one -o"),
    ({"outputs": ["-"], "format": "spirv-binary", "manifest": "", "targets": ["spirv:vulkan1.3"]},
     "--manifest beside -o - needs a PATH"),
    ({"outputs": ["k.o"], "stop_at": "obj"}, "--stop-at needs --target"),
    ({"outputs": ["k.o"], "stop_at": "obj", "targets": ["spirv:vulkan1.3"]},
     "spirv has no stage obj; its stages: spirv -> disasm"),
    ({"outputs": ["k.o", "k.s"], "stop_at": "obj", "targets": ["gfx1100"]}, "--stop-at writes one output"),
    ({"outputs": ["k.o"], "stop_at": "obj", "manifest": "", "targets": ["gfx1100"]},
     "--stop-at writes one stage's output"),
    ({"outputs": ["k.loombc"], "dump_stages": "d"}, "--dump-stages needs --target"),
])
def test_usage_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match="^" + re.escape(message)) as e:
        plan_outputs(OutputRequest("k.loom", **fields))
    assert e.value.exit_code == EXIT_USAGE


def test_a_target_that_does_not_parse_is_a_clear_error() -> None:
    with pytest.raises(LoomError) as e:
        plan_outputs(OutputRequest("k.loom", outputs=["k.spv"], targets=["nosuchfamily:x"]))
    assert "nosuchfamily" in str(e.value)


@pytest.mark.parametrize("fields,expected", [
    ({"outputs": ["o/k.spv"], "targets": ["spirv:vulkan1.3"], "depfile_beside": True}, [("o/k.d", "o/k.spv")]),
    ({"outputs": ["-"], "format": "loom-text", "depfile_beside": True}, [("stdout.d", "-")]),
    ({"outputs": ["k.spv"], "targets": ["spirv:vulkan1.3"], "depfile": "deps/x.d"}, [("deps/x.d", "k.spv")]),
    ({"outputs": ["k.spv"], "targets": ["spirv:vulkan1.3"], "depfile": "x.d", "depfile_target": "all"},
     [("x.d", "all")]),
    ({"out_dir": "d", "targets": ["gfx1100", "spirv:vulkan1.3"], "depfile_beside": True},
     [("d/k.amdgpu-gfx1100.d", "d/k.amdgpu-gfx1100.hsaco"), ("d/k.spirv-vulkan1.3.d", "d/k.spirv-vulkan1.3.spv")]),
    ({"outputs": ["k.spv"], "targets": ["spirv:vulkan1.3"]}, []),
])
def test_depfiles(fields: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert list(plan_outputs(OutputRequest("k.loom", **fields)).depfiles) == expected


@pytest.mark.parametrize("fields,expected", [
    ({"outputs": ["o/k.spv"], "targets": ["spirv:vulkan1.3"], "manifest": "m/x.json"}, ()),  # -o's folders must exist
    ({"out_dir": "d", "targets": ["gfx1100"]}, ("d",)),
    ({"out_dir": "d/e", "targets": ["gfx1100", "gfx942"], "launch_config": "l", "manifest": "d/e"}, ("d/e", "l")),
])
def test_folders(fields: dict[str, Any], expected: tuple[str, ...]) -> None:
    assert plan_outputs(OutputRequest("k.loom", **fields)).folders == expected


def test_requests_carry_each_output_and_the_shared_module() -> None:
    outputs = plan_outputs(OutputRequest("k.loom", out_dir="d", targets=["gfx1100", "spirv:vulkan1.3"],
                                         launch_config="l"))
    template = CompileRequest(module=b"LOOMBC", roots=("@k",), linked=True, pipeline="none", path="k.loom")
    requests = outputs.requests(template)
    assert [(r.target, r.format, r.artifact_name, r.launch_config, r.launch_config_name, r.manifest)
            for r in requests] == [
        ("amdgpu:gfx1100", "amdgpu-hsaco", "k.amdgpu-gfx1100.hsaco", True, "k.amdgpu-gfx1100.launch.loombc", False),
        ("spirv:vulkan1.3", "spirv-binary", "k.spirv-vulkan1.3.spv", True, "k.spirv-vulkan1.3.launch.loombc", False),
    ]
    assert {(r.module, r.roots, r.linked, r.pipeline, r.path) for r in requests} == {
        (b"LOOMBC", ("@k",), True, "none", "k.loom")}


def test_requests_without_a_target() -> None:
    (request,) = plan_outputs(OutputRequest("k.loom", outputs=["k.loom"])).requests(CompileRequest(module=b""))
    assert (request.target, request.format, request.artifact_name, request.launch_config_name) == (
        "", "loom-text", "k.loom", "")


def test_writes_pair_each_outcome_with_its_paths_then_the_depfiles() -> None:
    outputs = plan_outputs(OutputRequest("k.loom", out_dir="d", targets=["gfx1100", "gfx942"], manifest="m",
                                         depfile_beside=True))
    outcomes = [CompileOutcome("ok", artifact=b"A1", manifest=b"M1"), CompileOutcome("ok", artifact=b"A2",
                                                                                     manifest=b"M2")]
    assert outputs.writes(outcomes, ["k.loom", "lib dir/l.loom", "k.loom"]) == [
        ("d/k.amdgpu-gfx1100.hsaco", b"A1"), ("m/k.amdgpu-gfx1100.manifest.json", b"M1"),
        ("d/k.amdgpu-gfx942.hsaco", b"A2"), ("m/k.amdgpu-gfx942.manifest.json", b"M2"),
        ("d/k.amdgpu-gfx1100.d", b"d/k.amdgpu-gfx1100.hsaco: \\\n k.loom \\\n lib\\ dir/l.loom\n"),
        ("d/k.amdgpu-gfx942.d", b"d/k.amdgpu-gfx942.hsaco: \\\n k.loom \\\n lib\\ dir/l.loom\n"),
    ]


def test_planned_outputs_are_plain_data() -> None:
    (planned,) = plan_outputs(OutputRequest("k.loom", outputs=["k.loombc"])).outputs
    assert planned == PlannedOutput(None, "loom-bytecode", "k.loombc")
