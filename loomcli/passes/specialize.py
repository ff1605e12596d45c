"""Passes that specialize a module for its configuration and target.

`specialize-config` applies the run's config bindings (LANGUAGE.md 11);
`select-templates` runs template selection for the run's target profile
(LANGUAGE.md 10). `loom compile` runs both before the pipeline; as passes
they can also appear in pipeline text, e.g. for `loom opt`.
"""

from __future__ import annotations

from dataclasses import dataclass

from loomcli.diagnostics import CompileError, has_errors
from loomcli.ir.core import Module
from loomcli.passes.registry import ModulePass, PassContext, option


@dataclass(frozen=True)
class SpecializeConfig(ModulePass):
    name = "specialize-config"
    summary = "Bind config keys to the run's bindings and fold their gets into constants."

    require_resolved: bool = option("every reachable config.get must be bound (CONFIG/003)", False)

    def run(self, module: Module, ctx: PassContext) -> None:
        from loomcli.link.config import ConfigBindings, bind_module

        bindings = ctx.config if isinstance(ctx.config, ConfigBindings) else ConfigBindings({})
        diags = bind_module(module, bindings, self.require_resolved)
        if has_errors(diags):
            raise CompileError(diags)


@dataclass(frozen=True)
class SelectTemplates(ModulePass):
    name = "select-templates"
    summary = "Turn decided template.apply sites into template.call (early: may stay open; final: must decide)."

    mode: str = option("`early` keeps sites an unknown candidate could win open; `final` decides", "final")

    def run(self, module: Module, ctx: PassContext) -> None:
        from loomcli.driver import UsageError
        from loomcli.passes.select import select_templates

        if self.mode not in ("early", "final"):
            raise UsageError(f"select-templates{{mode={self.mode}}}: expected early or final")
        _, diags = select_templates(module, ctx.target, self.mode)
        if has_errors(diags):
            raise CompileError(diags)
