"""Pass pipelines: the text form, the default list, and running one.

Pipeline text (TOOLCHAIN.md section 4, `--pipeline`) is a comma-separated
list of pass names, each optionally followed by options in braces:

    canonicalize,cse,dce
    canonicalize{max-iterations=4},unroll{max-trip-count=8},dce
    default             the list below
    none                no passes

Options inside braces are `name=value`, separated by spaces or commas.
Mistakes are `UsageError`s that name what is known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loomcli.errors import LoomError, UsageError
from loomcli.ir.core import Module
from loomcli.passes.registry import ModulePass, PassContext, PassOption, get_pass, pass_names

if TYPE_CHECKING:
    from loomcli.passes.bind import ConfigBindings
    from loomcli.targets.profiles import Profile

# The default pipeline. Linking stages put `specialize-config` and
# `select-templates` in front of it once they exist. `symbol-dce` is not in
# it: a `link`-mode module is already the closure of its roots, and a
# `merge`-mode one keeps every symbol (TOOLCHAIN.md section 4), private
# template providers included, since later selection weighs them.
DEFAULT_PIPELINE: tuple[str, ...] = (
    "inline",        # remove `inline` call boundaries and selected template calls
    "canonicalize",  # fold constants, algebraic identities, constant control flow
    "cse",           # merge equal pure ops
    "dce",           # erase unused pure ops and side-effect-free regions
)

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Pipeline:
    passes: tuple[ModulePass, ...]

    def __str__(self) -> str:
        """Canonical text with every option spelled out (stable; fit for cache keys)."""
        return ",".join(p.spec() for p in self.passes) or "none"

    @property
    def legalizes(self) -> bool:
        """Whether a legalization pass runs (its output is checked as legalized IR)."""
        return any(p.legalizes for p in self.passes)

    def run(self, module: Module, ctx: PassContext | None = None) -> None:
        from loomcli.ir.builder import legalize_names

        ctx = ctx or PassContext()
        legalized = False
        for p in self.passes:
            p.run(module, ctx)
            legalize_names(module)
            legalized = legalized or p.legalizes
            if ctx.verify_each:
                check_module(module, f"pass `{p.name}`", source_level=not legalized)


def check_module(module: Module, after: str, source_level: bool = True) -> None:
    """A pass that leaves invalid IR is a compiler bug: say which, in one line.
    `source_level=False` after a legalization pass (`ModulePass.legalizes`)."""
    from loomcli.ir.verifier import verify

    errors = [d for d in verify(module, source_level=source_level) if getattr(d, "severity", "error") == "error"]
    if errors:
        d = errors[0]
        raise LoomError(f"internal: {after} produced invalid IR: {d.code}: {d.message}"
                        f" (at {d.line}:{d.column})")


def _known_passes() -> str:
    return ", ".join(pass_names())


def _convert(pass_name: str, opt: PassOption, text: str) -> Any:
    expected = {int: "an integer", bool: "true or false", str: "a string", float: "a number"}.get(
        opt.type, opt.type.__name__)
    if opt.minimum is not None:
        expected += f" >= {opt.minimum}"
    bad = UsageError(f"option `{opt.name}` of pass `{pass_name}` expects {expected}, got `{text}`")
    if opt.type is bool:
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
        raise bad
    if opt.type in (int, float):
        try:
            value = int(text, 0) if opt.type is int else float(text)
        except ValueError:
            raise bad from None
        if opt.minimum is not None and value < opt.minimum:
            raise bad
        return value
    if not text:
        raise bad
    return text


def _parse_options(cls: type[ModulePass], text: str) -> dict[str, Any]:
    options = {o.name: o for o in cls.options()}
    values: dict[str, Any] = {}
    for item in re.split(r"[\s,]+", text.strip()):
        if not item:
            continue
        key, eq, raw = item.partition("=")
        if not eq or not key:
            raise UsageError(f"expected `option=value` in the options of pass `{cls.name}`, found `{item}`")
        opt = options.get(key)
        if opt is None:
            known = ", ".join(options) or "none"
            raise UsageError(f"unknown option `{key}` of pass `{cls.name}`; its options: {known}")
        if opt.field in values:
            raise UsageError(f"option `{key}` of pass `{cls.name}` is given twice")
        values[opt.field] = _convert(cls.name, opt, raw)
    return values


def parse_pipeline(text: str) -> Pipeline:
    """Parse pipeline text; raises UsageError with a one-line message."""
    src = text.strip()
    if not src:
        raise UsageError("empty pass pipeline; write `none` for no passes, or `default`")
    if src == "none":
        return Pipeline(())
    passes: list[ModulePass] = []
    i, n = 0, len(src)
    while True:
        while i < n and src[i].isspace():
            i += 1
        m = _NAME.match(src, i)
        if m is None:
            found = f"`{src[i]}`" if i < n else "the end"
            raise UsageError(f"expected a pass name at column {i + 1} of pipeline `{src}`, found {found}")
        name = m.group()
        i = m.end()
        while i < n and src[i].isspace():
            i += 1
        options_text = None
        if i < n and src[i] == "{":
            close = src.find("}", i)
            if close < 0:
                raise UsageError(f"unclosed `{{` after pass `{name}` in pipeline `{src}`")
            options_text = src[i + 1:close]
            i = close + 1
        if name == "default":
            if options_text is not None:
                raise UsageError("`default` takes no options; give options to its passes by name")
            passes.extend(parse_pipeline(",".join(DEFAULT_PIPELINE)).passes)
        elif name == "none":
            raise UsageError("`none` means no passes and stands alone")
        else:
            cls = get_pass(name)
            if cls is None:
                raise UsageError(f"unknown pass `{name}`; known passes: {_known_passes()} (and `default`, `none`)")
            passes.append(cls(**_parse_options(cls, options_text or "")))
        while i < n and src[i].isspace():
            i += 1
        if i >= n:
            break
        if src[i] != ",":
            raise UsageError(f"expected `,` or the end at column {i + 1} of pipeline `{src}`, found `{src[i]}`")
        i += 1
    return Pipeline(tuple(passes))


def run_pipeline(module: Module, text: str | Pipeline, ctx: PassContext | None = None) -> Pipeline:
    """Parse (if needed) and run a pipeline on `module`; returns the pipeline."""
    pipeline = text if isinstance(text, Pipeline) else parse_pipeline(text)
    pipeline.run(module, ctx)
    return pipeline


def run_passes(module: Module, pipeline: str | Pipeline, *, bindings: ConfigBindings | None = None,
               profile: Profile | None = None, verify_each: bool = False) -> Pipeline:
    """Run a pipeline with config `bindings` and a target `profile` for the passes that use them."""
    ctx = PassContext(config=bindings, target=profile, verify_each=verify_each)
    return run_pipeline(module, pipeline, ctx)


def describe_passes() -> list[str]:
    """`loom opt --list-passes`: each pass, its summary and options."""
    lines = []
    width = max(len(n) for n in pass_names())
    for name in pass_names():
        cls = get_pass(name)
        assert cls is not None
        lines.append(f"{name:<{width}}  {cls.summary}")
        for o in cls.options():
            lines.append(f"  {o.describe()}")
    lines.append(f"{'default':<{width}}  " + ",".join(DEFAULT_PIPELINE))
    lines.append(f"{'none':<{width}}  no passes")
    return lines


__all__ = [
    "DEFAULT_PIPELINE",
    "Pipeline",
    "check_module",
    "describe_passes",
    "parse_pipeline",
    "run_passes",
    "run_pipeline",
]
