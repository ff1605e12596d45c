"""The `loom` driver: lazy start-up, `loom fmt`, exit codes, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.bytecode import read_module
from loomcli.text.printer import print_module

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.loom"))


def loom(*args: str, cwd: Path | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], cwd=cwd, input=stdin,
                          capture_output=True, env=env)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["--version", "--json"], ["fmt", "--help"]])
def test_light_commands_import_neither_llvm_nor_rich(argv: list[str]) -> None:
    code = ("import sys\nfrom loomcli.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('llvmlite', 'rich')\n"
            "               or m.startswith(('loomcli.passes', 'loomcli.emit')))\n"
            "assert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr.decode()


def test_version_json() -> None:
    r = loom("--version", "--json")
    assert r.returncode == 0
    info = json.loads(r.stdout)
    assert info["name"] == "loom" and info["version"]


def test_samples_are_canonical() -> None:
    r = loom("fmt", "--check", *map(str, SAMPLES))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"" and r.stderr == b""


def test_fmt_prints_canonical_text(tmp_path: Path) -> None:
    messy = tmp_path / "messy.loom"
    messy.write_text("kernel.def   @k( )   {\n%c=index.constant 1:index\n kernel.launch.config workgroups(%c,%c,%c) "
                     "workgroup_size(%c,%c,%c):index}launch(){kernel.return}")
    r = loom("fmt", str(messy))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == (
        "kernel.def @k() {\n"
        "  %c = index.constant 1 : index\n"
        "  kernel.launch.config workgroups(%c, %c, %c) workgroup_size(%c, %c, %c) : index\n"
        "} launch() {\n"
        "  kernel.return\n"
        "}\n")
    check = loom("fmt", "--check", str(messy))
    assert check.returncode == 1
    assert check.stderr.decode().strip() == f"{messy}: not canonical (first difference at line 1)"


def test_fmt_in_place_rewrites_valid_and_never_invalid(tmp_path: Path) -> None:
    good = tmp_path / "good.loom"
    good.write_text("config.def   @a = 1 : index\n")
    bad = tmp_path / "bad.loom"
    bad_text = "config.def @b = 1.5 : index\n"
    bad.write_text(bad_text)
    r = loom("fmt", "--in-place", str(good), str(bad), cwd=tmp_path)
    assert r.returncode == 1
    assert good.read_text() == "config.def @a = 1 : index\n"
    assert bad.read_text() == bad_text
    assert "bad.loom:1:17: error [TYPE/005]: `1.5` is not a valid index" in r.stderr.decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.loom", "good.loom"]  # no temporary left


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_fmt_converts_to_bytecode_and_back(tmp_path: Path, sample: Path) -> None:
    bc = tmp_path / "x.loombc"
    assert loom("fmt", str(sample), "--to", "bc", "-o", str(bc)).returncode == 0
    assert print_module(read_module(bc.read_bytes())) == sample.read_text()
    back = loom("fmt", str(bc), "--to", "text", "-o", "-")
    assert back.returncode == 0 and back.stdout.decode() == sample.read_text()


def test_diagnostics_text_and_json(tmp_path: Path) -> None:
    src = tmp_path / "k.loom"
    src.write_text("func.def @f(%a: f32, %b: i32) -> (f32) {\n"
                   "  %s = scalar.addf %a, %b : f32\n"
                   "  func.return %s : f32\n"
                   "}\n")
    r = loom("fmt", "--check", "k.loom", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.decode() == (
        "k.loom:2:24: error [TYPE/001]: operand 1 of scalar.addf: expected f32, found i32\n"
        "  %s = scalar.addf %a, %b : f32\n"
        "                       ^\n")
    j = loom("fmt", "--check", "--diagnostics=json", "k.loom", cwd=tmp_path)
    obj = json.loads(j.stderr.decode().strip())
    assert obj == {"severity": "error", "code": "TYPE/001",
                   "message": "operand 1 of scalar.addf: expected f32, found i32",
                   "file": "k.loom", "line": 2, "column": 24, "end_line": 2, "end_column": 26, "target": None}


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage", b"LOOMBC\x00\x01\x02", b"", b"%", b"kernel.def @k("],
                         ids=["binary", "bad-bytecode", "empty", "percent", "truncated"])
def test_hostile_inputs_never_trace(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "in.loom"
    f.write_bytes(content)
    r = loom("fmt", "--check", str(f))
    assert b"Traceback" not in r.stderr
    assert r.returncode in (0, 1)


@pytest.mark.parametrize("argv,code", [
    (["fmt", "--check", "--in-place", "x"], 2),
    (["fmt", "a.loom", "b.loom"], 2),
    (["nosuchcommand"], 2),
    # KEY=PATH with no path: the failed open of "" named no file at all.
    (["link", "k=", "-o", "out.loombc"], 2),
    (["compile", "a.loom", "--library", "k=", "-o", "out.loombc"], 2),
])
def test_usage_errors_exit_2(tmp_path: Path, argv: list[str], code: int) -> None:
    for name in ("x", "a.loom", "b.loom"):
        (tmp_path / name).write_text("")
    r = loom(*argv, cwd=tmp_path)
    assert r.returncode == code, r.stderr.decode()
    assert b"Traceback" not in r.stderr
    if "k=" in argv:
        assert r.stderr.decode() == "loom: error: `k=` names no file (write KEY=PATH)\n"


@pytest.mark.parametrize("argv", [
    ["fmt", "/nonexistent/x.loom"],
    ["compile", "/nonexistent/x.loom", "--target", "spirv:vulkan1.3", "-o", "x.spv"],
    ["link", "/nonexistent/x.loom", "-o", "x.loom"],
    ["test", "/nonexistent/x.loom"],
    ["launch-eval", "/nonexistent/x.loom", "@k", "1"],
    ["compile", str(SAMPLES[0]), "--library", "/nonexistent/x.loom", "-o", "x.loombc"],
    ["compile", str(SAMPLES[0]), "--config-file", "/nonexistent/x.loom", "-o", "x.loombc"],
])
def test_a_missing_input_is_exit_1_not_an_environment_failure(argv: list[str], tmp_path: Path) -> None:
    """TOOLCHAIN.md section 14: what the user named is not the machine failing."""
    r = loom(*argv, cwd=tmp_path)
    assert (r.returncode, r.stderr.decode()) == (1, "loom: error: /nonexistent/x.loom: No such file or directory\n")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_as_input_is_exit_1(tmp_path: Path) -> None:
    r = loom("compile", str(tmp_path), "-o", str(tmp_path / "x.loombc"))
    assert (r.returncode, r.stderr.decode()) == (1, f"loom: error: {tmp_path}: Is a directory\n")


def test_unreadable_output_folder_is_environment_error(tmp_path: Path) -> None:
    sample = SAMPLES[0]
    r = loom("fmt", str(sample), "--to", "text", "-o", str(tmp_path / "missing" / "out.loom"))
    assert r.returncode == 3
    assert r.stderr.decode().startswith("loom: error:")
