"""The Vulkan compute runner on committed SPIR-V (tests/data/vulkan, built from
the GLSL beside it by build.sh), the launch glue of `loom test` on a
hand-written twin of samples/saxpy.loom, and the driver's device errors.
Skipped, with the reason, where no Vulkan device can be opened."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.check.vulkan import DeviceError, ShaderFacts, VulkanRunner, shader_facts, unavailable_reason

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "vulkan"
REASON = unavailable_reason()
needs_device = pytest.mark.skipif(REASON is not None, reason=f"no Vulkan device: {REASON}")


def spv(name: str) -> bytes:
    return (DATA / f"{name}.spv").read_bytes()


@pytest.fixture(scope="module")
def runner(vulkan_runner: VulkanRunner) -> VulkanRunner:
    return vulkan_runner


def loom(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    full.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], capture_output=True, text=True, env=full,
                          cwd=ROOT)


# ------------------------------------------------------------------ SPIR-V facts (no device)


def test_shader_facts_read_entry_points_sizes_and_capabilities() -> None:
    facts = shader_facts(spv("entries"))
    assert facts.version == (1, 6)
    assert facts.entry_points == {"add_one": (8, 1, 1), "times_k": (8, 1, 1)}
    types = shader_facts(spv("types"))
    assert {9, 10, 11, 22, 39, 4433, 4448} <= types.capabilities  # f16 f64 i64 i16 i8, 16/8-bit storage
    atomic = shader_facts(spv("atomic"))
    assert "SPV_EXT_shader_atomic_float_add" in atomic.extensions and 6033 in atomic.capabilities


def test_shader_facts_reject_non_spirv() -> None:
    with pytest.raises(ValueError, match="magic"):
        shader_facts(b"\0" * 20)
    with pytest.raises(ValueError, match="size"):
        shader_facts(b"\x03\x02\x23\x07")


# ------------------------------------------------------------------ the runner


@needs_device
def test_device_facts(runner: VulkanRunner) -> None:
    info = runner.info
    assert info.api_version[:2] >= (1, 1)
    assert info.vulkan_env in ("vulkan1.1", "vulkan1.2", "vulkan1.3")
    assert info.max_push_constant_bytes >= 128
    assert info.subgroup_size >= 1 and info.min_subgroup_size <= info.max_subgroup_size
    assert info.name in info.describe()


@needs_device
def test_saxpy_with_the_abi_layout(runner: VulkanRunner) -> None:
    n = 1009
    pipe = runner.pipeline(spv("saxpy"), "saxpy", 2, 12)
    assert pipe.local_size == (128, 1, 1)
    x, y = runner.buffer(4 * n), runner.buffer(4 * n)
    try:
        x.write(struct.pack(f"<{n}f", *range(n)))
        y.write(struct.pack(f"<{n}f", *[1.0] * n))
        push = struct.pack("<Qf", n, 2.0)   # n: index slot at 0, alpha: f32 at 8
        assert runner.dispatch(pipe, [x, y], push, ((n + 127) // 128, 1, 1)) == []
        assert struct.unpack(f"<{n}f", y.read(4 * n)) == tuple(1.0 + 2.0 * i for i in range(n))
    finally:
        runner.release(x)
        runner.release(y)


@needs_device
def test_pipelines_are_cached_per_entry_point(runner: VulkanRunner) -> None:
    data = spv("entries")
    add, times = runner.pipeline(data, "add_one", 1, 0), runner.pipeline(data, "times_k", 1, 4)
    assert runner.pipeline(data, "add_one", 1, 0) is add and add is not times
    v = runner.buffer(4 * 16)
    try:
        v.write(struct.pack("<16i", *range(16)))
        runner.dispatch(add, [v], b"", (2, 1, 1))
        runner.dispatch(times, [v], struct.pack("<i", -3), (2, 1, 1))
        assert struct.unpack("<16i", v.read(64)) == tuple(-3 * (i + 1) for i in range(16))
    finally:
        runner.release(v)


@needs_device
def test_zero_workgroups_run_nothing(runner: VulkanRunner) -> None:
    pipe = runner.pipeline(spv("entries"), "add_one", 1, 0)
    v = runner.buffer(32)
    try:
        v.write(struct.pack("<8i", *range(8)))
        runner.dispatch(pipe, [v], b"", (0, 1, 1))
        assert struct.unpack("<8i", v.read(32)) == tuple(range(8))
    finally:
        runner.release(v)


@needs_device
def test_features_for_wide_and_narrow_types(runner: VulkanRunner) -> None:
    facts = runner.shader(spv("types"))
    assert runner.missing(facts) == []
    pipe = runner.pipeline(spv("types"), "types", 5, 12)
    bufs = [runner.buffer(n) for n in (32, 32, 4, 8, 8)]
    try:
        bufs[0].write(struct.pack("<4q", 1, -2, 2**40, 7))
        bufs[1].write(struct.pack("<4d", 1.0, 3.0, -0.5, 1e300))
        bufs[2].write(struct.pack("<4b", 0, 127, -1, -128))
        bufs[3].write(struct.pack("<4h", 1, -2, 16384, 3))
        bufs[4].write(struct.pack("<4e", 1.0, 0.5, -2.0, 3.0))
        push = struct.pack("<qI", 2**33, struct.unpack("<H", struct.pack("<e", 2.0))[0])
        runner.dispatch(pipe, bufs, push, (1, 1, 1))
        assert struct.unpack("<4q", bufs[0].read(32)) == (3 + 2**33, -6 + 2**33, 3 * 2**40 + 2**33, 21 + 2**33)
        assert struct.unpack("<4d", bufs[1].read(32)) == (0.5, 1.5, -0.25, 5e299)
        assert struct.unpack("<4b", bufs[2].read(4)) == (1, -128, 0, -127)
        assert struct.unpack("<4h", bufs[3].read(8)) == (-2, 4, -32768, -6)
        assert struct.unpack("<4e", bufs[4].read(8)) == (2.0, 1.0, -4.0, 6.0)
    finally:
        for b in bufs:
            runner.release(b)


@needs_device
def test_required_subgroup_size(runner: VulkanRunner) -> None:
    info = runner.info
    if not info.required_subgroup_size_compute:
        pytest.skip(f"{info.describe()} cannot require a compute subgroup size")
    size = info.min_subgroup_size
    pipe = runner.pipeline(spv("subgroup"), "subgroup", 1, 0, required_subgroup_size=size)
    out = runner.buffer(64 * 16)
    try:
        runner.dispatch(pipe, [out], b"", (1, 1, 1))
        rows = [struct.unpack_from("<4I", out.read(64 * 16), 16 * i) for i in range(64)]
        assert {r[0] for r in rows} == {size}
        assert {r[1] for r in rows} == {size}
        assert [r[2] for r in rows] == [i % size for i in range(64)]
    finally:
        runner.release(out)
    with pytest.raises(DeviceError, match="requires subgroup size"):
        runner.pipeline(spv("subgroup"), "subgroup", 1, 0, required_subgroup_size=info.max_subgroup_size * 2)


@needs_device
def test_float_atomics_need_the_extension(runner: VulkanRunner) -> None:
    facts = runner.shader(spv("atomic")) if "shaderBufferFloat32AtomicAdd" in runner.info.features else None
    if facts is None:
        with pytest.raises(DeviceError, match="shaderBufferFloat32AtomicAdd"):
            runner.shader(spv("atomic"))
        return
    pipe = runner.pipeline(spv("atomic"), "atomic", 1, 0)
    out = runner.buffer(4)
    try:
        out.write(struct.pack("<f", 0.0))
        runner.dispatch(pipe, [out], b"", (4, 1, 1))
        assert struct.unpack("<f", out.read(4)) == (float(sum(range(128))),)
    finally:
        runner.release(out)


@needs_device
def test_missing_features_are_named(runner: VulkanRunner) -> None:
    (lacking,) = runner.missing(ShaderFacts((1, 7), frozenset({1}), frozenset(), {}))
    assert lacking.startswith("SPIR-V 1.7")
    with pytest.raises(DeviceError, match=r"cannot run this module: it lacks SPIR-V 1\.7"):
        runner.check_supported(ShaderFacts((1, 7), frozenset(), frozenset(), {}))


@needs_device
def test_missing_entry_point_and_bad_arguments(runner: VulkanRunner) -> None:
    with pytest.raises(DeviceError, match=r"no GLCompute entry point `nope`.*add_one, times_k"):
        runner.pipeline(spv("entries"), "nope", 1, 0)
    with pytest.raises(DeviceError, match="storage buffers"):
        runner.pipeline(spv("entries"), "add_one", runner.info.max_storage_buffers + 1, 0)
    with pytest.raises(DeviceError, match="push constants"):
        runner.pipeline(spv("entries"), "times_k", 1, runner.info.max_push_constant_bytes + 4)
    pipe = runner.pipeline(spv("entries"), "times_k", 1, 4)
    with pytest.raises(ValueError, match="takes 1 buffers"):
        runner.dispatch(pipe, [], b"\0" * 4, (1, 1, 1))


@needs_device
def test_timed_dispatches_report_positive_times(runner: VulkanRunner) -> None:
    pipe = runner.pipeline(spv("entries"), "add_one", 1, 0)
    v = runner.buffer(64)
    try:
        v.write(bytes(64))
        times = runner.dispatch(pipe, [v], b"", (2, 1, 1), repeat=3, timed=True)
        assert len(times) == 3 and all(t >= 0 for t in times)
        assert struct.unpack("<16i", v.read(64)) == (3,) * 16
    finally:
        runner.release(v)


def test_close_twice_is_harmless() -> None:
    if REASON is not None:
        pytest.skip(f"no Vulkan device: {REASON}")
    r = VulkanRunner()
    r.buffer(16)
    r.close()
    r.close()


# ------------------------------------------------------------------ the launch glue on hand-written SPIR-V


@needs_device
def test_cases_run_through_the_abi_on_a_handwritten_saxpy(runner: VulkanRunner, tmp_path: Path) -> None:
    from loomcli.check.cases import CaseRunner
    from loomcli.check.launch import Program, VulkanLauncher
    from loomcli.frontend import load_module
    from loomcli.service.front import CompileOptions, compile_module
    from loomcli.targets.profiles import parse_target

    source = ROOT / "samples" / "saxpy.loom"
    wrong = tmp_path / "saxpy_wrong.loom"
    wrong.write_text(source.read_text().replace("value(2.0) : f32", "value(3.0) : f32"))
    profile = parse_target("spirv:vulkan1.3")
    for path, passed in ((source, [True, True, True]), (wrong, [True, False, False])):
        compiled = compile_module(CompileOptions(input=str(path), profile=profile, roots=["@saxpy"]))
        program = Program.build(compiled.module, profile, spv("saxpy"))
        module = load_module(str(path))
        cases = CaseRunner(module, VulkanLauncher(runner, program, "s.loom"))
        results = cases.run_case(module.symbols()["saxpy_case"])
        assert [r.sample.label() for r in results] == ["[n=1]", "[n=128]", "[n=1009]"]
        assert [r.passed for r in results] == passed
    # alpha = 3: y = 3x + 1 where 2x + 1 is expected; x = 0 still agrees.
    (d,) = results[1].diagnostics
    assert (d.code, d.message) == ("CHECK/001", "at [1]: actual 4.0, expected 3.0 (sample @saxpy_case [n=128])")
    assert d.file.endswith("saxpy_wrong.loom")


# ------------------------------------------------------------------ driver errors


def test_interpreter_device_runs_without_vulkan() -> None:
    r = loom("test", "samples/saxpy.loom", "--device", "interpreter")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "1 passed, 0 failed"


def test_no_driver_is_an_environment_error_with_the_install_hint() -> None:
    no_driver = {"VK_ICD_FILENAMES": "/nonexistent/icd.json", "VK_DRIVER_FILES": "/nonexistent/icd.json"}
    r = loom("test", "samples/saxpy.loom", "--device", "vulkan", env=no_driver)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("loom: error:")
    assert "apt-get install libvulkan1 mesa-vulkan-drivers" in r.stderr
    assert "Traceback" not in r.stderr
    # 17.32: auto falls back to the reference interpreter.
    r = loom("test", "samples/saxpy.loom", "--device", "auto", env=no_driver)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "1 passed, 0 failed"


@needs_device
def test_usage_errors() -> None:
    r = loom("test", "samples/saxpy.loom", "--case", "@nope")
    assert r.returncode == 2 and "no check.case @nope" in r.stderr
    r = loom("test", "samples/saxpy.loom", "--target", "amdgpu:gfx1100")
    assert r.returncode == 2 and "spirv" in r.stderr
    r = loom("test")
    assert r.returncode == 2
