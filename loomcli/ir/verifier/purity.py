"""`pure` functions (STRUCTURE/009) and recursion (STRUCTURE/010).
"""

from __future__ import annotations

from loomcli.ir.core import Operation
from loomcli.ir.ops import (
    CALL,
    CONVERGENT,
    FUNC_CALL,
    FUNCTION,
    LAUNCH,
    MEMORY,
    TEMPLATE_APPLY,
    TEMPLATE_CALL,
    TEMPLATE_DEF,
)
from loomcli.ir.verifier.base import VerifierBase


class PurityChecks(VerifierBase):
    """Side effects of `pure` bodies and call cycles."""

    def check_pure(self, fn: Operation) -> None:
        sym = fn._attrs.get("sym")
        for op in fn.region("body").ops:
            for inner in op.walk():
                bad = None
                if inner.opdef.has(MEMORY) or inner.opdef.has(CONVERGENT) or inner.opdef.has(LAUNCH):
                    bad = inner.name
                elif inner.opdef is FUNC_CALL:
                    callee = self.symbols.get(inner._attrs.get("callee", ""))
                    if (callee is not None and callee.name in ("func.def", "func.decl")
                            and not callee._attrs.get("pure")):
                        bad = f"impure call of `@{callee._attrs['sym']}`"
                elif inner.opdef is TEMPLATE_CALL:
                    callee = self.symbols.get(inner._attrs.get("callee", ""))
                    if callee is not None and callee.opdef is TEMPLATE_DEF and not callee._attrs.get("pure"):
                        bad = f"impure call of `@{callee._attrs['sym']}`"
                elif inner.opdef is TEMPLATE_APPLY:
                    ctx = self._context_of(inner)
                    for provider in self.providers(inner._attrs.get("family", "")):
                        if self._eligible(ctx, provider) and not provider._attrs.get("pure"):
                            bad = f"template.apply selecting impure `@{provider._attrs['sym']}`"
                            break
                if bad is not None:
                    self.error("STRUCTURE/009", inner.loc, s=sym, op=bad)

    def check_recursion(self) -> None:
        edges: dict[str, list[tuple[str, Operation]]] = {}
        for fn in self.module.ops:
            if not fn.opdef.has(FUNCTION):
                continue
            out: list[tuple[str, Operation]] = []
            for op in fn.walk():
                if op.opdef.has(CALL):
                    out.append((op._attrs.get("callee", ""), op))
                elif op.opdef is TEMPLATE_APPLY:
                    for p in self.providers(op._attrs.get("family", "")):
                        out.append((p.attr("sym"), op))
            edges[fn.attr("sym")] = out
        state: dict[str, int] = {}
        reported: set[int] = set()

        def dfs(start: str) -> None:
            # Iterative DFS so deep call chains cannot exhaust Python's stack.
            path: list[str] = [start]
            stack = [iter(edges.get(start, []))]
            state[start] = 1
            while stack:
                step = next(stack[-1], None)
                if step is None:
                    state[path.pop()] = 2
                    stack.pop()
                    continue
                callee, site = step
                if callee not in edges:
                    continue
                if state.get(callee) == 1:
                    if id(site) not in reported:
                        reported.add(id(site))
                        cycle = path[path.index(callee):] + [callee]
                        self.error("STRUCTURE/010", site.loc, cycle=" -> ".join("@" + s for s in cycle))
                elif callee not in state:
                    state[callee] = 1
                    path.append(callee)
                    stack.append(iter(edges.get(callee, [])))

        for name in edges:
            if name not in state:
                dfs(name)
