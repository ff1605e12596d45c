"""Families `barrier` and `reduce`: several workgroups of 2-128 invocations
(one or two dimensions) exchanging values through workgroup and global
memory between barriers, and workgroup and subgroup reductions.

What keeps them well-defined (LANGUAGE.md 8, 9):

* Convergence: every barrier and reduction is at the top level or nested in
  `scf.if`/`scf.for` whose condition or bounds are uniform (constants,
  device arguments, workgroup ids, workgroup reduction results), so all
  invocations of a workgroup reach it together.
* No races: an exchange writes each slot once (a permutation of the linear
  id), then a barrier of the memory's kind (`<workgroup>` for workgroup
  memory, `<global>` for the global scratch buffer, `scope(subgroup)` when
  only the neighbour in the subgroup reads it), then reads; a slot is
  written again only after another barrier orders the reads before it.
  Workgroup memory is never read before it is written.
* Reductions are exact in any order: `addf` adds small integers (every
  partial sum exact), `mulf` multiplies +-1 with a few +-2 and +-0.5 (no
  partial product leaves the exact range), min/max kinds and every integer
  kind take any values. Their results are uniform.

Subgroup reductions, `kernel.subgroup.size` and `subgroup.lane.id` make a
test subgroup-dependent: its reference runs at the device's subgroup size.
"""

from __future__ import annotations

import math
import random

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

INPUTS = 4
RESULTS = 6
INT_KINDS = ("addi", "muli", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui")
FLOAT_KINDS = ("addf", "mulf", "minimumf", "maximumf", "minnumf", "maxnumf")
ELEMS = ("i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64")


class Memory:
    """A buffer exchanges go through, and whether a read since its last
    barrier forbids writing it before the next one."""

    def __init__(self, view: str, elem: str, slots: int, cols: int, kind: str) -> None:
        self.view, self.elem, self.slots, self.cols, self.kind = view, elem, slots, cols, kind
        self.pending = False

    @property
    def type(self) -> str:
        return f"view<{self.slots}x{self.cols}x{self.elem}>"


class CollectiveGen(Gen):
    def __init__(self, rng: random.Random, family: str) -> None:
        super().__init__(rng)
        self.family = family
        self.subgroup_dependent = False
        self.layout_sensitive = False   # results rest on subgroups being runs of linear ids
        self.groups = rng.choice([(1, 1), (2, 1), (3, 1), (1, 2), (2, 2)])
        k = rng.random()
        if k < 0.55:        # one-dimensional
            sx, sy = rng.choice([2, 3, 5, 8, 12, 16, 17, 24, 32, 33, 40, 48, 64, 100, 128]), 1
        elif k < 0.85:      # rows of a multiple of 8: subgroups of 8 (lavapipe) follow linear ids
            sx, sy = rng.choice([8, 16, 24, 32]), rng.randint(2, 4)
        else:               # any shape (see compare.subgroup_rows)
            sx, sy = rng.choice([1, 2, 3, 5, 6, 12]), rng.randint(2, 8)
        if family == "barrier" and sx * sy > 64:
            sy = max(1, 64 // sx)
        n = sx * sy
        self.size = (sx, sy)
        self.lanes = n
        self.total = n * self.groups[0] * self.groups[1]
        self.uniform: list[V] = []
        self.memories: list[Memory] = []
        self.depth = 0

    # ---------------------------------------------------------------- uniform values

    def uniform_cond(self) -> str:
        """An i1 every invocation of a workgroup computes alike."""
        u = self.rng.choice(self.uniform)
        r = self.fresh("u")
        if u.type == "index":
            c = self.const("index", self.rng.randint(0, 3))
            pred = self.rng.choice(["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "uge"])
            self.emit(f"{r} = index.cmp {pred}, {u.name}, {c} : index")
        else:
            c = self.const(u.type, self.rng.randint(-3, 3))
            pred = self.rng.choice(["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "uge"])
            self.emit(f"{r} = scalar.cmpi {pred}, {u.name}, {c} : {u.type}")
        return r

    def uniform_bound(self) -> str:
        """A small uniform trip count (0-4)."""
        k = self.rng.random()
        if k < 0.4:
            return self.const("index", self.rng.randint(0, 3))
        if k < 0.7:
            return "%n0"        # the device argument (1-3)
        r = self.fresh("ub")
        one = self.const("index", 1)
        self.emit(f"{r} = index.add %grp, {one} : index")
        return r

    # ---------------------------------------------------------------- exchanges

    def permutation(self, iv: str | None = None) -> str:
        """(a * lin + b) mod N with gcd(a, N) = 1: every slot written exactly once."""
        a = self.rng.choice([x for x in range(1, self.lanes + 1) if math.gcd(x, self.lanes) == 1][:6])
        b = self.const("index", self.rng.randint(0, self.lanes - 1))
        ca, cn = self.const("index", a), self.const("index", self.lanes)
        m, s, r = self.fresh("p"), self.fresh("p"), self.fresh("p")
        self.emit(f"{m} = index.madd %lin, {ca}, {b} : index")
        if iv is not None:
            self.emit(f"{s} = index.add {m}, {iv} : index")
            m = s
        self.emit(f"{r} = index.rem {m}, {cn} : index")
        return r

    def barrier_for(self, mem: Memory) -> None:
        if mem.kind == "global":
            self.emit("kernel.barrier<global> scope(workgroup) ordering(acq_rel)")
            for m in self.memories:
                if m.kind == "global":
                    m.pending = False
        else:
            self.emit("kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)")
            for m in self.memories:
                if m.kind != "global":
                    m.pending = False

    def exchange(self, pool: list[V], iv: str | None = None) -> V:
        """Write a value to this invocation's slot, barrier, read another's."""
        mem = self.rng.choice(self.memories)
        if mem.pending:
            self.barrier_for(mem)
        v = self.of_type(pool, mem.elem)
        col = self.rng.randrange(mem.cols)
        neighbour = mem.kind == "workgroup" and self.rng.random() < 0.3
        mine = "%lin" if neighbour else self.permutation(iv)
        base = "%wbase" if mem.kind == "global" else None
        if base:
            slot = self.fresh("s")
            self.emit(f"{slot} = index.add {base}, {mine} : index")
            mine = slot
        self.emit(f"view.store {v.name}, {mem.view}[{mine}, {col}] : {mem.elem}, {mem.type}")
        if neighbour:
            # Only the other invocation of an (even, aligned) pair reads it: a subgroup barrier orders them.
            self.layout_sensitive = True
            self.emit("kernel.barrier<workgroup> scope(subgroup) ordering(acq_rel)")
            one, cn = self.const("index", 1), self.const("index", self.lanes)
            x, ok, other = self.fresh("q"), self.fresh("q"), self.fresh("q")
            self.emit(f"{x} = index.xori %lin, {one} : index")
            self.emit(f"{ok} = index.cmp ult, {x}, {cn} : index")
            self.emit(f"{other} = scf.select {ok}, {x}, %lin : index")
            theirs = other
        else:
            self.barrier_for(mem)
            theirs = self.permutation(iv)
            if base:
                slot = self.fresh("s")
                self.emit(f"{slot} = index.add {base}, {theirs} : index")
                theirs = slot
        r = self.fresh("x")
        self.emit(f"{r} = view.load {mem.view}[{theirs}, {col}] : {mem.type} -> {mem.elem}")
        mem.pending = True
        return V(r, mem.elem, v.bits_known)

    # ---------------------------------------------------------------- reductions

    def reduce_operand(self, pool: list[V], kind: str, t: str) -> V:
        if t not in FLOATS:
            return self.of_type(pool, t)
        if kind not in ("addf", "mulf"):
            return self.of_type(pool, t)
        if kind == "addf":
            # |v| <= 2^(bits-1) with total * 2^(bits-1) <= 2^p: every partial sum is exact.
            bits = max(1, min(10, SIGNIFICAND[t] - math.ceil(math.log2(self.lanes))) + 1)
            i = self.small_int(pool, "i32", bits)
            r = self.fresh()
            self.emit(f"{r} = scalar.sitofp {i} : i32 to {t}")
            v = V(r, t)
            if self.rng.random() < 0.15:
                z = self.const(t, "-0.0")
                v = V(z, t)
        else:
            # +-1, with +-2 on at most 4 invocations and +-0.5 on at most 4 more.
            sign = self.of_type(pool, "i1")
            one, two, half = (self.const(t, x) for x in (1.0, 2.0, 0.5))
            c4, c8 = self.const("index", 4), self.const("index", 8)
            lo, mid, a, b, s, neg = (self.fresh() for _ in range(6))
            self.emit(f"{lo} = index.cmp ult, %lin, {c4} : index")
            self.emit(f"{mid} = index.cmp ult, %lin, {c8} : index")
            self.emit(f"{a} = scf.select {mid}, {half}, {one} : {t}")
            self.emit(f"{b} = scf.select {lo}, {two}, {a} : {t}")
            self.emit(f"{neg} = scalar.negf {b} : {t}")
            self.emit(f"{s} = scf.select {sign.name}, {neg}, {b} : {t}")
            v = V(s, t)
        if self.rng.random() < 0.25:
            # One invocation brings a special value (inf, -inf, nan, -0.0, 0.0).
            special = self.const(t, self.rng.choice(["inf", "-inf", "nan", "-0.0", "0.0"]))
            at = self.const("index", self.rng.randrange(self.lanes))
            c, r = self.fresh(), self.fresh()
            self.emit(f"{c} = index.cmp eq, %lin, {at} : index")
            self.emit(f"{r} = scf.select {c}, {special}, {v.name} : {t}")
            v = V(r, t)
        return v

    def reduction(self, pool: list[V]) -> V:
        t = self.rng.choice(["i1", *ELEMS])
        kind = self.rng.choice(FLOAT_KINDS if t in FLOATS else INT_KINDS)
        where = "workgroup" if self.rng.random() < 0.55 else "subgroup"
        v = self.reduce_operand(pool, kind, t)
        r = self.fresh("red")
        self.emit(f"{r} = kernel.{where}.reduce<{kind}> {v.name} : {t}")
        self.layout_sensitive = True    # expand-collectives builds workgroup reductions from subgroups
        if where == "subgroup":
            self.subgroup_dependent = True
        elif t in ("i32", "i64") or (t == "index"):
            self.uniform.append(V(r, t))
        return V(r, t, t not in FLOATS)

    # ---------------------------------------------------------------- structure

    def step(self, pool: list[V], iv: str | None = None) -> None:
        """One convergent construct: an exchange, a reduction, or a uniform scf.if/scf.for of them."""
        k = self.rng.random()
        reduce_weight = 0.55 if self.family == "reduce" else 0.1
        if self.depth < 2 and k < 0.2:
            self.uniform_if(pool)
        elif self.depth < 2 and k < 0.35:
            self.uniform_for(pool)
        elif k < 0.35 + reduce_weight:
            pool.append(self.reduction(pool))
        else:
            pool.append(self.exchange(pool, iv))

    def settle(self, pending: list[bool]) -> None:
        for m, p in zip(self.memories, pending):
            m.pending = m.pending or p

    def uniform_if(self, pool: list[V]) -> None:
        c = self.uniform_cond()
        t = self.rng.choice(["i64", "i32", "f32", "f16"])
        r = self.fresh()
        self.emit(f"{r} = scf.if {c} -> ({t}) {{")
        before = [m.pending for m in self.memories]
        after: list[bool] = [False] * len(self.memories)
        known = True
        self.depth += 1
        for branch in (0, 1):
            if branch:
                self.emit("} else {")
            for m, p in zip(self.memories, before):
                m.pending = p
            inner, uniform = list(pool), list(self.uniform)
            with self.nested():
                for _ in range(self.rng.randint(0, 2)):
                    self.step(inner)
                self.uniform = uniform      # values of the branch end with it
                self.body(inner, 2, self.rng.randint(0, 2))
                v = self.of_type(inner, t)
                known &= v.bits_known
                self.emit(f"scf.yield {v.name} : {t}")
            after = [a or m.pending for a, m in zip(after, self.memories)]
        self.depth -= 1
        self.emit("}")
        for m, p in zip(self.memories, after):
            m.pending = p
        pool.append(V(r, t, known))

    def uniform_for(self, pool: list[V]) -> None:
        for m in self.memories:
            if m.pending:
                self.barrier_for(m)
        ub = self.uniform_bound()
        c0, c1 = self.const("index", 0), self.const("index", 1)
        t = self.rng.choice(["i64", "i32"])
        init = self.of_type(pool, t)
        r, iv, acc = self.fresh(), self.fresh("k"), self.fresh("acc")
        self.emit(f"{r} = scf.for {iv} = [{c0} to {ub} step {c1}]({acc} = {init.name} : {t}) -> ({t}) {{")
        self.depth += 1
        with self.nested():
            inner, uniform = [*pool, V(acc, t)], list(self.uniform)
            self.uniform.append(V(iv, "index"))
            for _ in range(self.rng.randint(1, 2)):
                self.step(inner, iv)
            self.uniform = uniform
            x = self.int_op(inner, t)
            # The next iteration writes again: order this one's reads first.
            for m in self.memories:
                if m.pending:
                    self.barrier_for(m)
            self.emit(f"scf.yield {x.name} : {t}")
        self.depth -= 1
        self.emit("}")
        pool.append(V(r, t))

    # ---------------------------------------------------------------- the kernel

    def kernel(self) -> list[str]:
        sx, _ = self.size
        gx, _ = self.groups
        e = self.emit
        e("%o = index.constant 0 : offset")
        e("%c0 = index.constant 0 : index")
        e(f"%inv = buffer.view %in[%o] : buffer -> view<{self.total}x{INPUTS}xi64>")
        e(f"%outv = buffer.view %out[%o] : buffer -> view<{self.total}x{RESULTS}xi64>")
        e(f"%gv = buffer.view %scratch[%o] : buffer -> view<{self.total}x2xi64>")
        e("%tx = kernel.workitem.id<x> : index")
        e("%ty = kernel.workitem.id<y> : index")
        e("%wx = kernel.workgroup.id<x> : index")
        e("%wy = kernel.workgroup.id<y> : index")
        e(f"%csx = index.constant {sx} : index")
        e(f"%cgx = index.constant {gx} : index")
        e(f"%cn = index.constant {self.lanes} : index")
        e("%lin = index.madd %ty, %csx, %tx : index")
        e("%grp = index.madd %wy, %cgx, %wx : index")
        e("%wbase = index.mul %grp, %cn : index")
        e("%gid = index.add %wbase, %lin : index")
        self.uniform = [V("%wx", "index"), V("%grp", "index"), V("%n0", "index"), V("%k0", "i32")]
        # Workgroup memory: every alloca at the top level (STRUCTURE/008).
        for i in range(self.rng.randint(1, 3)):
            elem = self.rng.choice(ELEMS)
            cols = self.rng.choice([1, 1, 2])
            nbytes = self.lanes * cols * BYTES[elem]
            align = self.rng.choice([a for a in (4, 8, 16) if a >= BYTES[elem]])
            e(f"%wb{i} = index.constant {nbytes} : offset")
            e(f"%wg{i} = buffer.alloca<workgroup> align({align}) %wb{i} : buffer")
            mem = Memory(f"%wv{i}", elem, self.lanes, cols, "workgroup")
            e(f"%wv{i} = buffer.view %wg{i}[%o] : buffer -> {mem.type}")
            self.memories.append(mem)
        if self.rng.random() < 0.5:
            self.memories.append(Memory("%gv", "i64", self.total, 2, "global"))
        pool: list[V] = []
        for k in range(INPUTS):
            v = self.fresh("in")
            e(f"{v} = view.load %inv[%gid, {k}] : view<{self.total}x{INPUTS}xi64> -> i64")
            pool.append(V(v, "i64"))
        for name in ("%k0",):
            pool.append(V(name, "i32"))
        if self.family == "reduce" and self.rng.random() < 0.3:
            self.subgroup_dependent = self.layout_sensitive = True
            e("%sg = kernel.subgroup.size : index")
            e("%lane = kernel.subgroup.lane.id : index")
            for name in ("%sg", "%lane"):
                w = self.fresh()
                e(f"{w} = index.cast {name} : index to i64")
                pool.append(V(w, "i64"))
        for _ in range(self.rng.randint(2, 6)):
            self.body(pool, 1, self.rng.randint(0, 4))
            self.step(pool)
        self.store_results(pool[INPUTS:] or pool, "%gid", self.total, RESULTS)
        return self.lines


def generate(name: str, family: str) -> Test:
    rng = random.Random(name)
    g = CollectiveGen(rng, family)
    body = g.kernel()
    total = g.total
    offset = rng.randint(-(1 << 62), 1 << 62)
    step = rng.randint(-(1 << 61), 1 << 61) | 1
    tensors = (
        Tensor("in", f"tensor<{total}x{INPUTS}xi64>", f"check.generate.iota offset({offset}) step({step})"),
        Tensor("out", f"tensor<{total}x{RESULTS}xi64>", "check.generate.fill value(0)"),
        Tensor("scratch", f"tensor<{total}x2xi64>", "check.generate.fill value(-1)"),
    )
    gx, gy = g.groups
    sx, sy = g.size
    device = [("n0", "index"), ("k0", "i32"), ("in", "buffer"), ("out", "buffer"), ("scratch", "buffer")]
    kernel = kernel_text("fuzz", [], geometry_config((gx, gy, 1), (sx, sy, 1)), device, body)
    n0, k0 = rng.randint(1, 3), rng.randint(-4, 4)
    case = case_text([f"%n0 = check.literal value({n0}) : index", f"%k0 = check.literal value({k0}) : i32",
                      *(t.generate() for t in tensors),
                      launch_line("fuzz", [], ["%n0", "%k0", *(f"%{t.name}" for t in tensors)], [],
                                  ["index", "i32", *(t.type for t in tensors)])])
    return Test(family, name, kernel + "\n" + case, tensors, subgroup_dependent=g.subgroup_dependent,
                layout=(sx, sy, 1) if g.layout_sensitive else None)


def generate_barrier(name: str) -> Test:
    return generate(name, "barrier")


def generate_reduce(name: str) -> Test:
    return generate(name, "reduce")
