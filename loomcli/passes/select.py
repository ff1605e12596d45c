"""Template selection (LANGUAGE.md section 10 and section 17 items 17-21).

Every reachable `template.apply<@fam>` weighs each `template.def<@fam>`:
convention and `target(@t)`, `requires`, then its `where` predicates with the
apply's operands in place of the provider's arguments, judged with the facts
at the apply. Proven candidates compete by priority; a tie is LINK/005; no
proven candidate is LINK/006 in final mode (early mode leaves the apply
open); an unknown candidate that could outrank the winner keeps early
selection open and draws LINK/008 in final mode. A decided apply becomes
`template.call @winner`.

Decisions are recorded per apply site, in pre-order text order: they are the
semantic classes the product frontier builds on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.builder import substitute
from loomcli.ir.core import Module, Operation, Region, Signature, Value
from loomcli.ir.ops import (
    CASE,
    CHECK_CASE,
    COMMAND_PROGRAM_DEF,
    CONFIG_DEF,
    CONFIG_GET,
    CONSTANT_OPS,
    FUNCTION,
    INDEX_ASSUME,
    INDEX_CMP,
    K_BODY,
    K_CFG,
    KERNEL_DEF,
    OPS,
    PROGRAM,
    SCF_IF,
    SYMBOL,
    TARGET_SUBGROUP_SIZE,
    TEMPLATE_APPLY,
    TEMPLATE_DEF,
    function_context,
    may_call,
    op_names,
)
from loomcli.passes.facts import PROVEN, REFUTED, UNKNOWN, Facts, branch_intervals
from loomcli.targets.profiles import Profile

# Symbols whose bodies selection walks.
_SELECTED_IN = op_names("kernel.def", "func.def", "template.def", "command.program.def", "check.case")

Folder = Callable[[Operation, list[Any]], "list[Any] | None"]


@dataclass
class Candidate:
    provider: str
    priority: int
    status: str
    why: str = ""


@dataclass
class Decision:
    """One apply site: where it is, what it weighed, what it chose."""

    symbol: str                 # the top-level symbol containing the site
    path: tuple[int, ...]       # op indices from the symbol's regions down to the apply
    family: str
    winner: str | None
    open: bool
    candidates: list[Candidate] = field(default_factory=list)

    def describe(self) -> str:
        site = ".".join(map(str, self.path))
        choice = f"@{self.winner}" if self.winner else "(open)"
        weighed = ", ".join(f"@{c.provider}={c.status}" for c in self.candidates)
        return f"@{self.symbol} site {site}: template.apply<@{self.family}> -> {choice} [{weighed}]"


def _default_fold(op: Operation, operands: list[Any]) -> list[Any] | None:
    if op.name in CONSTANT_OPS:
        return [op.attr("value")]
    try:
        from loomcli.semantics.fold import fold_values  # the exact semantics, once available
    except ImportError:  # pragma: no cover - fold lands with the canonicalizer
        return None
    return fold_values(op, operands)


class Selector:
    def __init__(self, module: Module, profile: Profile | None = None, mode: str = "final",
                 fold: Folder | None = None, rewrite: bool = True) -> None:
        self.module = module
        self.profile = profile
        self.mode = mode
        self.fold = fold or _default_fold
        self.rewrite = rewrite
        self.symbols = module.symbols()
        self.decisions: list[Decision] = []
        self.diags: list[Diagnostic] = []
        self.reached: list[Operation] = []  # the symbols `run` walked: roots and what they reach
        self._order: dict[Value, int] = {}
        self._providers: dict[str, list[Operation]] = {}
        for op in module.ops:
            if op.opdef is TEMPLATE_DEF:
                self._providers.setdefault(op.attr("family"), []).append(op)

    # ------------------------------------------------------------ driver

    def run(self, site_constants: dict[Value, Any] | None = None) -> list[Decision]:
        """Select in every root (kernels count: each linked kernel is a
        compile root or reached by one) and in every symbol a root reaches through
        calls, launches and non-refuted providers (section 17.22's
        reachability): a provider refuted here, such as one pinned to another
        target, is never entered, so its body draws no diagnostics. Decisions
        are listed in module order, each symbol's in pre-order."""
        from loomcli.passes.dce import is_root, references

        position = {op: k for k, op in enumerate(self.module.ops)}
        pending = [op for op in self.module.ops
                   if op.opdef.has(SYMBOL) and (is_root(op) or op.opdef is KERNEL_DEF)]
        seen = set(pending)
        blocks: dict[Operation, list[Decision]] = {}
        while pending:
            op = pending.pop()
            start = len(self.decisions)
            self.select_symbol(op, site_constants)
            blocks[op] = self.decisions[start:]
            reached = [self.symbols.get(name) for name in references(op)]
            for decision in blocks[op]:
                reached += [self.symbols.get(c.provider) for c in decision.candidates
                            if c.status != REFUTED and decision.winner in (None, c.provider)]
            for target in reached:
                if target is not None and target not in seen and target.name in _SELECTED_IN:
                    seen.add(target)
                    pending.append(target)
        self.reached = sorted(blocks, key=position.__getitem__)
        self.decisions = [d for op in self.reached for d in blocks[op]]
        return self.decisions

    def select_symbol(self, op: Operation, site_constants: dict[Value, Any] | None = None) -> None:
        sym = (op.symbol or "")
        profile = self._profile_of(op)
        regions: list[tuple[Region, str, Signature | None]]
        if op.opdef is KERNEL_DEF:
            regions = [(op.region("config"), K_CFG, op.signature("sig")),
                       (op.region("body"), K_BODY, op.signature("launch"))]
        elif op.opdef.has(FUNCTION):
            ctx = function_context(op.attr("convention", None))
            regions = [(op.region("body"), ctx, op.signature("sig"))]
        elif op.opdef is COMMAND_PROGRAM_DEF:
            regions = [(op.region("body"), PROGRAM, op.signature("launch"))]
        elif op.opdef is CHECK_CASE:
            regions = [(op.region("body"), CASE, None)]
        else:
            return
        for index, (region, ctx, sig) in enumerate(regions):
            facts = Facts(self._order_of)
            for k, a in enumerate(region.args):
                self._order[a] = k
            if site_constants:
                facts.constants.update({a: c for a, c in site_constants.items() if a in region.args})
            if sig is not None and sig.where:
                for p in sig.where:
                    facts.add(p)
            program_where = op.signature("sig").where if op.opdef is COMMAND_PROGRAM_DEF else None
            for p in program_where or ():
                facts.add(p)
            self._walk(region, ctx, facts, sym, (index,), profile)

    def _order_of(self, v: Value) -> int:
        return self._order.get(v, 1 << 30)

    def _profile_of(self, op: Operation) -> Profile | None:
        """A pinned symbol uses its target record's profile (LANGUAGE.md 17.30)."""
        pinned = op.attr_or("target")
        if pinned is None:
            return self.profile
        record = self.symbols.get(pinned)
        if (op.opdef is not KERNEL_DEF and self.profile is not None and record is not None
                and self.profile.matches_record(record.attr("kind", ""))):
            return self.profile  # a provider or function a generic chip covers runs on the root's chip (17.18)
        from loomcli.targets.checks import profile_for

        try:
            return profile_for(self.module, op, self.profile)
        except CompileError as e:
            self.diags.extend(e.diagnostics)
            return self.profile

    # ------------------------------------------------------------ walking

    def _walk(self, region: Region, ctx: str, facts: Facts, sym: str, path: tuple[int, ...],
              profile: Profile | None) -> None:
        for k, op in enumerate(list(region.ops)):
            here = path + (k,)
            for r in op.results:
                self._order.setdefault(r, len(self._order))
            if op.opdef is TEMPLATE_APPLY:
                self._select(op, ctx, facts, sym, here, profile)
                continue
            if op.opdef is SCF_IF:
                self._walk_if(op, ctx, facts, sym, here, profile)
                continue
            for i, inner in enumerate(op.regions):
                for a in inner.args:
                    self._order.setdefault(a, len(self._order))
                self._walk(inner, ctx, facts.child(), sym, here + (i,), profile)
            self._learn(op, facts, profile)

    def _walk_if(self, op: Operation, ctx: str, facts: Facts, sym: str, path: tuple[int, ...],
                 profile: Profile | None) -> None:
        then_facts, else_facts = facts.child(), facts.child()
        cond = op.operand("condition") if op.operands else None
        cmp = getattr(cond, "op", None)
        if cmp is not None and cmp.opdef is INDEX_CMP and len(cmp.operands) == 2:
            a, b = cmp.operands
            ca, cb = facts.constant(a), facts.constant(b)
            if (ca is None) != (cb is None):
                subject, c, left = (a, cb, False) if cb is not None else (b, ca, True)
                then_iv, else_iv = branch_intervals(cmp.attr("predicate"), c, left)
                if then_iv:
                    then_facts.narrow(subject, *then_iv)
                if else_iv:
                    else_facts.narrow(subject, *else_iv)
        self._walk(op.region("then"), ctx, then_facts, sym, path + (0,), profile)
        self._walk(op.region("else"), ctx, else_facts, sym, path + (1,), profile)

    def _learn(self, op: Operation, facts: Facts, profile: Profile | None) -> None:
        if op.opdef is INDEX_ASSUME:
            for p in op.attr("preds", []):
                subject = p.args[0]
                if subject in op.operands:
                    facts.add(p, op.results[op.operands.index(subject)])
        elif op.opdef is CONFIG_GET:
            target = self.symbols.get(op.attr("ref"))
            if target is not None and target.opdef is CONFIG_DEF:
                facts.constants[op.result()] = target.attr("value")
            elif target is not None and target.attr_or("sig") is not None:
                sig = target.signature("sig")
                for p in sig.where or []:
                    facts.add(p, op.result(), [op.result() if a is sig.args[0] else a for a in p.args])
        elif op.opdef is TARGET_SUBGROUP_SIZE:
            if profile is not None and profile.subgroup_size:
                facts.constants[op.result()] = profile.subgroup_size
        elif op.opdef.has("pure") and op.results and not op.regions:
            values = [facts.constant(v) for v in op.operands]
            if all(v is not None for v in values):
                try:
                    folded = self.fold(op, values)
                except (ArithmeticError, ValueError, TypeError):
                    folded = None
                if folded is not None:
                    for r, v in zip(op.results, folded):
                        if v is not None:
                            facts.constants[r] = v

    # ------------------------------------------------------------ weighing

    def _select(self, op: Operation, ctx: str, facts: Facts, sym: str, path: tuple[int, ...],
                profile: Profile | None) -> None:
        family = op.attr("family")
        candidates = [self._weigh(p, op, ctx, facts, profile) for p in self._providers.get(family, [])]
        proven = [c for c in candidates if c.status == PROVEN]
        unknown = [c for c in candidates if c.status == UNKNOWN]
        decision = Decision(sym, path, family, None, True, candidates)
        self.decisions.append(decision)
        if not proven:
            if self.mode == "final" or not unknown:
                why = "; ".join(f"@{c.provider} {c.status}{' (' + c.why + ')' if c.why else ''}"
                                for c in candidates) or "the family has no providers"
                self.diags.append(Diagnostic.make("LINK/006", self.module.path, op.loc, fam=family, why=why))
            return
        best = max(c.priority for c in proven)
        top = [c for c in proven if c.priority == best]
        if len({c.provider for c in top}) > 1:
            self.diags.append(Diagnostic.make("LINK/005", self.module.path, op.loc, fam=family,
                                              a=top[0].provider, b=top[1].provider, p=best))
            return
        winner = top[0].provider
        rivals = [c for c in unknown if c.priority >= best]
        if rivals and self.mode != "final":
            return  # an unknown candidate could still win: selection stays open
        for c in rivals:
            self.diags.append(Diagnostic.make("LINK/008", self.module.path, op.loc, severity="warning",
                                              fam=family, w=winner, u=c.provider))
        decision.winner = winner
        decision.open = False
        if self.rewrite:
            self._rewrite(op, winner)

    def _weigh(self, provider: Operation, site: Operation, ctx: str, facts: Facts,
               profile: Profile | None) -> Candidate:
        name = provider.attr("sym")
        c = Candidate(name, provider.attr("priority", 0), PROVEN)
        conv = provider.attr("convention", None)
        if not may_call(ctx, conv):
            c.status, c.why = REFUTED, f"{conv} provider at a {ctx} site"
            return c
        statuses: list[tuple[str, str]] = []
        pinned = provider.attr("target", None)
        if pinned is not None:
            record = self.symbols.get(pinned)
            if profile is None:
                statuses.append((UNKNOWN, f"target(@{pinned}) without a target"))
            elif record is None or not profile.matches_record(record.attr("kind", "")):
                statuses.append((REFUTED, f"target(@{pinned})"))
        for req in provider.attr("requires", []):
            want = req.params[0] if getattr(req, "params", None) else None
            if profile is None or profile.subgroup_size is None:
                statuses.append((UNKNOWN, f"requires subgroup size {want}"))
            elif profile.subgroup_size != want:
                statuses.append((REFUTED, f"requires subgroup size {want}"))
        sig = provider.signature("sig")
        mapping = dict(zip(sig.args, site.operands))
        for p in sig.where or []:
            args = [mapping.get(a, a) if isinstance(a, Value) else a for a in p.args]
            status = facts.judge(p, args[0], args)
            if status != PROVEN:
                statuses.append((status, _pred_text(p)))
        for status, why in statuses:
            if status == REFUTED:
                c.status, c.why = REFUTED, why
                return c
        if statuses:
            c.status, c.why = UNKNOWN, statuses[0][1]
        return c

    def _rewrite(self, apply: Operation, winner: str) -> None:
        call = Operation(OPS["template.call"], attrs={"callee": winner, "nworkload": 0}, loc=apply.loc)
        call.operand_locs = apply.operand_locs
        for v in apply.operands:
            call.add_operand(v)
        substitute(apply, call)


def _pred_text(p: Any) -> str:
    args = ["%" + a.name if isinstance(a, Value) else str(a) for a in p.args]
    return f"{p.name}({', '.join(args)})"


def select_templates(module: Module, profile: Profile | None = None, mode: str = "final",
                     rewrite: bool = True, require_resolved: bool = False
                     ) -> tuple[list[Decision], list[Diagnostic]]:
    """Run selection over the roots of `module` and what they reach; returns
    decisions and diagnostics. With `require_resolved` (emission and
    interpretation, LANGUAGE.md 17.22), every `config.get` left unbound in a
    reached symbol is CONFIG/003, also one that only decided a selection."""
    s = Selector(module, profile, mode, rewrite=rewrite)
    s.run()
    diags = s.diags
    if require_resolved:
        diags = diags + [Diagnostic.make("CONFIG/003", module.path, op.loc, k=op.attr("ref"))
                         for top in s.reached for op in top.walk() if op.opdef is CONFIG_GET]
    return s.decisions, diags
