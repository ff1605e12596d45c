"""A small Vulkan compute runner: what `loom test` needs from a device, no more.

One `VulkanRunner` holds one instance, one device with one compute queue, a
command buffer, a fence, a descriptor pool and a timestamp query pool, all
created once and destroyed by `close()`. Shader modules and compute
pipelines are cached per SPIR-V binary and entry point. Buffers live in
host-visible, coherent memory, so uploads and read-backs are plain copies.

The device ABI is TOOLCHAIN.md section 8: storage buffers in set 0 with
binding = ordinal among the kernel's buffer parameters, scalars in one
push-constant block. Which device features a module needs is read from the
SPIR-V itself (its capabilities and extensions, `ShaderFacts`); the device
enables every feature of `FEATURES` the hardware offers, so one device
serves every module of a run, and a module that needs a missing one gets a
clear error naming it.

Calls go straight to the loader through the `vulkan` package's cffi `lib`
and `ffi`; the package is imported on first use only.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loomcli.errors import EXIT_ENV, LoomError

INSTALL_HINT = "install a Vulkan loader and driver: apt-get install libvulkan1 mesa-vulkan-drivers"
FENCE_TIMEOUT_NS = 300 * 1_000_000_000
WHOLE_SIZE = (1 << 64) - 1  # VK_WHOLE_SIZE (the binding spells it -1)

# Device types, best first: a real GPU before a CPU implementation (lavapipe).
_TYPE_RANK = {2: 0, 1: 1, 3: 2, 0: 3, 4: 4}  # discrete, integrated, virtual, other, cpu
_TYPE_NAMES = {0: "other", 1: "integrated GPU", 2: "discrete GPU", 3: "virtual GPU", 4: "CPU"}

# Features the runner enables when offered: struct -> fields. The order is
# the pNext chain; "core" is VkPhysicalDeviceFeatures inside Features2.
FEATURES: dict[str, tuple[str, ...]] = {
    "core": ("shaderInt64", "shaderFloat64", "shaderInt16"),
    "VkPhysicalDeviceVulkan11Features": ("storageBuffer16BitAccess", "uniformAndStorageBuffer16BitAccess",
                                         "storagePushConstant16", "variablePointersStorageBuffer",
                                         "variablePointers"),
    "VkPhysicalDeviceVulkan12Features": ("storageBuffer8BitAccess", "uniformAndStorageBuffer8BitAccess",
                                         "storagePushConstant8", "shaderInt8", "shaderFloat16",
                                         "shaderBufferInt64Atomics", "shaderSharedInt64Atomics",
                                         "vulkanMemoryModel", "vulkanMemoryModelDeviceScope", "scalarBlockLayout"),
    # maintenance4: modules may give their workgroup size as LocalSizeId (glslc does for 1.3).
    "VkPhysicalDeviceVulkan13Features": ("subgroupSizeControl", "computeFullSubgroups", "maintenance4"),
    "VkPhysicalDeviceShaderAtomicFloatFeaturesEXT": (
        "shaderBufferFloat32Atomics", "shaderBufferFloat32AtomicAdd", "shaderBufferFloat64Atomics",
        "shaderBufferFloat64AtomicAdd", "shaderSharedFloat32Atomics", "shaderSharedFloat32AtomicAdd",
        "shaderSharedFloat64Atomics", "shaderSharedFloat64AtomicAdd"),
    "VkPhysicalDeviceShaderAtomicFloat2FeaturesEXT": (
        "shaderBufferFloat16AtomicMinMax", "shaderBufferFloat32AtomicMinMax", "shaderBufferFloat64AtomicMinMax",
        "shaderSharedFloat16AtomicMinMax", "shaderSharedFloat32AtomicMinMax", "shaderSharedFloat64AtomicMinMax"),
}
# Feature structs that come with a device extension, and the API version the others need.
_STRUCT_EXTENSION = {"VkPhysicalDeviceShaderAtomicFloatFeaturesEXT": "VK_EXT_shader_atomic_float",
                     "VkPhysicalDeviceShaderAtomicFloat2FeaturesEXT": "VK_EXT_shader_atomic_float2"}
_STRUCT_API = {"VkPhysicalDeviceVulkan11Features": (1, 2), "VkPhysicalDeviceVulkan12Features": (1, 2),
               "VkPhysicalDeviceVulkan13Features": (1, 3)}
_STRUCT_STYPE = {
    "VkPhysicalDeviceVulkan11Features": "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES",
    "VkPhysicalDeviceVulkan12Features": "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES",
    "VkPhysicalDeviceVulkan13Features": "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES",
    "VkPhysicalDeviceShaderAtomicFloatFeaturesEXT":
        "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT",
    "VkPhysicalDeviceShaderAtomicFloat2FeaturesEXT":
        "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_2_FEATURES_EXT",
}

# SPIR-V capability -> (its name, the device feature it needs). Atomics
# name the storage-buffer feature: kernels keep their atomics in buffers.
CAPABILITY_FEATURES: dict[int, tuple[str, str]] = {
    9: ("Float16", "shaderFloat16"),
    10: ("Float64", "shaderFloat64"),
    11: ("Int64", "shaderInt64"),
    12: ("Int64Atomics", "shaderBufferInt64Atomics"),
    22: ("Int16", "shaderInt16"),
    39: ("Int8", "shaderInt8"),
    4433: ("StorageBuffer16BitAccess", "storageBuffer16BitAccess"),
    4434: ("UniformAndStorageBuffer16BitAccess", "uniformAndStorageBuffer16BitAccess"),
    4435: ("StoragePushConstant16", "storagePushConstant16"),
    4441: ("VariablePointersStorageBuffer", "variablePointersStorageBuffer"),
    4442: ("VariablePointers", "variablePointers"),
    4448: ("StorageBuffer8BitAccess", "storageBuffer8BitAccess"),
    4449: ("UniformAndStorageBuffer8BitAccess", "uniformAndStorageBuffer8BitAccess"),
    4450: ("StoragePushConstant8", "storagePushConstant8"),
    5345: ("VulkanMemoryModel", "vulkanMemoryModel"),
    5346: ("VulkanMemoryModelDeviceScope", "vulkanMemoryModelDeviceScope"),
    5612: ("AtomicFloat32MinMaxEXT", "shaderBufferFloat32AtomicMinMax"),
    5613: ("AtomicFloat64MinMaxEXT", "shaderBufferFloat64AtomicMinMax"),
    5616: ("AtomicFloat16MinMaxEXT", "shaderBufferFloat16AtomicMinMax"),
    6033: ("AtomicFloat32AddEXT", "shaderBufferFloat32AtomicAdd"),
    6034: ("AtomicFloat64AddEXT", "shaderBufferFloat64AtomicAdd"),
}
# GroupNonUniform* capability -> VkSubgroupFeatureFlagBits bit.
CAPABILITY_SUBGROUP_OPS = {61: ("GroupNonUniform", 0x1), 62: ("GroupNonUniformVote", 0x2),
                           63: ("GroupNonUniformArithmetic", 0x4), 64: ("GroupNonUniformBallot", 0x8),
                           65: ("GroupNonUniformShuffle", 0x10), 66: ("GroupNonUniformShuffleRelative", 0x20),
                           67: ("GroupNonUniformClustered", 0x40), 68: ("GroupNonUniformQuad", 0x80)}
# SPIR-V extension -> the device extension that must be enabled for it.
SPIRV_DEVICE_EXTENSIONS = {"SPV_EXT_shader_atomic_float_add": "VK_EXT_shader_atomic_float",
                           "SPV_EXT_shader_atomic_float_min_max": "VK_EXT_shader_atomic_float2"}


class VulkanUnavailable(LoomError):
    """No usable Vulkan loader, driver or device (exit 3)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_ENV)


class DeviceError(LoomError):
    """The device failed or cannot run a module (exit 3)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_ENV)


# ------------------------------------------------------------------ SPIR-V facts


@dataclass(frozen=True)
class ShaderFacts:
    """What a host must know about a SPIR-V module before running it."""

    version: tuple[int, int]
    capabilities: frozenset[int]
    extensions: frozenset[str]
    entry_points: dict[str, tuple[int, int, int] | None]   # GLCompute entry name -> LocalSize (None: not literal)


def shader_facts(data: bytes) -> ShaderFacts:
    """Read a SPIR-V binary's header, capabilities, extensions, GLCompute entry
    points and their LocalSize. Malformed input raises ValueError."""
    if len(data) < 20 or len(data) % 4:
        raise ValueError("not a SPIR-V binary (size)")
    magic = struct.unpack_from("<I", data)[0]
    order = "<" if magic == 0x07230203 else ">" if magic == 0x03022307 else None
    if order is None:
        raise ValueError("not a SPIR-V binary (magic)")
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    version = ((words[1] >> 16) & 0xFF, (words[1] >> 8) & 0xFF)
    caps: set[int] = set()
    exts: set[str] = set()
    entries: dict[int, str] = {}
    sizes: dict[int, tuple[int, int, int]] = {}
    size_ids: dict[int, tuple[int, int, int]] = {}
    constants: dict[int, int] = {}
    at = 5
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if count == 0 or at + count > len(words):
            raise ValueError(f"malformed SPIR-V instruction at word {at}")
        operands = words[at + 1:at + count]
        if opcode == 17:                            # OpCapability
            caps.add(operands[0])
        elif opcode == 10:                          # OpExtension
            exts.add(_string(operands))
        elif opcode == 15 and operands[0] == 5:     # OpEntryPoint GLCompute
            entries[operands[1]] = _string(operands[2:])
        elif opcode == 16 and operands[1] == 17:    # OpExecutionMode LocalSize
            sizes[operands[0]] = (operands[2], operands[3], operands[4])
        elif opcode == 331 and operands[1] == 38:   # OpExecutionModeId LocalSizeId
            size_ids[operands[0]] = (operands[2], operands[3], operands[4])
        elif opcode == 43:                          # OpConstant (the low word is enough for sizes)
            constants[operands[1]] = operands[2]
        elif opcode == 54:                          # OpFunction: the preamble is over
            break
        at += count
    for fn, ids in size_ids.items():
        if all(i in constants for i in ids):
            sizes[fn] = (constants[ids[0]], constants[ids[1]], constants[ids[2]])
    return ShaderFacts(version, frozenset(caps), frozenset(exts),
                       {name: sizes.get(fn) for fn, name in entries.items()})


def _string(words: Sequence[int]) -> str:
    raw = b"".join(struct.pack("<I", w) for w in words)
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


# ------------------------------------------------------------------ the device


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    type: str
    api_version: tuple[int, int, int]
    subgroup_size: int
    subgroup_operations: int                  # VkSubgroupFeatureFlags in compute
    min_subgroup_size: int
    max_subgroup_size: int
    required_subgroup_size_compute: bool      # subgroup size control usable for compute
    max_compute_workgroup_subgroups: int
    max_push_constant_bytes: int
    max_storage_buffers: int                  # per compute stage and set
    max_workgroup_count: tuple[int, int, int]
    max_workgroup_size: tuple[int, int, int]
    max_workgroup_invocations: int
    max_workgroup_storage_bytes: int
    features: frozenset[str]                  # enabled features, by field name
    extensions: frozenset[str]                # enabled device extensions
    timestamps: bool
    timestamp_period_ns: float

    @property
    def vulkan_env(self) -> str:
        """The highest `vulkan1.x` target environment this device runs."""
        minor = min(self.api_version[1], 3) if self.api_version[0] == 1 else 3
        return f"vulkan1.{minor}"

    def describe(self) -> str:
        major, minor, patch = self.api_version
        return f"{self.name} ({self.type}, Vulkan {major}.{minor}.{patch})"


@dataclass
class Buffer:
    """A storage buffer in host-visible coherent memory, mapped for its lifetime."""

    handle: Any
    memory: Any
    size: int
    mapped: Any     # cffi buffer over the mapping

    def write(self, data: bytes | bytearray, offset: int = 0) -> None:
        self.mapped[offset:offset + len(data)] = bytes(data)

    def read(self, nbytes: int, offset: int = 0) -> bytes:
        return bytes(self.mapped[offset:offset + nbytes])


@dataclass
class Pipeline:
    entry: str
    handle: Any
    layout: Any
    set_layout: Any
    n_buffers: int
    push_bytes: int
    local_size: tuple[int, int, int] | None
    required_subgroup_size: int | None


class VulkanRunner:
    """One Vulkan instance and device for a whole `loom test` run."""

    def __init__(self, api_version: tuple[int, int] = (1, 3)) -> None:
        self.vk = _load_vulkan()
        self.ffi = self.vk.ffi
        self.lib = self.vk.lib
        self._keep: list[Any] = []
        self.instance = None
        self.device = None
        self._modules: dict[bytes, tuple[Any, ShaderFacts]] = {}
        self._pipelines: dict[tuple[bytes, str, int, int, int | None], Pipeline] = {}
        self._buffers: list[Buffer] = []
        try:
            self._create_instance(api_version)
            self._pick_device()
            self._create_device()
            self._create_objects()
        except BaseException:
            self.close()
            raise

    # -------------------------------------------------------------- set-up

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            name = _result_name(self.vk, result)
            if result == self.vk.VK_ERROR_DEVICE_LOST:
                raise DeviceError(f"Vulkan device lost during {what}")
            raise DeviceError(f"Vulkan {what} failed: {name}")

    def _new(self, ctype: str, init: Any = None) -> Any:
        """A cffi object kept alive as long as the runner: a struct's fields, an array's items, a scalar."""
        obj = self.ffi.new(ctype) if init is None else self.ffi.new(ctype, init)
        self._keep.append(obj)
        return obj

    def _create_instance(self, api_version: tuple[int, int]) -> None:
        ffi, lib, vk = self.ffi, self.lib, self.vk
        loader = ffi.new("uint32_t*", vk.VK_API_VERSION_1_0)
        if hasattr(lib, "vkEnumerateInstanceVersion"):
            lib.vkEnumerateInstanceVersion(loader)
        want = vk.VK_MAKE_VERSION(api_version[0], api_version[1], 0)
        name = self._new("char[]", b"loom test")
        app = self._new("VkApplicationInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_APPLICATION_INFO, "pApplicationName": name,
            "pEngineName": name, "apiVersion": min(want, loader[0] & ~0xFFF)})
        info = self._new("VkInstanceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, "pApplicationInfo": app})
        handle = ffi.new("VkInstance*")
        result = lib.vkCreateInstance(info, ffi.NULL, handle)
        if result == vk.VK_ERROR_INCOMPATIBLE_DRIVER:
            raise VulkanUnavailable(f"no Vulkan driver found; {INSTALL_HINT}")
        if result != 0:
            raise VulkanUnavailable(f"cannot create a Vulkan instance ({_result_name(vk, result)}); {INSTALL_HINT}")
        self.instance = handle[0]

    def _pick_device(self) -> None:
        ffi, lib, vk = self.ffi, self.lib, self.vk
        count = ffi.new("uint32_t*")
        self._check(lib.vkEnumeratePhysicalDevices(self.instance, count, ffi.NULL), "device enumeration")
        devices = ffi.new("VkPhysicalDevice[]", count[0])
        if count[0]:
            self._check(lib.vkEnumeratePhysicalDevices(self.instance, count, devices), "device enumeration")
        candidates = []
        for i in range(count[0]):
            pd = devices[i]
            props = ffi.new("VkPhysicalDeviceProperties*")
            lib.vkGetPhysicalDeviceProperties(pd, props)
            api = props.apiVersion
            if vk.VK_VERSION_MAJOR(api) == 1 and vk.VK_VERSION_MINOR(api) < 1:
                continue  # compute with subgroups needs Vulkan 1.1
            family = self._compute_family(pd)
            if family is None:
                continue
            candidates.append((_TYPE_RANK.get(props.deviceType, 5), i, pd, family))
        if not candidates:
            what = "no Vulkan device" if not count[0] else "no Vulkan 1.1 device with a compute queue"
            raise VulkanUnavailable(f"{what} found; {INSTALL_HINT}")
        candidates.sort(key=lambda c: (c[0], c[1]))
        _, _, self.physical, (self.queue_family, self.timestamp_bits) = candidates[0]

    def _compute_family(self, pd: Any) -> tuple[int, int] | None:
        ffi, lib = self.ffi, self.lib
        n = ffi.new("uint32_t*")
        lib.vkGetPhysicalDeviceQueueFamilyProperties(pd, n, ffi.NULL)
        families = ffi.new("VkQueueFamilyProperties[]", n[0])
        lib.vkGetPhysicalDeviceQueueFamilyProperties(pd, n, families)
        best = None
        for i in range(n[0]):
            flags = families[i].queueFlags
            if flags & self.vk.VK_QUEUE_COMPUTE_BIT:
                # Prefer a family that also reports timestamps.
                key = (families[i].timestampValidBits == 0, i)
                if best is None or key < best[0]:
                    best = (key, (i, families[i].timestampValidBits))
        return best[1] if best else None

    def _device_extensions(self) -> set[str]:
        ffi, lib = self.ffi, self.lib
        n = ffi.new("uint32_t*")
        self._check(lib.vkEnumerateDeviceExtensionProperties(self.physical, ffi.NULL, n, ffi.NULL), "extensions")
        props = ffi.new("VkExtensionProperties[]", n[0])
        self._check(lib.vkEnumerateDeviceExtensionProperties(self.physical, ffi.NULL, n, props), "extensions")
        return {ffi.string(props[i].extensionName).decode() for i in range(n[0])}

    def _create_device(self) -> None:
        ffi, lib, vk = self.ffi, self.lib, self.vk
        props = ffi.new("VkPhysicalDeviceProperties*")
        lib.vkGetPhysicalDeviceProperties(self.physical, props)
        api = props.apiVersion
        api_version = (vk.VK_VERSION_MAJOR(api), vk.VK_VERSION_MINOR(api), vk.VK_VERSION_PATCH(api))
        offered_exts = self._device_extensions()

        # Query every feature struct the device knows, chained behind Features2.
        features2 = self._new("VkPhysicalDeviceFeatures2*",
                              {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2})
        chain: dict[str, Any] = {}
        tail = features2
        enabled_exts: list[str] = []
        for struct_name in FEATURES:
            if struct_name == "core":
                continue
            ext = _STRUCT_EXTENSION.get(struct_name)
            if ext is not None and ext not in offered_exts:
                continue
            if api_version[:2] < _STRUCT_API.get(struct_name, (1, 0)):
                continue
            s = self._new(struct_name + "*", {"sType": getattr(vk, _STRUCT_STYPE[struct_name])})
            tail.pNext = s
            tail = s
            chain[struct_name] = s
        lib.vkGetPhysicalDeviceFeatures2(self.physical, features2)

        # Keep the wanted fields the device offers; clear everything else.
        enabled: set[str] = set()
        for struct_name, fields in FEATURES.items():
            s = features2.features if struct_name == "core" else chain.get(struct_name)
            if s is None:
                continue
            struct_type = ffi.typeof(s) if struct_name == "core" else ffi.typeof(s).item
            for fname, _ in struct_type.fields:
                if fname in ("sType", "pNext"):
                    continue
                if fname in fields and getattr(s, fname):
                    enabled.add(fname)
                else:
                    setattr(s, fname, 0)
            ext = _STRUCT_EXTENSION.get(struct_name)
            if ext is not None and any(getattr(s, f) for f in fields):
                enabled_exts.append(ext)

        # Properties: subgroups, subgroup size control, limits.
        sub = self._new("VkPhysicalDeviceSubgroupProperties*",
                        {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES})
        props2 = self._new("VkPhysicalDeviceProperties2*",
                           {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, "pNext": sub})
        control = None
        if api_version[:2] >= (1, 3):
            control = self._new("VkPhysicalDeviceSubgroupSizeControlProperties*",
                                {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES})
            sub.pNext = control
        lib.vkGetPhysicalDeviceProperties2(self.physical, props2)
        limits = props2.properties.limits
        compute_stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
        size_control = (control is not None and "subgroupSizeControl" in enabled
                        and bool(control.requiredSubgroupSizeStages & compute_stage))
        self.info = DeviceInfo(
            name=ffi.string(props2.properties.deviceName).decode("utf-8", "replace"),
            type=_TYPE_NAMES.get(props2.properties.deviceType, "other"),
            api_version=api_version,
            subgroup_size=sub.subgroupSize,
            subgroup_operations=sub.supportedOperations if sub.supportedStages & compute_stage else 0,
            min_subgroup_size=control.minSubgroupSize if control is not None else sub.subgroupSize,
            max_subgroup_size=control.maxSubgroupSize if control is not None else sub.subgroupSize,
            required_subgroup_size_compute=size_control,
            max_compute_workgroup_subgroups=control.maxComputeWorkgroupSubgroups if control is not None else 0,
            max_push_constant_bytes=limits.maxPushConstantsSize,
            max_storage_buffers=min(limits.maxPerStageDescriptorStorageBuffers,
                                    limits.maxDescriptorSetStorageBuffers, limits.maxPerStageResources),
            max_workgroup_count=tuple(limits.maxComputeWorkGroupCount),
            max_workgroup_size=tuple(limits.maxComputeWorkGroupSize),
            max_workgroup_invocations=limits.maxComputeWorkGroupInvocations,
            max_workgroup_storage_bytes=limits.maxComputeSharedMemorySize,
            features=frozenset(enabled),
            extensions=frozenset(enabled_exts),
            timestamps=bool(self.timestamp_bits) and bool(limits.timestampComputeAndGraphics),
            timestamp_period_ns=float(limits.timestampPeriod),
        )

        priority = self._new("float*", 1.0)
        queue_info = self._new("VkDeviceQueueCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, "queueFamilyIndex": self.queue_family,
            "queueCount": 1, "pQueuePriorities": priority})
        ext_names = [self._new("char[]", e.encode()) for e in enabled_exts]
        ext_array = self._new("char*[]", ext_names) if ext_names else ffi.NULL
        info = self._new("VkDeviceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, "pNext": features2,
            "queueCreateInfoCount": 1, "pQueueCreateInfos": queue_info,
            "enabledExtensionCount": len(ext_names), "ppEnabledExtensionNames": ext_array})
        handle = ffi.new("VkDevice*")
        result = lib.vkCreateDevice(self.physical, info, ffi.NULL, handle)
        if result != 0:
            raise VulkanUnavailable(f"cannot create a Vulkan device on {self.info.describe()}: "
                                    f"{_result_name(vk, result)}")
        self.device = handle[0]
        queue = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(self.device, self.queue_family, 0, queue)
        self.queue = queue[0]
        memory = ffi.new("VkPhysicalDeviceMemoryProperties*")
        lib.vkGetPhysicalDeviceMemoryProperties(self.physical, memory)
        self._memory = memory

    def _create_objects(self) -> None:
        ffi, lib, vk = self.ffi, self.lib, self.vk
        pool_info = ffi.new("VkCommandPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
            "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, "queueFamilyIndex": self.queue_family})
        pool = ffi.new("VkCommandPool*")
        self._check(lib.vkCreateCommandPool(self.device, pool_info, ffi.NULL, pool), "command pool creation")
        self.command_pool = pool[0]
        alloc = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": self.command_pool,
            "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1})
        cmd = ffi.new("VkCommandBuffer*")
        self._check(lib.vkAllocateCommandBuffers(self.device, alloc, cmd), "command buffer allocation")
        self.command_buffer = cmd[0]
        fence_info = ffi.new("VkFenceCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO})
        fence = ffi.new("VkFence*")
        self._check(lib.vkCreateFence(self.device, fence_info, ffi.NULL, fence), "fence creation")
        self.fence = fence[0]
        self.descriptor_pool = None
        self._descriptor_capacity = 0
        self._reserve_descriptors(64)
        self.query_pool = None
        if self.info.timestamps:
            q_info = ffi.new("VkQueryPoolCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, "queryType": vk.VK_QUERY_TYPE_TIMESTAMP,
                "queryCount": 2})
            qpool = ffi.new("VkQueryPool*")
            self._check(lib.vkCreateQueryPool(self.device, q_info, ffi.NULL, qpool), "query pool creation")
            self.query_pool = qpool[0]

    def _reserve_descriptors(self, n: int) -> None:
        """One descriptor set per dispatch, the pool reset after each one; the
        pool grows (is recreated) when a kernel has more buffers than it holds."""
        if n <= self._descriptor_capacity:
            return
        ffi, lib, vk = self.ffi, self.lib, self.vk
        if self.descriptor_pool is not None:
            lib.vkDestroyDescriptorPool(self.device, self.descriptor_pool, ffi.NULL)
            self.descriptor_pool = None
        sizes = ffi.new("VkDescriptorPoolSize[]", [{"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                    "descriptorCount": n}])
        info = ffi.new("VkDescriptorPoolCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, "maxSets": 1, "poolSizeCount": 1,
            "pPoolSizes": sizes})
        pool = ffi.new("VkDescriptorPool*")
        self._check(lib.vkCreateDescriptorPool(self.device, info, ffi.NULL, pool), "descriptor pool creation")
        self.descriptor_pool = pool[0]
        self._descriptor_capacity = n

    # -------------------------------------------------------------- resources

    def shader(self, spirv: bytes) -> ShaderFacts:
        """Load a SPIR-V module (once per binary) after checking that this
        device can run it; returns its facts."""
        return self._module(spirv)[1]

    def _module(self, spirv: bytes) -> tuple[Any, ShaderFacts]:
        cached = self._modules.get(spirv)
        if cached is not None:
            return cached
        try:
            facts = shader_facts(spirv)
        except ValueError as e:
            raise DeviceError(f"cannot load the SPIR-V module: {e}") from None
        self.check_supported(facts)
        ffi, lib, vk = self.ffi, self.lib, self.vk
        code = ffi.new("uint32_t[]", len(spirv) // 4)
        ffi.memmove(code, spirv, len(spirv))
        info = ffi.new("VkShaderModuleCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, "codeSize": len(spirv), "pCode": code})
        handle = ffi.new("VkShaderModule*")
        self._check(lib.vkCreateShaderModule(self.device, info, ffi.NULL, handle), "shader module creation")
        self._modules[spirv] = (handle[0], facts)
        return self._modules[spirv]

    def missing(self, facts: ShaderFacts) -> list[str]:
        """What `facts` needs that this device lacks, in words; empty if none."""
        info = self.info
        out = []
        spirv_max = {(1, 1): (1, 3), (1, 2): (1, 5), (1, 3): (1, 6)}.get(info.api_version[:2], (1, 6))
        if facts.version > spirv_max:
            out.append(f"SPIR-V {facts.version[0]}.{facts.version[1]} (the device takes up to "
                       f"{spirv_max[0]}.{spirv_max[1]})")
        for cap in sorted(facts.capabilities):
            if cap in CAPABILITY_FEATURES:
                cap_name, feature = CAPABILITY_FEATURES[cap]
                if feature not in info.features:
                    out.append(f"{feature} (SPIR-V capability {cap_name})")
            elif cap in CAPABILITY_SUBGROUP_OPS:
                cap_name, bit = CAPABILITY_SUBGROUP_OPS[cap]
                if not info.subgroup_operations & bit:
                    out.append(f"subgroup operations of {cap_name} in compute shaders")
        for ext in sorted(facts.extensions):
            dev_ext = SPIRV_DEVICE_EXTENSIONS.get(ext)
            if dev_ext is not None and dev_ext not in info.extensions:
                out.append(f"{dev_ext} (SPIR-V extension {ext})")
        return out

    def check_supported(self, facts: ShaderFacts) -> None:
        lacking = self.missing(facts)
        if lacking:
            raise DeviceError(f"{self.info.describe()} cannot run this module: it lacks {'; '.join(lacking)}")

    def pipeline(self, spirv: bytes, entry: str, n_buffers: int, push_bytes: int,
                 required_subgroup_size: int | None = None) -> Pipeline:
        """The compute pipeline of `entry` (cached): set 0 with `n_buffers`
        storage buffers at bindings 0.., a push-constant range of `push_bytes`."""
        key = (spirv, entry, n_buffers, push_bytes, required_subgroup_size)
        cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        module, facts = self._module(spirv)
        if entry not in facts.entry_points:
            names = ", ".join(sorted(facts.entry_points)) or "none"
            raise DeviceError(f"the SPIR-V module has no GLCompute entry point `{entry}` (it has: {names})")
        info = self.info
        if n_buffers > info.max_storage_buffers:
            raise DeviceError(f"`{entry}` takes {n_buffers} storage buffers; {info.describe()} allows "
                              f"{info.max_storage_buffers} per kernel")
        if push_bytes > info.max_push_constant_bytes:
            raise DeviceError(f"`{entry}` takes {push_bytes} bytes of push constants; {info.describe()} "
                              f"allows {info.max_push_constant_bytes}")
        if required_subgroup_size is not None:
            if not info.required_subgroup_size_compute:
                raise DeviceError(f"`{entry}` requires subgroup size {required_subgroup_size}; "
                                  f"{info.describe()} cannot set a compute subgroup size")
            if not info.min_subgroup_size <= required_subgroup_size <= info.max_subgroup_size:
                raise DeviceError(f"`{entry}` requires subgroup size {required_subgroup_size}; {info.describe()} "
                                  f"offers {info.min_subgroup_size} to {info.max_subgroup_size}")
        size = facts.entry_points[entry]
        if size is not None and (any(s > m for s, m in zip(size, info.max_workgroup_size))
                                 or size[0] * size[1] * size[2] > info.max_workgroup_invocations):
            raise DeviceError(f"`{entry}` has workgroups of {size[0]}x{size[1]}x{size[2]}; {info.describe()} allows "
                              f"{'x'.join(map(str, info.max_workgroup_size))} and "
                              f"{info.max_workgroup_invocations} invocations")
        ffi, lib, vk = self.ffi, self.lib, self.vk
        bindings = ffi.new("VkDescriptorSetLayoutBinding[]", [
            {"binding": b, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
             "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT} for b in range(n_buffers)]) if n_buffers else ffi.NULL
        sl_info = ffi.new("VkDescriptorSetLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, "bindingCount": n_buffers,
            "pBindings": bindings})
        set_layout = ffi.new("VkDescriptorSetLayout*")
        self._check(lib.vkCreateDescriptorSetLayout(self.device, sl_info, ffi.NULL, set_layout),
                    "descriptor set layout creation")
        ranges = ffi.new("VkPushConstantRange[]", [
            {"stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0, "size": push_bytes}])
        pl_info = ffi.new("VkPipelineLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, "setLayoutCount": 1,
            "pSetLayouts": set_layout, "pushConstantRangeCount": 1 if push_bytes else 0,
            "pPushConstantRanges": ranges if push_bytes else ffi.NULL})
        layout = ffi.new("VkPipelineLayout*")
        result = lib.vkCreatePipelineLayout(self.device, pl_info, ffi.NULL, layout)
        if result != 0:
            lib.vkDestroyDescriptorSetLayout(self.device, set_layout[0], ffi.NULL)
            self._check(result, "pipeline layout creation")
        name = ffi.new("char[]", entry.encode())
        subgroup = ffi.NULL
        if required_subgroup_size is not None:
            subgroup = ffi.new("VkPipelineShaderStageRequiredSubgroupSizeCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
                "requiredSubgroupSize": required_subgroup_size})
        cp_info = ffi.new("VkComputePipelineCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, "pNext": subgroup,
                      "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": module, "pName": name},
            "layout": layout[0]})
        handle = ffi.new("VkPipeline*")
        result = lib.vkCreateComputePipelines(self.device, ffi.NULL, 1, cp_info, ffi.NULL, handle)
        if result != 0:
            lib.vkDestroyPipelineLayout(self.device, layout[0], ffi.NULL)
            lib.vkDestroyDescriptorSetLayout(self.device, set_layout[0], ffi.NULL)
            self._check(result, f"compute pipeline creation for `{entry}`")
        pipeline = Pipeline(entry, handle[0], layout[0], set_layout[0], n_buffers, push_bytes, size,
                            required_subgroup_size)
        self._pipelines[key] = pipeline
        return pipeline

    def buffer(self, nbytes: int) -> Buffer:
        """A storage buffer of at least `nbytes` (rounded up to 16, never empty)."""
        ffi, lib, vk = self.ffi, self.lib, self.vk
        size = max(16, -(-nbytes // 16) * 16)
        b_info = ffi.new("VkBufferCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": size,
            "usage": vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE})
        handle = ffi.new("VkBuffer*")
        self._check(lib.vkCreateBuffer(self.device, b_info, ffi.NULL, handle), "buffer creation")
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(self.device, handle[0], req)
        mem_type = self._memory_type(req.memoryTypeBits)
        m_info = ffi.new("VkMemoryAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, "allocationSize": req.size,
            "memoryTypeIndex": mem_type})
        memory = ffi.new("VkDeviceMemory*")
        result = lib.vkAllocateMemory(self.device, m_info, ffi.NULL, memory)
        if result != 0:
            lib.vkDestroyBuffer(self.device, handle[0], ffi.NULL)
            self._check(result, f"allocating {size} bytes")
        self._check(lib.vkBindBufferMemory(self.device, handle[0], memory[0], 0), "buffer binding")
        ptr = ffi.new("void**")
        self._check(lib.vkMapMemory(self.device, memory[0], 0, size, 0, ptr), "memory mapping")
        buf = Buffer(handle[0], memory[0], size, ffi.buffer(ptr[0], size))
        self._buffers.append(buf)
        return buf

    def release(self, buf: Buffer) -> None:
        if buf in self._buffers:
            self._buffers.remove(buf)
            self._destroy_buffer(buf)

    def _destroy_buffer(self, buf: Buffer) -> None:
        self.lib.vkUnmapMemory(self.device, buf.memory)
        self.lib.vkDestroyBuffer(self.device, buf.handle, self.ffi.NULL)
        self.lib.vkFreeMemory(self.device, buf.memory, self.ffi.NULL)

    def _memory_type(self, bits: int) -> int:
        vk = self.vk
        want = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        best = None
        for i in range(self._memory.memoryTypeCount):
            flags = self._memory.memoryTypes[i].propertyFlags
            if bits & (1 << i) and flags & want == want:
                # Prefer device-local host-visible memory (resizable BAR), then cached.
                key = (not flags & vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                       not flags & vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT, i)
                if best is None or key < best:
                    best = key
        if best is None:
            raise DeviceError(f"{self.info.describe()} has no host-visible coherent memory for storage buffers")
        return best[2]

    # -------------------------------------------------------------- running

    def dispatch(self, pipeline: Pipeline, buffers: Sequence[Buffer], push: bytes,
                 groups: tuple[int, int, int], repeat: int = 1, timed: bool = False) -> list[float]:
        """Run `pipeline` over `groups` workgroups `repeat` times, each one
        submitted and waited for; returns the device time of each run in
        nanoseconds when `timed` (timestamps, else wall clock), else []."""
        if len(buffers) != pipeline.n_buffers:
            raise ValueError(f"`{pipeline.entry}` takes {pipeline.n_buffers} buffers, got {len(buffers)}")
        if len(push) != pipeline.push_bytes:
            raise ValueError(f"`{pipeline.entry}` takes {pipeline.push_bytes} push-constant bytes, got {len(push)}")
        info = self.info
        for d, (n, limit) in enumerate(zip(groups, info.max_workgroup_count)):
            if n > limit:
                raise DeviceError(f"workgroup count {'xyz'[d]} = {n} exceeds the device's {limit}")
        ffi, lib, vk = self.ffi, self.lib, self.vk
        descriptor = ffi.NULL
        if pipeline.n_buffers:
            self._reserve_descriptors(pipeline.n_buffers)
            layouts = ffi.new("VkDescriptorSetLayout[]", [pipeline.set_layout])
            ds_info = ffi.new("VkDescriptorSetAllocateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": self.descriptor_pool,
                "descriptorSetCount": 1, "pSetLayouts": layouts})
            ds = ffi.new("VkDescriptorSet*")
            self._check(lib.vkAllocateDescriptorSets(self.device, ds_info, ds), "descriptor set allocation")
            descriptor = ds
            infos = ffi.new("VkDescriptorBufferInfo[]", [
                {"buffer": b.handle, "offset": 0, "range": WHOLE_SIZE} for b in buffers])
            writes = ffi.new("VkWriteDescriptorSet[]", [
                {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": ds[0], "dstBinding": i,
                 "descriptorCount": 1, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                 "pBufferInfo": infos + i} for i in range(len(buffers))])
            lib.vkUpdateDescriptorSets(self.device, len(buffers), writes, 0, ffi.NULL)
        try:
            self._record(pipeline, descriptor, push, groups, timed)
            times = []
            for _ in range(repeat):
                start = time.perf_counter_ns()
                self._submit_and_wait()
                wall = time.perf_counter_ns() - start
                if timed:
                    times.append(self._timestamp_ns() if self.query_pool is not None else float(wall))
            return times
        finally:
            if pipeline.n_buffers:
                lib.vkResetDescriptorPool(self.device, self.descriptor_pool, 0)

    def _record(self, pipeline: Pipeline, descriptor: Any, push: bytes, groups: tuple[int, int, int],
                timed: bool) -> None:
        ffi, lib, vk = self.ffi, self.lib, self.vk
        cmd = self.command_buffer
        self._check(lib.vkResetCommandBuffer(cmd, 0), "command buffer reset")
        begin = ffi.new("VkCommandBufferBeginInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO})
        self._check(lib.vkBeginCommandBuffer(cmd, begin), "command recording")
        timed = timed and self.query_pool is not None
        if timed:
            lib.vkCmdResetQueryPool(cmd, self.query_pool, 0, 2)
            lib.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, self.query_pool, 0)
        lib.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle)
        if descriptor != ffi.NULL:
            lib.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout, 0, 1, descriptor,
                                        0, ffi.NULL)
        if pipeline.push_bytes:
            data = ffi.new("char[]", bytes(push))
            lib.vkCmdPushConstants(cmd, pipeline.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(push), data)
        if all(groups):
            lib.vkCmdDispatch(cmd, *groups)
        if timed:
            lib.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self.query_pool, 1)
        # Shader writes become visible to the host once the fence signals.
        barrier = ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT})
        lib.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT, 0,
                                 1, barrier, 0, ffi.NULL, 0, ffi.NULL)
        self._check(lib.vkEndCommandBuffer(cmd), "command recording")

    def _submit_and_wait(self) -> None:
        ffi, lib, vk = self.ffi, self.lib, self.vk
        cmds = ffi.new("VkCommandBuffer[]", [self.command_buffer])
        submit = ffi.new("VkSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "commandBufferCount": 1,
                                           "pCommandBuffers": cmds})
        fences = ffi.new("VkFence[]", [self.fence])
        self._check(lib.vkResetFences(self.device, 1, fences), "fence reset")
        self._check(lib.vkQueueSubmit(self.queue, 1, submit, self.fence), "queue submission")
        result = lib.vkWaitForFences(self.device, 1, fences, 1, FENCE_TIMEOUT_NS)
        if result == vk.VK_TIMEOUT:
            raise DeviceError(f"a dispatch did not finish within {FENCE_TIMEOUT_NS // 1_000_000_000} s")
        self._check(result, "waiting for the device")

    def _timestamp_ns(self) -> float:
        ffi, lib, vk = self.ffi, self.lib, self.vk
        data = ffi.new("uint64_t[2]")
        self._check(lib.vkGetQueryPoolResults(self.device, self.query_pool, 0, 2, 16, data, 8,
                                              vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT),
                    "timestamp read-back")
        mask = (1 << self.timestamp_bits) - 1 if self.timestamp_bits < 64 else (1 << 64) - 1
        ticks = (data[1] - data[0]) & mask
        return ticks * self.info.timestamp_period_ns

    # -------------------------------------------------------------- teardown

    def close(self) -> None:
        """Destroy everything in reverse order of creation; safe to call twice."""
        ffi, lib = self.ffi, self.lib
        if self.device is not None:
            lib.vkDeviceWaitIdle(self.device)
            for buf in self._buffers:
                self._destroy_buffer(buf)
            self._buffers.clear()
            for p in self._pipelines.values():
                lib.vkDestroyPipeline(self.device, p.handle, ffi.NULL)
                lib.vkDestroyPipelineLayout(self.device, p.layout, ffi.NULL)
                lib.vkDestroyDescriptorSetLayout(self.device, p.set_layout, ffi.NULL)
            self._pipelines.clear()
            for module, _ in self._modules.values():
                lib.vkDestroyShaderModule(self.device, module, ffi.NULL)
            self._modules.clear()
            for name, destroy in (("query_pool", lib.vkDestroyQueryPool),
                                  ("descriptor_pool", lib.vkDestroyDescriptorPool),
                                  ("fence", lib.vkDestroyFence), ("command_pool", lib.vkDestroyCommandPool)):
                handle = getattr(self, name, None)
                if handle is not None:
                    destroy(self.device, handle, ffi.NULL)
                    setattr(self, name, None)
            lib.vkDestroyDevice(self.device, ffi.NULL)
            self.device = None
        if self.instance is not None:
            lib.vkDestroyInstance(self.instance, ffi.NULL)
            self.instance = None
        self._keep.clear()

    def __enter__(self) -> VulkanRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unavailable_reason() -> str | None:
    """Why no Vulkan device can be opened here (None: one can)."""
    try:
        VulkanRunner().close()
    except VulkanUnavailable as e:
        return str(e)
    return None


def _load_vulkan() -> Any:
    try:
        import vulkan
    except OSError:
        raise VulkanUnavailable(f"the Vulkan loader (libvulkan.so.1) is not installed; {INSTALL_HINT}") from None
    except ImportError:
        raise VulkanUnavailable("the `vulkan` Python package is not installed (pip install vulkan)") from None
    return vulkan


def _result_name(vk: Any, result: int) -> str:
    for name in dir(vk):
        if (name.startswith("VK_ERROR_") or name in ("VK_TIMEOUT", "VK_INCOMPLETE", "VK_NOT_READY")) \
                and getattr(vk, name) == result:
            return name
    return f"VkResult {result}"
