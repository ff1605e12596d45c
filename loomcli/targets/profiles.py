"""Target profiles as data (TOOLCHAIN.md section 3, LANGUAGE.md 7.8 and 17).

A profile is everything a stage needs to know about a target: family, chip
or environment, triple, fixed subgroup size, limits, feature facts and the
code-object or SPIR-V version. Targets differ only in this data and in a
small emitter; nothing else in the compiler asks which target it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

AMDGPU_CHIPS = ("gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1151",
                "gfx1200", "gfx1201", "gfx9-generic", "gfx9-4-generic", "gfx10-3-generic", "gfx11-generic",
                "gfx12-generic")
VULKAN_ENVS = ("vulkan1.1", "vulkan1.2", "vulkan1.3")
NVPTX_CHIPS = ("sm_80", "sm_89", "sm_90", "sm_100")
CPU_HOSTS = ("x86-64",)   # the host ISA levels the cpu device compiles for (x86-64: the baseline, no FMA)

# LANGUAGE.md 17.18: which concrete chips a generic processor covers.
GENERIC_COVERS = {
    "gfx9-4-generic": ("gfx942", "gfx950"),
    "gfx10-3-generic": ("gfx1030",),
    "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1151"),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}
_WAVE64 = frozenset({"gfx90a", "gfx942", "gfx950", "gfx9-generic", "gfx9-4-generic"})
# SPIR-V version each Vulkan environment consumes.
SPIRV_VERSIONS = {"vulkan1.1": (1, 3), "vulkan1.2": (1, 5), "vulkan1.3": (1, 6)}

U32_MAX = (1 << 32) - 1

# family -> record op
RECORD_OP = {"amdgpu": "amdgpu.target", "spirv": "spirv.target", "nvptx": "nvptx.target", "cpu": "cpu.target"}

# NVIDIA: a kernel's static `.shared` data may take 48 KiB; more is dynamic
# shared memory a launch opts into (cudaFuncAttributeMaxDynamicSharedMemorySize),
# up to this per-block size (CUDA C Programming Guide, compute capabilities).
NVPTX_SHARED_OPTIN = {"sm_80": 166912, "sm_89": 101376, "sm_90": 232448, "sm_100": 232448}
# What every device family legalizes in Loom IR before instruction selection
# (`Profile.legalize`), written once for all back ends: workgroup reductions
# become subgroup reductions, workgroup memory and barriers; transcendental
# functions the profile lacks natively (`native_math`) become scalar ops;
# bf16 arithmetic is computed in f32 and rounded once (`widen-bf16`).
DEVICE_LEGALIZE = ("expand-collectives", "expand-math", "widen-bf16")
NVPTX_FEATURES = frozenset({"f16", "bf16", "f64", "i64", "int8_storage", "int16_storage",
                            "atomic_add_f32", "atomic_add_f64"})


@dataclass(frozen=True)
class Profile:
    family: str                 # "amdgpu" | "spirv" | "nvptx" | "cpu" | "reference"
    selector: str               # "gfx1100" | "vulkan1.3" | "sm_90" | "reference"
    subgroup_size: int | None   # fixed subgroup size, None when the target has none
    triple: str = ""
    max_workgroup_size: tuple[int, int, int] = (1024, 1024, 1024)
    max_flat_workgroup_size: int = 1024
    max_workgroup_storage_bytes: int = 65536
    # nvptx: the larger per-workgroup shared memory a launch may opt into
    # (dynamic shared memory); Loom allocates statically, so the limit above holds.
    max_workgroup_storage_optin_bytes: int | None = None
    max_workgroup_count: tuple[int, int, int] = (U32_MAX, U32_MAX, U32_MAX)
    max_push_constant_bytes: int | None = None
    max_private_bytes: int = 65536             # per invocation, all private allocas (TARGET/007)
    index_bitwidth: int = 32
    offset_bitwidth: int = 64
    features: frozenset[str] = frozenset({"f16", "f64", "i64", "int8_storage", "int16_storage"})
    code_object_version: int | None = None      # amdgpu: 5, or 6 for generic processors
    spirv_version: tuple[int, int] | None = None
    record: str | None = None                   # the source target record it came from, if any
    # Float widths for which the target is asked to keep signed zeros,
    # infinities and NaNs as IEEE says (SPIR-V SignedZeroInfNanPreserve,
    # Vulkan 1.2+), and what stays up to the driver even so (docs/spirv.md).
    ieee_preserve_widths: tuple[int, ...] = ()
    driver_dependent: tuple[str, ...] = ()
    overrides: tuple[tuple[str, Any], ...] = field(default=())
    # Registered IR-to-IR passes that emission runs, in order, before the
    # family's instruction selector: what the target cannot select directly
    # is legalized once, in Loom IR, for every family alike.
    legalize: tuple[str, ...] = ()
    # (function, Loom float type) pairs the target's own lowering computes
    # within the accuracy LANGUAGE.md 7.2 and docs/math.md promise over the
    # whole range ("exp2", "f32"); `expand-math` builds every other
    # exp/exp2/log/log2/sin/cos/tanh/pow from Loom scalar ops.
    native_math: frozenset[tuple[str, str]] = frozenset()

    @property
    def name(self) -> str:
        return f"{self.family}:{self.selector}"

    @property
    def chip(self) -> str:
        """The spelling target records use: `gfx1100`, `vulkan1_3`."""
        return self.selector.replace(".", "_") if self.family == "spirv" else self.selector

    @property
    def is_generic(self) -> bool:
        return self.selector.endswith("-generic")

    @property
    def max_grid_size(self) -> int | None:
        """Per axis, workgroups x workgroup size must fit this (AMD's dispatch packet holds a u32 grid)."""
        return U32_MAX if self.family == "amdgpu" else None

    @property
    def record_op(self) -> str | None:
        """The op of this profile's target records (`amdgpu.target`); None for the reference profile."""
        return RECORD_OP.get(self.family)

    def matches_record(self, record_chip: str) -> bool:
        """`target(@t)`: the record names this chip or the generic chip covering it."""
        if record_chip == self.chip:
            return True
        return self.chip in GENERIC_COVERS.get(record_chip, ())

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "target": self.name, "family": self.family, "selector": self.selector, "triple": self.triple,
            "subgroup_size": self.subgroup_size,
            "max_workgroup_size": list(self.max_workgroup_size),
            "max_flat_workgroup_size": self.max_flat_workgroup_size,
            "max_workgroup_storage_bytes": self.max_workgroup_storage_bytes,
            "max_workgroup_count": list(self.max_workgroup_count),
            "max_push_constant_bytes": self.max_push_constant_bytes,
            "max_private_bytes": self.max_private_bytes,
            "index_bitwidth": self.index_bitwidth, "offset_bitwidth": self.offset_bitwidth,
            "features": sorted(self.features),
            # What emission legalizes in Loom IR, and the (function, type) pairs it leaves to the target.
            "legalize": list(self.legalize),
            "native_math": [f"{fn}.{t}" for fn, t in sorted(self.native_math)],
        }
        if self.max_workgroup_storage_optin_bytes is not None:
            d["max_workgroup_storage_optin_bytes"] = self.max_workgroup_storage_optin_bytes
        if self.code_object_version is not None:
            d["code_object_version"] = self.code_object_version
        if self.spirv_version is not None:
            d["spirv_version"] = ".".join(map(str, self.spirv_version))
        if self.family == "spirv":
            d["signed_zero_inf_nan_preserve"] = list(self.ieee_preserve_widths)
            d["driver_dependent"] = list(self.driver_dependent)
        return d


# LLVM's AMDGPU lowering of exp, exp2, log and log2 in f32 and f16 is
# accurate to about 1 ulp over the whole range (range reduction and
# denormal scaling around v_exp/v_log). Its sin and cos are NOT: v_sin takes
# x/2pi scaled in single precision, which loses every bit for large
# arguments, so they are expanded; AMDGPU has no f64 transcendental
# instructions at all.
AMDGPU_NATIVE_MATH = frozenset((fn, t) for fn in ("exp", "exp2", "log", "log2") for t in ("f32", "f16"))
# NVPTX: LLVM lowers only exp2 without libdevice, to `ex2.approx.f32` (no
# .ftz, so subnormal results stay), within 2 ulp over the full range: the
# f32 accuracy docs/math.md states. The half-precision ex2 is not held to
# f16's 1 ulp, so f16 and bf16 exp2 go through the f32 instruction and
# round once.
NVPTX_NATIVE_MATH = frozenset({("exp2", "f32")})
# SPIR-V: none. Vulkan's precision for GLSL.std.450 Exp/Log/Sin/... is far
# from "a few ulp" (lavapipe: hundreds of ulp near hard arguments).


def amdgpu_profile(chip: str) -> Profile:
    return Profile("amdgpu", chip, 64 if chip in _WAVE64 else 32, triple="amdgcn-amd-amdhsa",
                   code_object_version=6 if chip.endswith("-generic") else 5, legalize=DEVICE_LEGALIZE,
                   native_math=AMDGPU_NATIVE_MATH)


# What IEEE behaviour a Vulkan driver may still change with the float
# controls requested (observed on lavapipe; the spec leaves them open).
SPIRV_DRIVER_DEPENDENT = (
    "Fma may be computed unfused (two roundings)",
    "-0.0 * x may be folded to a zero of the wrong sign at compile time",
    "the sign and payload of a NaN produced by arithmetic",
    "SignedZeroInfNanPreserve is a request: devices without shaderSignedZeroInfNanPreserveFloat16/32/64 "
    "ignore it",
)


def spirv_profile(env: str) -> Profile:
    return Profile("spirv", env, None, triple="spirv-unknown-vulkan" + env[len("vulkan"):],
                   max_workgroup_size=(1024, 1024, 64), max_workgroup_storage_bytes=32768,
                   max_workgroup_count=(65535, 65535, 65535), max_push_constant_bytes=128, max_private_bytes=16384,
                   index_bitwidth=32, offset_bitwidth=32, spirv_version=SPIRV_VERSIONS[env],
                   ieee_preserve_widths=(16, 32, 64) if SPIRV_VERSIONS[env] >= (1, 4) else (),
                   driver_dependent=SPIRV_DRIVER_DEPENDENT, legalize=DEVICE_LEGALIZE)


def nvptx_profile(chip: str) -> Profile:
    return Profile("nvptx", chip, 32, triple="nvptx64-nvidia-cuda", max_workgroup_size=(1024, 1024, 64),
                   max_workgroup_storage_bytes=49152, max_workgroup_storage_optin_bytes=NVPTX_SHARED_OPTIN[chip],
                   max_workgroup_count=(U32_MAX >> 1, 65535, 65535), index_bitwidth=32, offset_bitwidth=64,
                   features=NVPTX_FEATURES, legalize=DEVICE_LEGALIZE, native_math=NVPTX_NATIVE_MATH)


# The cpu device (`loom test --device cpu`): the shared LLVM lowering compiled
# for this machine and run natively, one workgroup at a time (docs/cpu.md).
# Subgroups of 8 (a 256-bit vector of f32), 64-bit indices like the
# reference profile, every feature, and no native transcendental functions:
# expand-math builds them all, so results do not depend on the host's libm.


def cpu_profile(host: str) -> Profile:
    return Profile("cpu", host, 8, triple="x86_64-unknown-linux-gnu", max_workgroup_size=(1024, 1024, 64),
                   max_workgroup_count=(U32_MAX, U32_MAX, U32_MAX), index_bitwidth=64, offset_bitwidth=64,
                   features=NVPTX_FEATURES, legalize=DEVICE_LEGALIZE)


REFERENCE = Profile("reference", "reference", 32, max_workgroup_size=(1024, 1024, 64), index_bitwidth=64,
                    offset_bitwidth=64)


def all_targets() -> list[str]:
    return ([f"amdgpu:{c}" for c in AMDGPU_CHIPS] + [f"spirv:{e}" for e in VULKAN_ENVS]
            + [f"nvptx:{c}" for c in NVPTX_CHIPS] + [f"cpu:{h}" for h in CPU_HOSTS])


def all_profiles() -> list[Profile]:
    return [parse_target(t) for t in all_targets()]


def parse_target(text: str) -> Profile:
    """`amdgpu:gfx1100`, `gfx1100`, `spirv:vulkan1.3`, `vulkan1.3`, `nvptx:sm_90`, `sm_90`; unknown ones
    are usage errors."""
    from loomcli.errors import UsageError

    family, _, selector = text.partition(":")
    if not selector:
        selector = family
        family = "amdgpu" if selector.startswith("gfx") else "nvptx" if selector.startswith("sm_") else "spirv"
    if family == "amdgpu" and selector in AMDGPU_CHIPS:
        return amdgpu_profile(selector)
    if family == "spirv" and selector.replace("_", ".") in VULKAN_ENVS:
        return spirv_profile(selector.replace("_", "."))
    if family == "nvptx" and selector in NVPTX_CHIPS:
        return nvptx_profile(selector)
    if family == "cpu" and selector in CPU_HOSTS:
        return cpu_profile(selector)
    raise UsageError(f"unknown target `{text}`; valid targets: {', '.join(all_targets())}")


def with_overrides(profile: Profile, **fields: Any) -> Profile:
    """A profile with fields replaced (target records in source override defaults)."""
    return replace(profile, overrides=profile.overrides + tuple(sorted(fields.items())), **fields)
