"""The fact engine of LANGUAGE.md section 10 and section 17 item 16, exactly.

Facts of a value: its constant if it folds; an interval (the intersection of
`range`, `min`, `max` and `lt/le/gt/ge/eq` against literals); a modulus (lcm
of `mul` literals); a pow2 flag; relations to other values stored as le/lt/eq
(and ne) with operands in definition order. No fact is derived from another.
A predicate is proven, refuted or unknown; nothing stronger is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from loomcli.ir.attrs import Pred
from loomcli.ir.core import Value
from loomcli.semantics.fold import predicate_holds

PROVEN, REFUTED, UNKNOWN = "proven", "refuted", "unknown"
NEG_INF, POS_INF = -(1 << 200), 1 << 200

_SWAP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


class Facts:
    """Facts at one program point; `child()` starts a nested scope (scf.if branches)."""

    __slots__ = ("constants", "intervals", "modulus", "order", "pow2", "relations")

    def __init__(self, order: Callable[[Value], int]) -> None:
        self.constants: dict[Value, Any] = {}
        self.intervals: dict[Value, tuple[int, int]] = {}
        self.modulus: dict[Value, int] = {}
        self.pow2: set[Value] = set()
        self.relations: set[tuple[str, Value, Value]] = set()
        self.order = order

    def child(self) -> Facts:
        f = Facts(self.order)
        f.constants = dict(self.constants)
        f.intervals = dict(self.intervals)
        f.modulus = dict(self.modulus)
        f.pow2 = set(self.pow2)
        f.relations = set(self.relations)
        return f

    # ------------------------------------------------------------ recording

    def constant(self, v: Any) -> Any:
        if isinstance(v, Value):
            return self.constants.get(v)
        return v

    def narrow(self, v: Value, lo: int = NEG_INF, hi: int = POS_INF) -> None:
        old_lo, old_hi = self.intervals.get(v, (NEG_INF, POS_INF))
        self.intervals[v] = (max(old_lo, lo), min(old_hi, hi))

    def add(self, pred: Pred, subject: Value | None = None, args: list[Any] | None = None) -> None:
        """Record a predicate as a fact. `subject`/`args` override the predicate's own
        operands (an `index.assume` result, a provider argument substituted)."""
        raw = list(args if args is not None else pred.args)
        v = subject if subject is not None else raw[0]
        rest = [self.constant(a) if isinstance(a, Value) and self.constant(a) is not None else a for a in raw[1:]]
        name = pred.name
        if not isinstance(v, Value):
            return
        if name == "range":
            lo, hi = rest
            if isinstance(lo, int):
                self.narrow(v, lo=lo)
            if isinstance(hi, int):
                self.narrow(v, hi=hi)
        elif name in ("min", "max"):
            if isinstance(rest[0], int):
                self.narrow(v, lo=rest[0]) if name == "min" else self.narrow(v, hi=rest[0])
        elif name == "mul":
            if isinstance(rest[0], int) and rest[0] > 0:
                old = self.modulus.get(v, 1)
                self.modulus[v] = old * rest[0] // math.gcd(old, rest[0])
        elif name == "pow2":
            self.pow2.add(v)
        else:
            w = rest[0]
            if isinstance(w, int):
                if name == "eq":
                    self.narrow(v, w, w)
                elif name == "lt":
                    self.narrow(v, hi=w - 1)
                elif name == "le":
                    self.narrow(v, hi=w)
                elif name == "gt":
                    self.narrow(v, lo=w + 1)
                elif name == "ge":
                    self.narrow(v, lo=w)
            elif isinstance(w, Value):
                self.relations.add(self._normalize(name, v, w))

    def _normalize(self, name: str, a: Value, b: Value) -> tuple[str, Value, Value]:
        if name in ("ge", "gt"):
            name, a, b = _SWAP[name], b, a
        if name in ("eq", "ne") and self.order(b) < self.order(a):
            a, b = b, a
        return (name, a, b)

    # ------------------------------------------------------------ judging

    def judge(self, pred: Pred, subject: Any = None, args: list[Any] | None = None) -> str:
        raw = list(args if args is not None else pred.args)
        v = subject if subject is not None else raw[0]
        cv = self.constant(v)
        rest = [self.constant(a) if isinstance(a, Value) and self.constant(a) is not None else a for a in raw[1:]]
        name = pred.name
        if cv is not None and all(not isinstance(a, Value) for a in rest):
            return PROVEN if predicate_holds(name, [cv, *rest]) else REFUTED
        if any(isinstance(a, Value) for a in rest):
            if cv is not None or name not in _SWAP:
                return UNKNOWN
            return PROVEN if self._related(name, v, rest[0]) else UNKNOWN
        lo, hi = self.intervals.get(v, (NEG_INF, POS_INF))
        if name == "mul":
            k = rest[0]
            if k > 0 and self.modulus.get(v, 0) % k == 0 and v in self.modulus:
                return PROVEN
            if lo > NEG_INF and hi < POS_INF and k > 0 and _first_multiple(lo, k) > hi:
                return REFUTED
            return UNKNOWN
        if name == "pow2":
            if v in self.pow2:
                return PROVEN
            if hi < 1 or (lo > NEG_INF and hi < POS_INF and not _has_pow2(lo, hi)):
                return REFUTED
            return UNKNOWN
        allowed = _literal_set(name, rest)
        if allowed is None:  # ne: everything but one point
            w = rest[0]
            if not lo <= w <= hi:
                return PROVEN
            return REFUTED if lo == hi == w else UNKNOWN
        a_lo, a_hi = allowed
        if a_lo <= lo and hi <= a_hi:
            return PROVEN
        if hi < a_lo or lo > a_hi:
            return REFUTED
        return UNKNOWN

    def _related(self, name: str, a: Value, b: Value) -> bool:
        want = self._normalize(name, a, b)
        rels = self.relations
        if want in rels:
            return True
        kind, x, y = want
        if kind == "le":
            return ("lt", x, y) in rels or ("eq", *sorted((x, y), key=self.order)) in rels
        if kind == "ne":
            return ("lt", x, y) in rels or ("lt", y, x) in rels
        return False


def _literal_set(name: str, args: list[Any]) -> tuple[int, int] | None:
    if name == "range":
        return args[0], args[1]
    if name in ("min", "ge"):
        return args[0], POS_INF
    if name in ("max", "le"):
        return NEG_INF, args[0]
    if name == "gt":
        return args[0] + 1, POS_INF
    if name == "lt":
        return NEG_INF, args[0] - 1
    if name == "eq":
        return args[0], args[0]
    return None


def _first_multiple(lo: int, k: int) -> int:
    return -((-lo) // k) * k


def _has_pow2(lo: int, hi: int) -> bool:
    p = 1
    while p <= hi:
        if p >= lo:
            return True
        p <<= 1
    return False


# Intervals an `index.cmp` against a constant gives its branches (LANGUAGE.md 17.16).
def branch_intervals(predicate: str, c: int, constant_on_left: bool) -> tuple[tuple[int, int] | None,
                                                                               tuple[int, int] | None]:
    """(then interval, else interval) for `cmp predicate, %a, c` (or `c, %a` when on the left)."""
    if constant_on_left:
        predicate = {"slt": "sgt", "sle": "sge", "sgt": "slt", "sge": "sle", "eq": "eq", "ne": "ne",
                     "ult": "ugt", "ule": "uge", "ugt": "ult", "uge": "ule"}[predicate]
    signed = {
        "slt": ((NEG_INF, c - 1), (c, POS_INF)), "sle": ((NEG_INF, c), (c + 1, POS_INF)),
        "sgt": ((c + 1, POS_INF), (NEG_INF, c)), "sge": ((c, POS_INF), (NEG_INF, c - 1)),
        "eq": ((c, c), None), "ne": (None, (c, c)),
    }
    if predicate in signed:
        return signed[predicate]
    if c >= 0 and predicate == "ult":
        return (0, c - 1), None
    if c >= 0 and predicate == "ule":
        return (0, c), None
    return None, None
