"""`loom build`: the sample project, incremental builds, loom.toml errors,
--keep-going, --trace, a whole build through the inline sink, and the
output layout of TOOLCHAIN.md section 9."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from loomcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "project"

KERNEL = """\
func.decl public pure @{helper}(%x: f32) -> (f32)

kernel.def export("{name}") @{name}(%n: index) {{
  %one = index.constant 1 : index
  %group = index.constant {group} : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%group, %one, %one) : index
}} launch(%n: index, %x: buffer) {{
  %zero = index.constant 0 : offset
  %i = kernel.workitem.dispatch.id<x> : index
  %xv = buffer.view %x[%zero] : buffer -> view<[%n]xf32>
  %live = index.cmp ult, %i, %n : index
  scf.if %live {{
    %xi = view.load %xv[%i] : view<[%n]xf32> -> f32
    %r = func.call pure @{helper}(%xi) : (f32) -> (f32)
    view.store %r, %xv[%i] : f32, view<[%n]xf32>
  }}
  kernel.return
}}
"""

LIBRARY = """\
func.def public pure inline @{helper}(%x: f32) -> (f32) {{
  %r = scalar.{op} %x, %x : f32
  func.return %r : f32
}}
"""


def make_project(folder: Path, sets: int = 2, per_set: int = 2, targets: tuple[str, ...] = ("spirv:vulkan1.3",),
                 extra: str = "") -> Path:
    """Two libraries (`twice`, `square`); set i uses library i % 2."""
    (folder / "lib").mkdir(parents=True)
    (folder / "lib" / "twice.loom").write_text(LIBRARY.format(helper="twice", op="addf"))
    (folder / "lib" / "square.loom").write_text(LIBRARY.format(helper="square", op="mulf"))
    toml = [f'[project]\nname = "p"\nversion = "1.0"\n\n[build]\ntargets = {json.dumps(list(targets))}\n',
            '[[library]]\nname = "twice"\nsrcs = ["lib/twice.loom"]\n',
            '[[library]]\nname = "square"\nsrcs = ["lib/square.loom"]\n']
    for s in range(sets):
        helper = ("twice", "square")[s % 2]
        d = folder / "k" / f"set{s}"
        d.mkdir(parents=True)
        for k in range(per_set):
            (d / f"k{k}.loom").write_text(KERNEL.format(name=f"s{s}k{k}", helper=helper, group=32 * (k + 1)))
        toml.append(f'[[kernels]]\nname = "set{s}"\nsrcs = ["k/set{s}/*.loom"]\nlibraries = ["{helper}"]\n')
    (folder / "loom.toml").write_text("\n".join(toml) + extra)
    return folder


def run(*argv: str) -> int:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    return e.value.code or 0


def outputs(out: Path) -> dict[str, bytes]:
    """Every file a build wrote, but its bookkeeping (`.loom-build.json` and
    `.loom-build.noop` record mtimes)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(".loom-build.")}


def trace_events(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("LOOM_CACHE_DIR", str(cache))
    return cache


def test_the_sample_project(tmp_path: Path, fresh_cache: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(SAMPLE, project, ignore=shutil.ignore_patterns("build", "dist"))
    assert run("build", str(project), "--progress", "plain", "--package") == 0
    out = project / "build" / "loom"
    files = sorted(outputs(out))
    assert (out / ".loom-build.json").exists()
    commands = [f for f in files if "/run/" in f]
    files = [f for f in files if "/run/" not in f]
    assert commands == sorted(f"{t}/run/{name}" for t, native in (("amdgpu-gfx1100", ".hsaco"),
                                                                  ("spirv-vulkan1.3", ".spv"))
                              for name in ("run.commands.json", "program-0.loomcmd", "kernel-0.loombc",
                                           "kernel-0" + native, "kernel-0.launch.loombc", "kernel-0.manifest.json"))
    entries = json.loads((out / "spirv-vulkan1.3" / "run" / "run.commands.json").read_text())["entries"]
    assert entries == [{"symbol": "scale", "source_request": "kernel-0.loombc", "artifact": "kernel-0.spv",
                        "export": "scale", "launch_config": "kernel-0.launch.loombc"}, {"symbol": "external"}]
    assert files == sorted([
        f"{t}/{s}{ext}" for t, native in (("amdgpu-gfx1100", ".hsaco"), ("spirv-vulkan1.3", ".spv"))
        for s in ("blas", "elementwise") for ext in (native, ".launch.loombc", ".manifest.json")])
    manifest = json.loads((out / "amdgpu-gfx1100" / "blas.manifest.json").read_text())
    assert [k["export"] for k in manifest["kernels"]] == ["saxpy", "scale"]
    assert manifest["kernels"][0]["workgroup_size"] == [128, 1, 1]  # [config] blas.group = 128
    assert manifest["kernels"][0]["launch_config"] == "blas.launch.loombc"
    assert (out / "amdgpu-gfx1100" / "blas.hsaco").read_bytes()[:4] == b"\x7fELF"
    assert (project / "dist" / "demo-0.1.0.loompkg.tar.gz").exists()


@pytest.mark.parametrize("where", [".", "a", "a/proj", "a/proj/k", "a/proj/k/sub", "b"])
@pytest.mark.parametrize("named", ["absolute", "relative", "trailing slash"])
def test_sources_are_shown_as_display_path_shows_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      where: str, named: str) -> None:
    """A build names each source (in messages, and to its workers) by the project folder's
    display path and the source's path in the project, made once; from a folder inside the
    project, file by file. Either way what `display_path` says."""
    from loomcli.build.engine import _SourceReader
    from loomcli.build.project import load_project
    from loomcli.files import display_path

    project = tmp_path / "a" / "proj"
    (project / "k" / "sub").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (project / "loom.toml").write_text('[project]\nname = "p"\nversion = "1"\n[build]\ntargets = ["spirv:vulkan1.3"]\n'
                                       '[[kernels]]\nname = "s"\nsrcs = ["k/**/*.loom"]\n')
    for rel in ("k/x.loom", "k/sub/y.loom"):
        (project / rel).write_text("")
    monkeypatch.chdir(tmp_path / where)
    given = {"absolute": str(project), "relative": os.path.relpath(project),
             "trailing slash": str(project) + "/"}[named]
    loaded = load_project(given, None, None)
    reader = _SourceReader(loaded)
    assert [reader.shown(rel) for rel in loaded.kernels[0].srcs] == \
        [display_path(loaded.path(rel)) for rel in loaded.kernels[0].srcs] and loaded.kernels[0].srcs


def test_incremental_builds(tmp_path: Path, fresh_cache: Path) -> None:
    project = make_project(tmp_path / "p", sets=2)
    out = project / "build" / "loom" / "spirv-vulkan1.3"
    trace = tmp_path / "t.json"
    assert run("build", str(project), "-q", "--trace", str(trace)) == 0
    assert len(trace_events(trace)) == 2
    first = outputs(out)
    assert run("build", str(project), "-q", "--trace", str(trace)) == 0
    assert trace_events(trace) == []  # a no-op build compiles nothing
    # A changed library rebuilds only the set that uses it.
    (project / "lib" / "square.loom").write_text(LIBRARY.format(helper="square", op="addf"))
    assert run("build", str(project), "-q", "--trace", str(trace)) == 0
    assert [e["name"] for e in trace_events(trace)] == ["set1 spirv:vulkan1.3"]
    second = outputs(out)
    assert {k for k in first if first[k] != second[k]} == {"set1.spv", "set1.manifest.json"}
    # A damaged output is noticed and rewritten from the cache (no compile).
    (out / "set0.spv").write_bytes(b"junk")
    assert run("build", str(project), "-q", "--trace", str(trace)) == 0
    assert trace_events(trace) == [] and outputs(out) == second


def _same_size_edit(path: Path) -> None:
    """New bytes of the same length, the old mtime put back (as `touch -d` or `tar -x` would)."""
    st = path.stat()
    path.write_text(path.read_text().replace("mulf", "addf"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _replace_by_copy(path: Path) -> None:
    """A different file (new inode) with the old size and mtime."""
    st = path.stat()
    other = path.with_suffix(".new")
    other.write_text(path.read_text().replace("mulf", "addf"))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)


def _touch(path: Path) -> None:
    os.utime(path)


@pytest.mark.parametrize("change, rebuilt", [
    (_same_size_edit, ["set1 spirv:vulkan1.3"]),
    (_replace_by_copy, ["set1 spirv:vulkan1.3"]),
    (_touch, []),                                   # new stat data, same bytes: hashed again, nothing to build
])
def test_stat_fast_path_still_sees_every_change(tmp_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                change, rebuilt: list[str]) -> None:
    """Recorded content hashes are reused only while size, mtime, ctime and
    inode are all unchanged (loomcli.service.fingerprint.stat_stamp)."""
    from loomcli.service import fingerprint

    monkeypatch.setattr(fingerprint, "RACY_MARGIN_NS", 0)  # as if every file were old enough to be trusted
    project = make_project(tmp_path / "p", sets=2)
    trace = tmp_path / "t.json"
    assert run("build", str(project), "-q") == 0
    state_file = project / "build" / "loom" / ".loom-build.json"
    recorded = json.loads(state_file.read_text())
    assert sorted(recorded["inputs"]) == ["k/set0/k0.loom", "k/set0/k1.loom", "k/set1/k0.loom", "k/set1/k1.loom",
                                          "lib/square.loom", "lib/twice.loom"]
    before = state_file.stat()
    assert run("build", str(project), "-q", "--trace", str(trace)) == 0
    assert trace_events(trace) == []
    after = state_file.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # a no-op writes nothing
    change(project / "lib" / "square.loom")
    assert run("build", str(project), "-q", "--trace", str(trace)) == 0
    assert [e["name"] for e in trace_events(trace)] == rebuilt


def test_files_changed_just_now_are_not_trusted_by_stat(tmp_path: Path, fresh_cache: Path) -> None:
    """A file changed within RACY_MARGIN_NS of the build could change again in
    the same timestamp tick: its stat data is not recorded, so it is hashed again."""
    import time

    project = make_project(tmp_path / "p", sets=1)
    recent = time.time_ns() + 3600 * 10**9  # "just now" whatever the build's own duration
    for source in [*project.glob("k/*/*.loom"), *project.glob("lib/*.loom")]:
        os.utime(source, ns=(recent, recent))
    assert run("build", str(project), "-q") == 0
    recorded = json.loads((project / "build" / "loom" / ".loom-build.json").read_text())
    assert recorded["inputs"] == {}


def test_cold_cache_only_and_no_cache_give_identical_bytes(tmp_path: Path, fresh_cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    project = make_project(tmp_path / "p", sets=3, targets=("spirv:vulkan1.3", "amdgpu:gfx1100"))
    out = project / "build" / "loom"
    trace = tmp_path / "t.json"
    results = {}
    for name, flags in [("cold", []), ("cache-only", []), ("no-cache", ["--no-cache"])]:
        shutil.rmtree(out, ignore_errors=True)
        with monkeypatch.context() as m:
            if name == "cache-only":  # every item hits before scheduling: no pool, no jobserver
                m.setattr("loomcli.service.session.compile_session", _no_session)
            assert run("build", str(project), "-q", "-j", "2", "--trace", str(trace), *flags) == 0
        results[name] = outputs(out)
        if name == "cache-only":  # the lookups still count in the cache's totals
            assert json.loads((fresh_cache / "stats.json").read_text())["hits"] == 6
        # One task per kernel set: its front end runs once for both targets.
        names = sorted(e["name"] for e in trace_events(trace))
        assert names == ([] if name == "cache-only" else [f"set{s} spirv:vulkan1.3,amdgpu:gfx1100" for s in range(3)])
    assert results["cold"] == results["cache-only"] == results["no-cache"]
    assert len(results["cold"]) == 3 * 2 * 3


def test_sigterm_while_cache_hits_are_published_is_an_interrupt(tmp_path: Path, fresh_cache: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Cache hits are published before any compile session; SIGTERM there
    still takes the Ctrl-C path (exit 130, nothing partial), not the default
    action that would end the process on the spot."""
    import signal

    from loomcli.build import engine

    project = make_project(tmp_path / "p", sets=3)
    out = project / "build" / "loom"
    assert run("build", str(project), "-q") == 0
    built = outputs(out)
    shutil.rmtree(out)
    publish = engine._from_cache
    calls = []

    def terminated(*args: object) -> bool:
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # delivered before this call returns
        return publish(*args)  # type: ignore[arg-type]

    def unhandled(signum: int, frame: object) -> None:  # what would end pytest, were loom not handling SIGTERM
        calls.append(0)

    monkeypatch.setattr(engine, "_from_cache", terminated)
    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        assert run("build", str(project), "-q") == 130
    finally:
        assert signal.signal(signal.SIGTERM, before) is unhandled  # restored on the way out
    assert "interrupted" in capsys.readouterr().err
    assert calls == [1, 1]
    assert not list(out.rglob(".loom-*.tmp")) and not (out / ".loom-build.json").exists()
    monkeypatch.setattr(engine, "_from_cache", publish)
    assert run("build", str(project), "-q") == 0
    assert outputs(out) == built


def _no_session(*args: object, **kwargs: object) -> None:
    raise AssertionError("a compile session was opened")


def test_a_whole_build_through_the_inline_sink(tmp_path: Path, fresh_cache: Path) -> None:
    project = make_project(tmp_path / "p", sets=2)
    trace = tmp_path / "t.json"
    assert run("build", str(project), "-q", "-j", "1", "--no-cache", "--trace", str(trace)) == 0
    events = trace_events(trace)
    assert len(events) == 2 and {e["pid"] for e in events} == {os.getpid()}  # ran in this process
    inline = outputs(project / "build" / "loom")
    shutil.rmtree(project / "build")
    assert run("build", str(project), "-q", "-j", "2", "--no-cache", "--trace", str(trace)) == 0
    assert os.getpid() not in {e["pid"] for e in trace_events(trace)}
    assert outputs(project / "build" / "loom") == inline


def test_trace_is_chrome_trace_json(tmp_path: Path, fresh_cache: Path) -> None:
    project = make_project(tmp_path / "p", sets=3)
    trace = tmp_path / "trace.json"
    assert run("build", str(project), "-q", "-j", "2", "--trace", str(trace)) == 0
    events = trace_events(trace)
    assert len(events) == 3
    for e in events:
        assert e["ph"] == "X" and e["cat"] == "compile" and e["dur"] > 0 and e["tid"] in (0, 1)
        assert e["ts"] > 1_600_000_000_000_000  # microseconds since the Unix epoch


BROKEN = 'kernel.def export("bad") @bad() {\n  %x = index.constant 1 : f32\n}\n'


def test_keep_going_reports_every_failure(tmp_path: Path, fresh_cache: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "p", sets=3)
    for s in (0, 2):
        (project / "k" / f"set{s}" / "k1.loom").write_text(BROKEN)
    # Without --keep-going the first failure stops the build (-j 1: nothing else was in flight).
    assert run("build", str(project), "--progress", "plain", "-j", "1") == 1
    captured = capsys.readouterr()
    assert captured.err.count("error [") == 1 and "FAILED" in captured.out
    assert "set1" not in captured.out
    assert run("build", str(project), "--progress", "plain", "--keep-going") == 1
    captured = capsys.readouterr()
    assert "set0/k1.loom:3:2: error [PARSE/003]" in captured.err and "set2/k1.loom:3:2:" in captured.err
    assert "compiled set1" in captured.out or "cached set1" in captured.out
    assert (project / "build" / "loom" / "spirv-vulkan1.3" / "set1.spv").exists()
    assert not (project / "build" / "loom" / "spirv-vulkan1.3" / "set0.spv").exists()


def test_quiet_prints_nothing_and_target_and_out_dir_flags(tmp_path: Path, fresh_cache: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "p", sets=1)
    out = tmp_path / "elsewhere"
    assert run("build", str(project), "-q", "--target", "amdgpu:gfx942", "--out-dir", str(out)) == 0
    assert capsys.readouterr() == ("", "")
    assert sorted(p.name for p in (out / "amdgpu-gfx942").iterdir()) == [
        "set0.hsaco", "set0.launch.loombc", "set0.manifest.json"]
    assert not (project / "build").exists()


@pytest.mark.parametrize("toml,message", [
    ('[project]\nname = "p"\nversion = "1"\nbogus = 1\n', "loom.toml:4: [project]: unknown key `bogus`"),
    ('[project]\nname = "p"\n', "loom.toml:1: [project]: missing key `version`"),
    ('[project]\nname = "p"\nversion = 1\n', "loom.toml:3: [project]: key `version`: expected a non-empty string"),
    ('[project]\nname = "p"\nversion = "1"\n[build]\ntargets = ["gfx1"]\n',
     "loom.toml:5: [build]: key `targets`: unknown target `gfx1`"),
    ('[project]\nname = "p"\nversion = "1"\n[build]\nout-dir = "../out"\n',
     "loom.toml:5: [build]: key `out-dir`: '../out' leaves the project folder"),
    ('[project]\nname = "p"\nversion = "1"\n\n[[kernels]]\nname = "k"\nsrcs = ["/etc/*.loom"]\n',
     "loom.toml:7: [[kernels]] 'k': key `srcs`: '/etc/*.loom' leaves the project folder"),
    ('[project]\nname = "p"\nversion = "1"\n\n[[kernels]]\nname = "k"\nsrcs = ["../x/*.loom"]\n',
     "loom.toml:7: [[kernels]] 'k': key `srcs`: '../x/*.loom' leaves the project folder"),
    ('[project]\nname = "p"\nversion = "1"\n\n[[kernels]]\nname = "k"\nsrcs = ["none/*.loom"]\n',
     "loom.toml:7: [[kernels]] 'k': key `srcs`: 'none/*.loom' matches no file"),
    ('[project]\nname = "p"\nversion = "1"\n\n[[kernels]]\nname = "k"\nsrcs = ["out/*.loom"]\n',
     "loom.toml:7: [[kernels]] 'k': key `srcs`: 'out/*.loom' leads outside the project folder"),
    ('[project]\nname = "p"\nversion = "1"\n\n[[kernels]]\nname = "k"\nsrcs = ["a.loom"]\nlibraries = ["nope"]\n',
     "loom.toml:8: [[kernels]] 'k': key `libraries`: no [[library]] named 'nope'"),
    ('[project]\nname = "p"\nversion = "1"\n\n[[kernels]]\nname = "k"\nsrcs = ["a.loom"]\nsrc = 1\n',
     "loom.toml:8: [[kernels]] #1: unknown key `src`"),
    ('[project]\nname = "p"\nversion = "1"\n\n[[kernels]]\nname = "k"\nsrcs = "a.loom"\n',
     "loom.toml:7: [[kernels]] 'k': key `srcs`: expected a list of strings"),
    ('[project]\nname = "p"\nversion = "1"\n\n[[kernels]]\nname = "k"\nsrcs = ["a.loom"]\nroots = ["k"]\n',
     "loom.toml:8: [[kernels]] 'k': key `roots`: 'k' is not a symbol"),
    ('[project]\nname = "p"\nversion = "1"\n[package]\nformat = "zip"\n',
     "loom.toml:5: [package]: key `format`: 'zip' is not supported"),
    ('[project\nname = "p"\n', "loom.toml:1: invalid TOML"),
    # Decoding limits past TOML's grammar were internal errors (ValueError, RecursionError),
    # and a finite float past f64's range read as infinity.
    ('[project]\nname = "p"\nversion = "1"\n[config]\nk = 1' + "0" * 5000 + "\n", "loom.toml:1: invalid TOML"),
    ('[project]\nname = "p"\nversion = "1"\n[config]\nk = ' + "[" * 100000 + "]" * 100000 + "\n",
     "loom.toml: invalid TOML: nested too deeply"),
    ('[project]\nname = "p"\nversion = "1"\n[config]\nk = 1e309\n',
     "invalid TOML: `1e309` rounds to infinity in f64"),
    # A date reached the compile workers' JSON requests: a traceback per worker thread.
    ('[project]\nname = "p"\nversion = "1"\n[config]\nk = 1979-05-27\n',
     "loom.toml:5: [config]: key `k`: a TOML date or time is no Loom literal"),
    ('[project]\nname = "p"\nversion = "1"\n[config.a]\nb = [07:32:00]\n',
     "[config]: key `a.b`: a TOML date or time is no Loom literal"),
    ('[project]\nname = "p"\nversion = "1"\n[extra]\n', "loom.toml:4: loom.toml: unknown key `extra`"),
])
def test_loom_toml_errors_name_file_line_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str,
                                                message: str) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "a.loom").write_text("")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.loom").write_text("")
    (project / "out").symlink_to(outside)
    (project / "loom.toml").write_text(toml)
    assert run("build", str(project)) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_missing_project_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("build", str(tmp_path)) == 2
    assert "loom.toml: no such file" in capsys.readouterr().err


def test_an_unwritable_cache_is_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "file" / "cache"))
    project = make_project(tmp_path / "p", sets=2)
    assert run("build", str(project), "--progress", "none") == 0
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "is not writable" in err
    assert len(list((project / "build" / "loom" / "spirv-vulkan1.3").glob("*.spv"))) == 2


def test_a_broken_library_fails_the_sets_that_use_it_once(tmp_path: Path, fresh_cache: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "p", sets=4)
    (project / "lib" / "square.loom").write_text(BROKEN)
    assert run("build", str(project), "--progress", "plain", "--keep-going") == 1
    captured = capsys.readouterr()
    assert captured.err.count("square.loom:3:2: error [PARSE/003]") == 1
    assert captured.out.count("failed set") == 2 and captured.out.count("compiled set") == 2


COMMAND = """\
func.decl public pure @twice(%x: f32) -> (f32)

kernel.def export("k") @k(%n: index) {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%n: index, %x: buffer) {
  %zero = index.constant 0 : offset
  %i = kernel.workitem.dispatch.id<x> : index
  %xv = buffer.view %x[%zero] : buffer -> view<[%n]xf32>
  %xi = view.load %xv[%i] : view<[%n]xf32> -> f32
  %r = func.call pure @twice(%xi) : (f32) -> (f32)
  view.store %r, %xv[%i] : f32, view<[%n]xf32>
  kernel.return
}

command.program.def public @go() launch(%x: buffer) {
  %n = index.constant 64 : index
  kernel.launch @k[%n](%n, %x) : [index](index, buffer)
  command.return
}
"""


def test_command_programs_build_incrementally_and_identically(tmp_path: Path, fresh_cache: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    extra = '\n[[command]]\nname = "go"\nsrcs = ["cmd/go.loom"]\nlibraries = ["twice"]\n'
    project = make_project(tmp_path / "p", sets=1, targets=("spirv:vulkan1.3", "amdgpu:gfx1100"), extra=extra)
    (project / "cmd").mkdir()
    (project / "cmd" / "go.loom").write_text(COMMAND)
    out = project / "build" / "loom"
    trace = tmp_path / "t.json"
    assert run("build", str(project), "-q", "-j", "2", "--trace", str(trace)) == 0
    cold = outputs(out)
    assert sorted(f for f in cold if "/go/" in f and f.startswith("spirv")) == [
        f"spirv-vulkan1.3/go/{n}" for n in ("go.commands.json", "kernel-0.launch.loombc", "kernel-0.loombc",
                                             "kernel-0.manifest.json", "kernel-0.spv", "program-0.loomcmd")]
    assert run("build", str(project), "-q", "--trace", str(trace)) == 0
    assert trace_events(trace) == []
    shutil.rmtree(out / "amdgpu-gfx1100" / "go")
    with monkeypatch.context() as m:
        m.setattr("loomcli.service.session.compile_session", _no_session)
        assert run("build", str(project), "-q", "--trace", str(trace)) == 0
    assert trace_events(trace) == [] and outputs(out) == cold  # from the cache, nothing compiled
    shutil.rmtree(out)
    assert run("build", str(project), "-q", "-j", "1", "--no-cache") == 0
    assert outputs(out) == cold


def test_a_decoded_library_is_kept_by_name_and_content(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that compiles set after set (a pool worker; a warm server child, one build
    after another) decodes each library once: two libraries of one content under two names
    stay two inputs, each keyed by its own name (the key `module.import` names)."""
    import hashlib

    from loomcli.build import tasks
    from loomcli.bytecode import write_module
    from loomcli.frontend import load_bytes

    monkeypatch.setattr(tasks, "_LIBRARIES", {})
    data = write_module(load_bytes(LIBRARY.format(helper="twice", op="addf").encode(), "lib/twice.loom"))
    digest = hashlib.sha256(data).hexdigest()
    first, second = tasks._library("twice", digest, data), tasks._library("double", digest, data)
    assert [(i.key, i.library) for i in (first, second)] == [("twice", True), ("double", True)]
    assert tasks._library("twice", digest, data) is first
