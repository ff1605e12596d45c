"""`expand-math` against the reference semantics: the expanded IR runs on the
reference interpreter (built only from ops the folder defines exactly) and
each result is compared, within the documented ulps (docs/math.md), with the
correctly rounded value (mpmath at 200 bits, rounded to the type by the
folder's `round_float`); special values, where the interpreter's own
definition of the op (Python's math) is exact, must match it exactly. The
host libm is not a good enough reference near hard cases: glibc's cos is 8
ulp off at 6381956970095103 * 2^797.

Inputs are the hard ones: huge sin/cos arguments (Payne-Hanek, beyond 2^40
in f64 and 2^20 in f32), log near 1, tanh near 0, subnormals, +-inf, NaN,
+-0, the exponent range's edges and pow's special cases, then random ones.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from loomcli.check.interpreter import _APPROXIMATE, Interpreter, Root
from loomcli.frontend import parse_text
from loomcli.ir.types import BF16, F16, F32, F64, Type
from loomcli.passes import PassContext, parse_pipeline
from loomcli.passes.expand_math import TRANSCENDENTAL
from loomcli.semantics.fold import float_bits, float_from_bits, round_float
from loomcli.targets.profiles import REFERENCE, parse_target
from loomcli.text.printer import print_module

TYPES: dict[str, Type] = {"f32": F32, "f64": F64, "f16": F16, "bf16": BF16}
BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2}
# The documented accuracy (docs/math.md): f16 and bf16 go through f32 and round once.
ULPS = {"f32": 2, "f64": 2, "f16": 1, "bf16": 1}
OPS = {fn: op[len("scalar."):] for op, fn in TRANSCENDENTAL.items()}
LARGEST = {"f64": 1.7976931348623157e308, "f32": 3.4028234663852886e38, "f16": 65504.0,
           "bf16": 3.3895313892515355e38}
SMALLEST = {"f64": 5e-324, "f32": 1.401298464324817e-45, "f16": 5.960464477539063e-08, "bf16": 9.183549615799121e-41}

SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, 2.0, -2.0, 3.0, 1e-3, 1e-30, 1e-310, 5e-324,
           1.401298464324817e-45, 1.1754943508222875e-38, 2.2250738585072014e-308]
NEAR_ONE = [1 + 2.0 ** -k for k in (5, 10, 20, 23, 40, 52)] + [1 - 2.0 ** -k for k in (5, 10, 24, 40, 53)]
NEAR_ZERO = [s * 2.0 ** -k for k in (4, 10, 13, 20, 29, 60, 200) for s in (1, -1)]
EDGES = [88.72283172607422, 88.7229, 89.0, -87.33654, -103.27893, -103.98, -150.0, 127.9, 128.0, -126.0, -149.5,
         709.78, 709.79, -708.39, -744.44, -745.2, 1023.9, 1024.0, -1022.0, -1074.5, 22.0, 9.0, 8.9, 0.625, 11.0]
HUGE = [2.0 ** 20 + 0.5, 2.0 ** 21, 65.0, 1e4, 123456.789, 2.0 ** 30 * 1.2345, 2.0 ** 40 * 1.7, 2.0 ** 60 * 1.01,
        1e22, 2.0 ** 100 * 1.3, 1e200, 1e300, 3.4e38, 1.7976931348623157e308, math.pi * 2 ** 50,
        6381956970095103.0 * 2.0 ** 797]   # the famous hardest f64 argument for sin/cos
POW_Y = [0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, -0.5, math.inf, -math.inf, math.nan, 10.0, 1e10, -1e-10,
         7.5, 1023.0, -1074.0, 127.0, 0.1]
POW_X = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, math.inf, -math.inf, math.nan, 1e-310, 1e-40,
         1 + 2.0 ** -20, 1 - 2.0 ** -20, 10.0, 1e300, 0.999]


def representable(t: str, x: float) -> float:
    if math.isfinite(x) and abs(x) > LARGEST[t]:
        return math.copysign(math.inf, x)
    return round_float(TYPES[t], x)


def inputs(fn: str, t: str) -> list[tuple[float, ...]]:
    rng = random.Random(f"{fn}.{t}")
    if fn == "pow":
        pairs = [(x, y) for x in POW_X for y in POW_Y]
        pairs += [(math.exp(rng.uniform(-30, 30)), rng.uniform(-20, 20)) for _ in range(40)]
        pairs += [(-float(rng.randint(2, 9)), float(rng.randint(-9, 9))) for _ in range(10)]
        return [(representable(t, x), representable(t, y)) for x, y in pairs]
    xs = SPECIAL + NEAR_ONE + NEAR_ZERO + EDGES + HUGE + [-x for x in HUGE[:8]]
    xs += [rng.uniform(-10, 10) for _ in range(30)]
    xs += [math.ldexp(rng.uniform(-1, 1), rng.randint(-1074 if t == "f64" else -149, 1023 if t == "f64" else 127))
           for _ in range(30)]
    return [(representable(t, x),) for x in xs]


def reference(fn: str, args: tuple[float, ...]) -> float:
    """The correctly rounded f64 value of the op, Python's math where that is exact (special values)."""
    python = _APPROXIMATE["scalar." + OPS[fn]](*args)
    if not all(math.isfinite(a) for a in args) or not math.isfinite(python) or python == 0.0:
        return python
    mp = pytest.importorskip("mpmath")
    mp.mp.prec = 200
    x = mp.mpf(args[0])
    if fn == "pow":
        return math.copysign(float(mp.power(abs(x), mp.mpf(args[1]))), python)
    value = {"exp": mp.exp, "exp2": lambda v: mp.power(2, v), "log": mp.log, "log2": lambda v: mp.log(v, 2),
             "sin": mp.sin, "cos": mp.cos, "tanh": mp.tanh}[fn](x)
    return float(value)


def kernel_source(fn: str, t: str, n: int) -> str:
    arity = 2 if fn == "pow" else 1
    loads = "\n".join(f"  %a{k} = view.load %v{k}[%i] : view<{n}x{t}> -> {t}" for k in range(arity))
    views = "\n".join(f"  %v{k} = buffer.view %in{k}[%o] : buffer -> view<{n}x{t}>" for k in range(arity))
    args = ", ".join(f"%a{k}" for k in range(arity))
    params = ", ".join(f"%in{k}: buffer" for k in range(arity))
    return (f"kernel.def export(\"k\") @k() {{\n"
            f"  %one = index.constant 1 : index\n"
            f"  %n = index.constant {n} : index\n"
            f"  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%n, %one, %one) : index\n"
            f"}} launch({params}, %out: buffer) {{\n"
            f"  %o = index.constant 0 : offset\n"
            f"  %i = kernel.workitem.id<x> : index\n{views}\n{loads}\n"
            f"  %r = scalar.{OPS[fn]} {args} : {t}\n"
            f"  %w = buffer.view %out[%o] : buffer -> view<{n}x{t}>\n"
            f"  view.store %r, %w[%i] : {t}, view<{n}x{t}>\n"
            f"  kernel.return\n}}\n")


def ulps(t: str, got: float, want: float) -> float:
    """Distance in units in the last place; inf for a wrong special value."""
    if math.isnan(got) or math.isnan(want):
        return 0 if math.isnan(got) and math.isnan(want) else math.inf
    if math.isinf(got) or math.isinf(want) or got == 0.0 or want == 0.0:
        return 0 if got == want and math.copysign(1, got) == math.copysign(1, want) else \
            (1 if abs(got - want) <= SMALLEST[t] and math.isfinite(got) and math.isfinite(want) else math.inf)

    def ordinal(v: float) -> int:
        b = float_bits(TYPES[t], abs(v))
        return b if v > 0 else -b

    return abs(ordinal(got) - ordinal(want))


def run_expanded(fn: str, t: str, cases: list[tuple[float, ...]], features: frozenset[str] = REFERENCE.features) \
        -> list[float]:
    module = parse_text(kernel_source(fn, t, len(cases)))
    profile = replace(REFERENCE, features=features)  # nothing native
    parse_pipeline("expand-math").run(module, PassContext(target=profile, verify_each=True))
    assert not any(op.name in TRANSCENDENTAL for op in module.walk())
    elem, width = TYPES[t], BYTES[t]
    ins = [Root(bytearray(b"".join(float_bits(elem, c[k]).to_bytes(width, "little") for c in cases)), f"in{k}")
           for k in range(len(cases[0]))]
    out = Root(bytearray(width * len(cases)), "out")
    kernel = module.symbols()["k"]
    Interpreter(module).run_kernel(kernel, [*ins, out], (1, 1, 1), (len(cases), 1, 1))
    return [float_from_bits(elem, int.from_bytes(out.data[width * j:width * (j + 1)], "little"))
            for j in range(len(cases))]


# (function, type, profile features): every pair on the reference profile;
# f32 without f64 and i64 (pow's f32 double-word path, 16-bit limb products).
CASES = [(fn, t, REFERENCE.features) for fn in OPS for t in TYPES]
CASES += [(fn, "f32", frozenset()) for fn in ("pow", "sin", "cos")]


@pytest.mark.parametrize(("fn", "t", "features"), CASES,
                         ids=[f"{fn}-{t}{'' if f else '-no-f64-i64'}" for fn, t, f in CASES])
def test_expanded_math_is_within_the_documented_ulps(fn: str, t: str, features: frozenset[str]) -> None:
    cases = inputs(fn, t)
    got = run_expanded(fn, t, cases, features)
    bad = []
    for args, g in zip(cases, got):
        want = representable(t, reference(fn, args))
        if ulps(t, g, want) > ULPS[t]:
            bad.append((args, g, want))
    assert not bad, f"{fn} {t}: {len(bad)} results off, e.g. {bad[:4]}"


def test_narrow_types_use_a_native_f32_op_and_round_once() -> None:
    """nvptx: f32 exp2 is native, so f16 exp2 is extf, the f32 op, fptrunc."""
    module = parse_text(kernel_source("exp2", "f16", 4))
    parse_pipeline("expand-math").run(module, PassContext(target=parse_target("nvptx:sm_90")))
    text = print_module(module)
    assert "scalar.exp2f %wide : f32" in text and "func.def" not in text.split("kernel.def")[0]


def test_names_never_collide_with_user_symbols() -> None:
    src = ("func.def pure @loom.math.exp.f32(%x: f32) -> (f32) {\n  func.return %x : f32\n}\n"
           "func.def pure @f(%x: f32) -> (f32) {\n  %r = scalar.expf %x : f32\n  func.return %r : f32\n}\n")
    module = parse_text(src)
    parse_pipeline("expand-math").run(module, PassContext(verify_each=True))
    text = print_module(module)
    assert "func.call pure @loom.math.exp.f32.1(%x)" in text
    assert print_module(parse_text(text)) == text


def test_native_functions_stay_for_the_selector() -> None:
    module = parse_text(kernel_source("exp", "f32", 2))
    parse_pipeline("expand-math").run(module, PassContext(target=parse_target("amdgpu:gfx1100")))
    assert "scalar.expf" in print_module(module) and len(module.ops) == 1


@pytest.mark.parametrize("target", ["spirv:vulkan1.3", "amdgpu:gfx1100", "nvptx:sm_90"])
def test_device_profiles_legalize_with_expand_math(target: str) -> None:
    assert "expand-math" in parse_target(target).legalize


def test_f64_math_without_i64_is_target_005() -> None:
    from loomcli.diagnostics import CompileError

    module = parse_text(kernel_source("sin", "f64", 2))
    profile = replace(parse_target("spirv:vulkan1.3"), features=frozenset({"f64"}))
    with pytest.raises(CompileError) as e:
        parse_pipeline("expand-math").run(module, PassContext(target=profile))
    [d] = e.value.diagnostics
    assert d.code == "TARGET/005" and "i64 for scalar.sinf on f64" in d.message and d.line > 0


def test_f32_pow_without_i64_stays_in_f32() -> None:
    module = parse_text(kernel_source("pow", "f32", 2))
    profile = replace(parse_target("spirv:vulkan1.3"), features=frozenset({"f64"}))
    parse_pipeline("expand-math").run(module, PassContext(target=profile, verify_each=True))
    text = print_module(module)
    assert "@loom.math.pow.f32" in text and "f64" not in text and "i64" not in text


@pytest.mark.parametrize(("fn", "t"), [(fn, t) for fn in OPS for t in TYPES], ids=lambda v: str(v))
def test_the_llvm_lowering_of_the_expansion_gives_the_interpreters_bits(fn: str, t: str) -> None:
    """Both back ends compute the same thing: the shared LLVM lowering of the
    expanded IR, JIT-compiled for the host CPU, returns bit for bit what
    the interpreter returns (no contraction, no reassociation anywhere).
    The SPIR-V lowering of the same IR runs on lavapipe in the conformance
    suite."""
    pytest.importorskip("llvmlite.binding")
    import test_amdgpu as amd

    params = ", ".join(f"%a{k}: {t}" for k in range(2 if fn == "pow" else 1))
    args = ", ".join(f"%a{k}" for k in range(2 if fn == "pow" else 1))
    jitted = amd.jit_function(f"func.def device @f({params}) -> ({t}) {{\n  %r = scalar.{OPS[fn]} {args} : {t}\n"
                              f"  func.return %r : {t}\n}}\n")
    cases = inputs(fn, t)
    elem = TYPES[t]
    differ = []
    for case, want in zip(cases, run_expanded(fn, t, cases)):
        got = float_from_bits(elem, jitted(*(float_bits(elem, a) for a in case)))
        if not (math.isnan(got) and math.isnan(want)) and float_bits(elem, got) != float_bits(elem, want):
            differ.append((case, got, want))
    assert not differ, f"{fn} {t}: {len(differ)} differ, e.g. {differ[:4]}"


@pytest.fixture(scope="module")
def vulkan() -> Iterator[Any]:
    from loomcli.check.vulkan import VulkanRunner, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no Vulkan device: {reason}")
    runner = VulkanRunner()
    yield runner
    runner.close()


@pytest.mark.parametrize(("fn", "t"), [(fn, t) for fn in OPS for t in TYPES], ids=lambda v: str(v))
def test_the_spirv_lowering_of_the_expansion_gives_the_interpreters_bits(vulkan: Any, fn: str, t: str) -> None:
    """The same for the SPIR-V selector, run on the Vulkan device (lavapipe
    in CI): bit for bit the interpreter's results, NaNs as NaNs."""
    from loomcli.emit.artifacts import emit

    cases = inputs(fn, t)
    profile = parse_target("spirv:vulkan1.3")
    module = parse_text(kernel_source(fn, t, len(cases)))
    spirv = emit(module, profile, "spirv-binary").data
    elem, width = TYPES[t], BYTES[t]
    arity = len(cases[0])
    pipe = vulkan.pipeline(spirv, "k", arity + 1, 0)
    buffers = [vulkan.buffer(width * len(cases)) for _ in range(arity + 1)]
    try:
        for k in range(arity):
            buffers[k].write(b"".join(float_bits(elem, c[k]).to_bytes(width, "little") for c in cases))
        vulkan.dispatch(pipe, buffers, b"", (1, 1, 1))
        out = buffers[arity].read(width * len(cases))
    finally:
        for b in buffers:
            vulkan.release(b)
    differ = []
    for j, (case, want) in enumerate(zip(cases, run_expanded(fn, t, cases))):
        got = float_from_bits(elem, int.from_bytes(out[width * j:width * (j + 1)], "little"))
        if not (math.isnan(got) and math.isnan(want)) and float_bits(elem, got) != float_bits(elem, want):
            differ.append((case, got, want))
    assert not differ, f"{fn} {t}: {len(differ)} differ, e.g. {differ[:4]}"
