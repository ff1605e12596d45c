#!/usr/bin/env python3
"""Hostile-input fuzzing: mutated text and bytecode through every command.

Seeds are the bundled samples (text), their compiled bytecode (with and
without a target) and their launch-config artifacts. Each mutant goes
through the same commands a user would run - `fmt --to text`, `fmt --to bc`,
`compile` to every format of every family, `launch-eval` - in this process,
through the CLI's own entry point, so exit codes and messages are what a
user sees. A finding is any run that ends in an internal error (exit 3 with
`internal`), a traceback, an exit code other than 0/1, or a verified module
whose canonical text does not parse back to the same text.

    python3 scripts/fuzz_hostile.py --count 2000 --seed 1
    python3 scripts/fuzz_hostile.py --npy --count 100000   # the .npy reader of check.generate.file

With `--builds`, whole builds are attacked instead (scripts/attack_builds.py:
concurrent builds sharing a cache under SIGKILL, a disk full from every
opening for writing, a full tmpfs, strace's ENOSPC injection, hostile cache
entries, counters, bookkeeping and environment values), `--rounds` sizing
each experiment:

    python3 scripts/fuzz_hostile.py --builds --rounds 40 --seed 1

The test suite runs small, fixed-seed slices of both (tests/test_hostile.py,
tests/test_hostile_build.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loomcli.bytecode import layout as L  # noqa: E402
from loomcli.bytecode.reader import _uv  # noqa: E402  (the reader's own varint decoding)
from loomcli.bytecode.writer import _uv as write_uv  # noqa: E402

# Strings spliced into string tables and text: enum words of the wrong set,
# LLVM and SPIR-V injection attempts, names the lexer would not accept.
HOSTILE_STRINGS = [
    "eq i32 0, 0 ;", 'call void asm sideeffect "s_trap 2", ""()', "ult", "slt", "oeq", "nsw", "fast",
    "workgroup", "private", "global", "x", "w", "relaxed", "addf", "xchgi", "gfx1100", "gfx9999",
    "vulkan1_3", "index", "f32", "i1", "buffer", "view", "vector", "", " ", "a b", "%x", "@f", "1x",
    "0", "-1", "a-", "a->b", "$", "\n", "//", "\"", "\\", "é", "\x00", "x" * 5000, "true", "nan",
    "kernel.def", "scf.yield", "func.return", "range", "pow2", "sig", "launch", "value", "kind", "predicate",
    "export", "retain", "public", "callee", "nworkload", "indices", "flags", "dict", "type", "sym",
]

FRAGMENTS = [
    "%x", "%0", "@f", "index", "offset", "i1", "f32", "buffer", "view<4xf32>", "vector<8xf32>",
    "vector<65536xf32>", "vector<0xf32>", "tensor<2x[%n]xi8>", "0", "-1", "1" * 5000, "18446744073709551616",
    "1.5", "nan", "true", '"s"', "(", ")", "[", "]", "{", "}", "<", ">", "=", ":", ",", "->", "\n",
    "scf.yield", "kernel.return", "where", "align(16)", "buffer.alloca<private> align(16)",
    "[range(%n, 1, 2)]", "} else {", "scf.for %i = [%a to %b step %c] {", "x" * 300,
]

COMMANDS = (
    ("fmt", "--to", "text", "{in}", "-o", "{out}.loom"),
    ("fmt", "--to", "bc", "{in}", "-o", "{out}.loombc"),
    ("compile", "{in}", "-o", "{out}.loombc"),
    ("compile", "{in}", "--target", "spirv:vulkan1.3", "-o", "{out}.spv", "--emit-launch-config",
     "{out}.spirv.launch.loombc", "--manifest", "{out}.spirv.json"),
    ("compile", "{in}", "--target", "amdgpu:gfx1100", "-o", "{out}.ll"),
    ("compile", "{in}", "--target", "amdgpu:gfx1100", "-o", "{out}.hsaco", "--emit-launch-config",
     "{out}.amdgpu.launch.loombc", "--manifest", "{out}.amdgpu.json"),
    ("compile", "{in}", "--target", "amdgpu:gfx1100", "-o", "{out}.s"),
    ("compile", "{in}", "--target", "spirv:vulkan1.3", "-o", "{out}.s"),
)


@dataclass
class Finding:
    what: str
    argv: list[str]
    detail: str


@dataclass
class Tally:
    inputs: int = 0
    runs: int = 0
    exits: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)


# ---------------------------------------------------------------- seeds


def seeds() -> tuple[list[tuple[str, str]], list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """(text seeds, bytecode seeds, launch-config artifacts), all from samples/."""
    from loomcli.bytecode import write_module
    from loomcli.emit.artifacts import launch_config
    from loomcli.frontend import parse_text
    from loomcli.service.front import CompileOptions, compile_module
    from loomcli.targets.profiles import parse_target

    texts, codes, launches = [], [], []
    for path in sorted((ROOT / "samples").glob("*.loom")):
        text = path.read_text(encoding="utf-8")
        texts.append((path.name, text))
        codes.append((path.name, write_module(parse_text(text, path.name))))
        for target in ("spirv:vulkan1.3", "amdgpu:gfx1100"):
            profile = parse_target(target)
            try:
                compiled = compile_module(CompileOptions(input=str(path), profile=profile))
            except Exception:  # a sample that needs --config: its source seeds suffice
                continue
            codes.append((f"{path.name}:{target}", write_module(compiled.module, keep_debug=False)))
            launches.append((f"{path.name}:{target}", launch_config(compiled.module, profile)))
    return texts, codes, launches


# ---------------------------------------------------------------- mutations


def split_strings(data: bytes) -> tuple[bytes, list[bytes], bytes]:
    """(header before the string table, the strings, everything after)."""
    pos = len(L.MAGIC)
    _, pos = _uv(data, pos)
    _, pos = _uv(data, pos)
    head = data[:pos]
    n, pos = _uv(data, pos)
    lengths = []
    for _ in range(n):
        k, pos = _uv(data, pos)
        lengths.append(k)
    strings = []
    for k in lengths:
        strings.append(data[pos:pos + k])
        pos += k
    return head, strings, data[pos:]


def join_strings(head: bytes, strings: list[bytes], tail: bytes) -> bytes:
    table = bytearray()
    for k in (len(strings), *map(len, strings)):
        write_uv(table, k)
    return head + bytes(table) + b"".join(strings) + tail


def mutate_bytecode(rng: random.Random, data: bytes) -> bytes:
    """Rewrite strings of the string table (the payloads keep their indices,
    so the file stays well-formed and reaches every later stage), or
    overwrite payload bytes."""
    head, strings, tail = split_strings(data)
    if rng.random() < 0.7 and strings:
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            i = rng.randrange(len(strings))
            pick = rng.random()
            if pick < 0.5:
                new = rng.choice(HOSTILE_STRINGS)
            elif pick < 0.8:
                new = strings[rng.randrange(len(strings))].decode("utf-8", "replace")
            else:
                old = strings[i].decode("utf-8", "replace")
                new = old + rng.choice(HOSTILE_STRINGS) if rng.random() < 0.5 else old[: rng.randrange(len(old) + 1)]
            strings[i] = new.encode()
        return join_strings(head, strings, tail)
    body = bytearray(tail)
    for _ in range(rng.choice((1, 1, 2, 4))):
        if not body:
            break
        i = rng.randrange(len(body))
        body[i] = rng.choice((0, 1, 2, 3, 0x7F, 0x80, 0xFF, rng.randrange(256), body[i] ^ (1 << rng.randrange(8))))
    return join_strings(head, strings, bytes(body))


def mutate_text(rng: random.Random, text: str) -> str:
    for _ in range(rng.choice((1, 1, 2, 3))):
        i = rng.randrange(len(text) + 1)
        pick = rng.random()
        if pick < 0.5:
            text = text[:i] + rng.choice(FRAGMENTS) + text[i:]
        elif pick < 0.8:
            j = min(len(text), i + rng.randrange(1, 12))
            text = text[:i] + text[j:]
        else:
            j = rng.randrange(len(text) + 1)
            text = text[:i] + text[j:j + rng.randrange(1, 40)] + text[i:]
    return text


# ---------------------------------------------------------------- running


@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    err = io.StringIO()
    out = io.BytesIO()
    saved = sys.stdout, sys.stderr
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8")
    sys.stderr = err
    try:
        yield err
    finally:
        sys.stdout, sys.stderr = saved


def run_cli(argv: list[str]) -> tuple[int, str]:
    """`loom argv` in this process: (exit code, stderr)."""
    from loomcli.cli import main

    with _captured() as err:
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException as e:  # a crash is a finding, not the fuzzer's end
            import traceback

            return 99, traceback.format_exc() + repr(e)
    return code, err.getvalue()


def _judge(tally: Tally, argv: list[str], code: int, err: str) -> None:
    tally.runs += 1
    tally.exits[code] += 1
    if code == 2 and "needs --target" in err:  # a mutant that lost its artifact marker reads as a source
        return
    if code not in (0, 1) or "error: internal" in err or "Traceback" in err:
        tally.findings.append(Finding(f"exit {code}", argv, err.strip()[-2000:]))


def round_trip(data: bytes, tally: Tally, name: str) -> None:
    """A module that verifies prints as text that parses back to the same text."""
    from loomcli.diagnostics import CompileError
    from loomcli.frontend import load_bytes, parse_text
    from loomcli.text.printer import print_module

    try:
        module = load_bytes(data, name)
    except CompileError:
        return
    except Exception:  # any other exception is a crash the commands would show too: record it, go on
        import traceback

        tally.findings.append(Finding("load crash", [name], traceback.format_exc()[-2000:]))
        return
    text = print_module(module)
    try:
        again = print_module(parse_text(text, name))
    except CompileError as e:
        tally.findings.append(Finding("round trip", [name], f"{e.diagnostics[0].render(text)}\n{text[:3000]}"))
        return
    if again != text:
        tally.findings.append(Finding("round trip", [name], "printed text changed on re-parsing"))


def run_input(data: bytes, suffix: str, folder: str, tally: Tally, launch: bool, commands=COMMANDS) -> None:
    tally.inputs += 1
    src = os.path.join(folder, "input" + suffix)
    with open(src, "wb") as f:
        f.write(data)
    out = os.path.join(folder, "out")
    round_trip(data, tally, src)
    if launch:
        for workload in (["64"], ["1", "2", "3"], []):
            for export in ("@saxpy", "@grid", "@k", "@reduce"):
                argv = ["launch-eval", src, export, *workload]
                _judge(tally, argv, *run_cli(argv))
        return
    for template in commands:
        argv = [a.format(**{"in": src, "out": out}) for a in template]
        _judge(tally, argv, *run_cli(argv))
    for name in os.listdir(folder):
        if name != os.path.basename(src):
            os.unlink(os.path.join(folder, name))


def fuzz(count: int, seed: int, commands=COMMANDS, deadline: float | None = None) -> Tally:
    rng = random.Random(seed)
    texts, codes, launches = seeds()
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="loom-fuzz-") as folder:
        for i in range(count):
            if deadline is not None and time.monotonic() > deadline:
                break
            kind = i % 3
            if kind == 0:
                _, text = rng.choice(texts)
                run_input(mutate_text(rng, text).encode("utf-8", "surrogatepass"), ".loom", folder, tally, False,
                          commands)
            elif kind == 1:
                _, data = rng.choice(codes)
                run_input(mutate_bytecode(rng, data), ".loombc", folder, tally, False, commands)
            else:
                _, data = rng.choice(launches)
                run_input(mutate_bytecode(rng, data), ".loombc", folder, tally, True, commands)
    return tally


# .npy check data (loomcli.check.npy): seeds of every element type and version.
NPY_HEADERS = ["{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
               "{'descr': '|b1', 'fortran_order': False, 'shape': (6,), }",
               "{'descr': '<i8', 'fortran_order': True, 'shape': (3, 2), }",
               "{'descr': '<u2', 'fortran_order': False, 'shape': (), }"]
NPY_SPLICES = [b"'", b'"', b"(", b")", b"{", b"}", b",", b":", b"True", b"False", b"\\", b"\x00", b"\xff",
               b"99999999999999999999", b"-1", b"__import__('os')", b"'descr'", b"'shape'", b"[('a', '<f4')]",
               b"(" * 500, b"\n", "é".encode()]


def npy_seed(header: str, version: int, payload_bytes: int) -> bytes:
    width = 2 if version == 1 else 4
    raw = header.encode() + b"\n"
    return (b"\x93NUMPY" + bytes((version, 0)) + len(raw).to_bytes(width, "little") + raw
            + bytes(range(256)) * (payload_bytes // 256) + bytes(payload_bytes % 256))


def mutate_npy(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        at = rng.randrange(len(b) + 1)
        if choice < 0.3 and b:
            b[min(at, len(b) - 1)] = rng.randrange(256)
        elif choice < 0.5:
            del b[at:at + rng.randint(1, 16)]
        elif choice < 0.8:
            b[at:at] = rng.choice(NPY_SPLICES)
        else:
            b[8:10] = rng.randrange(1 << 16).to_bytes(2, "little")   # the header length
    return bytes(b)


def fuzz_npy(count: int, seed: int) -> list[str]:
    """Mutated .npy files through the reader, for every element type and a
    few shapes: each must read or be refused with a DataFileError; anything
    else is a finding (its repr)."""
    from loomcli.check.npy import DTYPES, DataFileError, parse_npy

    rng = random.Random(seed)
    seeds = [npy_seed(h, v, n) for h in NPY_HEADERS for v in (1, 2, 3) for n in (0, 6, 24, 48)]
    shapes = [(2, 3), (6,), (3, 2), (), (0,), (1 << 40, 1 << 40)]
    findings = []
    for _ in range(count):
        data = mutate_npy(rng, rng.choice(seeds))
        elem, shape = rng.choice(sorted(DTYPES)), rng.choice(shapes)
        try:
            parse_npy(data, elem, shape)
        except DataFileError:
            pass
        except Exception as e:  # any other exception is what the fuzzer looks for
            findings.append(f"{type(e).__name__}: {e} on {elem} {shape}: {data[:120]!r}")
    return findings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=300, help="mutants to try (default 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=10, help="findings to print in full")
    ap.add_argument("--npy", action="store_true", help="fuzz the .npy reader of check.generate.file instead")
    ap.add_argument("--builds", action="store_true", help="attack whole builds (scripts/attack_builds.py)")
    ap.add_argument("--rounds", type=int, default=10, help="with --builds: the size of each experiment")
    args = ap.parse_args()
    if args.builds:
        return attack_builds(args.rounds, args.seed, args.show)
    if args.npy:
        found = fuzz_npy(args.count, args.seed)
        print(f"npy inputs {args.count}, findings {len(found)}")
        for line in found[: args.show]:
            print("  " + line)
        return 1 if found else 0
    os.environ.setdefault("LOOM_DEBUG", "0")
    start = time.monotonic()
    tally = fuzz(args.count, args.seed)
    took = time.monotonic() - start
    print(f"inputs {tally.inputs}, command runs {tally.runs}, {took:.0f} s; exit codes {dict(tally.exits)}")
    kinds = Counter((f.what, f.detail.strip().splitlines()[-1][:160] if f.detail.strip() else "")
                    for f in tally.findings)
    print(f"findings {len(tally.findings)} ({len(kinds)} distinct)")
    for (what, last), n in kinds.most_common():
        print(f"  {n:5d}  {what}: {last}")
    for f in tally.findings[: args.show]:
        print("-" * 60)
        print(" ".join(f.argv))
        print(f.detail)
    return 1 if tally.findings else 0


def attack_builds(rounds: int, seed: int, show: int) -> int:
    sys.path.insert(0, str(ROOT / "scripts"))
    import attack_builds as attacks

    start = time.monotonic()
    figures = attacks.attack(rounds, seed)
    print(f"all: {figures.line()} in {time.monotonic() - start:.0f} s")
    for finding in figures.findings[:show]:
        print("-" * 60)
        print(finding)
    return 1 if figures.findings else 0


if __name__ == "__main__":
    sys.exit(main())
