"""Symbols (SYMBOL/*) and everything typed against a symbol's signature:
kernels, launches and dispatches, calls and templates, config keys, target
records, imports, programs and benchmarks.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from loomcli.diagnostics import did_you_mean
from loomcli.ir.attrs import HashAttr, literal_text
from loomcli.ir.core import Loc, Operation, Signature, Value
from loomcli.ir.ops import (
    CASE,
    CHECK_PARAM_CHOICE,
    FUNCTION,
    K_CFG,
    KERNEL_DEF,
    PROGRAM,
    SYMBOL,
)
from loomcli.ir.types import (
    BUFFER,
    ERROR,
    INDEX,
    ShapedType,
    Type,
    is_tensor,
    is_vector,
    is_view,
)
from loomcli.ir.verifier.base import VerifierBase, kind_text

_EXPORT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _types_match(a: Type, b: Type) -> bool:
    """Equal types, where dynamic dims of a signature only need a dynamic dim."""
    if a == b:
        return True
    if isinstance(a, ShapedType) and isinstance(b, ShapedType):
        return a.name == b.name and a.elem is b.elem and len(a.dims) == len(b.dims) and all(
            (isinstance(x, int) and isinstance(y, int) and x == y)
            or (not isinstance(x, int) and not isinstance(y, int))
            for x, y in zip(a.dims, b.dims))
    return False


def _same_signature(a: Signature, b: Signature) -> bool:
    if len(a.args) != len(b.args) or len(a.results) != len(b.results):
        return False
    pos_a = {id(v): i for i, v in enumerate(a.args)}
    pos_b = {id(v): i for i, v in enumerate(b.args)}

    def same(x: Type, y: Type) -> bool:
        if isinstance(x, ShapedType) and isinstance(y, ShapedType):
            if x.name != y.name or x.elem is not y.elem or len(x.dims) != len(y.dims):
                return False
            for dx, dy in zip(x.dims, y.dims):
                if isinstance(dx, int) or isinstance(dy, int):
                    if dx != dy:
                        return False
                elif pos_a.get(id(dx)) != pos_b.get(id(dy)):
                    return False
            return True
        return x is y

    return all(same(x.type, y.type) for x, y in zip(a.args, b.args)) and all(
        same(x, y) for x, y in zip(a.results, b.results))


class SymbolRules(VerifierBase):
    """Symbol tables, signatures and the ops that refer to symbols."""

    def collect_symbols(self) -> None:
        exports: dict[str, Operation] = {}
        for op in self.module.ops:
            sym = op._attrs.get("sym")
            if sym is not None and op.opdef.has(SYMBOL):
                if sym in self.symbols:
                    self.error("SYMBOL/001", op.loc_of("sym"), name="@" + sym)
                else:
                    self.symbols[sym] = op
            if op.opdef is KERNEL_DEF and sym is not None:
                entry = op._attrs.get("export", sym)
                if entry in exports:
                    self.error("SYMBOL/001", op.loc_of("export"), name=entry)
                else:
                    exports[entry] = op

    def _arg_types(self, sig: Signature, what: str, allowed: Callable[[Type], bool], expected: str) -> None:
        for a in sig.args:
            if a.type is not ERROR and not is_tensor(a.type) and not allowed(a.type):  # tensors: check_type
                self.type_error(a.loc, f"{what} `%{a.name}`", expected, a.type)

    def _where(self, op: Operation, *attrs: str) -> None:
        for attr in attrs:
            sig = op._attrs.get(attr)
            if sig is not None and sig.where:
                subjects = set(sig.args)
                if op.name.startswith("command.program"):
                    subjects = set(op.signature("sig").args) | set(op.signature("launch").args)
                self.check_preds(sig.where, subjects)

    def rule_kernel_def(self, op: Operation) -> None:
        self._kernel_signature(op)
        export = op._attrs.get("export")
        if export is not None and not _EXPORT_RE.match(export):
            self.error("TYPE/005", op.loc_of("export"), literal=literal_text(export), type="export name")
        if "target" in op._attrs:
            self.lookup(op, "target", "target")

    def _kernel_signature(self, op: Operation) -> None:
        self._arg_types(op.signature("sig"), "workload argument", self._scalar_arg, "index, offset, integer or float")
        self._arg_types(op.signature("launch"), "device argument",
                        lambda t: self._scalar_arg(t) or t is BUFFER, "index, offset, integer, float or buffer")
        self._where(op, "sig", "launch")

    rule_kernel_decl = _kernel_signature

    def rule_entry_decl(self, op: Operation) -> None:
        self._arg_types(op.signature("sig"), "device argument",
                        lambda t: self._scalar_arg(t) or t is BUFFER, "index, offset, integer, float or buffer")
        self._where(op, "sig")

    @staticmethod
    def _callee_loc(op: Operation) -> Loc:
        return op.loc_of("callee" if "callee" in op._attrs else "family")

    def _call_signature(self, op: Operation, use: str, callee: str, params: list[Value], nwant_workload: int,
                        in_case: bool = False) -> None:
        """Operands against the callee's signature arguments `params` (TYPE/006)."""
        args = op.operands
        nwork = op._attrs.get("nworkload", 0)
        written_nwork = op._attrs.get("written_nworkload", nwork)
        if any(v.type is ERROR for v in args):
            return
        if nwork != nwant_workload or written_nwork != nwork:
            self.error("TYPE/006", self._callee_loc(op), use=use, s=callee,
                       detail=f"expected {nwant_workload} workload values, found {nwork}")
            return
        if len(args) != len(params):
            self.error("TYPE/006", self._callee_loc(op), use=use, s=callee,
                       detail=f"expected {len(params)} arguments, found {len(args)}")
            return
        position = {id(p): i for i, p in enumerate(params)}
        for i, (a, p) in enumerate(zip(args, params)):
            g, w = a.type, p.type
            if in_case and w is BUFFER and is_tensor(g):
                continue
            detail = None
            if not _types_match(g, w):
                detail = f"argument {i}: expected {kind_text(w)}, found {kind_text(g)}"
            elif isinstance(w, ShapedType) and isinstance(g, ShapedType):
                # A dynamic dim of the signature names an argument: the operand's
                # type must name the value passed for it (section 5).
                for dw, dg in zip(w.dims, g.dims):
                    k = position.get(id(dw), -1)
                    if k >= 0 and dg is not args[k]:
                        detail = (f"argument {i}: dim `%{getattr(dg, 'name', dg)}` is not the value passed "
                                  f"for `%{getattr(dw, 'name', dw)}`")
                        break
            if detail is not None:
                self.error("TYPE/006", op.operand_loc(i), use=use, s=callee, detail=detail)
                return

    def rule_launch(self, op: Operation) -> None:
        target = self.lookup(op, "callee", "kernel")
        if target is None:
            return
        sig, launch = target.signature("sig"), target.signature("launch")
        in_case = self._context_of(op) == CASE
        self._call_signature(op, "kernel.launch", target.attr("sym"), sig.args + launch.args,
                             len(sig.args), in_case)

    def rule_dispatch(self, op: Operation) -> None:
        target = self.lookup(op, "callee", "entry")
        n = op._attrs.get("nworkload", 0)
        if not 1 <= n <= 3:
            self.error("TYPE/002", op.loc, op=op.name, n="1 to 3", items="workgroup counts", m=n)
        for i, v in enumerate(op.operands[:n]):
            self.want(op, f"operand {i} of kernel.dispatch", v.type, v.type is INDEX, "index", op.operand_loc(i))
            c = self.constant_of(v)
            if isinstance(c, int) and not 0 <= c <= (1 << 32) - 1:
                self.error("TYPE/003", op.operand_loc(i), what=f"workgroup count {c}", why="counts lie in [0, 2^32-1]")
        if target is None:
            return
        written = op._attrs.get("written_nworkload", n)
        if written != n:  # `[…]` in the type list iff workload operands (section 7.6), as for kernel.launch
            self.error("TYPE/006", op.loc_of("callee"), use="kernel.dispatch", s=target.attr("sym"),
                       detail=f"expected {n} workload types, found {written}")
            return
        want = target.signature("sig").arg_types
        got = [v.type for v in op.operands[n:]]
        if len(got) != len(want) or any(not _types_match(g, w) for g, w in zip(got, want)):
            self.error("TYPE/006", op.loc_of("callee"), use="kernel.dispatch", s=target.attr("sym"),
                       detail=f"expected ({', '.join(map(kind_text, want))}), "
                              f"found ({', '.join(map(kind_text, got))})")

    def _function_signature(self, op: Operation) -> None:
        sig: Signature = op.signature("sig")
        host_like = op._attrs.get("convention") != "device"
        for a in sig.args:
            t = a.type
            if t is ERROR:
                continue
            if host_like and (t is BUFFER or is_view(t) or is_vector(t)):  # tensors: check_type
                self.type_error(a.loc, f"argument `%{a.name}` of @{op._attrs['sym']}",
                                "index, offset, integer or float", t)
        for t in sig.results:
            if isinstance(t, ShapedType) and not t.is_static:
                self.error("TYPE/003", op.loc_of("results"), what=f"result type {t}",
                           why="signature results are static")
            elif host_like and (t is BUFFER or is_view(t) or is_vector(t)):
                self.type_error(op.loc_of("results"), f"result of @{op._attrs['sym']}", "a host type", t)
        self._where(op, "sig")
        if "target" in op._attrs:
            self.lookup(op, "target", "target")

    rule_func_def = _function_signature
    rule_func_decl = _function_signature
    rule_template_decl = _function_signature

    def rule_template_def(self, op: Operation) -> None:
        self._function_signature(op)
        family = self.lookup(op, "family", "template family")
        if family is not None and not _same_signature(family.signature("sig"), op.signature("sig")):
            self.error("TYPE/006", op.loc_of("family"), use="template.def", s=family.attr("sym"),
                       detail="argument or result types differ from the family's")
        for req in op._attrs.get("requires", []):
            if not (isinstance(req, HashAttr) and req.name == "target.subgroup.size" and len(req.params) == 1
                    and isinstance(req.params[0], int) and not isinstance(req.params[0], bool)):
                self.error("TYPE/003", op.loc_of("requires"), what="requirement",
                           why="requires takes only #target.subgroup.size<N>")

    def _callable(self, op: Operation, target: Operation, use: str) -> None:
        sig: Signature = target.signature("sig")
        self._call_signature(op, use, target.attr("sym"), sig.args, 0)
        got = [r.type for r in op.results]
        if got != sig.results and not any(t is ERROR for t in got):
            self.error("TYPE/006", self._callee_loc(op), use=use,
                       s=target.attr("sym"), detail=f"results ({', '.join(map(kind_text, got))}) differ from "
                                                     f"({', '.join(map(kind_text, sig.results))})")

    def _check_call_site(self, op: Operation, callee: Operation) -> None:
        ctx = self._context_of(op)
        if not self._eligible(ctx, callee):
            conv = callee._attrs.get("convention") or "unannotated"
            self.error("STRUCTURE/003", op.loc_of("callee"), op=f"call of {conv} `@{callee._attrs['sym']}`",
                       context=f"a {ctx}")

    def rule_call(self, op: Operation) -> None:
        target = self.lookup(op, "callee", "function")
        ctx = self._context_of(op)
        if ctx in (K_CFG, PROGRAM) and not op._attrs.get("pure"):
            self.error("STRUCTURE/003", op.loc, op="func.call without `pure`", context=f"a {ctx}")
        if target is None:
            return
        self._callable(op, target, "func.call")
        if op._attrs.get("pure") and not target._attrs.get("pure"):
            self.error("TYPE/006", op.loc_of("callee"), use="func.call pure", s=target.attr("sym"),
                       detail="the callee is not pure")
        self._check_call_site(op, target)

    def rule_return(self, op: Operation) -> None:
        fn = op.parent_op
        if fn is None or not fn.opdef.has(FUNCTION):
            return
        want = fn.signature("sig").results
        got = [v.type for v in op.operands]
        if self.count(op, len(want), "operands", len(got)):
            for i, (g, w) in enumerate(zip(got, want)):
                if g is not ERROR and not _types_match(g, w):
                    self.type_error(op.operand_loc(i), f"operand {i} of {op.name}", kind_text(w), g)

    def rule_apply(self, op: Operation) -> None:
        family = self.lookup(op, "family", "template family")
        if family is None:
            return
        # An ineligible provider is refuted at this site, not an error (section 17.17).
        self._callable(op, family, "template.apply")

    def rule_template_call(self, op: Operation) -> None:
        target = self.lookup(op, "callee", "template provider")
        if target is not None:
            self._callable(op, target, "template.call")
            self._check_call_site(op, target)

    def rule_config_decl(self, op: Operation) -> None:
        t = op.attr("type")  # the format's TypeAttr: always set
        if self.want(op, f"type of @{op._attrs.get('sym')}", t, self._scalar_arg(t), "index, offset, integer or float",
                     op.loc_of("type")):
            sig = op._attrs.get("sig")
            if sig is not None and sig.where:
                self.check_preds(sig.where, set(sig.args))

    def rule_config_def(self, op: Operation) -> None:
        t = op.attr("type")  # the format's TypeAttr: always set
        if self.want(op, f"type of @{op._attrs.get('sym')}", t, self._scalar_arg(t), "index, offset, integer or float",
                     op.loc_of("type")):
            self.literal(op, "value", t)

    def rule_config_get(self, op: Operation) -> None:
        target = self.lookup(op, "ref", "config key")
        if target is not None:
            want = target.attr("type")
            self.result(op, lambda t: t is want, kind_text(want))

    def rule_target_record(self, op: Operation) -> None:
        pass  # record keys are TARGET/* facts, checked when a profile is chosen

    def rule_subgroup_size(self, op: Operation) -> None:
        self.result(op, lambda t: t is INDEX, "index")

    def rule_module_import(self, op: Operation) -> None:
        for i, name in enumerate(op._attrs.get("symbols", ())):
            target = self.symbols.get(name)
            if target is None:
                self.error("SYMBOL/002", op.loc_of(f"symbols{i}"), s=name)
                self.diags[-1].message += did_you_mean(
                    name, (n for n, o in self.symbols.items() if o.name.endswith(".decl")), "@")
            elif not target.name.endswith(".decl"):
                self.error("SYMBOL/003", op.loc_of(f"symbols{i}"), s=name,
                           kind=target.opdef.symbol_kind or target.name, kind2="declaration")

    def _program_signature(self, op: Operation) -> None:
        self._arg_types(op.signature("sig"), "specialization argument", self._scalar_arg,
                        "index, offset, integer or float")
        self._arg_types(op.signature("launch"), "launch argument", lambda t: t is BUFFER, "buffer")
        self._where(op, "launch")
        if "target" in op._attrs:
            self.lookup(op, "target", "target")

    rule_program_def = _program_signature
    rule_program_decl = _program_signature

    def rule_program_launch(self, op: Operation) -> None:
        target = self.lookup(op, "callee", "command program")
        if target is not None:
            sig, launch = target.signature("sig"), target.signature("launch")
            self._call_signature(op, "command.program.launch", target.attr("sym"), sig.args + launch.args,
                                 len(sig.args))

    def rule_benchmark(self, op: Operation) -> None:
        case = self.lookup(op, "case", "check case")
        if case is None:
            return
        params = {p.attr("name") for p in case.region("body").ops if p.opdef is CHECK_PARAM_CHOICE}
        for key in op._attrs.get("dict", {}):
            if key not in params:
                self.error("TYPE/003", op.loc_of("dict"), what=f"parameter `{key}`",
                           why=f"@{case._attrs['sym']} has no such parameter")
