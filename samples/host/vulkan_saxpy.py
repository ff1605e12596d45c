"""Run a `loom`-built saxpy through Vulkan (the `vulkan` package), from its manifest alone.

    python3 samples/host/vulkan_saxpy.py DIR/saxpy.manifest.json [N]

DIR holds what `loom compile samples/saxpy.loom --target spirv:vulkan1.3 -o
saxpy.spv -o saxpy.launch.loombc --manifest` (or a `loom build` package)
writes. The manifest says where each parameter goes: scalars into the push
constant block at `byte_offset`, buffers at `set`/`binding`; the launch
config gives the workgroup count for the workload. Prints `ok n=N` or
exits 1 on a wrong element; exits 77 with a reason where no Vulkan device
is available.
"""

from __future__ import annotations

import json
import os
import struct
import sys

import loomcli as loom

SCALAR = {"index": "<Q", "offset": "<Q", "i32": "<i", "u32": "<I", "f32": "<f", "i64": "<q", "f64": "<d"}


def push_constants(kernel: dict, values: dict[str, object]) -> bytes:
    """The push constant block: each scalar parameter at its manifest offset."""
    block = bytearray(kernel["push_constant_bytes"])
    for p in kernel["parameters"]:
        if p["kind"] == "scalar":
            struct.pack_into(SCALAR[p["type"]], block, p["byte_offset"], values[p["name"]])
    return bytes(block)


def main(manifest_path: str, n: int) -> int:
    try:
        import vulkan as vk
    except (ImportError, OSError) as e:
        print(f"skip: no Vulkan loader ({e})")
        return 77
    folder = os.path.dirname(os.path.abspath(manifest_path))
    with open(manifest_path) as f:
        manifest = json.load(f)
    kernel = manifest["kernels"][0]
    with open(os.path.join(folder, manifest["artifact"]["name"]), "rb") as f:
        spv = f.read()
    with open(os.path.join(folder, kernel["launch_config"]), "rb") as f:
        program = loom.LaunchProgram(f.read())
    launch = program.invoke(program.lookup(kernel["export"]), [n])

    alpha = 2.0
    x = [float(i) for i in range(n)]
    y = [1.0] * n
    buffers = {"x": struct.pack(f"<{n}f", *x), "y": struct.pack(f"<{n}f", *y)}

    try:
        instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=vk.VkApplicationInfo(
            pApplicationName="vulkan_saxpy", apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))), None)
    except vk.VkError as e:
        print(f"skip: no Vulkan instance ({type(e).__name__})")
        return 77
    gpus = vk.vkEnumeratePhysicalDevices(instance)
    if not gpus:
        print("skip: no Vulkan device")
        return 77
    gpu = gpus[0]
    family = next(i for i, q in enumerate(vk.vkGetPhysicalDeviceQueueFamilyProperties(gpu))
                  if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
    # Modules with 64-bit arithmetic declare Int64: enable it where offered.
    int64 = vk.VK_TRUE if vk.vkGetPhysicalDeviceFeatures(gpu).shaderInt64 else vk.VK_FALSE
    device = vk.vkCreateDevice(gpu, vk.VkDeviceCreateInfo(pQueueCreateInfos=[vk.VkDeviceQueueCreateInfo(
        queueFamilyIndex=family, queueCount=1, pQueuePriorities=[1.0])],
        pEnabledFeatures=vk.VkPhysicalDeviceFeatures(shaderInt64=int64)), None)
    queue = vk.vkGetDeviceQueue(device, family, 0)
    memory_types = vk.vkGetPhysicalDeviceMemoryProperties(gpu)
    host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT

    made = {}   # parameter name -> (buffer, memory, size)
    for name, data in buffers.items():
        info = vk.VkBufferCreateInfo(size=len(data), usage=vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                     sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
        buf = vk.vkCreateBuffer(device, info, None)
        need = vk.vkGetBufferMemoryRequirements(device, buf)
        kind = next(i for i in range(memory_types.memoryTypeCount)
                    if need.memoryTypeBits & (1 << i) and memory_types.memoryTypes[i].propertyFlags & host == host)
        mem = vk.vkAllocateMemory(device, vk.VkMemoryAllocateInfo(allocationSize=need.size, memoryTypeIndex=kind), None)
        vk.vkBindBufferMemory(device, buf, mem, 0)
        view = vk.vkMapMemory(device, mem, 0, len(data), 0)
        view[:len(data)] = data
        vk.vkUnmapMemory(device, mem)
        made[name] = (buf, mem, len(data))

    resources = [p for p in kernel["parameters"] if p["kind"] == "buffer"]
    sets = sorted({p["set"] for p in resources})
    layouts = [vk.vkCreateDescriptorSetLayout(device, vk.VkDescriptorSetLayoutCreateInfo(pBindings=[
        vk.VkDescriptorSetLayoutBinding(binding=p["binding"], descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                        descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
        for p in resources if p["set"] == s]), None) for s in sets]
    block = push_constants(kernel, {"n": n, "alpha": alpha})
    ranges = [vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=len(block))] \
        if block else []
    pipeline_layout = vk.vkCreatePipelineLayout(device, vk.VkPipelineLayoutCreateInfo(
        pSetLayouts=layouts, pPushConstantRanges=ranges), None)
    shader = vk.vkCreateShaderModule(device, vk.VkShaderModuleCreateInfo(codeSize=len(spv), pCode=spv), None)
    # Held in a name: the struct owns the entry name's C string until the call returns.
    stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=shader,
                                               pName=kernel["symbol"])
    pipeline = vk.vkCreateComputePipelines(device, None, 1, [vk.VkComputePipelineCreateInfo(
        stage=stage, layout=pipeline_layout)], None)[0]
    pool = vk.vkCreateDescriptorPool(device, vk.VkDescriptorPoolCreateInfo(maxSets=len(sets), pPoolSizes=[
        vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=len(resources))]), None)
    descriptor_sets = vk.vkAllocateDescriptorSets(device, vk.VkDescriptorSetAllocateInfo(
        descriptorPool=pool, pSetLayouts=layouts))
    writes = [vk.VkWriteDescriptorSet(dstSet=descriptor_sets[sets.index(p["set"])], dstBinding=p["binding"],
                                      descriptorCount=1, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      pBufferInfo=[vk.VkDescriptorBufferInfo(buffer=made[p["name"]][0], offset=0,
                                                                             range=made[p["name"]][2])])
              for p in resources]
    vk.vkUpdateDescriptorSets(device, len(writes), writes, 0, None)

    command_pool = vk.vkCreateCommandPool(device, vk.VkCommandPoolCreateInfo(queueFamilyIndex=family), None)
    cmd = vk.vkAllocateCommandBuffers(device, vk.VkCommandBufferAllocateInfo(
        commandPool=command_pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
    vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
    vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
    vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_layout, 0, len(descriptor_sets),
                               descriptor_sets, 0, None)
    if block:
        vk.vkCmdPushConstants(cmd, pipeline_layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(block),
                              vk.ffi.from_buffer(block))
    vk.vkCmdDispatch(cmd, *launch.workgroups)
    vk.vkEndCommandBuffer(cmd)
    fence = vk.vkCreateFence(device, vk.VkFenceCreateInfo(), None)
    vk.vkQueueSubmit(queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[cmd])], fence)
    vk.vkWaitForFences(device, 1, [fence], vk.VK_TRUE, 10_000_000_000)

    buf, mem, size = made["y"]
    view = vk.vkMapMemory(device, mem, 0, size, 0)
    got = struct.unpack(f"<{n}f", bytes(view[:size]))
    vk.vkUnmapMemory(device, mem)

    vk.vkDestroyFence(device, fence, None)
    vk.vkDestroyCommandPool(device, command_pool, None)
    vk.vkDestroyDescriptorPool(device, pool, None)
    vk.vkDestroyPipeline(device, pipeline, None)
    vk.vkDestroyShaderModule(device, shader, None)
    vk.vkDestroyPipelineLayout(device, pipeline_layout, None)
    for layout in layouts:
        vk.vkDestroyDescriptorSetLayout(device, layout, None)
    for buf, mem, _ in made.values():
        vk.vkDestroyBuffer(device, buf, None)
        vk.vkFreeMemory(device, mem, None)
    vk.vkDestroyDevice(device, None)
    vk.vkDestroyInstance(instance, None)

    wrong = [i for i in range(n) if got[i] != alpha * x[i] + y[i]]
    if wrong:
        i = wrong[0]
        print(f"wrong: y[{i}] = {got[i]}, want {alpha * x[i] + y[i]} ({len(wrong)} wrong)")
        return 1
    print(f"ok n={n} workgroups={'x'.join(map(str, launch.workgroups))}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 1009))
