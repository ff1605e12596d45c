"""`loom targets`: every target profile, one line each (or `--json`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from loomcli.targets.profiles import Profile


def _triple(t: tuple[int, ...]) -> str:
    return "x".join(map(str, t))


def describe(profile: Profile) -> str:
    """One stable line: target, triple, subgroup size, the key limits, features."""
    p = profile
    version = (f"code_object_version={p.code_object_version}" if p.code_object_version is not None
               else f"spirv_version={'.'.join(map(str, p.spirv_version))}" if p.spirv_version else "")
    parts = [
        f"{p.name:<22}", f"triple={p.triple}",
        f"subgroup_size={p.subgroup_size if p.subgroup_size is not None else 'none'}",
        f"max_workgroup_size={_triple(p.max_workgroup_size)}",
        f"max_flat_workgroup_size={p.max_flat_workgroup_size}",
        f"max_workgroup_storage_bytes={p.max_workgroup_storage_bytes}",
        (f"max_workgroup_storage_optin_bytes={p.max_workgroup_storage_optin_bytes}"
         if p.max_workgroup_storage_optin_bytes is not None else ""),
        f"max_workgroup_count={_triple(p.max_workgroup_count)}",
        f"max_push_constant_bytes={p.max_push_constant_bytes if p.max_push_constant_bytes is not None else 'none'}",
        f"index_bitwidth={p.index_bitwidth}", f"offset_bitwidth={p.offset_bitwidth}",
        f"features={','.join(sorted(p.features)) or 'none'}", version,
    ]
    return " ".join(x for x in parts if x)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of profiles.")
@click.option("--stages", is_flag=True, help="Print each back end's stages and where each format stops "
              "(the names `loom compile --stop-at` takes).")
def targets(as_json: bool, stages: bool) -> int:
    """List the target profiles `--target` accepts (TOOLCHAIN.md section 3)."""
    from loomcli.targets.profiles import all_profiles

    if stages:
        for line in stage_lines():
            click.echo(line)
        return 0
    profiles = all_profiles()
    if as_json:
        click.echo(json.dumps([p.to_json() for p in profiles], indent=2))
    else:
        for p in profiles:
            click.echo(describe(p))
    return 0


def stage_lines() -> list[str]:
    """`amdgpu: llir -> asm | obj -> hsaco; amdgpu-hsaco=hsaco llvmir-text=llir asm=asm`, per family."""
    from loomcli.emit import BACKENDS

    return [f"{family}: {b.stages.describe()}; " + " ".join(f"{fmt}={stop}" for fmt, stop in b.stages.stops.items())
            for family, b in BACKENDS.items()]
