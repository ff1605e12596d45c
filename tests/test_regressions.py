"""Regression tests for the correctness fixes of issue 12, each named for
what it pins down. Kernel files live in tests/regressions/; the runnable ones
pass on the reference interpreter, the cpu device and, where one is usable,
on Vulkan."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.check.vulkan import unavailable_reason

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "regressions"
VULKAN = unavailable_reason()
DEVICES = ["interpreter", "cpu", pytest.param("vulkan", marks=pytest.mark.skipif(
    VULKAN is not None, reason=f"no Vulkan device: {VULKAN}"))]

# Files whose every case must pass on every device.
RUNNABLE = ["config_in_predicate.loom", "minnum_signaling_nan.loom", "nan_bitcasts.loom", "pow_overflow_sign.loom",
            "reduce_negative_zero.loom", "shared_lane_index.loom", "sign_ops_nan_payload.loom"]


def loom(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", RUNNABLE)
def test_runnable_files_pass(name: str, device: str) -> None:
    r = loom("test", "--device", device, str(DATA / name))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout and "internal" not in r.stderr


@pytest.mark.parametrize("target,suffix", [("amdgpu:gfx1100", "hsaco"), ("nvptx:sm_90", "ptx")])
def test_shared_dynamic_lane_compiles_for_the_gpu_llvm_targets(target: str, suffix: str, tmp_path: Path) -> None:
    """LLVM aborted in VectorCombine on this kernel for every LLVM target
    (the cpu device runs it in test_runnable_files_pass)."""
    out = tmp_path / f"k.{suffix}"
    r = loom("compile", str(DATA / "shared_lane_index.loom"), "--target", target, "-o", str(out))
    assert r.returncode == 0 and "internal" not in r.stderr, r.stderr
    assert out.stat().st_size > 0


UNBOUND = str(DATA / "unbound_config_selects.loom")


@pytest.mark.parametrize("args", [
    ["test", "--device", "interpreter", UNBOUND],
    ["compile", UNBOUND, "--target", "spirv:vulkan1.2", "-o", "{tmp}/k.spv"],
    ["compile", UNBOUND, "--target", "amdgpu:gfx1100", "-o", "{tmp}/k.hsaco"],
    ["compile", UNBOUND, "--target", "amdgpu:gfx1100", "-o", "{tmp}/k.loombc", "--emit-launch-config",
     "{tmp}/k.launch.loombc"],
    ["launch-eval", UNBOUND, "@k", "4", "--target", "spirv:vulkan1.2"],
], ids=["test", "spv", "hsaco", "launch-config", "launch-eval"])
def test_unbound_config_deciding_selection_is_config_003(args: list[str], tmp_path: Path) -> None:
    r = loom(*[a.format(tmp=tmp_path) for a in args])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "unbound_config_selects.loom:24:11: error [CONFIG/003]: `@exec.mode` unresolved" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_bound_config_selects_the_bound_provider(tmp_path: Path) -> None:
    r = loom("compile", UNBOUND, "--target", "spirv:vulkan1.2", "-o", str(tmp_path / "k.spv"),
             "--config", "exec.mode=2", "--print-selections")
    assert r.returncode == 0, r.stderr
    assert "-> @triple" in r.stdout


def test_compiled_module_keeps_unbound_config(tmp_path: Path) -> None:
    r = loom("compile", UNBOUND, "-o", str(tmp_path / "k.loombc"))
    assert r.returncode == 0, r.stderr


def test_bitcast_of_a_nan_folds_only_to_a_plain_nan() -> None:
    """The folder carries NaN payloads exactly; the canonicalizer keeps a
    bitcast computed unless its NaN is the one `nan` spells."""
    from loomcli.frontend import parse_text
    from loomcli.passes.pipeline import parse_pipeline, run_passes
    from loomcli.text.printer import print_module

    text = """\
func.def public @f() -> (f32, f32, i32) {
  %a = scalar.constant 2143289345 : i32
  %x = scalar.bitcast %a : i32 to f32
  %b = scalar.constant 2143289344 : i32
  %y = scalar.bitcast %b : i32 to f32
  %n = scalar.constant nan : f32
  %z = scalar.bitcast %n : f32 to i32
  func.return %x, %y, %z : f32, f32, i32
}
"""
    module = parse_text(text, "t.loom")
    run_passes(module, parse_pipeline("canonicalize"))
    out = print_module(module)
    assert "%x = scalar.bitcast %a : i32 to f32" in out
    assert "%y = scalar.constant nan : f32" in out
    assert "scalar.constant 2143289344 : i32" in out


def test_library_diagnostics_name_the_library(tmp_path: Path) -> None:
    """A diagnostic raised after linking, about an op that came from a
    --library file, names that file with its own line and column."""
    lib = DATA / "library"
    r = loom("compile", str(lib / "uses_helper.loom"), "--library", str(lib / "helper.loom"),
             "--target", "spirv:vulkan1.2", "-o", str(tmp_path / "k.spv"))
    assert r.returncode == 1
    assert "tests/regressions/library/helper.loom:6:8: error [CONFIG/003]: `@scale` unresolved\n" \
           "  %s = config.get @scale : f32\n       ^" in r.stderr


def test_identical_declarations_merge(tmp_path: Path) -> None:
    """Both inputs declare @common.blend: the linked module holds it once,
    verifies, and links on against the definition (issue 12, bug 6)."""
    merge = DATA / "merge"
    out = tmp_path / "merged.loombc"
    r = loom("link", str(merge / "a.loom"), str(merge / "b.loom"), "--allow-unresolved", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = loom("fmt", str(out), "--to", "text", "-o", "-").stdout
    assert text.count("func.decl public device @common.blend(%x: f32) -> (f32)") == 1
    r = loom("link", str(out), str(merge / "blend.loom"), "-o", str(tmp_path / "final.loom"))
    assert r.returncode == 0, r.stderr
    assert "func.decl" not in (tmp_path / "final.loom").read_text()


def test_disagreeing_declarations_are_link_002_and_write_nothing(tmp_path: Path) -> None:
    merge = DATA / "merge"
    r = loom("link", str(merge / "a.loom"), str(merge / "b_disagrees.loom"), "--allow-unresolved",
             "-o", str(tmp_path / "merged.loombc"))
    assert r.returncode == 1
    assert "b_disagrees.loom:1:1: error [LINK/002]: `@common.blend` declarations disagree: " \
           "argument types (f32, i32) vs (f32)" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("env, widths", [("vulkan1.1", []), ("vulkan1.2", [32]), ("vulkan1.3", [32])])
def test_spirv_requests_ieee_float_controls(env: str, widths: list[int]) -> None:
    """Vulkan 1.2+ entry points ask for SignedZeroInfNanPreserve per float
    width used (issue 12, bug 7); the profile records it and what stays
    driver-dependent."""
    from loomcli.emit.spirv.disasm import disassemble
    from loomcli.service.front import CompileOptions, compile_module
    from loomcli.targets.profiles import parse_target

    profile = parse_target(f"spirv:{env}")
    from loomcli.emit.artifacts import emit

    compiled = compile_module(CompileOptions(input=str(ROOT / "samples" / "saxpy.loom"), profile=profile))
    text = disassemble(emit(compiled.module, profile, "spirv-binary").data)
    modes = [line for line in text.splitlines() if "SignedZeroInfNanPreserve" in line and "ExecutionMode" in line]
    assert [int(line.split()[-1]) for line in modes] == widths
    assert ("Capability SignedZeroInfNanPreserve" in text) == bool(widths)
    data = profile.to_json()
    assert data["signed_zero_inf_nan_preserve"] == ([] if env == "vulkan1.1" else [16, 32, 64])
    assert any("Fma" in note for note in data["driver_dependent"])


WHILE_NO_CARRIED = """\
kernel.def @k() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch() {
  scf.while {
    %go = scalar.constant false : i1
    scf.condition %go : i1
  } do {
  }
  kernel.return
}
"""

HEADER = """\
// Copyright 2026 the Loom authors.
// SPDX-License-Identifier: Apache-2.0

// Attached to @f.
func.def @f() {
  func.return
}
"""


@pytest.mark.parametrize("written, canonical", [
    (WHILE_NO_CARRIED, WHILE_NO_CARRIED),                                      # 17.33
    (WHILE_NO_CARRIED.replace("scf.while {", "scf.while() {"), WHILE_NO_CARRIED),
    (HEADER, HEADER),                                                          # 17.34
    (HEADER.replace("Apache-2.0\n\n", "Apache-2.0\n\n\n\n"), HEADER),
    (HEADER.replace("Apache-2.0\n\n", "Apache-2.0\n"), HEADER.replace("Apache-2.0\n\n", "Apache-2.0\n")),
    ("// one\n\n// two\n\nfunc.def @f() {\n  func.return\n}\n",) * 2,
], ids=["while-bare", "while-parens", "header", "header-many-blanks", "attached", "two-blocks"])
def test_settled_spellings_round_trip(written: str, canonical: str) -> None:
    """LANGUAGE.md 17.33 and 17.34 (issue 12, bug 8): text and bytecode
    round trips print the settled spelling."""
    from loomcli.bytecode import read_module, write_module
    from loomcli.frontend import parse_text
    from loomcli.text.printer import print_module

    module = parse_text(written, "t.loom")
    assert print_module(module) == canonical
    assert print_module(read_module(write_module(module), "t.loombc")) == canonical
