"""Host-side execution of `check.case` (LANGUAGE.md sections 7.9, 13 and 17.31).

A case runs once per *sample*: one choice for each `check.param.choice`, the
Cartesian product in source order, first parameter slowest. Its ops run in
order on host values: integers and floats for scalars (canonical values of
`loomcli.semantics.fold`, so host code and folding agree), `Tensor`s for
`tensor<...>` values. Pure ops, `scf.*` and host calls run through the
constant `Evaluator`; `kernel.launch` goes to a `Launcher` (a device), which
updates the tensors it was given in place so later ops see the writes.
Expectations never stop a sample: each failing one adds a CHECK/001
diagnostic at its first failing position.
"""

from __future__ import annotations

import itertools
import math
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from loomcli.diagnostics import Diagnostic
from loomcli.ir.core import Module, Operation, Value
from loomcli.ir.ops import CHECK_EXPECT_CLOSE, CHECK_PARAM_CHOICE, OpTable
from loomcli.ir.types import BF16, ELEMENT_BYTES, F16, ScalarType, ShapedType, Type, is_float, scalar, shaped
from loomcli.semantics.evaluate import MAX_STEPS, EvaluationError, Evaluator, UndefinedBehavior
from loomcli.semantics.fold import canonical, float_bits, float_from_bits, round_exact, round_float

# Host programs may loop over many launches; they get more steps than folding.
CASE_MAX_STEPS = 100 * MAX_STEPS
# A generated check tensor may take at most this many bytes (checked before allocating).
MAX_TENSOR_BYTES = 1 << 30

# struct codes of stored elements; f16 and bf16 go through their bit patterns.
_CODES = {"i1": "B", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "f16": "H", "bf16": "H", "f32": "f", "f64": "d"}


# ------------------------------------------------------------------ tensors


@dataclass(eq=False)
class Tensor:
    """A row-major host array: element type, static shape, little-endian bytes."""

    elem: ScalarType
    shape: tuple[int, ...]
    data: bytearray

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def values(self) -> list[Any]:
        """Canonical element values (bool for i1, int, float)."""
        return decode(self.elem, self.data, self.count)

    @classmethod
    def of(cls, elem: ScalarType, shape: Sequence[int], values: Sequence[Any]) -> Tensor:
        return cls(elem, tuple(shape), bytearray(encode(elem, values)))


def encode(elem: ScalarType, values: Sequence[Any]) -> bytes:
    """Little-endian storage of canonical values (section 5: a stored i1 is 0 or 1)."""
    code = _CODES[elem.name]
    if elem is F16 or elem is BF16:
        items: Sequence[Any] = [float_bits(elem, v) for v in values]
    elif elem.name == "i1":
        items = [1 if v else 0 for v in values]
    else:
        items = values
    return struct.pack(f"<{len(values)}{code}", *items)


def decode(elem: ScalarType, data: bytes | bytearray, count: int) -> list[Any]:
    code = _CODES[elem.name]
    raw = struct.unpack_from(f"<{count}{code}", data)
    if elem is F16 or elem is BF16:
        return [float_from_bits(elem, u) for u in raw]
    if elem.name == "i1":
        return [bool(u & 1) for u in raw]
    return list(raw)


def fill(elem: ScalarType, shape: Sequence[int], value: Any) -> Tensor:
    """`check.generate.fill`: every element is the literal, rounded or wrapped to the type."""
    v = canonical(value, elem)
    return Tensor.of(elem, shape, [v] * math.prod(shape))


def iota(elem: ScalarType, shape: Sequence[int], offset: Any, step: Any) -> Tensor:
    """`check.generate.iota`: row-major position p holds offset + p*step, computed
    exactly, then rounded once (floats) or wrapped (integers) to the type."""
    n = math.prod(shape)
    if is_float(elem):
        if all(math.isfinite(float(x)) for x in (offset, step)):
            o, s = Fraction(float(offset)), Fraction(float(step))
            values = [round_exact(elem, o + p * s) for p in range(n)]
        else:
            values = [round_float(elem, float(offset) + p * float(step)) for p in range(n)]
    else:
        values = [canonical(int(offset) + p * int(step), elem) for p in range(n)]
    return Tensor.of(elem, shape, values)


# ------------------------------------------------------------------ comparison


def format_value(v: Any, t: Type | None) -> str:
    """A value as diagnostics show it: integers in decimal, floats in the
    shortest form that reads back to the same value of their type."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v) or not isinstance(t, ScalarType) or not is_float(t) or t.name == "f64":
        return repr(float(v))
    for digits in range(1, 18):
        text = f"{v:.{digits}g}"
        if round_float(t, float(text)) == v:
            return repr(float(text))
    return repr(float(v))


def format_position(index: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, index)) + "]"


def unravel(p: int, shape: Sequence[int]) -> list[int]:
    """The multi-index of row-major position p."""
    out = []
    for d in reversed(shape):
        out.append(p % d if d else 0)
        p = p // d if d else 0
    return out[::-1]


def element_equal(a: Any, e: Any) -> bool:
    """`expect.equal`: integers exactly, floats numerically with -0 = +0 and NaN = NaN."""
    if isinstance(a, float) or isinstance(e, float):
        a, e = float(a), float(e)
        if math.isnan(a) or math.isnan(e):
            return math.isnan(a) and math.isnan(e)
        return a == e
    return int(a) == int(e)


def element_close(a: float, e: float, atol: float, rtol: float, nan_same: bool) -> bool:
    """`expect.close`, in f64: |a - e| <= atol + rtol*|e|; with nan(same) NaN
    matches only NaN, else any NaN fails. An infinity matches only itself
    (17.31: equal infinities pass), even where rtol*|e| would be infinite."""
    a, e = float(a), float(e)
    if math.isnan(a) or math.isnan(e):
        return nan_same and math.isnan(a) and math.isnan(e)
    if math.isinf(a) or math.isinf(e):
        return a == e
    return abs(a - e) <= atol + rtol * abs(e)


def first_mismatch(actual: Sequence[Any], expected: Sequence[Any],
                   same: Callable[[Any, Any], bool]) -> int | None:
    for p, (a, e) in enumerate(zip(actual, expected)):
        if not same(a, e):
            return p
    return None


# ------------------------------------------------------------------ samples


@dataclass(frozen=True)
class Sample:
    """One run of a case: its ordinal and (name, value) per parameter, in source order."""

    ordinal: int
    params: tuple[tuple[str, Any], ...] = ()
    types: tuple[Type, ...] = ()

    def label(self) -> str:
        """`[n=1, m=2]`, or empty for a case without parameters."""
        if not self.params:
            return ""
        types = self.types or (None,) * len(self.params)
        return "[" + ", ".join(f"{k}={format_value(v, t)}" for (k, v), t in zip(self.params, types)) + "]"

    def matches(self, selection: dict[str, Any]) -> bool:
        """A `check.benchmark` dictionary: every named parameter has that value."""
        mine = dict(self.params)
        for key, want in selection.items():
            if key not in mine:
                return False
            have = mine[key]
            if isinstance(have, float) or isinstance(want, float):
                if not element_equal(float(have), float(want)):
                    return False
            elif int(have) != int(want):
                return False
        return True


def param_ops(case: Operation) -> list[Operation]:
    return [op for op in case.regions[0].walk_ops() if op.opdef is CHECK_PARAM_CHOICE]


def samples(case: Operation) -> list[Sample]:
    """The Cartesian product of the parameters' values, first parameter slowest."""
    params = param_ops(case)
    names = [op.attr("name") for op in params]
    types = tuple(op.results[0].type for op in params)
    choices = [[canonical(v, op.results[0].type) for v in op.attr("values")] for op in params]
    return [Sample(i, tuple(zip(names, combo)), types) for i, combo in enumerate(itertools.product(*choices))]


# ------------------------------------------------------------------ running


class SampleFailure(Exception):
    """The sample cannot go on (a launch that cannot run, UB in host code); it
    fails with this diagnostic."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


class Launcher(Protocol):
    def launch(self, op: Operation, workload: list[Any], args: list[Any]) -> None:
        """Run `op`'s kernel; tensors among `args` are updated in place."""


@dataclass
class SampleResult:
    case: str
    sample: Sample
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)

    @property
    def name(self) -> str:
        """`@case [n=128]`, as the PASS and FAIL lines name the sample."""
        label = self.sample.label()
        return f"@{self.case} {label}" if label else f"@{self.case}"


class CaseRunner(Evaluator):
    """Runs check cases of one module on host values, launching kernels through `launcher`."""

    def __init__(self, module: Module, launcher: Launcher | None = None, *, path: str | None = None) -> None:
        super().__init__(module, max_steps=CASE_MAX_STEPS)
        self.launcher = launcher
        self.path = path or module.path
        self.sample: Sample | None = None
        self.result: SampleResult | None = None

    def run_case(self, case: Operation, only: Callable[[Sample], bool] | None = None) -> list[SampleResult]:
        return [self.run_sample(case, s) for s in samples(case) if only is None or only(s)]

    def run_sample(self, case: Operation, sample: Sample) -> SampleResult:
        self.sample = sample
        self.steps = 0
        self.result = result = SampleResult(case.attr("sym"), sample)
        try:
            self.run_region(case.regions[0], [])
        except SampleFailure as e:
            result.diagnostics.append(e.diagnostic)
        finally:
            self.sample = None
            self.result = None
        # A location points at the op; which of the case's samples failed is said here, once for all codes.
        for d in result.diagnostics:
            d.message += f" (sample {result.name})"
        return result

    # -------------------------------------------------------------- ops

    def run_op(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        handler = _CASE_OPS.get(op.opdef.name)
        try:
            if handler is not None:
                return handler(self, op, env)
            return super().run_op(op, env)
        except SampleFailure:
            raise
        except UndefinedBehavior as e:
            raise SampleFailure(self._diag("EXEC/002", op.loc, why=str(e))) from None
        except EvaluationError as e:
            raise SampleFailure(self._diag("EXEC/002", op.loc, why=f"cannot run {op.name}: {e}")) from None

    def _diag(self, code: str, loc: tuple[int, int], **fields: Any) -> Diagnostic:
        return Diagnostic.make(code, self.path, loc, **fields)

    def _param(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        assert self.sample is not None
        return [dict(self.sample.params)[op.attr("name")]]

    def _literal(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        return [canonical(op.attr("value"), op.results[0].type)]

    def shape_of(self, t: ShapedType, env: dict[Value, Any]) -> tuple[int, ...]:
        dims = []
        for d in t.dims:
            n = d if isinstance(d, int) else self._get(env, d)
            if n < 0:
                raise UndefinedBehavior(f"dimension {n} of {t} is negative")
            dims.append(int(n))
        return tuple(dims)

    def _tensor_shape(self, op: Operation, env: dict[Value, Any]) -> tuple[int, ...]:
        """The shape of the tensor `op` generates, refused before anything is
        allocated when it would take more than MAX_TENSOR_BYTES."""
        t = shaped(op.results[0].type)
        shape = self.shape_of(t, env)
        nbytes = math.prod(shape) * ELEMENT_BYTES[t.elem]
        if nbytes > MAX_TENSOR_BYTES:
            raise SampleFailure(self._diag("EXEC/002", op.loc, why=f"a {t} of {nbytes} bytes exceeds the "
                                                                    f"{MAX_TENSOR_BYTES}-byte limit of check tensors"))
        return shape

    def _fill(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        t = shaped(op.results[0].type)
        return [fill(t.elem, self._tensor_shape(op, env), op.attr("value"))]

    def _iota(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        t = shaped(op.results[0].type)
        return [iota(t.elem, self._tensor_shape(op, env), op.attr("offset"), op.attr("step"))]

    def _file(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        """`check.generate.file`: a NumPy `.npy` file, relative to the folder of
        the file that holds the case (17.39), read when the sample runs."""
        from loomcli.check.npy import DataFileError, read_npy

        t = shaped(op.results[0].type)
        shape = self._tensor_shape(op, env)
        written: str = op.attr("path")
        home = getattr(op.loc, "file", None) or self.path
        path = os.path.join(os.path.dirname(home), written)
        try:
            data = read_npy(path, t.elem.name, shape)
        except DataFileError as e:
            raise SampleFailure(self._diag("CHECK/002", op.loc_of("path"), path=written, why=str(e))) from None
        return [Tensor(t.elem, shape, data)]

    def _launch(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        if self.launcher is None:
            raise SampleFailure(self._diag("EXEC/002", op.loc, why="no device to launch kernels on"))
        values = [self._get(env, v) for v in op.operands]
        n = op.attr("nworkload", 0)
        self.launcher.launch(op, values[:n], values[n:])
        return []

    def _expect(self, op: Operation, env: dict[Value, Any]) -> list[Any]:
        actual, expected = (self._get(env, v) for v in op.operands[:2])
        t = op.operands[0].type
        if isinstance(actual, Tensor):
            a_values, e_values, shape, elem = actual.values(), expected.values(), actual.shape, actual.elem
        else:
            a_values, e_values, shape, elem = [actual], [expected], (), scalar(t)
        if op.opdef is CHECK_EXPECT_CLOSE:
            atol, rtol = float(op.attr("atol")), float(op.attr("rtol"))
            nan_same = str(op.attr("nan", "")) == "same"
            at = first_mismatch(a_values, e_values, lambda a, e: element_close(a, e, atol, rtol, nan_same))
        else:
            at = first_mismatch(a_values, e_values, element_equal)
        if at is not None and self.result is not None:
            position = format_position(unravel(at, shape)) if shape else "[]"
            self.result.diagnostics.append(self._diag("CHECK/001", op.loc, position=position,
                                                      a=format_value(a_values[at], elem),
                                                      e=format_value(e_values[at], elem)))
        return []


_CASE_OPS: OpTable[Callable[[CaseRunner, Operation, dict[Value, Any]], list[Any]]] = OpTable("check.cases._CASE_OPS", {
    "check.param.choice": CaseRunner._param,
    "check.literal": CaseRunner._literal,
    "check.generate.fill": CaseRunner._fill,
    "check.generate.iota": CaseRunner._iota,
    "check.generate.file": CaseRunner._file,
    "check.expect.equal": CaseRunner._expect,
    "check.expect.close": CaseRunner._expect,
    "kernel.launch": CaseRunner._launch,
})
