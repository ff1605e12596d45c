"""One registry of passes: name -> pass class, loaded when first asked for.

A pass is a small frozen dataclass: a `name` and a one-line `summary` as
class variables, its options as typed fields (a field `max_iterations`
is the option `max-iterations`), and `run(module, ctx)`. Passes other
stages provide (`specialize-config`, `select-templates`) register the same
way, with `register_pass`, without this module importing them.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from loomcli.ir.core import Module

if TYPE_CHECKING:
    from loomcli.passes.bind import ConfigBindings
    from loomcli.targets.profiles import Profile


@dataclass
class PassContext:
    """What a pipeline run knows beyond the module: config bindings and the
    target profile (for the passes that need them), and whether to verify
    after every pass."""

    config: ConfigBindings | None = None   # none: every config.get stays unbound
    target: Profile | None = None
    verify_each: bool = False
    # What passes report besides the module: template selection decisions
    # (`--print-selections`) and warnings.
    decisions: list[Any] = field(default_factory=list)
    warnings: list[Any] = field(default_factory=list)


_OPTION_TYPES: dict[str, type] = {"int": int, "bool": bool, "str": str, "float": float}


@dataclass(frozen=True)
class PassOption:
    name: str          # as written in pipeline text: `max-iterations`
    field: str         # the dataclass field: `max_iterations`
    type: type
    default: Any
    help: str
    minimum: int | None = None

    def describe(self) -> str:
        kind = {int: "int", bool: "bool", str: "string", float: "float"}.get(self.type, self.type.__name__)
        if self.minimum is not None:
            kind += f" >= {self.minimum}"
        return f"{self.name}={format_value(self.default)} ({kind}): {self.help}"


def option(help: str, default: Any, minimum: int | None = None) -> Any:
    """A pass option field: `max_iterations: int = option("...", 10, minimum=1)`."""
    return field(default=default, metadata={"help": help, "minimum": minimum})


def format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@dataclass(frozen=True)
class ModulePass:
    """Base of all passes. Subclasses are frozen dataclasses whose fields are options."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    # A legalization pass turns source constructs into what instruction
    # selectors take, and its output may rely on facts the source-level rules
    # cannot see: a workgroup reduction's folded value is uniform, though it is
    # loaded from memory, so a barrier the source nested under it no longer
    # meets STRUCTURE/005's conservative rule. Verification after such a pass
    # checks everything but that rule.
    legalizes: ClassVar[bool] = False

    def run(self, module: Module, ctx: PassContext) -> None:
        raise NotImplementedError

    def applies(self, module: Module, ctx: PassContext) -> bool:
        """Whether `run` would change `module`. False lets a caller skip the
        pass, and the copy of the module made for it (emission legalizes a
        clone only when some pass has work). Default: assume it would."""
        return True

    def removes(self, target: Any) -> frozenset[str]:
        """The ops this pass leaves none of in a module compiled for `target`
        (a profile, or None): what instruction selectors after it need not
        take. tests/test_op_tables.py derives the selectors' tables from it."""
        return frozenset()

    @classmethod
    def options(cls) -> list[PassOption]:
        out = []
        for f in dataclasses.fields(cls):
            t = f.type if isinstance(f.type, type) else _OPTION_TYPES[str(f.type)]
            out.append(PassOption(f.name.replace("_", "-"), f.name, t, f.default, f.metadata.get("help", ""),
                                  f.metadata.get("minimum")))
        return out

    def spec(self) -> str:
        """This pass as pipeline text, every option spelled out (stable: fit for cache keys)."""
        opts = self.options()
        if not opts:
            return self.name
        inner = " ".join(f"{o.name}={format_value(getattr(self, o.field))}" for o in opts)
        return f"{self.name}{{{inner}}}"


# name -> "module:Class"; a class is imported only when its pass is asked for.
_REGISTRY: dict[str, str | type[ModulePass]] = {
    "canonicalize": "loomcli.passes.canonicalize:Canonicalize",
    "cse": "loomcli.passes.cse:CommonSubexpressionElimination",
    "dce": "loomcli.passes.dce:DeadCodeElimination",
    "expand-collectives": "loomcli.passes.collectives:ExpandCollectives",
    "expand-math": "loomcli.passes.expand_math:ExpandMath",
    "inline": "loomcli.passes.inline:Inline",
    "select-templates": "loomcli.passes.specialize:SelectTemplates",
    "specialize-config": "loomcli.passes.specialize:SpecializeConfig",
    "specialize-target": "loomcli.passes.specialize:SpecializeTarget",
    "symbol-dce": "loomcli.passes.dce:SymbolDCE",
    "unroll": "loomcli.passes.unroll:Unroll",
    "widen-bf16": "loomcli.passes.widen_bf16:WidenBF16",
}


def register_pass(name: str, target: str | type[ModulePass]) -> None:
    """Add a pass: `target` is the class or its "module:Class" path."""
    _REGISTRY[name] = target


def pass_names() -> list[str]:
    return sorted(_REGISTRY)


def get_pass(name: str) -> type[ModulePass] | None:
    target = _REGISTRY.get(name)
    if target is None:
        return None
    if isinstance(target, str):
        module_name, attr = target.split(":")
        target = getattr(importlib.import_module(module_name), attr)
        assert isinstance(target, type) and target.name == name, (name, target)
        _REGISTRY[name] = target
    return target


__all__ = ["ModulePass", "PassContext", "PassOption", "get_pass", "option", "pass_names", "register_pass"]
