"""Loading a launch-config artifact and evaluating launches (LANGUAGE.md 8).

The artifact is an ordinary Loom module in bytecode (layout: docs/launch.md):

    config.def @launch_config.format = 1 : i32
    amdgpu.target<gfx1100> @launch_config.target.0 {every profile fact}
    config.def @launch_config.<entry>.subgroup_size = 32 : index
    config.def @launch_config.<entry>.workgroup_storage_bytes = 0 : offset
    kernel.def export("<entry>") target(@launch_config.target.0) @k(workload) where [...] {
      launch-config region
    } launch() {
      kernel.return
    }
    ... the pure functions the regions call

`LaunchProgram` loads it once; `lookup` finds an entry by name once;
`invoke` evaluates one launch: workload values are type-checked
(LAUNCH_CONFIG/004) and their predicates checked (005), the region runs in
64 bits with the shared evaluator (UB: 007; does not fold: 008), and the
geometry is checked against the entry's profile (006).

This module is what `loom launch-eval` runs, so it stays small: no LLVM,
no emitter, no rich, no pass pipeline beyond the evaluator.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.core import Module, Operation, Value
from loomcli.ir.ops import CONFIG_DEF, KERNEL_DEF
from loomcli.ir.types import F64, I1, INDEX, OFFSET, ScalarType, Type, is_float, is_int
from loomcli.targets.profiles import U32_MAX, Profile

FORMAT_VERSION = 1
PREFIX = "launch_config."
FORMAT_SYMBOL = PREFIX + "format"
TARGET_PREFIX = PREFIX + "target."
FACTS = {"subgroup_size": INDEX, "workgroup_storage_bytes": OFFSET}
COMMAND_LINE = "<command-line>"


def fact_symbol(entry: str, fact: str) -> str:
    """The `config.def` symbol holding `fact` of entry `entry`."""
    return f"{PREFIX}{entry}.{fact}"


def entry_name(kernel: Operation) -> str:
    """LANGUAGE.md 17.8: the export name, else the symbol."""
    return kernel.attr("export", None) or kernel.attr("sym")


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Launch:
    """One evaluated launch: the compiled contract of LANGUAGE.md section 8."""

    workload: tuple[Any, ...]
    workgroups: tuple[int, int, int]
    workgroup_size: tuple[int, int, int]
    cluster: tuple[int, int, int]
    subgroup_size: int
    workgroup_storage_bytes: int

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """`workload=1009 workgroups=16x1x1 ...`, the one line `loom launch-eval` prints."""
        def triple(t: tuple[int, ...]) -> str:
            return "x".join(map(str, t))

        return (f"workload={','.join(map(format_value, self.workload))} workgroups={triple(self.workgroups)} "
                f"workgroup_size={triple(self.workgroup_size)} cluster={triple(self.cluster)} "
                f"subgroup_size={self.subgroup_size} workgroup_storage_bytes={self.workgroup_storage_bytes}")

    def to_json(self) -> dict[str, Any]:
        return {"workload": [_json_value(v) for v in self.workload], "workgroups": list(self.workgroups),
                "workgroup_size": list(self.workgroup_size), "cluster": list(self.cluster),
                "subgroup_size": self.subgroup_size, "workgroup_storage_bytes": self.workgroup_storage_bytes}


def format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return format_value(v)  # JSON has no infinities or NaN
    return v


@dataclass(frozen=True)
class LaunchFunction:
    """One entry of a loaded program: `lookup` returns it, `invoke` takes it."""

    entry: str
    kernel: Operation
    profile: Profile
    subgroup_size: int
    workgroup_storage_bytes: int

    @property
    def workload(self) -> list[Value]:
        return self.kernel.regions[0].args


# ---------------------------------------------------------------- workload values

_INT = re.compile(r"-?(0[xX][0-9A-Fa-f]+|[0-9]+)\Z")
_FLOAT = re.compile(r"-?([0-9]+\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|inf|nan)\Z")


class BadValue(Exception):
    pass


def _int_range(t: ScalarType) -> tuple[int, int]:
    """Literals a type takes: index, offset by value; iN both readings (17.4)."""
    if t is INDEX:
        return -(1 << 63), (1 << 63) - 1
    if t is OFFSET:
        return 0, (1 << 63) - 1
    return -(1 << (t.bits - 1)), (1 << t.bits) - 1


def parse_value(value: Any, t: Type) -> Any:
    """A workload value (text as typed on a command line, or a Python value)
    as the canonical constant of `t`; BadValue says why it is not one."""
    from loomcli.semantics.fold import canonical, round_float

    if not isinstance(t, ScalarType) or t.category not in ("int", "float", "index", "offset"):
        raise BadValue(f"type {t} cannot be a workload type")
    written = value if isinstance(value, str) else format_value(value)
    if isinstance(value, str):
        text = value.strip()
        if t is I1 and text in ("true", "false"):
            return text == "true"
        if _INT.match(text):
            digits = text.removeprefix("-")
            hexadecimal = digits[:2] in ("0x", "0X")
            if len(digits[2 if hexadecimal else 0:].lstrip("0")) > (16 if hexadecimal else 20):
                short = text if len(text) <= 40 else text[:40] + "…"
                raise BadValue(f"`{short}` is outside the range of {t}")  # and past Python's digit limit
            n = int(digits[2:], 16) if hexadecimal else int(digits)
            value = -n if text.startswith("-") else n
        elif is_float(t) and _FLOAT.match(text):
            value = float(text)
            if math.isinf(value) and not text.endswith("inf"):  # finite as written: it overflows f64 itself
                raise BadValue(f"`{text if len(text) <= 40 else text[:40] + '…'}` overflows {t}")
        else:
            raise BadValue(f"`{value}` is not {'a float' if is_float(t) else 'an integer'}")
    if isinstance(value, bool):
        if t is I1:
            return value
        raise BadValue(f"`{format_value(value)}` is not {'a float' if is_float(t) else 'an integer'}")
    if is_float(t):
        if isinstance(value, int):
            if float(value) != value:
                raise BadValue(f"`{written}` is not exact in {t}")
            value = float(value)
        if not isinstance(value, float):
            raise BadValue(f"`{value!r}` is not a float")
        rounded = round_float(t, value)
        if math.isinf(rounded) and math.isfinite(value):
            raise BadValue(f"`{written}` overflows {t}")
        return rounded
    if not isinstance(value, int):
        raise BadValue(f"`{value!r}` is not an integer")
    lo, hi = _int_range(t)
    if t is I1:
        lo = 0
    if not lo <= value <= hi:
        raise BadValue(f"`{written}` is outside the range of {t}")
    return canonical(value, t)


def value_from_bits(bits: int, t: Type) -> Any:
    """A workload value from its 64-bit host slot: index and offset use all 64
    bits, narrower types the low bits (the rest must be zero)."""
    from loomcli.semantics.fold import float_from_bits, signed

    if not 0 <= bits < 1 << 64:
        raise BadValue(f"slot {bits} is not a 64-bit pattern")
    if t is INDEX:
        return signed(bits, 64)
    if t is OFFSET:
        if bits >> 63:
            raise BadValue(f"slot {bits:#x} is not an offset (>= 2^63)")
        return bits
    if not isinstance(t, ScalarType) or t.category not in ("int", "float"):
        raise BadValue(f"type {t} cannot be a workload type")
    width = t.bits if is_int(t) else (64 if t is F64 else 32 if t.name == "f32" else 16)
    if bits >> width:
        raise BadValue(f"slot {bits:#x} has bits above the {width} of {t}")
    if is_int(t):
        return bool(bits) if t is I1 else signed(bits, width)
    return float_from_bits(t, bits)


def _pred_text(p: Any) -> str:
    args = ["%" + a.name if isinstance(a, Value) else str(a) for a in p.args]
    return f"{p.name}({', '.join(args)})"


# ---------------------------------------------------------------- the program


class LaunchProgram:
    """A loaded launch-config artifact."""

    def __init__(self, module: Module, path: str | None = None) -> None:
        self.module = module
        self.path = path or module.path
        symbols = module.symbols()
        marker = symbols.get(FORMAT_SYMBOL)
        if marker is None or marker.opdef is not CONFIG_DEF:
            self._malformed(f"not a launch-config artifact (no @{FORMAT_SYMBOL})")
        if marker.attr("value", None) != FORMAT_VERSION:
            self._malformed(f"launch-config format {marker.attr('value', None)} is not {FORMAT_VERSION}")
        self.functions: dict[str, LaunchFunction] = {}
        for op in module.ops:
            if op.opdef is KERNEL_DEF:
                fn = self._entry(op, symbols)
                self.functions[fn.entry] = fn

    @classmethod
    def load(cls, data: bytes, path: str = "<bytecode>") -> LaunchProgram:
        """Read and verify artifact bytes (BYTECODE/*, verifier codes)."""
        from loomcli.bytecode import read_module
        from loomcli.ir.verifier import verify

        module = read_module(data, path)
        diags = verify(module)
        if any(d.severity == "error" for d in diags):
            raise CompileError(diags)
        return cls(module, path)

    def _malformed(self, why: str) -> NoReturn:
        raise CompileError([Diagnostic.make("BYTECODE/003", self.path, (0, 0), offset=0, why=why)])

    def _entry(self, kernel: Operation, symbols: dict[str, Operation]) -> LaunchFunction:
        from loomcli.targets.records import is_record, record_profile

        entry = entry_name(kernel)
        record = symbols.get(kernel.attr("target", ""))
        if record is None or not is_record(record):
            self._malformed(f"entry `{entry}` has no target record")
        profile, diags = record_profile(record, self.path)
        if diags:
            raise CompileError(diags)
        facts: dict[str, int] = {}
        for fact, t in FACTS.items():
            op = symbols.get(fact_symbol(entry, fact))
            value = op.attr("value", None) if op is not None and op.opdef is CONFIG_DEF else None
            if op is None or op.attr_or("type") is not t or type(value) is not int or value < 0:
                self._malformed(f"entry `{entry}` lacks @{fact_symbol(entry, fact)} : {t}")
            facts[fact] = value
        return LaunchFunction(entry, kernel, profile, facts["subgroup_size"], facts["workgroup_storage_bytes"])

    # ------------------------------------------------------------ lookup and invocation

    def lookup(self, name: str) -> LaunchFunction:
        """The entry exported as `name` (`@` optional); LAUNCH_CONFIG/001 if none."""
        fn = self.functions.get(name.removeprefix("@"))
        if fn is None:
            shown = name.removeprefix("@")
            raise CompileError([Diagnostic.make("LAUNCH_CONFIG/001", COMMAND_LINE, (0, 0), name=shown)])
        return fn

    def invoke(self, fn: LaunchFunction, values: Sequence[Any], max_steps: int | None = None) -> Launch:
        """Evaluate the launch of `fn` for workload `values` (text or Python values)."""
        args = fn.workload
        if len(values) != len(args):
            types = ", ".join(str(a.type) for a in args)
            self._workload_error(f"`{fn.entry}` takes {len(args)} value{'s' if len(args) != 1 else ''} "
                                 f"({types}), found {len(values)}")
        workload = []
        for i, (a, v) in enumerate(zip(args, values)):
            try:
                workload.append(parse_value(v, a.type))
            except BadValue as e:
                self._workload_error(f"argument {i} (%{a.name}: {a.type}): {e}")
        return self._run(fn, workload, max_steps)

    def invoke_bits(self, fn: LaunchFunction, slots: Sequence[int], max_steps: int | None = None) -> Launch:
        """`invoke` with the host ABI: one 64-bit slot per workload value."""
        args = fn.workload
        if len(slots) != len(args):
            self._workload_error(f"`{fn.entry}` takes {len(args)} slots, found {len(slots)}")
        workload = []
        for i, (a, bits) in enumerate(zip(args, slots)):
            try:
                workload.append(value_from_bits(bits, a.type))
            except BadValue as e:
                self._workload_error(f"argument {i} (%{a.name}: {a.type}): {e}")
        return self._run(fn, workload, max_steps)

    def _workload_error(self, detail: str) -> None:
        raise CompileError([Diagnostic.make("LAUNCH_CONFIG/004", COMMAND_LINE, (0, 0), detail=detail)])

    def _run(self, fn: LaunchFunction, workload: list[Any], max_steps: int | None) -> Launch:
        try:
            counts, sizes, cluster = evaluate_contract(self.module, fn.kernel, workload, fn.profile,
                                                       fn.profile.subgroup_size or None, max_steps)
        except ContractViolation as v:
            path, loc = (COMMAND_LINE, (0, 0)) if v.code == "LAUNCH_CONFIG/005" else (self.path, v.loc)
            raise CompileError([Diagnostic.make(v.code, path, loc, **v.fields)]) from None
        return Launch(tuple(workload), counts, sizes, cluster, fn.subgroup_size, fn.workgroup_storage_bytes)


class ContractViolation(Exception):
    """A workload or launch that breaks the launch contract: a LAUNCH_CONFIG
    code, its message fields and the op location it concerns. Callers decide
    where to report it (a command line, an artifact, a launch site)."""

    def __init__(self, code: str, loc: tuple[int, int], **fields: Any) -> None:
        super().__init__(code)
        self.code = code
        self.loc = loc
        self.fields = fields


Triple = tuple[int, int, int]


def evaluate_contract(module: Module, kernel: Operation, workload: list[Any], profile: Profile,
                      subgroup_size: int | None, max_steps: int | None = None,
                      evaluator: Any = None) -> tuple[Triple, Triple, Triple]:
    """The launch contract of LANGUAGE.md section 8 for typed workload values:
    the workload predicates (LAUNCH_CONFIG/005), the launch-config region in
    64 bits (007 on UB, 008 when it does not fold) and the geometry rules of
    the profile (006). Returns (workgroups, workgroup_size, cluster) or raises
    ContractViolation. Shared by launch-config artifacts and the interpreter."""
    from loomcli.semantics.evaluate import MAX_STEPS, UndefinedBehavior
    from loomcli.semantics.fold import predicate_holds
    from loomcli.semantics.launch import run_launch_config

    args = kernel.regions[0].args
    env = dict(zip(args, workload))
    for p in kernel.attr("sig").where or []:
        values = [int(env[a]) if isinstance(a, Value) else a for a in p.args]
        if not predicate_holds(p.name, values):
            i = args.index(p.args[0])
            raise ContractViolation("LAUNCH_CONFIG/005", kernel.loc, i=i, v=format_value(workload[i]),
                                    pred=_pred_text(p))
    run = run_launch_config(module, kernel, workload, subgroup_size, MAX_STEPS if max_steps is None else max_steps,
                            evaluator)
    if run.failures:
        f = run.failures[0]
        if isinstance(f.error, UndefinedBehavior):
            raise ContractViolation("LAUNCH_CONFIG/007", f.op.loc, why=f.error.reason)
        raise ContractViolation("LAUNCH_CONFIG/008", f.op.loc, field=f.fields[0], s=kernel.attr("sym"))
    for name, triple in run.values.items():
        if None in triple:  # pragma: no cover - every argument is known, so only a failure leaves a hole
            raise ContractViolation("LAUNCH_CONFIG/008", kernel.loc, field=name, s=kernel.attr("sym"))
    counts, sizes, cluster = (tuple(int(v) for v in run.values[k])
                              for k in ("workgroups", "workgroup_size", "cluster_size"))
    problem = check_geometry(counts, sizes, cluster, profile)  # type: ignore[arg-type]
    if problem is not None:
        field, shown = problem
        config = kernel.regions[0].terminator
        loc = config.loc_of(field.split(".")[0].split("*")[0]) if config is not None else (0, 0)
        raise ContractViolation("LAUNCH_CONFIG/006", loc, field=field, v=shown)
    return counts, sizes, cluster  # type: ignore[return-value]


AXES = "xyz"


def check_geometry(counts: tuple[int, int, int], sizes: tuple[int, int, int], cluster: tuple[int, int, int],
                   profile: Profile) -> tuple[str, str] | None:
    """The launch contract's geometry rules (LANGUAGE.md 8, 17.26): the first
    violated one as (field, value shown), else None."""
    for d, c in enumerate(counts):
        if not 0 <= c <= U32_MAX:
            return f"workgroups.{AXES[d]}", f"{c} (must be in [0, {U32_MAX}])"
        if c > profile.max_workgroup_count[d]:
            return f"workgroups.{AXES[d]}", f"{c} (max {profile.max_workgroup_count[d]} on {profile.name})"
    for d, s in enumerate(sizes):
        if s < 1:
            return f"workgroup_size.{AXES[d]}", f"{s} (must be >= 1)"
        if s > profile.max_workgroup_size[d]:
            return f"workgroup_size.{AXES[d]}", f"{s} (max {profile.max_workgroup_size[d]} on {profile.name})"
    flat = sizes[0] * sizes[1] * sizes[2]
    if flat > profile.max_flat_workgroup_size:
        return "workgroup_size", (f"{'x'.join(map(str, sizes))} ({flat} invocations, max "
                                  f"{profile.max_flat_workgroup_size} on {profile.name})")
    for d, k in enumerate(cluster):
        if k < 1:
            return f"cluster_size.{AXES[d]}", f"{k} (must be >= 1)"
    for d, (c, k) in enumerate(zip(counts, cluster)):
        if c % k:
            return f"workgroups.{AXES[d]}", f"{c} (not a multiple of cluster size {k})"
    if cluster != (1, 1, 1):
        return "cluster_size", f"{'x'.join(map(str, cluster))} ({profile.name} has no workgroup clusters)"
    if profile.max_grid_size is not None:
        for d, (c, s) in enumerate(zip(counts, sizes)):
            if c * s > profile.max_grid_size:
                return (f"workgroups.{AXES[d]}*workgroup_size.{AXES[d]}",
                        f"{c}*{s} = {c * s} (above {profile.max_grid_size})")
    return None


def evaluate(artifact: bytes, export: str, workload: Sequence[Any], *, path: str = "<bytecode>",
             max_steps: int | None = None) -> Launch:
    """Load `artifact`, find `export` and evaluate its launch for `workload`
    (text or Python values). Raises CompileError with LAUNCH_CONFIG/*,
    BYTECODE/* diagnostics."""
    program = LaunchProgram.load(artifact, path)
    return program.invoke(program.lookup(export), workload, max_steps)


def is_launch_artifact(data: bytes) -> bool:
    """Bytecode whose symbol table holds the launch-config format marker."""
    from loomcli.bytecode import read_symbol_table
    from loomcli.frontend import is_bytecode

    if not is_bytecode(data):
        return False
    try:
        return any(e.symbol == FORMAT_SYMBOL for e in read_symbol_table(data))
    except CompileError:
        return True  # let the full reader report what is wrong
