#!/usr/bin/env python3
"""Differential fuzzer: random well-defined Loom v1 kernels, run on the
reference interpreter and on Vulkan, compared.

    python scripts/fuzz_kernels.py --seed S --count N [--keep DIR] [-v]
                                   [--compile-for nvptx:sm_90 ...]

`--compile-for TARGET` (repeatable) also compiles each kernel for a target
no device here runs (nvptx, amdgpu) to its native artifact, with `ptxas`
assembling nvptx's PTX into a cubin when it is installed: a well-defined
kernel that does not compile counts as a mismatch. That covers those
targets' instruction selection with the same kernels, short of running them.

Prints `N kernels, M mismatches` and exits 1 on any mismatch (2 on bad
usage, 3 when no Vulkan device is usable). Kernel k of seed S is generated
from `random.Random(f"{S}:{k}")`, so a mismatch is reproduced by its seed
and index alone (`--first k --count 1`), and `--keep DIR` writes each
mismatching kernel there as a `.loom` file.

Kernels are well-defined by construction (LANGUAGE.md sections 5-9):
divisions are guarded against zero and INT_MIN / -1, shift amounts are
masked, float-to-integer conversions see clamped, NaN-free operands,
indices are reduced into bounds, loops are bounded (scf.for with constant
trips, scf.while with a data-dependent exit and a trip limit), and the one
barrier sits at the kernel's top level. They cover every integer width,
f16/bf16/f32/f64, casts, bitcasts, selects, comparisons, loops, subviews
and workgroup memory.

Comparison is exact: every result is stored as its bit pattern, NaNs first
made canonical in the kernel (a NaN made by arithmetic has no specified
sign or payload), so -0.0 and +0.0 differ. `fmaf` is left out (Vulkan does
not require it fused; the conformance suite covers it). Transcendental
functions go to a separate output compared within 4 ulp of their type.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INTS = (8, 16, 32, 64)
FLOATS = ("f16", "bf16", "f32", "f64")
WIDTH = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64}
LANES = 32          # invocations (one workgroup)
INPUTS = 8          # i64 inputs per invocation
RESULTS = 8         # exact results per invocation
APPROX = 4          # transcendental results per invocation
APPROX_ULPS = 4


@dataclass
class V:
    name: str
    type: str
    bits_known: bool = True   # floats: False when arithmetic may have made a NaN of unspecified bits


class Gen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.n = 0
        self.indent = "  "

    def fresh(self, base: str = "v") -> str:
        self.n += 1
        return f"%{base}{self.n}"

    def emit(self, text: str) -> None:
        self.lines.append(self.indent + text)

    def const(self, t: str, value: Any) -> str:
        v = self.fresh("c")
        self.emit(f"{v} = scalar.constant {value} : {t}")
        return v

    # ---------------------------------------------------------------- values

    def pick(self, pool: list[V], pred: Any = None) -> V | None:
        cands = [v for v in pool if pred is None or pred(v)]
        if not cands:
            return None
        # favour recent values so expressions grow deep
        k = min(len(cands) - 1, int(self.rng.expovariate(0.25)))
        return cands[-1 - k]

    def of_type(self, pool: list[V], t: str) -> V:
        v = self.pick(pool, lambda x: x.type == t)
        return v if v is not None else self.convert(pool, t)

    def convert(self, pool: list[V], t: str) -> V:
        """Some value of type t, made from an i64 input."""
        src = self.pick(pool, lambda x: x.type == "i64")
        assert src is not None
        out = self.fresh()
        if t.startswith("i"):
            if t == "i64":
                return src
            self.emit(f"{out} = scalar.trunci {src.name} : i64 to {t}")
            return V(out, t)
        w = WIDTH[t]
        if self.rng.random() < 0.5:
            bits = src.name
            if w != 64:
                bits = self.fresh()
                self.emit(f"{bits} = scalar.trunci {src.name} : i64 to i{w}")
            self.emit(f"{out} = scalar.bitcast {bits} : i{w} to {t}")
        else:
            small = self.fresh()
            self.emit(f"{small} = scalar.trunci {src.name} : i64 to i16")
            self.emit(f"{out} = scalar.sitofp {small} : i16 to {t}")
        return V(out, t)

    # ---------------------------------------------------------------- ops

    def int_op(self, pool: list[V]) -> V:
        n = self.rng.choice(INTS)
        t = f"i{n}"
        a, b = self.of_type(pool, t), self.of_type(pool, t)
        op = self.rng.choice(["addi", "subi", "muli", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui",
                              "divsi", "remsi", "divui", "remui", "shli", "shrsi", "shrui"])
        bn = b.name
        if op in ("divsi", "remsi", "divui", "remui"):
            zero, one = self.const(t, 0), self.const(t, 1)
            isz, safe = self.fresh(), self.fresh()
            self.emit(f"{isz} = scalar.cmpi eq, {bn}, {zero} : {t}")
            self.emit(f"{safe} = scalar.select {isz}, {one}, {bn} : {t}".replace("scalar.select", "scf.select"))
            bn = safe
            if op in ("divsi", "remsi"):
                lo, m1 = self.const(t, -(1 << (n - 1))), self.const(t, -1)
                c1, c2, both, safe2 = self.fresh(), self.fresh(), self.fresh(), self.fresh()
                self.emit(f"{c1} = scalar.cmpi eq, {a.name}, {lo} : {t}")
                self.emit(f"{c2} = scalar.cmpi eq, {bn}, {m1} : {t}")
                self.emit(f"{both} = scalar.andi {c1}, {c2} : i1")
                self.emit(f"{safe2} = scf.select {both}, {one}, {bn} : {t}")
                bn = safe2
        elif op in ("shli", "shrsi", "shrui"):
            m = self.const(t, n - 1)
            amt = self.fresh()
            self.emit(f"{amt} = scalar.andi {bn}, {m} : {t}")
            bn = amt
        r = self.fresh()
        self.emit(f"{r} = scalar.{op} {a.name}, {bn} : {t}")
        return V(r, t)

    def float_op(self, pool: list[V]) -> V:
        t = self.rng.choice(FLOATS)
        a = self.of_type(pool, t)
        r = self.fresh()
        if self.rng.random() < 0.25:
            op = self.rng.choice(["negf", "absf", "sqrtf", "floorf", "ceilf"])
            self.emit(f"{r} = scalar.{op} {a.name} : {t}")
            # IEEE 754 (5.5.1) has negf and absf touch only the sign bit, but Vulkan lets any
            # float instruction quiet a signalling NaN (precision and operation of SPIR-V
            # instructions), and lavapipe does so for 16-bit floats, which it computes in f32.
            # So a NaN result's bits are unspecified for every op; the canonicalization
            # before each store still compares every non-NaN result, signed zeros included.
            return V(r, t, bits_known=False)
        b = self.of_type(pool, t)
        op = self.rng.choice(["addf", "subf", "mulf", "divf", "minimumf", "maximumf", "minnumf", "maxnumf"])
        self.emit(f"{r} = scalar.{op} {a.name}, {b.name} : {t}")
        return V(r, t, bits_known=False)

    def compare(self, pool: list[V]) -> V:
        r = self.fresh()
        if self.rng.random() < 0.5:
            t = f"i{self.rng.choice(INTS)}"
            a, b = self.of_type(pool, t), self.of_type(pool, t)
            pred = self.rng.choice(["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"])
            self.emit(f"{r} = scalar.cmpi {pred}, {a.name}, {b.name} : {t}")
        else:
            t = self.rng.choice(FLOATS)
            a, b = self.of_type(pool, t), self.of_type(pool, t)
            pred = self.rng.choice(["oeq", "ogt", "oge", "olt", "ole", "one", "ord",
                                    "ueq", "ugt", "uge", "ult", "ule", "une", "uno"])
            self.emit(f"{r} = scalar.cmpf {pred}, {a.name}, {b.name} : {t}")
        return V(r, "i1")

    def select(self, pool: list[V]) -> V:
        c = self.pick(pool, lambda x: x.type == "i1") or self.compare(pool)
        a = self.pick(pool, lambda x: x.type != "i1") or self.int_op(pool)
        b = self.of_type(pool, a.type)
        r = self.fresh()
        self.emit(f"{r} = scf.select {c.name}, {a.name}, {b.name} : {a.type}")
        return V(r, a.type, a.bits_known and b.bits_known)

    def cast(self, pool: list[V]) -> V:
        r = self.fresh()
        kind = self.rng.choice(["int", "tofloat", "toint", "float", "bitcast"])
        if kind == "int":
            n, m = self.rng.sample(INTS, 2)
            a = self.of_type(pool, f"i{n}")
            op = ("extsi" if self.rng.random() < 0.5 else "extui") if m > n else "trunci"
            self.emit(f"{r} = scalar.{op} {a.name} : i{n} to i{m}")
            return V(r, f"i{m}")
        if kind == "tofloat":
            n, t = self.rng.choice(INTS), self.rng.choice(FLOATS)
            a = self.of_type(pool, f"i{n}")
            op = self.rng.choice(["sitofp", "uitofp"])
            self.emit(f"{r} = scalar.{op} {a.name} : i{n} to {t}")
            return V(r, t)
        if kind == "toint":
            t, n = self.rng.choice(FLOATS), self.rng.choice(INTS)
            a = self.of_type(pool, t)
            signed = self.rng.random() < 0.5
            lo, hi = (-100.0, 100.0) if signed else (0.0, 200.0)
            zero, clo, chi = self.const(t, 0.0), self.const(t, lo), self.const(t, hi)
            nan, clean, up, both = self.fresh(), self.fresh(), self.fresh(), self.fresh()
            self.emit(f"{nan} = scalar.cmpf uno, {a.name}, {a.name} : {t}")
            self.emit(f"{clean} = scf.select {nan}, {zero}, {a.name} : {t}")
            self.emit(f"{up} = scalar.maxnumf {clean}, {clo} : {t}")
            self.emit(f"{both} = scalar.minnumf {up}, {chi} : {t}")
            self.emit(f"{r} = scalar.{'fptosi' if signed else 'fptoui'} {both} : {t} to i{n}")
            return V(r, f"i{n}")
        if kind == "float":
            small, big = self.rng.choice([("f16", "f32"), ("f16", "f64"), ("bf16", "f32"), ("bf16", "f64"),
                                          ("f32", "f64")])
            if self.rng.random() < 0.5:
                a = self.of_type(pool, small)
                self.emit(f"{r} = scalar.extf {a.name} : {small} to {big}")
                return V(r, big, False)  # a signalling NaN is quieted
            a = self.of_type(pool, big)
            self.emit(f"{r} = scalar.fptrunc {a.name} : {big} to {small}")
            return V(r, small, False)
        t = self.rng.choice(FLOATS)
        w = WIDTH[t]
        if self.rng.random() < 0.5:
            a = self.of_type(pool, f"i{w}")
            self.emit(f"{r} = scalar.bitcast {a.name} : i{w} to {t}")
            return V(r, t)
        a = self.canonical(pool, t)
        self.emit(f"{r} = scalar.bitcast {a.name} : {t} to i{w}")
        return V(r, f"i{w}")

    def canonical(self, pool: list[V], t: str) -> V:
        """A float of type t whose bits are specified (a NaN made canonical)."""
        a = self.of_type(pool, t)
        if a.bits_known:
            return a
        nan, r = self.fresh(), self.fresh()
        c = self.const(t, "nan")
        self.emit(f"{nan} = scalar.cmpf uno, {a.name}, {a.name} : {t}")
        self.emit(f"{r} = scf.select {nan}, {c}, {a.name} : {t}")
        return V(r, t)

    # ---------------------------------------------------------------- control flow

    def block(self, pool: list[V], size: int) -> None:
        for _ in range(size):
            k = self.rng.random()
            if k < 0.35:
                pool.append(self.int_op(pool))
            elif k < 0.6:
                pool.append(self.float_op(pool))
            elif k < 0.7:
                pool.append(self.compare(pool))
            elif k < 0.8:
                pool.append(self.select(pool))
            else:
                pool.append(self.cast(pool))

    def if_op(self, pool: list[V], depth: int) -> None:
        c = self.pick(pool, lambda x: x.type == "i1") or self.compare(pool)
        t = self.rng.choice(["i32", "i64", "f32", "f16", "i8", "f64"])
        r = self.fresh()
        self.emit(f"{r} = scf.if {c.name} -> ({t}) {{")
        known = True
        for branch in (0, 1):
            if branch:
                self.emit("} else {")
            inner = list(pool)
            self.indent += "  "
            self.body(inner, depth + 1, self.rng.randint(1, 4))
            v = self.of_type(inner, t)
            known &= v.bits_known
            self.emit(f"scf.yield {v.name} : {t}")
            self.indent = self.indent[:-2]
        self.emit("}")
        pool.append(V(r, t, known))

    def for_op(self, pool: list[V], depth: int) -> None:
        t = self.rng.choice(["i32", "i16", "f32", "f64", "bf16"])
        init = self.of_type(pool, t)
        lo, hi, st = (self.fresh() for _ in range(3))
        self.emit(f"{lo} = index.constant 0 : index")
        self.emit(f"{hi} = index.constant {self.rng.randint(0, 5)} : index")
        self.emit(f"{st} = index.constant 1 : index")
        r, iv, acc = self.fresh(), self.fresh("k"), self.fresh("acc")
        self.emit(f"{r} = scf.for {iv} = [{lo} to {hi} step {st}]({acc} = {init.name} : {t}) -> ({t}) {{")
        self.indent += "  "
        inner = [*pool, V(acc, t, False)]
        self.body(inner, depth + 1, self.rng.randint(1, 4))
        v = self.of_type(inner, t)
        self.emit(f"scf.yield {v.name} : {t}")
        self.indent = self.indent[:-2]
        self.emit("}")
        pool.append(V(r, t, False))

    def while_op(self, pool: list[V], depth: int) -> None:
        """A loop with a data-dependent exit, bounded by a trip counter (at most 8)."""
        t = self.rng.choice(["i32", "i64", "f32", "f16"])
        init = self.of_type(pool, t)
        lim_src = self.of_type(pool, "i32")
        seven, zero, one = self.const("i32", 7), self.const("i32", 0), self.const("i32", 1)
        limit = self.fresh()
        self.emit(f"{limit} = scalar.andi {lim_src.name}, {seven} : i32")
        r_i, r_a, i, a, i2, a2 = (self.fresh(x) for x in ("wi", "wa", "i", "a", "i", "a"))
        self.emit(f"{r_i}, {r_a} = scf.while({i} = {zero} : i32, {a} = {init.name} : {t}) -> (i32, {t}) {{")
        self.indent += "  "
        inner = [*pool, V(i, "i32"), V(a, t, False)]
        more, data, go = self.fresh(), None, self.fresh()
        self.emit(f"{more} = scalar.cmpi slt, {i}, {limit} : i32")
        data = self.compare(inner)
        self.emit(f"{go} = scalar.andi {more}, {data.name} : i1")
        self.emit(f"scf.condition {go}, {i}, {a} : i1, i32, {t}")
        self.indent = self.indent[:-2]
        self.emit(f"}} do({i2}: i32, {a2}: {t}) {{")
        self.indent += "  "
        inner = [*pool, V(i2, "i32"), V(a2, t, False)]
        self.body(inner, depth + 1, self.rng.randint(1, 3))
        nxt, v = self.fresh(), self.of_type(inner, t)
        self.emit(f"{nxt} = scalar.addi {i2}, {one} : i32")
        self.emit(f"scf.yield {nxt}, {v.name} : i32, {t}")
        self.indent = self.indent[:-2]
        self.emit("}")
        pool += [V(r_i, "i32"), V(r_a, t, False)]

    def body(self, pool: list[V], depth: int, size: int) -> None:
        for _ in range(size):
            k = self.rng.random()
            if depth < 2 and k < 0.12:
                self.if_op(pool, depth)
            elif depth < 2 and k < 0.2:
                self.for_op(pool, depth)
            elif depth < 2 and k < 0.26:
                self.while_op(pool, depth)
            else:
                self.block(pool, 1)

    # ---------------------------------------------------------------- the kernel

    def kernel(self) -> str:
        self.emit("%o = index.constant 0 : offset")
        self.emit(f"%inv = buffer.view %in[%o] : buffer -> view<{LANES}x{INPUTS}xi64>")
        self.emit(f"%outv = buffer.view %out[%o] : buffer -> view<{LANES}x{RESULTS}xi64>")
        self.emit(f"%apv = buffer.view %approx[%o] : buffer -> view<{LANES}x{APPROX}xf64>")
        self.emit("%t = kernel.workitem.id<x> : index")
        self.emit("%c0 = index.constant 0 : index")
        # A subview: this invocation's row, read at data-dependent in-bounds columns.
        self.emit(f"%row = view.subview %inv[%t, %c0] : view<{LANES}x{INPUTS}xi64> -> view<1x{INPUTS}xi64>")
        pool: list[V] = []
        for k in range(INPUTS):
            v = self.fresh("in")
            self.emit(f"{v} = view.load %row[%c0, {k}] : view<1x{INPUTS}xi64> -> i64")
            pool.append(V(v, "i64"))
        col = self.fresh()
        mask = self.const("i64", INPUTS - 1)
        self.emit(f"{col} = scalar.andi {pool[-1].name}, {mask} : i64")
        ci = self.fresh()
        self.emit(f"{ci} = index.cast {col} : i64 to index")
        extra = self.fresh("in")
        self.emit(f"{extra} = view.load %row[%c0, {ci}] : view<1x{INPUTS}xi64> -> i64")
        pool.append(V(extra, "i64"))
        self.body(pool, 0, self.rng.randint(8, 30))
        # Workgroup memory: publish a value, barrier, read the neighbour's.
        pub = self.of_type(pool, "i64")
        self.emit("%wgbytes = index.constant 256 : offset")
        self.emit("%wg = buffer.alloca<workgroup> align(8) %wgbytes : buffer")
        self.emit(f"%wgv = buffer.view %wg[%o] : buffer -> view<{LANES}xi64>")
        self.emit(f"view.store {pub.name}, %wgv[%t] : i64, view<{LANES}xi64>")
        self.emit("kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)")
        self.emit("%c1 = index.constant 1 : index")
        self.emit(f"%cl = index.constant {LANES} : index")
        self.emit("%t1 = index.add %t, %c1 : index")
        self.emit("%nb = index.rem %t1, %cl : index")
        nb = self.fresh("nb")
        self.emit(f"{nb} = view.load %wgv[%nb] : view<{LANES}xi64> -> i64")
        pool.append(V(nb, "i64"))
        self.body(pool, 0, self.rng.randint(2, 8))
        for j in range(RESULTS):
            self.store_result(pool, j)
        for j in range(APPROX):
            self.approx(pool, j)
        header = [
            'kernel.def export("fuzz") @fuzz() {',
            "  %one = index.constant 1 : index",
            f"  %lanes = index.constant {LANES} : index",
            "  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%lanes, %one, %one) : index",
            "} launch(%in: buffer, %out: buffer, %approx: buffer) {",
        ]
        offset = self.rng.randint(-(1 << 62), 1 << 62)
        step = self.rng.randint(-(1 << 61), 1 << 61) | 1
        case = [
            "}",
            "",
            "check.case @run {",
            f"  %in = check.generate.iota offset({offset}) step({step}) : tensor<{LANES}x{INPUTS}xi64>",
            f"  %out = check.generate.fill value(0) : tensor<{LANES}x{RESULTS}xi64>",
            f"  %approx = check.generate.fill value(0.0) : tensor<{LANES}x{APPROX}xf64>",
            f"  kernel.launch @fuzz(%in, %out, %approx) : (tensor<{LANES}x{INPUTS}xi64>, "
            f"tensor<{LANES}x{RESULTS}xi64>, tensor<{LANES}x{APPROX}xf64>)",
            "  check.return",
            "}",
        ]
        return "\n".join(header + self.lines + ["  kernel.return"] + case) + "\n"

    def store_result(self, pool: list[V], j: int) -> None:
        v = self.pick(pool[INPUTS + 1:] or pool, lambda x: True) or pool[-1]
        if v.type in FLOATS:
            v = self.canonical([*pool, v], v.type) if not v.bits_known else v
            w = WIDTH[v.type]
            b = self.fresh()
            self.emit(f"{b} = scalar.bitcast {v.name} : {v.type} to i{w}")
            v = V(b, f"i{w}")
        wide = v.name
        if v.type != "i64":
            wide = self.fresh()
            self.emit(f"{wide} = scalar.extui {v.name} : {v.type} to i64")
        self.emit(f"view.store {wide}, %outv[%t, {j}] : i64, view<{LANES}x{RESULTS}xi64>")

    def approx(self, pool: list[V], j: int) -> None:
        t = self.rng.choice(["f32", "f64"])
        a = self.of_type(pool, t)
        fn = self.rng.choice(["expf", "exp2f", "logf", "log2f", "tanhf", "sinf", "cosf", "rsqrtf", "powf"])
        r = self.fresh()
        if fn == "powf":
            b = self.of_type(pool, t)
            self.emit(f"{r} = scalar.powf {a.name}, {b.name} : {t}")
        else:
            self.emit(f"{r} = scalar.{fn} {a.name} : {t}")
        wide = r
        if t == "f32":
            wide = self.fresh()
            self.emit(f"{wide} = scalar.extf {r} : f32 to f64")
        self.emit(f"view.store {wide}, %apv[%t, {j}] : f64, view<{LANES}x{APPROX}xf64>")
        self.approx_types.append(t)

    approx_types: list[str]


def generate(seed: str) -> tuple[str, list[str]]:
    g = Gen(random.Random(seed))
    g.approx_types = []
    return g.kernel(), g.approx_types


# ---------------------------------------------------------------- running


class Capture:
    """A launcher wrapper that keeps the tensors' bytes after the launch."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.outputs: list[bytes] = []

    def launch(self, op: Any, workload: list[Any], args: list[Any]) -> None:
        self.inner.launch(op, workload, args)
        self.outputs = [bytes(a.data) for a in args if hasattr(a, "data")]


def run_on(path: str, device: str, runner: Any) -> tuple[list[bytes], str]:
    """The launch's output tensors on one device, or ([], why) when it fails."""
    from loomcli.check.cases import CaseRunner
    from loomcli.diagnostics import CompileError
    from loomcli.service.front import CompileOptions, compile_module

    try:
        if device == "interpreter":
            from loomcli.check.interpreter import InterpreterLauncher
            from loomcli.targets.profiles import REFERENCE

            compiled = compile_module(CompileOptions(input=path, profile=REFERENCE, roots=["@fuzz"],
                                                     for_execution=True))
            launcher: Any = InterpreterLauncher(compiled.module, REFERENCE, path)
        else:
            from loomcli.check.launch import Program, VulkanLauncher
            from loomcli.check.session import vulkan_profile
            from loomcli.emit.artifacts import emit

            profile = vulkan_profile(None, runner)
            compiled = compile_module(CompileOptions(input=path, profile=profile, roots=["@fuzz"],
                                                     for_execution=True))
            art = emit(compiled.module, profile, "spirv-binary")
            program = Program.build(compiled.module, profile, art.data, art.kernels, target_checked=True)
            launcher = VulkanLauncher(runner, program, path)
    except CompileError as e:
        return [], "; ".join(f"{d.code} {d.message}" for d in e.diagnostics)
    capture = Capture(launcher)
    case = compiled.module.symbols().get("run")
    if case is None:
        from loomcli.frontend import load_module

        case = load_module(path).symbols()["run"]
    results = CaseRunner(compiled.module, capture, path=path).run_case(case)
    failed = [d for r in results for d in r.diagnostics if d.severity == "error"]
    if failed:
        return [], "; ".join(f"{d.code} {d.message}" for d in failed)
    return capture.outputs, ""


def compile_for(path: str, target: str) -> str:
    """'' when `path` compiles for `target` to its native artifact (a cubin for
    nvptx when ptxas exists), else why not."""
    from loomcli.diagnostics import CompileError
    from loomcli.emit import backend_for
    from loomcli.emit.artifacts import emit
    from loomcli.errors import LoomError
    from loomcli.service.front import CompileOptions, compile_module
    from loomcli.targets.profiles import parse_target

    profile = parse_target(target)
    fmt = backend_for(profile).native_format
    if profile.family == "nvptx":
        from loomcli.emit.nvptx.ptxas import find_ptxas

        fmt = "nvptx-cubin" if find_ptxas() else fmt
    try:
        compiled = compile_module(CompileOptions(input=path, profile=profile, roots=["@fuzz"], for_execution=True))
        art = emit(compiled.module, profile, fmt)
    except CompileError as e:
        return "; ".join(f"{d.code} {d.message}" for d in e.diagnostics)
    except LoomError as e:
        return str(e)
    return "" if art.data else "empty artifact"


def ulp_distance(t: str, a: float, b: float) -> int:
    fmt = "<f" if t == "f32" else "<d"
    ifmt = "<i" if t == "f32" else "<q"

    def ordered(x: float) -> int:
        u = struct.unpack(ifmt, struct.pack(fmt, x))[0]
        return u if u >= 0 else -(u & ((1 << (31 if t == "f32" else 63)) - 1))
    return abs(ordered(a) - ordered(b))


def compare(a: list[bytes], b: list[bytes], approx_types: list[str]) -> str:
    """'' when the devices agree, else where they first differ."""
    exact_a, exact_b = a[1], b[1]
    if exact_a != exact_b:
        xs = struct.unpack(f"<{LANES * RESULTS}Q", exact_a)
        ys = struct.unpack(f"<{LANES * RESULTS}Q", exact_b)
        k = next(i for i in range(len(xs)) if xs[i] != ys[i])
        return f"result [{k // RESULTS}][{k % RESULTS}]: interpreter 0x{xs[k]:x}, vulkan 0x{ys[k]:x}"
    xs = struct.unpack(f"<{LANES * APPROX}d", a[2])
    ys = struct.unpack(f"<{LANES * APPROX}d", b[2])
    for k, (x, y) in enumerate(zip(xs, ys)):
        t = approx_types[k % APPROX]
        if (math.isnan(x) and math.isnan(y)) or x == y:
            continue
        if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y) or \
                ulp_distance(t, x, y) > APPROX_ULPS:
            return f"approx [{k // APPROX}][{k % APPROX}] ({t}): interpreter {x!r}, vulkan {y!r}"
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--first", type=int, default=0, help="index of the first kernel (to reproduce one)")
    ap.add_argument("--keep", metavar="DIR", help="write mismatching kernels here")
    ap.add_argument("--compile-for", action="append", default=[], metavar="TARGET",
                    help="also compile each kernel for this target (repeatable)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from loomcli.check.vulkan import VulkanRunner, VulkanUnavailable

    try:
        runner = VulkanRunner()
    except VulkanUnavailable as e:
        print(f"fuzz_kernels: no Vulkan device: {e}", file=sys.stderr)
        return 3
    mismatches = 0
    with tempfile.TemporaryDirectory(prefix="loom-fuzz-") as tmp:
        for k in range(args.first, args.first + args.count):
            text, approx_types = generate(f"{args.seed}:{k}")
            path = os.path.join(tmp, f"fuzz_{k}.loom")
            Path(path).write_text(text)
            a, why_a = run_on(path, "interpreter", runner)
            b, why_b = run_on(path, "vulkan", runner)
            if why_a or why_b:
                why = f"interpreter: {why_a or 'ok'}; vulkan: {why_b or 'ok'}"
            else:
                why = compare(a, b, approx_types)
            for target in args.compile_for:
                failed = compile_for(path, target)
                if failed:
                    why = "; ".join(filter(None, [why, f"{target}: {failed}"]))
            if why:
                mismatches += 1
                print(f"mismatch: seed {args.seed} kernel {k}: {why}")
                if args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    Path(args.keep, f"fuzz_{args.seed}_{k}.loom").write_text(text)
            elif args.verbose:
                print(f"ok: kernel {k}")
    print(f"{args.count} kernels, {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
