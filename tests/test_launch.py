"""Launch-config artifacts (`X.launch.loombc`) and `loom launch-eval`.

Inputs live in tests/launch/: geometry.loom maps workload values straight to
the geometry, typed.loom takes every kind of workload value, configured.loom
reads its group size from config, spin.loom loops in a pure helper, and
workload_grid.launch.loom is the golden text of the seed example's artifact.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.bytecode import read_module, write_module
from loomcli.diagnostics import CompileError
from loomcli.emit.launch_config import build_launch_config, launch_module
from loomcli.frontend import parse_text
from loomcli.ir.verifier import verify
from loomcli.launch import LaunchProgram, evaluate
from loomcli.service.front import CompileOptions, compile_module
from loomcli.targets.profiles import parse_target
from loomcli.text.printer import print_module

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
DATA = ROOT / "tests" / "launch"
SEED_LINE = ("workload=1009 workgroups=16x1x1 workgroup_size=64x1x1 cluster=1x1x1 subgroup_size=32 "
             "workgroup_storage_bytes=0")


def loom(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], cwd=cwd, capture_output=True, env=env, text=True)


def artifact(source: Path, target: str = "amdgpu:gfx1100", roots: tuple[str, ...] = (),
             config: tuple[str, ...] = ()) -> bytes:
    profile = parse_target(target)
    compiled = compile_module(CompileOptions(input=str(source), profile=profile, roots=roots, config=config))
    return build_launch_config(compiled.module, profile)


def codes(info: pytest.ExceptionInfo) -> list[str]:
    return [d.code for d in info.value.diagnostics]


@pytest.fixture(scope="module")
def grid_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("artifacts") / "workload_grid.launch.loombc"
    path.write_bytes(artifact(SAMPLES / "workload_grid.loom"))
    return path


@pytest.fixture(scope="module")
def geometry_artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("geometry")
    out = {}
    for target, roots in (("amdgpu:gfx1100", ()), ("spirv:vulkan1.3", ("@counts", "@clustered"))):
        path = folder / f"geometry.{target.replace(':', '-')}.launch.loombc"
        path.write_bytes(artifact(DATA / "geometry.loom", target, roots))
        out[target] = path
    return out


# ---------------------------------------------------------------- seed 002


def test_seed_line_from_source() -> None:
    r = loom("launch-eval", str(SAMPLES / "workload_grid.loom"), "@workload_grid", "1009", "--target", "amdgpu:gfx1100")
    assert (r.returncode, r.stdout, r.stderr) == (0, SEED_LINE + "\n", "")


def test_seed_line_from_artifact(grid_artifact: Path) -> None:
    r = loom("launch-eval", str(grid_artifact), "@workload_grid", "1009")
    assert (r.returncode, r.stdout, r.stderr) == (0, SEED_LINE + "\n", "")
    assert evaluate(grid_artifact.read_bytes(), "workload_grid", [1009]).text() == SEED_LINE


def test_seed_line_from_compile_emit_launch_config(tmp_path: Path) -> None:
    out = tmp_path / "wg.launch.loombc"
    r = loom("compile", str(SAMPLES / "workload_grid.loom"), "-o", str(tmp_path / "wg.loombc"), "--target",
             "amdgpu:gfx1100", "--emit-launch-config", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == artifact(SAMPLES / "workload_grid.loom")
    assert loom("launch-eval", str(out), "@workload_grid", "1009").stdout == SEED_LINE + "\n"


def test_json_output(grid_artifact: Path) -> None:
    r = loom("launch-eval", str(grid_artifact), "@workload_grid", "1009", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 1
    assert json.loads(r.stdout) == {"workload": [1009], "workgroups": [16, 1, 1], "workgroup_size": [64, 1, 1],
                                    "cluster": [1, 1, 1], "subgroup_size": 32, "workgroup_storage_bytes": 0}
    assert list(json.loads(r.stdout)) == ["workload", "workgroups", "workgroup_size", "cluster", "subgroup_size",
                                          "workgroup_storage_bytes"]


def test_golden_artifact_text(grid_artifact: Path) -> None:
    """The representation of docs/launch.md, as text."""
    module = read_module(grid_artifact.read_bytes())
    assert verify(module) == []
    assert print_module(module) == (DATA / "workload_grid.launch.loom").read_text()


# ---------------------------------------------------------------- workload values


@pytest.mark.parametrize(("values", "shown"), [
    (["1009", "2", "0", "1.5"], "workload=1009,2,0,1.5 workgroups=32x2x1"),
    (["0x3F1", "0xffffffff", "0x10", "2"], "workload=1009,-1,16,2.0 workgroups=32x1x1"),  # i32 reads both ways
    (["--", "-5", "-8", "0", "-inf"], "workload=-5,-8,0,-inf workgroups=0x1x1"),
    (["--", "-0x10", "7", "9223372036854775807", "nan"], "workload=-16,7,9223372036854775807,nan workgroups=0x7x1"),
])
def test_typed_workloads_hex_and_negative(values: list[str], shown: str) -> None:
    r = loom("launch-eval", "--target", "gfx1100", str(DATA / "typed.loom"), "@typed", *values)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(shown + " "), r.stdout


def test_typed_workloads_json_keeps_kinds() -> None:
    r = loom("launch-eval", "--json", "--target", "gfx1100", str(DATA / "typed.loom"), "@typed", "--", "-1", "0x7",
             "3", "inf")
    assert json.loads(r.stdout)["workload"] == [-1, 7, 3, "inf"]


def test_python_values_and_host_slots() -> None:
    data = artifact(DATA / "typed.loom")
    program = LaunchProgram.load(data, "typed.launch.loombc")
    fn = program.lookup("@typed_entry")
    assert program.invoke(fn, [1009, -1, 0, 1.5]).workgroups == (32, 1, 1)
    # Host ABI: 64-bit slots, low bits for narrower types.
    slots = [(1 << 64) - 5, 0xFFFFFFFF, 3, 0x3FC00000]  # index -5, i32 -1, offset 3, f32 1.5
    launch = program.invoke_bits(fn, slots)
    assert launch.workload == (-5, -1, 3, 1.5) and launch.workgroups == (0, 1, 1)
    for bad in ([0, 1 << 32, 0, 0], [0, 0, 1 << 63, 0], [0, 0, 0, 1 << 40], [0, 0, 0]):
        with pytest.raises(CompileError) as info:
            program.invoke_bits(fn, bad)
        assert codes(info) == ["LAUNCH_CONFIG/004"]


# ---------------------------------------------------------------- LAUNCH_CONFIG diagnostics

TYPED = str(DATA / "typed.loom")


@pytest.mark.parametrize(("args", "expected"), [
    # 001: unknown export (artifact: entry names; source: symbols, LANGUAGE.md 17.8)
    (["@nope", "1"], "<command-line>: error [LAUNCH_CONFIG/001]: no kernel exported as `nope`"),
    (["--target", "gfx1100", TYPED, "@typed_entry", "1", "1", "1", "1"],
     "<command-line>: error [LAUNCH_CONFIG/001]: no kernel exported as `@typed_entry`"),
    # 004: count, type, range
    (["@workload_grid"], "<command-line>: error [LAUNCH_CONFIG/004]: workload arguments: `workload_grid` takes 1 "
                         "value (index), found 0"),
    (["@workload_grid", "1", "2"], "<command-line>: error [LAUNCH_CONFIG/004]: workload arguments: `workload_grid` "
                                   "takes 1 value (index), found 2"),
    (["@workload_grid", "1.5"], "<command-line>: error [LAUNCH_CONFIG/004]: workload arguments: argument 0 "
                                "(%element_count: index): `1.5` is not an integer"),
    (["@workload_grid", "0x8000000000000000"], "<command-line>: error [LAUNCH_CONFIG/004]: workload arguments: "
     "argument 0 (%element_count: index): `0x8000000000000000` is outside the range of index"),
    (["--target", "gfx1100", TYPED, "@typed", "--", "1", "1", "-1", "1"],
     "<command-line>: error [LAUNCH_CONFIG/004]: workload arguments: argument 2 (%bytes: offset): `-1` is outside "
     "the range of offset"),
    (["--target", "gfx1100", TYPED, "@typed", "1", "0x100000000", "1", "1"],
     "<command-line>: error [LAUNCH_CONFIG/004]: workload arguments: argument 1 (%k: i32): `0x100000000` is outside "
     "the range of i32"),
    (["--target", "gfx1100", TYPED, "@typed", "1", "1", "1", "1e39"],
     "<command-line>: error [LAUNCH_CONFIG/004]: workload arguments: argument 3 (%scale: f32): `1e39` overflows f32"),
    # Past f64's range a finite value read as infinity and was accepted (`inf` itself stays valid).
    (["--target", "gfx1100", TYPED, "@typed", "1", "1", "1", "1e309"],
     "<command-line>: error [LAUNCH_CONFIG/004]: workload arguments: argument 3 (%scale: f32): `1e309` overflows f32"),
    (["--target", "gfx1100", TYPED, "@typed", "1", "1", "1", "x"],
     "<command-line>: error [LAUNCH_CONFIG/004]: workload arguments: argument 3 (%scale: f32): `x` is not a float"),
    # 005: workload predicates
    (["--target", "gfx1100", TYPED, "@typed", "100001", "1", "1", "1"],
     "<command-line>: error [LAUNCH_CONFIG/005]: argument 0 = 100001 violates range(%n, -100, 100000)"),
    (["--target", "gfx1100", TYPED, "@typed", "--", "1", "-9", "1", "1"],
     "<command-line>: error [LAUNCH_CONFIG/005]: argument 1 = -9 violates ge(%k, -8)"),
    (["--target", "gfx1100", str(SAMPLES / "reduction.loom"), "@sum_f32", "1000"],
     "<command-line>: error [LAUNCH_CONFIG/005]: argument 0 = 1000 violates mul(%n, 256)"),
    # 007: UB while evaluating (64-bit index arithmetic, division domain)
    (["@workload_grid", "--", "-64"], "{grid}: error [LAUNCH_CONFIG/007]: evaluation failed: index.div needs "
                                      "a >= 0 and b > 0, got -1 and 64"),
    (["@workload_grid", "9223372036854775800"], "{grid}: error [LAUNCH_CONFIG/007]: evaluation failed: "
                                                "9223372036854775863 is outside the index range"),
])
def test_launch_config_diagnostics(grid_artifact: Path, args: list[str], expected: str) -> None:
    if not args[0].startswith("--target"):
        args = [str(grid_artifact), *args]
    r = loom("launch-eval", *args)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines()[0] == expected.format(grid=grid_artifact), r.stderr


GEOMETRY = [
    # (target, entry, workload, field, value shown)
    ("amdgpu:gfx1100", "counts", ["--", "-1", "1", "1"], "workgroups.x", "-1 (must be in [0, 4294967295])"),
    ("amdgpu:gfx1100", "counts", ["1", "4294967296", "1"], "workgroups.y", "4294967296 (must be in [0, 4294967295])"),
    ("spirv:vulkan1.3", "counts", ["1", "1", "65536"], "workgroups.z", "65536 (max 65535 on spirv:vulkan1.3)"),
    ("amdgpu:gfx1100", "sizes", ["0", "1", "1"], "workgroup_size.x", "0 (must be >= 1)"),
    ("amdgpu:gfx1100", "sizes", ["1", "1025", "1"], "workgroup_size.y", "1025 (max 1024 on amdgpu:gfx1100)"),
    ("amdgpu:gfx1100", "sizes", ["64", "32", "1"], "workgroup_size",
     "64x32x1 (2048 invocations, max 1024 on amdgpu:gfx1100)"),
    ("amdgpu:gfx1100", "spread", ["67108864", "64"], "workgroups.x*workgroup_size.x",
     "67108864*64 = 4294967296 (above 4294967295)"),
    ("amdgpu:gfx1100", "clustered", ["4", "0"], "cluster_size.x", "0 (must be >= 1)"),
    ("amdgpu:gfx1100", "clustered", ["5", "2"], "workgroups.x", "5 (not a multiple of cluster size 2)"),
    ("amdgpu:gfx1100", "clustered", ["4", "2"], "cluster_size", "2x1x1 (amdgpu:gfx1100 has no workgroup clusters)"),
    ("spirv:vulkan1.3", "clustered", ["4", "4"], "cluster_size", "4x1x1 (spirv:vulkan1.3 has no workgroup clusters)"),
]


@pytest.mark.parametrize(("target", "entry", "workload", "field", "shown"), GEOMETRY)
def test_invalid_geometry(geometry_artifacts: dict[str, Path], target: str, entry: str, workload: list[str],
                          field: str, shown: str) -> None:
    path = geometry_artifacts[target]
    r = loom("launch-eval", str(path), "@" + entry, *workload)
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == f"{path}: error [LAUNCH_CONFIG/006]: invalid geometry: {field} = {shown}"


@pytest.mark.parametrize(("target", "entry", "workload", "line"), [
    ("amdgpu:gfx1100", "counts", ["0", "4294967295", "1"], "workgroups=0x4294967295x1 workgroup_size=64x1x1"),
    ("spirv:vulkan1.3", "counts", ["65535", "1", "1"], "workgroups=65535x1x1 workgroup_size=64x1x1"),
    ("amdgpu:gfx1100", "sizes", ["1024", "1", "1"], "workgroups=1x1x1 workgroup_size=1024x1x1"),
    ("amdgpu:gfx1100", "spread", ["67108863", "64"], "workgroups=67108863x1x1 workgroup_size=64x1x1"),
    ("amdgpu:gfx1100", "clustered", ["4", "1"], "workgroups=4x1x1 workgroup_size=64x1x1 cluster=1x1x1"),
])
def test_geometry_at_the_limits(geometry_artifacts: dict[str, Path], target: str, entry: str, workload: list[str],
                                line: str) -> None:
    r = loom("launch-eval", str(geometry_artifacts[target]), "@" + entry, *workload)
    assert r.returncode == 0, r.stderr
    assert line in r.stdout


def test_source_form_points_at_the_source() -> None:
    geometry = "tests/launch/geometry.loom"
    r = loom("launch-eval", "--target", "spirv:vulkan1.3", str(geometry), "@counts", "65536", "1", "1")
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        f"{geometry}:5:35: error [LAUNCH_CONFIG/006]: invalid geometry: workgroups.x = 65536 (max 65535 on "
        "spirv:vulkan1.3)",
        "  kernel.launch.config workgroups(%x, %y, %z) workgroup_size(%size, %one, %one) : index",
        "                                  ^"]


def test_does_not_fold_within_the_step_limit() -> None:
    """LAUNCH_CONFIG/008 at evaluation: a pure call past its budget of ops does not fold (17.15)."""
    data = artifact(DATA / "spin.loom")
    assert evaluate(data, "spin", [100]).workgroups == (100, 1, 1)
    with pytest.raises(CompileError) as info:
        evaluate(data, "spin", [100], max_steps=50, path="spin.launch.loombc")
    (d,) = info.value.diagnostics
    assert (d.code, d.message, d.file) == ("LAUNCH_CONFIG/008", "workgroups of `@spin_kernel` launch does not fold",
                                           "spin.launch.loombc")


def test_does_not_fold_when_building() -> None:
    """LAUNCH_CONFIG/008 when building: the region calls a function the artifact cannot carry."""
    module = parse_text(
        "func.decl host pure @groups_of(%n: index) -> (index)\n\n"
        "kernel.def export(\"k\") @k(%n: index) {\n"
        "  %one = index.constant 1 : index\n"
        "  %g = func.call pure @groups_of(%n) : (index) -> (index)\n"
        "  kernel.launch.config workgroups(%one, %g, %one) workgroup_size(%one, %one, %one) : index\n"
        "} launch() {\n"
        "  kernel.return\n"
        "}\n", "k.loom")
    with pytest.raises(CompileError) as info:
        build_launch_config(module, parse_target("gfx1100"))
    (d,) = info.value.diagnostics
    assert d.render() == "k.loom:5:8: error [LAUNCH_CONFIG/008]: workgroups of `@k` launch does not fold"


# ---------------------------------------------------------------- contract facts


@pytest.mark.parametrize(("sample", "entry", "workload", "target", "subgroup", "storage"), [
    ("reduction.loom", "sum_f32", ["1024"], "amdgpu:gfx1100", 32, 1024),
    ("reduction.loom", "sum_f32", ["1024"], "amdgpu:gfx942", 64, 1024),
    ("reduction.loom", "sum_f32", ["1024"], "spirv:vulkan1.3", 0, 1024),
    ("matmul.loom", "matmul_f32", ["20", "36"], "amdgpu:gfx11-generic", 32, 2048),
    ("matmul.loom", "matmul_f32", ["20", "36"], "spirv:vulkan1.1", 0, 2048),
    ("saxpy.loom", "saxpy", ["1009"], "amdgpu:gfx12-generic", 32, 0),
])
def test_contract_facts(sample: str, entry: str, workload: list[str], target: str, subgroup: int,
                        storage: int) -> None:
    launch = evaluate(artifact(SAMPLES / sample, target), entry, workload)
    assert (launch.subgroup_size, launch.workgroup_storage_bytes) == (subgroup, storage)


def test_matmul_geometry() -> None:
    launch = evaluate(artifact(SAMPLES / "matmul.loom"), "matmul_f32", [20, 36])
    assert (launch.workgroups, launch.workgroup_size) == ((3, 2, 1), (16, 16, 1))


def test_spirv_record_fixes_the_subgroup_size() -> None:
    module = parse_text(
        "spirv.target<vulkan1_3> @vk {subgroup_size = 16}\n\n"
        "kernel.def target(@vk) export(\"k\") @k() {\n"
        "  %one = index.constant 1 : index\n"
        "  %s = target.subgroup.size : index\n"
        "  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%s, %one, %one) : index\n"
        "} launch() {\n"
        "  kernel.return\n"
        "}\n", "vk.loom")
    launch = evaluate(build_launch_config(module, None), "k", [])
    assert (launch.workgroup_size, launch.subgroup_size) == ((16, 1, 1), 16)


def test_artifact_keys_entries_by_export_name() -> None:
    data = artifact(DATA / "typed.loom")
    program = LaunchProgram.load(data)
    assert sorted(program.functions) == ["typed_entry"]
    with pytest.raises(CompileError) as info:
        program.lookup("typed")  # the symbol is not the entry name
    assert codes(info) == ["LAUNCH_CONFIG/001"]
    # The source form names the kernel by symbol.
    r = loom("launch-eval", "--target", "gfx1100", str(DATA / "typed.loom"), "@typed", "1", "1", "1", "1")
    assert r.returncode == 0, r.stderr


def test_every_exported_kernel_has_an_entry(geometry_artifacts: dict[str, Path]) -> None:
    program = LaunchProgram.load(geometry_artifacts["amdgpu:gfx1100"].read_bytes())
    assert list(program.functions) == ["counts", "sizes", "spread", "clustered"]
    spirv = LaunchProgram.load(geometry_artifacts["spirv:vulkan1.3"].read_bytes())
    assert list(spirv.functions) == ["counts", "clustered"]


def test_helpers_travel_and_reserved_names_are_avoided() -> None:
    module = parse_text(
        "func.def host pure @launch_config.format(%n: index) -> (index) {\n"
        "  %r = index.add %n, %n : index\n"
        "  func.return %r : index\n"
        "}\n\n"
        "kernel.def export(\"k\") @k(%n: index) {\n"
        "  %one = index.constant 1 : index\n"
        "  %g = func.call pure @launch_config.format(%n) : (index) -> (index)\n"
        "  kernel.launch.config workgroups(%g, %one, %one) workgroup_size(%one, %one, %one) : index\n"
        "} launch() {\n"
        "  kernel.return\n"
        "}\n", "k.loom")
    data = build_launch_config(module, parse_target("gfx1100"))
    assert verify(read_module(data)) == []
    assert "_launch_config.format" in read_module(data).symbols()
    assert evaluate(data, "k", [21]).workgroups == (42, 1, 1)


def test_config_is_bound_when_building() -> None:
    configured = "tests/launch/configured.loom"
    r = loom("launch-eval", "--target", "gfx1100", configured, "@configured", "1000")
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == f"{configured}:6:12: error [CONFIG/003]: `@tile.group` unresolved"
    r = loom("launch-eval", "--target", "gfx1100", "--config", "tile.group=128", configured, "@configured", "1000")
    assert r.stdout.startswith("workload=1000 workgroups=8x1x1 workgroup_size=128x1x1 "), r.stderr
    data = artifact(DATA / "configured.loom", config=("tile.group=256",))
    assert evaluate(data, "configured", [1000]).workgroup_size == (256, 1, 1)


# ---------------------------------------------------------------- the command line


def test_usage_errors(grid_artifact: Path, tmp_path: Path) -> None:
    r = loom("launch-eval", str(SAMPLES / "workload_grid.loom"), "@workload_grid", "1009")
    assert r.returncode == 2 and "needs --target" in r.stderr
    r = loom("launch-eval", "--target", "amdgpu:gfx942", str(grid_artifact), "@workload_grid", "1009")
    assert r.returncode == 2 and "built for amdgpu:gfx1100, not amdgpu:gfx942" in r.stderr
    r = loom("launch-eval", "--target", "amdgpu:gfx1100", str(grid_artifact), "@workload_grid", "1009")
    assert r.stdout == SEED_LINE + "\n"
    r = loom("launch-eval", "--config", "a=1", str(grid_artifact), "@workload_grid", "1009")
    assert r.returncode == 2
    r = loom("launch-eval", str(grid_artifact), "@workload_grid", "-5")  # negative values need `--`
    assert r.returncode == 2
    r = loom("launch-eval", str(tmp_path / "missing.launch.loombc"), "@workload_grid", "1")
    assert r.returncode == 1


def test_compiled_module_is_a_source(tmp_path: Path) -> None:
    """A `.loombc` without the launch-config marker is compiled like a source."""
    compiled = tmp_path / "wg.loombc"
    assert loom("fmt", str(SAMPLES / "workload_grid.loom"), "--to", "bc", "-o", str(compiled)).returncode == 0
    r = loom("launch-eval", "--target", "gfx1100", str(compiled), "@workload_grid", "1009")
    assert r.stdout == SEED_LINE + "\n", r.stderr


def test_json_diagnostics(grid_artifact: Path) -> None:
    r = loom("launch-eval", "--diagnostics=json", str(grid_artifact), "@nope", "1")
    assert r.returncode == 1
    d = json.loads(r.stderr)
    assert (d["code"], d["file"], d["message"]) == ("LAUNCH_CONFIG/001", "<command-line>",
                                                   "no kernel exported as `nope`")


def test_malformed_artifacts(grid_artifact: Path) -> None:
    data = grid_artifact.read_bytes()
    with pytest.raises(CompileError) as info:
        evaluate(data[:-3], "workload_grid", [1])
    assert codes(info) == ["BYTECODE/003"]
    # A module that is not a launch-config artifact.
    with pytest.raises(CompileError) as info:
        evaluate(write_module(parse_text((SAMPLES / "workload_grid.loom").read_text())), "workload_grid", [1])
    assert codes(info) == ["BYTECODE/003"] and "not a launch-config artifact" in info.value.diagnostics[0].message


def test_start_up_imports_nothing_heavy(grid_artifact: Path) -> None:
    code = ("import sys\nfrom loomcli.cli import main\n"
            f"try:\n    main(['launch-eval', {str(grid_artifact)!r}, '@workload_grid', '1009'])\n"
            "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('llvmlite', 'rich', 'vulkan')\n"
            "    or m.startswith(('loomcli.emit', 'loomcli.passes', 'loomcli.targets.checks', 'loomcli.link',\n"
            "                     'loomcli.pipeline', 'loomcli.text', 'loomcli.runtime', 'loomcli.service',\n"
            "                     'concurrent')))\n"
            "assert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    assert r.stdout == SEED_LINE + "\n"


# ---------------------------------------------------------------- determinism


def test_artifacts_are_deterministic(tmp_path: Path) -> None:
    """Same program, same bytes: whatever the path, the working folder or the run."""
    first = artifact(SAMPLES / "matmul.loom")
    assert artifact(SAMPLES / "matmul.loom") == first
    elsewhere = tmp_path / "deep" / "other name"
    elsewhere.mkdir(parents=True)
    copy = elsewhere / "renamed.loom"
    shutil.copy(SAMPLES / "matmul.loom", copy)
    out = elsewhere / "m.launch.loombc"
    r = loom("compile", "renamed.loom", "-o", "m.loombc", "--target", "gfx1100", "--emit-launch-config", out.name,
             cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == first
    assert b"matmul.loom" not in first and b"samples" not in first
    assert write_module(read_module(first), keep_debug=False) == first


def test_in_memory_artifact_matches_bytes() -> None:
    profile = parse_target("gfx1100")
    compiled = compile_module(CompileOptions(input=str(SAMPLES / "reduction.loom"), profile=profile))
    assert write_module(launch_module(compiled.module, profile), keep_debug=False) == \
        build_launch_config(compiled.module, profile)
