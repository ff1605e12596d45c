"""A small MessagePack decoder for the NT_AMDGPU_METADATA note (code object v3+).

Decodes nil, booleans, integers, floats, strings, binaries, arrays and maps
(extension types are returned as `(type, bytes)`). Every length is checked
against the input; malformed input raises `ValueError`.

Every AMDGPU artifact's manifest reads its note back, so the decoder walks
the bytes by offset (each value returns the offset after it) with
precompiled `struct` formats: a reader object with a method per byte cost
a kernel set's manifest 0.2 ms.
"""

from __future__ import annotations

import struct
from typing import Any

_U8, _U16, _U32 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I")
_FIXED = {0xCC: _U8, 0xCD: _U16, 0xCE: _U32, 0xCF: struct.Struct(">Q"), 0xD0: struct.Struct(">b"),
          0xD1: struct.Struct(">h"), 0xD2: struct.Struct(">i"), 0xD3: struct.Struct(">q"),
          0xCA: struct.Struct(">f"), 0xCB: struct.Struct(">d")}
_LENGTH = {0xD9: _U8, 0xDA: _U16, 0xDB: _U32,    # str 8/16/32
           0xC4: _U8, 0xC5: _U16, 0xC6: _U32,    # bin 8/16/32
           0xDC: _U16, 0xDD: _U32,               # array 16/32
           0xDE: _U16, 0xDF: _U32,               # map 16/32
           0xC7: _U8, 0xC8: _U16, 0xC9: _U32}    # ext 8/16/32
_MAX_DEPTH = 64


def _truncated(pos: int) -> ValueError:
    return ValueError(f"msgpack: truncated at byte {pos}")


def _number(data: bytes, pos: int, fmt: struct.Struct) -> tuple[Any, int]:
    end = pos + fmt.size
    if end > len(data):
        raise _truncated(pos)
    return fmt.unpack_from(data, pos)[0], end


def _bytes(data: bytes, pos: int, n: int) -> tuple[bytes, int]:
    end = pos + n
    if end > len(data):
        raise _truncated(pos)
    return data[pos:end], end


def _value(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    """The value at `pos` and the offset after it."""
    if depth > _MAX_DEPTH:
        raise ValueError("msgpack: nesting too deep")
    if pos >= len(data):
        raise _truncated(pos)
    b = data[pos]
    pos += 1
    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if b <= 0x8F:
        return _map(data, pos, b & 0x0F, depth)
    if b <= 0x9F:
        return _array(data, pos, b & 0x0F, depth)
    if b <= 0xBF:
        raw, pos = _bytes(data, pos, b & 0x1F)
        return raw.decode("utf-8", "replace"), pos
    if b == 0xC0:
        return None, pos
    if b in (0xC2, 0xC3):
        return b == 0xC3, pos
    fixed = _FIXED.get(b)
    if fixed is not None:
        return _number(data, pos, fixed)
    length = _LENGTH.get(b)
    if length is not None:
        n, pos = _number(data, pos, length)
        if b in (0xD9, 0xDA, 0xDB):
            raw, pos = _bytes(data, pos, n)
            return raw.decode("utf-8", "replace"), pos
        if b in (0xC4, 0xC5, 0xC6):
            return _bytes(data, pos, n)
        if b in (0xDC, 0xDD):
            return _array(data, pos, n, depth)
        if b in (0xDE, 0xDF):
            return _map(data, pos, n, depth)
        kind, pos = _number(data, pos, _FIXED[0xD0])  # ext: its type, then its bytes
        raw, pos = _bytes(data, pos, n)
        return (kind, raw), pos
    if 0xD4 <= b <= 0xD8:  # fixext 1/2/4/8/16
        kind, pos = _number(data, pos, _FIXED[0xD0])
        raw, pos = _bytes(data, pos, 1 << (b - 0xD4))
        return (kind, raw), pos
    raise ValueError(f"msgpack: unknown type byte {b:#04x} at {pos - 1}")


def _array(data: bytes, pos: int, n: int, depth: int) -> tuple[list[Any], int]:
    out = []
    for _ in range(n):
        item, pos = _value(data, pos, depth + 1)
        out.append(item)
    return out, pos


def _map(data: bytes, pos: int, n: int, depth: int) -> tuple[dict[Any, Any], int]:
    out: dict[Any, Any] = {}
    size = len(data)
    for _ in range(n):
        b = data[pos] if pos < size else -1
        if 0xA0 <= b <= 0xBF and pos + 1 + (b & 0x1F) <= size:  # a short string key, as the note's all are
            end = pos + 1 + (b & 0x1F)
            key: Any = data[pos + 1:end].decode("utf-8", "replace")
            pos = end
        else:
            key, pos = _value(data, pos, depth + 1)
            if isinstance(key, (list, dict)):
                raise ValueError("msgpack: unhashable map key")
        out[key], pos = _value(data, pos, depth + 1)
    return out, pos


def unpackb(data: bytes) -> Any:
    """Decode exactly one MessagePack value."""
    value, pos = _value(data, 0, 0)
    if pos != len(data):
        raise ValueError(f"msgpack: {len(data) - pos} trailing bytes")
    return value
