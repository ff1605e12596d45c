"""Target profiles as data (TOOLCHAIN.md section 3, LANGUAGE.md 7.8 and 17).

A profile is what every stage needs to know about a target: its family,
chip or environment, fixed subgroup size and limits. This module holds the
facts the middle of the compiler uses (template selection); code generation
adds its own fields as it lands.
"""

from __future__ import annotations

from dataclasses import dataclass

AMDGPU_CHIPS = ("gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1151",
                "gfx1200", "gfx1201", "gfx9-generic", "gfx9-4-generic", "gfx10-3-generic", "gfx11-generic",
                "gfx12-generic")
VULKAN_ENVS = ("vulkan1.1", "vulkan1.2", "vulkan1.3")

# LANGUAGE.md 17.18: which concrete chips a generic processor covers.
GENERIC_COVERS = {
    "gfx9-4-generic": ("gfx942", "gfx950"),
    "gfx10-3-generic": ("gfx1030",),
    "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1151"),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}
_WAVE64 = frozenset({"gfx90a", "gfx942", "gfx950", "gfx9-generic", "gfx9-4-generic"})


@dataclass(frozen=True)
class Profile:
    family: str                 # "amdgpu" | "spirv"
    selector: str               # "gfx1100" | "vulkan1.3"
    subgroup_size: int | None   # fixed subgroup size, None when the target has none

    @property
    def name(self) -> str:
        return f"{self.family}:{self.selector}"

    @property
    def chip(self) -> str:
        """The spelling target records use: `gfx1100`, `vulkan1_3`."""
        return self.selector.replace(".", "_") if self.family == "spirv" else self.selector

    def matches_record(self, record_chip: str) -> bool:
        """`target(@t)`: the record names this chip or the generic chip covering it."""
        if record_chip == self.chip:
            return True
        return self.chip in GENERIC_COVERS.get(record_chip, ())


def all_targets() -> list[str]:
    return [f"amdgpu:{c}" for c in AMDGPU_CHIPS] + [f"spirv:{e}" for e in VULKAN_ENVS]


def parse_target(text: str) -> Profile:
    """`amdgpu:gfx1100`, `gfx1100`, `spirv:vulkan1.3`, `vulkan1.3`; unknown ones are usage errors."""
    from loomcli.driver import UsageError

    family, _, selector = text.partition(":")
    if not selector:
        selector = family
        family = "amdgpu" if selector.startswith("gfx") else "spirv"
    if family == "amdgpu" and selector in AMDGPU_CHIPS:
        return Profile("amdgpu", selector, 64 if selector in _WAVE64 else 32)
    if family == "spirv" and selector.replace("_", ".") in VULKAN_ENVS:
        return Profile("spirv", selector.replace("_", "."), None)
    raise UsageError(f"unknown target `{text}`; valid targets: {', '.join(all_targets())}")
