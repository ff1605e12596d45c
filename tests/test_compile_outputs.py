"""loom compile with targets: outputs, several targets from one front end, and nothing left behind on failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loomcli.cli import main
from loomcli.link.index import LinkIndex

ROOT = Path(__file__).resolve().parent.parent
MATMUL = str(ROOT / "samples" / "matmul.loom")

DYNAMIC_SIZE = """\
kernel.def export("k") @k(%n: index) {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%n, %one, %one) : index
} launch() {
  kernel.return
}
"""


def run(*argv: str) -> int:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    return e.value.code or 0


def test_several_targets_share_one_front_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    build = LinkIndex.build.__func__

    def counting(cls, *args, **kwargs):
        calls.append(args)
        return build(cls, *args, **kwargs)

    monkeypatch.setattr(LinkIndex, "build", classmethod(counting))
    out = tmp_path / "out"
    assert run("compile", MATMUL, "--out-dir", str(out), "--target", "amdgpu:gfx1100", "--target", "gfx942",
               "--target", "spirv:vulkan1.3", "--manifest", str(tmp_path / "m"),
               "--emit-launch-config", str(tmp_path / "l")) == 0
    assert len(calls) == 1
    assert sorted(p.name for p in out.iterdir()) == [
        "matmul.amdgpu-gfx1100.hsaco", "matmul.amdgpu-gfx942.hsaco", "matmul.spirv-vulkan1.3.spv"]
    manifest = json.loads((tmp_path / "m" / "matmul.amdgpu-gfx942.manifest.json").read_text())
    assert manifest["target"]["subgroup_size"] == 64
    assert manifest["kernels"][0]["launch_config"] == "matmul.amdgpu-gfx942.launch.loombc"
    assert manifest["kernels"][0]["resources"]["workgroup_storage_bytes"] == 2048
    assert (tmp_path / "l" / "matmul.amdgpu-gfx942.launch.loombc").read_bytes().startswith(b"LOOMBC")


def test_a_failing_target_leaves_nothing_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "k.loom"
    src.write_text(DYNAMIC_SIZE)
    out = tmp_path / "out"
    out.mkdir()
    # amdgpu accepts a dynamic workgroup size; spirv cannot (TARGET/002): no file of either may appear.
    assert run("compile", str(src), "--out-dir", str(out), "--target", "amdgpu:gfx1100",
               "--target", "spirv:vulkan1.3") == 1
    assert "TARGET/002" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_emit_checks_the_recorded_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compiled = tmp_path / "m.loombc"
    assert run("compile", MATMUL, "--target", "amdgpu:gfx1100", "-o", str(compiled)) == 0
    assert run("emit", str(compiled), "--target", "amdgpu:gfx942", "-o", str(tmp_path / "x.hsaco")) == 2
    assert "compiled for amdgpu:gfx1100, not amdgpu:gfx942" in capsys.readouterr().err
    assert run("emit", str(compiled), "-o", str(tmp_path / "x.hsaco")) == 0
    assert (tmp_path / "x.hsaco").read_bytes()[:4] == b"\x7fELF"


def test_target_independent_module_needs_a_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compiled = tmp_path / "m.loombc"
    assert run("compile", MATMUL, "-o", str(compiled)) == 0
    assert run("emit", str(compiled), "-o", str(tmp_path / "x.spv")) == 2
    assert "target-independent" in capsys.readouterr().err
    assert run("emit", str(compiled), "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "x.spv")) == 0


@pytest.mark.parametrize("argv,message", [
    (["-o", "x.spv"], "emitting spirv-binary needs --target"),
    (["-o", "x.hsaco", "--out-dir", "d", "--target", "gfx1100"], "-o and --out-dir exclude each other"),
    (["-o", "x.hsaco", "--target", "gfx1100", "--target", "gfx942"], "several --target values need --out-dir"),
])
def test_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                      argv: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("compile", MATMUL, *argv) == 2
    assert message in capsys.readouterr().err


# `loom compile`'s outputs against the API's (docs/api.md "How the command line maps onto it"): one entry
# point, so the same bytes. (-o and option arguments, outputs=..., the files written, by output name.)
SAXPY = str(ROOT / "samples" / "saxpy.loom")
COMBINATIONS = [
    ("spirv:vulkan1.3", ["-o", "k.spv", "-o", "k.launch.loombc", "--manifest"],
     ("spirv-binary", "launch-config", "manifest"),
     {"spirv-binary": "k.spv", "launch-config": "k.launch.loombc", "manifest": "k.manifest.json"}),
    ("spirv:vulkan1.3", ["-o", "k.spv", "--emit-launch-config", "--manifest", "m.json"],
     ("spirv-binary", "launch-config", "manifest"),
     {"spirv-binary": "k.spv", "launch-config": "k.launch.loombc", "manifest": "m.json"}),
    ("spirv:vulkan1.3", ["-o", "k.s", "-o", "k.spv"], ("asm", "spirv-binary"), {"asm": "k.s", "spirv-binary": "k.spv"}),
    ("amdgpu:gfx1100", ["-o", "k.hsaco", "-o", "k.ll", "-o", "k.s", "-o", "k.manifest.json"],
     ("amdgpu-hsaco", "llvmir-text", "asm", "manifest"),
     {"amdgpu-hsaco": "k.hsaco", "llvmir-text": "k.ll", "asm": "k.s", "manifest": "k.manifest.json"}),
    ("amdgpu:gfx1100", ["-o", "k.loombc", "-o", "k.hsaco"], ("loom-bytecode", "amdgpu-hsaco"),
     {"loom-bytecode": "k.loombc", "amdgpu-hsaco": "k.hsaco"}),
    ("amdgpu:gfx1100", ["-o", "k.o", "--stop-at", "obj"], ("stage:obj",), {"stage:obj": "k.o"}),
    ("amdgpu:gfx1100", ["-o", "k.hsaco", "--dump-stages", "d"], ("amdgpu-hsaco", "stage:llir", "stage:obj",
                                                                   "stage:hsaco"),
     {"amdgpu-hsaco": "k.hsaco", "stage:llir": "d/k.llir", "stage:obj": "d/k.obj", "stage:hsaco": "d/k.hsaco"}),
    ("nvptx:sm_90", ["-o", "k.ptx", "-o", "k.ll", "--manifest"], ("nvptx-ptx", "llvmir-text", "manifest"),
     {"nvptx-ptx": "k.ptx", "llvmir-text": "k.ll", "manifest": "k.manifest.json"}),
    ("nvptx:sm_90", ["-o", "k.txt", "--stop-at", "llir"], ("stage:llir",), {"stage:llir": "k.txt"}),
    ("nvptx:sm_90", ["-o", "k.ptx", "--dump-stages", "d"], ("nvptx-ptx", "stage:llir", "stage:ptx"),
     {"nvptx-ptx": "k.ptx", "stage:llir": "d/k.llir", "stage:ptx": "d/k.ptx"}),
    ("spirv:vulkan1.3", ["-o", "k.txt", "--stop-at", "disasm"], ("stage:disasm",), {"stage:disasm": "k.txt"}),
    ("spirv:vulkan1.3", ["-o", "k.spv", "--dump-stages", "d"], ("spirv-binary", "stage:spirv"),
     {"spirv-binary": "k.spv", "stage:spirv": "d/k.spirv"}),
]


@pytest.mark.parametrize("target, argv, outputs, files", COMBINATIONS)
def test_compile_outputs_are_the_apis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str,
                                      argv: list[str], outputs: tuple[str, ...], files: dict[str, str]) -> None:
    import loomcli as loom

    (tmp_path / "k.loom").write_bytes(Path(SAXPY).read_bytes())
    monkeypatch.chdir(tmp_path)
    assert run("compile", "k.loom", "--target", target, *argv) == 0
    want = loom.Compiler().compile(loom.Source.from_path("k.loom"), target=target, outputs=outputs)
    assert want.ok and set(want.artifacts) == set(files)
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(["k.loom", *files.values()])
    for name, path in files.items():
        got = (tmp_path / path).read_bytes()  # a manifest too: the files it names are the API's (k.spv ...)
        assert got == want.artifacts[name].data, name
