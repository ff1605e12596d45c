"""Every table keyed by op name covers exactly the ops it must.

Each row names a table and derives, from the op rows (`loomcli.ir.ops`:
contexts, traits, formats), the profiles and the passes' own `removes`,
the ops it must hold. Adding an op then fails here, naming each table that
lacks it; a key for an op the table can never see fails as extra. Keys that
are not ops at all fail earlier, when `OpTable` is filled at import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

import pytest

from loomcli.ir import format as F
from loomcli.ir.ops import (
    APPROXIMATE,
    CASE,
    COORDINATE,
    DEVICE_SITES,
    F_ANY,
    MEMORY,
    OPS,
    PROGRAM,
    PURE,
    TERMINATOR,
    ops_with,
)
from loomcli.passes.pipeline import parse_pipeline
from loomcli.pipeline import SPECIALIZE_FOR_TARGET
from loomcli.targets.profiles import REFERENCE, Profile, all_profiles

TERMINATORS = ops_with(TERMINATOR)
# Values of buffers and views have no constant form (section 6).
MEMORY_VALUES = frozenset({"buffer.assume.alignment", "buffer.assume.memory_space", "buffer.assume.noalias",
                           "buffer.view", "view.subview"})


def within(*contexts: str) -> set[str]:
    """The ops that may stand in any of `contexts`, terminators left to their parents."""
    return {name for name, d in OPS.items() if d.contexts & set(contexts)} - TERMINATORS


def calls() -> set[str]:
    """Ops that call a function body (a callee without a workload)."""
    return {name for name, d in OPS.items() if any(isinstance(x, F.Callee) and not x.workload for x in d.format)}


def with_regions() -> set[str]:
    return {name for name, d in OPS.items() if d.regions}


def folded() -> set[str]:
    """Every op with a meaning on constants: pure, exact, a function of its
    operands (constants, coordinates, config and target facts have none), on
    scalar values (no vector and no memory value has a constant form)."""
    return {name for name, d in OPS.items()
            if d.has(PURE) and not d.has(APPROXIMATE) and d.operands
            and not name.startswith("vector.") and name not in MEMORY_VALUES}


def evaluated() -> set[str]:
    """What compile-time evaluation runs: the folders, the facts it is given
    (constants, config, the target's subgroup size: pure, no operands, not
    device-only), control flow and calls; approximate ops stay the target's."""
    given = {name for name, d in OPS.items() if d.has(PURE) and not d.operands and d.contexts - DEVICE_SITES}
    return folded() | given | (within(F_ANY) & (with_regions() | calls()))


def not_evaluated(context: str) -> set[str]:
    return within(context) - evaluated() - ops_with(APPROXIMATE)


def removed_for(profile: Profile) -> frozenset[str]:
    """What target specialization and the profile's legalization leave none of."""
    pipeline = parse_pipeline(",".join((SPECIALIZE_FOR_TARGET, *profile.legalize)))
    return frozenset().union(*(p.removes(profile) for p in pipeline.passes))


def selected(family: str) -> set[str]:
    """The device ops a selector (or the interpreter) of `family` receives on some profile."""
    profiles = [REFERENCE] if family == "reference" else [p for p in all_profiles() if p.family == family]
    return set().union(*(within(*DEVICE_SITES) - removed_for(p) for p in profiles))


def table(path: str) -> Callable[[], Iterable[str]]:
    """The table `module:NAME`, imported when its row runs."""
    module, _, name = path.partition(":")
    return lambda: getattr(importlib.import_module(module), name)


_folders = table("loomcli.semantics.fold:FOLDERS")
_interpreter = table("loomcli.check.interpreter:_HANDLERS")
_evaluator = table("loomcli.semantics.evaluate:_SPECIAL")


# Lowered by emit/llvm although expand-math expands them for every AMDGPU and
# NVPTX profile (no profile lists sin, cos, tanh or pow as native): dead entries.
LLVM_UNREACHED = frozenset({"scalar.sinf", "scalar.cosf", "scalar.tanhf", "scalar.powf"})


def _spirv_roots_expected() -> set[str]:
    """Ops that make, pass on or use a buffer or view: memory accesses, the
    ops whose result is one, control flow and calls."""
    return within(*DEVICE_SITES) & (ops_with(MEMORY) | MEMORY_VALUES | {"scf.select"} | with_regions() | calls())


# (what, the table, the ops it must hold)
TABLES: list[tuple[str, Callable[[], Iterable[str]], Callable[[], set[str]]]] = [
    ("FOLDERS", _folders, folded),
    ("canonicalize PATTERNS: folding, identities, constant scf.if and trivial scf.for",
     table("loomcli.passes.canonicalize:PATTERNS"), lambda: folded() | {"scf.if", "scf.for"}),
    ("the evaluator beyond FOLDERS", lambda: set(_evaluator()) | set(_folders()), evaluated),
    ("the interpreter, with FOLDERS: every op a kernel body or device function may hold",
     lambda: set(_interpreter()) | set(_folders()), lambda: selected("reference")),
    ("the interpreter's approximate functions",
     table("loomcli.check.interpreter:_APPROXIMATE"), lambda: set(ops_with(APPROXIMATE))),
    ("the SPIR-V selector", table("loomcli.emit.spirv.lower:LOWER"), lambda: selected("spirv")),
    ("the LLVM selector (AMDGPU and NVPTX)",
     table("loomcli.emit.llvm.lower:HANDLERS"), lambda: selected("amdgpu") | selected("nvptx") | LLVM_UNREACHED),
    ("the SPIR-V root analysis", table("loomcli.emit.spirv.memory:_HANDLERS"), _spirv_roots_expected),
    ("the frontier's preparer: a program's control flow, groups and launches (the rest is evaluated)",
     table("loomcli.frontier.prepare:_HANDLERS"), lambda: (within(PROGRAM) & with_regions()) | not_evaluated(PROGRAM)),
    ("check cases: what the evaluator does not run",
     table("loomcli.check.cases:_CASE_OPS"), lambda: not_evaluated(CASE)),
    ("expand-math: the approximate functions a target may lack", table("loomcli.passes.expand_math:TRANSCENDENTAL"),
     lambda: set(ops_with(APPROXIMATE)) - {"scalar.rsqrtf"}),  # every target has an inverse square root
]


@pytest.mark.parametrize(("what", "table", "expected"), TABLES, ids=[row[0].split(":")[0] for row in TABLES])
def test_table_covers_exactly_its_ops(what: str, table: Callable[[], Iterable[str]],
                                      expected: Callable[[], set[str]]) -> None:
    keys, want = set(table()), expected()
    missing, extra = sorted(want - keys), sorted(keys - want)
    assert not missing and not extra, f"{what}: missing {missing}, extra {extra}"


def test_interpreter_handlers_and_folders_do_not_overlap() -> None:
    """Each op the interpreter runs has one meaning: its folder or its handler."""
    assert not set(_interpreter()) & set(_folders())


def test_spirv_coordinates_are_the_ops_lowered_as_builtins() -> None:
    from loomcli.emit.spirv.lower import COORDINATES, LOWER

    builtin = LOWER[next(iter(COORDINATES))]
    assert {name for name, fn in LOWER.items() if fn is builtin} == set(COORDINATES)
    assert set(COORDINATES) <= ops_with(COORDINATE)

