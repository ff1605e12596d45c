"""The no-op check of `loom build` (loomcli.build.noop): it answers only
when the full build would do nothing, prints what the build prints, and
falls through to the full command for any change, option or record it does
not understand."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_build import make_project, run

from loomcli.build import noop
from loomcli.service import fingerprint

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A built project whose every file is trusted by stat (no racy margin), so the build leaves a record."""
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fingerprint, "RACY_MARGIN_NS", 0)
    project = make_project(tmp_path / "p", sets=2)
    assert run("build", str(project), "-q") == 0
    return project


def out(project: Path) -> Path:
    return project / "build" / "loom"


def _same_size_edit(project: Path) -> None:
    path = project / "k" / "set1" / "k0.loom"
    st = path.stat()
    path.write_text(path.read_text().replace("s1k0", "s1kX"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _rewrite_output(project: Path) -> None:
    path = out(project) / "spirv-vulkan1.3" / "set0.spv"
    path.write_bytes(path.read_bytes())


def _edit_record(project: Path) -> None:
    """A stamp of the record changed: one recorded mtime off by one."""
    path = out(project) / noop.NOOP_FILE
    tokens = path.read_bytes().split(b"\0")
    at = tokens.index(b"s", tokens.index(str(project / "lib" / "square.loom").encode()) - 1)
    tokens[at + 3] = str(int(tokens[at + 3]) + 1).encode()
    path.write_bytes(b"\0".join(tokens))


CHANGES: dict[str, Callable[[Path], object]] = {
    "source edited, size and mtime kept": _same_size_edit,
    "library touched": lambda p: os.utime(p / "lib" / "twice.loom"),
    "file added to a globbed folder": lambda p: (p / "k" / "set0" / "k9.loom").write_text(
        (p / "k" / "set0" / "k0.loom").read_text().replace("s0k0", "s0k9")),
    "project file touched": lambda p: os.utime(p / "loom.toml"),
    "output removed": lambda p: (out(p) / "spirv-vulkan1.3" / "set1.manifest.json").unlink(),
    "output rewritten": _rewrite_output,
    "state file removed": lambda p: (out(p) / ".loom-build.json").unlink(),
    "a recorded stamp differs": _edit_record,
    "record truncated": lambda p: (out(p) / noop.NOOP_FILE).write_bytes(
        (out(p) / noop.NOOP_FILE).read_bytes()[:200]),
    "record garbled": lambda p: (out(p) / noop.NOOP_FILE).write_bytes(b"\xff\0" * 1000),
    "record of another llvmlite": lambda p: (out(p) / noop.NOOP_FILE).write_bytes(
        (out(p) / noop.NOOP_FILE).read_bytes().replace(b"llvmlite", b"llvmlitf", 1)),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_any_change_falls_through_to_the_build(built: Path, change: str) -> None:
    args = [str(built), "-q"]
    assert noop.check(args) == 0
    CHANGES[change](built)
    assert noop.check(args) is None
    assert run("build", *args) == 0   # the full build copes, whatever the change
    assert noop.check(args) == 0      # ... and leaves a record that holds again


@pytest.mark.parametrize("extra, answers", [
    ([], True),
    (["-j", "3", "--no-cache", "--keep-going", "-v", "--diagnostics", "json", "--jobserver-style=pipe"], True),
    (["-j8", "--progress", "none"], True),
    (["--target", "spirv:vulkan1.3"], False),   # another selection than the recorded one
    (["--out-dir", "elsewhere"], False),
    (["--package"], False),                     # options the check leaves to the full command
    (["--trace", "t.json"], False),
    (["--help"], False),
    (["-j", "many"], False),                    # errors are the full command's to report
    (["--progress", "loud"], False),
    (["-qv"], False),
    (["second-dir"], False),
])
def test_the_options_the_check_answers(built: Path, extra: list[str], answers: bool) -> None:
    assert (noop.check([str(built), "-q", *extra]) == 0) is answers


def test_a_record_per_selection(built: Path, tmp_path: Path) -> None:
    """A build with --target or --out-dir records that selection; the check answers it and no other."""
    elsewhere = tmp_path / "elsewhere"
    selected = [str(built), "-q", "--target", "spirv:vulkan1.3", "--out-dir", str(elsewhere)]
    assert noop.check(selected) is None
    assert run("build", *selected) == 0
    assert noop.check(selected) == 0
    assert noop.check([str(built), "-q", "--out-dir", str(elsewhere)]) is None  # targets from loom.toml: not recorded
    assert noop.check([str(built), "-q"]) == 0                                  # the first record still holds


@pytest.mark.parametrize("flags", [["--progress", "plain"], ["--progress", "rich"], ["-q"], ["--progress", "none"]])
def test_the_check_prints_what_the_build_prints(built: Path, capsys: pytest.CaptureFixture[str],
                                                flags: list[str]) -> None:
    # Rich and plain progress end on the same line; captured, rich would also print its table.
    assert run("build", str(built), *(["--progress", "plain"] if "rich" in flags else flags)) == 0
    full = capsys.readouterr()
    assert noop.check([str(built), *flags]) == 0
    quick = capsys.readouterr()
    assert (quick.err, full.err) == ("", "")
    assert quick.out.rsplit(" in ", 1)[0] == full.out.rsplit(" in ", 1)[0]  # all but the elapsed time
    assert bool(quick.out) is (flags[0] == "--progress" and flags[1] != "none")


def test_what_the_record_vouches_for(built: Path) -> None:
    """Every input the keys hashed, every folder a glob listed, loom's own code and llvmlite's version file."""
    tokens = (out(built) / noop.NOOP_FILE).read_bytes().decode().split("\0")
    stamped = {tokens[i + 1] for i, t in enumerate(tokens) if t == "s" and os.path.isabs(tokens[i + 1])}
    sources = {str(p) for p in [*built.glob("k/*/*.loom"), *built.glob("lib/*.loom")]}
    assert sources | {str(built / "loom.toml"), str(built / "k" / "set0"), str(built / "k" / "set1")} <= stamped
    code = {str(p) for p in (ROOT / "loomcli").rglob("*.py") if "__pycache__" not in p.parts}
    assert code <= stamped and str(ROOT / "loomcli" / "build") in stamped
    assert any(p.endswith(os.path.join("llvmlite", "_version.py")) for p in stamped)


def test_no_record_unless_the_build_finished_and_its_files_are_old_enough(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = out(built) / noop.NOOP_FILE
    assert record.exists()
    (built / "k" / "set1" / "k0.loom").write_text("kernel.def @broken(")
    assert run("build", str(built), "-q", "--keep-going") == 1
    assert not record.exists()  # a failed build removes it
    (built / "k" / "set1" / "k0.loom").write_text((built / "k" / "set1" / "k1.loom").read_text().replace("k1", "k0"))
    monkeypatch.setattr(fingerprint, "RACY_MARGIN_NS", 3600 * 10**9)  # every file changed "just now"
    assert run("build", str(built), "-q") == 0
    assert not record.exists()
    monkeypatch.setattr(fingerprint, "RACY_MARGIN_NS", 0)
    assert run("build", str(built), "-q") == 0  # a no-op build writes the record once the files are trusted
    assert record.exists() and noop.check([str(built), "-q"]) == 0


def test_a_glob_through_folders_stamps_every_folder_it_may_list(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fingerprint, "RACY_MARGIN_NS", 0)
    project = make_project(tmp_path / "p", sets=1)
    toml = project / "loom.toml"
    toml.write_text(toml.read_text().replace('"k/set0/*.loom"', '"k/**/*.loom"'))
    (project / "k" / "set0" / "deeper").mkdir()
    assert run("build", str(project), "-q") == 0
    assert noop.check([str(project), "-q"]) == 0
    (project / "k" / "set0" / "deeper" / "k5.loom").write_text(
        (project / "k" / "set0" / "k0.loom").read_text().replace("s0k0", "s0k5"))
    assert noop.check([str(project), "-q"]) is None


@pytest.mark.parametrize("text, out_dir", [
    ('[build]\nout-dir = "out"\n', "out"),
    ("[build] # the build\ntargets = []\n'out-dir' = 'x'\n\"out-dir\" = 'lit/out' # here\n", "lit/out"),
    ('[package]\nout-dir = "no"\n[build]\npipeline = "default"\n', "build/loom"),
    ('[build]\nout-dir = "a\\\\b"\n', "build/loom"),   # escapes are the full parser's
    ("", "build/loom"),
])
def test_the_out_dir_scan(text: str, out_dir: str) -> None:
    """A cheap reading of [build] out-dir; a wrong one costs speed, never a wrong answer."""
    assert noop._out_dir_of(text) == out_dir


NO_OP_PROBE = """\
import sys
from loomcli.service import fingerprint
if sys.argv[1] == "trusting":
    fingerprint.RACY_MARGIN_NS = 0
from loomcli.entry import main
try:
    main(sys.argv[2:])
except SystemExit as e:
    assert not e.code, e.code
heavy = ("click", "json", "tomllib", "hashlib", "loomcli.cli", "loomcli.build.engine", "loomcli.build.project")
print("loaded:", " ".join(sorted(m for m in sys.modules if m.startswith(heavy))), file=sys.stderr)
"""


def test_the_entry_point_answers_a_no_op_without_loading_the_command_line(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", sets=2)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "CI", "LOOM_CACHE")}
    env.update(PYTHONPATH=str(ROOT), LOOM_CACHE_DIR=str(tmp_path / "cache"))

    def build(mode: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([sys.executable, "-c", NO_OP_PROBE, mode, "build", str(project)], env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r

    assert "loomcli.build.engine" in build("trusting").stderr   # builds, and records what it trusted
    again = build("plain")
    assert again.stderr == "loaded: \n"
    assert again.stdout.startswith("loom: built p 1.0: 2 items for 1 target: 0 compiled, 0 cached, 2 up to date")
