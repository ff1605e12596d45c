"""Target records, profile resolution, the compile-time TARGET checks and `loom targets`.

tests/launch/build_errors.loom holds the diagnostics cases: building a
launch-config artifact runs every TARGET check (and the launch-config
region checks), so each case is built for its `// RUN: --target=T` and the
reported (line, code, message) set must equal its markers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from loomcli.diagnostics import CompileError
from loomcli.emit.launch_config import launch_module
from loomcli.frontend import parse_text
from loomcli.ir.core import Module, Operation
from loomcli.targets.checks import check_kernel, profile_for
from loomcli.targets.profiles import (
    AMDGPU_CHIPS,
    GENERIC_COVERS,
    U32_MAX,
    all_profiles,
    all_targets,
    parse_target,
)
from loomcli.targets.records import RECORD_KEYS, RECORD_OP, check_records, record_keys, record_profile

ROOT = Path(__file__).resolve().parent.parent
CASES_FILE = ROOT / "tests" / "launch" / "build_errors.loom"

_MARKER = re.compile(r"\s*// ERROR@\+(\d+):(?:(\d+):)? ([A-Z_]+/\d{3})(?: (.*))?\Z")
_RUN = re.compile(r"\s*// RUN: --target=(\S+)\s*\Z")


@dataclass(frozen=True)
class Case:
    index: int
    text: str
    target: str
    expected: frozenset[tuple[int, str, str | None, int | None]]

    @property
    def id(self) -> str:
        return f"build_errors#{self.index}"


def _cases() -> list[Case]:
    lines = CASES_FILE.read_text().split("\n")
    cases, start = [], 0
    for i in range(len(lines) + 1):
        if i == len(lines) or lines[i] == "// -----":
            body = ["" if not (start <= j < i) else lines[j] for j in range(len(lines))]
            cases.append(_case(len(cases), body))
            start = i + 1
    return [c for c in cases if c.expected]


def _case(index: int, lines: list[str]) -> Case:
    expected = set()
    target = "amdgpu:gfx1100"
    for n, line in enumerate(lines, 1):
        run = _RUN.match(line)
        if run:
            target = run.group(1)
        m = _MARKER.match(line)
        if not m:
            continue
        ahead, rest = int(m.group(1)), n
        while ahead:
            rest += 1
            if not _MARKER.match(lines[rest - 1]):
                ahead -= 1
        col = int(m.group(2)) if m.group(2) else None
        expected.add((rest, m.group(3), m.group(4), col))
    return Case(index, "\n".join(lines), target, frozenset(expected))


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_build_diagnostics(case: Case) -> None:
    module = parse_text(case.text, "build_errors.loom")
    with pytest.raises(CompileError) as info:
        launch_module(module, parse_target(case.target))
    got = {(d.line, d.code, d.message, d.column) for d in info.value.diagnostics}
    assert {(line, code) for line, code, _, _ in got} == {(line, code) for line, code, _, _ in case.expected}, got
    for line, code, message, col in case.expected:
        match = [g for g in got if g[0] == line and g[1] == code]
        if message is not None:
            assert message in [g[2] for g in match], (line, code, match)
        if col is not None:
            assert col in [g[3] for g in match], (line, code, match)
    assert all(d.file == "build_errors.loom" for d in info.value.diagnostics)


def test_cases_cover_every_target_code() -> None:
    codes = {code for case in CASES for _, code, _, _ in case.expected}
    assert {f"TARGET/00{n}" for n in range(1, 7)} <= codes
    assert {"LAUNCH_CONFIG/007", "LAUNCH_CONFIG/008", "CONFIG/003"} <= codes


# ---------------------------------------------------------------- records


def _record(text: str) -> tuple[Module, Operation]:
    module = parse_text(text, "r.loom")
    return module, module.ops[0]


@pytest.mark.parametrize(("text", "field", "value"), [
    ("amdgpu.target<gfx1100> @r {subgroup_size = 64}", "subgroup_size", 64),
    ("amdgpu.target<gfx1100> @r {max_workgroup_size_y = 256}", "max_workgroup_size", (1024, 256, 1024)),
    ("amdgpu.target<gfx1100> @r {max_flat_workgroup_size = 256}", "max_flat_workgroup_size", 256),
    ("amdgpu.target<gfx1100> @r {max_workgroup_storage_bytes = 32768}", "max_workgroup_storage_bytes", 32768),
    ("amdgpu.target<gfx1100> @r {index_bitwidth = 64}", "index_bitwidth", 64),
    ("spirv.target<vulkan1_1> @r {offset_bitwidth = 64}", "offset_bitwidth", 64),
    ("spirv.target<vulkan1_2> @r {max_push_constant_bytes = 256}", "max_push_constant_bytes", 256),
    ("spirv.target<vulkan1_3> @r {max_workgroup_count_z = 1024}", "max_workgroup_count", (65535, 65535, 1024)),
    ("spirv.target<vulkan1_3> @r {subgroup_size = 32}", "subgroup_size", 32),
    ("spirv.target<vulkan1_3> @r {f16 = false, int16_storage = false}", "features",
     frozenset({"f64", "i64", "int8_storage"})),
    ("amdgpu.target<gfx942> @r {subgroup_size = 64}", "subgroup_size", 64),
])
def test_record_overrides_profile(text: str, field: str, value: object) -> None:
    module, record = _record(text)
    profile, diags = record_profile(record, module.path)
    assert diags == []
    assert getattr(profile, field) == value
    assert profile.record == "r"
    assert check_records(module) == []


def test_record_keys_reproduce_every_profile() -> None:
    for base in all_profiles():
        keys = record_keys(base)
        assert set(keys) <= set(RECORD_KEYS)
        body = ", ".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in keys.items())
        _, record = _record(f"{RECORD_OP[base.family]}<{base.chip}> @r {{{body}}}")
        profile, diags = record_profile(record)
        assert diags == [], base.name
        for field in ("subgroup_size", "max_workgroup_size", "max_flat_workgroup_size", "max_workgroup_storage_bytes",
                      "max_workgroup_count", "max_push_constant_bytes", "index_bitwidth", "offset_bitwidth",
                      "features", "triple", "code_object_version", "spirv_version",
                      "max_workgroup_storage_optin_bytes"):
            assert getattr(profile, field) == getattr(base, field), (base.name, field)


def test_default_limits_of_language_7_8() -> None:
    amd, vk, wave64 = parse_target("gfx1100"), parse_target("vulkan1.3"), parse_target("amdgpu:gfx90a")
    assert (amd.subgroup_size, wave64.subgroup_size, vk.subgroup_size) == (32, 64, None)
    assert amd.max_workgroup_count == (U32_MAX,) * 3 and vk.max_workgroup_count == (65535,) * 3
    assert vk.max_workgroup_size == (1024, 1024, 64) and vk.max_push_constant_bytes == 128
    assert (amd.index_bitwidth, amd.offset_bitwidth, vk.offset_bitwidth) == (32, 64, 32)


# ---------------------------------------------------------------- profile resolution

PINNED = """amdgpu.target<gfx1100> @rdna3 {subgroup_size = 64}

kernel.def target(@rdna3) export("pinned") @pinned() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch() {
  kernel.return
}

kernel.def export("free") @free() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch() {
  kernel.return
}
"""


def test_profile_for_pinned_and_unpinned_roots() -> None:
    module = parse_text(PINNED, "p.loom")
    pinned, free = module.symbols()["pinned"], module.symbols()["free"]
    # A pinned root uses its record, with or without a matching --target.
    for cli in (None, parse_target("amdgpu:gfx1100")):
        p = profile_for(module, pinned, cli)
        assert p is not None and (p.chip, p.subgroup_size, p.record) == ("gfx1100", 64, "rdna3")
    # Unpinned roots use --target (none without one).
    assert profile_for(module, free, None) is None
    assert profile_for(module, free, parse_target("vulkan1.2")) == parse_target("vulkan1.2")
    # --target must name the record's chip, even a generic one covering it (17.30).
    for other in ("amdgpu:gfx942", "amdgpu:gfx11-generic", "spirv:vulkan1.3"):
        with pytest.raises(CompileError) as info:
            profile_for(module, pinned, parse_target(other))
        (d,) = info.value.diagnostics
        assert d.code == "TARGET/001" and (d.line, d.column) == (3, 19) and other in d.message
    assert check_kernel(module, pinned, parse_target("gfx942"))[0].code == "TARGET/001"


def test_pinned_record_overrides_reach_the_contract() -> None:
    from loomcli.emit.launch_config import build_launch_config
    from loomcli.launch import evaluate

    module = parse_text(PINNED, "p.loom")
    data = build_launch_config(module, parse_target("gfx1100"))
    assert evaluate(data, "pinned", []).subgroup_size == 64
    assert evaluate(data, "free", []).subgroup_size == 32


@pytest.mark.parametrize("generic", sorted(GENERIC_COVERS))
def test_generic_chips_cover_their_family(generic: str) -> None:
    for chip in AMDGPU_CHIPS:
        profile = parse_target(f"amdgpu:{chip}")
        assert profile.matches_record(generic) == (chip == generic or chip in GENERIC_COVERS[generic])
    assert parse_target(f"amdgpu:{generic}").code_object_version == 6


def test_gfx9_generic_and_gfx90a_cover_only_themselves() -> None:
    for chip in ("gfx9-generic", "gfx90a"):
        assert [c for c in AMDGPU_CHIPS if parse_target(c).matches_record(chip)] == [chip]
    assert parse_target("spirv:vulkan1.3").matches_record("vulkan1_3")
    assert not parse_target("spirv:vulkan1.3").matches_record("vulkan1_2")


# ---------------------------------------------------------------- loom targets


def _loom(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], capture_output=True, env=env, text=True)


def test_loom_targets_lists_every_profile() -> None:
    r = _loom("targets")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines] == all_targets()
    gfx1100 = next(line for line in lines if line.startswith("amdgpu:gfx1100 "))
    for part in ("triple=amdgcn-amd-amdhsa", "subgroup_size=32", "max_workgroup_size=1024x1024x1024",
                 "max_workgroup_storage_bytes=65536", "code_object_version=5"):
        assert part in gfx1100.split()
    vk = next(line for line in lines if line.startswith("spirv:vulkan1.3 "))
    assert "subgroup_size=none" in vk.split() and "max_push_constant_bytes=128" in vk.split()


def test_loom_targets_json() -> None:
    r = _loom("targets", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert listed == [p.to_json() for p in all_profiles()]
    by_name = {p["target"]: p for p in listed}
    for name, native in (("spirv:vulkan1.3", []), ("nvptx:sm_90", ["exp2.f32"]),
                         ("amdgpu:gfx1100", ["exp.f16", "exp.f32", "exp2.f16", "exp2.f32", "log.f16", "log.f32",
                                             "log2.f16", "log2.f32"])):
        assert by_name[name]["legalize"] == ["expand-collectives", "expand-math", "widen-bf16"]
        assert by_name[name]["native_math"] == native


def test_check_module_reports_records_and_kernels() -> None:
    from loomcli.targets.checks import check_module

    module = parse_text(
        "amdgpu.target<gfx1100> @unused {wave = 64}\n\n"
        "kernel.def export(\"k\") @k() {\n"
        "  %one = index.constant 1 : index\n"
        "  %big = index.constant 4096 : index\n"
        "  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %big, %one) : index\n"
        "} launch() {\n"
        "  kernel.return\n"
        "}\n", "m.loom")
    diags = check_module(module, parse_target("gfx1100"))
    assert [d.render() for d in diags] == [
        "m.loom:1:1: error [TARGET/001]: unknown or mismatched target, key or fact `wave`",
        "m.loom:6:68: error [TARGET/003]: workgroup size 1x4096x1 exceeds amdgpu:gfx1100: "
        "at most 1024x1024x1024 per axis",
    ]
    assert check_module(module, None)[1:] == []  # no target: only the records are checked
