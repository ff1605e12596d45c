"""The embedding API (TOOLCHAIN.md section 15, docs/api.md): one test per row,
the sharing contract, status against result, and the samples' exact lines."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from task_hooks import task_hook

import loomcli as loom

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

LIBRARY = """\
func.def public pure inline @twice(%x: index) -> (index) {
  %y = index.add %x, %x : index
  func.return %y : index
}
"""

USER = """\
func.decl public pure @twice(%x: index) -> (index)

kernel.def export("grid") @grid(%n: index) {
  %one = index.constant 1 : index
  %size = index.constant 32 : index
  %twice = func.call pure @twice(%n) : (index) -> (index)
  %groups = index.div %twice, %size : index
  kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%size, %one, %one) : index
} launch() {
  kernel.return
}
"""


def saxpy() -> loom.Source:
    return loom.Source.from_path(SAMPLES / "saxpy.loom")


def test_import_is_cheap() -> None:
    code = ("import sys, loomcli as loom\n"
            "heavy = [m for m in sys.modules if m.split('.')[0] in ('llvmlite', 'click', 'rich', 'vulkan')]\n"
            "assert not heavy, heavy\nassert 'loomcli.api' not in sys.modules\n"
            "loom.Source; assert 'loomcli.api' in sys.modules\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
    assert out.stdout == "ok\n", out.stderr


def test_sources_in_memory_from_text_bytes_and_path() -> None:
    text = saxpy().data.decode()
    compiler = loom.Compiler()
    bc = compiler.compile(loom.Source.from_text(text, name="saxpy.loom")).artifacts["loom-bytecode"]
    assert bc.name == "saxpy.loombc" and bc.data.startswith(b"LOOM")
    again = compiler.compile(loom.Source.from_bytes(bc.data, name="saxpy.loombc"), target="spirv:vulkan1.3",
                             outputs=("spirv-binary",))
    direct = compiler.compile(saxpy(), target="spirv:vulkan1.3", outputs=("spirv-binary",))
    assert again.ok and direct.ok
    assert again.artifacts["spirv-binary"].data == direct.artifacts["spirv-binary"].data
    assert direct.artifacts["spirv-binary"].data[:4] == b"\x03\x02\x23\x07"


def test_several_outputs_from_one_compile_and_exports() -> None:
    result = loom.Compiler().compile(saxpy(), target=loom.Target("amdgpu:gfx1100"),
                                     outputs=("amdgpu-hsaco", "launch-config", "manifest", "loom-text"))
    assert result.ok and list(result.artifacts) == ["amdgpu-hsaco", "launch-config", "manifest", "loom-text"]
    assert result.artifacts["amdgpu-hsaco"].data[:4] == b"\x7fELF"
    assert b'"saxpy.hsaco"' in result.artifacts["manifest"].data
    assert result.exports == ("saxpy",)


def test_link_index_is_a_library_catalog() -> None:
    libraries = loom.LinkIndex([loom.Source.from_text(LIBRARY, name="lib.loom")])
    compiler = loom.Compiler()
    result = compiler.compile(loom.Source.from_text(USER, name="user.loom"), target="amdgpu:gfx1100",
                              libraries=libraries, outputs=("launch-config",))
    assert result.ok, result.diagnostics
    program = loom.LaunchProgram(result.artifacts["launch-config"].data)
    assert program.invoke(program.lookup("grid"), [64]).workgroups == (4, 1, 1)
    alone = compiler.compile(loom.Source.from_text(USER, name="user.loom"), target="amdgpu:gfx1100",
                             outputs=("launch-config",))
    assert not alone.ok and alone.diagnostics[0].file == "user.loom"


def test_a_shared_link_index_is_indexed_once_and_never_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import loomcli.frontend
    from loomcli.text.printer import print_module

    parsed: list[str] = []
    load = loomcli.frontend.load_bytes
    monkeypatch.setattr(loomcli.frontend, "load_bytes", lambda data, name, **kw: (parsed.append(name),
                                                                                   load(data, name, **kw))[1])
    libraries = loom.LinkIndex([loom.Source.from_text(LIBRARY, name="lib.loom")])
    assert parsed == ["lib.loom"]
    (library,) = libraries.inputs()
    before = print_module(library.module())
    compiler = loom.Compiler()

    def compile_one(n: int) -> loom.Result:
        return compiler.compile(loom.Source.from_text(USER, name="user.loom"), target="spirv:vulkan1.3",
                                libraries=libraries, outputs=("spirv-binary", "launch-config"))

    with ThreadPoolExecutor(4) as executor:
        results = list(executor.map(compile_one, range(8)))
    assert parsed == ["lib.loom"]  # eight compiles on four threads, one parse
    assert all(r.ok for r in results) and len({tuple(a.data for a in r.artifacts.values()) for r in results}) == 1
    assert print_module(library.module()) == before  # linking copies what it takes
    with pytest.raises(dataclasses.FrozenInstanceError):
        libraries.sources = ()  # type: ignore[misc]
    broken = loom.LinkIndex([loom.Source.from_text("func.def @f( {\n", name="broken.loom")])
    result = compiler.compile(loom.Source.from_text(USER, name="user.loom"), target="spirv:vulkan1.3",
                              libraries=broken, outputs=("spirv-binary",))
    assert not result.ok and result.diagnostics[0].file == "broken.loom"


def test_targets_are_the_profiles() -> None:
    names = [t.name for t in loom.targets()]
    assert "amdgpu:gfx1100" in names and "spirv:vulkan1.3" in names and "nvptx:sm_90" in names
    assert loom.Target("gfx1100") == loom.Target("amdgpu:gfx1100")
    with pytest.raises(loom.UsageError, match="unknown target"):
        loom.Target("amdgpu:gfx0")


@pytest.mark.parametrize("call", [
    lambda: loom.Compiler(pipeline="no-such-pass"),
    lambda: loom.Compiler().compile(saxpy(), outputs=("spirv",)),
    lambda: loom.Compiler().compile(saxpy(), outputs=("spirv-binary",)),          # no target
    lambda: loom.Compiler().compile("kernel.def ...", outputs=("loom-bytecode",)),  # not a Source
    lambda: loom.Compiler().compile(saxpy(), target=3),
    lambda: loom.Source.from_text(b"bytes"),
    lambda: loom.TaskPool(max_workers=0),
])
def test_misuse_raises_usage_error(call) -> None:
    with pytest.raises(loom.UsageError):
        call()


def test_a_failed_compile_is_a_result_with_the_cli_text(tmp_path: Path) -> None:
    bad = "kernel.def @k( {\n"
    result = loom.Compiler().compile(loom.Source.from_text(bad, name=str(tmp_path / "bad.loom")))
    assert not result.ok and not result.artifacts
    (tmp_path / "bad.loom").write_text(bad)
    cli = subprocess.run([sys.executable, "-m", "loomcli", "compile", str(tmp_path / "bad.loom"), "-o",
                          str(tmp_path / "bad.loombc")], env=ENV, capture_output=True, text=True)
    assert cli.returncode == 1
    first = result.diagnostics[0]
    assert (first.code, first.line, first.column) == ("PARSE/003", 1, 16)
    assert str(first) == cli.stderr.splitlines()[0]


def test_compile_from_many_threads_matches_serial() -> None:
    compiler = loom.Compiler()
    source = saxpy()
    kinds = [("spirv:vulkan1.3", "spirv-binary"), ("amdgpu:gfx1100", "amdgpu-hsaco")] * 4
    serial = [compiler.compile(source, target=t, outputs=(o,)).artifacts[o].data for t, o in kinds]
    barrier = threading.Barrier(len(kinds))

    def one(kind: tuple[str, str]) -> bytes:
        barrier.wait()
        return compiler.compile(source, target=kind[0], outputs=(kind[1],)).artifacts[kind[1]].data

    with ThreadPoolExecutor(len(kinds)) as pool:
        assert list(pool.map(one, kinds)) == serial


def test_launch_program_str_is_the_launch_eval_line(tmp_path: Path) -> None:
    result = loom.Compiler().compile(saxpy(), target="amdgpu:gfx1100", outputs=("launch-config",))
    data = result.artifacts["launch-config"].data
    (tmp_path / "saxpy.launch.loombc").write_bytes(data)
    program = loom.LaunchProgram(data)
    launch = program.invoke(program.lookup("saxpy"), [1000])
    cli = subprocess.run([sys.executable, "-m", "loomcli", "launch-eval", str(tmp_path / "saxpy.launch.loombc"),
                          "saxpy", "1000"], env=ENV, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert str(launch) == cli.stdout.strip()
    with pytest.raises(loom.UsageError):
        program.lookup("nope")


def test_frontier_sink_runs_during_construction_and_keys_skip_bindings() -> None:
    source = loom.Source.from_path(SAMPLES / "frontier.loom")
    seen: list[loom.Request] = []
    returned = False

    def sink(request: loom.Request) -> None:
        assert not returned
        seen.append(request)

    product = loom.build_command_product(source, target="amdgpu:gfx1100", request_sink=sink)
    returned = True
    assert product.ok and product.summary(0) == "command=run requirements=4 compiled=3 external=1"
    assert len(seen) == 3 and all(r.route == "compiled-module" and r.bindings for r in seen)
    from loomcli.frontier.product import COMPILED_MODULE_ROUTE, request_key

    assert all(r.key == request_key(r.data, r.roots, COMPILED_MODULE_ROUTE) for r in seen)
    quiet = loom.build_command_product(source, target="amdgpu:gfx1100")
    assert [p.data for p in quiet.programs] == [p.data for p in product.programs]
    assert quiet.requirements == product.requirements
    compiler = loom.Compiler()
    with ThreadPoolExecutor(2) as executor:  # an application's own executor
        results = list(executor.map(lambda r: compiler.compile_request(r, target="amdgpu:gfx1100",
                                                                       outputs=("amdgpu-hsaco",)), seen))
    assert all(r.ok and r.artifacts["amdgpu-hsaco"].data[:4] == b"\x7fELF" for r in results)


def test_task_pool_results_match_in_process_and_a_dead_worker_is_status() -> None:
    compiler = loom.Compiler()
    want = compiler.compile(saxpy(), target="spirv:vulkan1.3", outputs=("spirv-binary",))
    with loom.TaskPool(max_workers=64) as pool:
        assert 1 <= pool.worker_count <= min(64, len(os.sched_getaffinity(0)))
        got = pool.submit_compile(saxpy(), compiler=compiler, target="spirv:vulkan1.3",
                                  outputs=("spirv-binary",)).result()
        assert got == want
        bad = pool.submit_compile(loom.Source.from_text("kernel.def @k( {\n", name="bad.loom")).result()
        assert not bad.ok and str(bad.diagnostics[0]).startswith("bad.loom:1:16: error [PARSE/003]")
        from loomcli.runtime.tasks import Task

        with pytest.raises(loom.LoomError) as failure:  # a worker whose task itself fails
            pool._submit(Task("loomcli.api:compile_task", {"sources": 1}, b"")).result()
        assert failure.value.exit_code == 3


# LLVM aborting in the middle of code generation (an assertion is SIGABRT), made deterministic
# without a hook in loom (`task_hooks`): in every worker process, the code generator's entry
# aborts the process instead of compiling.
LLVM_ABORTS = task_hook("""\
import os


def _wrap(compile_ir):
    def aborting(header, ir):
        os.abort()

    return aborting
""", module="loomcli.emit.llvm.codegen", function="compile_ir",
    workers=("loomcli.runtime.isolated", "loomcli.runtime.pool", "loomcli.runtime.forkserver"))

ABORTED = """\
import sys, loomcli as loom
saxpy = loom.Source.from_path(sys.argv[1])
try:
    loom.Compiler().compile(saxpy, target="amdgpu:gfx1100", outputs=("amdgpu-hsaco",))
except loom.LoomError as e:
    print("compile", type(e).__name__, e.exit_code, str(e).split(";")[0])
spv = loom.Compiler().compile(saxpy, target="spirv:vulkan1.3", outputs=("spirv-binary",))
print("spirv still compiles", spv.ok)
with loom.TaskPool(max_workers=1) as pool:
    try:
        pool.submit_compile(saxpy, target="amdgpu:gfx1100", outputs=("amdgpu-hsaco",)).result()
    except loom.LoomError as e:
        print("pool", type(e).__name__, e.exit_code)
"""


def test_an_llvm_abort_in_a_worker_is_loom_error_exit_3(tmp_path: Path) -> None:
    """A real worker death (SIGABRT during LLVM code generation), not a failing task: in process,
    from the pool, and on the command line (exit 3, one line, no output left behind)."""
    (tmp_path / "sitecustomize.py").write_text(LLVM_ABORTS)
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]), "LOOM_SERVER": "off"}
    script = tmp_path / "aborted.py"
    script.write_text(ABORTED)
    r = subprocess.run([sys.executable, str(script), str(SAMPLES / "saxpy.loom")], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "compile LoomError 3 internal: LLVM aborted while generating code for amdgpu:gfx1100 (signal 6)",
        "spirv still compiles True", "pool LoomError 3"]
    out = tmp_path / "k.hsaco"
    r = subprocess.run([sys.executable, "-m", "loomcli", "compile", str(SAMPLES / "saxpy.loom"), "--target",
                        "amdgpu:gfx1100", "-o", str(out), "--no-cache"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 3 and r.stdout == "" and not out.exists()
    assert r.stderr.startswith("loom: error: internal: LLVM aborted while generating code for amdgpu:gfx1100 "
                               "(signal 6)") and len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.parametrize("script, lines", [
    ("jit_task_pool.py", ["compiled=8"]),
    ("product_frontier.py", ["command=run requirements=4 compiled=3 external=1"]),
    ("jit_kernel.py", ["workload=1009 workgroups=16x1x1 workgroup_size=64x1x1",
                       "artifact=guide_jit_kernel.hsaco format=amdgpu-hsaco bytes="]),
])
def test_samples_print_the_seed_lines(script: str, lines: list[str]) -> None:
    out = subprocess.run([sys.executable, str(SAMPLES / "api" / script)], env=ENV, capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    got = out.stdout.splitlines()
    assert len(got) == len(lines)
    for line, want in zip(got, lines):
        assert line == want if not want.endswith("=") else line.startswith(want) and int(line[len(want):]) > 0


@pytest.mark.parametrize("doc", ["api.md", "spirv.md", "nvptx.md"])
def test_the_docs_first_example_runs_as_written(doc: str, capsys) -> None:
    import re

    code = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / doc).read_text(), re.S)[0]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        exec(compile(code, doc, "exec"), {})
    finally:
        os.chdir(cwd)
    if doc == "api.md":
        assert capsys.readouterr().out.startswith("workload=1009 workgroups=16x1x1 workgroup_size=64x1x1 ")


def _package(tmp_path: Path, target: str, fmt: str) -> Path:
    result = loom.Compiler().compile(saxpy(), target=target, outputs=(fmt, "launch-config", "manifest"))
    for artifact in result.artifacts.values():
        (tmp_path / artifact.name).write_bytes(artifact.data)
    return tmp_path / "saxpy.manifest.json"


def test_vulkan_host_sample_runs_saxpy_from_the_manifest(tmp_path: Path) -> None:
    from loomcli.check.vulkan import unavailable_reason

    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason())
    manifest = _package(tmp_path, "spirv:vulkan1.3", "spirv-binary")
    out = subprocess.run([sys.executable, str(SAMPLES / "host" / "vulkan_saxpy.py"), str(manifest), "1009"],
                         env=ENV, capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, "ok n=1009 workgroups=8x1x1\n"), out.stderr


def test_cuda_host_sample_packs_the_manifest_and_skips_without_a_gpu(tmp_path: Path) -> None:
    sys.path.insert(0, str(SAMPLES / "host"))
    try:
        import cuda_saxpy
    finally:
        sys.path.pop(0)
    import json

    manifest = _package(tmp_path, "nvptx:sm_90", "nvptx-ptx")
    kernel = json.loads(manifest.read_text())["kernels"][0]
    x, y = 0x7000_0000_1000, 0x7000_0000_2000
    block = cuda_saxpy.kernel_parameters(kernel, {"n": 1009, "alpha": 2.0, "x": x, "y": y})
    assert len(block) == 32
    assert struct.unpack("<QfxxxxQQ", block) == (1009, 2.0, x, y)
    out = subprocess.run([sys.executable, str(SAMPLES / "host" / "cuda_saxpy.py"), str(manifest)], env=ENV,
                         capture_output=True, text=True)
    if out.returncode == 77:   # no cuda-python, driver or device: the usual case on CI
        assert out.stdout.startswith("skip: ") and len(out.stdout.splitlines()) == 1
    else:
        assert (out.returncode, out.stdout) == (0, "ok n=1009 workgroups=8x1x1\n"), out.stderr

