"""The linker (LANGUAGE.md section 12 and section 17 item 24).

`link()` turns a `LinkIndex` into one module:

* a declaration binds to the one compatible definition among the explicit
  inputs and libraries: same kind, same types and `where` lists up to
  argument names (LINK/002), `public` unless a kernel (LINK/004); two
  eligible: LINK/003; none: LINK/001; `module.import "key" [...]` admits
  only that input (LINK/007);
* a private symbol that collides with another input's symbol of the same
  name is renamed `@name.N` (smallest free N >= 1), references included;
* `merge` keeps every symbol of the inputs, `link` only the closure of the
  roots (which get `retain`); libraries contribute only what is reached, and
  a public library definition reached as a dependency becomes private;
* resolved declarations disappear; inputs are never modified (clones).

The output keeps input order (inputs, then libraries; each in source
order), so it is deterministic for given inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loomcli.diagnostics import CompileError, Diagnostic, did_you_mean
from loomcli.ir.attrs import Pred
from loomcli.ir.clone import clone_op
from loomcli.ir.core import Module, Operation, Signature, Value, stamp_file
from loomcli.ir.ops import CONFIG_DECL, CONFIG_DEF, KERNEL_DEF, MODULE_IMPORT, TEMPLATE_DEF, op_names
from loomcli.ir.symbols import DEFINITIONS, RESOLVABLE, references, rename_references
from loomcli.ir.types import ShapedType, Type
from loomcli.link.index import LinkIndex, SymbolInfo

# Declarations kept once in a linked output when several inputs carry them
# (they agree, else LINK/002): one symbol, one declaration.
MERGED_DECLS = op_names("template.decl", "kernel.entry.decl", "config.decl", "func.decl", "kernel.decl",
                        "command.program.decl")
MODES = ("auto", "merge", "link")

Ref = tuple[int, int]  # (input index, top-level op position)


@dataclass
class LinkResult:
    module: Module
    plan: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)  # output symbol -> "path" it came from
    warnings: list[Diagnostic] = field(default_factory=list)


class _Linker:
    def __init__(self, index: LinkIndex, allow_unresolved: bool) -> None:
        self.index = index
        self.allow_unresolved = allow_unresolved
        self.diags: list[Diagnostic] = []
        self.plan: list[str] = []
        n = len(index.inputs)
        self.renames: list[dict[str, str]] = [{} for _ in range(n)]
        self.defs: dict[str, list[tuple[int, SymbolInfo]]] = {}
        self.local: list[dict[str, SymbolInfo]] = [{s.symbol: s for s in item.symbols} for item in index.inputs]
        self.resolved: dict[tuple[int, str], Ref | None] = {}
        self.providers: dict[str, list[Ref]] = {}
        self.first_decl: dict[tuple[str, str], Ref] = {}
        self._import_memo: dict[int, dict[str, tuple[str, Operation]]] = {}
        self._assign_names()

    # ---------------------------------------------------------------- naming

    def _assign_names(self) -> None:
        all_names = {s.symbol for item in self.index.inputs for s in item.symbols}
        claimed: dict[str, tuple[int, SymbolInfo]] = {}

        def fresh(name: str) -> str:
            n = 1
            while f"{name}.{n}" in all_names or f"{name}.{n}" in claimed:
                n += 1
            return f"{name}.{n}"

        for i, item in enumerate(self.index.inputs):
            for info in item.symbols:
                if info.op_name not in DEFINITIONS or info.op_name == CONFIG_DEF.name:
                    key = (info.op_name, info.symbol)
                    self.first_decl.setdefault(key, (i, info.position))
                    continue
                name = info.symbol
                if name not in claimed:
                    claimed[name] = (i, info)
                    continue
                j, other = claimed[name]
                if self._eligible(info) and self._eligible(other):
                    continue  # two public definitions: LINK/003 if both are ever needed
                if not self._eligible(info):
                    new = fresh(name)
                    self.renames[i][name] = new
                    claimed[new] = (i, info)
                    self.plan.append(f"rename @{name} in {item.path} -> @{new}")
                else:
                    new = fresh(name)
                    self.renames[j][name] = new
                    claimed[new] = (j, other)
                    claimed[name] = (i, info)
                    self.plan.append(f"rename @{name} in {self.index.inputs[j].path} -> @{new}")
        for i, item in enumerate(self.index.inputs):
            for info in item.symbols:
                if info.op_name in DEFINITIONS:
                    self.defs.setdefault(info.symbol, []).append((i, info))

    @staticmethod
    def _eligible(info: SymbolInfo) -> bool:
        return info.public or info.op_name == KERNEL_DEF.name

    def final_name(self, i: int, name: str) -> str:
        return self.renames[i].get(name, name)

    # ---------------------------------------------------------------- lookups

    def op(self, ref: Ref) -> Operation:
        return self.index.inputs[ref[0]].module().ops[ref[1]]

    def where(self, ref: Ref) -> str:
        op = self.op(ref)
        return f"{self.index.inputs[ref[0]].path}:{op.loc[0]}" if op.loc[0] else self.index.inputs[ref[0]].path

    def family_providers(self, family: str) -> list[Ref]:
        if family not in self.providers:
            refs = []
            for i, item in enumerate(self.index.inputs):
                for info in item.symbols:
                    if (info.op_name == TEMPLATE_DEF.name
                            and self.op((i, info.position)).attr("family", None) == family):
                        refs.append((i, info.position))
            self.providers[family] = refs
        return self.providers[family]

    def lookup(self, i: int, name: str) -> Ref | None:
        """What `@name`, referred to from input i, links to."""
        info = self.local[i].get(name)
        if info is None:
            return None
        if info.op_name in DEFINITIONS:
            return (i, info.position)
        if info.op_name in RESOLVABLE:
            target = self.resolve(i, info)
            if target is not None:
                return target
            if info.op_name == CONFIG_DECL.name:
                return self.first_decl.get((info.op_name, name), (i, info.position))
            return (i, info.position)
        return self.first_decl.get((info.op_name, name), (i, info.position))

    def _imports(self, i: int) -> dict[str, tuple[str, Operation]]:
        """`module.import` constraints of input i: symbol -> (key, import op); computed once."""
        if i in self._import_memo:
            return self._import_memo[i]
        out: dict[str, tuple[str, Operation]] = {}
        self._import_memo[i] = out
        for op in self.index.inputs[i].module().ops:
            if op.opdef is MODULE_IMPORT:
                for s in op.attr("symbols", ()):
                    out[s] = (op.attr("key"), op)
        return out

    def resolve(self, i: int, info: SymbolInfo) -> Ref | None:
        key = (i, info.symbol)
        if key in self.resolved:
            return self.resolved[key]
        self.resolved[key] = None
        name = info.symbol
        decl_ref = (i, info.position)
        decl = self.op(decl_ref)
        want = RESOLVABLE[info.op_name]
        candidates = [(j, d) for j, d in self.defs.get(name, []) if d.op_name == want and j != i
                      and self.final_name(j, name) == name]
        module_path = self.index.inputs[i].path
        imported = self._imports(i).get(name)
        if imported is not None:
            key_name, imp = imported
            source = self.index.by_key(key_name)
            from_key = [(j, d) for j, d in candidates if j == source]
            if not from_key:
                self.diags.append(Diagnostic.make("LINK/007", module_path, imp.loc, s=name, key=key_name))
                return None
            candidates = from_key
        eligible = [(j, d) for j, d in candidates if self._eligible(d) or want == CONFIG_DEF.name]
        if len(eligible) > 1:
            a, b = ((j, d.position) for j, d in eligible[:2])
            self.diags.append(Diagnostic.make("LINK/003", self.index.inputs[b[0]].path, self.op(b).loc, s=name,
                                              a=self.where(a), b=self.where(b)))
            return None
        if not eligible:
            if want == CONFIG_DEF.name:
                return None
            if candidates:
                j, d = candidates[0]
                self.diags.append(Diagnostic.make("LINK/004", module_path, decl.loc, s=name,
                                                  module=f"{module_path} (defined at {self.where((j, d.position))})"))
            elif not self.allow_unresolved:
                self.diags.append(Diagnostic.make("LINK/001", module_path, decl.loc, s=name))
                public = (n for n, ds in self.defs.items()
                          if any(d.op_name == want and self._eligible(d) for _, d in ds))
                self.diags[-1].message += did_you_mean(name, public, "@")
            return None
        j, d = eligible[0]
        target = (j, d.position)
        detail = compatibility(decl, self.op(target))
        if detail is not None:
            self.diags.append(Diagnostic.make("LINK/002", module_path, decl.loc, s=name,
                                              detail=f"{detail} ({self.where(decl_ref)} vs {self.where(target)})"))
            return None
        if want == CONFIG_DEF.name:
            from loomcli.passes.bind import holds, pred_text

            sig = decl.attr("sig", None)
            value = self.op(target).attr("value", None)
            for p in (sig.where or []) if sig is not None else []:
                if not holds(p, sig.args[0], value):
                    d_op = self.op(target)
                    self.diags.append(Diagnostic.make(
                        "CONFIG/002", self.index.inputs[j].path, d_op.loc, k=name, v=str(value),
                        pred=pred_text(p).replace("%" + sig.args[0].name, "@" + name)))
        self.resolved[key] = target
        self.plan.append(f"resolve @{name} ({info.op_name} in {module_path}) -> {self.where(target)}")
        return target

    # ---------------------------------------------------------------- closure and output

    def closure(self, starts: list[Ref]) -> set[Ref]:
        seen: set[Ref] = set()
        work = list(starts)
        while work:
            ref = work.pop()
            if ref in seen:
                continue
            seen.add(ref)
            i = ref[0]
            op = self.op(ref)
            if op.name in RESOLVABLE:
                target = self.resolve(i, self.local[i][op.attr("sym")])
                if target is not None:
                    work.append(target)
            for _, key, name in references(op):
                if key == "symbols":
                    continue
                target = self.lookup(i, name)
                if target is not None:
                    work.append(target)
                if key == "family":
                    work.extend(self.family_providers(name))
        return seen

    def raise_errors(self) -> None:
        if self.diags:
            unique = {(d.file, d.line, d.column, d.code, d.message): d for d in self.diags}
            raise CompileError(sorted(unique.values(), key=lambda d: (d.file, d.line, d.column, d.code)))

    def check_duplicates(self, selected: set[Ref]) -> None:
        for name, defs in self.defs.items():
            live = [(j, d) for j, d in defs if (j, d.position) in selected and self.final_name(j, name) == name
                    and d.op_name != CONFIG_DEF.name]
            if len(live) > 1:
                a, b = ((j, d.position) for j, d in live[:2])
                self.diags.append(Diagnostic.make("LINK/003", self.index.inputs[b[0]].path, self.op(b).loc, s=name,
                                                  a=self.where(a), b=self.where(b)))

    def emit(self, selected: set[Ref], roots: set[Ref], path: str) -> tuple[Module, dict[str, str]]:
        out = Module(path)
        origins: dict[str, str] = {}
        emitted_decls: dict[tuple[str, str | None], Operation] = {}
        config_defs = {self.op(r).attr("sym") for r in selected if self.op(r).opdef is CONFIG_DEF}
        for ref in sorted(selected):
            i, _ = ref
            item = self.index.inputs[i]
            op = self.op(ref)
            name = op.symbol
            if op.opdef is MODULE_IMPORT:
                continue
            if op.name in RESOLVABLE and name is not None and self.resolved.get((i, name)) is not None:
                continue
            if op.name in MERGED_DECLS:
                key = (op.name, name)
                kept = emitted_decls.get(key)
                if kept is not None:
                    detail = compatibility(op, kept) or _modifier_difference(op, kept)
                    if detail is not None:
                        self.diags.append(Diagnostic.make("LINK/002", item.path, op.loc, s=name, detail=detail))
                    continue
                if op.opdef is CONFIG_DECL and name in config_defs:
                    continue
                emitted_decls[key] = op
            if op.opdef is CONFIG_DEF and name in origins:
                continue
            new = clone_op(op)
            if item.path != path:
                stamp_file(new, item.path)  # its diagnostics name the input it came from
            renames = dict(self.renames[i])
            if renames:
                if name in renames:
                    new.set_attr("sym", renames[name])
                rename_references(new, renames)
            if ref in roots:
                new.set_attr("retain", True)
            elif item.library and new.attr_or("public") and not self.is_root_input(i):
                new.drop_attr("public")
            out.body.append(new)
            if new.symbol is not None:
                origins[new.attr("sym")] = item.path
        return out, origins

    def is_root_input(self, i: int) -> bool:
        return not self.index.inputs[i].library


def _modifier_difference(a: Operation, b: Operation) -> str | None:
    """Two declarations of one symbol merge only with the same modifiers."""
    for key in ("convention", "pure", "public"):
        if a.attr_or(key) != b.attr_or(key):
            return f"modifier {key} differs"
    return None


def compatibility(decl: Operation, definition: Operation) -> str | None:
    """Why a declaration cannot bind to a definition, or None if it can."""
    if decl.opdef is CONFIG_DECL:
        a, b = decl.attr("type"), definition.attr("type")
        return None if a is b else f"type {a.name} vs {b.name}"
    for attr in ("sig", "launch"):
        s1, s2 = decl.attr_or(attr), definition.attr_or(attr)
        if s1 is None and s2 is None:
            continue
        if s1 is None or s2 is None:
            return f"{attr} lists differ"
        why = signature_difference(s1, s2)
        if why is not None:
            return f"{why}" if attr == "sig" else f"launch {why}"
    return None


def signature_difference(a: Signature, b: Signature) -> str | None:
    """Signatures equal up to argument names (types, results, where lists)."""
    pa = {id(v): k for k, v in enumerate(a.args)}
    pb = {id(v): k for k, v in enumerate(b.args)}

    def type_key(t: Type, pos: dict[int, int]) -> object:
        if isinstance(t, ShapedType):
            return (t.name, t.elem.name, tuple(d if isinstance(d, int) else ("arg", pos.get(id(d))) for d in t.dims))
        return t.name

    def pred_key(preds: list[Pred] | None, pos: dict[int, int]) -> object:
        if not preds:
            return ()
        return tuple((p.name, tuple(("arg", pos.get(id(x))) if isinstance(x, Value) else x for x in p.args))
                     for p in preds)

    ta = [type_key(v.type, pa) for v in a.args]
    tb = [type_key(v.type, pb) for v in b.args]
    if ta != tb:
        return "argument types " + _types_text(a) + " vs " + _types_text(b)
    if [type_key(t, pa) for t in a.results] != [type_key(t, pb) for t in b.results]:
        return "result types differ"
    if pred_key(a.where, pa) != pred_key(b.where, pb):
        return "where lists differ"
    return None


def _types_text(sig: Signature) -> str:
    from loomcli.text.printer import Printer

    return "(" + ", ".join(Printer.type(v.type) for v in sig.args) + ")"


def link(index: LinkIndex, roots: list[str] | tuple[str, ...] = (), mode: str = "auto",
         include_exports: bool = False, allow_unresolved: bool = False, path: str = "<linked>") -> LinkResult:
    """Link the inputs of `index`. Raises CompileError with every LINK error."""
    linker = _Linker(index, allow_unresolved)
    if mode == "auto":
        mode = "link" if roots or include_exports else "merge"
    root_refs: set[Ref] = set()
    for name in roots:
        name = name.lstrip("@")
        found = None
        for i, _item in enumerate(index.inputs):
            info = linker.local[i].get(name)
            if info is not None and info.op_name in DEFINITIONS and linker.final_name(i, name) == name:
                found = (i, info.position)
                break
        if found is None:
            linker.diags.append(Diagnostic("LINK/001", f"no definition for `@{name}` (named by --root)",
                                           "<command-line>", 0, 0))
        else:
            root_refs.add(found)
    if include_exports:
        for i, item in enumerate(index.inputs):
            if not item.library:
                root_refs.update((i, s.position) for s in item.symbols if s.op_name == KERNEL_DEF.name
                                 and s.export is not None)
    if mode == "link":
        starts = sorted(root_refs)
    else:
        starts = [(i, k) for i, item in enumerate(index.inputs) if not item.library
                  for k in range(len(item.module().ops))]
    selected = linker.closure(starts)
    linker.check_duplicates(selected)
    linker.raise_errors()
    module, origins = linker.emit(selected, root_refs, path)
    linker.raise_errors()  # declarations that disagree when merged
    plan = [f"mode {mode}"]
    plan += [f"{'library' if it.library else 'input'} {it.path} key={it.key}" for it in index.inputs]
    plan += [f"root @{linker.op(r).attr('sym')}" for r in sorted(root_refs)]
    plan += linker.plan
    dropped = [f"drop @{info.symbol} from {it.path}" for i, it in enumerate(index.inputs) if it.decoded
               for info in it.symbols if (i, info.position) not in selected]
    plan += dropped
    return LinkResult(module, plan, origins)


def symbol_listing(result: LinkResult) -> list[str]:
    """`--list-symbols`: one line per output symbol: kind, visibility, name, origin."""
    lines = []
    for op in result.module.ops:
        name = op.symbol
        if name is None:
            continue
        vis = "public" if op.attr_or("public") else "private"
        flags = vis + (" retain" if op.attr_or("retain") else "")
        export = f" export={op.attr('export')}" if op.attr_or("export") is not None else ""
        lines.append(f"{op.name} {flags} @{name}{export} from {result.origins.get(name, '?')}")
    return lines
