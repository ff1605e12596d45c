"""The link index: the explicitly supplied inputs and libraries, immutable.

Bytecode inputs contribute their symbol table without decoding any body; a
module is decoded the first time one of its symbols is needed. Once built,
an index is never changed, so a build can share it with every worker.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from loomcli.diagnostics import CompileError
from loomcli.ir.core import Module, Operation


@dataclass(frozen=True)
class SymbolInfo:
    """What the index knows of one top-level op without opening its body."""

    op_name: str
    symbol: str
    public: bool
    retain: bool
    export: str | None
    position: int  # index among the module's top-level ops


@dataclass(frozen=True, eq=False)
class LinkInput:
    path: str           # as shown to users (relative, `/`-separated)
    key: str            # `module.import` key: the file stem unless given as KEY=PATH
    library: bool
    symbols: tuple[SymbolInfo, ...]
    data: bytes | None = None          # bytecode, decoded lazily
    _module: list[Module] = field(default_factory=list, repr=False)  # memo of the decoded module

    def module(self) -> Module:
        if not self._module:
            from loomcli.frontend import load_bytes

            assert self.data is not None
            self._module.append(load_bytes(self.data, self.path))
        return self._module[0]

    def op(self, info: SymbolInfo) -> Operation:
        return self.module().ops[info.position]

    @property
    def decoded(self) -> bool:
        return bool(self._module)


def _symbols_of(module: Module) -> tuple[SymbolInfo, ...]:
    out = []
    for i, op in enumerate(module.ops):
        sym = op.symbol
        if sym is not None:
            out.append(SymbolInfo(op.name, sym, bool(op.attr_or("public")), bool(op.attr_or("retain")),
                                  op.attr_or("export"), i))
    return tuple(out)


def split_key(spec: str) -> tuple[str | None, str]:
    """`KEY=PATH` or `PATH` (a path with `=` in it needs the KEY= form)."""
    key, eq, path = spec.partition("=")
    if eq and key and os.sep not in key and "/" not in key:
        if not path:  # else the open of "" fails with a message that names no file
            from loomcli.errors import UsageError

            raise UsageError(f"`{spec}` names no file (write KEY=PATH)")
        return key, path
    return None, spec


def make_input(path: str, shown: str, key: str | None, library: bool) -> LinkInput:
    from loomcli.files import read_input
    from loomcli.frontend import is_bytecode, load_bytes

    data = read_input(path)
    key = key or os.path.splitext(os.path.basename(path))[0]
    if is_bytecode(data):
        from loomcli.bytecode import read_symbol_table

        entries = read_symbol_table(data, shown)
        symbols = tuple(SymbolInfo(e.op_name, e.symbol, e.public, e.retain, e.export, i)
                        for i, e in enumerate(entries) if e.symbol is not None)
        return LinkInput(shown, key, library, symbols, data)
    module = load_bytes(data, shown)
    return LinkInput(shown, key, library, _symbols_of(module), None, [module])


def input_from_module(module: Module, key: str, library: bool = False) -> LinkInput:
    return LinkInput(module.path, key, library, _symbols_of(module), None, [module])


@dataclass(frozen=True, eq=False)
class LinkIndex:
    inputs: tuple[LinkInput, ...]

    @classmethod
    def build(cls, inputs: Iterable[str], libraries: Iterable[str] = ()) -> LinkIndex:
        """Load every input and library (`PATH` or `KEY=PATH`); all of their
        diagnostics are reported together."""
        from loomcli.errors import UsageError
        from loomcli.frontend import display_path

        items: list[LinkInput] = []
        errors = []
        for spec, library in [(s, False) for s in inputs] + [(s, True) for s in libraries]:
            key, path = split_key(spec)
            try:
                items.append(make_input(path, display_path(path), key, library))
            except CompileError as e:
                errors.extend(e.diagnostics)
        if errors:
            raise CompileError(errors)
        # Libraries form a set: their order on the command line must not change
        # the output, so they are taken in key order. Inputs keep theirs, which
        # decides renaming (LANGUAGE.md 17.24).
        items = [i for i in items if not i.library] + sorted((i for i in items if i.library),
                                                             key=lambda i: (i.key, i.path))
        seen: dict[str, str] = {}
        for item in items:
            if item.key in seen:
                raise UsageError(f"inputs {seen[item.key]} and {item.path} share the key `{item.key}`; "
                                 f"name one KEY=PATH")
            seen[item.key] = item.path
        return cls(tuple(items))

    def by_key(self, key: str) -> int | None:
        for i, item in enumerate(self.inputs):
            if item.key == key:
                return i
        return None
