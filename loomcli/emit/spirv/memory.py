"""Memory roots of a kernel and where each buffer or view value may point.

SPIR-V for Vulkan has logical addressing: no pointer can be selected, stored
or passed around freely. A Loom `buffer` value is therefore lowered to the
*root* it names (a kernel buffer parameter, a workgroup alloca, a private
alloca) and a view to (root, base element, strides). Where control flow can
make a value name one of several roots (`scf.select` of buffers, an `scf.if`
yielding different views, a loop carrying buffers that swap), the value
carries a 32-bit root selector and each access switches over the candidate
roots.

`RootAnalysis` computes, before any code is written, the candidate roots of
every buffer/view value of each kernel and of each device function
specialization (a function is specialized per tuple of its arguments'
candidate roots, so a callee reaches global variables directly), and which
element types each root is accessed with. The latter decides how workgroup
and private roots are declared: an array of the one element type they are
used with, else of unsigned words of the narrowest width used (wider
elements are then assembled from several words).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit.spirv.builder import NATURAL_STORAGE
from loomcli.ir.core import Module, Operation, Region, Value
from loomcli.ir.ops import FUNCTION, SCF_YIELD, VIEW_ATOMIC_RMW, OpTable
from loomcli.ir.types import BUFFER, ELEMENT_BYTES, ScalarType, Type, is_float, is_view

Roots = frozenset["Root"]
EMPTY: Roots = frozenset()


def tracked(t: Type) -> bool:
    """Types whose values name memory roots."""
    return t is BUFFER or is_view(t)


@dataclass(eq=False)
class Root:
    """One memory root. `number` is what a root selector holds for it."""

    kind: str                      # "buffer" | "workgroup" | "private"
    number: int
    binding: int = -1              # buffers: binding in descriptor set 0
    op: Operation | None = None    # allocas: the alloca
    size: int = 0                  # allocas: bytes
    types: dict[ScalarType, None] = field(default_factory=dict)    # element types accessed
    atomics: dict[ScalarType, None] = field(default_factory=dict)  # element types accessed atomically
    storage: tuple[str, int] = ("u", 32)   # allocas: array element ("u" | "f", bits), set by `decide`
    var: int = 0                   # allocas: the SPIR-V variable, created on first use

    def __repr__(self) -> str:
        return f"<root {self.kind} #{self.number}>"

    @property
    def word_bytes(self) -> int:
        return self.storage[1] // 8


def sorted_roots(roots: Roots) -> tuple[Root, ...]:
    return tuple(sorted(roots, key=lambda r: r.number))


@dataclass(eq=False)
class Facts:
    """Candidate roots of the tracked values of one function body."""

    roots: dict[Value, Roots] = field(default_factory=dict)
    results: list[Roots] = field(default_factory=list)   # function specializations: per result

    def of(self, v: Value) -> tuple[Root, ...]:
        return sorted_roots(self.roots.get(v, EMPTY))


SpecKey = tuple[str, tuple[Roots, ...]]


class RootAnalysis:
    """Candidate roots for every kernel and device-function specialization of a module."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.symbols = module.symbols()
        self.buffers: dict[int, Root] = {}           # binding -> root (shared by every kernel)
        self.allocas: dict[Operation, Root] = {}
        self.kernels: dict[Operation, Facts] = {}
        self.specs: dict[SpecKey, Facts] = {}
        self._next = 1 << 16                         # alloca root numbers; below are bindings
        self._kernel: Operation | None = None

    # ------------------------------------------------------------ entry points

    def kernel(self, kernel: Operation, bindings: dict[Value, int]) -> Facts:
        """Analyze a kernel body; `bindings` maps buffer arguments to their bindings."""
        facts = Facts()
        self._kernel = kernel
        for arg, binding in bindings.items():
            root = self.buffers.get(binding)
            if root is None:
                root = self.buffers[binding] = Root("buffer", binding, binding=binding)
            facts.roots[arg] = frozenset((root,))
        self._walk(kernel.region("body"), facts.roots)
        self.kernels[kernel] = facts
        return facts

    def spec_key(self, callee: str, arg_roots: list[Roots | None]) -> SpecKey:
        return (callee, tuple(r if r is not None else EMPTY for r in arg_roots))

    def function(self, key: SpecKey) -> Facts:
        found = self.specs.get(key)
        if found is not None:
            return found
        fn = self.symbols.get(key[0])
        if fn is None or not fn.opdef.has(FUNCTION):
            raise CompileError([Diagnostic.make("LINK/001", self.module.path, (0, 0), s=key[0])])
        facts = Facts()
        self.specs[key] = facts
        body = fn.region("body")
        for arg, roots in zip(body.args, key[1]):
            if tracked(arg.type):
                facts.roots[arg] = roots
        self._walk(body, facts.roots)
        term = body.terminator
        if term is not None:
            facts.results = [facts.roots.get(v, EMPTY) if tracked(v.type) else EMPTY for v in term.operands]
        return facts

    # ------------------------------------------------------------ the walk

    def _walk(self, region: Region, env: dict[Value, Roots]) -> None:
        for op in region.ops:
            handler = _HANDLERS.get(op.name)
            if handler is not None:
                handler(self, op, env)

    def _alloca(self, op: Operation, env: dict[Value, Roots]) -> None:
        root = self.allocas.get(op)
        if root is None:
            size = fold_value(op.operand("bytes"))
            if not isinstance(size, int) or isinstance(size, bool):
                if op.attr("kind", None) == "workgroup":
                    raise CompileError([Diagnostic.make("STRUCTURE/008", self.module.path, op.loc)])
                raise CompileError([Diagnostic.make("TYPE/003", self.module.path, op.operand_loc(0),
                                                    what="alloca size", why="it must fold to a constant")])
            root = Root(op.attr("kind", "private"), self._next, op=op, size=size)
            self._next += 1
            self.allocas[op] = root
        env[op.results[0]] = frozenset((root,))

    @staticmethod
    def _same(op: Operation, env: dict[Value, Roots]) -> None:
        for r, v in zip(op.results, op.operands):
            env[r] = env.get(v, EMPTY)

    @staticmethod
    def _first(op: Operation, env: dict[Value, Roots]) -> None:
        env[op.results[0]] = env.get(op.operands[0], EMPTY)

    @staticmethod
    def _select(op: Operation, env: dict[Value, Roots]) -> None:
        if tracked(op.results[0].type):
            env[op.results[0]] = env.get(op.operand("true_value"), EMPTY) | env.get(op.operand("false_value"), EMPTY)

    @staticmethod
    def _access(view: Value, elem: ScalarType, atomic: bool, env: dict[Value, Roots]) -> None:
        for root in env.get(view, EMPTY):
            root.types[elem] = None
            if atomic:
                root.atomics[elem] = None

    def _load(self, op: Operation, env: dict[Value, Roots]) -> None:
        view = op.operand("view")
        self._access(view, view.type.elem, False, env)  # type: ignore[attr-defined]

    def _store(self, op: Operation, env: dict[Value, Roots]) -> None:
        view = op.operand("view")
        self._access(view, view.type.elem, op.opdef is VIEW_ATOMIC_RMW, env)  # type: ignore[attr-defined]

    @staticmethod
    def _join(values: list[Value], targets: list[Value], env: dict[Value, Roots]) -> bool:
        """targets |= values (tracked ones); True if anything grew."""
        grew = False
        for v, t in zip(values, targets):
            if tracked(t.type):
                old = env.get(t, EMPTY)
                new = old | env.get(v, EMPTY)
                if new != old:
                    env[t] = new
                    grew = True
        return grew

    def _if(self, op: Operation, env: dict[Value, Roots]) -> None:
        for region in op.regions:
            self._walk(region, env)
        for region in op.regions:
            term = region.terminator
            if term is not None and term.opdef is SCF_YIELD:
                self._join(list(term.operands), list(op.results), env)

    def _for(self, op: Operation, env: dict[Value, Roots]) -> None:
        body = op.region("body")
        carried = body.args[1:]
        self._join(op.operand_group("inits"), carried, env)
        while True:
            self._walk(body, env)
            term = body.terminator
            if term is None or not self._join(list(term.operands), carried, env):
                break
        self._join(carried, list(op.results), env)

    def _while(self, op: Operation, env: dict[Value, Roots]) -> None:
        before, after = op.region("before"), op.region("after")
        self._join(op.operand_group("inits"), before.args, env)
        while True:
            self._walk(before, env)
            cond = before.terminator
            forwarded = cond.operand_group("values") if cond is not None else []
            self._join(forwarded, after.args, env)
            self._walk(after, env)
            term = after.terminator
            if term is None or not self._join(list(term.operands), before.args, env):
                break
        self._join(forwarded, list(op.results), env)

    def _call(self, op: Operation, env: dict[Value, Roots]) -> None:
        args = [env.get(v, EMPTY) if tracked(v.type) else None for v in op.operands]
        facts = self.function(self.spec_key(op.attr("callee"), args))
        for r, roots in zip(op.results, facts.results):
            if tracked(r.type):
                env[r] = roots


_HANDLERS: OpTable[Callable[..., None]] = OpTable("emit.spirv.memory._HANDLERS", {
    "buffer.alloca": RootAnalysis._alloca,
    "buffer.assume.noalias": lambda self, op, env: RootAnalysis._same(op, env),
    "buffer.assume.alignment": lambda self, op, env: RootAnalysis._same(op, env),
    "buffer.assume.memory_space": lambda self, op, env: RootAnalysis._same(op, env),
    "buffer.view": lambda self, op, env: RootAnalysis._first(op, env),
    "view.subview": lambda self, op, env: RootAnalysis._first(op, env),
    "scf.select": lambda self, op, env: RootAnalysis._select(op, env),
    "view.load": RootAnalysis._load,
    "vector.load": RootAnalysis._load,
    "view.store": RootAnalysis._store,
    "vector.store": RootAnalysis._store,
    "view.atomic.rmw": RootAnalysis._store,
    "scf.if": RootAnalysis._if,
    "scf.for": RootAnalysis._for,
    "scf.while": RootAnalysis._while,
    "func.call": RootAnalysis._call,
    "template.call": RootAnalysis._call,
})


def fold_value(v: Value, depth: int = 64) -> object:
    """The constant a pure expression folds to (the IR may be unfolded under
    `--pipeline none`), else None."""
    from loomcli.ir.core import OpResult
    from loomcli.semantics.fold import NOT_CONSTANT, constant_of, fold_values

    c = constant_of(v)
    if c is not NOT_CONSTANT:
        return c
    if depth == 0 or not isinstance(v, OpResult) or not v.op.opdef.has("pure"):
        return None
    args = [fold_value(a, depth - 1) for a in v.op.operands]
    if any(a is None for a in args):
        return None
    try:
        out = fold_values(v.op, args)
    except Exception:  # UB or an unfoldable op: not a constant
        return None
    return None if out is None else out[v.index]


def decide_storage(root: Root) -> str | None:
    """Choose the array element of a workgroup or private root; returns a
    reason string when no sound choice exists (atomics of a width other than
    the array's on a workgroup root)."""
    if not root.types:
        root.storage = ("u", 32)
        return None
    kinds = {NATURAL_STORAGE[t] for t in root.types}
    if any(is_float(t) for t in root.atomics):
        # Compare-exchange loops need integer pointers.
        kinds = {("u", bits) for _, bits in kinds}
    if len(kinds) == 1:
        root.storage = next(iter(kinds))
        return None
    widths = sorted({bits for _, bits in kinds})
    root.storage = ("u", widths[0])
    if root.kind == "workgroup":
        for t in root.atomics:
            if ELEMENT_BYTES[t] * 8 != widths[0]:
                return f"{t.name} atomics on a workgroup buffer also accessed as {widths[0]}-bit elements"
    return None
