"""Family `vector`: vectors of 1-64 lanes of every integer and float type
(LANGUAGE.md 7.5): constants, splats, loads from typed views of the input
(lane k reads c + k), stores to per-type outputs and to private memory read
back at other offsets, extract and insert at constant and data-dependent
lanes, reductions of every kind, lanewise addf/mulf/addi/muli/fmaf, and
vectors through scf.select, scf.if results and scf.for carried values.

What keeps them exact on every device: `vector.reduce<addf|mulf>` "may
associate in any order", so it only sees vectors whose lanes are known
small integers (`VV.small`) with every partial sum or product exact;
`vector.fmaf` (not fused on lavapipe) only runs where the product and sum
are exact. Other float arithmetic is IEEE and rounds once. Float outputs
are `nan` tensors (a NaN made by arithmetic has unspecified bits).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kernelfuzz.gen import (
    BYTES,
    FLOATS,
    SIGNIFICAND,
    Gen,
    Tensor,
    Test,
    V,
    case_text,
    geometry_config,
    kernel_text,
    launch_line,
)

INPUT_BYTES = 64            # per invocation
RESULTS = 4
WIDTH_OUT = 64              # lanes of each per-type output row
ELEMS = ("i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64")
INT_KINDS = ("addi", "muli", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui")
FLOAT_KINDS = ("addf", "mulf", "minimumf", "maximumf", "minnumf", "maxnumf")
LANES = (1, 2, 3, 4, 4, 5, 7, 8, 8, 16, 32, 64)


@dataclass
class VV:
    name: str
    n: int
    elem: str
    small: int | None = None      # every lane an integer with |x| <= small (floats: exactly)

    @property
    def type(self) -> str:
        return f"vector<{self.n}x{self.elem}>"


def exact_limit(elem: str) -> int:
    return 1 << SIGNIFICAND[elem] if elem in FLOATS else 1 << 62


class VectorGen(Gen):
    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.groups = rng.randint(1, 2)
        self.lanes = rng.choice([1, 3, 8, 16, 32])
        self.total = self.groups * self.lanes
        self.vectors: list[VV] = []
        self.private = 0

    def vpick(self, pred: object = None) -> VV | None:
        cands = [v for v in self.vectors if pred is None or pred(v)]  # type: ignore[operator]
        return self.rng.choice(cands[-6:]) if cands else None

    def lane_index(self, pool: list[V], n: int) -> str:
        """A data-dependent lane in [0, n)."""
        src = self.of_type(pool, "i64")
        mask, cn = self.const("i64", 1023), self.const("index", n)
        m, i, k = self.fresh(), self.fresh(), self.fresh("lane")
        self.emit(f"{m} = scalar.andi {src.name}, {mask} : i64")
        self.emit(f"{i} = index.cast {m} : i64 to index")
        self.emit(f"{k} = index.rem {i}, {cn} : index")
        return k

    def small_scalar(self, pool: list[V], elem: str, bound: int) -> str:
        """A scalar of type elem holding an integer in [-bound, bound) (bound a power of two)."""
        bits = bound.bit_length()
        if elem in FLOATS:
            i = self.small_int(pool, "i32", bits)
            r = self.fresh()
            self.emit(f"{r} = scalar.sitofp {i} : i32 to {elem}")
            return r
        return self.small_int(pool, elem, bits)

    # ---------------------------------------------------------------- making vectors

    def make(self, pool: list[V], n: int | None = None, elem: str | None = None) -> VV:
        forced = n is not None
        n = n or self.rng.choice(LANES)
        elem = elem or self.rng.choice(ELEMS)
        r = self.fresh("vec")
        t = f"vector<{n}x{elem}>"
        k = self.rng.random()
        per = INPUT_BYTES // BYTES[elem]
        if forced and n > per:
            k *= 0.5        # too long to load from one input row
        if k < 0.2:
            c = self.rng.randint(-4, 4)
            self.emit(f"{r} = vector.constant {float(c) if elem in FLOATS else c} : {t}")
            v = VV(r, n, elem, abs(c))
        elif k < 0.5:
            small = self.rng.random() < 0.6
            s = self.small_scalar(pool, elem, 8) if small else self.of_type(pool, elem).name
            self.emit(f"{r} = vector.splat {s} : {t}")
            v = VV(r, n, elem, 8 if small else None)
        else:
            if n > per:
                n = per
                t = f"vector<{n}x{elem}>"
            c = self.rng.randint(0, per - n)
            self.emit(f"{r} = vector.load %in_{elem}[%gid, {c}] : view<{self.total}x{per}x{elem}> -> {t}")
            v = VV(r, n, elem, None)
        self.vectors.append(v)
        return v

    def operand(self, pool: list[V]) -> VV:
        return self.vpick() if self.vectors and self.rng.random() < 0.7 else self.make(pool)  # type: ignore[return-value]

    def like(self, pool: list[V], v: VV, small: bool = False) -> VV:
        """Another vector of v's type (a small-integer one when asked)."""
        other = self.vpick(lambda x: x.type == v.type and x is not v and (not small or x.small is not None))
        if other is not None and self.rng.random() < 0.6:
            return other
        if small:
            r = self.fresh("vec")
            s = self.small_scalar(pool, v.elem, 4)
            self.emit(f"{r} = vector.splat {s} : {v.type}")
            out = VV(r, v.n, v.elem, 4)
            self.vectors.append(out)
            return out
        return self.make(pool, v.n, v.elem)

    # ---------------------------------------------------------------- ops

    def lanewise(self, pool: list[V]) -> None:
        a = self.operand(pool)
        fl = a.elem in FLOATS
        op = self.rng.choice(["addf", "mulf", "fmaf"] if fl else ["addi", "muli"])
        if op == "fmaf":
            b, c = self.like(pool, a, small=True), self.like(pool, a, small=True)
            if a.small is None:
                a = self.like(pool, a, small=True)
            assert a.small is not None and b.small is not None and c.small is not None
            bound = a.small * b.small + c.small
            if bound >= exact_limit(a.elem):   # the fused and the unfused result would differ
                return
            r = self.fresh("vec")
            self.emit(f"{r} = vector.fmaf {a.name}, {b.name}, {c.name} : {a.type}")
            self.vectors.append(VV(r, a.n, a.elem, bound))
            return
        b = self.like(pool, a)
        small = None
        if a.small is not None and b.small is not None:
            small = a.small + b.small if op.startswith("add") else a.small * b.small
            if small >= exact_limit(a.elem):
                small = None
        r = self.fresh("vec")
        self.emit(f"{r} = vector.{op} {a.name}, {b.name} : {a.type}")
        self.vectors.append(VV(r, a.n, a.elem, small))

    def reduce(self, pool: list[V]) -> None:
        v = self.operand(pool)
        fl = v.elem in FLOATS
        kind = self.rng.choice(FLOAT_KINDS if fl else INT_KINDS)
        if kind in ("addf", "mulf"):
            if v.small is None:
                v = self.like(pool, v, small=True)
            assert v.small is not None
            bound = max(v.small, 2)      # the init is in [-2, 2)
            if kind == "addf":
                ok = (v.n + 1) * bound < exact_limit(v.elem)
            else:   # products of integers up to 2 are +-2^j or 0; larger lanes only for short vectors
                ok = (bound <= 2 and v.n <= 12) or bound ** (v.n + 1) < exact_limit(v.elem)
            if not ok:
                kind = self.rng.choice(FLOAT_KINDS[2:])
            init = self.small_scalar(pool, v.elem, 2)
        else:
            init = self.of_type(pool, v.elem).name
        r = self.fresh()
        self.emit(f"{r} = vector.reduce<{kind}> {v.name}, {init} : {v.type}, {v.elem}")
        pool.append(V(r, v.elem, not fl))

    def extract(self, pool: list[V]) -> None:
        v = self.operand(pool)
        lane = str(self.rng.randrange(v.n)) if self.rng.random() < 0.5 else self.lane_index(pool, v.n)
        r = self.fresh()
        self.emit(f"{r} = vector.extract {v.name}[{lane}] : {v.type} -> {v.elem}")
        pool.append(V(r, v.elem, v.elem not in FLOATS))

    def insert(self, pool: list[V]) -> None:
        v = self.operand(pool)
        small = v.small is not None and self.rng.random() < 0.7
        x = self.small_scalar(pool, v.elem, 4) if small else self.of_type(pool, v.elem).name
        lane = str(self.rng.randrange(v.n)) if self.rng.random() < 0.5 else self.lane_index(pool, v.n)
        r = self.fresh("vec")
        self.emit(f"{r} = vector.insert {x} into {v.name}[{lane}] : {v.elem}, {v.type}")
        self.vectors.append(VV(r, v.n, v.elem, max(v.small, 4) if small and v.small is not None else None))

    def vselect(self, pool: list[V]) -> None:
        a = self.operand(pool)
        b = self.like(pool, a)
        c = self.compare(pool)
        r = self.fresh("vec")
        self.emit(f"{r} = scf.select {c.name}, {a.name}, {b.name} : {a.type}")
        self.vectors.append(VV(r, a.n, a.elem, max(a.small, b.small) if a.small is not None and b.small is not None
                               else None))

    def through_private(self, pool: list[V]) -> None:
        """Store a vector to private memory and read a part of it back at another offset."""
        v = self.operand(pool)
        size = BYTES[v.elem]
        i = self.private
        self.private += 1
        cap = WIDTH_OUT
        c = self.rng.randint(0, cap - v.n)
        e = self.emit
        e(f"%pb{i} = index.constant {cap * size} : offset")
        e(f"%pr{i} = buffer.alloca<private> align({max(size, 4)}) %pb{i} : buffer")
        e(f"%pv{i} = buffer.view %pr{i}[%o] : buffer -> view<{cap}x{v.elem}>")
        e(f"vector.store {v.name}, %pv{i}[{c}] : {v.type}, view<{cap}x{v.elem}>")
        a = self.rng.randrange(v.n)
        m = self.rng.randint(1, v.n - a)
        r = self.fresh("vec")
        e(f"{r} = vector.load %pv{i}[{c + a}] : view<{cap}x{v.elem}> -> vector<{m}x{v.elem}>")
        self.vectors.append(VV(r, m, v.elem, v.small))

    def vector_if(self, pool: list[V]) -> None:
        v = self.operand(pool)
        c = self.compare(pool)
        r = self.fresh("vec")
        self.emit(f"{r} = scf.if {c.name} -> ({v.type}) {{")
        smalls = []
        for branch in (0, 1):
            if branch:
                self.emit("} else {")
            saved = list(self.vectors)
            with self.nested():
                self.vstep(list(pool))
                w = self.like(pool, v)
                smalls.append(w.small)
                self.emit(f"scf.yield {w.name} : {v.type}")
            self.vectors = saved
        self.emit("}")
        small = None if None in smalls else max(smalls)  # type: ignore[type-var]
        self.vectors.append(VV(r, v.n, v.elem, small))

    def vector_for(self, pool: list[V]) -> None:
        v = self.operand(pool)
        lo, hi, st = self.const("index", 0), self.const("index", self.rng.randint(0, 4)), self.const("index", 1)
        r, iv, acc = self.fresh("vec"), self.fresh("k"), self.fresh("vacc")
        self.emit(f"{r} = scf.for {iv} = [{lo} to {hi} step {st}]({acc} = {v.name} : {v.type}) -> ({v.type}) {{")
        saved = list(self.vectors)
        with self.nested():
            self.vectors.append(VV(acc, v.n, v.elem, None))
            self.vstep(list(pool))
            w = self.like(pool, v)
            op = "addf" if v.elem in FLOATS else "addi"
            x = self.fresh("vec")
            self.emit(f"{x} = vector.{op} {acc}, {w.name} : {v.type}")
            self.emit(f"scf.yield {x} : {v.type}")
        self.vectors = saved
        self.emit("}")
        self.vectors.append(VV(r, v.n, v.elem, None))

    def vstep(self, pool: list[V], depth: int = 1) -> None:
        k = self.rng.random()
        if k < 0.2:
            self.lanewise(pool)
        elif k < 0.35:
            self.reduce(pool)
        elif k < 0.47:
            self.extract(pool)
        elif k < 0.59:
            self.insert(pool)
        elif k < 0.67:
            self.vselect(pool)
        elif k < 0.75:
            self.through_private(pool)
        elif k < 0.83 and depth == 0:
            self.vector_if(pool)
        elif k < 0.9 and depth == 0:
            self.vector_for(pool)
        else:
            self.make(pool)

    # ---------------------------------------------------------------- the kernel

    def kernel(self) -> list[str]:
        e = self.emit
        e("%o = index.constant 0 : offset")
        e(f"%outv = buffer.view %out[%o] : buffer -> view<{self.total}x{RESULTS}xi64>")
        for t in ELEMS:
            per = INPUT_BYTES // BYTES[t]
            e(f"%in_{t} = buffer.view %in[%o] : buffer -> view<{self.total}x{per}x{t}>")
            e(f"%vo_{t} = buffer.view %vout_{t}[%o] : buffer -> view<{self.total}x{WIDTH_OUT}x{t}>")
        e("%gid = kernel.workitem.dispatch.id<x> : index")
        pool: list[V] = []
        per = INPUT_BYTES // 8
        for k in range(per):
            v = self.fresh("in")
            e(f"{v} = view.load %in_i64[%gid, {k}] : view<{self.total}x{per}xi64> -> i64")
            pool.append(V(v, "i64"))
        for _ in range(self.rng.randint(4, 14)):
            self.vstep(pool, 0)
            if self.rng.random() < 0.3:
                self.body(pool, 2, self.rng.randint(1, 2))
        for v in self.vectors[-self.rng.randint(1, 4):]:
            c = self.rng.randint(0, WIDTH_OUT - v.n)
            e(f"vector.store {v.name}, %vo_{v.elem}[%gid, {c}] : {v.type}, view<{self.total}x{WIDTH_OUT}x{v.elem}>")
        self.store_results(pool[per:] or pool, "%gid", self.total, RESULTS)
        return self.lines


def generate(name: str) -> Test:
    rng = random.Random(name)
    g = VectorGen(rng)
    body = g.kernel()
    total = g.total
    offset = rng.randint(-(1 << 62), 1 << 62)
    step = rng.randint(-(1 << 61), 1 << 61) | 1
    tensors = [
        Tensor("in", f"tensor<{total}x{INPUT_BYTES // 8}xi64>", f"check.generate.iota offset({offset}) step({step})"),
        Tensor("out", f"tensor<{total}x{RESULTS}xi64>", "check.generate.fill value(0)"),
    ]
    for t in ELEMS:
        zero = "0.0" if t in FLOATS else "0"
        tensors.append(Tensor(f"vout_{t}", f"tensor<{total}x{WIDTH_OUT}x{t}>", f"check.generate.fill value({zero})",
                              "nan" if t in FLOATS else "exact"))
    kernel = kernel_text("fuzz", [], geometry_config((g.groups, 1, 1), (g.lanes, 1, 1)),
                         [(t.name, "buffer") for t in tensors], body)
    case = case_text([*(t.generate() for t in tensors),
                      launch_line("fuzz", [], [f"%{t.name}" for t in tensors], [], [t.type for t in tensors])])
    return Test("vector", name, kernel + "\n" + case, tuple(tensors))
