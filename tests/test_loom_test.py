"""`loom test` with libraries and config (TOOLCHAIN.md 13): each FILE is
tested as it is, linked with `--library` and bound with `--config`/`-D`/
`--config-file`; every diagnostic points into the user's own files, never
into a temporary link."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LIBRARY = """\
func.def public pure @grid.groups(%n: index, %size: index) -> (index) where [min(%size, 1)] {
  %one = index.constant 1 : index
  %bias = index.sub %size, %one : index
  %padded = index.add %n, %bias : index
  %groups = index.div %padded, %size : index
  func.return %groups : index
}
"""

KERNEL = """\
config.decl @vecops.group : %g: index where [pow2(%g), range(%g, 32, 1024)]

func.decl public pure @grid.groups(%n: index, %size: index) -> (index) where [min(%size, 1)]

kernel.def export("shift") @shift(%n: index) {
  %one = index.constant 1 : index
  %size = config.get @vecops.group : index
  %groups = func.call pure @grid.groups(%n, %size) : (index, index) -> (index)
  kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%size, %one, %one) : index
} launch(%n: index, %x: buffer, %y: buffer) {
  %zero = index.constant 0 : offset
  %i = kernel.workitem.dispatch.id<x> : index
  %xv = buffer.view %x[%zero] : buffer -> view<[%n]xf32>
  %yv = buffer.view %y[%zero] : buffer -> view<[%n]xf32>
  %live = index.cmp ult, %i, %n : index
  scf.if %live {
    %xi = view.load %xv[%i] : view<[%n]xf32> -> f32
    view.store %xi, %yv[%i] : f32, view<[%n]xf32>
  }
  kernel.return
}

check.case public @copy_case {
  %n = check.param.choice values([1, 300]) name("n") : index
  %x = check.generate.iota offset(0.0) step(1.0) : tensor<[%n]xf32>
  %y = check.generate.fill value(0.0) : tensor<[%n]xf32>
  %want = check.generate.iota offset(0.0) step(1.0) : tensor<[%n]xf32>
  kernel.launch @shift[%n](%n, %x, %y) : [index](index, tensor<[%n]xf32>, tensor<[%n]xf32>)
  check.expect.equal actual(%y) expected(%want) : tensor<[%n]xf32>
  check.return
}
"""

PASSED = ["PASS @copy_case [n=1]", "PASS @copy_case [n=300]", "1 passed, 0 failed"]


def loom(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "grid.loom").write_text(LIBRARY)
    (tmp_path / "copy.loom").write_text(KERNEL)
    (tmp_path / "group.toml").write_text('"vecops.group" = 64\n')
    (tmp_path / "bad.toml").write_text('"vecops.group" = 100\n')
    return tmp_path


@pytest.mark.parametrize("binding", [["--config", "vecops.group=128"], ["-D", "vecops.group=128"],
                                     ["-Dvecops.group=32"], ["--config-file", "group.toml"]],
                         ids=["config", "D", "D-joined", "config-file"])
def test_a_file_is_tested_with_its_library_and_config(project: Path, binding: list[str]) -> None:
    r = loom("test", "copy.loom", "--library", "lib/grid.loom", *binding, "--device", "interpreter", cwd=project)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == PASSED


@pytest.mark.parametrize(("args", "wanted"), [
    # No library: the declaration in the user's file is what is unresolved.
    (["-D", "vecops.group=128"], "copy.loom:3:1: error [LINK/001]: no definition for `@grid.groups`"),
    # A value the declaration's predicates refuse, from the command line or from the user's file.
    (["--library", "lib/grid.loom", "-D", "vecops.group=100"],
     "<command-line>: error [CONFIG/002]: `@vecops.group` = 100 violates pow2(@vecops.group)"),
    (["--library", "lib/grid.loom", "--config-file", "bad.toml"],
     "bad.toml:1:1: error [CONFIG/002]: `@vecops.group` = 100 violates pow2(@vecops.group)"),
    # Unbound: the config.get of the user's kernel is named.
    (["--library", "lib/grid.loom"], "copy.loom:7:"),
])
def test_diagnostics_point_into_the_users_files(project: Path, args: list[str], wanted: str) -> None:
    r = loom("test", "copy.loom", *args, "--device", "interpreter", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert wanted in r.stderr, r.stderr
    assert r.stdout.splitlines()[-1] == "0 passed, 1 failed"


def test_an_error_in_the_library_points_into_the_library(project: Path) -> None:
    (project / "lib" / "grid.loom").write_text(LIBRARY.replace("index.div %padded, %size : index",
                                                                "index.div %padded, %nope : index"))
    r = loom("test", "copy.loom", "--library", "lib/grid.loom", "-D", "vecops.group=128", "--device", "interpreter",
             cwd=project)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("lib/grid.loom:5:"), r.stderr


def test_several_files_share_the_library_and_one_summary(project: Path) -> None:
    (project / "again.loom").write_text(KERNEL.replace("@copy_case", "@again_case"))
    r = loom("test", "copy.loom", "again.loom", "--library", "lib/grid.loom", "-D", "vecops.group=128",
             "--device", "interpreter", cwd=project)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [*PASSED[:2], "PASS @again_case [n=1]", "PASS @again_case [n=300]",
                                     "2 passed, 0 failed"]


PROJECT = """\
[project]
name = "copy"
version = "1"

[config]
"vecops.group" = 100

[[library]]
name = "grid"
srcs = ["lib/*.loom"]

[[test]]
name = "unit"
srcs = ["copy.loom"]
libraries = ["grid"]
config = { "vecops.group" = 64 }
devices = ["interpreter"]
"""


def test_loom_test_dir_runs_the_test_sets_of_loom_toml(project: Path) -> None:
    (project / "loom.toml").write_text(PROJECT)
    r = loom("test", cwd=project)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == PASSED
    assert "loom test: [[test]] 'unit' on interpreter" in r.stderr
    r = loom("test", str(project), cwd=project.parent)
    assert r.returncode == 0 and r.stdout.splitlines() == PASSED, r.stderr
    # The set's config wins over [config] (100 breaks pow2), the command line over both.
    (project / "loom.toml").write_text(PROJECT.replace('config = { "vecops.group" = 64 }\n', ""))
    r = loom("test", cwd=project)
    assert r.returncode == 1 and "CONFIG/002" in r.stderr and r.stdout.splitlines()[-1] == "0 passed, 1 failed"
    r = loom("test", "-D", "vecops.group=256", cwd=project)
    assert r.returncode == 0, r.stderr


def test_a_kernels_set_can_be_what_a_test_set_links(project: Path) -> None:
    (project / "kernels").mkdir()
    (project / "copy.loom").rename(project / "kernels" / "copy.loom")
    (project / "case.loom").write_text(
        "kernel.decl @shift(%n: index) launch(%n: index, %x: buffer, %y: buffer)\n\n"
        + KERNEL[KERNEL.index("check.case"):])
    (project / "kernels" / "copy.loom").write_text(KERNEL[:KERNEL.index("check.case")])
    (project / "loom.toml").write_text(PROJECT.replace('srcs = ["copy.loom"]', 'srcs = ["case.loom"]')
                                       .replace('libraries = ["grid"]\nconfig', 'libraries = ["copy"]\nconfig')
                                       + '\n[[kernels]]\nname = "copy"\nsrcs = ["kernels/*.loom"]\n'
                                         'libraries = ["grid"]\n')
    r = loom("test", cwd=project)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == PASSED


@pytest.mark.parametrize(("change", "wanted"), [
    (('libraries = ["grid"]', 'libraries = ["nope"]'),
     "loom.toml:15: [[test]] 'unit': key `libraries`: no [[library]] or [[kernels]] named 'nope'"),
    (('devices = ["interpreter"]', 'devices = ["gpu"]'),
     "loom.toml:17: [[test]] 'unit': key `devices`: 'gpu' is not a device (auto, vulkan, cpu, interpreter)"),
    (('srcs = ["copy.loom"]', 'srcs = ["none/*.loom"]'), "loom.toml:14: [[test]] 'unit': key `srcs`:"),
    (('config = { "vecops.group" = 64 }', 'config = 3'), "loom.toml:16: [[test]] 'unit': key `config`:"),
    (('name = "unit"', 'name = "unit"\nflavour = 1'), "loom.toml:14: [[test]] #1: unknown key `flavour`"),
])
def test_test_sets_are_checked_with_their_line(project: Path, change: tuple[str, str], wanted: str) -> None:
    (project / "loom.toml").write_text(PROJECT.replace(*change))
    r = loom("test", cwd=project)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith(f"loom: error: {wanted}"), r.stderr


def test_a_project_without_test_sets_says_so(project: Path) -> None:
    (project / "loom.toml").write_text(PROJECT[:PROJECT.index("[[test]]")])
    r = loom("test", cwd=project)
    assert r.returncode == 2 and "no [[test]] sets" in r.stderr, r.stderr
