"""Building the launch-config artifact `X.launch.loombc` (TOOLCHAIN.md 2).

`launch_module` turns a compiled module into the artifact module laid out
in `loomcli.launch.program` (and docs/launch.md): per exported kernel its
workload signature with `where`, its launch-config region, the target
record of its profile and the contract facts (subgroup size, workgroup
storage bytes); plus the pure functions those regions call. The kernel
bodies are not carried: hosts never need them to launch.

Building runs the compile-time checks first: target records (TARGET/001)
and `check_kernel` (TARGET/*), unless the emission gateway already ran them
for this module, and the launch-config regions themselves: an
unbound `config.get` is CONFIG/003 (17.22); an op that can never be
evaluated (a call without a body, an open `template.apply`) is
LAUNCH_CONFIG/008, and so is a region without workload arguments that does
not fold (UB while folding it: LAUNCH_CONFIG/007), as LANGUAGE.md 12 step 4
rules for launches with constant workloads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loomcli.diagnostics import CompileError, Diagnostic, has_errors
from loomcli.errors import UsageError
from loomcli.ir.core import Module, Operation, Region, Signature
from loomcli.ir.ops import CALL, CONFIG_DEF, CONFIG_GET, FUNC_DEF, FUNCTION, TEMPLATE_DECL, TEMPLATE_DEF
from loomcli.launch.program import FACTS, FORMAT_SYMBOL, FORMAT_VERSION, PREFIX, TARGET_PREFIX, entry_name, fact_symbol
from loomcli.targets.profiles import Profile

if TYPE_CHECKING:
    from loomcli.targets.checks import ModuleChecks

def build_launch_config(module: Module, profile: Profile | None, *, target_checked: bool = False) -> bytes:
    """The `X.launch.loombc` bytes for every exported kernel of `module`
    (deterministic: no comments, locations or paths)."""
    from loomcli.bytecode import write_module

    return write_module(launch_module(module, profile, target_checked=target_checked), keep_debug=False)


def launch_module(module: Module, profile: Profile | None, *, target_checked: bool = False) -> Module:
    """The artifact as a module (keeps locations, for in-memory use).
    `profile` is the `--target` profile; a module compiled for a target
    records it and needs none. `target_checked`: the emission gateway
    (`loomcli.emit.artifacts.Emission`) already ran the TARGET checks for
    this module and profile, so only the launch-config regions are checked
    here. Raises CompileError."""
    from loomcli.targets.abi import exported_kernels, workgroup_storage_bytes
    from loomcli.targets.checks import ModuleChecks
    from loomcli.targets.records import check_records

    if profile is None:
        profile = _compiled_profile(module)
    checks = ModuleChecks(module)
    diags: list[Diagnostic] = [] if target_checked else check_records(module)
    entries: list[tuple[Operation, Profile]] = []
    for kernel in exported_kernels(module):
        try:
            p = checks.profile_for(kernel, profile)
        except CompileError as e:
            diags += e.diagnostics
            continue
        if p is None:
            raise UsageError(f"the launch config of @{kernel.attr('sym')} needs a target (--target)")
        kernel_diags = [] if target_checked else checks.check_kernel(kernel, p)
        if not has_errors(kernel_diags):
            kernel_diags += _check_config(checks, kernel, p)
        diags += kernel_diags
        entries.append((kernel, p))
    seen: dict[str, Operation] = {}
    for kernel, _ in entries:
        name = entry_name(kernel)
        if name in seen:
            diags.append(Diagnostic.make("SYMBOL/001", module.path, kernel.loc_of("sym"), name=name))
        seen[name] = kernel
    if has_errors(diags):
        raise CompileError(sorted(_unique(diags), key=lambda d: d.sort_key))
    return _Builder(module, checks.symbols).build(
        [(k, p, workgroup_storage_bytes(k, p.subgroup_size, p.max_flat_workgroup_size)) for k, p in entries])


def _unique(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[Any, ...]] = set()
    out = []
    for d in diags:
        key = (d.code, d.message, d.file, d.line, d.column)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _compiled_profile(module: Module) -> Profile | None:
    from loomcli.pipeline import compiled_target
    from loomcli.targets.profiles import parse_target

    target = compiled_target(module)
    return parse_target(target) if target is not None else None


# ---------------------------------------------------------------- checking the regions


def _check_config(checks: ModuleChecks, kernel: Operation, profile: Profile) -> list[Diagnostic]:
    from loomcli.semantics.evaluate import UndefinedBehavior, evaluates
    from loomcli.semantics.launch import field_uses, fold_launch_config
    from loomcli.targets.checks import reachable_ops

    module, symbols = checks.module, checks.symbols
    sym = kernel.attr("sym")
    diags: list[Diagnostic] = []
    uses = field_uses(kernel)
    for op in reachable_ops(kernel.region("config").ops + kernel.region("body").ops, symbols):
        if op.opdef is CONFIG_GET:  # 17.22: emission needs every reachable get bound
            target = symbols.get(op.attr("ref", ""))
            if target is None or target.opdef is not CONFIG_DEF:
                diags.append(Diagnostic.make("CONFIG/003", module.path, op.loc, k=op.attr("ref", None)))
    for top in kernel.region("config").ops:
        fields = uses.get(top)
        if not fields:
            continue
        for op in reachable_ops([top], symbols):
            if op.opdef is CONFIG_GET:
                continue
            if op.opdef.has(CALL):
                never = not _has_body(symbols.get(op.attr("callee", "")))
            else:
                never = not evaluates(op)
            if never:
                diags.append(Diagnostic.make("LAUNCH_CONFIG/008", module.path, op.loc, field=fields[0], s=sym))
                break
    if diags or kernel.region("config").args:
        return diags
    run = fold_launch_config(module, kernel, profile.subgroup_size, checks.evaluator(profile.subgroup_size))
    if run.failures:
        f = run.failures[0]
        if isinstance(f.error, UndefinedBehavior):
            return [Diagnostic.make("LAUNCH_CONFIG/007", module.path, f.op.loc, why=f.error.reason)]
        return [Diagnostic.make("LAUNCH_CONFIG/008", module.path, f.op.loc, field=f.fields[0], s=sym)]
    return diags


def _has_body(op: Operation | None) -> bool:
    return op is not None and op.opdef.has(FUNCTION)


# ---------------------------------------------------------------- building


class _Builder:
    def __init__(self, module: Module, symbols: dict[str, Operation]) -> None:
        self.module = module
        self.symbols = symbols

    def build(self, entries: list[tuple[Operation, Profile, int]]) -> Module:
        from loomcli.ir.builder import create
        from loomcli.ir.types import I32
        from loomcli.targets.checks import reachable_ops
        from loomcli.targets.records import record_keys

        out: list[Operation] = [create("config.def", attrs={"sym": FORMAT_SYMBOL, "value": FORMAT_VERSION,
                                                              "type": I32})]
        records: dict[tuple[Any, ...], str] = {}
        kernels: list[Operation] = []
        for kernel, profile, storage in entries:
            keys = record_keys(profile)
            identity = (profile.family, profile.chip, tuple(keys.items()))
            record = records.get(identity)
            if record is None:
                record = records[identity] = f"{TARGET_PREFIX}{len(records)}"
                assert profile.record_op is not None
                out.append(create(profile.record_op, attrs={"kind": profile.chip, "sym": record, "dict": keys}))
            entry = entry_name(kernel)
            facts = {"subgroup_size": profile.subgroup_size or 0, "workgroup_storage_bytes": storage}
            for fact, t in FACTS.items():
                out.append(create("config.def", attrs={"sym": fact_symbol(entry, fact), "value": facts[fact],
                                                       "type": t}))
            kernels.append(self._launch_kernel(kernel, record))
            out.append(kernels[-1])
        # The functions, template families and config values the regions reach, in module order.
        needed: set[str] = set()
        for kernel, _, _ in entries:
            for op in reachable_ops(kernel.region("config").ops, self.symbols):
                for key in ("callee", "ref"):
                    if op.attr_or(key) is not None:
                        needed.add(op.attr_or(key))
        for name in list(needed):
            symbol = self.symbols.get(name)
            if symbol is not None and symbol.opdef is TEMPLATE_DEF:
                needed.add(symbol.attr("family"))
        support = [self._support(op) for op in self.module.ops if op.symbol in needed
                   and op.opdef in (FUNC_DEF, TEMPLATE_DEF, TEMPLATE_DECL, CONFIG_DEF)]
        self._avoid_reserved(support, kernels)
        result = Module(self.module.path)
        for op in out + support:
            result.body.append(op)
        return result

    def _launch_kernel(self, kernel: Operation, record: str) -> Operation:
        """The kernel with its launch-config region and an empty device side.
        Only the launch-config region is copied: the clone starts from a shell
        that shares it (the input module is not changed)."""
        from loomcli.ir.builder import create
        from loomcli.ir.clone import clone_op

        attrs = {k: v for k, v in kernel.attr_items() if k not in ("launch", "retain")}
        shell = Operation(kernel.opdef, attrs=attrs, loc=kernel.loc)
        shell.attr_locs = kernel.attr_locs
        shell.regions = [kernel.region("config"), Region(shell)]
        copy = clone_op(shell)
        copy.set_attr("target", record)
        copy.set_attr("launch", Signature([]))
        copy.region("body").append(create("kernel.return"))
        return copy

    def _support(self, op: Operation) -> Operation:
        from loomcli.ir.clone import clone_op

        copy = clone_op(op)
        copy.drop_attr("target")  # checked when the module was compiled; the record stays behind
        return copy

    def _avoid_reserved(self, support: list[Operation], kernels: list[Operation]) -> None:
        """User symbols never collide with the artifact's own (`launch_config.*`):
        a function or value of that prefix gets `_` prepended."""
        from loomcli.errors import LoomError
        from loomcli.ir.symbols import rename_references

        for op in kernels:
            if op.attr("sym").startswith(PREFIX):
                raise LoomError(f"kernel @{op.attr('sym')}: the prefix `{PREFIX}` is reserved in launch configs")
        taken = {op.attr("sym") for op in support + kernels}
        renames: dict[str, str] = {}
        for op in support:
            sym = new = op.attr("sym")
            if sym.startswith(PREFIX):
                while new in taken:
                    new = "_" + new
                renames[sym] = new
                taken.add(new)
        if not renames:
            return
        for op in support + kernels:
            if op.symbol in renames:
                op.set_attr("sym", renames[op.attr("sym")])
            rename_references(op, renames)
