"""The cpu device's process side: load an object with LLVM's ORC JIT linker and
run a launch natively. This module imports llvmlite and runs in a worker
process of its own (`loomcli.runtime.isolated`), so a kernel that crashes
(a stack overflow into a guard page, an access far out of bounds) ends
that process, not `loom test`; `loomcli.check.cpu` is the parent side.

Request (`launch`): header `entry` (the kernel's entry point symbol),
`exports` (every entry point of the object),
`kernarg` (its argument block's size), `pointers` ([byte offset, buffer
index] pairs patched into the block), `buffers` (sizes), `geometry` (8
u32: workgroup counts, workgroup size, subgroup size, fibers), `bench`
(null, or [min runs, max runs, seconds]); payload: the object, the
argument block, then each buffer's bytes. Reply: u32 status (0 done, 1
deadlocked), u32 n, n f64 run times in nanoseconds, then every buffer.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import struct
import time
from functools import cache
from typing import Any

import llvmlite.binding as llvm

from loomcli.emit.cpu.runtime import MAX_INVOCATIONS

STACK_BYTES = 256 * 1024    # per fiber: the profile's 64 KiB of private memory and the frames around it
GUARD_BYTES = 4096          # the lowest page of each stack faults instead of running into the next
KEEP_OBJECTS = 16           # loaded objects kept, most recent first

_RUN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                        ctypes.c_int64)


@cache
def _machine() -> Any:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="x86-64", reloc="pic")


def warm() -> None:
    _machine()


class Loaded:
    """One object linked into this process by ORC (LLVM's JIT linker); the
    resource tracker keeps its code alive and unloads it when dropped."""

    def __init__(self, obj: bytes, name: str, entries: tuple[str, ...]) -> None:
        builder = llvm.JITLibraryBuilder().add_object_img(obj).add_current_process()
        for symbol in ("loom_cpu_run", *entries):
            builder.export_symbol(symbol)
        self.tracker = builder.link(_jit(), name)
        self.run = _RUN(self.tracker["loom_cpu_run"])

    def address(self, symbol: str) -> int:
        try:
            return int(self.tracker[symbol])
        except KeyError:
            raise ValueError(f"the object has no entry point {symbol}") from None


@cache
def _jit() -> Any:
    return llvm.create_lljit_compiler(_machine())


_loaded: dict[bytes, Loaded] = {}
_names: list[bytes] = []   # one library name per load: ORC names must be unique


def _load(obj: bytes, entries: tuple[str, ...]) -> Loaded:
    key = hashlib.sha256(obj).digest()
    hit = _loaded.pop(key, None)
    if hit is None:
        hit = Loaded(obj, f"loom{len(_names)}", entries)
        _names.append(key)
    _loaded[key] = hit
    while len(_loaded) > KEEP_OBJECTS:
        _loaded.pop(next(iter(_loaded)))
    return hit


@cache
def _stacks() -> tuple[mmap.mmap, int]:
    """Fiber stacks for a whole workgroup, reserved once (pages are only
    committed as fibers touch them), each with a guard page at its bottom."""
    size = STACK_BYTES * MAX_INVOCATIONS
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for k in range(MAX_INVOCATIONS):
        if libc.mprotect(base + k * STACK_BYTES, GUARD_BYTES, 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect of a fiber stack's guard page failed")
    return region, base


def launch(header: dict[str, Any], payload: bytes) -> bytes:
    sizes = [int(n) for n in header["buffers"]]
    kernarg_bytes = int(header["kernarg"])
    obj_bytes = len(payload) - kernarg_bytes - sum(sizes)
    view = memoryview(payload)
    loaded = _load(bytes(view[:obj_bytes]), tuple(header["exports"]))
    entry = loaded.address(header["entry"])
    at = obj_bytes
    kernarg = ctypes.create_string_buffer(bytes(view[at:at + kernarg_bytes]), max(kernarg_bytes, 8))
    at += kernarg_bytes
    buffers = []
    for n in sizes:
        buffers.append(ctypes.create_string_buffer(bytes(view[at:at + n]), max(n, 1)))
        at += n
    for offset, index in header["pointers"]:
        struct.pack_into("<Q", kernarg, int(offset), ctypes.addressof(buffers[int(index)]))
    geometry = (ctypes.c_uint32 * 8)(*[int(v) for v in header["geometry"]])
    stacks = _stacks()[1] if geometry[7] else 0

    def run() -> int:
        return int(loaded.run(entry, ctypes.addressof(kernarg), ctypes.addressof(geometry), stacks, STACK_BYTES))

    times: list[float] = []
    bench = header.get("bench")
    if bench is None:
        status = run()
    else:
        least, most, budget = int(bench[0]), int(bench[1]), float(bench[2])
        start = time.perf_counter()
        status = 0
        while len(times) < most and status == 0:
            t0 = time.perf_counter_ns()
            status = run()
            times.append(float(time.perf_counter_ns() - t0))
            if len(times) >= least and time.perf_counter() - start > budget:
                break
    out = [struct.pack("<II", status, len(times)), struct.pack(f"<{len(times)}d", *times)]
    out += [b.raw[:n] for b, n in zip(buffers, sizes)]
    return b"".join(out)
