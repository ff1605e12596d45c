"""Host-side semantics of check cases (LANGUAGE.md 7.9, 13, 17.31): samples,
generators, expectations and the CHECK/001 report. No device: launches go to
a recording fake."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest

from loomcli.check.cases import (
    CaseRunner,
    Sample,
    Tensor,
    element_close,
    element_equal,
    fill,
    format_value,
    iota,
    samples,
)
from loomcli.frontend import parse_text
from loomcli.ir.core import Module, Operation
from loomcli.ir.types import BF16, F16, F32, F64, I1, I8, I16, I32, I64

KERNEL = """kernel.def @k(%n: index) {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%n: index, %s: f32, %a: buffer, %b: buffer) {
  kernel.return
}

"""


def module(text: str) -> Module:
    return parse_text(KERNEL + text, "case.loom")


def case_of(m: Module, name: str = "c") -> Operation:
    return m.symbols()[name]


class Recorder:
    """A launcher that records its calls and doubles every f32 tensor it gets once."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any], list[Any]]] = []

    def launch(self, op: Operation, workload: list[Any], args: list[Any]) -> None:
        self.calls.append((op.attr("callee"), workload, args))
        seen: set[int] = set()
        for a in args:
            if isinstance(a, Tensor) and id(a) not in seen:
                seen.add(id(a))
                a.data[:] = Tensor.of(a.elem, a.shape, [2 * v for v in a.values()]).data


def run(text: str, launcher: Any = None) -> list[Any]:
    m = module(text)
    return CaseRunner(m, launcher or Recorder()).run_case(case_of(m))


# ------------------------------------------------------------------ samples


def test_samples_are_the_product_in_source_order_first_slowest() -> None:
    m = module("""check.case @c {
  %a = check.param.choice values([1, 2, 3]) name("a") : index
  %b = check.param.choice values([0.5, 1.5]) name("b") : f32
  check.return
}
""")
    got = samples(case_of(m))
    assert [s.ordinal for s in got] == list(range(6))
    assert [dict(s.params) for s in got] == [
        {"a": 1, "b": 0.5}, {"a": 1, "b": 1.5}, {"a": 2, "b": 0.5},
        {"a": 2, "b": 1.5}, {"a": 3, "b": 0.5}, {"a": 3, "b": 1.5}]
    assert got[0].label() == "[a=1, b=0.5]"


def test_a_case_without_parameters_has_one_unlabelled_sample() -> None:
    m = module("check.case @c {\n  check.return\n}\n")
    (only,) = samples(case_of(m))
    assert only.ordinal == 0 and only.label() == ""


def test_parameter_values_take_their_type() -> None:
    m = module("""check.case @c {
  %a = check.param.choice values([255, -1]) name("a") : i8
  %b = check.param.choice values([0.1]) name("b") : f32
  check.return
}
""")
    got = samples(case_of(m))
    assert [dict(s.params)["a"] for s in got] == [-1, -1]
    assert dict(got[0].params)["b"] == struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert got[0].label() == "[a=-1, b=0.1]"


def test_benchmark_selection_matches_named_parameters() -> None:
    s = Sample(0, (("n", 1009), ("k", 2)))
    assert s.label() == "[n=1009, k=2]"
    assert s.matches({}) and s.matches({"n": 1009}) and s.matches({"n": 1009, "k": 2})
    assert not s.matches({"n": 128}) and not s.matches({"m": 1})


# ------------------------------------------------------------------ generators


def test_fill_rounds_floats_and_wraps_integers() -> None:
    assert fill(F32, (3,), 1.0).data == struct.pack("<3f", 1.0, 1.0, 1.0)
    assert fill(I8, (2,), 255).values() == [-1, -1]
    assert fill(I16, (1,), -1).data == b"\xff\xff"
    assert fill(F16, (1,), 1.0001).values() == [1.0]
    # 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even.
    assert fill(BF16, (1,), 1.00390625).values() == [1.0]
    assert fill(I1, (2,), 1).data == b"\x01\x01"


def test_iota_is_row_major_offset_plus_position_times_step() -> None:
    t = iota(I32, (2, 3), 10, -2)
    assert t.shape == (2, 3) and t.values() == [10, 8, 6, 4, 2, 0]


def test_iota_rounds_the_exact_value_once() -> None:
    got = iota(F32, (4,), 0.1, 0.1).values()
    # offset + p * step is computed exactly, then rounded to f32: p = 2 is f32(0.3),
    # not f32 of the f64 sum 0.30000000000000004 (which rounds the same here) ...
    want = [struct.unpack("<f", struct.pack("<f", x))[0] for x in (0.1, 0.2, 0.3, 0.4)]
    assert got == want
    # ... and in f64, 0.1 + 2 * 0.1 is the double nearest 3 * (the double 0.1).
    assert iota(F64, (3,), 0.1, 0.1).values()[2] == 0.30000000000000004
    assert iota(F16, (3,), 1.0, 0.0001).values() == [1.0, 1.0, 1.0]


def test_iota_wraps_integers_at_their_width() -> None:
    assert iota(I8, (4,), 126, 1).values() == [126, 127, -128, -127]
    assert iota(I32, (2,), 2147483647, 1).values() == [2147483647, -2147483648]
    assert iota(I64, (2,), -1, 1).values() == [-1, 0]
    assert iota(I1, (4,), 1, 1).values() == [True, False, True, False]


def test_generators_take_dynamic_dims_from_the_sample() -> None:
    m = module("""check.case @c {
  %n = check.param.choice values([2, 5]) name("n") : index
  %f = check.literal value(1.0) : f32
  %t = check.generate.iota offset(1) step(1) : tensor<[%n]x3xi32>
  kernel.launch @k[%n](%n, %f, %t, %t) : [index](index, f32, tensor<[%n]x3xi32>, tensor<[%n]x3xi32>)
  check.return
}
""")
    rec = Recorder()
    results = CaseRunner(m, rec).run_case(case_of(m))
    assert all(r.passed for r in results)
    assert [call[2][2].shape for call in rec.calls] == [(2, 3), (5, 3)]


# ------------------------------------------------------------------ comparison rules


def test_equal_compares_floats_numerically() -> None:
    assert element_equal(-0.0, 0.0)
    assert element_equal(math.nan, math.nan)
    assert element_equal(math.inf, math.inf)
    assert not element_equal(1.0, math.nan)
    assert not element_equal(1.0, 1.0000001)
    assert element_equal(-3, -3) and not element_equal(3, -3)


def test_close_uses_atol_plus_rtol_of_expected() -> None:
    assert element_close(1.25, 1.0, 0.0, 0.25, False)
    assert not element_close(1.2500001, 1.0, 0.0, 0.25, False)
    assert element_close(1.5, 1.0, 0.25, 0.25, False)
    assert element_close(0.001, 0.0, 0.001, 0.0, False)
    assert not element_close(1.0, 2.0, 0.0, 0.4, False)   # relative to the expected value
    assert element_close(1.0, 2.0, 0.0, 0.5, False)
    assert element_close(math.inf, math.inf, 0.0, 0.0, False)
    assert not element_close(math.inf, -math.inf, 1.0, 1.0, False)
    assert not element_close(1e300, math.inf, 0.0, 1.0, False)


def test_close_nan_rules() -> None:
    assert not element_close(math.nan, math.nan, 1.0, 1.0, False)
    assert element_close(math.nan, math.nan, 0.0, 0.0, True)
    assert not element_close(math.nan, 1.0, 1.0, 1.0, True)
    assert not element_close(1.0, math.nan, 1.0, 1.0, True)


def test_values_print_in_the_shortest_form_of_their_type() -> None:
    f32_tenth = struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert format_value(f32_tenth, F32) == "0.1"
    assert format_value(f32_tenth, F64) == "0.10000000149011612"
    assert format_value(math.nan, F32) == "nan"
    assert format_value(-math.inf, F32) == "-inf"
    assert format_value(-5, I32) == "-5"
    assert format_value(True, I1) == "1"


# ------------------------------------------------------------------ running cases


def test_expect_failures_report_check_001_at_the_first_failing_position() -> None:
    (result,) = run("""check.case @c {
  %a = check.generate.iota offset(0.0) step(1.0) : tensor<2x3xf32>
  %e = check.generate.iota offset(0.0) step(1.1) : tensor<2x3xf32>
  check.expect.close actual(%a) expected(%e) atol(0.45) rtol(0.0) : tensor<2x3xf32>
  check.return
}
""")
    assert not result.passed
    (d,) = result.diagnostics
    assert (d.code, d.file, d.line, d.column) == ("CHECK/001", "case.loom", 11, 3)
    assert d.message == "at [1, 2]: actual 5.0, expected 5.5 (sample @c)"
    assert d.render().endswith("error [CHECK/001]: at [1, 2]: actual 5.0, expected 5.5 (sample @c)")


def test_check_001_names_the_failing_sample() -> None:
    results = run("""check.case @c {
  %n = check.param.choice values([1, 2, 3]) name("n") : index
  %one = check.literal value(1) : index
  check.expect.equal actual(%n) expected(%one) : index
  check.return
}
""")
    assert [d.message for r in results for d in r.diagnostics] == [
        "at []: actual 2, expected 1 (sample @c [n=2])", "at []: actual 3, expected 1 (sample @c [n=3])"]


def test_a_sample_goes_on_after_a_failed_expectation() -> None:
    (result,) = run("""check.case @c {
  %a = check.generate.fill value(1) : tensor<4xi32>
  %b = check.generate.fill value(2) : tensor<4xi32>
  check.expect.equal actual(%a) expected(%b) : tensor<4xi32>
  check.expect.equal actual(%a) expected(%a) : tensor<4xi32>
  check.expect.equal actual(%b) expected(%a) : tensor<4xi32>
  check.return
}
""")
    assert [d.message for d in result.diagnostics] == ["at [0]: actual 1, expected 2 (sample @c)",
                                                       "at [0]: actual 2, expected 1 (sample @c)"]


def test_equal_passes_signed_zeros_and_nans() -> None:
    (result,) = run("""check.case @c {
  %z = check.generate.fill value(0.0) : tensor<3xf32>
  %nz = check.generate.fill value(-0.0) : tensor<3xf32>
  %n1 = check.generate.fill value(nan) : tensor<3xf64>
  %n2 = check.generate.fill value(-nan) : tensor<3xf64>
  check.expect.equal actual(%z) expected(%nz) : tensor<3xf32>
  check.expect.equal actual(%n1) expected(%n2) : tensor<3xf64>
  check.expect.close actual(%n1) expected(%n2) atol(0.0) rtol(0.0) nan(same) : tensor<3xf64>
  check.expect.close actual(%n1) expected(%n2) atol(1.0) rtol(1.0) : tensor<3xf64>
  check.return
}
""")
    (d,) = result.diagnostics
    assert d.message == "at [0]: actual nan, expected nan (sample @c)" and d.line == 16


def test_scalar_expectations() -> None:
    (result,) = run("""check.case @c {
  %a = check.literal value(1.5) : f32
  %b = check.literal value(2.5) : f32
  %i = check.literal value(7) : index
  check.expect.equal actual(%i) expected(%i) : index
  check.expect.close actual(%a) expected(%b) atol(1.0) rtol(0.0) : f32
  check.expect.equal actual(%a) expected(%b) : f32
  check.return
}
""")
    assert [d.message for d in result.diagnostics] == ["at []: actual 1.5, expected 2.5 (sample @c)"]


def test_launches_see_and_leave_tensors_in_place() -> None:
    rec = Recorder()
    (result,) = run("""check.case @c {
  %n = check.literal value(3) : index
  %s = check.literal value(0.5) : f32
  %x = check.generate.iota offset(1.0) step(1.0) : tensor<3xf32>
  %want = check.generate.iota offset(4.0) step(4.0) : tensor<3xf32>
  kernel.launch @k[%n](%n, %s, %x, %x) : [index](index, f32, tensor<3xf32>, tensor<3xf32>)
  kernel.launch @k[%n](%n, %s, %x, %x) : [index](index, f32, tensor<3xf32>, tensor<3xf32>)
  check.expect.equal actual(%x) expected(%want) : tensor<3xf32>
  check.return
}
""", rec)
    assert result.passed, [d.message for d in result.diagnostics]
    assert len(rec.calls) == 2
    callee, workload, args = rec.calls[0]
    assert callee == "k" and workload == [3] and args[0] == 3 and args[1] == 0.5
    assert args[2] is args[3]   # the same tensor, passed twice: one array


def test_host_control_flow_runs_launches_in_order() -> None:
    rec = Recorder()
    (result,) = run("""check.case @c {
  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %c4 = index.constant 4 : index
  %s = check.literal value(0.5) : f32
  %x = check.generate.fill value(1) : tensor<2xi32>
  %want = check.generate.fill value(16) : tensor<2xi32>
  scf.for %i = [%c0 to %c4 step %c1] {
    kernel.launch @k[%i](%i, %s, %x, %x) : [index](index, f32, tensor<2xi32>, tensor<2xi32>)
  }
  check.expect.equal actual(%x) expected(%want) : tensor<2xi32>
  check.return
}
""", rec)
    assert result.passed
    assert [call[1] for call in rec.calls] == [[0], [1], [2], [3]]


def test_undefined_behaviour_in_host_code_fails_the_sample() -> None:
    results = run("""check.case @c {
  %n = check.param.choice values([0, 2]) name("n") : index
  %c4 = index.constant 4 : index
  %q = index.div %c4, %n : index
  check.return
}
""")
    assert [r.passed for r in results] == [False, True]
    (d,) = results[0].diagnostics
    assert d.code == "EXEC/002" and d.line == 11


def test_launch_without_a_device_fails_the_sample() -> None:
    m = module("""check.case @c {
  %n = check.literal value(1) : index
  %s = check.literal value(0.5) : f32
  %x = check.generate.fill value(1) : tensor<2xi32>
  kernel.launch @k[%n](%n, %s, %x, %x) : [index](index, f32, tensor<2xi32>, tensor<2xi32>)
  check.return
}
""")
    (result,) = CaseRunner(m, None).run_case(case_of(m))
    assert not result.passed and result.diagnostics[0].code == "EXEC/002"


@pytest.mark.parametrize("elem, values", [
    (I8, [-128, 0, 127]), (I16, [-32768, 5, 32767]), (I32, [-1, 0, 1]), (I64, [-(2**63), 2**63 - 1]),
    (F16, [0.5, -2.0, 65504.0]), (BF16, [1.0, -0.5]), (F32, [0.25, -(2.0**100)]), (F64, [1e300, -0.0]),
    (I1, [True, False]),
])
def test_tensor_bytes_round_trip(elem: Any, values: list[Any]) -> None:
    t = Tensor.of(elem, (len(values),), values)
    assert t.values() == values
    assert t.nbytes == len(values) * {1: 1, 8: 1, 16: 2, 32: 4, 64: 8}[elem.bits]
