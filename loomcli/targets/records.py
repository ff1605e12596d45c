"""Target records in source: `amdgpu.target<chip> @r {keys}`,
`spirv.target<vulkan1_x> @r {keys}` and `nvptx.target<sm_NN> @r {keys}`
(LANGUAGE.md 7.8, 17.29-30; docs/nvptx.md).

A record names a chip or Vulkan environment and overrides fields of its
default profile. `RECORD_KEYS` is the whole vocabulary, one row per key:
the profile field it sets, the values it accepts and, for per-axis keys, the
axis. `record_profile` turns a record into a `Profile`; `record_keys` is its
inverse (every fact of a profile as record keys), which the launch-config
artifact uses to carry its target. An unknown key or a bad value is
TARGET/001 at the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.core import Module, Operation
from loomcli.targets.profiles import RECORD_OP, REFERENCE, U32_MAX, Profile, parse_target, with_overrides

RECORD_OPS = {op: family for family, op in RECORD_OP.items()}   # record op -> family
FEATURES = ("f16", "f64", "i64", "int8_storage", "int16_storage")
U63_MAX = (1 << 63) - 1
_WAVE64_ONLY = ("gfx90a", "gfx942", "gfx950", "gfx9-generic", "gfx9-4-generic")


def _int_in(lo: int, hi: int) -> Callable[[Any, Profile], bool]:
    return lambda v, p: type(v) is int and lo <= v <= hi


def _one_of(*allowed: int) -> Callable[[Any, Profile], bool]:
    return lambda v, p: type(v) is int and v in allowed


def _subgroup_size(v: Any, p: Profile) -> bool:
    if type(v) is not int:
        return False
    if p.family == "amdgpu":
        return v == 64 if p.selector in _WAVE64_ONLY else v in (32, 64)
    if p.family == "nvptx":
        return v == 32  # a warp is 32 lanes on every NVIDIA GPU
    return 1 <= v <= 128 and v & (v - 1) == 0


def _boolean(v: Any, p: Profile) -> bool:
    return type(v) is bool


@dataclass(frozen=True)
class Key:
    field: str                              # the Profile field it sets
    valid: Callable[[Any, Profile], bool]
    axis: int | None = None                 # per-axis keys set one component of a triple
    families: tuple[str, ...] = ("amdgpu", "spirv", "nvptx", "cpu")


RECORD_KEYS: dict[str, Key] = {
    "subgroup_size": Key("subgroup_size", _subgroup_size),
    "max_workgroup_size_x": Key("max_workgroup_size", _int_in(1, U32_MAX), 0),
    "max_workgroup_size_y": Key("max_workgroup_size", _int_in(1, U32_MAX), 1),
    "max_workgroup_size_z": Key("max_workgroup_size", _int_in(1, U32_MAX), 2),
    "max_flat_workgroup_size": Key("max_flat_workgroup_size", _int_in(1, U32_MAX)),
    "max_workgroup_storage_bytes": Key("max_workgroup_storage_bytes", _int_in(0, U63_MAX)),
    "index_bitwidth": Key("index_bitwidth", _one_of(32, 64)),
    "offset_bitwidth": Key("offset_bitwidth", _one_of(32, 64)),
    "max_push_constant_bytes": Key("max_push_constant_bytes", _int_in(0, U32_MAX), families=("spirv",)),
    "max_workgroup_count_x": Key("max_workgroup_count", _int_in(1, U32_MAX), 0),
    "max_workgroup_count_y": Key("max_workgroup_count", _int_in(1, U32_MAX), 1),
    "max_workgroup_count_z": Key("max_workgroup_count", _int_in(1, U32_MAX), 2),
    **{f: Key("features", _boolean) for f in FEATURES},
}


def is_record(op: Operation | None) -> bool:
    return op is not None and op.name in RECORD_OPS


def record_target(record: Operation) -> str:
    """The target a record names, as `--target` spells it (`spirv:vulkan1.3`)."""
    return parse_target(f"{RECORD_OPS[record.name]}:{record.attr('kind')}").name


def _shown(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v + '"'
    return str(v)


def record_profile(record: Operation, path: str = "<memory>") -> tuple[Profile, list[Diagnostic]]:
    """The profile a target record describes, and TARGET/001 for each key it
    cannot take (the key is then ignored). Diagnostics point at the record."""
    from loomcli.errors import UsageError

    try:
        base = parse_target(f"{RECORD_OPS[record.name]}:{record.attr('kind')}")
    except UsageError:  # the input names the target, so the input is at fault
        return REFERENCE, [Diagnostic.make("TARGET/001", path, record.loc, text=str(record.attr("kind")))]
    diags: list[Diagnostic] = []

    def bad(text: str) -> None:
        diags.append(Diagnostic.make("TARGET/001", path, record.loc, text=text))

    fields: dict[str, Any] = {}
    triples = {"max_workgroup_size": list(base.max_workgroup_size),
               "max_workgroup_count": list(base.max_workgroup_count)}
    features = set(base.features)
    for key, value in (record.attr("dict", None) or {}).items():
        spec = RECORD_KEYS.get(key)
        if spec is None:
            bad(key)
        elif base.family not in spec.families:
            bad(f"{key} on {base.family}")
        elif not spec.valid(value, base):
            bad(f"{key} = {_shown(value)}")
        elif key == "subgroup_size" and base.family == "spirv" and base.selector != "vulkan1.3":
            bad(f"subgroup_size on {record.attr('kind')} (needs vulkan1_3)")  # 17.29
        elif spec.axis is not None:
            triples[spec.field][spec.axis] = value
        elif spec.field == "features":
            (features.add if value else features.discard)(key)
        else:
            fields[spec.field] = value
    for name, triple in triples.items():
        if tuple(triple) != getattr(base, name):
            fields[name] = tuple(triple)
    if frozenset(features) != base.features:
        fields["features"] = frozenset(features)
    profile = with_overrides(base, **fields) if fields else base
    return _with_record(profile, record.attr("sym", None)), diags


def _with_record(profile: Profile, sym: str | None) -> Profile:
    from dataclasses import replace

    return replace(profile, record=sym)


def record_keys(profile: Profile) -> dict[str, Any]:
    """Every fact of `profile` as record keys, in `RECORD_KEYS` order: a record
    with these keys reproduces the profile (`record_profile`)."""
    keys: dict[str, Any] = {}
    for key, spec in RECORD_KEYS.items():
        if profile.family not in spec.families:
            continue
        value = getattr(profile, spec.field)
        if spec.axis is not None:
            value = value[spec.axis]
        elif spec.field == "features":
            value = key in value
        if value is not None:
            keys[key] = value
    return keys


def check_records(module: Module) -> list[Diagnostic]:
    """TARGET/001 for every bad key of every target record in `module`."""
    diags: list[Diagnostic] = []
    for op in module.ops:
        if is_record(op):
            diags += record_profile(op, module.path)[1]
    return diags


def pinned_record(module: Module, op: Operation, symbols: dict[str, Operation] | None = None) -> Operation | None:
    """The target record `op` is pinned to with `target(@t)`, if any;
    TARGET/001 when @t is not a record."""
    name = op.attr_or("target")
    if name is None:
        return None
    record = (module.symbols() if symbols is None else symbols).get(name)
    if not is_record(record):
        raise CompileError([Diagnostic.make("TARGET/001", module.path, op.loc_of("target"), text=f"@{name}")])
    return record
