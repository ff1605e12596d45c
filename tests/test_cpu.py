"""The cpu device (`loom test --device cpu`, target cpu:x86-64): the shared
LLVM lowering compiled for this machine and run natively. The conformance
suite and the regression files run on it from their own tests; here: the
samples and tests/exec, subgroups of the profile's size (short last ones
included), the run-time's half conversions against IEEE rounding, its
deadlock report, traps as EXEC/002, benchmarks, and the object itself."""

from __future__ import annotations

import ctypes
import itertools
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = [ROOT / "samples" / f"{n}.loom" for n in ("saxpy", "reduction", "matmul")]
EXEC = sorted((ROOT / "tests" / "exec").glob("*.loom"))


def loom(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    env.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=900)


def test_samples_and_execution_tests_pass_on_cpu() -> None:
    r = loom("test", "--device", "cpu", *map(str, EXEC + SAMPLES))
    assert "internal" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    cases = sum(len(re.findall(r"^check\.case ", p.read_text(), re.M)) for p in EXEC + SAMPLES)
    assert r.stdout.splitlines()[-1] == f"{cases} passed, 0 failed", r.stdout + r.stderr
    assert r.returncode == 0


def test_targets_lists_the_host_profile() -> None:
    r = loom("targets")
    line = next(x for x in r.stdout.splitlines() if x.startswith("cpu:x86-64 "))
    assert "triple=x86_64-unknown-linux-gnu" in line and "subgroup_size=8" in line and "index_bitwidth=64" in line


def test_object_is_a_deterministic_x86_64_relocatable(tmp_path: Path) -> None:
    a, b = tmp_path / "a.o", tmp_path / "b.o"
    for out in (a, b):
        r = loom("compile", "samples/matmul.loom", "--target", "cpu:x86-64", "-o", str(out))
        assert r.returncode == 0, r.stderr
    assert a.read_bytes() == b.read_bytes()
    readelf = shutil.which("llvm-readelf") or shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf")
    header = subprocess.run([readelf, "-h", str(a)], capture_output=True, text=True, check=True).stdout
    assert "REL (Relocatable file)" in header and "X86-64" in header
    symbols = subprocess.run([readelf, "-s", "-W", str(a)], capture_output=True, text=True, check=True).stdout
    assert "matmul_f32.loom_cpu_entry" in symbols and " loom_cpu_run" in symbols
    # Nothing but libc's memset and libm is left to the loader (no compiler-rt).
    undefined = {line.split()[-1] for line in symbols.splitlines() if " UND " in line and line.split()[-1] != "UND"}
    assert undefined <= {"memset", "memcpy", "fma", "fmaf", "floor", "floorf", "ceil", "ceilf"}, undefined


SUBGROUPS = """
kernel.def export("lanes") @lanes() {
  %one = index.constant 1 : index
  %n = index.constant 20 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%n, %one, %one) : index
} launch(%out: buffer) {
  %o = index.constant 0 : offset
  %t = kernel.workitem.id<x> : index
  %ov = buffer.view %out[%o] : buffer -> view<20x4xi32>
  %size = kernel.subgroup.size : index
  %lane = kernel.subgroup.lane.id : index
  %one32 = scalar.constant 1 : i32
  %count = kernel.subgroup.reduce<addi> %one32 : i32
  %t32 = index.cast %t : index to i32
  %sum = kernel.subgroup.reduce<addi> %t32 : i32
  %s32 = index.cast %size : index to i32
  %l32 = index.cast %lane : index to i32
  view.store %s32, %ov[%t, 0] : i32, view<20x4xi32>
  view.store %l32, %ov[%t, 1] : i32, view<20x4xi32>
  view.store %count, %ov[%t, 2] : i32, view<20x4xi32>
  view.store %sum, %ov[%t, 3] : i32, view<20x4xi32>
  kernel.return
}

check.case @lanes_case {
  %out = check.generate.fill value(-1) : tensor<20x4xi32>
  kernel.launch @lanes(%out) : (tensor<20x4xi32>)
  check.return
}
"""


def test_subgroups_have_the_profiles_size_and_a_short_last_one(tmp_path: Path) -> None:
    """20 invocations in subgroups of 8: lanes 0-7, 0-7, 0-3; reductions over each."""
    from loomcli.check.cases import CaseRunner
    from loomcli.check.cpu import CpuLauncher, CpuRunner
    from loomcli.check.launch import Program
    from loomcli.emit.artifacts import emit
    from loomcli.frontend import load_module
    from loomcli.service.front import CompileOptions, compile_module
    from loomcli.targets.profiles import parse_target

    path = tmp_path / "lanes.loom"
    path.write_text(SUBGROUPS)
    profile = parse_target("cpu:x86-64")
    compiled = compile_module(CompileOptions(input=str(path), profile=profile, roots=["@lanes"], for_execution=True))
    art = emit(compiled.module, profile, "cpu-object")
    program = Program.build(compiled.module, profile, art.data, art.kernels, target_checked=True)
    runner = CpuRunner(profile)
    seen: list[bytes] = []

    class Keep(CpuLauncher):
        def launch(self, op, workload, args):  # type: ignore[no-untyped-def]
            super().launch(op, workload, args)
            seen.append(bytes(args[0].data))

    try:
        module = load_module(str(path))
        case = module.symbols()["lanes_case"]
        [result] = CaseRunner(module, Keep(runner, program, str(path)), path=str(path)).run_case(case)
        assert result.passed, result.diagnostics
    finally:
        runner.close()
    rows = [struct.unpack_from("<4i", seen[0], 16 * t) for t in range(20)]
    for t, (size, lane, count, total) in enumerate(rows):
        first = t - t % 8
        members = range(first, min(first + 8, 20))
        assert (size, lane, count, total) == (8, t % 8, len(members), sum(members)), t


# ---------------------------------------------------------------- the run-time, directly


def _jit(ir: str, exports: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """`ir` linked with the run-time and compiled as the cpu device does."""
    llvm = pytest.importorskip("llvmlite.binding")
    from loomcli.check import cpu_native
    from loomcli.emit.cpu.runtime import RUNTIME_IR
    from loomcli.emit.cpu.target import TRIPLE

    module = llvm.parse_assembly(f'target triple = "{TRIPLE}"\n' + ir)
    module.link_in(llvm.parse_assembly(RUNTIME_IR))
    from loomcli.emit.llvm.codegen import compile_ir

    obj = compile_ir({"triple": TRIPLE, "cpu": "x86-64", "emit": "object", "opt": 3}, str(module).encode())
    return cpu_native.Loaded(obj, f"test{random.getrandbits(64)}", exports)


CONVERT = """
define void @f2h(ptr %in, ptr %out) {
  %v = load float, ptr %in
  %h = fptrunc float %v to half
  store half %h, ptr %out
  ret void
}
define void @d2h(ptr %in, ptr %out) {
  %v = load double, ptr %in
  %h = fptrunc double %v to half
  store half %h, ptr %out
  ret void
}
define void @h2f(ptr %in, ptr %out) {
  %v = load half, ptr %in
  %f = fpext half %v to float
  store float %f, ptr %out
  ret void
}
"""


def _half_bits(x: float) -> int:
    """IEEE round to nearest even, as struct's binary16 packing does; NaN canonical."""
    if x != x:
        return 0x7E00
    try:
        return struct.unpack("<H", struct.pack("<e", x))[0]
    except OverflowError:
        return 0x7C00 | (0x8000 if x < 0 else 0)


def test_runtime_half_conversions_round_as_ieee_says() -> None:
    """x86-64 without F16C converts halves through the run-time's
    __extendhfsf2 / __truncsfhf2 / __truncdfhf2: every half widens exactly,
    floats and doubles narrow to nearest even (ties, subnormals, overflow)."""
    lib = _jit(CONVERT, ("f2h", "d2h", "h2f"))
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
    f2h, d2h, h2f = (fn(lib.address(n)) for n in ("f2h", "d2h", "h2f"))
    hin, fout = ctypes.c_uint16(), ctypes.c_uint32()   # bits: a Python float would quiet a signaling NaN
    for bits in range(1 << 16):
        hin.value = bits
        h2f(ctypes.addressof(hin), ctypes.addressof(fout))
        want = struct.unpack("<e", struct.pack("<H", bits))[0]
        if want != want:   # the payload moves up, the sign stays, a signaling NaN stays signaling
            assert fout.value == (bits & 0x8000) << 16 | 0x7F800000 | (bits & 0x3FF) << 13, hex(bits)
        else:
            assert fout.value == struct.unpack("<I", struct.pack("<f", want))[0], hex(bits)
    rng = random.Random(5)
    halves = [struct.unpack("<e", struct.pack("<H", b))[0] for b in range(0x7C00)]
    values = [rng.uniform(-1, 1) * 2.0 ** rng.randint(-30, 17) for _ in range(20000)]
    values += [h for h in halves[1:] for h in (h, -h)][::7]
    # exact ties between neighbouring halves, and their neighbours
    values += [(a + b) / 2 for a, b in itertools.pairwise(halves)][::3] + [65504.0, 65519.99, 65520.0, 2.0 ** -25,
                                                                       2.0 ** -26, float("inf"), float("nan")]
    fin, din, hout = ctypes.c_float(), ctypes.c_double(), ctypes.c_uint16()
    for x in values:
        din.value = x
        d2h(ctypes.addressof(din), ctypes.addressof(hout))
        got = hout.value if (hout.value & 0x7C00) != 0x7C00 or not hout.value & 0x3FF else 0x7E00
        assert got == _half_bits(x), (x, hex(hout.value))
        fin.value = x
        f2h(ctypes.addressof(fin), ctypes.addressof(hout))
        got = hout.value if (hout.value & 0x7C00) != 0x7C00 or not hout.value & 0x3FF else 0x7E00
        assert got == _half_bits(fin.value), (fin.value, hex(hout.value))


SKIPS_A_BARRIER = """
declare i32 @loom_cpu_workitem_id(i32)
declare void @loom_cpu_workgroup_barrier()
define void @k(ptr %args) {
  %t = call i32 @loom_cpu_workitem_id(i32 0)
  %first = icmp eq i32 %t, 0
  br i1 %first, label %out, label %wait
wait:
  call void @loom_cpu_workgroup_barrier()
  br label %out
out:
  ret void
}
"""


def test_runtime_reports_a_barrier_some_invocations_skip() -> None:
    from loomcli.check.cpu_native import STACK_BYTES, _stacks
    from loomcli.emit.cpu.runtime import DEADLOCK, OK

    lib = _jit(SKIPS_A_BARRIER, ("k",))
    stacks = _stacks()[1]
    for size, want in ((1, OK), (4, DEADLOCK)):
        geometry = (ctypes.c_uint32 * 8)(2, 1, 1, size, 1, 1, 8, 1)
        assert lib.run(lib.address("k"), 0, ctypes.addressof(geometry), stacks, STACK_BYTES) == want


# ---------------------------------------------------------------- loom test


def test_division_by_zero_fails_the_sample_as_on_the_interpreter(tmp_path: Path) -> None:
    path = tmp_path / "div.loom"
    path.write_text("""
kernel.def export("div") @div() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%d: i32, %out: buffer) {
  %o = index.constant 0 : offset
  %c0 = index.constant 0 : index
  %ov = buffer.view %out[%o] : buffer -> view<1xi32>
  %x = scalar.constant 7 : i32
  %q = scalar.divsi %x, %d : i32
  view.store %q, %ov[%c0] : i32, view<1xi32>
  kernel.return
}
check.case @by_zero {
  %d = check.literal value(0) : i32
  %out = check.generate.fill value(0) : tensor<1xi32>
  kernel.launch @div(%d, %out) : (i32, tensor<1xi32>)
  check.return
}
check.case @by_two {
  %d = check.literal value(2) : i32
  %out = check.generate.fill value(0) : tensor<1xi32>
  %want = check.generate.fill value(3) : tensor<1xi32>
  kernel.launch @div(%d, %out) : (i32, tensor<1xi32>)
  check.expect.equal actual(%out) expected(%want) : tensor<1xi32>
  check.return
}
""")
    # The test build is instrumented (LANGUAGE.md 17.37): the division reports
    # itself, as on the interpreter, before the hardware would trap.
    for device in ("cpu", "interpreter"):
        r = loom("test", "--device", device, str(path))
        assert r.returncode == 1
        assert "FAIL @by_zero" in r.stdout and "PASS @by_two" in r.stdout, r.stdout
        assert "div.loom:10:8: error [EXEC/002]: undefined behaviour: division by zero" in r.stderr, r.stderr


def test_bench_gives_native_timings() -> None:
    r = loom("test", "--device", "cpu", "--bench", "samples/saxpy.loom")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^BENCH @saxpy_big \[n=1009\] @saxpy: median [\d.]+ [num]?s \(min .*, \d+ runs\)$", r.stdout,
                     re.M), r.stdout


def test_auto_never_picks_cpu() -> None:
    # LANGUAGE.md 17.32: auto is Vulkan, else the interpreter; cpu only by name.
    no_driver = {"VK_ICD_FILENAMES": "/nonexistent/icd.json", "VK_DRIVER_FILES": "/nonexistent/icd.json"}
    r = loom("test", "-v", "--device", "auto", "samples/saxpy.loom", env=no_driver)
    assert r.returncode == 0, r.stderr
    assert "loom test: reference interpreter" in r.stderr and "cpu" not in r.stderr, r.stderr


def test_cpu_takes_only_cpu_targets() -> None:
    r = loom("test", "--device", "cpu", "--target", "spirv:vulkan1.3", "samples/saxpy.loom")
    assert r.returncode == 2 and "is not a cpu:HOST target" in r.stderr, r.stderr
