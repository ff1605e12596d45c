"""What diagnostics say beyond their code (issue 23): a did-you-mean for
unknown ops, types and symbols, the limit TARGET/003 broke, the target and
the end column in JSON, one report per error under several targets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.diagnostics import did_you_mean
from loomcli.text.lexer import token_end

ROOT = Path(__file__).resolve().parent.parent

KERNEL = """kernel.def export("k") @k(%n: index) {
  %one = index.constant 1 : index
  %size = index.constant SIZE : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%size, %one, %one) : index
} launch(%n: index, %out: buffer) {
  %zero = index.constant 0 : offset
  %v = buffer.view %out[%zero] : buffer -> view<[%n]xf32>
  kernel.return
}
"""

LIBRARY = """func.def public @twice(%v: index) -> (index) {
  %r = index.add %v, %v : index
  func.return %r : index
}
"""

USER = """func.decl public @twise(%v: index) -> (index)
func.def public @user(%v: index) -> (index) {
  %r = func.call @twise(%v) : (index) -> (index)
  func.return %r : index
}
"""


def loom(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LOOM_SERVER="off", LOOM_CACHE="0")
    env.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env)


@pytest.mark.parametrize(("old", "new", "message"), [
    ("index.constant 1 ", "index.constnt 1 ",
     "error [PARSE/006]: unknown operation `index.constnt`; did you mean `index.constant`?"),
    ("%n: index)", "%n: indx)", "error [PARSE/010]: unknown type `indx`; did you mean `index`?"),
    ("xf32>", "xf23>", "error [PARSE/010]: unknown type `f23`; did you mean `f32`?"),
    ("index.constant 1 ", "index.frobnicate 1 ", "error [PARSE/006]: unknown operation `index.frobnicate`\n"),
])
def test_unknown_words_get_a_did_you_mean(tmp_path: Path, old: str, new: str, message: str) -> None:
    (tmp_path / "k.loom").write_text(KERNEL.replace("SIZE", "64").replace(old, new, 1))
    r = loom("fmt", "--check", "k.loom", cwd=tmp_path)
    assert r.returncode == 1
    assert message in r.stderr + "\n", r.stderr


def test_unknown_symbols_get_a_did_you_mean(tmp_path: Path) -> None:
    (tmp_path / "lib.loom").write_text(LIBRARY)
    (tmp_path / "user.loom").write_text(USER)
    r = loom("link", "user.loom", "--library", "lib.loom", "-o", "out.loom", cwd=tmp_path)
    assert r.returncode == 1
    assert "user.loom:1:1: error [LINK/001]: no definition for `@twise`; did you mean `@twice`?" in r.stderr
    (tmp_path / "call.loom").write_text(LIBRARY + USER.split("\n", 1)[1].replace("@twise", "@twic"))
    r = loom("fmt", "--check", "call.loom", cwd=tmp_path)
    assert "error [SYMBOL/002]: undefined symbol `@twic`; did you mean `@twice`?" in r.stderr, r.stderr


@pytest.mark.parametrize(("word", "choices", "hint"), [
    ("scal", ["scale", "saxpy"], "; did you mean `scale`?"),
    ("zzz", ["scale", "saxpy"], ""),
    ("scale", ["scale"], ""),              # never the word itself
])
def test_did_you_mean(word: str, choices: list[str], hint: str) -> None:
    assert did_you_mean(word, choices) == hint


@pytest.mark.parametrize(("line", "column", "end"), [
    ("  %size = index.constant 64 : index", 3, 8),
    ("  %size = index.constant 64 : index", 11, 25),
    ("  view.store %x, %v[%i] : i32, view<[%n]xi32>", 32, 46),
    ("  x", 9, 9),                          # past the end: the start
    ("  x", 1, 1),                          # a blank
])
def test_token_end(line: str, column: int, end: int) -> None:
    assert token_end(line, column) == end


def test_several_targets_each_report_their_limit_in_json(tmp_path: Path) -> None:
    (tmp_path / "k.loom").write_text(KERNEL.replace("SIZE", "2048"))
    r = loom("compile", "k.loom", "--out-dir", "out", "--target", "amdgpu:gfx1100", "--target", "spirv:vulkan1.3",
             "--diagnostics", "json", cwd=tmp_path)
    assert r.returncode == 1
    got = [json.loads(line) for line in r.stderr.splitlines()]
    assert [(d["target"], d["message"], d["line"], d["column"], d["end_column"]) for d in got] == [
        ("amdgpu:gfx1100", "workgroup size 2048x1x1 exceeds amdgpu:gfx1100: at most 1024x1024x1024 per axis",
         4, 66, 71),
        ("spirv:vulkan1.3", "workgroup size 2048x1x1 exceeds spirv:vulkan1.3: at most 1024x1024x64 per axis",
         4, 66, 71),
    ]
    assert not (tmp_path / "out").exists()


def test_a_source_error_under_several_targets_is_one_report(tmp_path: Path) -> None:
    (tmp_path / "k.loom").write_text(KERNEL.replace("SIZE", "64").replace("index.constant 1 ", "index.constnt 1 "))
    r = loom("compile", "k.loom", "--out-dir", "out", "--target", "amdgpu:gfx1100", "--target", "spirv:vulkan1.3",
             "--diagnostics", "json", cwd=tmp_path)
    assert r.returncode == 1
    (d,) = [json.loads(line) for line in r.stderr.splitlines()]
    assert (d["code"], d["target"], d["column"], d["end_column"]) == ("PARSE/006", None, 10, 23)


def test_flat_limit_is_stated(tmp_path: Path) -> None:
    text = KERNEL.replace("SIZE", "64").replace("workgroup_size(%size, %one, %one)",
                                                "workgroup_size(%size, %size, %one)")
    (tmp_path / "k.loom").write_text(text)
    r = loom("compile", "k.loom", "--target", "amdgpu:gfx1100", "-o", "k.hsaco", cwd=tmp_path)
    assert r.returncode == 1
    assert "exceeds amdgpu:gfx1100: 4096 invocations, at most 1024" in r.stderr, r.stderr


CONFIGURED = """config.decl @blas.group : %v: index where [pow2(%v)]

kernel.def export("k") @k(%n: index) {
  %one = index.constant 1 : index
  %size = config.get @blas.group : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%size, %one, %one) : index
} launch(%n: index) {
  kernel.return
}
"""

PROJECT = """[project]
name = "p"
version = "0.1.0"

[build]
targets = ["spirv:vulkan1.3"]

[[kernels]]
name = "k"
srcs = ["k.loom"]
"""


@pytest.mark.parametrize(("config", "line"), [
    ('[config]\n"blas.group" = 100\n', 13),
    ("[config.blas]\nother = 1\ngroup = 100\n", 14),
    ("[config]\nblas = { group = 100 }\n", 13),
])
def test_config_002_from_loom_toml_has_its_line(tmp_path: Path, config: str, line: int) -> None:
    (tmp_path / "k.loom").write_text(CONFIGURED)
    (tmp_path / "loom.toml").write_text(PROJECT + "\n" + config)
    r = loom("build", "--no-cache", "-j1", cwd=tmp_path)
    assert r.returncode == 1
    message = f"loom.toml:{line}:1: error [CONFIG/002]: `@blas.group` = 100 violates pow2(@blas.group)\n"
    assert message in r.stderr, r.stderr


def test_config_002_from_a_test_set_has_its_line(tmp_path: Path) -> None:
    case = """
check.case public @c {
  %n = check.literal value(4) : index
  kernel.launch @k[%n](%n) : [index](index)
  check.return
}
"""
    (tmp_path / "k.loom").write_text(CONFIGURED + case)
    sets = '[config]\n"blas.group" = 64\n\n[[test]]\nname = "t"\nsrcs = ["k.loom"]\n' \
           'config = { "blas.group" = 100 }\ndevices = ["interpreter"]\n'
    (tmp_path / "loom.toml").write_text(PROJECT + "\n" + sets)
    r = loom("test", cwd=tmp_path)
    assert r.returncode == 1
    message = "loom.toml:18:1: error [CONFIG/002]: `@blas.group` = 100 violates pow2(@blas.group)\n"
    assert message in r.stderr, r.stderr
