"""Same inputs, same bytes: across runs, hash seeds and library order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LIB_A = """\
func.def public pure @a.twice(%x: index) -> (index) {
  %y = index.add %x, %x : index
  func.return %y : index
}

func.def @helper(%x: index) -> (index) {
  func.return %x : index
}
"""
LIB_B = """\
func.def public pure @b.thrice(%x: index) -> (index) {
  %y = index.mul %x, %x : index
  func.return %y : index
}

func.def @helper(%x: index) -> (index) {
  %y = index.add %x, %x : index
  func.return %y : index
}
"""
MAIN = """\
func.decl public pure @a.twice(%x: index) -> (index)

func.decl public pure @b.thrice(%x: index) -> (index)

kernel.def export("k") @k(%n: index) {
  %one = index.constant 1 : index
  %a = func.call pure @a.twice(%n) : (index) -> (index)
  %b = func.call pure @b.thrice(%a) : (index) -> (index)
  kernel.launch.config workgroups(%b, %one, %one) workgroup_size(%one, %one, %one) : index
} launch() {
  kernel.return
}
"""


def _project(tmp: Path) -> None:
    (tmp / "a.loom").write_text(LIB_A)
    (tmp / "b.loom").write_text(LIB_B)
    (tmp / "main.loom").write_text(MAIN)


def _loom(tmp: Path, seed: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=seed)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], cwd=tmp, env=env, capture_output=True)


def test_compile_and_link_bytes_do_not_depend_on_seed_or_library_order(tmp_path: Path) -> None:
    _project(tmp_path)
    outputs = []
    for seed, libs in (("0", ["a.loom", "b.loom"]), ("1", ["b.loom", "a.loom"]), ("12345", ["a.loom", "b.loom"])):
        lib_args = [x for lib in libs for x in ("--library", lib)]
        r = _loom(tmp_path, seed, "compile", "main.loom", *lib_args, "-o", f"out{seed}.loombc")
        assert r.returncode == 0, r.stderr.decode()
        r = _loom(tmp_path, seed, "link", "main.loom", *lib_args, "-o", f"link{seed}.loombc")
        assert r.returncode == 0, r.stderr.decode()
        outputs.append(((tmp_path / f"out{seed}.loombc").read_bytes(), (tmp_path / f"link{seed}.loombc").read_bytes()))
    assert outputs[0] == outputs[1] == outputs[2]


def test_compiled_modules_carry_no_paths(tmp_path: Path) -> None:
    """A compiled module's bytes depend on the program, never on where it was built."""
    for sub in ("one", "two/deeper"):
        folder = tmp_path / sub
        folder.mkdir(parents=True)
        _project(folder)
        r = _loom(folder, "0", "compile", "main.loom", "--library", "a.loom", "--library", "b.loom", "-o", "k.loombc")
        assert r.returncode == 0, r.stderr.decode()
    assert (tmp_path / "one" / "k.loombc").read_bytes() == (tmp_path / "two" / "deeper" / "k.loombc").read_bytes()
    assert b"main.loom" not in (tmp_path / "one" / "k.loombc").read_bytes()
