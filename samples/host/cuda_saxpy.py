"""Run a `loom`-built saxpy through the CUDA driver API (the `cuda-python` package), from its manifest alone.

    pip install cuda-python
    python3 samples/host/cuda_saxpy.py DIR/saxpy.manifest.json [N]

DIR holds `saxpy.ptx` (or `.cubin`), `saxpy.launch.loombc` and the
manifest, as `loom compile samples/saxpy.loom --target nvptx:sm_90`
writes them. The kernel's parameters are packed into one buffer at the
manifest's `byte_offset`s (`param_space_size` bytes) and passed with
CU_LAUNCH_PARAM_BUFFER_POINTER; the block size is the manifest's
`workgroup_size`, the grid the launch config's workgroups. Prints `ok n=N`,
exits 1 on a wrong element, 77 with a reason where there is no CUDA driver
or device.

Not run by the project's tests on a GPU (none was available where it was
written): the packing is tested, the device path is not.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys

import loomcli as loom

SCALAR = {"index": "<Q", "offset": "<Q", "i32": "<i", "u32": "<I", "f32": "<f", "i64": "<q", "f64": "<d"}


def kernel_parameters(kernel: dict, values: dict[str, object]) -> bytes:
    """The parameter buffer: scalars by type, buffers as 64-bit device addresses, at their offsets."""
    block = bytearray(kernel["param_space_size"])
    for p in kernel["parameters"]:
        fmt = SCALAR[p["type"]] if p["kind"] == "scalar" else "<Q"
        if struct.calcsize(fmt) != p["byte_length"]:
            raise ValueError(f"parameter {p['name']}: {p['byte_length']} bytes, {fmt} packs {struct.calcsize(fmt)}")
        struct.pack_into(fmt, block, p["byte_offset"], values[p["name"]])
    return bytes(block)


def _driver():
    """The driver bindings, or a reason they cannot be used here."""
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python
        except ImportError:
            return None, "the cuda-python package is not installed (pip install cuda-python)"
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # no libcuda.so: the bindings load it lazily
        return None, f"no CUDA driver ({e})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return None, f"cuInit failed ({err})"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return None, "no CUDA device"
    return driver, ""


def _check(driver, result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise SystemExit(f"cuda: {err}")
    return rest[0] if len(rest) == 1 else rest


def main(manifest_path: str, n: int) -> int:
    driver, why = _driver()
    if driver is None:
        print(f"skip: {why}")
        return 77
    folder = os.path.dirname(os.path.abspath(manifest_path))
    with open(manifest_path) as f:
        manifest = json.load(f)
    kernel = manifest["kernels"][0]
    with open(os.path.join(folder, manifest["artifact"]["name"]), "rb") as f:
        image = f.read()
    with open(os.path.join(folder, kernel["launch_config"]), "rb") as f:
        program = loom.LaunchProgram(f.read())
    launch = program.invoke(program.lookup(kernel["export"]), [n])

    alpha = 2.0
    x = struct.pack(f"<{n}f", *[float(i) for i in range(n)])
    y = struct.pack(f"<{n}f", *([1.0] * n))
    device = _check(driver, driver.cuDeviceGet(0))
    context = _check(driver, driver.cuCtxCreate(0, device))
    module = _check(driver, driver.cuModuleLoadData(image + (b"\0" if image[:1] == b"." else b"")))  # PTX is a C string
    function = _check(driver, driver.cuModuleGetFunction(module, kernel["export"].encode()))
    dx = _check(driver, driver.cuMemAlloc(len(x)))
    dy = _check(driver, driver.cuMemAlloc(len(y)))
    _check(driver, driver.cuMemcpyHtoD(dx, x, len(x)))
    _check(driver, driver.cuMemcpyHtoD(dy, y, len(y)))
    params = kernel_parameters(kernel, {"n": n, "alpha": alpha, "x": int(dx), "y": int(dy)})
    buffer = ctypes.create_string_buffer(params, len(params))
    size = ctypes.c_size_t(len(params))
    # CU_LAUNCH_PARAM_BUFFER_POINTER (1), CU_LAUNCH_PARAM_BUFFER_SIZE (2), CU_LAUNCH_PARAM_END (0)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
    gx, gy, gz = launch.workgroups
    bx, by, bz = launch.workgroup_size
    _check(driver, driver.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, launch.workgroup_storage_bytes, 0, 0,
                                         ctypes.addressof(extra)))
    _check(driver, driver.cuCtxSynchronize())
    out = bytearray(len(y))
    _check(driver, driver.cuMemcpyDtoH(out, dy, len(y)))
    for d in (dx, dy):
        _check(driver, driver.cuMemFree(d))
    _check(driver, driver.cuModuleUnload(module))
    _check(driver, driver.cuCtxDestroy(context))

    got = struct.unpack(f"<{n}f", bytes(out))
    wrong = [i for i in range(n) if got[i] != alpha * i + 1.0]
    if wrong:
        print(f"wrong: y[{wrong[0]}] = {got[wrong[0]]}, want {alpha * wrong[0] + 1.0} ({len(wrong)} wrong)")
        return 1
    print(f"ok n={n} workgroups={'x'.join(map(str, launch.workgroups))}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 1009))
