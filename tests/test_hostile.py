"""Hostile input (issue 11): bytecode re-checked after decoding, outputs that
never damage special files, bounded resources, the right exit codes.

Every regression found by attacking loom as an adversary would has a test
here; `test_fuzz_every_command` runs a small fixed-seed slice of
`scripts/fuzz_hostile.py` (mutated text and bytecode through every command).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli.bytecode import read_module, write_module
from loomcli.diagnostics import CompileError
from loomcli.errors import LoomError, UsageError
from loomcli.files import read_input, write_outputs
from loomcli.frontend import load_bytes, parse_text
from loomcli.text.printer import print_module

ROOT = Path(__file__).resolve().parent.parent
SAXPY = ROOT / "samples" / "saxpy.loom"

_spec = importlib.util.spec_from_file_location("fuzz_hostile", ROOT / "scripts" / "fuzz_hostile.py")
fuzz_hostile = importlib.util.module_from_spec(_spec)
sys.modules["fuzz_hostile"] = fuzz_hostile
_spec.loader.exec_module(fuzz_hostile)  # type: ignore[union-attr]


def loom(*args: str, cwd: Path | None = None, stdin: bytes | None = None, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LOOM_DEBUG", None)
    kw.setdefault("capture_output", True)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], cwd=cwd, input=stdin, env=env, **kw)


def no_crash(r: subprocess.CompletedProcess) -> str:
    err = r.stderr.decode() if isinstance(r.stderr, bytes) else r.stderr
    assert "Traceback" not in err and "internal" not in err, err
    return err


def replace_string(data: bytes, old: str, new: str) -> bytes:
    head, strings, tail = fuzz_hostile.split_strings(data)
    assert old.encode() in strings, old
    strings[strings.index(old.encode())] = new.encode()
    return fuzz_hostile.join_strings(head, strings, tail)


def compiled_saxpy(tmp_path: Path) -> bytes:
    out = tmp_path / "saxpy.loombc"
    r = loom("compile", str(SAXPY), "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    return out.read_bytes()


# ---------------------------------------------------------------- 1. hostile bytecode


@pytest.mark.parametrize("old, new", [
    ("ult", "eq i32 0, 0 ;"),                              # the bounds check vanished from the .hsaco
    ("ult", 'call void asm sideeffect "s_trap 2", ""()'),  # injected into the .s output
    ("ult", "oeq"),                                        # a word of another enum set
    ("x", "w"),                                            # a coordinate axis
    ("saxpy", "a b"),                                      # a symbol that is no identifier
    ("n", "n n"),                                          # a value name that is no identifier
    ("f32", "vector"),                                     # a type name of the wrong kind
])
def test_hostile_strings_are_bytecode_003_before_any_later_stage(tmp_path: Path, old: str, new: str) -> None:
    bad = tmp_path / "bad.loombc"
    bad.write_bytes(replace_string(compiled_saxpy(tmp_path), old, new))
    with pytest.raises(CompileError) as e:
        read_module(bad.read_bytes(), "bad.loombc")
    assert e.value.diagnostics[0].code in ("BYTECODE/003", "BYTECODE/001")
    for argv in (["fmt", "--to", "text", str(bad), "-o", str(tmp_path / "x.loom")],
                 ["compile", str(bad), "--target", "amdgpu:gfx1100", "-o", str(tmp_path / "x.ll")],
                 ["compile", str(bad), "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "x.spv")]):
        r = loom(*argv)
        assert r.returncode == 1, r.stderr.decode()
        assert "BYTECODE/00" in no_crash(r)
    assert not list(tmp_path.glob("x.*"))


def test_operand_of_another_type_is_refused(tmp_path: Path) -> None:
    """A payload may point an operand at any earlier value; text would write its type."""
    module = parse_text(SAXPY.read_text(), "saxpy.loom")
    body = module.ops[0].regions[1]
    fma = next(op for op in body.walk_ops() if op.name == "scalar.fmaf")
    n = body.args[0]
    fma.drop_operand_uses()
    fma.operands[0] = n
    fma.written_types = None  # as a hostile writer would leave it: no written type to disagree with
    with pytest.raises(CompileError, match=r"malformed at byte"):
        read_module(write_module(module))


def _samples_bytecode() -> list[bytes]:
    out = []
    for path in sorted((ROOT / "samples").glob("*.loom")):
        out.append(write_module(parse_text(path.read_text(), path.name)))
        out.append(write_module(parse_text(path.read_text(), path.name), keep_debug=False))
    return out


SEEDS = _samples_bytecode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(SEEDS) - 1), st.integers(0, 2 ** 32))
def test_every_verified_module_prints_as_text_that_parses_back(which: int, seed: int) -> None:
    data = fuzz_hostile.mutate_bytecode(random.Random(seed), SEEDS[which])
    try:
        module = load_bytes(data, "fuzz.loombc")
    except CompileError as e:
        assert all(d.code.split("/")[0] in ("BYTECODE", "PARSE", "TYPE", "STRUCTURE", "DOMINANCE", "SYMBOL",
                                            "TARGET", "CONFIG") for d in e.diagnostics)
        return
    text = print_module(module)
    again = parse_text(text, "fuzz.loombc")
    assert print_module(again) == text
    assert write_module(again, keep_debug=False) == write_module(module, keep_debug=False)


# ---------------------------------------------------------------- 2. outputs


def test_devices_are_written_in_place_not_replaced(tmp_path: Path) -> None:
    r = loom("fmt", str(SAXPY), "--to", "bc", "-o", os.devnull)
    assert r.returncode == 0, r.stderr.decode()
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    if os.path.exists("/dev/full"):
        r = loom("fmt", str(SAXPY), "--to", "bc", "-o", "/dev/full")
        assert r.returncode == 3 and b"/dev/full" in r.stderr
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_fifo_is_written_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    r = loom("fmt", str(SAXPY), "--to", "text", "-o", str(fifo))
    out = reader.communicate(timeout=60)[0]
    assert r.returncode == 0, r.stderr.decode()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert out == SAXPY.read_bytes()


def test_socket_output_is_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
        r = loom("fmt", str(SAXPY), "--to", "text", "-o", str(path))
        assert r.returncode == 3 and str(path).encode() in r.stderr  # sockets cannot be opened: an I/O error
        assert stat.S_ISSOCK(os.stat(path).st_mode)
    finally:
        s.close()


def test_symlinks_are_written_through(tmp_path: Path) -> None:
    target = tmp_path / "real.loom"
    target.write_text(SAXPY.read_text() + "\n\n")
    link = tmp_path / "link.loom"
    link.symlink_to(target.name)
    r = loom("fmt", "--in-place", str(link))
    assert r.returncode == 0, r.stderr.decode()
    assert link.is_symlink() and target.read_text() == SAXPY.read_text()
    dangling = tmp_path / "dangling.loombc"
    dangling.symlink_to("made.loombc")
    r = loom("fmt", str(SAXPY), "--to", "bc", "-o", str(dangling))
    assert r.returncode == 0, r.stderr.decode()
    assert dangling.is_symlink() and (tmp_path / "made.loombc").read_bytes().startswith(b"LOOMBC")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.loombc", "link.loom", "made.loombc", "real.loom"]


def test_an_output_that_is_an_input_is_a_usage_error(tmp_path: Path) -> None:
    src = tmp_path / "x.loom"
    src.write_text(SAXPY.read_text())
    alias = tmp_path / "alias.loom"
    alias.symlink_to(src.name)
    for out in (src, alias):
        r = loom("fmt", str(src), "--to", "bc", "-o", str(out))
        assert r.returncode == 2 and b"is also an input" in r.stderr
    r = loom("compile", str(src), "-o", str(src))
    assert r.returncode == 2
    assert src.read_text() == SAXPY.read_text()


def test_one_failing_output_leaves_no_output(tmp_path: Path) -> None:
    spv = tmp_path / "k.spv"
    r = loom("compile", str(SAXPY), "--target", "spirv:vulkan1.3", "-o", str(spv),
             "--manifest", str(tmp_path / "missing" / "k.json"))
    assert r.returncode == 3
    err = r.stderr.decode()
    assert str(tmp_path / "missing" / "k.json") in err and ".loom-" not in err  # the output, not the temp file
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(params=["anonymous", "named"])
def staging(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways an output is staged: an anonymous file (O_TMPFILE, Linux)
    and the named temporary file used where there is none."""
    from loomcli import errors

    if request.param == "named":
        monkeypatch.setattr(errors._Links, "folder", lambda self: None)
    elif errors._Links().folder() is None:
        pytest.skip("no O_TMPFILE or no /proc here: only named temporary files")
    return str(request.param)


def test_write_outputs_publish_new_replaced_and_linked_files(tmp_path: Path, staging: str) -> None:
    fresh, old, target = tmp_path / "new.bin", tmp_path / "old.bin", tmp_path / "target.bin"
    old.write_bytes(b"stale and longer")
    target.write_bytes(b"t")
    link = tmp_path / "link.bin"
    link.symlink_to(target.name)
    umask = os.umask(0o027)
    try:
        write_outputs([(str(fresh), b"1"), (str(old), b"2"), (str(link), b"3")])
    finally:
        os.umask(umask)
    assert (fresh.read_bytes(), old.read_bytes(), target.read_bytes()) == (b"1", b"2", b"3")
    assert link.is_symlink()
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o640  # created as any new file: 0o666 less the umask
    write_outputs([(str(fresh), b"4" * 100_000)], mode=0o604)
    assert fresh.read_bytes() == b"4" * 100_000 and stat.S_IMODE(fresh.stat().st_mode) == 0o604
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.bin", "new.bin", "old.bin", "target.bin"]


def test_write_outputs_all_or_nothing_in_process(tmp_path: Path, staging: str) -> None:
    good = tmp_path / "a.bin"
    with pytest.raises(OSError) as e:
        write_outputs([(str(good), b"a"), (str(tmp_path / "no" / "b.bin"), b"b")])
    assert e.value.filename == str(tmp_path / "no" / "b.bin")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match="written twice"):
        write_outputs([(str(good), b"a"), (str(good), b"b")])
    write_outputs([(str(good), b"a")], mode=0o640)
    assert good.read_bytes() == b"a" and stat.S_IMODE(good.stat().st_mode) == 0o640


# ---------------------------------------------------------------- 3. private allocas, vector lanes


KERNEL = """kernel.def export("k") @k(%n: index) {{
  %c1 = index.constant 1 : index
  kernel.launch.config workgroups(%c1, %c1, %c1) workgroup_size(%c1, %c1, %c1) : index
}} launch(%n: index) {{
{body}
  kernel.return
}}
"""


@pytest.mark.parametrize("size, target, limit", [
    (1 << 40, "amdgpu:gfx1100", 65536), (1 << 40, "spirv:vulkan1.3", 16384), (20000, "spirv:vulkan1.3", 16384),
])
def test_private_storage_is_bounded(tmp_path: Path, size: int, target: str, limit: int) -> None:
    src = tmp_path / "p.loom"
    src.write_text(KERNEL.format(body=f"  %b = index.constant {size} : offset\n"
                                      f"  %p = buffer.alloca<private> align(16) %b : buffer"))
    out = tmp_path / ("p.ll" if target.startswith("amdgpu") else "p.spv")
    r = loom("compile", str(src), "--target", target, "-o", str(out))
    assert r.returncode == 1
    assert f"error [TARGET/007]: private storage {size} > {limit} bytes" in no_crash(r)
    assert not out.exists()


def test_private_storage_within_the_limit_compiles(tmp_path: Path) -> None:
    src = tmp_path / "p.loom"
    src.write_text(KERNEL.format(body="  %b = index.constant 16384 : offset\n"
                                      "  %p = buffer.alloca<private> align(16) %b : buffer"))
    r = loom("compile", str(src), "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "p.spv"))
    assert r.returncode == 0, r.stderr.decode()


@pytest.mark.parametrize("lanes, ok", [(64, True), (65, False), (65536, False)])
def test_vector_lanes_at_most_64(tmp_path: Path, lanes: int, ok: bool) -> None:
    text = KERNEL.format(body=f"  %z = vector.constant 0.0 : vector<{lanes}xf32>")
    if ok:
        parse_text(text, "v.loom")
        return
    with pytest.raises(CompileError) as e:
        parse_text(text, "v.loom")
    d = e.value.diagnostics[0]
    assert d.code == "TYPE/003" and d.message == f"invalid vector type: {lanes} lanes, at most 64"


# ---------------------------------------------------------------- 4. bounded resources


def test_input_size_is_checked_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.loom"
    with open(big, "wb") as f:
        f.truncate(2048)
    with pytest.raises(LoomError, match="larger than") as e:
        read_input(str(big), limit=1024)
    assert e.value.exit_code == 1
    r = loom("fmt", "-", stdin=bytes(65 << 20))  # no size to check first: read up to the limit, then refuse
    assert r.returncode == 1 and b"input larger than the 64 MiB limit" in r.stderr
    r = loom("fmt", "/dev/zero")  # a device is refused before a byte is read
    assert r.returncode == 1 and b"/dev/zero: not a regular file (a device)" in r.stderr


def test_a_file_is_read_to_its_end_whatever_its_size_said(tmp_path: Path) -> None:
    """A file is read with one request of its stat size and a byte more; one whose size says
    less than it holds (procfs says 0) is read on to its end, up to the limit."""
    small = tmp_path / "k.loom"
    small.write_bytes(b"x" * 100)
    assert read_input(str(small)) == b"x" * 100
    status = read_input("/proc/self/status")
    assert os.stat("/proc/self/status").st_size == 0 and status.startswith(b"Name:") and status.endswith(b"\n")
    with pytest.raises(LoomError, match="larger than the 0 MiB limit"):
        read_input("/proc/self/status", limit=16)


LOOP_CASE = """kernel.def @spin(%n: index) {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%n: index, %out: buffer) {
  %zero = index.constant 0 : offset
  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %big = index.constant 1099511627776 : index
  %v = buffer.view %out[%zero] : buffer -> view<1xi32>
  scf.for %k = [%c0 to %big step %c1] {
    %x = scalar.constant 1 : i32
    view.store %x, %v[0] : i32, view<1xi32>
  }
  kernel.return
}

check.case @spin_case {
  %n = check.literal value(1) : index
  %out = check.generate.fill value(0) : tensor<1xi32>
  kernel.launch @spin[%n](%n, %out) : [index](index, tensor<1xi32>)
  %want = check.generate.fill value(1) : tensor<1xi32>
  check.expect.equal actual(%out) expected(%want) : tensor<1xi32>
  check.return
}
"""


def test_interpreter_step_budget(tmp_path: Path) -> None:
    src = tmp_path / "spin.loom"
    src.write_text(LOOP_CASE)
    r = loom("test", str(src), "--device", "interpreter", "--max-steps", "5000", timeout=300)
    assert r.returncode == 1
    err = no_crash(r)
    assert "error [EXEC/003]: step budget exhausted: the launch ran more than 5000 operations" in err
    assert r.stdout.decode().splitlines()[-1] == "0 passed, 1 failed"
    r = loom("test", str(src), "--device", "interpreter", "--max-steps", "0")
    assert r.returncode == 2


def test_check_tensor_size_is_checked_before_allocating(tmp_path: Path) -> None:
    src = tmp_path / "huge.loom"
    src.write_text("check.case @huge {\n"
                   "  %t = check.generate.fill value(0.0) : tensor<9223372036854775807xf32>\n"
                   "  check.return\n}\n")
    r = loom("test", str(src), "--device", "interpreter", timeout=300)
    assert r.returncode == 1
    assert "exceeds the 1073741824-byte limit of check tensors" in no_crash(r)


def test_config_loading_is_linear_in_keys(tmp_path: Path) -> None:
    from loomcli.link.config import BindingCollector

    keys = 20000
    doc = tmp_path / "big.json"
    doc.write_text(json.dumps({f"key{i}": i for i in range(keys)}, indent=1))
    toml = tmp_path / "big.toml"
    toml.write_text("".join(f"key{i} = {i}\n" for i in range(keys)))
    for path in (doc, toml):
        c = BindingCollector()
        c.add_file(str(path), path.name)
        bindings = c.result()
        assert len(bindings.bindings) == keys and not c.diags
        assert bindings.get("key19999").loc == ((keys + 1 if path is doc else keys), 2 if path is doc else 1)


# ---------------------------------------------------------------- 5. exit codes and messages


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f"], ids=["nul", "esc", "del"])
def test_invalid_control_characters_are_escaped_in_the_message(char: str) -> None:
    """The message named a NUL or ESC token raw (the source line after it
    stays verbatim, as section 14 wants)."""
    with pytest.raises(CompileError) as e:
        parse_text(f"func.def @f() {{\n{char}  func.return\n}}\n", "k.loom")
    (d,) = e.value.diagnostics
    assert (d.code, d.line, d.column) == ("PARSE/004", 2, 1)
    assert d.message == f"invalid token `\\x{ord(char):02x}`"


def test_integer_literals_past_the_digit_limit(tmp_path: Path) -> None:
    digits = "1" * 5000
    src = tmp_path / "big.loom"
    src.write_text(f"config.def @a = {digits} : index\n")
    r = loom("fmt", str(src))
    assert r.returncode == 1 and b"PARSE/004" in r.stderr
    no_crash(r)
    for cfg in (f'{{"a": {digits}}}', f"a = {digits}\n"):
        f = tmp_path / ("c.json" if cfg.startswith("{") else "c.toml")
        f.write_text(cfg)
        r = loom("compile", str(SAXPY), "-o", str(tmp_path / "o.loombc"), "--config-file", str(f))
        assert r.returncode == 1 and b"CONFIG/001" in r.stderr, r.stderr
    r = loom("compile", str(SAXPY), "-o", str(tmp_path / "o.spv"), "--emit-launch-config", str(tmp_path / "x"),
             "--target", "spirv:vulkan1.3", "--config", f"a={digits}")
    no_crash(r)
    launch = tmp_path / "l.loombc"
    r = loom("compile", str(SAXPY), "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "s.spv"),
             "--emit-launch-config", str(launch))
    assert r.returncode == 0, r.stderr
    r = loom("launch-eval", str(launch), "@saxpy", digits)
    assert r.returncode == 1 and b"LAUNCH_CONFIG/004" in r.stderr
    no_crash(r)


# A module whose kernel reads an f64 config key, for the value-range tests below.
F64_CONFIG_KERNEL = """config.decl @scale : f64
kernel.def export("k") @k() {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%v: buffer) {
  %zero = index.constant 0 : offset
  %o = buffer.view %v[%zero] : buffer -> view<1xf64>
  %i = index.constant 0 : index
  %s = config.get @scale : f64
  view.store %s, %o[%i] : f64, view<1xf64>
  kernel.return
}
"""
HUGE_INTEGER = "1" + "0" * 400  # fits Python's int, not f64


@pytest.mark.parametrize("name, text, binds", [
    ("c.json", '{"scale": 1e309}', None),
    ("c.json", '{"scale": -2e308}', None),
    ("c.toml", "scale = 1e309\n", None),
    ("c.toml", "scale = -inf\n", float("-inf")),   # TOML's own spelling of infinity
    ("c.json", '{"scale": 1.5e308}', 1.5e308),
], ids=["json-overflow", "json-negative-overflow", "toml-overflow", "toml-inf", "json-finite"])
def test_config_file_floats_past_f64_are_config_001(tmp_path: Path, name: str, text: str,
                                                       binds: float | None) -> None:
    """A finite number past f64's range read as infinity and bound as if `inf`
    had been written (section 17.5 rejects such a literal in text)."""
    from loomcli.link.config import BindingCollector

    f = tmp_path / name
    f.write_text(text)
    c = BindingCollector()
    if binds is None:
        with pytest.raises(CompileError) as e:
            c.add_file(str(f), name)
        assert [d.code for d in e.value.diagnostics] == ["CONFIG/001"]
    else:
        c.add_file(str(f), name)
        assert c.result().get("scale").value == binds


@pytest.mark.parametrize("name, text, shown", [
    ("c.json", '{"scale": null}', "null"),
    ("c.json", '{"scale": [null, 1]}', "[null, 1]"),
    ("c.toml", "scale = 1979-05-27\n", "1979-05-27"),
    ("c.toml", "scale = 07:32:00\n", "07:32:00"),
], ids=["json-null", "json-list-of-null", "toml-date", "toml-time"])
def test_config_values_that_are_no_literal_are_config_001(tmp_path: Path, name: str, text: str, shown: str) -> None:
    """JSON null and TOML dates and times ended in an internal TypeError
    (the CONFIG/001 message could not print them)."""
    src = tmp_path / "k.loom"
    src.write_text(F64_CONFIG_KERNEL)
    f = tmp_path / name
    f.write_text(text)
    r = loom("compile", str(src), "-o", str(tmp_path / "o.loombc"), "--config-file", str(f))
    err = no_crash(r)
    assert r.returncode == 1 and f"error [CONFIG/001]: cannot bind `{shown}` to `@scale` : f64" in err, err


@pytest.mark.parametrize("how", ["json", "toml", "text"])
def test_config_values_a_float_key_cannot_hold_are_config_001(tmp_path: Path, how: str) -> None:
    """An integer past f64's range bound to a float key was an internal
    OverflowError (`float(value)` in bind.coerce); `--config scale=1e309`
    bound infinity."""
    src = tmp_path / "k.loom"
    src.write_text(F64_CONFIG_KERNEL)
    args = ["compile", str(src), "-o", str(tmp_path / "o.loombc")]
    if how == "text":
        args += ["--config", "scale=1e309"]
    else:
        f = tmp_path / f"c.{how}"
        f.write_text(f'{{"scale": {HUGE_INTEGER}}}' if how == "json" else f"scale = {HUGE_INTEGER}\n")
        args += ["--config-file", str(f)]
    r = loom(*args)
    no_crash(r)
    assert r.returncode == 1 and b"CONFIG/001" in r.stderr, r.stderr


@pytest.mark.parametrize("name, text", [
    ("deep.json", '{"a": ' * 100000 + "1" + "}" * 100000),
    ("deep.toml", "a = " + "[" * 100000 + "]" * 100000),
], ids=["json", "toml"])
def test_deeply_nested_config_files(tmp_path: Path, name: str, text: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    r = loom("compile", str(SAXPY), "-o", str(tmp_path / "o.loombc"), "--config-file", str(f))
    assert r.returncode == 1 and b"CONFIG/001" in r.stderr
    no_crash(r)


def _nest(depth: int) -> str:
    return ("command.program.def public @run() launch() {\n" + "command.serial {\n" * depth + "}\n" * depth
            + "command.return\n}\n")


def test_parser_and_bytecode_nesting_limits_agree(tmp_path: Path) -> None:
    ok = parse_text(_nest(254), "deep.loom")
    assert print_module(read_module(write_module(ok))) == print_module(ok)
    for depth in (255, 400):
        with pytest.raises(CompileError, match="too deep a nest"):
            parse_text(_nest(depth), "deep.loom")


def test_long_export_name_on_spirv(tmp_path: Path) -> None:
    src = tmp_path / "long.loom"
    src.write_text(SAXPY.read_text().replace('export("saxpy")', 'export("' + "s" * 300000 + '")'))
    r = loom("compile", str(src), "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "l.spv"))
    assert r.returncode == 1 and b"TARGET/005" in r.stderr and b"entry point name of 300000 bytes" in r.stderr
    no_crash(r)


def test_long_value_names_reach_llvm(tmp_path: Path) -> None:
    import re

    text = SAXPY.read_text()
    for name in sorted(set(re.findall(r"%([A-Za-z_]\w*)", text)), key=len, reverse=True):
        text = re.sub(rf"%{name}\b", f"%{name}{'_' * 1100}{name}", text)
    src = tmp_path / "names.loom"
    src.write_text(text)
    r = loom("compile", str(src), "--target", "amdgpu:gfx1100", "-o", str(tmp_path / "n.s"))
    assert r.returncode == 0, r.stderr.decode()[-2000:]


def _launch_artifact(tmp_path: Path) -> bytes:
    out = tmp_path / "a.launch.loombc"
    r = loom("compile", str(SAXPY), "--target", "amdgpu:gfx1100", "-o", str(tmp_path / "a.ll"),
             "--emit-launch-config", str(out))
    assert r.returncode == 0, r.stderr.decode()
    return out.read_bytes()


@pytest.mark.parametrize("old, new", [
    ("gfx1100", "gfx9999"),   # an unknown target record kind: the file is at fault, not the command line
    ("sig", "gis"),           # a kernel without its signature
    ("launch", "lunch"),
    ("saxpy", "saxpy2"),      # the kernel no longer matches its facts
])
def test_malformed_launch_config_artifacts(tmp_path: Path, old: str, new: str) -> None:
    data = _launch_artifact(tmp_path)
    bad = tmp_path / "bad.launch.loombc"
    bad.write_bytes(replace_string(data, old, new))
    r = loom("launch-eval", str(bad), "@saxpy", "64")
    assert r.returncode == 1, r.stderr.decode()
    no_crash(r)


def test_closed_stdout(tmp_path: Path) -> None:
    for argv in (["fmt", str(SAXPY)], ["fmt", str(SAXPY), "--to", "text", "-o", "-"]):
        r = loom(*argv, stdout=None, capture_output=False, stderr=subprocess.PIPE, pass_fds=(),
                 preexec_fn=lambda: os.close(1))
        assert r.returncode == 3
        assert r.stderr.decode().strip() == "loom: error: standard output is closed"


def test_json_diagnostics_from_compile_and_link(tmp_path: Path) -> None:
    bad = tmp_path / "bad.loom"
    bad.write_text("kernel.def @k() {\n  %x = index.add %y, %y : index\n")
    for argv in (["compile", str(bad), "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "x.spv")],
                 ["link", str(bad), "-o", str(tmp_path / "x.loom")]):
        for flag in (["--diagnostics=json"], ["--diagnostics", "json"]):
            r = loom(*argv, *flag)
            assert r.returncode == 1
            diag = json.loads(r.stderr.decode().splitlines()[0])
            assert diag["code"].startswith("PARSE/") and diag["file"].endswith("bad.loom")


def test_dash_is_standard_input(tmp_path: Path) -> None:
    text = SAXPY.read_bytes()
    r = loom("fmt", "-", stdin=text)
    assert r.returncode == 0 and r.stdout == text
    r = loom("fmt", "-", "--to", "bc", "-o", str(tmp_path / "s.loombc"), stdin=text)
    assert r.returncode == 0 and (tmp_path / "s.loombc").read_bytes().startswith(b"LOOMBC")
    r = loom("compile", "-", "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "s.spv"), stdin=text)
    assert r.returncode == 0, r.stderr.decode()
    r = loom("fmt", "-", stdin=b"kernel.def @k(")
    assert r.returncode == 1 and r.stderr.decode().startswith("<stdin>:1:")


def test_loom_test_on_a_file_that_does_not_parse(tmp_path: Path) -> None:
    bad = tmp_path / "bad.loom"
    bad.write_text("check.case @c {\n  %x =\n}\n")
    r = loom("test", str(bad), "--device", "interpreter")
    assert r.returncode == 1
    assert b"error [PARSE/003]" in r.stderr
    assert r.stdout.decode().splitlines()[-1] == "0 passed, 0 failed, 1 file did not compile"


# ---------------------------------------------------------------- the fuzz run


def test_fuzz_every_command() -> None:
    """Mutated text and bytecode through fmt, compile to every format and
    launch-eval: only diagnostics (exit 1) or valid outputs, never internal."""
    tally = fuzz_hostile.fuzz(36, seed=11)
    assert tally.inputs == 36 and tally.runs > 200
    assert not tally.findings, "\n\n".join(f"{' '.join(f.argv)}\n{f.detail}" for f in tally.findings[:5])
