"""`check.generate.file` (LANGUAGE.md 17.39): NumPy `.npy` files as inputs and
expected values of check cases, read by loom's own bounded reader
(`loomcli.check.npy`); every way a file can be wrong is CHECK/002 at the op,
naming the path as written."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Collect  # type: ignore[import-not-found]

from loomcli.check.npy import DTYPES, MAX_HEADER_BYTES, DataFileError, parse_npy
from loomcli.check.session import Session, interpreter_profile
from loomcli.files import MAX_INPUT_BYTES

ROOT = Path(__file__).resolve().parent.parent


def npy(descr: str, shape: tuple[int, ...], payload: bytes, version: tuple[int, int] = (1, 0),
        fortran: bool = False, header: str | None = None) -> bytes:
    """An .npy file as NumPy writes it (header padded to 64 bytes, newline-terminated)."""
    text = header if header is not None else \
        f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape!r}, }}"
    size = 2 if version == (1, 0) else 4
    pad = -(len(text) + 1 + 8 + size) % 64
    raw = (text + " " * pad + "\n").encode()
    length = struct.pack("<H" if size == 2 else "<I", len(raw))
    return b"\x93NUMPY" + bytes(version) + length + raw + payload


# Loom type: (descr, struct code, values): what each element type reads.
GOOD = {
    "i1": ("|b1", "B", [0, 1, 1, 0, 1, 0]),
    "i8": ("|i1", "b", [-128, -1, 0, 1, 2, 127]),
    "i16": ("<i2", "h", [-32768, -1, 0, 1, 2, 32767]),
    "i32": ("<u4", "I", [0, 1, 2, 3, 0xFFFFFFFF, 0x80000000]),
    "i64": ("<i8", "q", [-(1 << 63), -1, 0, 1, 2, (1 << 63) - 1]),
    "f16": ("<f2", "e", [0.5, -2.0, 65504.0, 0.0, 1.0, -0.25]),
    "bf16": ("<u2", "H", [0x3F80, 0x4000, 0xBF80, 0, 0x7F80, 0x3E80]),
    "f32": ("<f4", "f", [0.5, -2.0, 3.25, 1e30, 0.0, -0.0]),
    "f64": ("<f8", "d", [0.1, -2.0, 1e300, 5e-324, 0.0, 3.0]),
}


def payload(code: str, values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}{code}", *values)


@pytest.mark.parametrize("elem", list(GOOD))
def test_every_element_type_reads_its_bytes(elem: str) -> None:
    descr, code, values = GOOD[elem]
    data = payload(code, values)
    assert bytes(parse_npy(npy(descr, (2, 3), data), elem, (2, 3))) == data
    for version in ((2, 0), (3, 0)):
        assert bytes(parse_npy(npy(descr, (2, 3), data, version), elem, (2, 3))) == data
    assert set(DTYPES) == set(GOOD)


F32 = payload("f", [1.0, 2.0, 3.0, 4.0])
HEADER = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"

# name: (file bytes, the reason CHECK/002 gives)
BAD = {
    "bad_magic": (b"\x93NUMPX\x01\x00" + npy("<f4", (4,), F32)[8:], "not a NumPy .npy file (bad magic)"),
    "empty": (b"", "not a NumPy .npy file (bad magic)"),
    "version_4": (npy("<f4", (4,), F32, version=(4, 0)), "unsupported .npy version 4.0 (1.0 to 3.0)"),
    "truncated_version": (b"\x93NUMPY", "truncated before the version"),
    "truncated_header": (npy("<f4", (4,), F32)[:40], "truncated in the header (118 bytes announced)"),
    "header_too_long": (b"\x93NUMPY\x02\x00" + struct.pack("<I", MAX_HEADER_BYTES + 1),
                        f"a header of {MAX_HEADER_BYTES + 1} bytes, over the {MAX_HEADER_BYTES}-byte limit"),
    "header_not_a_dict": (npy("", (), F32, header="[1, 2]"), "malformed header at character 0: expected `{`"),
    "header_code": (npy("", (), F32, header="{'descr': __import__('os'), }"),
                    "malformed header at character 10: expected a string, True, False or a tuple"),
    "header_missing_shape": (npy("", (), F32, header="{'descr': '<f4', 'fortran_order': False}"),
                             "the header must have the keys descr, fortran_order and shape, "
                             "found descr, fortran_order"),
    "header_key_twice": (npy("", (), F32, header="{'descr': '<f4', 'descr': '<f4'}"),
                         "malformed header at character 24: key 'descr' twice"),
    "header_not_utf8": (npy("<f4", (4,), F32, version=(3, 0)).replace(b"descr", b"d\xffscr"),
                        "the header is not UTF-8"),
    "structured_dtype": (npy("", (), F32, header="{'descr': [('a', '<f4')], 'fortran_order': False, "
                                                 "'shape': (4,)}"),
                         "malformed header at character 10: expected a string, True, False or a tuple"),
    "shape_not_integers": (npy("", (), F32, header="{'descr': '<f4', 'fortran_order': False, 'shape': (4.0,)}"),
                           "malformed header at character 52: expected `,` or `)`"),
    "big_endian": (npy(">f4", (4,), F32), "dtype '>f4' is not little-endian"),
    "wrong_dtype": (npy("<f8", (2,), F32), "dtype '<f8' does not store f32 (expected '<f4')"),
    "fortran_order": (npy("<f4", (4,), F32, fortran=True), "Fortran order; loom reads C order (fortran_order: False)"),
    "wrong_shape": (npy("<f4", (2, 2), F32), "shape (2, 2) does not match the tensor's (4,)"),
    "truncated_data": (npy("<f4", (4,), F32[:-1]), "truncated: 15 bytes of data, the shape needs 16"),
    "data_too_long": (npy("<f4", (4,), F32 + b"\0"), "too long: 17 bytes of data, the shape needs 16"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_every_wrong_file_is_refused_with_its_reason(name: str) -> None:
    data, why = BAD[name]
    with pytest.raises(DataFileError) as e:
        parse_npy(data, "f32", (4,))
    assert str(e.value) == why


def test_a_bool_file_holds_only_zero_and_one() -> None:
    with pytest.raises(DataFileError, match="element 1 of a bool array is 2"):
        parse_npy(npy("|b1", (3,), b"\x01\x02\x00"), "i1", (3,))


CASE = """\
check.case @c {{
  %n = check.param.choice values([4]) name("n") : index
  %x = check.generate.file path("{path}") : tensor<[%n]xf32>
  %want = check.generate.iota offset(1.0) step(1.0) : tensor<[%n]xf32>
  check.expect.equal actual(%x) expected(%want) : tensor<[%n]xf32>
  check.return
}}
"""


def run_case(path: Path) -> Collect:
    out = Collect()
    Session(None, interpreter_profile(None), out, quiet=False).run((str(path),), [], None)
    return out


def make_fifo(p: Path) -> None:
    os.mkfifo(p)


def make_big(p: Path) -> None:
    with open(p, "wb") as f:
        f.truncate(MAX_INPUT_BYTES + 1)   # sparse: no 64 MiB written


# name: (how to make `data/x.npy`, the reason)
FILES = {
    "missing": (lambda p: None, "no such file"),
    "folder": (lambda p: p.mkdir(), "not a regular file"),
    "fifo": (make_fifo, "not a regular file"),
    "too_big": (make_big, f"{MAX_INPUT_BYTES + 1} bytes, over the 64 MiB input limit"),
    "wrong_shape": (lambda p: p.write_bytes(npy("<f4", (5,), F32 + F32[:4])),
                    "shape (5,) does not match the tensor's (4,)"),
}


@pytest.mark.parametrize("name", list(FILES))
def test_the_case_fails_with_check_002_at_the_path(name: str, tmp_path: Path) -> None:
    make, why = FILES[name]
    (tmp_path / "data").mkdir()
    make(tmp_path / "data" / "x.npy")
    (tmp_path / "c.loom").write_text(CASE.format(path="data/x.npy"))
    out = run_case(tmp_path / "c.loom")
    assert out.lines == ["FAIL @c [n=4]"]
    [d] = out.diags
    message = f"data file `data/x.npy`: {why} (sample @c [n=4])"
    assert (d.code, d.line, d.column, d.message) == ("CHECK/002", 3, 33, message)


def test_paths_are_relative_to_the_file_that_holds_the_case(tmp_path: Path) -> None:
    """Wherever loom runs from, and from the bytecode too (which stores the path as written)."""
    (tmp_path / "cases" / "data").mkdir(parents=True)
    (tmp_path / "cases" / "data" / "x.npy").write_bytes(npy("<f4", (4,), F32))
    src = tmp_path / "cases" / "c.loom"
    src.write_text(CASE.format(path="data/x.npy"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    bc = tmp_path / "cases" / "c.loombc"
    loom = [sys.executable, "-m", "loomcli"]
    subprocess.run([*loom, "fmt", str(src), "--to", "bc", "-o", str(bc)], check=True, env=env)
    back = subprocess.run([*loom, "fmt", str(bc), "--to", "text", "-o", "-"], capture_output=True, text=True,
                          env=env, check=True)
    assert back.stdout == src.read_text()
    for tested in (src, bc):
        done = subprocess.run([*loom, "test", str(tested), "--device", "interpreter"], capture_output=True,
                              text=True, env=env, cwd="/")
        assert done.returncode == 0 and "PASS @c [n=4]" in done.stdout, done.stdout + done.stderr
    (tmp_path / "cases" / "abs.loom").write_text(CASE.format(path=str(tmp_path / "cases" / "data" / "x.npy")))
    assert run_case(tmp_path / "cases" / "abs.loom").lines == ["PASS @c [n=4]"]


def test_files_numpy_writes_are_read() -> None:
    np = pytest.importorskip("numpy")
    import io

    for elem, dtype in (("f32", np.float32), ("f16", np.float16), ("f64", np.float64), ("i8", np.int8),
                        ("i16", np.int16), ("i32", np.int32), ("i64", np.uint64), ("i1", np.bool_)):
        a = (np.arange(24).reshape(2, 3, 4) % 2).astype(dtype)
        buf = io.BytesIO()
        np.save(buf, a)
        assert bytes(parse_npy(buf.getvalue(), elem, (2, 3, 4))) == a.tobytes(), elem
    buf = io.BytesIO()
    np.save(buf, np.asfortranarray(np.ones((2, 3), np.float32)))
    with pytest.raises(DataFileError, match="Fortran order"):
        parse_npy(buf.getvalue(), "f32", (2, 3))


def test_mutated_files_are_refused_or_read_never_crash() -> None:
    """The reader's slice of the hostile-input fuzzing (scripts/fuzz_hostile.py --npy)."""
    import importlib.util

    fuzz = sys.modules.get("fuzz_hostile")
    if fuzz is None:
        spec = importlib.util.spec_from_file_location("fuzz_hostile", ROOT / "scripts" / "fuzz_hostile.py")
        assert spec is not None and spec.loader is not None
        fuzz = importlib.util.module_from_spec(spec)
        sys.modules["fuzz_hostile"] = fuzz
        spec.loader.exec_module(fuzz)
    findings = fuzz.fuzz_npy(400, 7)
    assert findings == [], findings[:3]
