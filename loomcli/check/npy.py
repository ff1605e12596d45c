"""NumPy `.npy` files as check data (`check.generate.file`, LANGUAGE.md 17.39).

A small, bounded reader of the format (versions 1.0 to 3.0): the magic
`\\x93NUMPY`, a version, a header length (2 bytes in 1.0, 4 in 2.0 and 3.0)
and a header that is a Python dict literal with exactly the keys `descr`,
`fortran_order` and `shape`, then the elements in C order. The header is
parsed by a strict little grammar (strings, `True`/`False`, tuples of
integers), never evaluated; the file is refused before it is read when it
is over the 64 MiB input limit, and the header when it is over
`MAX_HEADER_BYTES` (NumPy's own default bound). The element type must be
exactly the tensor's (`DTYPES`), the shape exactly the sample's; the data
must be exactly as long as the shape says. Every refusal is a `DataFileError`
whose text completes CHECK/002's `data file `{path}`: {why}`.

NumPy itself is not needed (nor imported): the format is simple, and a
runtime dependency of ~20 MB for reading one of its files is not worth it.
"""

from __future__ import annotations

import math
import os
import stat
import struct
from collections.abc import Sequence
from typing import Any

from loomcli.files import MAX_INPUT_BYTES

MAGIC = b"\x93NUMPY"
MAX_HEADER_BYTES = 10_000
VERSIONS = {(1, 0): "<H", (2, 0): "<I", (3, 0): "<I"}

# Loom element type -> the dtype descriptions that store it. Integers are read
# as two's complement bits (signed or unsigned alike), bf16 as its u16 bits.
DTYPES: dict[str, tuple[str, ...]] = {
    "i1": ("|b1",),
    "i8": ("|i1", "|u1", "<i1", "<u1"),
    "i16": ("<i2", "<u2"),
    "i32": ("<i4", "<u4"),
    "i64": ("<i8", "<u8"),
    "f16": ("<f2",),
    "bf16": ("<u2",),
    "f32": ("<f4",),
    "f64": ("<f8",),
}


class DataFileError(Exception):
    """Why a data file cannot give the tensor (CHECK/002's `{why}`)."""


def read_npy(path: str, elem: str, shape: Sequence[int]) -> bytearray:
    """The element bytes of the `.npy` file at `path`, checked to hold a
    C-order array of Loom element type `elem` (its name) and `shape`;
    little-endian, as `check.cases.Tensor` keeps them."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise DataFileError("no such file") from None
    except OSError as e:
        raise DataFileError(f"cannot read it: {e.strerror or e}") from None
    if not stat.S_ISREG(info.st_mode):
        raise DataFileError("not a regular file")
    if info.st_size > MAX_INPUT_BYTES:
        raise DataFileError(f"{info.st_size} bytes, over the {MAX_INPUT_BYTES >> 20} MiB input limit")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise DataFileError(f"cannot read it: {e.strerror or e}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise DataFileError(f"over the {MAX_INPUT_BYTES >> 20} MiB input limit")
    return parse_npy(data, elem, shape)


def parse_npy(data: bytes, elem: str, shape: Sequence[int]) -> bytearray:
    """`read_npy` on the file's bytes."""
    descr, fortran, file_shape, start = parse_header(data)
    if descr not in DTYPES[elem]:
        want = " or ".join(f"'{d}'" for d in DTYPES[elem])
        raise DataFileError(f"dtype '{descr}' does not store {elem} (expected {want})")
    if fortran:
        raise DataFileError("Fortran order; loom reads C order (fortran_order: False)")
    if tuple(file_shape) != tuple(shape):
        raise DataFileError(f"shape {_shape(file_shape)} does not match the tensor's {_shape(shape)}")
    size = int(descr[2:])
    want_bytes = math.prod(shape) * size
    have = len(data) - start
    if have != want_bytes:
        what = "truncated" if have < want_bytes else "too long"
        raise DataFileError(f"{what}: {have} bytes of data, the shape needs {want_bytes}")
    out = bytearray(data[start:])
    if elem == "i1":
        for i, b in enumerate(out):
            if b > 1:
                raise DataFileError(f"element {i} of a bool array is {b}, not 0 or 1")
    return out


def parse_header(data: bytes) -> tuple[str, bool, tuple[int, ...], int]:
    """(descr, fortran_order, shape, offset of the data) of an `.npy` file."""
    if not data.startswith(MAGIC):
        raise DataFileError("not a NumPy .npy file (bad magic)")
    if len(data) < len(MAGIC) + 2:
        raise DataFileError("truncated before the version")
    version = (data[6], data[7])
    code = VERSIONS.get(version)
    if code is None:
        raise DataFileError(f"unsupported .npy version {version[0]}.{version[1]} (1.0 to 3.0)")
    at = 8 + struct.calcsize(code)
    if len(data) < at:
        raise DataFileError("truncated before the header length")
    length = struct.unpack_from(code, data, 8)[0]
    if length > MAX_HEADER_BYTES:
        raise DataFileError(f"a header of {length} bytes, over the {MAX_HEADER_BYTES}-byte limit")
    if len(data) < at + length:
        raise DataFileError(f"truncated in the header ({length} bytes announced)")
    raw = data[at:at + length]
    try:
        text = raw.decode("utf-8" if version == (3, 0) else "latin-1")
    except UnicodeDecodeError:
        raise DataFileError("the header is not UTF-8") from None
    header = _HeaderParser(text).parse()
    if set(header) != {"descr", "fortran_order", "shape"}:
        raise DataFileError(f"the header must have the keys descr, fortran_order and shape, "
                            f"found {', '.join(sorted(header)) or 'none'}")
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if not isinstance(descr, str):
        raise DataFileError("descr is not a string (structured dtypes are not read)")
    if not isinstance(fortran, bool):
        raise DataFileError("fortran_order is not True or False")
    if not isinstance(shape, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise DataFileError("shape is not a tuple of integers")
    if descr.startswith(">") or (descr.startswith("=") and len(descr) > 1):
        raise DataFileError(f"dtype '{descr}' is not little-endian")
    return descr, fortran, shape, at + length


def _shape(dims: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"


_DIGITS = frozenset("0123456789")


class _HeaderParser:
    """`{'key': value, ...}` with string, bool and integer-tuple values; nothing else."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, what: str) -> DataFileError:
        return DataFileError(f"malformed header at character {self.at}: {what}")

    def skip(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in " \t\r\n":
            self.at += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.at] if self.at < len(self.text) else ""

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise self.fail(f"expected `{ch}`")
        self.at += 1

    def parse(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        self.expect("{")
        while self.peek() != "}":
            key = self.string()
            if key in out:
                raise self.fail(f"key '{key}' twice")
            self.expect(":")
            out[key] = self.value()
            if self.peek() == ",":
                self.at += 1
            elif self.peek() != "}":
                raise self.fail("expected `,` or `}`")
        self.at += 1
        if self.peek():
            raise self.fail("text after the dict")
        return out

    def value(self) -> Any:
        ch = self.peek()
        if ch in "'\"":
            return self.string()
        if ch == "(":
            return self.tuple()
        for word, v in (("True", True), ("False", False)):
            if self.text.startswith(word, self.at):
                self.at += len(word)
                return v
        raise self.fail("expected a string, True, False or a tuple")

    def string(self) -> str:
        quote = self.peek()
        if quote not in ("'", '"'):
            raise self.fail("expected a string")
        end = self.text.find(quote, self.at + 1)
        if end < 0 or "\\" in self.text[self.at:end]:
            raise self.fail("unterminated or escaped string")
        s = self.text[self.at + 1:end]
        self.at = end + 1
        return s

    def tuple(self) -> tuple[int, ...]:
        self.expect("(")
        dims = []
        while self.peek() != ")":
            start = self.at
            while self.at < len(self.text) and self.text[self.at] in _DIGITS and self.at - start < 19:
                self.at += 1
            if self.at == start:
                raise self.fail("expected a dimension")
            dims.append(int(self.text[start:self.at]))
            if self.peek() == ",":
                self.at += 1
            elif self.peek() != ")":
                raise self.fail("expected `,` or `)`")
        self.at += 1
        return tuple(dims)


__all__ = ["DTYPES", "MAX_HEADER_BYTES", "DataFileError", "parse_header", "parse_npy", "read_npy"]
