"""What a cubin says about its kernels: the `.nv.info` attributes ptxas wrote.

`.nv.info` is a list of (format u8, attribute u8, value) records; the
`EIFMT_SVAL` format carries a u16 size and that many bytes. Two of them name
a kernel by symbol index: `EIATTR_REGCOUNT` (registers per thread) and
`EIATTR_FRAME_SIZE` (the stack frame). The manifest takes its resources from
`ptxas -v`, which also reports spills; this reader is the independent check.
"""

from __future__ import annotations

import struct

EIFMT_SVAL = 0x04
EIATTR_REGCOUNT = 0x2F
EIATTR_FRAME_SIZE = 0x11


def kernel_attributes(cubin: bytes) -> dict[str, dict[str, int]]:
    """{kernel: {"registers": n, "stack_frame_bytes": m}} from the cubin's `.nv.info`."""
    from loomcli.emit.elf import ElfError, read_elf

    elf = read_elf(cubin)
    info = elf.section(".nv.info")
    if info is None:
        raise ElfError("the cubin has no .nv.info section")
    symbols = elf.symbols()
    out: dict[str, dict[str, int]] = {}
    data, i = info.data, 0
    while i + 4 <= len(data):
        fmt, attr = data[i], data[i + 1]
        if fmt != EIFMT_SVAL:
            i += 4
            continue
        (size,) = struct.unpack_from("<H", data, i + 2)
        payload = data[i + 4:i + 4 + size]
        i += 4 + size
        if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and size == 8:
            sym, value = struct.unpack("<II", payload)
            key = "registers" if attr == EIATTR_REGCOUNT else "stack_frame_bytes"
            out.setdefault(symbols[sym].name, {})[key] = value
    return out
