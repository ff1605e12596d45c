"""NVPTX code generation: profiles and records, PTX for every sample and
execution test assembled by ptxas, the manifest against the PTX `.param`
layout and the cubin, the atomics selector, the missing-ptxas error, and the
math NVPTX selects run on the host CPU.

There is no NVIDIA GPU here: PTX is checked by NVIDIA's own assembler (the
`nvidia-cuda-nvcc` wheel of the test extra), and the shared lowering's
semantics on the host (tests/test_amdgpu.py, and below for NVPTX's math).
"""

from __future__ import annotations

import glob
import json
import math
import random
import re
import struct
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from loomcli.emit import Artifact
from loomcli.emit.artifacts import emit
from loomcli.emit.nvptx import ptxas
from loomcli.errors import LoomError
from loomcli.frontend import load_module
from loomcli.service.front import CompileOptions, compile_module
from loomcli.targets.profiles import NVPTX_CHIPS, parse_target

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(glob.glob(str(ROOT / "samples" / "*.loom")))
EXEC = sorted(glob.glob(str(ROOT / "tests" / "exec" / "*.loom")))
AMDGPU_INPUTS = sorted(p for p in glob.glob(str(ROOT / "tests" / "amdgpu" / "*.loom"))
                       if not p.endswith("wave64_record.loom"))  # pinned to gfx1100
ATOMICS = str(ROOT / "tests" / "nvptx" / "atomics.loom")
# f32/f16/bf16 tanh among other math, all from the shared expand-math.
SCALARS = str(ROOT / "tests" / "amdgpu" / "scalars.loom")
INPUTS = SAMPLES + EXEC + AMDGPU_INPUTS + [ATOMICS]
CONFIG = ["run.trace=true"]  # samples/frontier_config.loom
PTXAS = ptxas.find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not installed (pip install 'loom-compiler[cuda]')")


def launched_kernels(path: str) -> list[str]:
    """The kernels an execution test's check cases launch (what `loom test` compiles)."""
    module = load_module(path)
    return sorted({"@" + op.attr("callee") for case in module.ops if case.name == "check.case"
                   for op in case.regions[0].walk_ops() if op.name == "kernel.launch"})


@cache
def compiled(path: str, chip: str = "sm_90") -> Any:
    roots = launched_kernels(path) if "/tests/exec/" in path else []
    return compile_module(CompileOptions(input=path, profile=parse_target(f"nvptx:{chip}"), config=CONFIG,
                                         roots=roots)).module


@cache
def artifact(path: str, fmt: str = "nvptx-ptx", chip: str = "sm_90") -> Artifact:
    return emit(compiled(path, chip), parse_target(f"nvptx:{chip}"), fmt)


def entry_params(ptx: str, name: str) -> list[str]:
    """The `.param` types of `.entry name(...)`, in order."""
    m = re.search(rf"\.entry {re.escape(name)}\((.*?)\)", ptx, re.DOTALL)
    assert m is not None, name
    return re.findall(r"\.param \.(\w+)", m.group(1))


PARAM_BYTES = {"u64": 8, "s64": 8, "b64": 8, "f64": 8, "u32": 4, "s32": 4, "b32": 4, "f32": 4}


def param_layout(types: list[str]) -> list[tuple[int, int]]:
    """(offset, size) of each parameter in PTX's parameter space: each aligned to its size."""
    out, offset = [], 0
    for t in types:
        size = PARAM_BYTES[t]
        offset = -(-offset // size) * size
        out.append((offset, size))
        offset += size
    return out


# ---------------------------------------------------------------- profiles and records


@pytest.mark.parametrize(("chip", "optin"), [("sm_80", 166912), ("sm_89", 101376), ("sm_90", 232448),
                                             ("sm_100", 232448)])
def test_profiles(chip: str, optin: int) -> None:
    p = parse_target(f"nvptx:{chip}")
    assert parse_target(chip) == p
    assert (p.triple, p.subgroup_size, p.index_bitwidth, p.offset_bitwidth) == ("nvptx64-nvidia-cuda", 32, 32, 64)
    assert (p.max_flat_workgroup_size, p.max_workgroup_size) == (1024, (1024, 1024, 64))
    assert (p.max_workgroup_storage_bytes, p.max_workgroup_storage_optin_bytes) == (49152, optin)
    assert p.max_push_constant_bytes is None
    assert {"f16", "bf16", "f64", "i64", "atomic_add_f32", "atomic_add_f64"} <= p.features
    assert p.to_json()["max_workgroup_storage_optin_bytes"] == optin


def test_loom_targets_lists_nvptx() -> None:
    run = subprocess.run([sys.executable, "-m", "loomcli", "targets", "--json"], capture_output=True, text=True,
                         check=True)
    names = [p["target"] for p in json.loads(run.stdout)]
    assert [n for n in names if n.startswith("nvptx:")] == [f"nvptx:{c}" for c in NVPTX_CHIPS]


@pytest.mark.parametrize(("keys", "bad"), [("{subgroup_size = 64}", "subgroup_size = 64"),
                                           ("{max_push_constant_bytes = 128}", "max_push_constant_bytes on nvptx"),
                                           ("{subgroup_size = 32, max_flat_workgroup_size = 256}", None)])
def test_nvptx_records(keys: str, bad: str | None) -> None:
    from loomcli.frontend import parse_text
    from loomcli.targets.records import record_profile

    record = parse_text(f"nvptx.target<sm_90> @r {keys}\n").ops[0]
    profile, diags = record_profile(record)
    assert profile.family == "nvptx"
    if bad is None:
        assert diags == [] and profile.max_flat_workgroup_size == 256
    else:
        assert [d.code for d in diags] == ["TARGET/001"] and bad in diags[0].message


def test_kernel_pinned_to_an_nvptx_record(tmp_path: Path) -> None:
    src = tmp_path / "pinned.loom"
    src.write_text('nvptx.target<sm_90> @hopper {max_flat_workgroup_size = 256}\n\n'
                   'kernel.def target(@hopper) export("k") @k() {\n  %one = index.constant 1 : index\n'
                   '  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index\n'
                   '} launch(%out: buffer) {\n  kernel.return\n}\n')
    ok = subprocess.run([sys.executable, "-m", "loomcli", "compile", str(src), "--target", "nvptx:sm_90",
                         "-o", str(tmp_path / "k.ptx")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    wrong = subprocess.run([sys.executable, "-m", "loomcli", "compile", str(src), "--target", "nvptx:sm_80",
                            "-o", str(tmp_path / "k80.ptx")], capture_output=True, text=True)
    assert wrong.returncode == 1 and "TARGET/001" in wrong.stderr


# ---------------------------------------------------------------- PTX and cubins


def has_kernels(path: str) -> bool:
    return "kernel.def" in Path(path).read_text()


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: Path(p).stem)
def test_every_input_gives_ptx_with_its_kernels(path: str) -> None:
    a = artifact(path)
    text = a.data.decode()
    assert text.startswith("//\n// Generated by LLVM NVPTX Back-End") and ".target sm_90" in text
    assert bool(a.kernels) == has_kernels(path), path
    for k in a.kernels:
        assert f".visible .entry {k['export']}(" in text


@needs_ptxas
@pytest.mark.parametrize("path", INPUTS, ids=lambda p: Path(p).stem)
def test_ptxas_assembles_every_input(path: str) -> None:
    a = artifact(path, "nvptx-cubin")
    assert a.data[:4] == b"\x7fELF"
    for k in a.kernels:
        r = k["resources"]
        assert 0 < r["registers"] <= 255 and r["spill_store_bytes"] == 0, (k["export"], r)


@needs_ptxas
@pytest.mark.parametrize("chip", NVPTX_CHIPS)
def test_every_chip_assembles_samples_and_collectives(chip: str) -> None:
    for path in SAMPLES + [str(ROOT / "tests" / "amdgpu" / "collectives.loom"), ATOMICS]:
        a = artifact(path, "nvptx-cubin", chip)
        assert a.target["selector"] == chip and bool(a.kernels) == has_kernels(path)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: Path(p).stem)
def test_manifest_offsets_equal_the_ptx_param_layout(path: str) -> None:
    a = artifact(path)
    text = a.data.decode()
    for k in a.kernels:
        types = entry_params(text, k["export"])
        layout = param_layout(types)
        assert [(p["byte_offset"], p["byte_length"]) for p in k["parameters"]] == layout
        assert k["param_space_size"] == (layout[-1][0] + layout[-1][1] if layout else 0)
        for p, t in zip(k["parameters"], types):
            assert (p["kind"] == "buffer") <= (t == "u64")


@needs_ptxas
def test_resources_from_ptxas_agree_with_the_cubin() -> None:
    from loomcli.emit.nvptx.cubin import kernel_attributes

    for path in INPUTS:
        a = artifact(path, "nvptx-cubin")
        attributes = kernel_attributes(a.data)
        for k in a.kernels:
            r = k["resources"]
            assert attributes[k["export"]] == {"registers": r["registers"],
                                               "stack_frame_bytes": r["stack_frame_bytes"]}, (path, k["export"])
    reduction = artifact(str(ROOT / "samples" / "reduction.loom"), "nvptx-cubin")
    shared = {k["export"]: k["resources"]["workgroup_storage_bytes"] for k in reduction.kernels}
    planned = {k["export"]: k["resources"]["workgroup_storage_bytes"]
               for k in artifact(str(ROOT / "samples" / "reduction.loom")).kernels}
    assert shared == planned and any(shared.values())


def test_parse_ptxas_info() -> None:
    log = ("ptxas info    : 0 bytes gmem\n"
           "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
           "ptxas info    : Function properties for k\n"
           "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 368 bytes cmem[0]\n"
           "ptxas info    : Function properties for helper\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    info = ptxas.parse_info(log)
    assert list(info) == ["k"]
    assert info["k"] == ptxas.KernelInfo(40, 1024, 1, 8, 4, 12)


def test_saxpy_ptx_uses_special_registers_and_reqntid() -> None:
    text = artifact(str(ROOT / "samples" / "saxpy.loom")).data.decode()
    assert "%ctaid.x" in text and "%tid.x" in text and ".reqntid 128, 1, 1" in text and ".maxntid" not in text
    assert "fma.rn.f32" in text


def test_dynamic_workgroup_size_reads_ntid_and_caps_maxntid() -> None:
    text = artifact(str(ROOT / "tests" / "amdgpu" / "collectives.loom")).data.decode()
    dynamic = text[text.index(".entry reduce_dynamic("):]
    assert "%ntid.x" in dynamic and ".maxntid 1024" in dynamic.split("{")[0]


def test_reductions_use_shfl_sync_and_bar_sync() -> None:
    text = artifact(str(ROOT / "tests" / "amdgpu" / "collectives.loom")).data.decode()
    assert "shfl.sync.idx.b32" in text and "activemask.b32" in text and "bar.sync" in text
    # 32-bit integer kinds are one redux.sync (sm_80+); f32, i64, f16... take the shuffles.
    assert "redux.sync.max.s32" in text and "redux.sync.min.s32" in text and "redux.sync.add.s32" in text


def test_barriers_at_their_own_scope_need_no_fences() -> None:
    """bar.sync orders the CTA's memory like __syncthreads; AMDGPU keeps its fences."""
    text = artifact(str(ROOT / "samples" / "reduction.loom")).data.decode()
    assert text.count("bar.sync") == 9 and "fence" not in text


def test_math_comes_from_the_shared_expansion() -> None:
    """No libdevice: every transcendental function but f32 exp2 (ex2.approx)
    is a call of an expand-math function, tanh in f32 included."""
    ir = artifact(SCALARS, "llvmir-text").data.decode()
    assert "call float @\"loom.math.tanh.f32\"" in ir
    assert not re.search(r"@llvm\.(exp|log|log2|sin|cos|tanh|pow)\.", ir)


NARROW_MATH = """kernel.def export("k") @k() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%in: buffer, %out: buffer) {
  %o = index.constant 0 : offset
  %i = index.constant 0 : index
  %v = buffer.view %in[%o] : buffer -> view<4xbf16>
  %w = buffer.view %out[%o] : buffer -> view<4xbf16>
  %h = buffer.view %in[%o] : buffer -> view<4xf16>
  %x = view.load %v[%i] : view<4xbf16> -> bf16
  %t = scalar.tanhf %x : bf16
  %e = scalar.exp2f %t : bf16
  view.store %e, %w[%i] : bf16, view<4xbf16>
  %y = view.load %h[%i] : view<4xf16> -> f16
  %z = scalar.tanhf %y : f16
  view.store %z, %h[%i] : f16, view<4xf16>
  kernel.return
}
"""


@needs_ptxas
def test_bf16_and_f16_tanh_and_exp2_assemble(tmp_path: Path) -> None:
    """bf16/f16 tanh through the f32 expansion; bf16 exp2 through ex2.approx.f32 (subnormals kept: no .ftz)."""
    src = tmp_path / "narrow.loom"
    src.write_text(NARROW_MATH)
    p = parse_target("nvptx:sm_90")
    module = compile_module(CompileOptions(input=str(src), profile=p)).module
    assert "call float @\"loom.math.tanh.f32\"" in emit(module, p, "llvmir-text").data.decode()
    text = emit(module, p, "nvptx-ptx").data.decode()
    assert "ex2.approx.f32 " in text and "ex2.approx.ftz" not in text
    assert emit(module, p, "nvptx-cubin").data[:4] == b"\x7fELF"


# Row k of tests/nvptx/atomics.loom and the PTX the selector must spell for it.
ATOMIC_ROWS = [
    "atom.relaxed.gpu.global.add.u32", "atom.release.cta.global.add.u32", "atom.acquire.sys.global.and.b64",
    "atom.acq_rel.cta.global.or.b32", "fence.sc.gpu; atom.acquire.gpu.global.xor.b64",
    "atom.relaxed.sys.global.min.s32", "atom.acq_rel.gpu.global.max.u64",
    "fence.sc.cta; atom.acquire.cta.shared.exch.b32", "atom.relaxed.gpu.global.exch.b32",
    "atom.acq_rel.sys.global.add.f64", "atom.relaxed.cta.shared.add.f32", "atom.acquire.cta.shared.max.s32",
    "atom.relaxed.gpu.global.cas.b32", "atom.release.cta.global.cas.b64", "atom.relaxed.gpu.shared.add.u64",
]


def test_atomics_get_the_languages_orderings_and_scopes() -> None:
    text = artifact(ATOMICS).data.decode()
    for spelled in ATOMIC_ROWS:
        assert spelled in text, spelled
    # LLVM 22's own atomicrmw lowering (atom without .sem/.scope) must not appear.
    assert not re.search(r"\batom\.global\.", text)
    ir = artifact(ATOMICS, "llvmir-text").data.decode()
    assert "sub i32 0, 3" in ir or "sub i64 0, 5" in ir  # subi adds the negated value


# ---------------------------------------------------------------- the command line and errors


def test_cli_writes_ptx_cubin_ll_and_s_with_manifests(tmp_path: Path) -> None:
    saxpy = str(ROOT / "samples" / "saxpy.loom")
    suffixes = [".ptx", ".ll", ".s"] + ([".cubin"] if PTXAS else [])
    for suffix in suffixes:
        out, man = tmp_path / f"s{suffix}", tmp_path / f"s{suffix}.json"
        run = subprocess.run([sys.executable, "-m", "loomcli", "compile", saxpy, "--target", "nvptx:sm_90",
                              "-o", str(out), "--manifest", str(man), "--emit-launch-config",
                              str(tmp_path / "s.launch.loombc")], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        doc = json.loads(man.read_text())
        assert doc["target"]["family"] == "nvptx" and doc["kernels"][0]["export"] == "saxpy"
    assert (tmp_path / "s.ptx").read_bytes() == (tmp_path / "s.s").read_bytes()
    assert "ptx_kernel" in (tmp_path / "s.ll").read_text()
    launch = subprocess.run([sys.executable, "-m", "loomcli", "launch-eval", str(tmp_path / "s.launch.loombc"),
                             "@saxpy", "1000"], capture_output=True, text=True)
    assert launch.returncode == 0 and "8" in launch.stdout, launch.stdout + launch.stderr


def test_out_dir_writes_ptx_for_nvptx_targets(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "loomcli", "compile", str(ROOT / "samples" / "saxpy.loom"),
                          "--out-dir", str(tmp_path), "--target", "nvptx:sm_90", "--target", "nvptx:sm_80"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saxpy.nvptx-sm_80.ptx", "saxpy.nvptx-sm_90.ptx"]
    assert ".target sm_80" in (tmp_path / "saxpy.nvptx-sm_80.ptx").read_text()


def test_loom_build_writes_ptx_for_an_nvptx_target(tmp_path: Path) -> None:
    import os
    import shutil
    import tarfile

    project = tmp_path / "project"
    shutil.copytree(ROOT / "samples" / "project", project)
    toml = project / "loom.toml"
    toml.write_text(toml.read_text().replace('targets = ["amdgpu:gfx1100", "spirv:vulkan1.3"]',
                                             'targets = ["nvptx:sm_90"]'))
    run = subprocess.run([sys.executable, "-m", "loomcli", "build", str(project), "--package", "-j1"],
                         capture_output=True, text=True, env=dict(os.environ, LOOM_CACHE="0"))
    assert run.returncode == 0, run.stderr
    built = project / "build" / "loom" / "nvptx-sm_90"
    assert sorted(p.name for p in built.glob("*.ptx")) == ["blas.ptx", "elementwise.ptx"]
    [package] = (project / "dist").glob("*.loompkg.tar.gz")
    with tarfile.open(package) as tar:
        names = tar.getnames()
    assert any(n.endswith("nvptx-sm_90/blas.ptx") for n in names), names


def test_missing_ptxas_is_a_clear_exit_3(tmp_path: Path) -> None:
    import os

    out = tmp_path / "s.cubin"
    run = subprocess.run([sys.executable, "-m", "loomcli", "compile", str(ROOT / "samples" / "saxpy.loom"),
                          "--target", "nvptx:sm_90", "-o", str(out), "--no-cache"], capture_output=True, text=True,
                         env=dict(os.environ, PTXAS=str(tmp_path / "no" / "ptxas")))
    assert run.returncode == 3, run.stderr
    assert run.stderr.startswith("loom: error: PTXAS=") and "pip install 'loom-compiler[cuda]'" in run.stderr
    assert "Traceback" not in run.stderr and not out.exists() and list(tmp_path.iterdir()) == []


def test_no_ptxas_anywhere_says_how_to_get_it(monkeypatch: Any) -> None:
    monkeypatch.delenv("PTXAS", raising=False)
    monkeypatch.setattr(ptxas, "_package_ptxas", lambda: None)
    monkeypatch.setattr(ptxas.shutil, "which", lambda name: None)
    assert ptxas.find_ptxas() is None
    with pytest.raises(LoomError) as e:
        ptxas.require_ptxas()
    assert e.value.exit_code == 3
    assert str(e.value).startswith("building a cubin needs ptxas, which was not found; install NVIDIA's PTX "
                                   "assembler: pip install 'loom-compiler[cuda]'")


def test_ptxas_rejecting_ptx_is_an_internal_error() -> None:
    if PTXAS is None:
        pytest.skip("ptxas not installed")
    with pytest.raises(LoomError, match="internal: ptxas rejected the PTX generated for nvptx:sm_90") as e:
        ptxas.assemble(b".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus; }\n", "sm_90")
    assert e.value.exit_code == 3


def test_format_of_another_family_is_a_usage_error() -> None:
    from loomcli.errors import UsageError

    with pytest.raises(UsageError, match="nvptx-cubin is for nvptx targets, not amdgpu:gfx1100"):
        emit(compiled(str(ROOT / "samples" / "saxpy.loom")), parse_target("amdgpu:gfx1100"), "nvptx-cubin")


def test_emission_is_deterministic() -> None:
    path = str(ROOT / "samples" / "reduction.loom")
    first = emit(compiled(path), parse_target("nvptx:sm_90"), "nvptx-ptx").data
    again = emit(compile_module(CompileOptions(input=path, profile=parse_target("nvptx:sm_90"))).module,
                 parse_target("nvptx:sm_90"), "nvptx-ptx").data
    assert first == again


# ---------------------------------------------------------------- NVPTX's math selection on the host


def test_nvptx_lowers_natively_only_f32_exp2() -> None:
    assert parse_target("nvptx:sm_90").native_math == frozenset({("exp2", "f32")})


# f32 math as NVPTX gets it from expand-math (only exp2 is native there).
F32_MATH = [("expf", math.exp, lambda r: r.uniform(-87, 88)),
            ("logf", math.log, lambda r: math.exp(r.uniform(-87, 88))),
            ("log2f", math.log2, lambda r: 2 ** r.uniform(-126, 127)),
            ("sinf", math.sin, lambda r: r.uniform(-1e4, 1e4)),
            ("cosf", math.cos, lambda r: r.uniform(-1e4, 1e4))]


@pytest.mark.parametrize(("op", "ref", "gen"), F32_MATH, ids=[m[0] for m in F32_MATH])
def test_f32_math_as_nvptx_selects_it_is_within_two_ulp(op: str, ref: Any, gen: Any) -> None:
    import test_amdgpu as amd

    fn = amd.jit_function(f"func.def device @f(%x: f32) -> (f32) {{\n  %r = scalar.{op} %x : f32\n"
                          f"  func.return %r : f32\n}}\n", native_math=parse_target("nvptx:sm_90").native_math)
    rng = random.Random(11)

    def as_f32(x: float) -> float:
        return struct.unpack("<f", struct.pack("<f", x))[0]

    worst = 0
    for _ in range(2000):
        x = as_f32(gen(rng))
        got = struct.unpack("<f", struct.pack("<I", fn(struct.unpack("<I", struct.pack("<f", x))[0])))[0]
        want = as_f32(ref(x))
        ia, ib = (struct.unpack("<i", struct.pack("<f", v))[0] for v in (got, want))
        worst = max(worst, abs(ia - ib))
    assert worst <= 2, (op, worst)
