"""Classification and kernel requests (LANGUAGE.md section 12 step 5, 17.20).

A live launch is classified by running template selection (section 10) over
the kernel body with the site's facts: device arguments that are constant
at the site are constants. Selection walks the body pre-order in text order
and enters each called function and each selected provider at its site with
the site's constants; the ordered list of (site path, provider) decisions,
with the kernel, is the launch's *semantic class*.

The same walk builds the class's request: a fresh module whose sole root is
a copy of the kernel (marked `retain`), each apply rewritten to an
`index.assume` of the winner's `where` predicates (those over index and
offset operands: the only ones `index.assume` can state) and a
`template.call` of the winner, plus everything the copy reaches. A function
or provider reached with different decisions is cloned (`@f`, then `@f.1`,
...), so every copy holds exactly one set of decisions.
"""

from __future__ import annotations

from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic, has_errors
from loomcli.ir.attrs import Pred
from loomcli.ir.core import Module, Operation, Value
from loomcli.ir.ops import CALL, CONFIG_DEF, CONFIG_GET, FUNCTION
from loomcli.ir.types import is_index_like
from loomcli.passes.select import Selector
from loomcli.targets.profiles import Profile

ClassKey = tuple[str, tuple[tuple[tuple[int, ...], str | None], ...]]



def _path(op: Operation) -> tuple[int, ...]:
    """(region, op, region, op, ...) from the top-level op down to `op`, as `Selector` numbers sites."""
    out: list[int] = []
    while (region := op.parent) is not None and (owner := region.owner) is not None:
        out.append(region.ops.index(op))
        out.append(owner.regions.index(region))
        op = owner
    return tuple(reversed(out))


class _ClassSelector(Selector):
    """Final selection over one kernel copy, entering callees at their sites
    and rewriting applies for a request."""

    def __init__(self, source: Module, request: Module | None, profile: Profile | None,
                 positions: dict[str, int]) -> None:
        # Without a request module the walk only classifies: nothing is copied or rewritten.
        super().__init__(source, profile, "final", rewrite=request is not None)
        self.request = request
        self.positions = positions
        self.order: dict[int, tuple[int, int]] = {}   # id(request op) -> (source position, copy number)
        self.instances: dict[tuple[str, Any], str] = {}
        self.copies: dict[str, int] = {}
        self.used_names: set[str] = set()
        self._prefix: tuple[int, ...] = ()
        self._last_call: Operation | None = None

    # ------------------------------------------------------------ entering callees

    def enter(self, callee: Operation, constants: list[Any], prefix: tuple[int, ...]) -> str:
        """Copy `callee` into the request with the decisions its body takes at
        this site; an identical copy is shared. Returns the copy's symbol."""
        from loomcli.ir.clone import clone_op
        from loomcli.ir.ops import function_context
        from loomcli.passes.facts import Facts

        copy = clone_op(callee, comments=False) if self.request is not None else callee
        region = copy.regions[0]
        facts = Facts(self._order_of)
        for k, a in enumerate(region.args):
            self._order[a] = k
            if k < len(constants) and constants[k] is not None:
                facts.constants[a] = constants[k]
        for p in copy.attr("sig").where or []:
            facts.add(p)
        ctx = function_context(copy.attr("convention", None))
        sym = callee.attr("sym")
        first = len(self.decisions)
        saved, self._prefix = self._prefix, prefix
        self._walk(region, ctx, facts, sym, prefix + (0,), self._profile_of(callee))
        self._prefix = saved
        if self.request is None:
            return sym
        inner = tuple((d.path[len(prefix):], d.winner) for d in self.decisions[first:])
        key = (sym, inner)
        name = self.instances.get(key)
        if name is not None:
            return name
        n = self.copies.get(sym, 0)
        self.copies[sym] = n + 1
        name = sym
        if n:
            k = n
            while f"{sym}.{k}" in self.symbols or f"{sym}.{k}" in self.used_names:
                k += 1
            name = f"{sym}.{k}"
        self.used_names.add(name)
        copy.set_attr("sym", name)
        copy.drop_attr("public")
        self.request.body.append(copy)
        self.order[id(copy)] = (self.positions.get(sym, 1 << 30), n)
        self.instances[key] = name
        return name

    # ------------------------------------------------------------ Selector hooks

    def _learn(self, op: Operation, facts: Any, profile: Profile | None) -> None:
        if op.opdef.has(CALL):
            callee = self.symbols.get(op.attr("callee", ""))
            if callee is not None and callee.opdef.has(FUNCTION):
                constants = [facts.constant(v) for v in op.operands]
                name = self.enter(callee, constants, self._prefix + _path(op))
                if self.request is not None:
                    op.set_attr("callee", name)
        super()._learn(op, facts, profile)

    def _select(self, op: Operation, ctx: str, facts: Any, sym: str, path: tuple[int, ...],
                profile: Profile | None) -> None:
        constants = [facts.constant(v) for v in op.operands]
        self._last_call = None
        first = len(self.decisions)
        super()._select(op, ctx, facts, sym, path, profile)
        winner = self.decisions[first].winner if len(self.decisions) > first else None
        if winner is None:
            return
        name = self.enter(self.symbols[winner], constants, path)
        if self._last_call is not None:
            self._last_call.set_attr("callee", name)

    def _rewrite(self, apply: Operation, winner: str) -> None:
        """`template.apply` -> `index.assume` of the winner's `where` + `template.call @winner`."""
        from loomcli.ir.ops import OPS

        region = apply.parent
        assert region is not None
        provider = self.symbols[winner]
        sig = provider.attr("sig")
        mapping = dict(zip(sig.args, apply.operands))
        preds: list[Pred] = []
        for p in sig.where or []:
            args = [mapping.get(a, a) if isinstance(a, Value) else a for a in p.args]
            if all(is_index_like(a.type) for a in args if isinstance(a, Value)):
                preds.append(Pred(p.name, args))
        operands = list(apply.operands)
        at = region.ops.index(apply)
        if preds:
            subjects: dict[Value, None] = {}
            for p in preds:
                for a in p.args:
                    if isinstance(a, Value):
                        subjects.setdefault(a, None)
            assume = Operation(OPS["index.assume"], operands=list(subjects), attrs={"preds": preds})
            for v in subjects:
                assume.add_result(v.type, v.name)
            assumed = dict(zip(subjects, assume.results))
            operands = [assumed.get(v, v) for v in operands]
            region.ops.insert(at, assume)
            assume.parent = region
            at += 1
        call = Operation(OPS["template.call"], operands=operands, attrs={"callee": winner, "nworkload": 0,
                                                                          "written_nworkload": 0})
        apply.drop_operand_uses()
        for r in apply.results:
            r.replace_all_uses_with(call.add_result(r.type, r.name))
        region.ops[at] = call
        call.parent = region
        self._last_call = call


class RequestBuilder:
    """Classifies launch sites of one linked module and builds their requests."""

    def __init__(self, module: Module, profile: Profile | None) -> None:
        self.module = module
        self.profile = profile
        self.symbols = module.symbols()
        self.positions = {op.attr("sym"): i for i, op in enumerate(module.ops) if op.symbol is not None}
        self._walkers: dict[str | None, _ClassSelector] = {}

    def classify(self, kernel: Operation, device: tuple[Any, ...], profile: Profile | None
                 ) -> tuple[ClassKey, list[Diagnostic]]:
        """The class of launching `kernel` with device arguments `device`
        (constants; anything else is not a constant) and the selection's
        warnings. Walks the kernel without copying it. Raises CompileError
        (LINK/005, LINK/006)."""
        name = profile.name if profile is not None else None
        sel = self._walkers.get(name)
        if sel is None:  # one walker per profile: its symbol and provider tables are built once
            sel = self._walkers[name] = _ClassSelector(self.module, None, profile, self.positions)
        sel.decisions, sel.diags = [], []
        sel.select_symbol(kernel, _constants(kernel, device))
        if has_errors(sel.diags):
            raise CompileError(sel.diags)
        key: ClassKey = (kernel.attr("sym"), tuple((d.path, d.winner) for d in sel.decisions))
        return key, [d for d in sel.diags if d.severity != "error"]

    def request(self, kernel: Operation, device: tuple[Any, ...], profile: Profile | None) -> Module:
        """The request module of the class of this launch (see the module docstring).
        Raises CompileError (CONFIG/003 for an unbound `config.get` it reaches)."""
        from loomcli.ir.clone import clone_op

        request = Module("<request>")
        copy = clone_op(kernel, comments=False)
        copy.set_attr("retain", True, first=True)  # in parse order, so the bytes are those of its text
        request.body.append(copy)
        sel = _ClassSelector(self.module, request, profile, self.positions)
        sel.order[id(copy)] = (self.positions[kernel.attr("sym")], 0)
        sel.select_symbol(copy, _constants(copy, device))
        if has_errors(sel.diags):  # pragma: no cover - `classify` saw the same decisions first
            raise CompileError(sel.diags)
        self._close(request, sel)
        return request

    def _close(self, request: Module, sel: _ClassSelector) -> None:
        """Add everything the request reaches, in source order; CONFIG/003 for an unbound `config.get`."""
        from loomcli.ir.builder import legalize_names
        from loomcli.ir.clone import clone_op
        from loomcli.ir.symbols import references

        present = {op.attr("sym") for op in request.ops if op.symbol is not None}
        work = list(request.ops)
        unbound: list[Diagnostic] = []
        while work:
            op = work.pop()
            for inner, key, name in references(op):
                if key == "ref" and inner.opdef is CONFIG_GET:
                    target = self.symbols.get(name)
                    if target is None or target.opdef is not CONFIG_DEF:
                        unbound.append(Diagnostic.make("CONFIG/003", self.module.path, inner.loc, k=name))
                if name in present:
                    continue
                source = self.symbols.get(name)
                if source is None:
                    continue
                copy = clone_op(source, comments=False)
                copy.drop_attr("public")
                present.add(name)
                request.body.append(copy)
                sel.order[id(copy)] = (self.positions.get(name, 1 << 30), 0)
                work.append(copy)
        if unbound:
            raise CompileError(sorted(unbound, key=lambda d: d.sort_key))
        request.body.ops.sort(key=lambda op: sel.order[id(op)])
        legalize_names(request)


def _constants(kernel: Operation, device: tuple[Any, ...]) -> dict[Value, Any]:
    """The site's constant device arguments, keyed by the kernel body's arguments."""
    return {a: c for a, c in zip(kernel.regions[1].args, device) if isinstance(c, (bool, int, float))}
