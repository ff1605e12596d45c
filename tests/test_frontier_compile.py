"""`loom frontier --compile`: requests through the cache and a task sink, checked, then bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import pytest

from loomcli.cache import Cache
from loomcli.diagnostics import CompileError
from loomcli.frontier import FrontierOptions, build_command_product
from loomcli.frontier.compiling import RequestCompiler
from loomcli.frontier.loomcmd import read_command
from loomcli.launch.program import evaluate
from loomcli.runtime.tasks import InlineExecutor, Task, TaskResult
from loomcli.service.dispatch import CompileService
from loomcli.targets.profiles import parse_target

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "frontier"
SAMPLE = str(ROOT / "samples" / "frontier.loom")
GFX1100 = parse_target("amdgpu:gfx1100")


def loom(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    full.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], capture_output=True, env=full)


class CountingInline(InlineExecutor):
    """The inline sink, counting the tasks that reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[Task] = []

    def submit(self, task: Task) -> Future[TaskResult]:
        self.tasks.append(task)
        return super().submit(task)


def compile_product(path: str | Path, cache: Cache | None, **kw):
    sink = CountingInline()
    compiler = RequestCompiler(CompileService(sink, cache), kw.pop("profile", GFX1100))
    product = build_command_product(FrontierOptions(input=str(path), profile=GFX1100, **kw), compiler)
    return product, compiler.finish(product), sink


def test_cli_compiles_the_sample(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = loom("frontier", SAMPLE, "--compile", "--target", "amdgpu:gfx1100", "--out-dir", str(out), "-j", "2",
             env={"LOOM_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == "command=run requirements=4 compiled=3 external=1\n"
    doc = json.loads((out / "frontier.commands.json").read_text())
    assert [(e.get("artifact"), e.get("export")) for e in doc["entries"]] == [
        ("kernel-0.hsaco", "local"), ("kernel-1.hsaco", "classified"), ("kernel-2.hsaco", "classified"),
        (None, None)]
    for n in range(3):
        code = (out / f"kernel-{n}.hsaco").read_bytes()
        assert code[:4] == b"\x7fELF" and int.from_bytes(code[18:20], "little") == 224  # EM_AMDGPU
        manifest = json.loads((out / f"kernel-{n}.manifest.json").read_text())
        assert manifest["artifact"]["name"] == f"kernel-{n}.hsaco"
        assert [(k["export"], k["launch_config"]) for k in manifest["kernels"]] == [
            (doc["entries"][n]["export"], f"kernel-{n}.launch.loombc")]
    # The launch config of the compiled child gives the dispatch the command recorded.
    dispatch = read_command((out / "program-0.loomcmd").read_bytes()).root.children[1].children[1]
    launch = evaluate((out / "kernel-2.launch.loombc").read_bytes(), "classified", [256])
    assert (launch.workgroups, launch.workgroup_size) == (dispatch.workgroups, dispatch.workgroup_size)


def test_compile_needs_a_target(tmp_path: Path) -> None:
    r = loom("frontier", SAMPLE, "--compile", "--out-dir", str(tmp_path / "o"))
    assert r.returncode == 2 and b"--compile needs --target" in r.stderr


def test_cache_first_then_tasks(tmp_path: Path) -> None:
    cache = Cache(str(tmp_path / "cache"))
    product, compiled, sink = compile_product(SAMPLE, cache)
    assert len(sink.tasks) == 3 and sorted(compiled.bindings) == [0, 1, 2]
    again, compiled_again, sink_again = compile_product(SAMPLE, cache)
    assert sink_again.tasks == []                      # every request hit: no task was created
    assert compiled_again.files == compiled.files and again.manifest(compiled_again.bindings) == \
        product.manifest(compiled.bindings)


def test_two_products_reuse_one_compiled_child(tmp_path: Path) -> None:
    cache = Cache(str(tmp_path / "cache"))
    compile_product(SAMPLE, cache)
    src = Path(SAMPLE).read_text().replace("  kernel.launch @local(%buf) : (buffer)\n  command.concurrent {",
                                           "  command.concurrent {", 1)
    (tmp_path / "other.loom").write_text(src)
    other, compiled, sink = compile_product(tmp_path / "other.loom", cache)
    # Same classes, other requirement numbers: no compile at all, bindings follow the new numbers.
    assert sink.tasks == []
    assert [(r.ordinal, r.symbol) for r in other.requirements][:2] == [(0, "classified"), (1, "classified")]
    assert compiled.bindings[0]["artifact"] == "kernel-0.hsaco"


def test_parent_failing_after_publishing_keeps_compiled_children(tmp_path: Path) -> None:
    cache = Cache(str(tmp_path / "cache"))
    sink = CountingInline()
    compiler = RequestCompiler(CompileService(sink, cache), GFX1100)
    with pytest.raises(CompileError):
        build_command_product(FrontierOptions(input=str(DATA / "not_closed.loom"), profile=GFX1100), compiler)
    compiler.discard()
    assert len(sink.tasks) == 1 and compiler.pending == []
    # The child compiled before the parent failed is in the cache: a product reaching it creates no task.
    ok = tmp_path / "ok.loom"
    ok.write_text((DATA / "not_closed.loom").read_text().replace(
        "  %bad = index.div %one, %zero : index\n  kernel.launch @k[%bad](%x) : [index](buffer)\n", ""))
    _, compiled, again = compile_product(ok, cache)
    assert again.tasks == [] and compiled.bindings == {
        0: {"artifact": "kernel-0.hsaco", "export": "other", "launch_config": "kernel-0.launch.loombc"}}


TOO_MUCH_STORAGE = """\
kernel.def @big() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%x: buffer) {
  %bytes = index.constant 100000 : offset
  %s = buffer.alloca<workgroup> align(16) %bytes : buffer
  kernel.return
}

command.program.def public @run() launch(%x: buffer) {
  kernel.launch @big(%x) : (buffer)
  command.return
}
"""


def test_a_request_that_fails_to_compile_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "big.loom"
    src.write_text(TOO_MUCH_STORAGE)
    out = tmp_path / "out"
    assert loom("frontier", str(src), "--target", "gfx1100", "--out-dir", str(out)).returncode == 0
    r = loom("frontier", str(src), "--compile", "--target", "gfx1100", "--out-dir", str(tmp_path / "out2"))
    assert r.returncode == 1 and b"TARGET/004" in r.stderr and b"Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "out2").exists() or not os.listdir(tmp_path / "out2")


def test_outputs_do_not_depend_on_jobs_or_cache(tmp_path: Path) -> None:
    runs = []
    for n, (jobs, cache) in enumerate([("1", "c1"), ("2", "c2"), ("2", "c2")]):  # cold -j1, cold -j2, warm -j2
        out = tmp_path / f"o{n}"
        r = loom("frontier", str(DATA / "shared.loom"), "--spec", "@second.steps=3", "--compile", "--target",
                 "spirv:vulkan1.3", "--out-dir", str(out), "-j", jobs, env={"LOOM_CACHE_DIR": str(tmp_path / cache)})
        assert r.returncode == 0, r.stderr.decode()
        runs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert "kernel-0.spv" in runs[0] and "kernel-2.spv" in runs[0]
    assert runs[0] == runs[1] == runs[2]
