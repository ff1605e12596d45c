"""A small MessagePack decoder for the NT_AMDGPU_METADATA note (code object v3+).

Decodes nil, booleans, integers, floats, strings, binaries, arrays and maps
(extension types are returned as `(type, bytes)`). Every length is checked
against the input; malformed input raises `ValueError`.
"""

from __future__ import annotations

import struct
from typing import Any


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise ValueError(f"msgpack: truncated at byte {self.pos}")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]


_FIXED = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
          0xCA: ">f", 0xCB: ">d"}
_LENGTHS = {1: ">B", 2: ">H", 4: ">I"}


def _value(r: _Reader, depth: int) -> Any:
    if depth > 64:
        raise ValueError("msgpack: nesting too deep")
    b = r.take(1)[0]
    if b <= 0x7F:
        return b
    if b >= 0xE0:
        return b - 0x100
    if 0x80 <= b <= 0x8F:
        return _map(r, b & 0x0F, depth)
    if 0x90 <= b <= 0x9F:
        return [_value(r, depth + 1) for _ in range(b & 0x0F)]
    if 0xA0 <= b <= 0xBF:
        return r.take(b & 0x1F).decode("utf-8", "replace")
    if b == 0xC0:
        return None
    if b in (0xC2, 0xC3):
        return b == 0xC3
    if b in _FIXED:
        return r.unpack(_FIXED[b])
    if b in (0xD9, 0xDA, 0xDB):       # str 8/16/32
        return r.take(r.unpack(_LENGTHS[1 << (b - 0xD9)])).decode("utf-8", "replace")
    if b in (0xC4, 0xC5, 0xC6):       # bin 8/16/32
        return r.take(r.unpack(_LENGTHS[1 << (b - 0xC4)]))
    if b in (0xDC, 0xDD):             # array 16/32
        n = r.unpack(">H" if b == 0xDC else ">I")
        return [_value(r, depth + 1) for _ in range(n)]
    if b in (0xDE, 0xDF):             # map 16/32
        return _map(r, r.unpack(">H" if b == 0xDE else ">I"), depth)
    if b in (0xD4, 0xD5, 0xD6, 0xD7, 0xD8):  # fixext 1/2/4/8/16
        kind = r.unpack(">b")
        return (kind, r.take(1 << (b - 0xD4)))
    if b in (0xC7, 0xC8, 0xC9):       # ext 8/16/32
        n = r.unpack(_LENGTHS[1 << (b - 0xC7)])
        kind = r.unpack(">b")
        return (kind, r.take(n))
    raise ValueError(f"msgpack: unknown type byte {b:#04x} at {r.pos - 1}")


def _map(r: _Reader, n: int, depth: int) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for _ in range(n):
        key = _value(r, depth + 1)
        if isinstance(key, (list, dict)):
            raise ValueError("msgpack: unhashable map key")
        out[key] = _value(r, depth + 1)
    return out


def unpackb(data: bytes) -> Any:
    """Decode exactly one MessagePack value."""
    r = _Reader(data)
    value = _value(r, 0)
    if r.pos != len(data):
        raise ValueError(f"msgpack: {len(data) - r.pos} trailing bytes")
    return value
