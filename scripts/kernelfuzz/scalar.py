"""Family `scalar`: every integer width, f16/bf16/f32/f64, casts, bitcasts,
selects, comparisons, loops and subviews in one workgroup of 32; one
neighbour exchange through workgroup memory; transcendental functions to a
separate output compared within a few ulp.

`fmaf` is left out (Vulkan does not require it fused; the conformance suite
covers it).
"""

from __future__ import annotations

import random

from kernelfuzz.gen import Gen, Tensor, Test, V, case_text, geometry_config, kernel_text, launch_line

LANES = 32          # invocations (one workgroup)
INPUTS = 8          # i64 inputs per invocation
RESULTS = 8         # exact results per invocation
APPROX = 4          # transcendental results per invocation


class ScalarGen(Gen):
    def kernel(self) -> tuple[list[str], list[str]]:
        """The body lines and the Loom type of each approximate result column."""
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
        self.store_results(pool[INPUTS + 1:] or pool, "%t", LANES, RESULTS)
        types = [self.approx(pool, j) for j in range(APPROX)]
        return self.lines, types

    def approx(self, pool: list[V], j: int) -> str:
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
        return t


def generate(name: str) -> Test:
    rng = random.Random(name)
    body, types = ScalarGen(rng).kernel()
    offset = rng.randint(-(1 << 62), 1 << 62)
    step = rng.randint(-(1 << 61), 1 << 61) | 1
    tensors = (
        Tensor("in", f"tensor<{LANES}x{INPUTS}xi64>", f"check.generate.iota offset({offset}) step({step})"),
        Tensor("out", f"tensor<{LANES}x{RESULTS}xi64>", "check.generate.fill value(0)"),
        Tensor("approx", f"tensor<{LANES}x{APPROX}xf64>", "check.generate.fill value(0.0)", "approx",
               tuple(types)),
    )
    kernel = kernel_text("fuzz", [], geometry_config((1, 1, 1), (LANES, 1, 1)),
                         [("in", "buffer"), ("out", "buffer"), ("approx", "buffer")], body)
    case = case_text([*(t.generate() for t in tensors),
                      launch_line("fuzz", [], [f"%{t.name}" for t in tensors], [], [t.type for t in tensors])])
    return Test("scalar", name, kernel + "\n" + case, tensors)
