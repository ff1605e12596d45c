"""Release packages: reproducible bytes, sorted entries, one fixed mtime, no
owner names, and a package.json that describes every artifact."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from test_build import make_project, run

from loomcli.build.package import package_bytes

FILES = {
    "spirv-vulkan1.3/k.spv": b"\x03\x02\x23\x07spv",
    "spirv-vulkan1.3/k.launch.loombc": b"LOOMBC launch",
    "spirv-vulkan1.3/k.manifest.json": json.dumps({"kernels": [{"export": "a"}, {"export": "b"}]}).encode(),
    "amdgpu-gfx1100/k.hsaco": b"\x7fELF code",
}


def members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return tar.getmembers()


def test_package_layout_and_package_json() -> None:
    data = package_bytes("demo", "1.2.3", "0.1.0", ["spirv:vulkan1.3", "amdgpu:gfx1100"], FILES)
    infos = members(data)
    assert [i.name for i in infos] == sorted(list(FILES) + ["package.json"])
    assert {(i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode) for i in infos} == {(0, 0, 0, "", "", 0o644)}
    assert data[4:8] == b"\0\0\0\0"  # gzip header: no timestamp
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        doc = json.loads(tar.extractfile("package.json").read())
        assert tar.extractfile("amdgpu-gfx1100/k.hsaco").read() == FILES["amdgpu-gfx1100/k.hsaco"]
    assert (doc["name"], doc["version"], doc["loom_version"]) == ("demo", "1.2.3", "0.1.0")
    assert doc["targets"] == ["spirv:vulkan1.3", "amdgpu:gfx1100"]
    by_path = {a["path"]: a for a in doc["artifacts"]}
    assert list(by_path) == sorted(FILES)
    spv = by_path["spirv-vulkan1.3/k.spv"]
    assert spv == {"path": "spirv-vulkan1.3/k.spv", "format": "spirv-binary", "target": "spirv:vulkan1.3",
                   "sha256": hashlib.sha256(FILES["spirv-vulkan1.3/k.spv"]).hexdigest(),
                   "byte_length": len(FILES["spirv-vulkan1.3/k.spv"]), "exports": ["a", "b"]}
    assert by_path["spirv-vulkan1.3/k.launch.loombc"]["format"] == "loom-launch-config"
    assert by_path["amdgpu-gfx1100/k.hsaco"]["exports"] == []  # no manifest beside it: nothing invented


def test_same_files_same_bytes_whatever_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    a = package_bytes("d", "1", "0.1.0", ["spirv:vulkan1.3"], FILES)
    b = package_bytes("d", "1", "0.1.0", ["spirv:vulkan1.3"], dict(reversed(list(FILES.items()))))
    assert a == b
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert {i.mtime for i in members(package_bytes("d", "1", "0.1.0", [], FILES))} == {1700000000}


def test_loom_build_package_is_reproducible_across_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "cache"))
    packages = []
    for where, flags in (("one", []), ("two/deeper", ["--no-cache", "-j", "1"])):
        project = make_project(tmp_path / where, sets=2)
        assert run("build", str(project), "-q", "--package", *flags) == 0
        packages.append((project / "dist" / "p-1.0.loompkg.tar.gz").read_bytes())
    assert packages[0] == packages[1]
    names = [i.name for i in members(packages[0])]
    assert names == sorted(names) and "package.json" in names and ".loom-build.json" not in names
    assert len(names) == 2 * 3 + 1
