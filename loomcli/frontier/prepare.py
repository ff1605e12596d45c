"""Command preparation (LANGUAGE.md section 12, steps 2-4 and 6).

A public command program is run on constants, the way folding would rewrite
it: specialization arguments are bound and checked, child programs are
entered with the constants of their `[...]`, every `scf.if` condition and
`scf.for` bound must fold (the topology closes, else STRUCTURE/011 names the
value; CONFIG/003 when the value comes from an unbound `config.get`), loops
unroll, untaken branches vanish with their launches, and each `kernel.launch`
becomes the evaluation of the kernel's launch contract plus a dispatch.

The result is the serial/concurrent tree of dispatches. What a launch site
requires (its executable entry) is asked of a `Classifier` the moment the
site is reached, so the product can publish kernel requests while the rest
of the program is still being prepared.

Shape of the tree: the body of a program is serial; `command.serial` and
`command.concurrent` are nodes; a taken `scf.if` branch and each unrolled
`scf.for` iteration splice their ops into the enclosing node (as folding and
unrolling would); a child program is one serial node. Nested nodes of the
same kind are merged into their parent and empty nodes vanish, so the tree
is canonical: no node has a child of its own kind or no children.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.core import Module, Operation, Region, Value
from loomcli.ir.ops import CONFIG_GET, OpTable
from loomcli.ir.types import BUFFER, Type
from loomcli.targets.profiles import REFERENCE, U32_MAX, Profile

# Command preparation unrolls at most this many launches per program (17.15).
MAX_LAUNCHES = 65536
# ... and runs at most this many ops doing so (about 1.5 us each): a loop of
# 10^12 iterations that launches nothing, or only in an untaken branch, was
# folded one iteration at a time for days. Past it, the loop being unrolled
# does not close (STRUCTURE/011 at its upper bound), as past MAX_LAUNCHES.
MAX_FOLD_STEPS = 1 << 21

# Without a target, only the target-independent launch rules apply.
UNTARGETED = replace(REFERENCE, family="untargeted", selector="untargeted", subgroup_size=None,
                     max_workgroup_size=(U32_MAX,) * 3, max_flat_workgroup_size=U32_MAX)


# ---------------------------------------------------------------- the tree


@dataclass(frozen=True)
class Argument:
    """One device argument of a dispatch: a program buffer (by ordinal among
    the root program's buffer parameters) or a scalar constant of `type`."""

    type: str          # Loom type name; "buffer" for buffers
    value: Any         # buffer: the program buffer ordinal; scalar: its canonical value

    @property
    def is_buffer(self) -> bool:
        return self.type == "buffer"


@dataclass(frozen=True)
class Dispatch:
    requirement: int
    workgroups: tuple[int, int, int]
    workgroup_size: tuple[int, int, int]   # (0, 0, 0): an external entry's own
    arguments: tuple[Argument, ...]


@dataclass(frozen=True)
class Group:
    kind: str                              # "serial" | "concurrent"
    children: tuple[Node, ...]


Node = Dispatch | Group


def make_group(kind: str, children: Sequence[Node]) -> Group:
    """A canonical node: same-kind children merged in, empty groups dropped."""
    out: list[Node] = []
    for c in children:
        while isinstance(c, Group) and len(c.children) == 1:
            c = c.children[0]
        if isinstance(c, Group):
            if not c.children:
                continue
            if c.kind == kind:
                out.extend(c.children)
                continue
        out.append(c)
    return Group(kind, tuple(out))


def dispatches(node: Node) -> list[Dispatch]:
    """Every dispatch of a tree, in order."""
    if isinstance(node, Dispatch):
        return [node]
    return [d for c in node.children for d in dispatches(c)]


# ---------------------------------------------------------------- sites


@dataclass(frozen=True)
class BufferRef:
    """A buffer value while preparing: the root program's buffer parameter it is."""

    ordinal: int


@dataclass(frozen=True)
class LaunchSite:
    """A live `kernel.launch` with its constants: what classification needs."""

    op: Operation                  # the launch op (in the linked module)
    kernel: Operation              # its callee, a kernel.def
    workload: tuple[Any, ...]
    device: tuple[Any, ...]        # constants, or BufferRef for buffers
    profile: Profile | None        # the kernel's profile (None: no target)


class Classifier(Protocol):
    def launch(self, site: LaunchSite) -> int:
        """The requirement ordinal of a live kernel launch."""
        ...

    def external(self, entry: Operation) -> int:
        """The requirement ordinal of a `kernel.entry.decl` reached by `kernel.dispatch`."""
        ...


# ---------------------------------------------------------------- values that do not fold


@dataclass(frozen=True)
class _Unknown:
    """Why a value has no constant: the op it comes from, and the unbound key if any."""

    op: Operation | None
    config_key: str | None = None
    why: str = ""


class _Stop(Exception):
    """Raised internally with the diagnostic that ends preparation."""

    def __init__(self, diag: Diagnostic) -> None:
        super().__init__(diag.message)
        self.diag = diag


@dataclass
class _Frame:
    """One program being run: its values and the file it came from."""

    symbol: str
    file: str
    env: dict[Value, Any]
    unknown: dict[Value, _Unknown]


class Preparer:
    """Prepares the command programs of one linked, config-bound module."""

    def __init__(self, module: Module, profile: Profile | None, classifier: Classifier,
                 origins: Mapping[str, str] | None = None) -> None:
        from loomcli.semantics.evaluate import Evaluator
        from loomcli.targets.checks import ModuleChecks

        self.module = module
        self.profile = profile
        self.classifier = classifier
        self.origins = origins or {}
        self.symbols = module.symbols()
        self.checks = ModuleChecks(module)
        self.evaluator = Evaluator(module, subgroup_size=None)
        self._profiles: dict[str, Profile | None] = {}
        self._evaluators: dict[int | None, Any] = {}
        self._launches = 0
        self._steps = 0
        self._stack: list[str] = []
        self._loops: list[tuple[_Frame, Operation]] = []  # loops being unrolled, innermost last

    # ------------------------------------------------------------ entry point

    def prepare(self, program: Operation, spec: Sequence[Any]) -> Group:
        """The dispatch tree of root `program` with its specialization
        arguments bound to `spec` (checked values, in signature order).
        Raises CompileError."""
        region = program.regions[0]
        nspec = len(program.attr("sig").args)
        buffers = [BufferRef(k) for k in range(len(region.args) - nspec)]
        self._launches = 0
        self._steps = 0
        self._stack = []
        self._loops = []
        try:
            return self._enter(program, list(spec) + buffers, None)
        except _Stop as stop:
            raise CompileError([stop.diag]) from None

    # ------------------------------------------------------------ programs

    def _file(self, symbol: str) -> str:
        return self.origins.get(symbol, self.module.path)

    def _enter(self, program: Operation, args: list[Any], site: tuple[_Frame, Operation] | None) -> Group:
        symbol = program.attr("sym")
        if symbol in self._stack:
            cycle = " -> ".join(f"@{s}" for s in self._stack[self._stack.index(symbol):] + [symbol])
            frame, op = site if site is not None else (None, program)
            raise _Stop(Diagnostic.make("STRUCTURE/010", frame.file if frame else self._file(symbol), op.loc,
                                        cycle=cycle))
        region = program.regions[0]
        self._check_where(program, args, site)
        frame = _Frame(symbol, self._file(symbol), dict(zip(region.args, args)), {})
        self._stack.append(symbol)
        out: list[Node] = []
        self._run(region, frame, out)
        self._stack.pop()
        return make_group("serial", out)

    def _check_where(self, program: Operation, args: list[Any], site: tuple[_Frame, Operation] | None) -> None:
        from loomcli.semantics.fold import predicate_holds

        region = program.regions[0]
        env = dict(zip(region.args, args))
        for p in program.attr("launch").where or []:
            values = [env.get(a) if isinstance(a, Value) else a for a in p.args]
            known = [v for v in values if v is not None and not isinstance(v, BufferRef)]
            if len(known) < len(values):
                continue
            if not predicate_holds(p.name, [int(v) for v in known]):
                i = region.args.index(p.args[0])
                from loomcli.launch.program import format_value

                shown = ", ".join("%" + a.name if isinstance(a, Value) else str(a) for a in p.args)
                d = Diagnostic.make("LAUNCH_CONFIG/005", site[0].file if site else "<command-line>",
                                    site[1].loc if site else (0, 0), i=i, v=format_value(values[0]),
                                    pred=f"{p.name}({shown})")
                raise _Stop(d)

    # ------------------------------------------------------------ running a region

    def _run(self, region: Region, frame: _Frame, out: list[Node]) -> list[Any]:
        """Run `region`, appending its nodes to `out`; returns what its terminator yields
        (a value, or the `_Unknown` it stands for)."""
        for op in region.ops:
            self._steps += 1
            if self._steps > MAX_FOLD_STEPS:
                self._not_closed(frame, op)
            name = op.name
            if op.opdef.has("terminator"):
                return [self._value(frame, v) for v in op.operands]
            handler = _HANDLERS.get(name)
            if handler is not None:
                results = handler(self, op, frame, out)
            else:
                results = self._pure(op, frame)
            for r, v in zip(op.results, results):
                self._bind(frame, r, v)
        return []

    def _bind(self, frame: _Frame, v: Value, value: Any) -> None:
        if isinstance(value, _Unknown):
            frame.unknown[v] = value
            frame.env.pop(v, None)
        else:
            frame.env[v] = value
            frame.unknown.pop(v, None)

    def _value(self, frame: _Frame, v: Value) -> Any:
        if v in frame.env:
            return frame.env[v]
        return frame.unknown.get(v) or _Unknown(None)

    def need(self, frame: _Frame, op: Operation, i: int) -> Any:
        """Operand `i` of `op`, which must fold."""
        v = op.operands[i]
        if v in frame.env:
            return frame.env[v]
        cause = frame.unknown.get(v)
        if cause is not None and cause.config_key is not None and cause.op is not None:
            raise _Stop(Diagnostic.make("CONFIG/003", frame.file, cause.op.loc, k=cause.config_key))
        raise _Stop(Diagnostic.make("STRUCTURE/011", frame.file, op.operand_loc(i), v=v.name))

    def _pure(self, op: Operation, frame: _Frame) -> list[Any]:
        from loomcli.semantics.evaluate import EvaluationError, UndefinedBehavior

        for v in op.operands:
            if v not in frame.env:
                cause = frame.unknown.get(v) or _Unknown(op)
                return [cause] * len(op.results)
        self.evaluator.steps = 0  # every op gets the full budget (17.15)
        try:
            return self.evaluator.run_op(op, frame.env)
        except UndefinedBehavior as e:
            return [_Unknown(op, None, e.reason)] * len(op.results)
        except EvaluationError as e:
            key = op.attr("ref") if op.opdef is CONFIG_GET else None  # unbound: bound keys are constants
            return [_Unknown(op, key, str(e))] * len(op.results)

    # ------------------------------------------------------------ structured ops

    def _if(self, op: Operation, frame: _Frame, out: list[Node]) -> list[Any]:
        cond = self.need(frame, op, 0)
        return self._run(op.regions[0 if cond else 1], frame, out)

    def _for(self, op: Operation, frame: _Frame, out: list[Node]) -> list[Any]:
        lo, hi, step = (self.need(frame, op, i) for i in range(3))
        if step <= 0:
            raise _Stop(Diagnostic.make("STRUCTURE/011", frame.file, op.operand_loc(2), v=op.operands[2].name))
        body = op.regions[0]
        carried = [self._value(frame, v) for v in op.operands[3:]]
        iv = lo
        self._loops.append((frame, op))
        while iv < hi:
            for a, value in zip(body.args, [iv] + carried):
                self._bind(frame, a, value)
            carried = self._run(body, frame, out)
            iv += step
        self._loops.pop()
        return carried

    def _group(self, op: Operation, frame: _Frame, out: list[Node]) -> list[Any]:
        children: list[Node] = []
        self._run(op.regions[0], frame, children)
        out.append(make_group(op.name.removeprefix("command."), children))
        return []

    def _callee(self, frame: _Frame, op: Operation, kind: str) -> Operation:
        """The `kind` op `op` names as its callee (LINK/001 when there is none)."""
        callee = self.symbols.get(op.attr("callee"))
        if callee is None or callee.name != kind:
            raise _Stop(Diagnostic.make("LINK/001", frame.file, op.loc_of("callee"), s=op.attr("callee")))
        return callee

    def _program_launch(self, op: Operation, frame: _Frame, out: list[Node]) -> list[Any]:
        callee = self._callee(frame, op, "command.program.def")
        nwork = op.attr("nworkload", 0)
        args = [self.need(frame, op, i) for i in range(nwork)]
        args += [self._value(frame, v) for v in op.operands[nwork:]]
        out.append(self._enter(callee, args, (frame, op)))
        return []

    # ------------------------------------------------------------ launches

    def _count(self, frame: _Frame, op: Operation) -> None:
        self._launches += 1
        if self._launches > MAX_LAUNCHES:
            self._not_closed(frame, op)

    def _not_closed(self, frame: _Frame, op: Operation) -> None:
        """Past a preparation bound: the loop being unrolled does not close, and
        its upper bound is named (outside any loop, the op's first operand)."""
        at, loop = self._loops[-1] if self._loops else (frame, op)
        i = 1 if loop is not op else 0
        if i >= len(loop.operands):
            raise _Stop(Diagnostic.make("STRUCTURE/011", at.file, loop.loc, v=frame.symbol))
        raise _Stop(Diagnostic.make("STRUCTURE/011", at.file, loop.operand_loc(i), v=loop.operands[i].name))

    def _kernel_profile(self, kernel: Operation, frame: _Frame) -> Profile | None:
        sym = kernel.attr("sym")
        if sym not in self._profiles:
            try:
                self._profiles[sym] = self.checks.profile_for(kernel, self.profile)
            except CompileError as e:
                raise _Stop(e.diagnostics[0]) from None
        return self._profiles[sym]

    def _device_args(self, frame: _Frame, op: Operation, first: int, params: list[Value]) -> tuple[Any, ...]:
        values = []
        for k, param in enumerate(params):
            i = first + k
            if param.type is BUFFER:
                value = self._value(frame, op.operands[i])
                if not isinstance(value, BufferRef):  # pragma: no cover - buffers only come from the program
                    raise _Stop(Diagnostic.make("STRUCTURE/011", frame.file, op.operand_loc(i),
                                                v=op.operands[i].name))
                values.append(value)
            else:
                values.append(self.need(frame, op, i))
        return tuple(values)

    def _launch(self, op: Operation, frame: _Frame, out: list[Node]) -> list[Any]:
        from loomcli.launch.program import ContractViolation, evaluate_contract

        self._count(frame, op)
        kernel = self._callee(frame, op, "kernel.def")
        nwork = op.attr("nworkload", 0)
        workload = tuple(self.need(frame, op, i) for i in range(nwork))
        device = self._device_args(frame, op, nwork, kernel.attr("launch").args)
        profile = self._kernel_profile(kernel, frame)
        limits = profile or UNTARGETED
        subgroup = limits.subgroup_size or None
        try:
            counts, sizes, _ = evaluate_contract(self.module, kernel, list(workload), limits, subgroup,
                                                 evaluator=self._evaluator(subgroup))
        except ContractViolation as v:
            raise _Stop(Diagnostic.make(v.code, frame.file, op.loc, **v.fields)) from None
        requirement = self.classifier.launch(LaunchSite(op, kernel, workload, device, profile))
        out.append(Dispatch(requirement, counts, sizes, _arguments(kernel.attr("launch").args, device)))
        return []

    def _evaluator(self, subgroup: int | None) -> Any:
        from loomcli.semantics.evaluate import Evaluator

        ev = self._evaluators.get(subgroup)
        if ev is None:
            ev = self._evaluators[subgroup] = Evaluator(self.module, subgroup_size=subgroup)
        return ev

    def _dispatch(self, op: Operation, frame: _Frame, out: list[Node]) -> list[Any]:
        self._count(frame, op)
        entry = self._callee(frame, op, "kernel.entry.decl")
        nwork = op.attr("nworkload", 0)
        counts = [self.need(frame, op, i) for i in range(nwork)] + [1] * (3 - nwork)
        limits = self.profile or UNTARGETED
        for d, c in enumerate(counts):
            limit = min(U32_MAX, limits.max_workgroup_count[d])
            if not 0 <= c <= limit:
                raise _Stop(Diagnostic.make("LAUNCH_CONFIG/006", frame.file, op.operand_loc(min(d, nwork - 1)),
                                            field=f"workgroups.{'xyz'[d]}",
                                            v=f"{c} (must be in [0, {limit}])"))
        device = self._device_args(frame, op, nwork, entry.attr("sig").args)
        requirement = self.classifier.external(entry)
        out.append(Dispatch(requirement, tuple(counts), (0, 0, 0),
                            _arguments(entry.attr("sig").args, device)))
        return []


def _arguments(params: list[Value], values: Sequence[Any]) -> tuple[Argument, ...]:
    return tuple(Argument("buffer", v.ordinal) if isinstance(v, BufferRef) else Argument(_type_name(p.type), v)
                 for p, v in zip(params, values))


def _type_name(t: Type) -> str:
    return t.name


Handler = Callable[[Preparer, Operation, _Frame, list[Node]], list[Any]]
# What the preparer does itself; every other op of a program is evaluated.
_HANDLERS: OpTable[Handler] = OpTable("frontier.prepare._HANDLERS", {
    "scf.if": Preparer._if,
    "scf.for": Preparer._for,
    "command.serial": Preparer._group,
    "command.concurrent": Preparer._group,
    "command.program.launch": Preparer._program_launch,
    "kernel.launch": Preparer._launch,
    "kernel.dispatch": Preparer._dispatch,
})
