"""Configuration bindings (LANGUAGE.md sections 11 and 17 items 22-23).

Bindings come from four levels, highest first: `--config k=v`, `--config-file`
(later files win), the project's `[config]` table and `config.def` in the
inputs. A key bound twice within one level is CONFIG/004; a value that does
not fit the declared type is CONFIG/001; one that breaks a declaration's
predicate is CONFIG/002. Every binding remembers where it came from, so
messages can say so. Applying them to a module is `loomcli.passes.bind`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.files import finite_float
from loomcli.ir.core import Module
from loomcli.ir.ops import CONFIG_DEF
from loomcli.passes.bind import Binding, ConfigBindings, Unparsed, parse_literal_text

LEVELS = ("--config", "--config-file", "project", "input")


class BindingCollector:
    """Gathers bindings level by level, reporting CONFIG/004 within a level."""

    def __init__(self) -> None:
        self.levels: list[dict[str, Binding]] = [{} for _ in LEVELS]
        self.diags: list[Diagnostic] = []

    def add(self, b: Binding, replace: bool = False) -> None:
        level = self.levels[b.level]
        old = level.get(b.key)
        if old is not None and not replace:
            self.diags.append(Diagnostic.make("CONFIG/004", b.file, b.loc, k=b.key, a=old.source, b=b.source))
            return
        level[b.key] = b

    def add_flags(self, pairs: Iterable[str]) -> None:
        """`--config KEY=VALUE` (key without `@`)."""
        for pair in pairs:
            key, eq, text = pair.partition("=")
            key = key.strip().lstrip("@")
            if not eq or not key:
                from loomcli.errors import UsageError

                raise UsageError(f"--config expects KEY=VALUE, got `{pair}`")
            try:
                value: Any = parse_literal_text(text)
            except ValueError:
                value = Unparsed(text)
            self.add(Binding(key, value, f"--config {key}={text}", level=0))

    def add_file(self, path: str, shown: str | None = None) -> None:
        """`--config-file`: .json, .toml, or a `.loom` config module; later files win."""
        shown = shown or path
        ext = os.path.splitext(path)[1].lower()
        from loomcli.files import read_input

        data = read_input(path)
        if ext == ".loom" or ext == ".loombc":
            from loomcli.frontend import load_bytes

            module = load_bytes(data, shown)
            seen: dict[str, Binding] = {}
            for op in module.ops:
                if op.opdef is not CONFIG_DEF:
                    from loomcli.errors import LoomError

                    raise LoomError(f"{shown}:{op.loc[0]}: a config module holds only config.def ops, "
                                    f"found {op.name}", 1)
                b = Binding(op.attr("sym"), op.attr("value"), f"{shown}:{op.loc[0]}", shown, op.loc, level=1)
                if b.key in seen:
                    self.add(seen[b.key])
                seen[b.key] = b
                self.add(b, replace=True)
            return
        text = data.decode("utf-8", "replace")
        if ext == ".json":
            pairs_seen: list[tuple[str, Any]] = []
            try:
                obj = json.loads(text, object_pairs_hook=lambda pairs: _dup_checked(pairs, pairs_seen),
                                 parse_float=finite_float)
            except ValueError as e:  # also integers past Python's digit limit
                raise CompileError([Diagnostic("CONFIG/001", f"cannot read {shown}: {e}", shown, 0, 0)]) from None
            except RecursionError:
                raise _too_deep(shown) from None
            locations = _key_locations(text)
            for key, _ in pairs_seen:
                self.diags.append(Diagnostic.make("CONFIG/004", shown, locations.get(key, (0, 0)), k=key,
                                                  a=shown, b=shown))
        elif ext == ".toml":
            import tomllib

            try:
                obj = tomllib.loads(text, parse_float=finite_float)
            except ValueError as e:  # TOMLDecodeError, or an integer past Python's digit limit
                raise CompileError([Diagnostic("CONFIG/001", f"cannot read {shown}: {e}", shown, 0, 0)]) from None
            except RecursionError:
                raise _too_deep(shown) from None
        else:
            from loomcli.errors import UsageError

            raise UsageError(f"--config-file {shown}: expected a .json, .toml or .loom file")
        if not isinstance(obj, dict):
            raise CompileError([Diagnostic("CONFIG/001", f"{shown}: expected an object of keys", shown, 1, 1)])
        locations = _key_locations(text)
        for key, value in _flatten(obj):
            loc = locations.get(key.rsplit(".", 1)[-1], (0, 0))
            self.add(Binding(key, _file_value(value), f"{shown}:{loc[0]}" if loc[0] else shown, shown, loc,
                             level=1), replace=True)

    def add_project(self, table: Mapping[str, Any], shown: str, lines: Mapping[str, int] | None = None) -> None:
        """loom.toml's [config] (or a [[test]] set's `config`): `lines` says where each key is."""
        for key, value in _flatten(dict(table)):
            line = (lines or {}).get(key, 0)
            self.add(Binding(key, _file_value(value), f"{shown}:{line}" if line else f"{shown} [config]", shown,
                             (line, 1 if line else 0), level=2))

    def add_module_defs(self, module: Module) -> None:
        for op in module.ops:
            if op.opdef is CONFIG_DEF:
                self.add(Binding(op.attr("sym"), op.attr("value"), f"{module.path}:{op.loc[0]}",
                                 module.path, op.loc, level=3))

    def result(self) -> ConfigBindings:
        merged: dict[str, Binding] = {}
        for level in reversed(self.levels):
            merged.update(level)
        return ConfigBindings(dict(sorted(merged.items())))


def _file_value(value: Any) -> Any:
    """A JSON or TOML value as a binding: a literal as it is; anything else
    (JSON `null`, a list, a TOML date or time) as its spelling, which no
    type accepts (CONFIG/001 naming it), since a binding holds a section-6
    literal (`Binding.value`) and messages print it as one."""
    if type(value) in (bool, int, float, str):
        return value
    if value is None:
        return Unparsed("null")
    if isinstance(value, list):
        return Unparsed(json.dumps(value, default=str))
    return Unparsed(value.isoformat() if hasattr(value, "isoformat") else str(value))


def _dup_checked(pairs: list[tuple[str, Any]], dups: list[tuple[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, v in pairs:
        if k in d:
            dups.append((k, v))
        d[k] = v
    return d


def _too_deep(shown: str) -> CompileError:
    return CompileError([Diagnostic("CONFIG/001", f"cannot read {shown}: nested too deeply", shown, 0, 0)])


def _flatten(obj: dict[str, Any]) -> Iterable[tuple[str, Any]]:
    """(dotted key, value) of every leaf, in document order (no recursion:
    the nesting is the input's)."""
    stack = [iter(obj.items())]
    prefixes = [""]
    while stack:
        for k, v in stack[-1]:
            key = f"{prefixes[-1]}{k}"
            if isinstance(v, dict):
                stack.append(iter(v.items()))
                prefixes.append(key + ".")
                break
            yield key, v
        else:
            stack.pop()
            prefixes.pop()


# A key's definition in JSON (`"k":`) or TOML (`k =`, `a.b.k =`, `"k" =`).
_KEY_RE = re.compile(r'"((?:[^"\\\n]|\\.)*)"\s*:|^[ \t]*("[^"\n]*"|(?:[\w-]+\.)*[\w-]+)[ \t]*=', re.M)


def _key_locations(text: str) -> dict[str, tuple[int, int]]:
    """Best-effort position of each key's first definition in a JSON or TOML
    file, for messages: one pass over the text (a search per key was
    quadratic in the number of keys)."""
    out: dict[str, tuple[int, int]] = {}
    line, line_start, scanned = 1, 0, 0
    for m in _KEY_RE.finditer(text):
        name = m.group(1) if m.group(1) is not None else m.group(2).strip('"').rsplit(".", 1)[-1]
        if m.group(1) is not None and "\\" in name:
            try:
                name = json.loads(f'"{name}"')
            except ValueError:
                pass
        i = m.start(1) - 1 if m.group(1) is not None else m.start(2)
        line += text.count("\n", scanned, i)
        nl = text.rfind("\n", scanned, i)
        if nl >= 0:
            line_start = nl + 1
        scanned = i
        out.setdefault(name, (line, i - line_start + 1))
    return out
