"""Family `atomic`: `view.atomic.rmw` whose results do not depend on the
order invocations reach it (LANGUAGE.md 7.4, 9).

* Shared counters (one kind each: kinds do not commute with one another,
  but addi and subi do) in global memory (every invocation of every workgroup,
  scope device) and in workgroup memory (scope workgroup or device; set by
  one invocation before a barrier, read by all after the next): integer
  kinds (addi subi andi ori xori minsi maxsi minui maxui) with any values,
  float min/max kinds with any values, `addf` with small integers (every
  partial sum exact). The old values they return depend on the order and
  are not kept, except for tickets: each invocation adds the same constant
  to a fresh workgroup counter, so the old values are a known set in some
  order, and any reduction of them is order-free.
* Each invocation's own slots (global, and a private alloca): every kind,
  `xchgi`/`xchgf` included, at any scope; the old values are kept.
* Atomics also run under per-invocation conditions and in loops.

Float counters and slots are `nan` tensors: a NaN that min/max made has
unspecified bits.
"""

from __future__ import annotations

import random

from kernelfuzz.gen import Gen, Tensor, Test, V, case_text, geometry_config, kernel_text, launch_line

INPUTS = 4
RESULTS = 6
SLOTS = 2
INT_KINDS = ("addi", "subi", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui")
FLOAT_KINDS = ("minimumf", "maximumf", "minnumf", "maxnumf", "addf")
ORDERINGS = ("relaxed", "acquire", "release", "acq_rel", "seq_cst")
ELEMS = ("i32", "i64", "f32", "f64")


class AtomicGen(Gen):
    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.groups = rng.randint(1, 4)
        self.lanes = rng.choice([1, 2, 5, 8, 16, 31, 32, 48, 64])
        self.total = self.groups * self.lanes
        self.ctypes: list[str] = []
        self.counter_kinds: dict[tuple[str, int], str] = {}

    def value(self, pool: list[V], kind: str, t: str) -> V:
        if kind == "addf":
            # |v| <= 32: with at most 256 invocations every partial sum is an exact integer.
            i = self.small_int(pool, "i32", 6)
            r = self.fresh()
            self.emit(f"{r} = scalar.sitofp {i} : i32 to {t}")
            return V(r, t)
        return self.of_type(pool, t)

    def rmw(self, kind: str, v: V, view: str, index: str, vtype: str, scope: str) -> str:
        old = self.fresh("old")
        order = self.rng.choice(ORDERINGS)
        self.emit(f"{old} = view.atomic.rmw<{kind}> {v.name}, {view}[{index}] {{ordering = {order}, "
                  f"scope = {scope}}} : {v.type}, {vtype} -> {v.type}")
        return old

    def shared(self, pool: list[V]) -> None:
        """An order-free update of a global counter, maybe under a condition or in a loop."""
        t, c = self.rng.choice(ELEMS), self.rng.randrange(4)
        # One kind per counter: different kinds on one location do not commute (max then min).
        # addi and subi do.
        if (t, c) not in self.counter_kinds:
            self.counter_kinds[t, c] = self.rng.choice(FLOAT_KINDS if t.startswith("f") else INT_KINDS)
        kind = self.counter_kinds[t, c]
        if kind in ("addi", "subi"):
            kind = self.rng.choice(["addi", "subi"])
        wrap = self.rng.random()
        if wrap < 0.25:
            cond = self.compare(pool)
            self.emit(f"scf.if {cond.name} {{")
        elif wrap < 0.4:
            lo, hi, st = self.const("index", 0), self.const("index", self.rng.randint(1, 3)), self.const("index", 1)
            iv = self.fresh("k")
            self.emit(f"scf.for {iv} = [{lo} to {hi} step {st}] {{")
        if wrap < 0.4:
            with self.nested():
                self.rmw(kind, self.value(pool, kind, t), f"%ctr_{t}", str(c), f"view<4x{t}>", "device")
            self.emit("}")
        else:
            self.rmw(kind, self.value(pool, kind, t), f"%ctr_{t}", str(c), f"view<4x{t}>", "device")

    def own(self, pool: list[V]) -> None:
        """Any kind on this invocation's own slot; the old value is kept."""
        t = self.rng.choice(ELEMS)
        float_t = t.startswith("f")
        kind = self.rng.choice((*FLOAT_KINDS, "xchgf") if float_t else (*INT_KINDS, "xchgi"))
        v = self.of_type(pool, t)
        scope = self.rng.choice(["subgroup", "workgroup", "device"])
        if self.rng.random() < 0.3:
            view, vtype, index = f"%priv_{t}", f"view<{SLOTS}x{t}>", str(self.rng.randrange(SLOTS))
        else:
            view, vtype, index = f"%slot_{t}", f"view<{self.total}x{SLOTS}x{t}>", \
                f"%gid, {self.rng.randrange(SLOTS)}"
        old = self.rmw(kind, v, view, index, vtype, scope)
        pool.append(V(old, t, not float_t))

    def workgroup_counter(self, pool: list[V], i: int) -> None:
        """Counter i in workgroup memory: set, barrier, updated by all (or some), barrier, read."""
        t = self.ctypes[i]
        e = self.emit
        e(f"%wcv{i} = buffer.view %wc{i}[%o] : buffer -> view<1x{t}>")
        kind = self.rng.choice(FLOAT_KINDS if t == "f32" else INT_KINDS)
        first = self.fresh("first")
        e(f"{first} = index.cmp eq, %lin, %c0 : index")
        init = self.of_type(pool, t)
        e(f"scf.if {first} {{")
        with self.nested():
            e(f"view.store {init.name}, %wcv{i}[%c0] : {t}, view<1x{t}>")
        e("}")
        e("kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)")
        scope = self.rng.choice(["workgroup", "device"])
        ticket = t != "f32" and self.rng.random() < 0.4
        if ticket:
            step = self.const(t, self.rng.randint(-5, 5))
            old = self.rmw("addi", V(step, t), f"%wcv{i}", "%c0", f"view<1x{t}>", scope)
            red = self.fresh("red")
            rkind = self.rng.choice(["addi", "xori", "minui", "maxui", "ori", "andi"])
            e(f"{red} = kernel.workgroup.reduce<{rkind}> {old} : {t}")
            pool.append(V(red, t))
        elif self.rng.random() < 0.3:
            cond = self.compare(pool)
            e(f"scf.if {cond.name} {{")
            with self.nested():
                self.rmw(kind, self.value(pool, kind, t), f"%wcv{i}", "%c0", f"view<1x{t}>", scope)
            e("}")
        else:
            self.rmw(kind, self.value(pool, kind, t), f"%wcv{i}", "%c0", f"view<1x{t}>", scope)
        e("kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)")
        r = self.fresh("wc")
        e(f"{r} = view.load %wcv{i}[%c0] : view<1x{t}> -> {t}")
        pool.append(V(r, t, t != "f32"))

    def kernel(self) -> list[str]:
        e = self.emit
        e("%o = index.constant 0 : offset")
        e("%c0 = index.constant 0 : index")
        e(f"%inv = buffer.view %in[%o] : buffer -> view<{self.total}x{INPUTS}xi64>")
        e(f"%outv = buffer.view %out[%o] : buffer -> view<{self.total}x{RESULTS}xi64>")
        for t in ELEMS:
            e(f"%ctr_{t} = buffer.view %counters_{t}[%o] : buffer -> view<4x{t}>")
            e(f"%slot_{t} = buffer.view %slots_{t}[%o] : buffer -> view<{self.total}x{SLOTS}x{t}>")
        e("%lin = kernel.workitem.id<x> : index")
        e("%gid = kernel.workitem.dispatch.id<x> : index")
        counters = self.rng.randint(0, 3)
        ctypes = [self.rng.choice(["i32", "i64", "f32"]) for _ in range(counters)]
        for i, t in enumerate(ctypes):
            size = 4 if t != "i64" else 8
            e(f"%wcb{i} = index.constant {size} : offset")
            e(f"%wc{i} = buffer.alloca<workgroup> align({size}) %wcb{i} : buffer")
        pool: list[V] = []
        for k in range(INPUTS):
            v = self.fresh("in")
            e(f"{v} = view.load %inv[%gid, {k}] : view<{self.total}x{INPUTS}xi64> -> i64")
            pool.append(V(v, "i64"))
        for t in ELEMS:
            size = 4 if t in ("i32", "f32") else 8
            e(f"%privb_{t} = index.constant {SLOTS * size} : offset")
            e(f"%privr_{t} = buffer.alloca<private> align({size}) %privb_{t} : buffer")
            e(f"%priv_{t} = buffer.view %privr_{t}[%o] : buffer -> view<{SLOTS}x{t}>")
            for j in range(SLOTS):
                e(f"view.store {self.of_type(pool, t).name}, %priv_{t}[{j}] : {t}, view<{SLOTS}x{t}>")
        self.ctypes = ctypes
        made = 0
        for _ in range(self.rng.randint(3, 9)):
            self.body(pool, 1, self.rng.randint(0, 3))
            k = self.rng.random()
            if k < 0.45:
                self.shared(pool)
            elif k < 0.8 or made >= counters:
                self.own(pool)
            else:
                self.workgroup_counter(pool, made)
                made += 1
        for t in ELEMS:
            for j in range(SLOTS):
                r = self.fresh("p")
                e(f"{r} = view.load %priv_{t}[{j}] : view<{SLOTS}x{t}> -> {t}")
                pool.append(V(r, t, not t.startswith("f")))
        self.store_results(pool[INPUTS:] or pool, "%gid", self.total, RESULTS)
        return self.lines


def generate(name: str) -> Test:
    rng = random.Random(name)
    g = AtomicGen(rng)
    body = g.kernel()
    total = g.total

    def iota(t: str) -> str:
        if t.startswith("f"):
            return f"check.generate.iota offset({rng.randint(-50, 50)}.0) step({rng.choice([-1.5, 0.25, 3.0])})"
        return f"check.generate.iota offset({rng.randint(-(1 << 30), 1 << 30)}) step({rng.randint(-999, 999)})"

    def kind(t: str) -> str:
        return "nan" if t.startswith("f") else "exact"

    offset = rng.randint(-(1 << 62), 1 << 62)
    step = rng.randint(-(1 << 61), 1 << 61) | 1
    tensors = [
        Tensor("in", f"tensor<{total}x{INPUTS}xi64>", f"check.generate.iota offset({offset}) step({step})"),
        Tensor("out", f"tensor<{total}x{RESULTS}xi64>", "check.generate.fill value(0)"),
    ]
    for t in ELEMS:
        tensors.append(Tensor(f"counters_{t}", f"tensor<4x{t}>", iota(t), kind(t)))
        tensors.append(Tensor(f"slots_{t}", f"tensor<{total}x{SLOTS}x{t}>", iota(t), kind(t)))
    kernel = kernel_text("fuzz", [], geometry_config((g.groups, 1, 1), (g.lanes, 1, 1)),
                         [(t.name, "buffer") for t in tensors], body)
    case = case_text([*(t.generate() for t in tensors),
                      launch_line("fuzz", [], [f"%{t.name}" for t in tensors], [], [t.type for t in tensors])])
    return Test("atomic", name, kernel + "\n" + case, tuple(tensors))
