"""Binding config keys in a module (LANGUAGE.md sections 11 and 17 items 22-23).

`bind_module` applies the effective bindings to a linked module: a bound
`config.decl`/`config.def` becomes `config.def` with its value (CONFIG/001
when it cannot bind, CONFIG/002 when a declaration's predicate fails) and a
`config.get` of a bound key folds to a constant (CONFIG/003 for a reachable
unbound one when resolution is required). The `specialize-config` pass and
the compile pipeline call it; `loomcli.link.config` gathers the bindings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loomcli.diagnostics import Diagnostic
from loomcli.ir.attrs import Pred
from loomcli.ir.core import Module, Operation, Value
from loomcli.ir.ops import CONFIG_DECL, CONFIG_DEF, CONFIG_GET, INDEX_CONSTANT, SCALAR_CONSTANT
from loomcli.ir.types import ScalarType, Type
from loomcli.ir.verifier import literal_fits, literal_text

COMMAND_LINE = "<command-line>"

@dataclass(frozen=True)
class Binding:
    key: str
    value: Any            # a section-6 literal: bool, int, float or str
    source: str           # how messages name it: "--config k=v", "cfg.toml", "a.loom:3"
    file: str = COMMAND_LINE
    loc: tuple[int, int] = (0, 0)
    level: int = 0        # index into LEVELS


@dataclass(frozen=True)
class ConfigBindings:
    """The effective binding of every key (immutable, shareable)."""

    bindings: Mapping[str, Binding]

    def get(self, key: str) -> Binding | None:
        return self.bindings.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self.bindings


def parse_literal_text(text: str) -> Any:
    """A section-6 literal written on the command line (`4096`, `0.5`, `true`, `"s"`, `-inf`)."""
    from loomcli.text.lexer import FLOAT, IDENT, INT, NEGIDENT, STRING, tokenize

    toks = tokenize(text.strip())
    if len(toks.kinds) != 2:
        raise ValueError(text)
    kind, tok = toks.kinds[0], toks.texts[0]
    if kind == INT:
        hexadecimal = tok.lstrip("-")[:2].lower() == "0x"
        if len(tok.lstrip("-")[2 if hexadecimal else 0:].lstrip("0")) > (16 if hexadecimal else 20):
            raise ValueError(text)  # past 2^64, and past Python's 4,300-digit limit
        return int(tok, 16) if hexadecimal else int(tok)
    if kind == FLOAT:
        value = float(tok)
        if math.isinf(value):
            raise ValueError(text)  # a finite literal past f64's range (LANGUAGE.md section 17.5)
        return value
    if kind == IDENT and tok in ("true", "false"):
        return tok == "true"
    if (kind == IDENT and tok in ("inf", "nan")) or (kind == NEGIDENT and tok in ("-inf", "-nan")):
        return float(tok)
    if kind == STRING:
        return json.loads(tok)
    raise ValueError(text)


def coerce(value: Any, t: Type) -> Any | None:
    """The value a binding gives type `t`, or None when it cannot bind (CONFIG/001)."""
    if isinstance(value, str):
        try:
            value = parse_literal_text(value)
        except ValueError:
            return None
        if isinstance(value, str):
            return None
    if not isinstance(t, ScalarType):
        return None
    if isinstance(value, bool):
        return value if t.name == "i1" else None
    if isinstance(value, int):
        if t.category == "float":
            try:
                f = float(value)
            except OverflowError:  # JSON and TOML integers are unbounded; f64 is not
                return None
            return f if f == value and literal_fits(f, t) else None
        return value if literal_fits(value, t) else None
    if isinstance(value, float):
        return value if t.category == "float" and literal_fits(value, t) else None
    return None


def holds(pred: Pred, subject: Value, value: int | float) -> bool:
    """Whether a predicate of LANGUAGE.md section 6 holds for a bound subject value."""
    bound = [value if a is subject else a for a in pred.args[1:]]
    if any(isinstance(a, Value) for a in bound):
        return True  # relations to other values are checked where those are known
    args: list[int | float] = [a for a in bound if not isinstance(a, Value)]  # all of them
    v = value
    name = pred.name
    if name == "range":
        return args[0] <= v <= args[1]
    if name in ("eq", "ne", "lt", "le", "gt", "ge"):
        w = args[0]
        return {"eq": v == w, "ne": v != w, "lt": v < w, "le": v <= w, "gt": v > w, "ge": v >= w}[name]
    if name == "mul":
        return args[0] > 0 and isinstance(v, int) and v % args[0] == 0
    if name == "pow2":
        return isinstance(v, int) and v > 0 and v & (v - 1) == 0
    if name == "min":
        return v >= args[0]
    if name == "max":
        return v <= args[0]
    return True


def pred_text(pred: Pred) -> str:
    args = ["%" + a.name if isinstance(a, Value) else str(a) for a in pred.args]
    return f"{pred.name}({', '.join(args)})"


class Unparsed(str):
    """A --config value that is no literal: reported as CONFIG/001 when bound."""


def bind_module(module: Module, bindings: ConfigBindings, require_resolved: bool = False,
                reachable: Iterable[Operation] | None = None,
                origins: Mapping[str, str] | None = None) -> list[Diagnostic]:
    """Apply `bindings` to a linked module in place.

    Every bound `config.decl`/`config.def` becomes `config.def` with the
    effective value (CONFIG/001 when it cannot bind, CONFIG/002 when a
    declaration's predicate fails); `config.get` of a bound key folds to a
    constant. With `require_resolved`, a reachable unbound `config.get` is
    CONFIG/003. `origins` maps a symbol to the file it came from (for messages).
    """
    from loomcli.ir.ops import OPS

    diags: list[Diagnostic] = []
    decls: dict[str, Operation] = {}
    for op in module.ops:
        if op.opdef in (CONFIG_DECL, CONFIG_DEF):
            decls.setdefault(op.attr("sym"), op)
    values: dict[str, Any] = {}
    for index, op in enumerate(module.ops):
        if op.opdef not in (CONFIG_DECL, CONFIG_DEF):
            continue
        key = op.attr("sym")
        b = bindings.get(key)
        t = op.attr("type")
        if b is None:
            if op.opdef is CONFIG_DEF:  # the lowest binding level: a definition in the input
                values[key] = op.attr("value")
            continue
        value = coerce(b.value, t)
        if value is None:
            diags.append(Diagnostic.make("CONFIG/001", b.file, b.loc, text=_text_of(b.value), k=key, type=t.name))
            continue
        sig = op.attr_or("sig")
        bad = False
        if sig is not None and sig.where:
            for p in sig.where:
                if not holds(p, sig.args[0], value):
                    diags.append(Diagnostic.make("CONFIG/002", b.file, b.loc, k=key, v=literal_text(value),
                                                 pred=pred_text(p).replace("%" + sig.args[0].name, "@" + key)))
                    bad = True
        if bad:
            continue
        values[key] = value
        if op.opdef is CONFIG_DECL or op.attr("value", None) != value:
            new = Operation(OPS["config.def"], attrs={"sym": key, "value": value, "type": t}, loc=op.loc)
            new.comments = op.comments
            new.parent = module.body
            module.body.ops[index] = new
    roots = list(reachable) if reachable is not None else module.ops
    for top in roots:
        for op in list(top.walk()):
            if op.opdef is not CONFIG_GET:
                continue
            key = op.attr("ref")
            if key in values:
                _fold_get(op, values[key])
            elif require_resolved and key not in values:
                path = (origins or {}).get((top.symbol or ""), module.path)
                diags.append(Diagnostic.make("CONFIG/003", path, op.loc, k=key))
    return diags


def _text_of(value: Any) -> str:
    return str(value) if isinstance(value, Unparsed) else literal_text(value)


def _fold_get(op: Operation, value: Any) -> None:
    """`%x = config.get @k : T` of a bound key becomes a constant of T with the same name."""
    from loomcli.ir.builder import substitute

    t = op.result().type
    if isinstance(value, bool) and t.name != "i1":
        value = int(value)
    if t.name in ("f16", "bf16", "f32", "f64"):
        value = float(value)
    row = INDEX_CONSTANT if t.name in ("index", "offset") else SCALAR_CONSTANT
    substitute(op, Operation(row, attrs={"value": value}, loc=op.loc))  # predicates naming the get follow it
