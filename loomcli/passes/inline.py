"""`inline`: replace `inline` calls and every `template.call` by the callee's body.

A `func.call` is inlined when the call or the callee's definition says
`inline` (LANGUAGE.md 7.7: the boundary must go) and neither says `noinline`.

The body is copied before the call with fresh SSA names, the callee's
arguments mapped to the call's operands, and the returned values replace
the call's results. A call stays when the copy would be illegal where the
call is: an op the call site's context forbids (LANGUAGE.md section 3), a
call the site may not make, or a `template.apply` whose eligible providers
would change with the context. `where` predicates of the callee are not
carried over (they add no meaning, only facts).
"""

from __future__ import annotations

from dataclasses import dataclass

from loomcli.ir.builder import context_of, legalize_names, top_level_op
from loomcli.ir.clone import clone_op
from loomcli.ir.core import Module, Operation
from loomcli.ir.ops import CALL, FUNC_CALL, FUNCTION, K_CFG, PROGRAM, TEMPLATE_APPLY, TEMPLATE_CALL, may_call
from loomcli.passes.canonicalize import constant_fits_uses
from loomcli.passes.registry import ModulePass, PassContext
from loomcli.passes.rewrite import Rewriter
from loomcli.semantics.fold import NOT_CONSTANT, constant_of

_MAX_ROUNDS = 64  # a chain of inlined calls is at most as deep as the (acyclic) call graph


def wants_inline(op: Operation, callee: Operation | None) -> bool:
    """Every `template.call`; a `func.call` marked `inline`, or of a function
    marked `inline`, unless either side says `noinline`."""
    if op.opdef is TEMPLATE_CALL:
        return True
    if op.opdef is not FUNC_CALL or callee is None:
        return False
    marks = (op.attr("inlining", None), callee.attr_or("inlining"))
    return "inline" in marks and "noinline" not in marks


def can_inline(call: Operation, callee: Operation, symbols: dict[str, Operation]) -> bool:
    if not callee.opdef.has(FUNCTION) or callee is top_level_op(call) or call.parent is None:
        return False
    site = context_of(call.parent)
    home = context_of(callee.region("body"))
    body = callee.region("body")
    for arg, value in zip(body.args, call.operands):
        c = constant_of(value)
        if c is not NOT_CONSTANT and not constant_fits_uses(arg, c):
            return False
    for top in body.ops[:-1]:  # the callee's return is not copied
        for op in top.walk():
            if site not in op.opdef.contexts:
                return False
            if op.opdef is TEMPLATE_APPLY and site != home:
                return False
            if op.opdef.has(CALL):
                target = symbols.get(op.attr("callee", ""))
                if target is None or not may_call(site, target.attr_or("convention")):
                    return False
                if op.opdef is FUNC_CALL and site in (K_CFG, PROGRAM) and not target.attr_or("pure"):
                    return False
    return True


def inline_call(call: Operation, callee: Operation, rw: Rewriter) -> None:
    """Inline one call (assumed legal: see `can_inline`)."""
    body = callee.region("body")
    site = context_of(call.parent) if call.parent is not None else None
    mapping = dict(zip(body.args, call.operands))
    namer = rw.namer(call)
    copies = []
    for op in body.ops[:-1]:
        copy = clone_op(op, mapping, namer, comments=False)
        if site in (K_CFG, PROGRAM):
            for inner in copy.walk():
                if inner.opdef is FUNC_CALL:
                    inner.set_attr("pure", True)  # those sites take only `pure` calls; the callee is pure
        copies.append(rw.insert_before(call, copy))
    values = [mapping.get(v, v) for v in body.ops[-1].operands]
    rw.carry_comments(call, copies[0] if copies else None)
    rw.replace_op_with_new_values(call, values, copies)


def inline_calls(module: Module) -> int:
    """Inline every eligible call of `module`; returns how many were inlined."""
    rw = Rewriter(module)
    total = 0
    for _ in range(_MAX_ROUNDS):
        symbols = module.symbols()
        done = 0
        calls = [op for op in module.walk() if op.opdef.has(CALL)]
        for call in calls:
            callee = symbols.get(call.attr("callee", ""))
            if call.parent is None or not wants_inline(call, callee):
                continue
            if callee is not None and can_inline(call, callee, symbols):
                inline_call(call, callee, rw)
                done += 1
        total += done
        if not done:
            break
    legalize_names(module)
    return total


@dataclass(frozen=True)
class Inline(ModulePass):
    name = "inline"
    summary = ("Inline `func.call inline` and every `template.call`: "
               "the callee's body, freshly named, replaces the call.")

    def run(self, module: Module, ctx: PassContext) -> None:
        inline_calls(module)


__all__ = ["Inline", "can_inline", "inline_call", "inline_calls", "wants_inline"]
