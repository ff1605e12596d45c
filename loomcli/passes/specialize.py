"""Passes that specialize a module for its configuration and target.

`specialize-config` applies the run's config bindings (LANGUAGE.md 11);
`select-templates` runs template selection for the run's target profile
(LANGUAGE.md 10); `specialize-target` folds the profile's facts. A compile
runs the target ones before its pipeline (`loomcli.pipeline.SPECIALIZE_FOR_TARGET`);
all three can also appear in pipeline text, e.g. for `loom opt`.
"""

from __future__ import annotations

from dataclasses import dataclass

from loomcli.diagnostics import CompileError, has_errors
from loomcli.ir.core import Module
from loomcli.ir.ops import KERNEL_DEF, TARGET_SUBGROUP_SIZE
from loomcli.passes.registry import ModulePass, PassContext, option
from loomcli.targets.profiles import Profile


@dataclass(frozen=True)
class SpecializeConfig(ModulePass):
    name = "specialize-config"
    summary = "Bind config keys to the run's bindings and fold their gets into constants."

    require_resolved: bool = option("every reachable config.get must be bound (CONFIG/003)", False)

    def run(self, module: Module, ctx: PassContext) -> None:
        from loomcli.passes.bind import ConfigBindings, bind_module

        bindings = ctx.config if isinstance(ctx.config, ConfigBindings) else ConfigBindings({})
        diags = bind_module(module, bindings, self.require_resolved)
        if has_errors(diags):
            raise CompileError(diags)


@dataclass(frozen=True)
class SelectTemplates(ModulePass):
    name = "select-templates"
    summary = "Turn decided template.apply sites into template.call (early: may stay open; final: must decide)."

    mode: str = option("`early` keeps sites an unknown candidate could win open; `final` decides", "final")
    require_resolved: bool = option("a reachable unbound config.get is CONFIG/003 (the module will be emitted or run)",
                                    False)

    def removes(self, target: Profile | None) -> frozenset[str]:
        return frozenset({"template.apply"}) if self.mode == "final" else frozenset()

    def run(self, module: Module, ctx: PassContext) -> None:
        from loomcli.errors import UsageError
        from loomcli.passes.select import select_templates

        if self.mode not in ("early", "final"):
            raise UsageError(f"select-templates{{mode={self.mode}}}: expected early or final")
        decisions, diags = select_templates(module, ctx.target, self.mode, require_resolved=self.require_resolved)
        if has_errors(diags):
            raise CompileError(diags)
        ctx.decisions += decisions
        ctx.warnings += diags


@dataclass(frozen=True)
class SpecializeTarget(ModulePass):
    name = "specialize-target"
    summary = ("Replace target.subgroup.size by the fixed subgroup size of the symbol's profile "
               "(a pinned root's record, else the target).")

    def run(self, module: Module, ctx: PassContext) -> None:
        fold_target_facts(module, ctx.target)


def fold_target_facts(module: Module, profile: Profile | None) -> None:
    """`target.subgroup.size` folds once a profile is chosen (LANGUAGE.md 17.15):
    each becomes an index constant of its symbol's fixed subgroup size, with
    the same name; symbols whose profile has none keep it (TARGET/001 at
    emission)."""
    from loomcli.ir.builder import substitute
    from loomcli.ir.core import Operation
    from loomcli.ir.ops import OPS
    from loomcli.targets.checks import profile_for

    symbols = module.symbols()
    for top in module.ops:
        sites = [op for op in top.walk() if op.opdef is TARGET_SUBGROUP_SIZE]
        if not sites:
            continue
        chosen = profile
        record = symbols.get(top.attr_or("target") or "")
        if record is not None:
            covered = profile is not None and profile.matches_record(record.attr("kind", ""))
            if top.opdef is KERNEL_DEF or profile is None:
                chosen = profile_for(module, top, profile)
            elif not covered:
                continue  # a provider refuted here; TARGET/001 at emission if something reaches it
        size = getattr(chosen, "subgroup_size", None)
        if size is None:
            continue
        for op in sites:
            substitute(op, Operation(OPS["index.constant"], attrs={"value": size}, loc=op.loc))
