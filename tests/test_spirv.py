"""The SPIR-V emitter: validation with spirv-val, determinism, TARGET
diagnostics, manifest facts, and execution on a Vulkan device (lavapipe on
CPU-only machines) against Python reference semantics (loomcli.semantics.fold).

spirv-val tests skip only when /usr/bin/spirv-val (or spirv-val on PATH) is
missing; execution tests skip when no Vulkan device is usable.
"""

from __future__ import annotations

import math
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from loomcli.diagnostics import CompileError
from loomcli.emit import Artifact
from loomcli.emit.artifacts import emit as emit_artifact
from loomcli.emit.spirv import disassemble
from loomcli.semantics import fold
from loomcli.service.front import CompileOptions, compile_module
from loomcli.targets.profiles import parse_target

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ["saxpy", "reduction", "matmul", "workload_grid", "frontier"]
ENVS = ["vulkan1.1", "vulkan1.2", "vulkan1.3"]
FAMILIES = sorted(p.name for p in (ROOT / "tests" / "spirv").glob("*.loom") if not p.name.startswith("bad_"))
SPIRV_VAL = shutil.which("spirv-val") or ("/usr/bin/spirv-val" if os.path.exists("/usr/bin/spirv-val") else None)
needs_spirv_val = pytest.mark.skipif(SPIRV_VAL is None, reason="spirv-val (SPIRV-Tools) is not installed")

_CACHE: dict[tuple[str, str], Artifact] = {}


def emit(path: Path | str, env: str = "vulkan1.3", **options: Any) -> Artifact:
    key = (str(path), env)
    if key not in _CACHE or options:
        profile = parse_target("spirv:" + env)
        compiled = compile_module(CompileOptions(input=str(path), profile=profile, **options))
        art = emit_artifact(compiled.module, profile, "spirv-binary")  # legalized by the gateway first
        if options:
            return art
        _CACHE[key] = art
    return _CACHE[key]


def validate(data: bytes, env: str, tmp_path: Path) -> None:
    spv = tmp_path / "module.spv"
    spv.write_bytes(data)
    r = subprocess.run([SPIRV_VAL, "--target-env", env, str(spv)], capture_output=True, text=True)  # type: ignore[list-item]
    assert r.returncode == 0, r.stderr + r.stdout


# ------------------------------------------------------------------ validation


@needs_spirv_val
@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_samples_validate(sample: str, env: str, tmp_path: Path) -> None:
    art = emit(ROOT / "samples" / f"{sample}.loom", env)
    assert art.kernels, "every sample exports kernels"
    validate(art.data, env, tmp_path)


@needs_spirv_val
@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("family", FAMILIES)
def test_op_families_validate(family: str, env: str, tmp_path: Path) -> None:
    validate(emit(ROOT / "tests" / "spirv" / family, env).data, env, tmp_path)


# ------------------------------------------------------------------ execution harness


@pytest.fixture(scope="module")
def device() -> Any:
    try:
        from loomcli.check.vulkan import VulkanRunner

        runner = VulkanRunner()
    except Exception as e:  # any loader or driver failure means no device here
        pytest.skip(f"no usable Vulkan device: {e}")
    yield runner
    runner.close()


_SCALAR_CODES = {"index": "<q", "offset": "<q", "i64": "<q", "f64": "<d", "f32": "<f", "i32": "<i",
                 "i16": "<i", "i8": "<i", "i1": "<I"}


def pack_push(art: Artifact, export: str, scalars: Sequence[Any]) -> bytes:
    """Push-constant bytes for `export`'s scalar parameters, in order, at their manifest offsets."""
    kernel = next(k for k in art.kernels if k["export"] == export)
    data = bytearray(kernel["push_constant_bytes"])
    params = [p for p in kernel["parameters"] if p["kind"] == "scalar"]
    assert len(params) == len(scalars)
    for p, v in zip(params, scalars):
        t = p["type"]
        if t in ("f16", "bf16"):
            raw = struct.pack("<I", fold.float_bits(_TYPES[t], v))
        else:
            raw = struct.pack(_SCALAR_CODES[t], int(v) if t not in ("f32", "f64") else v)
        data[p["byte_offset"]:p["byte_offset"] + len(raw)] = raw
    return bytes(data)


def launch(device: Any, art: Artifact, export: str, scalars: Sequence[Any], buffers: Sequence[bytes],
           groups: tuple[int, int, int]) -> list[bytes]:
    """Run one kernel; returns the buffers' contents afterwards."""
    kernel = next(k for k in art.kernels if k["export"] == export)
    pipe = device.pipeline(art.data, export, len(buffers), kernel["push_constant_bytes"],
                           kernel.get("required_subgroup_size"))
    bufs = []
    try:
        for data in buffers:
            b = device.buffer(len(data))
            b.write(data)
            bufs.append(b)
        device.dispatch(pipe, bufs, pack_push(art, export, scalars), groups)
        return [b.read(len(d)) for b, d in zip(bufs, buffers)]
    finally:
        for b in bufs:
            device.release(b)


from loomcli.ir.types import BF16, F16, F32, F64  # noqa: E402

_TYPES = {"f16": F16, "bf16": BF16, "f32": F32, "f64": F64}


def f32s(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def unpack(code: str, data: bytes) -> list[Any]:
    n = len(data) // struct.calcsize("<" + code)
    return list(struct.unpack(f"<{n}{code}", data))


def same_float(a: float, b: float) -> bool:
    """Bitwise equality up to NaN payloads (-0.0 differs from 0.0)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def ulps(a: float, b: float, t: Any) -> float:
    """Distance of a from b in units of b's last place in type t."""
    if same_float(a, b) or (a == b):
        return 0.0
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return math.inf
    mant = {F16: 11, BF16: 8, F32: 24, F64: 53}[t]
    exp = math.frexp(b)[1] if b != 0 else -1022
    min_exp = {F16: -13, BF16: -125, F32: -125, F64: -1021}[t]
    unit = math.ldexp(1.0, max(exp, min_exp) - mant)
    return abs(a - b) / unit


# ------------------------------------------------------------------ execution: samples


def test_saxpy_runs(device: Any) -> None:
    n = 1009
    for env in ENVS:
        art = emit(ROOT / "samples" / "saxpy.loom", env)
        _, y = launch(device, art, "saxpy", [n, 2.0], [f32s([float(i) for i in range(n)]), f32s([1.0] * n)],
                      ((n + 127) // 128, 1, 1))
        assert unpack("f", y) == [1.0 + 2.0 * i for i in range(n)]


def test_tree_reduction_runs(device: Any) -> None:
    n = 1024
    for env in ENVS:
        art = emit(ROOT / "samples" / "reduction.loom", env)
        _, out = launch(device, art, "sum_f32", [n], [f32s([float(i + 1) for i in range(n)]), f32s([0.0])],
                        (n // 256, 1, 1))
        assert unpack("f", out) == [524800.0]


def test_matmul_runs(device: Any) -> None:
    m, n, k = 20, 36, 40
    for env in ENVS:
        art = emit(ROOT / "samples" / "matmul.loom", env)
        _, _, c = launch(device, art, "matmul_f32", [m, n, k],
                         [f32s([1.0] * (m * k)), f32s([2.0] * (k * n)), f32s([-1.0] * (m * n))],
                         ((n + 15) // 16, (m + 15) // 16, 1))
        assert unpack("f", c) == [80.0] * (m * n)


# ------------------------------------------------------------------ execution: op families


def test_index_ops_run(device: Any) -> None:
    a, b, s, neg, o = 100, 7, 3, -100, 5
    art = emit(ROOT / "tests" / "spirv" / "index_ops.loom")
    (out,) = launch(device, art, "index_ops", [a, b, s, neg, o], [bytes(4 * 46)], (1, 1, 1))
    o1 = a * o
    want = [a + b, a - b, a * b, a // b, a % b, min(a, neg), max(a, neg), a * b + s, a & b, a | b, a ^ neg,
            a << s, neg >> s, a >> s, neg >> 40, 0, a + b,
            o1, o1 + o, o1 - o, o1 // o, o1 % b, min(o1, o), max(o1, o), o * b, o1 >> s, o * b + o,
            0, 1, 1, 1, 0, 0, 0, 1, 1, 1,
            1, 0, 1,
            -100, -100, -100, 0, 5, 156]
    assert unpack("i", out) == want


def _int_reference(op: str, x: int, y: int, bits: int) -> int:
    mask = (1 << bits) - 1
    ux, uy = x & mask, y & mask
    sx, sy = fold.signed(ux, bits), fold.signed(uy, bits)
    quotient = abs(sx) // abs(sy) * (1 if (sx < 0) == (sy < 0) else -1) if sy else 0
    table = {
        "addi": lambda: ux + uy, "subi": lambda: ux - uy, "muli": lambda: ux * uy,
        "divsi": lambda: quotient, "divui": lambda: ux // uy, "remsi": lambda: sx - quotient * sy,
        "remui": lambda: ux % uy, "minsi": lambda: min(sx, sy), "maxsi": lambda: max(sx, sy),
        "minui": lambda: min(ux, uy), "maxui": lambda: max(ux, uy), "andi": lambda: ux & uy,
        "ori": lambda: ux | uy, "xori": lambda: ux ^ uy, "shli": lambda: ux << uy, "shrsi": lambda: sx >> uy,
        "shrui": lambda: ux >> uy,
    }
    return fold.signed(table[op]() & mask, bits)


def test_scalar_int_runs(device: Any) -> None:
    ops = ["addi", "subi", "muli", "divsi", "divui", "remsi", "remui", "minsi", "maxsi", "minui", "maxui",
           "andi", "ori", "xori", "shli", "shrsi", "shrui"]
    preds = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
    art = emit(ROOT / "tests" / "spirv" / "scalar_int.loom")
    x, y, s = -0x3456789A1234567B, 0x0123456789ABCD05, 3
    out, flags = launch(device, art, "scalar_int", [x, y, s, True, False], [bytes(8 * 120), bytes(40)], (1, 1, 1))
    rows = unpack("q", out)
    for row, bits in enumerate((8, 16, 32, 64)):
        got = rows[row * 30:(row + 1) * 30]
        xs, ys = fold.signed(x & ((1 << bits) - 1), bits), fold.signed(y & ((1 << bits) - 1), bits)
        for col, op in enumerate(ops):
            rhs = s if op.startswith("sh") else ys
            assert got[col] == _int_reference(op, xs, rhs, bits), (bits, op)
        for j, p in enumerate(preds):
            ux, uy = xs & ((1 << bits) - 1), ys & ((1 << bits) - 1)
            assert got[17 + j] == int(fold.compare_int(p, xs, ys, ux, uy)), (bits, p)
        if bits < 64:
            assert got[27] == xs & ((1 << bits) - 1)
    assert rows[3 * 30 + 29] == x
    f = unpack("b", flags)
    # p = true, q = false: add sub mul and or xor minsi maxsi minui maxui divui shli shrsi shrui
    assert f[:14] == [1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1]
    # eq ne slt sle sgt sge (true reads -1) ult ule ugt uge (true reads 1)
    assert f[14:24] == [0, 1, 1, 1, 0, 0, 0, 0, 1, 1]
    assert f[24] == -1 and f[25] == x & 1


FLOAT_BINARY = ["addf", "subf", "mulf", "divf", "minimumf", "maximumf", "minnumf", "maxnumf", "powf"]
FLOAT_UNARY = ["sqrtf", "negf", "rsqrtf", "expf", "exp2f", "logf", "log2f", "tanhf", "sinf", "cosf", "absf",
               "floorf", "ceilf"]
FLOAT_CMP = ["oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une", "uno"]
SPECIALS = [0.0, -0.0, 1.0, -1.0, 1.5, -2.25, 3.0, 0.5, 2.0, -3.0, math.inf, -math.inf, math.nan, 100.0,
            1e-3, 7.25, -0.75, 1e30, 65504.0, 1.0 / 3.0]
# "Within a few ulp" (LANGUAGE.md 7.2) for exp, log, sin, tanh, pow ... of every type.
MATH_ULPS = {F16: 2, BF16: 2, F32: 4, F64: 4}
EXACT_UNARY = {"negf", "absf", "floorf", "ceilf", "sqrtf"}


def _reference_unary(op: str, x: float) -> float:
    if op in fold._FLOAT_UNARY:
        return fold._FLOAT_UNARY[op](x)
    fn = {"rsqrtf": lambda v: 1.0 / math.sqrt(v), "expf": math.exp, "exp2f": lambda v: 2.0 ** v,
          "logf": math.log, "log2f": math.log2, "tanhf": math.tanh, "sinf": math.sin, "cosf": math.cos}[op]
    try:
        return fn(x)
    except (ValueError, ZeroDivisionError):
        if op == "rsqrtf" and x == 0:
            return math.copysign(math.inf, x)
        if op in ("logf", "log2f") and x == 0:
            return -math.inf
        return math.nan
    except OverflowError:
        return math.inf


def _reference_pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except OverflowError:
        return math.inf
    except (ValueError, ZeroDivisionError):
        if x == 0 and y < 0:
            odd = y == int(y) and int(y) % 2 == 1
            return math.copysign(math.inf, x) if odd else math.inf
        return math.nan


@pytest.mark.parametrize("tname", ["f16", "bf16", "f32", "f64"])
def test_scalar_float_runs(device: Any, tname: str) -> None:
    t = _TYPES[tname]
    pairs = [(a, b) for a in SPECIALS for b in SPECIALS]
    n = len(pairs)
    art = emit(ROOT / "tests" / "spirv" / "scalar_float.loom")
    xs = [fold.round_float(F32, a) for a, _ in pairs]
    ys = [fold.round_float(F32, b) for _, b in pairs]
    _, _, out, flags = launch(device, art, f"float_{tname}", [n], [f32s(xs), f32s(ys), bytes(8 * 23 * n),
                                                                   bytes(14 * n)], ((n + 63) // 64, 1, 1))
    res = unpack("d", out)
    cmp = unpack("b", flags)
    failures = []
    for i in range(n):
        a, b = fold.round_float(t, xs[i]), fold.round_float(t, ys[i])
        for k, op in enumerate(FLOAT_BINARY):
            got = res[k * n + i]
            if op == "powf":
                want = fold.round_float(t, _reference_pow(a, b))
                if ulps(got, want, t) > MATH_ULPS[t] and not (math.isinf(want) and math.isinf(got)):
                    failures.append((op, a, b, got, want))
                continue
            want = fold.round_float(t, fold._FLOAT_BINARY[op](a, b))
            if not same_float(got, want):
                failures.append((op, a, b, got, want))
        for k, op in enumerate(FLOAT_UNARY):
            got = res[(len(FLOAT_BINARY) + k) * n + i]
            want = fold.round_float(t, _reference_unary(op, a))
            if op in EXACT_UNARY:
                if not same_float(got, want):
                    failures.append((op, a, got, want))
            elif ulps(got, want, t) > MATH_ULPS[t] and not (abs(want) < 1e-6 and abs(got - want) < 1e-6):
                failures.append((op, a, got, want))
        got = res[22 * n + i]
        want = fold.round_float(t, a * b + a) if math.isfinite(a * b + a) else a * b + a
        # GLSL.std.450 Fma: Vulkan does not require it fused (lavapipe rounds the product).
        if not (same_float(got, want) or ulps(got, want, t) <= 2):
            failures.append(("fmaf", a, b, got, want))
        for k, p in enumerate(FLOAT_CMP):
            if cmp[k * n + i] != int(fold.compare_float(p, a, b)):
                failures.append((p, a, b, cmp[k * n + i]))
    assert not failures, failures[:20]


def _collatz_steps(v: int) -> int:
    n = 0
    while v != 1:
        v = 3 * v + 1 if v % 2 else v // 2
        n += 1
    return n


def test_control_flow_runs(device: Any) -> None:
    a = [float(i) for i in range(64)]
    b = [100.0 + i for i in range(64)]
    art = emit(ROOT / "tests" / "spirv" / "control_flow.loom")
    _, _, out = launch(device, art, "control_flow", [64, 3], [f32s(a), f32s(b), bytes(4 * 8 * 64)], (1, 1, 1))
    rows = unpack("f", out)
    s = a
    for _ in range(3):
        s = [s[i] + s[(i + 1) % 64] for i in range(64)]
    assert rows[0:64] == s
    assert rows[64:128] == [a[i] if i % 2 == 0 else b[i] for i in range(64)]
    assert rows[128:192] == [10.0 if i % 2 == 0 else 20.0 for i in range(64)]
    assert rows[192:256] == [a[i] if i % 2 == 0 else b[i] for i in range(64)]
    assert rows[256:320] == [float(_collatz_steps(i + 1)) for i in range(64)]
    assert rows[320:384] == [a[i] + a[1] + a[2] for i in range(64)]
    assert rows[384:448] == [28.0] * 64


def test_memory_runs(device: Any) -> None:
    f32v = [1.5 * i for i in range(16)]
    buf = bytearray(448)
    buf[0:64] = f32s(f32v)
    buf[64:80] = struct.pack("<16b", *[i - 8 for i in range(16)])
    buf[80:112] = struct.pack("<16h", *[100 * i - 500 for i in range(16)])
    buf[112:144] = struct.pack("<16e", *[0.25 * i for i in range(16)])
    buf[144:176] = struct.pack("<16H", *[fold.float_bits(BF16, 1.5 * i) for i in range(16)])
    buf[176:192] = bytes(i % 2 for i in range(16))
    buf[192:320] = struct.pack("<16q", *[(1 << 40) + i for i in range(16)])
    buf[320:448] = struct.pack("<16d", *[i / 3 for i in range(16)])
    art = emit(ROOT / "tests" / "spirv" / "memory.loom")
    got, out = launch(device, art, "memory", [], [bytes(buf), bytes(4 * 8 * 16)], (1, 1, 1))
    assert unpack("f", got[0:64]) == f32v
    assert list(struct.unpack("<16b", got[64:80])) == [i - 7 for i in range(16)]
    assert list(struct.unpack("<16h", got[80:112])) == [100 * i - 499 for i in range(16)]
    assert list(struct.unpack("<16e", got[112:144])) == [0.5 * i for i in range(16)]
    assert [fold.float_from_bits(BF16, u) for u in struct.unpack("<16H", got[144:176])] == [3.0 * i for i in range(16)]
    assert list(got[176:192]) == [1 - i % 2 for i in range(16)]
    assert list(struct.unpack("<16q", got[192:320])) == [(1 << 40) + i + 1 for i in range(16)]
    assert list(struct.unpack("<16d", got[320:448])) == [2 * (i / 3) for i in range(16)]
    rows = unpack("i", out)
    bits = [fold.signed(fold.float_bits(F32, x), 32) for x in f32v]
    assert rows[0:16] == bits
    assert rows[16:32] == [bits[(1 + (i // 4) % 2) * 4 + 1 + (i % 4) % 2] for i in range(16)]
    assert rows[32:48] == bits
    words = [fold.signed(int.from_bytes(bytes([4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3]), "little"), 32)
             for i in range(16)]
    assert rows[48:64] == words
    assert rows[64:80] == [words[2 * (i // 2)] for i in range(16)]


def _atomic_int(kind: str, values: Sequence[int], bits: int) -> int:
    mask = (1 << bits) - 1
    cell = 0
    for v in values:
        u, c = v & mask, cell & mask
        sv, sc = fold.signed(u, bits), fold.signed(c, bits)
        cell = {"addi": c + u, "subi": c - u, "andi": c & u, "ori": c | u, "xori": c ^ u, "minsi": min(sc, sv),
                "maxsi": max(sc, sv), "minui": min(c, u), "maxui": max(c, u)}[kind] & mask
    return fold.signed(cell, bits)


def test_atomics_run(device: Any) -> None:
    xi = [7 * i - 50 for i in range(32)]
    xf = [-0.0] + [0.5 * i for i in range(1, 32)]
    art = emit(ROOT / "tests" / "spirv" / "atomics.loom")
    _, _, ci32, ci64, cf32, cf64, wout = launch(
        device, art, "atomics", [], [struct.pack("<32i", *xi), f32s(xf), bytes(40), bytes(80), bytes(24),
                                     bytes(48), bytes(256)], (1, 1, 1))
    kinds = ["xchgi", "addi", "subi", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui"]
    w32 = unpack("i", wout)[:10]
    w64 = unpack("q", wout)[6:16]
    for cells, bits in ((unpack("i", ci32), 32), (unpack("q", ci64), 64), (w32, 32), (w64, 64)):
        assert cells[0] in xi
        for k, kind in enumerate(kinds[1:], 1):
            assert cells[k] == _atomic_int(kind, xi, bits), (kind, bits)
    wf = unpack("f", wout)[32:38]
    for cells in (unpack("f", cf32), unpack("d", cf64), wf):
        assert cells[0] in xf
        assert cells[1] == sum(xf)
        assert same_float(cells[2], -0.0) and same_float(cells[4], -0.0)   # minimumf/minnumf: -0 < +0
        assert cells[3] == 15.5 and cells[5] == 15.5


def test_vectors_run(device: Any) -> None:
    f = [ln * 8 + j + 0.25 for ln in range(8) for j in range(8)]
    iv = [ln * 8 + j - 30 for ln in range(8) for j in range(8)]
    h = [ln + j * 0.5 for ln in range(8) for j in range(8)]
    art = emit(ROOT / "tests" / "spirv" / "vectors.loom")
    fo, io, ho, out = launch(device, art, "vectors", [], [f32s(f), struct.pack("<64i", *iv),
                                                          struct.pack("<64e", *h), bytes(8 * 40 * 8)], (1, 1, 1))
    assert unpack("f", fo) == [((2 * x + 1) + x) * 2 for x in f]
    assert unpack("i", io) == [4 * x for x in iv]
    want_h = [h[ln * 8 + 4 + j] * 2 if j < 4 else h[ln * 8 + j] for ln in range(8) for j in range(8)]
    assert list(struct.unpack("<64e", ho)) == want_h
    rows = unpack("d", out)

    def row(r: int) -> list[float]:
        return rows[r * 8:(r + 1) * 8]

    assert row(0) == [f[ln * 8 + 2 + ln % 3] for ln in range(8)]
    assert row(1) == [2.0] * 8 and row(2) == [2.0] * 8
    for r, kind in enumerate(["addf", "mulf", "minimumf", "maximumf", "minnumf", "maxnumf"], 3):
        want = []
        for ln in range(8):
            acc = 0.5
            for x in f[ln * 8:ln * 8 + 8]:
                acc = fold.round_float(F32, fold._FLOAT_BINARY[kind](acc, x))
            want.append(acc)
        assert row(r) == want, kind
    for r, kind in enumerate(["addi", "muli", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui"], 9):
        want = []
        for ln in range(8):
            acc = 5
            for x in iv[ln * 8:ln * 8 + 8]:
                acc = _int_reference(kind, acc, x, 32)
            want.append(float(acc))
        assert row(r) == want, kind
    assert row(18) == [1.0] * 8 and row(19) == [0.0] * 8 and row(20) == [1.0] * 8
    assert row(21) == [11.25] * 8
    assert row(22) == [2401.0] * 8


def _combine(kind: str, a: Any, b: Any, t: str) -> Any:
    if t in ("f32", "f64", "f16", "bf16"):
        return fold.round_float(_TYPES[t], fold._FLOAT_BINARY[kind](a, b))
    if t == "i1":
        return bool(_int_reference(kind, -int(a), -int(b), 1))
    return _int_reference(kind, a, b, int(t[1:]))


def test_kernel_ops_run(device: Any) -> None:
    n = 128
    vals = [(((c * 7) % 9) - 4) * 0.5 for c in range(n)]
    vals[3] = -0.0
    art = emit(ROOT / "tests" / "spirv" / "kernel_ops.loom")
    _, out = launch(device, art, "kernel_ops", [], [f32s(vals), bytes(8 * 80 * n)], (2, 1, 1))
    rows = unpack("d", out)

    def row(r: int) -> list[float]:
        return rows[r * n:(r + 1) * n]

    cols = [(g, y, x) for g in range(2) for y in range(4) for x in range(16)]
    assert row(0) == [float(x) for g, y, x in cols]
    assert row(1) == [float(y) for g, y, x in cols]
    assert row(2) == [0.0] * n and row(3) == [float(g) for g, y, x in cols] and row(4) == [0.0] * n
    assert row(5) == [16.0] * n and row(6) == [4.0] * n and row(7) == [1.0] * n
    assert row(8) == [2.0] * n and row(9) == [1.0] * n
    assert row(10) == [float(g * 16 + x) for g, y, x in cols]
    assert row(11) == [float(y) for g, y, x in cols] and row(12) == [0.0] * n
    sgs = int(row(13)[0])
    assert sgs >= 1 and row(13) == [float(sgs)] * n
    lanes = [int(v) for v in row(14)]
    assert all(0 <= v < sgs for v in lanes)

    def typed(t: str, x: float) -> Any:
        xi = int(x)
        if t in ("f32", "f64", "f16", "bf16"):
            return fold.round_float(_TYPES[t], x)
        if t == "i1":
            return bool(xi & 1)
        return fold.signed(xi & ((1 << int(t[1:])) - 1), int(t[1:]))

    def widened(t: str, v: Any) -> float:
        if t == "f64":
            return v + v
        return float(int(v)) if t == "i1" else float(v)

    kinds = {"float": ["addf", "mulf", "minimumf", "maximumf", "minnumf", "maxnumf"],
             "int": ["addi", "muli", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui"]}
    plan = [("f32", "float", None), ("f64", "float", ["addf", "minimumf", "maxnumf"]),
            ("f16", "float", ["addf", "maximumf"]), ("bf16", "float", ["addf", "minnumf"]), ("i32", "int", None),
            ("i64", "int", ["addi", "minsi", "maxui"]),
            ("i16", "int", ["addi", "minsi", "xori"]), ("i8", "int", ["maxsi", "minui"]),
            ("i1", "int", ["addi", "andi", "ori", "minsi", "maxui"])]
    r = 15
    for t, fam, only in plan:
        for kind in (only or kinds[fam]):
            for scope in ("subgroup", "workgroup"):
                if scope == "subgroup" and t not in ("f32", "i32"):
                    continue
                got = row(r)
                r += 1
                for c in range(n):
                    g, lin = divmod(c, 64)
                    members = range(g * 64, g * 64 + 64)
                    if scope == "subgroup":
                        first = g * 64 + (lin // sgs) * sgs
                        members = range(first, min(first + sgs, g * 64 + 64))
                    acc = None
                    for m in members:
                        v = typed(t, vals[m])
                        acc = v if acc is None else _combine(kind, acc, v, t)
                    want = widened(t, acc)
                    assert same_float(got[c], want), (scope, kind, t, c, got[c], want)


def test_calls_run(device: Any) -> None:
    a = [float(i) for i in range(32)]
    b = [100.0 + i for i in range(32)]
    art = emit(ROOT / "tests" / "spirv" / "calls.loom")
    ao, bo, out = launch(device, art, "calls", [32], [f32s(a), f32s(b), bytes(4 * 64)], (1, 1, 1))
    rows = unpack("f", out)
    lanes = range(8)
    assert rows[0:8] == [3 * a[i] for i in lanes]
    assert rows[8:16] == [float(i // 3) for i in lanes] and rows[16:24] == [float(i % 3) for i in lanes]
    assert rows[24:32] == [6 + 4 * a[i] for i in lanes]
    assert rows[32:40] == [3.0] * 8
    assert rows[40:48] == [2 * a[i] for i in lanes]
    want_a = list(a)
    want_b = list(b)
    want_a[31] += 1
    want_b[31] += 1
    for i in lanes:
        (want_a if i % 2 else want_b)[i + 8] += 9
    assert unpack("f", ao) == want_a and unpack("f", bo) == want_b


# ------------------------------------------------------------------ determinism, diagnostics, manifest


def test_deterministic_bytes() -> None:
    for name in ("samples/matmul.loom", "tests/spirv/calls.loom", "tests/spirv/scalar_float.loom"):
        first = emit(ROOT / name, "vulkan1.2", pipeline="default")
        second = emit(ROOT / name, "vulkan1.2", pipeline="default")
        assert first.data == second.data
        assert first.kernels == second.kernels


def test_deterministic_across_processes() -> None:
    code = ("import sys, hashlib; from loomcli.service.front import CompileOptions, compile_module;"
            "from loomcli.targets.profiles import parse_target; from loomcli.emit.artifacts import emit;"
            "p = parse_target('spirv:vulkan1.3');"
            "m = compile_module(CompileOptions(input=sys.argv[1], profile=p)).module;"
            "print(hashlib.sha256(emit(m, p, 'spirv-binary').data).hexdigest())")
    path = str(ROOT / "tests" / "spirv" / "kernel_ops.loom")
    digests = {subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(digests) == 1 and next(iter(digests)).strip()


def _diagnostics(path: Path) -> list[Any]:
    """What emission through the gateway (shared TARGET checks, then the emitter) reports."""
    profile = parse_target("spirv:vulkan1.3")
    compiled = compile_module(CompileOptions(input=str(path), profile=profile))
    with pytest.raises(CompileError) as e:
        emit_artifact(compiled.module, profile, "spirv-binary")
    return e.value.diagnostics


def test_target_002_workgroup_size_not_constant() -> None:
    diags = _diagnostics(ROOT / "tests" / "spirv" / "bad_target002.loom")
    assert [d.code for d in diags] == ["TARGET/002"]
    assert diags[0].message == "workgroup size of `@dyn` must be constant on spirv"


def test_target_006_push_constants_too_large() -> None:
    diags = _diagnostics(ROOT / "tests" / "spirv" / "bad_target006.loom")
    assert [d.code for d in diags] == ["TARGET/006"]
    assert diags[0].message == "push constants of `@wide` take 136 > 128 bytes"


def test_target_001_system_scope_and_cluster(tmp_path: Path) -> None:
    src = tmp_path / "k.loom"
    src.write_text("""kernel.def export("k") @k() {
  %one = index.constant 1 : index
  %two = index.constant 2 : index
  kernel.launch.config workgroups(%two, %one, %one) workgroup_size(%one, %one, %one) \
cluster_size(%two, %one, %one) : index
} launch(%b: buffer) {
  %zero = index.constant 0 : offset
  %c0 = index.constant 0 : index
  %v = buffer.view %b[%zero] : buffer -> view<1xi32>
  %x = scalar.constant 1 : i32
  %o = view.atomic.rmw<addi> %x, %v[%c0] {ordering = relaxed, scope = system} : i32, view<1xi32> -> i32
  kernel.return
}
""")
    codes = [d.code for d in _diagnostics(src)]
    assert codes == ["TARGET/001", "TARGET/001"]


def test_manifest_facts() -> None:
    art = emit(ROOT / "samples" / "saxpy.loom", "vulkan1.2")
    assert art.format == "spirv-binary"
    assert art.target == {"family": "spirv", "selector": "vulkan1.2", "triple": "spirv-unknown-vulkan1.2",
                          "spirv_version": "1.5"}
    assert art.kernels == [{
        "export": "saxpy", "symbol": "saxpy", "workload": [{"name": "n", "type": "index"}],
        "workgroup_size": [128, 1, 1], "push_constant_bytes": 12,
        "parameters": [
            {"name": "n", "kind": "scalar", "type": "index", "byte_offset": 0, "byte_length": 8},
            {"name": "alpha", "kind": "scalar", "type": "f32", "byte_offset": 8, "byte_length": 4},
            {"name": "x", "kind": "buffer", "set": 0, "binding": 0},
            {"name": "y", "kind": "buffer", "set": 0, "binding": 1}],
        "resources": {"workgroup_storage_bytes": 0}}]
    red = emit(ROOT / "samples" / "reduction.loom", "vulkan1.2")
    assert red.kernels[0]["resources"] == {"workgroup_storage_bytes": 1024}


def test_required_subgroup_size(tmp_path: Path) -> None:
    src = tmp_path / "k.loom"
    src.write_text("""spirv.target<vulkan1_3> @vk {subgroup_size = 16}

kernel.def target(@vk) export("k") @k() {
  %one = index.constant 1 : index
  %s = target.subgroup.size : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%s, %one, %one) : index
} launch(%b: buffer) {
  %zero = index.constant 0 : offset
  %v = buffer.view %b[%zero] : buffer -> view<16xf32>
  %lane = kernel.subgroup.lane.id : index
  %n = kernel.subgroup.size : index
  %x = view.load %v[%lane] : view<16xf32> -> f32
  %s2 = kernel.workgroup.reduce<addf> %x : f32
  view.store %s2, %v[%lane] : f32, view<16xf32>
  kernel.return
}
""")
    from loomcli.targets.abi import exported_kernels, workgroup_storage_bytes

    profile = parse_target("spirv:vulkan1.3")
    module = compile_module(CompileOptions(input=str(src), profile=profile)).module
    art = emit_artifact(module, profile, "spirv-binary")
    (kernel,) = art.kernels
    assert kernel["required_subgroup_size"] == 16 and kernel["workgroup_size"] == [16, 1, 1]
    # The documented scratch rule with the kernel's own (pinned) subgroup size.
    (op,) = exported_kernels(module)
    assert kernel["resources"] == {"workgroup_storage_bytes": workgroup_storage_bytes(op, 16, 1024)}
    if SPIRV_VAL:
        validate(art.data, "vulkan1.3", tmp_path)


def test_disassemble_names_every_instruction() -> None:
    text = disassemble(emit(ROOT / "tests" / "spirv" / "kernel_ops.loom").data)
    assert text.startswith("; SPIR-V\n; Version: 1.6\n")
    assert 'OpEntryPoint GLCompute %' in text and "OpGroupNonUniformFMin" in text
    assert "Op0" not in text and not any(line.startswith("Op") and line[2:3].isdigit() for line in text.splitlines())


def _instructions(data: bytes) -> list[tuple[int, tuple[int, ...]]]:
    words = struct.unpack(f"<{len(data) // 4}I", data)
    out, at = [], 5
    while at < len(words):
        n = words[at] >> 16
        out.append((words[at] & 0xFFFF, words[at + 1:at + n]))
        at += n
    return out


def test_workgroup_barrier_semantics() -> None:
    """`kernel.barrier<workgroup>` is OpControlBarrier(Workgroup, Workgroup,
    AcquireRelease|WorkgroupMemory): without the WorkgroupMemory bit (0x10 alone,
    as LLVM's SPIR-V backend emitted) the tree reduction is wrong on lavapipe."""
    insts = _instructions(emit(ROOT / "samples" / "reduction.loom").data)
    constants = {ops[1]: ops[2] for code, ops in insts if code == 43}
    barriers = [tuple(constants[i] for i in ops) for code, ops in insts if code == 224]
    assert barriers and set(barriers) == {(2, 2, 0x108)}


def _capabilities(art: Artifact) -> set[str]:
    return {line.split()[1] for line in disassemble(art.data).splitlines() if line.startswith("OpCapability")}


def test_capabilities_only_as_used() -> None:
    # SignedZeroInfNanPreserve: the float controls of Vulkan 1.2+ (docs/spirv.md).
    assert _capabilities(emit(ROOT / "samples" / "saxpy.loom")) == {"Shader", "SignedZeroInfNanPreserve"}
    assert _capabilities(emit(ROOT / "samples" / "matmul.loom")) == {"Shader", "SignedZeroInfNanPreserve"}
    assert _capabilities(emit(ROOT / "samples" / "saxpy.loom", "vulkan1.1")) == {"Shader"}
    red = emit(ROOT / "samples" / "reduction.loom", "vulkan1.1")
    assert _capabilities(red) == {"Shader", "AtomicFloat32AddEXT"}
    assert 'OpExtension "SPV_EXT_shader_atomic_float_add"' in disassemble(red.data)
    mem = _capabilities(emit(ROOT / "tests" / "spirv" / "memory.loom"))
    assert {"Int8", "Int16", "Int64", "Float16", "Float64", "StorageBuffer8BitAccess",
            "StorageBuffer16BitAccess"} <= mem
    assert not any(c.startswith("GroupNonUniform") for c in mem)
    ops = _capabilities(emit(ROOT / "tests" / "spirv" / "kernel_ops.loom"))
    assert {"GroupNonUniform", "GroupNonUniformArithmetic", "GroupNonUniformVote"} <= ops
