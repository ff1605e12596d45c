"""The fact engine (LANGUAGE.md 17.16): what is proven, refuted or unknown."""

from __future__ import annotations

import pytest

from loomcli.ir.attrs import Pred
from loomcli.ir.core import Value
from loomcli.ir.types import INDEX
from loomcli.passes.facts import PROVEN, REFUTED, UNKNOWN, Facts, branch_intervals

A, B = Value("a", INDEX), Value("b", INDEX)
ORDER = {A: 0, B: 1}


def facts(*preds: Pred) -> Facts:
    f = Facts(lambda v: ORDER.get(v, 99))
    for p in preds:
        f.add(p)
    return f


@pytest.mark.parametrize("known,query,expected", [
    ([Pred("range", [A, 0, 255])], Pred("le", [A, 255]), PROVEN),
    ([Pred("range", [A, 0, 255])], Pred("ge", [A, 256]), REFUTED),
    ([Pred("range", [A, 0, 255])], Pred("lt", [A, 100]), UNKNOWN),
    ([Pred("min", [A, 4]), Pred("max", [A, 4])], Pred("eq", [A, 4]), PROVEN),
    ([Pred("gt", [A, 9])], Pred("ne", [A, 3]), PROVEN),
    ([Pred("eq", [A, 3])], Pred("ne", [A, 3]), REFUTED),
    ([Pred("mul", [A, 16]), Pred("mul", [A, 12])], Pred("mul", [A, 48]), PROVEN),   # lcm 48
    ([Pred("mul", [A, 16])], Pred("mul", [A, 32]), UNKNOWN),
    ([Pred("range", [A, 1, 3])], Pred("mul", [A, 4]), REFUTED),                     # no multiple in [1, 3]
    ([Pred("pow2", [A])], Pred("pow2", [A]), PROVEN),
    ([Pred("max", [A, 0])], Pred("pow2", [A]), REFUTED),
    # No fact is derived from another: pow2 does not give an interval.
    ([Pred("pow2", [A])], Pred("ge", [A, 1]), UNKNOWN),
    # Relations are stored normalized: ge(%b, %a) is le(%a, %b).
    ([Pred("ge", [B, A])], Pred("le", [A, B]), PROVEN),
    ([Pred("lt", [A, B])], Pred("le", [A, B]), PROVEN),   # lt implies le ...
    ([Pred("lt", [A, B])], Pred("ne", [B, A]), PROVEN),   # ... and ne
    ([Pred("le", [A, B])], Pred("lt", [A, B]), UNKNOWN),
])
def test_judge(known: list[Pred], query: Pred, expected: str) -> None:
    assert facts(*known).judge(query) == expected


def test_constants_evaluate() -> None:
    f = facts()
    f.constants[A] = 64
    assert f.judge(Pred("ge", [A, 128])) == REFUTED
    assert f.judge(Pred("mul", [A, 64])) == PROVEN


@pytest.mark.parametrize("pred,c,left,then,else_", [
    ("slt", 10, False, (-(1 << 200), 9), (10, 1 << 200)),
    ("sge", 10, False, (10, 1 << 200), (-(1 << 200), 9)),
    ("slt", 10, True, (11, 1 << 200), (-(1 << 200), 10)),   # 10 < %a
    ("ult", 10, False, (0, 9), None),                       # unsigned: nothing in else
    ("ule", 10, False, (0, 10), None),
    ("ult", -1, False, None, None),
    ("eq", 5, False, (5, 5), None),
])
def test_branch_intervals(pred: str, c: int, left: bool, then: tuple | None, else_: tuple | None) -> None:
    assert branch_intervals(pred, c, left) == (then, else_)
