"""Comparing two runs' tensors, bit for bit.

Tensors are compared as their bytes. The exceptions, each stated where a
test asks for it:

* `nan` tensors (float elements) treat every NaN alike: the sign and
  payload of a NaN made by arithmetic are unspecified (LANGUAGE.md 7.2 says
  IEEE; Vulkan lets any float instruction return any NaN). Every other
  value, signed zeros included, must match.
* `approx` tensors (f64 elements holding transcendental results of the
  column's type) agree within APPROX_ULPS of that type, NaN matching NaN.

Known device differences are filtered afterwards (`kernelfuzz.known`).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

from kernelfuzz.gen import BYTES, Tensor, Test

APPROX_ULPS = 4
_CODES = {"i1": "B", "i8": "B", "i16": "H", "i32": "I", "i64": "Q", "f16": "H", "bf16": "H", "f32": "I",
          "f64": "Q"}


def shape_of(t: Tensor) -> tuple[int, ...]:
    dims = t.type[len("tensor<"):-1].split("x")[:-1]
    return tuple(int(d) for d in dims)


def position(t: Tensor, k: int) -> str:
    out = []
    for d in reversed(shape_of(t)):
        out.append(k % d)
        k //= d
    return "[" + "][".join(map(str, reversed(out))) + "]"


def is_nan_bits(elem: str, u: int) -> bool:
    if elem == "f16":
        return (u & 0x7C00) == 0x7C00 and bool(u & 0x3FF)
    if elem == "bf16":
        return (u & 0x7F80) == 0x7F80 and bool(u & 0x7F)
    if elem == "f32":
        return (u & 0x7F800000) == 0x7F800000 and bool(u & 0x7FFFFF)
    if elem == "f64":
        return (u & 0x7FF0000000000000) == 0x7FF0000000000000 and bool(u & 0xFFFFFFFFFFFFF)
    return False


def elements(t: Tensor, data: bytes) -> tuple[int, ...]:
    """The elements as unsigned bit patterns."""
    n = len(data) // BYTES[t.elem]
    return struct.unpack(f"<{n}{_CODES[t.elem]}", data)


def ulp_distance(t: str, a: float, b: float) -> int:
    fmt, ifmt, sign = ("<f", "<i", 31) if t == "f32" else ("<d", "<q", 63)

    def ordered(x: float) -> int:
        u = struct.unpack(ifmt, struct.pack(fmt, x))[0]
        return u if u >= 0 else -(u & ((1 << sign) - 1))
    return abs(ordered(a) - ordered(b))


def first_difference(test: Test, got: Sequence[bytes], want: Sequence[bytes]) -> tuple[int, int] | None:
    """(tensor, element) of the first difference that counts, or None."""
    if len(got) != len(want):
        return (min(len(got), len(want)), 0)
    for i, (t, a, b) in enumerate(zip(test.tensors, got, want)):
        if a == b:
            continue
        if len(a) != len(b):
            return (i, 0)
        xs, ys = elements(t, a), elements(t, b)
        if t.compare == "approx":
            fs = struct.unpack(f"<{len(xs)}d", a)
            gs = struct.unpack(f"<{len(ys)}d", b)
            width = len(t.approx_types)
            for k, (x, y) in enumerate(zip(fs, gs)):
                if not close(t.approx_types[k % width], x, y):
                    return (i, k)
            continue
        for k, (x, y) in enumerate(zip(xs, ys)):
            if x != y and not (t.compare == "nan" and is_nan_bits(t.elem, x) and is_nan_bits(t.elem, y)):
                return (i, k)
    return None


def close(t: str, x: float, y: float) -> bool:
    if (math.isnan(x) and math.isnan(y)) or x == y:
        return True
    if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
        return False
    return ulp_distance(t, x, y) <= APPROX_ULPS


def describe(test: Test, at: tuple[int, int], got: Sequence[bytes], want: Sequence[bytes],
             got_name: str, want_name: str) -> str:
    i, k = at
    if i >= len(test.tensors) or i >= len(got) or i >= len(want):
        return f"{len(got)} tensors from {got_name}, {len(want)} from {want_name}"
    t = test.tensors[i]
    if len(got[i]) != len(want[i]):
        return f"%{t.name}: {len(got[i])} bytes from {got_name}, {len(want[i])} from {want_name}"
    if t.compare == "approx":
        x = struct.unpack_from("<d", got[i], 8 * k)[0]
        y = struct.unpack_from("<d", want[i], 8 * k)[0]
        col = t.approx_types[k % len(t.approx_types)]
        return f"%{t.name}{position(t, k)} ({col}): {got_name} {x!r}, {want_name} {y!r}"
    x, y = elements(t, got[i])[k], elements(t, want[i])[k]
    digits = 2 * BYTES[t.elem]
    return f"%{t.name}{position(t, k)} ({t.elem}): {got_name} 0x{x:0{digits}x}, {want_name} 0x{y:0{digits}x}"
