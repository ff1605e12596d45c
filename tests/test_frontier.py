"""The product frontier: preparation, classification, requests, `.loomcmd`, manifest, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.bytecode import read_module, write_module
from loomcli.diagnostics import CompileError
from loomcli.errors import UsageError
from loomcli.frontend import parse_text
from loomcli.frontier import FrontierOptions, Request, build_command_product, request_key
from loomcli.frontier.loomcmd import print_command, read_command
from loomcli.frontier.prepare import Dispatch, Group
from loomcli.ir.verifier import verify
from loomcli.targets.profiles import parse_target
from loomcli.text.printer import print_module

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "frontier"
SAMPLE = str(ROOT / "samples" / "frontier.loom")
GFX1100 = parse_target("amdgpu:gfx1100")


class Recorder:
    """A RequestSink that keeps what it was given, in order."""

    def __init__(self) -> None:
        self.published: list[Request] = []

    def publish(self, request: Request) -> None:
        self.published.append(request)


def product(path: str | Path, sink: Recorder | None = None, **kw):
    kw.setdefault("profile", GFX1100)
    return build_command_product(FrontierOptions(input=str(path), **kw), sink)


def codes(e: pytest.ExceptionInfo) -> list[str]:
    return [d.code for d in e.value.diagnostics]


def loom(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    full.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], cwd=cwd, capture_output=True, env=full)


# ---------------------------------------------------------------- the sample (LANGUAGE.md 16, example 5)


def test_sample_requirements_and_requests() -> None:
    sink = Recorder()
    p = product(SAMPLE, sink)
    assert [p.summary(prog) for prog in p.programs] == ["command=run requirements=4 compiled=3 external=1"]
    assert [(r.ordinal, r.symbol, r.kind, r.request) for r in p.requirements] == [
        (0, "local", "source", "kernel-0.loombc"), (1, "classified", "source", "kernel-1.loombc"),
        (2, "classified", "source", "kernel-2.loombc"), (3, "external", "external", None)]
    # Published as they became available, in requirement order, and returned too.
    assert sink.published == list(p.requests)
    assert [(r.name, r.roots, [(b.requirement, b.root) for b in r.bindings], r.export) for r in p.requests] == [
        ("kernel-0", ("@local",), [(0, 0)], "local"), ("kernel-1", ("@classified",), [(1, 0)], "classified"),
        ("kernel-2", ("@classified",), [(2, 0)], "classified")]


def test_sample_requests_apply_the_winners() -> None:
    p = product(SAMPLE)
    texts = [print_module(read_module(r.data, r.name)) for r in p.requests]
    assert "template.call @small(%size) : (index)" in texts[1] and "@large" not in texts[1]
    assert "%size_1 = index.assume %size [ge(%size, 128)] : index\n  template.call @large(%size_1)" in texts[2]
    assert "@small" not in texts[2]
    assert all("template.apply" not in t and "@trace" not in t and "command." not in t for t in texts)


def test_requests_round_trip_to_canonical_text(tmp_path: Path) -> None:
    for path in (SAMPLE, DATA / "shared.loom"):
        for r in product(path, spec=["@second.steps=2"] if "shared" in str(path) else []).requests:
            module = read_module(r.data, r.name)
            assert not [d for d in verify(module) if d.severity == "error"]
            text = print_module(module)
            again = parse_text(text, "again.loom")
            assert print_module(again) == text
            assert write_module(again, keep_debug=False) == r.data
            kernel = [op for op in module.ops if op.name == "kernel.def"]
            assert len(kernel) == 1 and kernel[0].attr("retain", None) and "@" + kernel[0].attr("sym") == r.roots[0]
            assert r.key == request_key(r.data, r.roots, r.route)
            (tmp_path / "k.loom").write_text(text)
            check = loom("fmt", "--check", str(tmp_path / "k.loom"))
            assert check.returncode == 0, check.stderr.decode()


def test_sample_manifest() -> None:
    p = product(SAMPLE)
    doc = json.loads(p.manifest())
    assert doc["schema_version"] == 1 and doc["format"] == "loom-command-set" and doc["name"] == "frontier"
    assert doc["programs"] == [{"symbol": "run", "artifact": "program-0.loomcmd",
                                "byte_length": len(p.programs[0].data), "sha256": doc["programs"][0]["sha256"],
                                "entry_requirements": [0, 1, 2, 3]}]
    assert doc["entries"] == [{"symbol": "local", "source_request": "kernel-0.loombc"},
                              {"symbol": "classified", "source_request": "kernel-1.loombc"},
                              {"symbol": "classified", "source_request": "kernel-2.loombc"},
                              {"symbol": "external"}]


def test_dead_branch_makes_no_request() -> None:
    dead = product(SAMPLE)
    assert all("@trace" not in r.roots for r in dead.requests)
    live = product(SAMPLE, config=["run.trace=true"])
    assert [r.roots[0] for r in live.requests] == ["@local", "@classified", "@classified", "@trace"]
    assert live.summary(live.programs[0]) == "command=run requirements=5 compiled=4 external=1"


# ---------------------------------------------------------------- classes, roots, loops, externals


def test_classes_shared_by_sites_and_roots() -> None:
    p = product(DATA / "shared.loom", spec=["@second.steps=3"])
    assert [(r.symbol, r.kind) for r in p.requirements] == [("scale", "source"), ("host_copy", "external"),
                                                            ("scale", "source")]
    first, second = p.programs
    assert [d.requirement for d in _dispatches(first.file.root)] == [0, 0, 1, 2]   # sites n=1 and n=2 share a class
    assert [d.requirement for d in _dispatches(second.file.root)] == [0, 0, 0, 1]  # the second root reuses it
    assert first.requirements == (0, 1, 2) and second.requirements == (0, 1)
    assert [r.name for r in p.requests] == ["kernel-0", "kernel-2"]
    assert [p.summary(prog) for prog in p.programs] == ["command=first requirements=3 compiled=2 external=1",
                                                         "command=second requirements=2 compiled=1 external=1"]


def test_loop_unrolls_into_its_parent_node() -> None:
    p = product(DATA / "shared.loom", spec=["@second.steps=3"])
    root = p.programs[1].file.root
    assert [type(c).__name__ for c in root.children] == ["Group", "Dispatch"]
    loop = root.children[0]
    assert loop.kind == "concurrent"
    assert [(d.workgroups, d.arguments[0].value) for d in loop.children] == [((3, 1, 1), 3), ((4, 1, 1), 4),
                                                                               ((5, 1, 1), 5)]
    one = product(DATA / "shared.loom", spec=["@second.steps=1"]).programs[1].file.root
    assert isinstance(one.children[0], Dispatch)  # a one-child group collapses


def test_external_entries_make_no_request() -> None:
    p = product(DATA / "shared.loom", spec=["@second.steps=2"])
    external = [r for r in p.requirements if r.kind == "external"]
    assert [(r.symbol, r.request) for r in external] == [("host_copy", None)]
    assert all(r.roots != ("@host_copy",) for r in p.requests)
    copy = next(d for d in _dispatches(p.programs[0].file.root) if d.requirement == external[0].ordinal)
    assert copy.workgroups == (2, 1, 1) and copy.workgroup_size == (0, 0, 0)
    assert [(a.type, a.value) for a in copy.arguments] == [("buffer", 0), ("buffer", 1)]


def test_child_programs_are_inlined_with_their_constants() -> None:
    p = product(DATA / "children.loom", spec=["@main.n=3"])
    text = print_command(p.programs[0].file)
    assert text == ("program @main %n=3:index launch(%a, %b) target=amdgpu:gfx1100\n"
                    "  concurrent\n"
                    "    serial\n"
                    "      dispatch requirement=0 workgroups=3x1x1 workgroup_size=64x1x1 0.5:f32 %a\n"
                    "      dispatch requirement=0 workgroups=3x1x1 workgroup_size=64x1x1 0.5:f32 %a\n"
                    "    serial\n"
                    "      dispatch requirement=0 workgroups=6x1x1 workgroup_size=64x1x1 0.5:f32 %b\n"
                    "      dispatch requirement=0 workgroups=6x1x1 workgroup_size=64x1x1 0.5:f32 %b\n")
    assert [r.roots for r in p.requests] == [("@fill",)]


def test_content_key_ignores_the_parent_binding(tmp_path: Path) -> None:
    """Two products that number one class differently carry one request content (one compiled child)."""
    a = product(SAMPLE).requests[1]
    src = (ROOT / "samples" / "frontier.loom").read_text().replace(
        "  kernel.launch @local(%buf) : (buffer)\n  command.concurrent {", "  command.concurrent {", 1)
    (tmp_path / "other.loom").write_text(src)
    b = product(tmp_path / "other.loom").requests[0]
    assert (a.bindings[0].requirement, b.bindings[0].requirement) == (1, 0)
    assert a.key == b.key and a.data == b.data


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize("path, kw, code, where", [
    ("not_closed.loom", {}, "STRUCTURE/011", (22, 20)),
    ("config_topology.loom", {}, "CONFIG/003", (12, 11)),
    ("children.loom", {"spec": ["@main.n=8"]}, "LAUNCH_CONFIG/005", (23, 5)),   # a child's where
    ("children.loom", {"spec": ["@main.n=9"]}, "LAUNCH_CONFIG/005", (0, 0)),    # the --spec value
    ("children.loom", {}, "LAUNCH_CONFIG/004", (0, 0)),                          # unbound
    ("children.loom", {"spec": ["@main.n=1.5"]}, "LAUNCH_CONFIG/004", (0, 0)),   # not an index
])
def test_preparation_errors(path: str, kw: dict, code: str, where: tuple[int, int]) -> None:
    with pytest.raises(CompileError) as e:
        product(DATA / path, **kw)
    d = e.value.diagnostics[0]
    assert (d.code, (d.line, d.column)) == (code, where), d.render()


@pytest.mark.parametrize("spec, words", [
    ("main.n=3", "expected @program.argument=VALUE"),
    ("@main=3", "expected @program.argument=VALUE"),
    ("@stage.n=3", "is not a root command program"),
    ("@main.k=3", "has no specialization argument %k"),
])
def test_bad_spec_is_a_usage_error(spec: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        product(DATA / "children.loom", spec=[spec])


def test_parent_failing_after_publication_keeps_what_was_published() -> None:
    """Publication is provisional: the request reached before the error was published, the product fails."""
    sink = Recorder()
    with pytest.raises(CompileError) as e:
        product(DATA / "not_closed.loom", sink)
    assert codes(e) == ["STRUCTURE/011"]
    assert [r.roots for r in sink.published] == [("@other",)]
    assert [(b.requirement, b.root) for b in sink.published[0].bindings] == [(0, 0)]


def test_too_many_launches_do_not_close(tmp_path: Path) -> None:
    src = (DATA / "shared.loom").read_text().replace("where [range(%steps, 1, 8)]", "")
    (tmp_path / "big.loom").write_text(src)
    with pytest.raises(CompileError) as e:
        product(tmp_path / "big.loom", spec=["@second.steps=70000"], roots=["@second"])
    d = e.value.diagnostics[0]
    assert d.code == "STRUCTURE/011" and "`%steps`" in d.message


@pytest.mark.parametrize("body", [
    "",  # a loop that launches nothing
    # ... or launches only in an untaken branch
    "scf.if %never {\n        kernel.launch @scale[%n](%n, %x) : [index](index, buffer)\n      }",
])
def test_a_loop_too_long_to_fold_does_not_close_in_bounded_time(tmp_path: Path, body: str) -> None:
    """10^12 iterations that launch nothing were folded one at a time, for days (issue 25, item 10)."""
    src = (DATA / "shared.loom").read_text().replace("where [range(%steps, 1, 8)]", "")
    launch = "      kernel.launch @scale[%n](%n, %x) : [index](index, buffer)\n"
    assert launch in src
    src = src.replace(launch, ("      " + body + "\n") if body else "", 1)
    src = src.replace("%c3 = index.constant 3 : index\n",
                      "%c3 = index.constant 3 : index\n  %never = index.cast %c0 : index to i1\n", 1)
    (tmp_path / "long.loom").write_text(src)
    r = loom("frontier", str(tmp_path / "long.loom"), "--target", "gfx1100", "--out-dir", str(tmp_path / "out"),
             "--spec", "@second.steps=1000000000000", "--root", "@second")
    assert r.returncode == 1 and b"STRUCTURE/011" in r.stderr and b"`%steps`" in r.stderr, r.stderr.decode()
    assert b"Traceback" not in r.stderr


LAUNCH_NOT_FOLDING = """\
kernel.def @k() {
  %one = index.constant 1 : index
  %s = target.subgroup.size : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%s, %one, %one) : index
} launch(%x: buffer) {
  kernel.return
}

command.program.def public @run() launch(%x: buffer) {
  kernel.launch @k(%x) : (buffer)
  command.return
}
"""


def test_launch_config_that_does_not_fold(tmp_path: Path) -> None:
    (tmp_path / "p.loom").write_text(LAUNCH_NOT_FOLDING)
    with pytest.raises(CompileError) as e:
        product(tmp_path / "p.loom", profile=None)
    assert codes(e) == ["LAUNCH_CONFIG/008"]
    folded = product(tmp_path / "p.loom")  # with a target the subgroup size is known
    assert _dispatches(folded.programs[0].file.root)[0].workgroup_size == (32, 1, 1)


OPEN_WITHOUT_TARGET = """\
amdgpu.target<gfx1100> @rdna3 {}

template.decl @pick()

template.def<@pick> target(@rdna3) @only() {
  template.return
}

kernel.def @k() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%x: buffer) {
  template.apply<@pick>() : ()
  kernel.return
}

command.program.def public @run() launch(%x: buffer) {
  kernel.launch @k(%x) : (buffer)
  command.return
}
"""


def test_open_apply_without_target_is_link_006(tmp_path: Path) -> None:
    (tmp_path / "p.loom").write_text(OPEN_WITHOUT_TARGET)
    with pytest.raises(CompileError) as e:
        product(tmp_path / "p.loom", profile=None)
    assert codes(e) == ["LINK/006"]
    assert len(product(tmp_path / "p.loom").requests) == 1


def test_roots_must_be_command_programs() -> None:
    with pytest.raises(UsageError, match=r"not a command\.program\.def"):
        product(SAMPLE, roots=["@local"])


def test_without_a_sink_the_product_is_the_same() -> None:
    sink = Recorder()
    a, b = product(SAMPLE, sink), product(SAMPLE)
    assert [p.data for p in a.programs] == [p.data for p in b.programs]
    assert a.manifest() == b.manifest() and a.requests == b.requests


# ---------------------------------------------------------------- the command line


def test_cli_sample_and_print(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = loom("frontier", SAMPLE, "--target", "amdgpu:gfx1100", "--out-dir", str(out))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == "command=run requirements=4 compiled=3 external=1\n"
    assert sorted(os.listdir(out)) == ["frontier.commands.json", "kernel-0.loombc", "kernel-1.loombc",
                                       "kernel-2.loombc", "program-0.loomcmd"]
    shown = loom("frontier", "--print", str(out / "program-0.loomcmd"))
    assert shown.returncode == 0, shown.stderr.decode()
    assert shown.stdout.decode() == (DATA / "frontier.print").read_text()


def test_cli_no_requests_writes_identical_bytes(tmp_path: Path) -> None:
    full, bare = tmp_path / "full", tmp_path / "bare"
    assert loom("frontier", SAMPLE, "--target", "gfx1100", "--out-dir", str(full)).returncode == 0
    r = loom("frontier", SAMPLE, "--target", "gfx1100", "--out-dir", str(bare), "--no-requests")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == "command=run requirements=4 compiled=3 external=1\n"
    assert sorted(os.listdir(bare)) == ["frontier.commands.json", "program-0.loomcmd"]
    for name in os.listdir(bare):
        assert (bare / name).read_bytes() == (full / name).read_bytes()


def test_cli_quiet_writes_the_product_and_prints_nothing(tmp_path: Path) -> None:
    r = loom("frontier", SAMPLE, "--target", "gfx1100", "--out-dir", str(tmp_path), "-q")
    assert r.returncode == 0, r.stderr.decode()
    assert (r.stdout, r.stderr) == (b"", b"")
    assert "program-0.loomcmd" in os.listdir(tmp_path)


def test_cli_failure_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = loom("frontier", str(DATA / "not_closed.loom"), "--target", "gfx1100", "--out-dir", str(out))
    assert r.returncode == 1 and b"STRUCTURE/011" in r.stderr and b"Traceback" not in r.stderr
    assert not out.exists() or not os.listdir(out)


@pytest.mark.parametrize("args, words", [
    ([], "missing --out-dir"),
    (["--no-requests", "--compile"], "exclude each other"),
    (["-j", "2"], "-j needs --compile"),
    (["--spec", "nope"], "expected @program.argument=VALUE"),
    (["--target", "gfx1"], "unknown target"),
])
def test_cli_usage_errors(args: list[str], words: str, tmp_path: Path) -> None:
    extra = ["--out-dir", str(tmp_path / "o")] if args and args[0] != "-j" and "missing" not in words else []
    if args[:1] == ["-j"]:
        extra = ["--out-dir", str(tmp_path / "o")]
    r = loom("frontier", SAMPLE, *args, *extra)
    assert r.returncode == 2, r.stderr.decode()
    assert words in r.stderr.decode()


def test_cli_print_rejects_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.loomcmd"
    bad.write_bytes(b"LOOMCMD\0\x02\0\0\0")
    r = loom("frontier", "--print", str(bad))
    assert r.returncode == 1 and b"BYTECODE/001" in r.stderr and b"Traceback" not in r.stderr


def _dispatches(node) -> list[Dispatch]:
    if isinstance(node, Dispatch):
        return [node]
    assert isinstance(node, Group)
    return [d for c in node.children for d in _dispatches(c)]


def test_command_file_round_trip() -> None:
    for prog in product(DATA / "shared.loom", spec=["@second.steps=4"]).programs:
        assert read_command(prog.data) == prog.file
