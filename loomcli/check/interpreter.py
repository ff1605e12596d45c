"""The reference interpreter: `kernel.launch` of a check case without a GPU
(LANGUAGE.md sections 8, 9 and 17.27, 17.32).

`InterpreterLauncher` mirrors `VulkanLauncher`: it checks the workload
predicates and evaluates the launch configuration (LAUNCH_CONFIG/*), then
runs the kernel of the module compiled for the interpreter's profile on the
tensors' own bytes (each distinct tensor is one root, so the host sees every
write).

Execution: every workgroup in order; inside one, one Python generator per
invocation, run round-robin. A generator yields at `kernel.barrier` and at
`kernel.{workgroup,subgroup}.reduce`; the scheduler resumes the members of
a scope only when all of them wait at the same op, else EXEC/002
(convergence, section 8). Regions without convergent ops run as plain
functions (no generator), so the common straight-line code is cheap.

Each op is compiled once into a closure `fn(inv, env) -> results`; pure ops
run through the folders of `loomcli.semantics.fold` (the `Evaluator`'s
semantics), constants and `config.get` are folded ahead of time. UB raises
`UndefinedBehavior` (EXEC/002), a bad access `OutOfBounds` (EXEC/001), both
reported at the op's location and failing the sample.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any, cast

from loomcli.check.cases import SampleFailure, Tensor
from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.core import Module, Operation, Region, Value
from loomcli.ir.ops import CONVERGENT as CONVERGENT_TRAIT
from loomcli.ir.ops import (
    FUNCTION,
    INDEX_ASSUME,
    KERNEL_BARRIER,
    KERNEL_DEF,
    KERNEL_SUBGROUP_REDUCE,
    KERNEL_SUBGROUP_SIZE,
    KERNEL_WORKGROUP_COUNT,
    KERNEL_WORKGROUP_ID,
    KERNEL_WORKGROUP_SIZE,
    KERNEL_WORKITEM_DISPATCH_ID,
    KERNEL_WORKITEM_ID,
    OPS,
    OpTable,
    ops_with,
)
from loomcli.ir.types import (
    BF16,
    ELEMENT_BYTES,
    F16,
    F32,
    INDEX,
    OFFSET,
    ScalarType,
    ShapedType,
    is_float,
    lane_count,
    scalar,
    shaped,
)
from loomcli.semantics.evaluate import MAX_STEPS, EvaluationError, Evaluator, NotEvaluable, UndefinedBehavior
from loomcli.semantics.fold import (
    CONSTANT_OPS,
    FOLDERS,
    Folder,
    canonical,
    check_predicates,
    constant_value,
    float_bits,
    float_from_bits,
    round_float,
)
from loomcli.targets.profiles import REFERENCE, Profile

_CODES = {"i1": "B", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "f16": "H", "bf16": "H", "f32": "f", "f64": "d"}
AXES = {"x": 0, "y": 1, "z": 2}

# The folder of a scalar op the interpreter makes up (`_scalar_op`) folds whatever operands it is
# given, so it always has results (a folder's None is for operands that are not constants).
SynthFolder = Callable[[Operation, list[Any], None], list[Any]]


class OutOfBounds(EvaluationError):
    """An access outside its view or root (EXEC/001)."""

    def __init__(self, view: str, indices: Sequence[int], extents: Sequence[int] = ()) -> None:
        super().__init__(f"{view}[{', '.join(map(str, indices))}]")
        self.view = view
        self.indices = ", ".join(map(str, indices))
        self.extents = ", ".join(map(str, extents))


class ExecFailure(Exception):
    """An EXEC diagnostic raised from inside a launch, carrying the op."""

    def __init__(self, code: str, op: Operation, fields: dict[str, Any]) -> None:
        super().__init__(code)
        self.code, self.op, self.fields = code, op, fields


# ------------------------------------------------------------------ memory


class Root:
    """A buffer: bytes with identity."""

    __slots__ = ("data", "label")

    def __init__(self, data: bytearray, label: str) -> None:
        self.data = data
        self.label = label


class View:
    """(root, base byte offset, extents, element strides) of section 9."""

    __slots__ = ("base", "elem", "extents", "name", "root", "size", "strides")

    def __init__(self, root: Root, base: int, extents: tuple[int, ...], strides: tuple[int, ...],
                 elem: ScalarType, name: str) -> None:
        self.root, self.base, self.extents, self.strides = root, base, extents, strides
        self.elem, self.size, self.name = elem, ELEMENT_BYTES[elem], name

    def address(self, idx: Sequence[int]) -> int:
        """The byte position of element `idx`; OutOfBounds outside the view,
        its root, or from a misaligned base."""
        pos = 0
        for i, e, s in zip(idx, self.extents, self.strides):
            if not 0 <= i < e:
                raise OutOfBounds(self.name, idx, self.extents)
            pos += i * s
        at = self.base + pos * self.size
        if at < 0 or at + self.size > len(self.root.data) or self.base % self.size:
            raise OutOfBounds(self.name, idx, self.extents)
        return at


def check_window(name: str, origin: Sequence[int], extents: Sequence[int], parent: Sequence[int]) -> None:
    """A subview's window must lie in its parent view (OutOfBounds, at the origin)."""
    for i, e, se in zip(origin, extents, parent):
        if i < 0 or i + e > se:
            raise OutOfBounds(name, origin, parent)


def _codec(elem: ScalarType) -> tuple[Callable[[bytearray, int], Any], Callable[[bytearray, int, Any], None]]:
    """Little-endian load and store of one element (section 5)."""
    st = struct.Struct("<" + _CODES[elem.name])
    unpack, pack = st.unpack_from, st.pack_into
    if elem is F16 or elem is BF16:
        def load(buf: bytearray, at: int) -> Any:
            return float_from_bits(elem, unpack(buf, at)[0])

        def store(buf: bytearray, at: int, v: Any) -> None:
            pack(buf, at, float_bits(elem, v))
    elif elem is F32:
        bits = struct.Struct("<I")

        def load(buf: bytearray, at: int) -> Any:
            v = unpack(buf, at)[0]
            return v if v == v else float_from_bits(F32, bits.unpack_from(buf, at)[0])

        def store(buf: bytearray, at: int, v: Any) -> None:
            if v == v:
                pack(buf, at, v)
            else:  # a NaN keeps its sign and payload (section 17.5; bitcasts make them)
                bits.pack_into(buf, at, float_bits(F32, v))
    elif elem.name == "i1":
        def load(buf: bytearray, at: int) -> Any:
            return bool(buf[at] & 1)

        def store(buf: bytearray, at: int, v: Any) -> None:
            buf[at] = 1 if v else 0
    else:
        def load(buf: bytearray, at: int) -> Any:
            return unpack(buf, at)[0]

        def store(buf: bytearray, at: int, v: Any) -> None:
            pack(buf, at, v)
    return load, store


# ------------------------------------------------------------------ transcendental floats (not folded)


def _safe(fn: Callable[..., float]) -> Callable[..., float]:
    def run(*xs: float) -> float:
        try:
            return fn(*xs)
        except OverflowError:
            return math.inf
        except (ValueError, ZeroDivisionError):
            return math.nan
    return run


def _log(base: Callable[[float], float]) -> Callable[[float], float]:
    def fn(x: float) -> float:
        if math.isnan(x) or x < 0:
            return math.nan
        if x == 0:
            return -math.inf
        if math.isinf(x):
            return math.inf
        return base(x)
    return fn


def _rsqrt(x: float) -> float:
    if x == 0:
        return math.copysign(math.inf, x)
    if x < 0 or math.isnan(x):
        return math.nan
    return 1.0 / math.sqrt(x)


def _pow(a: float, b: float) -> float:
    """C's pow (IEEE 754 9.2.1) where Python's raises: an odd integer
    exponent keeps the base's sign in an overflow and for a zero base."""
    try:
        return math.pow(a, b)
    except (OverflowError, ValueError, ZeroDivisionError):
        integral = math.isfinite(b) and b == math.floor(b)
        odd = integral and math.fmod(b, 2.0) != 0.0
        if a == 0.0:  # pow(+-0, y < 0)
            return math.copysign(math.inf, a) if odd else math.inf
        if a < 0.0 and not integral:
            return math.nan
        return -math.inf if a < 0.0 and odd else math.inf


# The approximate ops (no folder), in binary64 and rounded once to the op's type.
_APPROXIMATE: OpTable[Callable[..., float]] = OpTable("check.interpreter._APPROXIMATE", {
    "scalar.expf": _safe(math.exp), "scalar.exp2f": _safe(lambda x: 2.0 ** x), "scalar.logf": _log(math.log),
    "scalar.log2f": _log(math.log2), "scalar.tanhf": math.tanh, "scalar.sinf": _safe(math.sin),
    "scalar.cosf": _safe(math.cos), "scalar.rsqrtf": _rsqrt, "scalar.powf": _pow,
})


def _scalar_op(name: str, elem: ScalarType, attrs: dict[str, Any], arity: int) -> Operation:
    """A detached scalar op of element type `elem` that the folders run (vector
    lanes and reduction combining kinds use scalar semantics)."""
    return Operation(OPS[name], [Value(f"a{i}", elem) for i in range(arity)], [elem], dict(attrs))


# ------------------------------------------------------------------ compiled regions


class Code:
    """A region compiled: per op (fn, results, op), the terminator operands,
    and whether it (transitively) reaches a convergent op."""

    __slots__ = ("args", "convergent", "ops", "term", "term_op")

    def __init__(self) -> None:
        self.ops: list[tuple[Any, tuple[Value, ...], Operation, bool]] = []
        self.args: list[Value] = []
        self.term: list[Value] = []
        self.term_op: Operation | None = None
        self.convergent = False


class Invocation:
    __slots__ = ("dispatch", "group", "lane", "linear", "local", "sg_size", "wg")

    def __init__(self, local: tuple[int, int, int], group: tuple[int, int, int], size: tuple[int, int, int],
                 linear: int, sg_size: int, wg: dict[Operation, Root]) -> None:
        self.local, self.group, self.linear = local, group, linear
        self.dispatch = tuple(g * s + i for g, s, i in zip(group, size, local))
        self.lane = linear % sg_size
        self.sg_size = sg_size
        self.wg = wg


class Sync:
    """What a waiting invocation yields: the convergent op, its scope, a value."""

    __slots__ = ("op", "subgroup", "value")

    def __init__(self, op: Operation, subgroup: bool, value: Any = None) -> None:
        self.op, self.subgroup, self.value = op, subgroup, value


CONVERGENT = ops_with(CONVERGENT_TRAIT)


# Operations one launch may run, all invocations together, before EXEC/003:
# about 20 s of interpreting; `loom test --max-steps` changes it.
DEFAULT_MAX_STEPS = 20_000_000


class Interpreter:
    """Runs kernels of one compiled module for one profile."""

    def __init__(self, module: Module, profile: Profile = REFERENCE, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        self.module = module
        self.max_steps = max_steps
        self.steps = 0
        self.profile = profile
        self.symbols = module.symbols()
        self.subgroup_size = profile.subgroup_size or REFERENCE.subgroup_size or 32
        self.evaluator = Evaluator(module, subgroup_size=self.subgroup_size)
        self.codes: dict[int, Code] = {}
        self.convergent_fns: dict[str, bool] = {}
        ib, ob = profile.index_bitwidth, profile.offset_bitwidth
        self.narrow = ib < 64 or ob < 64
        self.index_range = (-(1 << (ib - 1)), (1 << (ib - 1)) - 1)
        self.offset_range = (0, (1 << ob) - 1 if ob < 64 else (1 << 63) - 1)
        # per launch
        self.size = (1, 1, 1)
        self.count = (1, 1, 1)

    # -------------------------------------------------------------- launching

    def run_kernel(self, kernel: Operation, args: list[Any], groups: tuple[int, int, int],
                   size: tuple[int, int, int]) -> None:
        """Run `kernel` on device `args` (Roots for buffers). Raises ExecFailure."""
        body = kernel.region("body")
        code = self.code(body)
        self.size, self.count = size, groups
        self.steps = 0
        for a, v in zip(body.args, args):
            if not isinstance(v, Root):
                self._check_range(a, v, kernel)
        sx, sy, sz = size
        n = sx * sy * sz
        sg = self.subgroup_size
        for gz in range(groups[2]):
            for gy in range(groups[1]):
                for gx in range(groups[0]):
                    wg: dict[Operation, Root] = {}
                    invs = [Invocation((lin % sx, lin // sx % sy, lin // (sx * sy)), (gx, gy, gz), size, lin, sg, wg)
                            for lin in range(n)]
                    if code.convergent:
                        self._run_group(code, invs, args)
                    else:
                        for inv in invs:
                            env = dict(zip(body.args, args))
                            self.exec(code, inv, env)

    def _run_group(self, code: Code, invs: list[Invocation], args: list[Any]) -> None:
        body_args = code.args
        gens = []
        for inv in invs:
            env = dict(zip(body_args, args))
            gens.append(self.gen(code, inv, env))
        n = len(invs)
        sg = self.subgroup_size
        waiting: list[Sync | None] = [None] * n
        done = [False] * n
        send: list[Any] = [None] * n
        runnable = list(range(n))
        while True:
            for i in runnable:
                try:
                    waiting[i] = gens[i].send(send[i])
                except StopIteration:
                    waiting[i] = None
                    done[i] = True
            runnable = []
            if all(done):
                return
            # Subgroup scopes first: a subgroup all of whose members wait at subgroup ops.
            for start in range(0, n, sg):
                members = range(start, min(start + sg, n))
                syncs = [waiting[i] for i in members]
                if not any(s is not None and s.subgroup for s in syncs):
                    continue
                first = next(s for s in syncs if s is not None and s.subgroup)
                for s in syncs:
                    if s is None or s.op is not first.op:
                        self._diverged(first.op, s, "subgroup")
                results = self._combine(first.op, [s.value for s in syncs])  # type: ignore[union-attr]
                for i in members:
                    send[i] = results
                    waiting[i] = None
                    runnable.append(i)
            if runnable:
                continue
            first = next(s for s in waiting if s is not None)
            for s in waiting:
                if s is None or s.op is not first.op:
                    self._diverged(first.op, s, "workgroup")
            result = self._combine(first.op, [s.value for s in waiting])  # type: ignore[union-attr]
            for i in range(n):
                send[i] = result
                waiting[i] = None
            runnable = list(range(n))

    def _diverged(self, op: Operation, other: Sync | None, scope: str) -> None:
        if other is None:
            why = f"{op.name} is not reached by every invocation of its {scope}"
        else:
            why = (f"invocations of one {scope} wait at different convergent ops ({op.name} at line {op.loc[0]}, "
                   f"{other.op.name} at line {other.op.loc[0]})")
        raise ExecFailure("EXEC/002", op, {"why": why})

    def _combine(self, op: Operation, values: list[Any]) -> Any:
        if op.opdef is KERNEL_BARRIER:
            return None
        fold = self._combiner(op.attr("kind"), scalar(op.result().type), op)
        acc = values[0]
        for v in values[1:]:
            acc = fold(acc, v)
        return acc

    def _combiner(self, kind: str, elem: ScalarType, where: Operation) -> Callable[[Any, Any], Any]:
        name = f"scalar.{kind}"
        if name not in FOLDERS:
            raise ExecFailure("EXEC/002", where, {"why": f"unknown combining kind {kind}"})
        attrs = {"flags": ()} if kind in ("addi", "muli") or is_float(elem) else {}
        synth = _scalar_op(name, elem, attrs, 2)
        folder = cast(SynthFolder, FOLDERS[name])

        def fold(a: Any, b: Any) -> Any:
            try:
                return folder(synth, [a, b], None)[0]
            except UndefinedBehavior as e:
                raise ExecFailure("EXEC/002", where, {"why": str(e)}) from None
        return fold

    # -------------------------------------------------------------- execution

    def _count(self, code: Code) -> None:
        """Charge one run of a region (its ops and terminator) to the launch's budget."""
        self.steps += len(code.ops) + 1
        if self.steps > self.max_steps:
            op = code.term_op if code.term_op is not None else code.ops[0][2]
            raise ExecFailure("EXEC/003", op, {"n": self.max_steps})

    def exec(self, code: Code, inv: Invocation, env: dict[Value, Any]) -> list[Any]:
        """Run a region without convergent ops; the terminator's operand values."""
        self._count(code)
        for fn, res, op, _ in code.ops:
            try:
                out = fn(inv, env)
            except ExecFailure:
                raise
            except EvaluationError as e:
                raise exec_failure(op, e) from None
            if res:
                for r, v in zip(res, out):
                    env[r] = v
        return [env[v] for v in code.term]

    def gen(self, code: Code, inv: Invocation, env: dict[Value, Any]) -> Any:
        """`exec` as a generator that yields `Sync`s at convergent ops."""
        self._count(code)
        for fn, res, op, conv in code.ops:
            try:
                if conv:
                    out = yield from fn(inv, env)
                else:
                    out = fn(inv, env)
            except ExecFailure:
                raise
            except EvaluationError as e:
                raise exec_failure(op, e) from None
            if res:
                for r, v in zip(res, out):
                    env[r] = v
        return [env[v] for v in code.term]

    def _check_range(self, v: Value, x: Any, op: Operation) -> None:
        t = v.type
        if t is INDEX:
            lo, hi = self.index_range
        elif t is OFFSET:
            lo, hi = self.offset_range
        else:
            return
        if not lo <= x <= hi:
            bits = self.profile.index_bitwidth if t is INDEX else self.profile.offset_bitwidth
            raise ExecFailure("EXEC/002", op, {"why": f"%{v.name} = {x} is outside the {bits}-bit {t} range "
                                                      f"of {self.profile.name}"})

    # -------------------------------------------------------------- compiling

    def code(self, region: Region) -> Code:
        c = self.codes.get(id(region))
        if c is not None:
            return c
        c = Code()
        self.codes[id(region)] = c
        c.args = list(region.args)
        for op in region.ops:
            if op.opdef.has("terminator"):
                c.term = list(op.operands)
                c.term_op = op
                break
            fn, conv = self._compile(op)
            if conv:
                c.convergent = True
            if self.narrow and any(r.type is INDEX or r.type is OFFSET for r in op.results):
                fn = self._checked(fn, op)
            c.ops.append((fn, tuple(op.results), op, conv))
        return c

    def _checked(self, fn: Any, op: Operation) -> Any:
        (ilo, ihi), (olo, ohi) = self.index_range, self.offset_range
        results = op.results
        check = self._check_range

        def run(inv: Invocation, env: dict[Value, Any]) -> Any:
            out = fn(inv, env)
            for r, x in zip(results, out):
                if r.type is INDEX:
                    if not ilo <= x <= ihi:
                        check(r, x, op)
                elif r.type is OFFSET and not olo <= x <= ohi:
                    check(r, x, op)
            return out
        return run

    def _compile(self, op: Operation) -> tuple[Any, bool]:
        """(fn(inv, env) -> results, convergent?). A convergent fn is a generator function."""
        name = op.opdef.name
        special = _HANDLERS.get(name)
        if special is not None:
            return special(self, op)
        folder = FOLDERS.get(name)
        if folder is not None:
            return _folded(op, folder), False

        def unsupported(inv: Invocation, env: dict[Value, Any]) -> Any:
            raise NotEvaluable(f"the interpreter does not run {name}")
        return unsupported, False

    # ---- helpers for handlers

    @staticmethod
    def _index_getter(op: Operation) -> Callable[[dict[Value, Any]], list[int]]:
        """The per-axis indices of an access: literals from the `indices`
        attribute, values from the `indices` operands."""
        slots: list[Any] = []
        rest = iter(op.operand_group("indices"))
        for item in op.attr("indices", ()):
            slots.append(next(rest) if item is None else int(item))
        if all(isinstance(s, Value) for s in slots):
            vals = tuple(slots)
            return lambda env: [env[v] for v in vals]
        return lambda env: [env[s] if isinstance(s, Value) else s for s in slots]

    def _dims(self, t: ShapedType) -> Callable[[dict[Value, Any]], tuple[int, ...]]:
        dims = t.dims
        if all(isinstance(d, int) for d in dims):
            static = tuple(dims)
            return lambda env: static  # type: ignore[return-value]

        def get(env: dict[Value, Any]) -> tuple[int, ...]:
            out = tuple(d if isinstance(d, int) else env[d] for d in dims)
            if any(d < 0 for d in out):
                raise UndefinedBehavior(f"dimension of {t} is negative: {out}")
            return out
        return get


# ------------------------------------------------------------------ op handlers

Handler = Callable[[Interpreter, Operation], tuple[Any, bool]]
# What the interpreter runs beyond the folders (`FOLDERS` runs every op with a
# meaning on constants); tests/test_op_tables.py holds the two to every op a
# kernel body or device function may hold.
_HANDLERS: OpTable[Handler] = OpTable("check.interpreter._HANDLERS")
handler = _HANDLERS.register


def _folded(op: Operation, folder: Folder) -> Any:
    operands = op.operands
    if op.opdef is INDEX_ASSUME:
        return lambda inv, env: folder(op, [env[v] for v in operands], env.get)
    if len(operands) == 2:
        a, b = operands
        return lambda inv, env: folder(op, [env[a], env[b]], None)
    if len(operands) == 1:
        (a,) = operands
        return lambda inv, env: folder(op, [env[a]], None)
    return lambda inv, env: folder(op, [env[v] for v in operands], None)


@handler(*CONSTANT_OPS, "config.get", "target.subgroup.size")
def _known(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    """Constants, and what the evaluator knows before the launch (config, the target)."""
    try:
        out = [constant_value(op)] if op.opdef.name in CONSTANT_OPS else it.evaluator.run_op(op, {})
    except EvaluationError as e:
        err = e

        def failing(inv: Invocation, env: dict[Value, Any]) -> Any:
            raise err
        return failing, False
    return (lambda inv, env: out), False


@handler(*_APPROXIMATE)
def _approximate(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    math_fn = _APPROXIMATE[op.opdef.name]
    t = op.results[0].type
    operands = op.operands
    return (lambda inv, env: [round_float(t, math_fn(*[env[v] for v in operands]))]), False


@handler("kernel.workitem.id", "kernel.workgroup.id", "kernel.workgroup.size", "kernel.workgroup.count",
         "kernel.workitem.dispatch.id", "kernel.subgroup.size", "kernel.subgroup.lane.id")
def _coord(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    d = AXES.get(op.attr_or("kind", "x"), 0)
    if op.opdef is KERNEL_WORKITEM_ID:
        return (lambda inv, env: [inv.local[d]]), False
    if op.opdef is KERNEL_WORKGROUP_ID:
        return (lambda inv, env: [inv.group[d]]), False
    if op.opdef is KERNEL_WORKGROUP_SIZE:
        return (lambda inv, env: [it.size[d]]), False
    if op.opdef is KERNEL_WORKGROUP_COUNT:
        return (lambda inv, env: [it.count[d]]), False
    if op.opdef is KERNEL_WORKITEM_DISPATCH_ID:
        return (lambda inv, env: [inv.dispatch[d]]), False
    if op.opdef is KERNEL_SUBGROUP_SIZE:
        return (lambda inv, env: [inv.sg_size]), False
    return (lambda inv, env: [inv.lane]), False


@handler("buffer.view")
def _buffer_view(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    buf, off = op.operand("buffer"), op.operand("offset")
    t = shaped(op.results[0].type)
    dims = it._dims(t)
    elem = t.elem
    name = "%" + op.results[0].name

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        ext = dims(env)
        strides = []
        s = 1
        for e in reversed(ext):
            strides.append(s)
            s *= e
        return [View(env[buf], env[off], ext, tuple(reversed(strides)), elem, name)]
    return run, False


@handler("view.subview")
def _subview(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    src = op.operand("view")
    origin = it._index_getter(op)
    t = shaped(op.results[0].type)
    dims = it._dims(t)
    name = "%" + op.results[0].name

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        v: View = env[src]
        o = origin(env)
        ext = dims(env)
        check_window(v.name, o, ext, v.extents)
        base = v.base + sum(i * s for i, s in zip(o, v.strides)) * v.size
        return [View(v.root, base, ext, v.strides, v.elem, name)]
    return run, False


@handler("view.load")
def _view_load(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    src = op.operand("view")
    idx = it._index_getter(op)
    load, _ = _codec(scalar(op.results[0].type))

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        v: View = env[src]
        return [load(v.root.data, v.address(idx(env)))]
    return run, False


@handler("view.store")
def _view_store(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    val, dst = op.operand("value"), op.operand("view")
    idx = it._index_getter(op)
    _, store = _codec(scalar(val.type))

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        v: View = env[dst]
        store(v.root.data, v.address(idx(env)), env[val])
        return None
    return run, False


@handler("view.atomic.rmw")
def _atomic(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    val, dst = op.operand("value"), op.operand("view")
    idx = it._index_getter(op)
    elem = scalar(val.type)
    load, store = _codec(elem)
    kind = op.attr("kind")
    combine: Callable[[Any, Any], Any]
    if kind in ("xchgi", "xchgf"):
        def combine(old: Any, x: Any) -> Any:
            return x
    elif kind in ("addi", "subi"):
        # Atomics wrap (no nsw/nuw).
        folder = cast(SynthFolder, FOLDERS[f"scalar.{kind}"])
        synth = _scalar_op(f"scalar.{kind}", elem, {"flags": ()}, 2)

        def combine(old: Any, x: Any) -> Any:
            return folder(synth, [old, x], None)[0]
    else:
        combine = it._combiner(kind, elem, op)

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        v: View = env[dst]
        at = v.address(idx(env))
        old = load(v.root.data, at)
        store(v.root.data, at, combine(old, env[val]))
        return [old]
    return run, False


@handler("buffer.alloca")
def _alloca(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    nbytes = op.operand("bytes")
    name = "%" + op.results[0].name
    workgroup = op.attr("kind", None) == "workgroup"
    # The profile's bound on one allocation (LANGUAGE.md 17.36, and the
    # reference profile's limits in 7.8). A constant size past it is TARGET/004
    # or /007 when compiling for a device; here the bytes would be allocated
    # for real (a terabyte ended in MemoryError), so any size past it stops
    # the launch before the allocation.
    limit = it.profile.max_workgroup_storage_bytes if workgroup else it.profile.max_private_bytes

    def allocate(size: int) -> Root:
        if size > limit:
            raise ExecFailure("EXEC/002", op, {"why": f"{'workgroup' if workgroup else 'private'} storage {size} "
                                                      f"> {limit} bytes of {it.profile.name}"})
        return Root(bytearray(b"\xff" * size), name)

    if workgroup:
        def run(inv: Invocation, env: dict[Value, Any]) -> Any:
            root = inv.wg.get(op)
            if root is None:
                root = inv.wg[op] = allocate(env[nbytes])
            return [root]
    else:
        def run(inv: Invocation, env: dict[Value, Any]) -> Any:
            return [allocate(env[nbytes])]
    return run, False


@handler("buffer.assume.noalias", "buffer.assume.alignment", "buffer.assume.memory_space")
def _assume_buffer(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    operands = op.operands
    return (lambda inv, env: [env[v] for v in operands]), False


# ---- vectors


def _lanes(op: Operation) -> int:
    return lane_count(op.results[0].type if op.results else op.operands[0].type)


@handler("vector.constant")
def _vconst(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    t = shaped(op.results[0].type)
    out = [tuple([canonical(op.attr("value"), t.elem)] * lane_count(t))]
    return (lambda inv, env: out), False


@handler("vector.splat")
def _splat(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    x = op.operand("value")
    n = _lanes(op)
    return (lambda inv, env: [(env[x],) * n]), False


@handler("vector.extract")
def _extract(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    idx = it._index_getter(op)
    src = op.operand("vector")
    n = lane_count(src.type)

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        (k,) = idx(env)
        if not 0 <= k < n:
            raise UndefinedBehavior(f"vector.extract lane {k} of {n}")
        return [env[src][k]]
    return run, False


@handler("vector.insert")
def _insert(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    x, src = op.operand("value"), op.operand("vector")
    idx = it._index_getter(op)
    n = lane_count(src.type)

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        (k,) = idx(env)
        if not 0 <= k < n:
            raise UndefinedBehavior(f"vector.insert lane {k} of {n}")
        lanes = list(env[src])
        lanes[k] = env[x]
        return [tuple(lanes)]
    return run, False


@handler("vector.reduce")
def _vreduce(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    vec, init = op.operand("vector"), op.operand("init")
    combine = it._combiner(op.attr("kind"), scalar(op.result().type), op)

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        acc = env[init]
        for x in env[vec]:
            acc = combine(acc, x)
        return [acc]
    return run, False


@handler("vector.fmaf", "vector.addf", "vector.mulf", "vector.addi", "vector.muli")
def _lanewise(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    sname = "scalar." + op.opdef.name[len("vector."):]
    elem = shaped(op.results[0].type).elem
    attrs = dict(op.attr_items())
    if sname in ("scalar.addi", "scalar.muli", "scalar.subi"):
        attrs.setdefault("flags", ())
    synth = _scalar_op(sname, elem, attrs, len(op.operands))
    folder = cast(SynthFolder, FOLDERS[sname])
    operands = op.operands

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        return [tuple(folder(synth, list(xs), None)[0] for xs in zip(*[env[v] for v in operands]))]
    return run, False


@handler("vector.load")
def _vload(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    src = op.operand("view")
    idx = it._index_getter(op)
    n = _lanes(op)
    load, _ = _codec(shaped(op.results[0].type).elem)

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        v: View = env[src]
        i = idx(env)
        out = []
        for k in range(n):
            out.append(load(v.root.data, v.address(i[:-1] + [i[-1] + k])))
        return [tuple(out)]
    return run, False


@handler("vector.store")
def _vstore(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    val, dst = op.operand("value"), op.operand("view")
    idx = it._index_getter(op)
    _, store = _codec(shaped(val.type).elem)

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        v: View = env[dst]
        i = idx(env)
        for k, x in enumerate(env[val]):
            store(v.root.data, v.address(i[:-1] + [i[-1] + k]), x)
        return None
    return run, False


# ---- convergent ops


@handler("kernel.barrier")
def _barrier(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    sync = Sync(op, op.attr("scope", None) == "subgroup")

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        yield sync
        return None
    return run, True


@handler("kernel.workgroup.reduce", "kernel.subgroup.reduce")
def _reduce(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    x = op.operand("value")
    sub = op.opdef is KERNEL_SUBGROUP_REDUCE

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        result = yield Sync(op, sub, env[x])
        return [result]
    return run, True


# ---- control flow


@handler("scf.if")
def _scf_if(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    cond = op.operand("condition")
    then = it.code(op.region("then"))
    other = it.code(op.region("else")) if len(op.regions) > 1 and op.region("else").ops else None
    conv = then.convergent or (other is not None and other.convergent)
    if conv:
        def gen(inv: Invocation, env: dict[Value, Any]) -> Any:
            if env[cond]:
                return (yield from it.gen(then, inv, env))
            if other is not None:
                return (yield from it.gen(other, inv, env))
            return []
        return gen, True

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        if env[cond]:
            return it.exec(then, inv, env)
        if other is not None:
            return it.exec(other, inv, env)
        return []
    return run, False


@handler("scf.for")
def _scf_for(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    lo, hi, step = op.operand("lower"), op.operand("upper"), op.operand("step")
    inits = op.operand_group("inits")
    body = it.code(op.region("body"))
    iv_arg, carried_args = body.args[0], body.args[1:]

    def bounds(env: dict[Value, Any]) -> tuple[int, int, int]:
        s = env[step]
        if s <= 0:
            raise UndefinedBehavior(f"scf.for step {s} is not > 0")
        return env[lo], env[hi], s

    if body.convergent:
        def gen(inv: Invocation, env: dict[Value, Any]) -> Any:
            a, b, s = bounds(env)
            carried = [env[v] for v in inits]
            iv = a
            while iv < b:
                env[iv_arg] = iv
                for arg, v in zip(carried_args, carried):
                    env[arg] = v
                carried = yield from it.gen(body, inv, env)
                iv += s
            return carried
        return gen, True

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        a, b, s = bounds(env)
        carried = [env[v] for v in inits]
        iv = a
        while iv < b:
            env[iv_arg] = iv
            for arg, v in zip(carried_args, carried):
                env[arg] = v
            carried = it.exec(body, inv, env)
            iv += s
        return carried
    return run, False


@handler("scf.while")
def _scf_while(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    inits = op.operand_group("inits")
    before, after = it.code(op.region("before")), it.code(op.region("after"))

    def bind(code: Code, env: dict[Value, Any], values: list[Any]) -> None:
        for arg, v in zip(code.args, values):
            env[arg] = v

    if before.convergent or after.convergent:
        def gen(inv: Invocation, env: dict[Value, Any]) -> Any:
            carried = [env[v] for v in inits]
            while True:
                bind(before, env, carried)
                values = yield from it.gen(before, inv, env)
                if not values[0]:
                    return values[1:]
                bind(after, env, values[1:])
                carried = yield from it.gen(after, inv, env)
        return gen, True

    def run(inv: Invocation, env: dict[Value, Any]) -> Any:
        carried = [env[v] for v in inits]
        while True:
            bind(before, env, carried)
            values = it.exec(before, inv, env)
            if not values[0]:
                return values[1:]
            bind(after, env, values[1:])
            carried = it.exec(after, inv, env)
    return run, False


@handler("func.call", "template.call")
def _call(it: Interpreter, op: Operation) -> tuple[Any, bool]:
    callee = it.symbols.get(op.attr("callee", ""))
    operands = op.operands
    if callee is None or not callee.opdef.has(FUNCTION):
        def missing(inv: Invocation, env: dict[Value, Any]) -> Any:
            raise NotEvaluable(f"`@{op.attr('callee', None)}` has no body here")
        return missing, False
    region = callee.region("body")
    body = it.code(region)
    sig = callee.attr("sig", None)
    where = sig.where if sig is not None and sig.where else None

    def enter(env: dict[Value, Any]) -> dict[Value, Any]:
        local = {a: env[v] for a, v in zip(region.args, operands)}
        if where:
            check_predicates(where, local.get)
        return local

    if body.convergent:
        def gen(inv: Invocation, env: dict[Value, Any]) -> Any:
            return (yield from it.gen(body, inv, enter(env)))
        return gen, True
    return (lambda inv, env: it.exec(body, inv, enter(env))), False


# ------------------------------------------------------------------ the launcher


class InterpreterLauncher:
    """Runs the `kernel.launch` ops of one input's cases on the interpreter;
    the same interface as `VulkanLauncher`."""

    def __init__(self, module: Module, profile: Profile, path: str, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        self.module = module
        self.profile = profile
        self.path = path
        self.interpreter = Interpreter(module, profile, max_steps)
        self.symbols = module.symbols()

    def launch(self, op: Operation, workload: list[Any], args: list[Any]) -> None:
        callee = op.attr("callee")
        kernel = self.symbols.get(callee)
        if kernel is None or kernel.opdef is not KERNEL_DEF:
            raise SampleFailure(Diagnostic.make("EXEC/002", self.path, op.loc,
                                                why=f"@{callee} has no kernel body to interpret"))
        groups, size = self._geometry(op, kernel, workload)
        params = kernel.region("body").args
        roots: dict[int, Root] = {}
        device: list[Any] = []
        for i, (param, value) in enumerate(zip(params, args)):
            if param.type.name == "buffer" and not isinstance(param.type, ShapedType):
                if not isinstance(value, Tensor):
                    raise SampleFailure(Diagnostic.make("EXEC/002", self.path, op.loc,
                                                        why=f"buffer argument {i} is not a tensor"))
                if id(value) not in roots:
                    roots[id(value)] = Root(value.data, "%" + param.name)  # shares the host bytes
                device.append(roots[id(value)])
            else:
                device.append(canonical(value, param.type))
        try:
            self.interpreter.run_kernel(kernel, device, groups, size)
        except ExecFailure as e:
            raise SampleFailure(exec_diagnostic(e, self.path, callee)) from None
        except RecursionError:
            raise SampleFailure(Diagnostic.make("EXEC/002", self.path, op.loc,
                                                why="call depth exceeded in the interpreter")) from None

    def _geometry(self, op: Operation, kernel: Operation, workload: list[Any]
                  ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """The launch contract (section 8) exactly as launch-config artifacts
        evaluate it; a violation fails the sample at the launch site."""
        from loomcli.launch.program import ContractViolation, evaluate_contract

        region = kernel.region("config")
        values = [canonical(v, a.type) for v, a in zip(workload, region.args)]
        try:
            counts, sizes, _ = evaluate_contract(self.module, kernel, values, self.profile,
                                                 self.interpreter.subgroup_size, MAX_STEPS,
                                                 self.interpreter.evaluator)
        except ContractViolation as v:
            raise SampleFailure(Diagnostic.make(v.code, self.path, op.loc, **v.fields)) from None
        return counts, sizes


def exec_diagnostic(failure: ExecFailure, path: str, kernel: str) -> Diagnostic:
    """The diagnostic a launch of `kernel` (its symbol) fails its sample with
    on an EXEC failure: the interpreter's, and an instrumented device run's
    (loomcli.check.faults)."""
    return Diagnostic.make(failure.code, path, failure.op.loc, kernel=kernel, **failure.fields)


def exec_failure(op: Operation, e: EvaluationError) -> ExecFailure:
    """An evaluation error of `op` as the EXEC diagnostic it stands for."""
    if isinstance(e, OutOfBounds):
        return ExecFailure("EXEC/001", op, {"view": e.view, "indices": e.indices, "extents": e.extents})
    if isinstance(e, UndefinedBehavior):
        return ExecFailure("EXEC/002", op, {"why": str(e)})
    return ExecFailure("EXEC/002", op, {"why": f"cannot run {op.name}: {e}"})


def build_launcher(path: str, module_roots: list[str], profile: Profile) -> InterpreterLauncher:
    """Compile `path`'s launched kernels for `profile` and wrap them. Raises CompileError."""
    from loomcli.service.front import CompileOptions, compile_module

    compiled = compile_module(CompileOptions(input=path, profile=profile, roots=module_roots,
                                             for_execution=True))
    return InterpreterLauncher(compiled.module, profile, path)


__all__ = ["CompileError", "ExecFailure", "Interpreter", "InterpreterLauncher", "OutOfBounds", "Root", "View",
           "build_launcher", "check_window", "exec_diagnostic", "exec_failure"]
