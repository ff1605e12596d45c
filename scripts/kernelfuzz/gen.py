"""What every family's generator shares: the test description, random
well-defined scalar code over a pool of values, and the check-case text.

Scalar code is well-defined by construction (LANGUAGE.md sections 5-9):
divisions are guarded against zero and INT_MIN / -1, shift amounts are
masked, float-to-integer conversions see clamped, NaN-free operands and
loops are bounded (scf.for with constant trips, scf.while with a
data-dependent exit and a trip limit). A float made by arithmetic may be a
NaN whose sign and payload the language leaves open (`V.bits_known` false);
`canonical` makes such a NaN the canonical one before its bits are stored,
so stored results compare bit for bit, signed zeros included.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

INTS = (8, 16, 32, 64)
FLOATS = ("f16", "bf16", "f32", "f64")
WIDTH = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64}
BYTES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8}
# Per float type, as signed integers of its width: all bits but the sign,
# the infinity's bits, the canonical NaN's (`scalar.constant nan`).
NAN_BITS = {"f16": (0x7FFF, 0x7C00, 0x7E00), "bf16": (0x7FFF, 0x7F80, 0x7FC0),
            "f32": (0x7FFFFFFF, 0x7F800000, 0x7FC00000),
            "f64": (0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000, 0x7FF8000000000000)}
# Significand bits (with the implicit one): integers up to 2^p are exact.
SIGNIFICAND = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}


@dataclass
class V:
    name: str
    type: str
    bits_known: bool = True   # floats: False when arithmetic may have made a NaN of unspecified bits


@dataclass(frozen=True)
class Tensor:
    """A tensor of the check case, listed in the order the case first passes
    it to a launch (the order results come back in), and how it is compared."""

    name: str
    type: str                          # "tensor<32x8xi64>"
    init: str                          # "check.generate.fill value(0)"
    compare: str = "exact"             # "exact" | "nan" (float elements, every NaN alike) | "approx"
    approx_types: tuple[str, ...] = ()  # "approx": the Loom type of each column (f64 elements)

    @property
    def elem(self) -> str:
        return self.type[:-1].rsplit("x", 1)[1]

    def generate(self) -> str:
        return f"%{self.name} = {self.init} : {self.type}"


@dataclass(frozen=True)
class Test:
    """One generated test: a module to run on every device, and what the
    comparison needs to know about it."""

    family: str
    name: str                                  # "SEED:FAMILY:K", the random stream it came from
    text: str
    tensors: tuple[Tensor, ...]
    config: tuple[str, ...] = ()               # --config KEY=VALUE bindings
    # Results depend on the subgroup size the device runs (subgroup reductions,
    # lane ids): the reference run uses the device's size.
    subgroup_dependent: bool = False
    # template: the winners the selection rules (LANGUAGE.md 10, 17.16-19) give
    # each apply site for a profile; the reference run calls them directly.
    resolve: Callable[[str, Any], str] | None = None
    program: Any = None                        # command: the program's model (command.Expected)
    protected: frozenset[str] = frozenset()    # lines the reducer must keep (the model reads them)
    # The workgroup size of a kernel whose results rest on subgroups being runs of
    # linear ids (subgroup or workgroup reductions, lane ids, subgroup barriers).
    layout: tuple[int, int, int] | None = None
    notes: tuple[str, ...] = field(default=())


class Gen:
    """Random scalar code over a pool of values, emitted as indented lines."""

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
        op = "index.constant" if t in ("index", "offset") else "scalar.constant"
        self.emit(f"{v} = {op} {value} : {t}")
        return v

    def nested(self) -> _Nested:
        return _Nested(self)

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
        """Some value of type t, made from an i64 of the pool."""
        src = self.pick(pool, lambda x: x.type == "i64")
        assert src is not None
        out = self.fresh()
        if t == "i1":
            self.emit(f"{out} = scalar.trunci {src.name} : i64 to i1")
            return V(out, t)
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

    def small_int(self, pool: list[V], t: str, bits: int) -> str:
        """An integer of type t in [-2^(bits-1), 2^(bits-1) - 1]: the low `bits` bits of
        a pool value, sign-extended."""
        src = self.of_type(pool, t)
        if bits >= WIDTH[t]:
            return src.name
        k = self.const(t, WIDTH[t] - bits)
        up, r = self.fresh(), self.fresh()
        self.emit(f"{up} = scalar.shli {src.name}, {k} : {t}")
        self.emit(f"{r} = scalar.shrsi {up}, {k} : {t}")
        return r

    # ---------------------------------------------------------------- ops

    def int_op(self, pool: list[V], t: str | None = None) -> V:
        if t is None:
            t = f"i{self.rng.choice(INTS)}"
        n = WIDTH[t]
        a, b = self.of_type(pool, t), self.of_type(pool, t)
        op = self.rng.choice(["addi", "subi", "muli", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui",
                              "divsi", "remsi", "divui", "remui", "shli", "shrsi", "shrui"])
        bn = b.name
        if op in ("divsi", "remsi", "divui", "remui"):
            zero, one = self.const(t, 0), self.const(t, 1)
            isz, safe = self.fresh(), self.fresh()
            self.emit(f"{isz} = scalar.cmpi eq, {bn}, {zero} : {t}")
            self.emit(f"{safe} = scf.select {isz}, {one}, {bn} : {t}")
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

    def float_op(self, pool: list[V], t: str | None = None) -> V:
        if t is None:
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
            return V(self.to_int(pool, t, f"i{n}"), f"i{n}")
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

    def to_int(self, pool: list[V], t: str, it: str) -> str:
        """A float of type t converted to the integer type it, clamped to a range
        both conversions define (NaN counts as 0)."""
        a = self.of_type(pool, t)
        signed = self.rng.random() < 0.5
        lo, hi = (-100.0, 100.0) if signed else (0.0, 200.0)   # within i8 and u8
        zero, clo, chi = self.const(t, 0.0), self.const(t, lo), self.const(t, hi)
        nan, clean, up, both, r = self.fresh(), self.fresh(), self.fresh(), self.fresh(), self.fresh()
        self.emit(f"{nan} = scalar.cmpf uno, {a.name}, {a.name} : {t}")
        self.emit(f"{clean} = scf.select {nan}, {zero}, {a.name} : {t}")
        self.emit(f"{up} = scalar.maxnumf {clean}, {clo} : {t}")
        self.emit(f"{both} = scalar.minnumf {up}, {chi} : {t}")
        self.emit(f"{r} = scalar.{'fptosi' if signed else 'fptoui'} {both} : {t} to {it}")
        return r

    def canonical(self, pool: list[V], t: str) -> V:
        """A float of type t whose bits are specified (a NaN made canonical)."""
        a = self.of_type(pool, t)
        return self.canonical_of(a)

    def canonical_of(self, a: V) -> V:
        """`a`, or the canonical NaN (`scalar.constant nan`) where it is a NaN.

        Twice: a float select on `cmpf uno`, then an integer one on the bits
        (|bits| > the infinity's). LLVM may fold the first away (a NaN an
        operation returns may have any payload and sign, so it may as well be
        the constant's; the cpu's hardware NaN has the sign set), and lavapipe
        may fold the second (it can turn the bit test into a NaN test on a
        16-bit float it does not keep NaNs for); neither folds both."""
        if a.bits_known or a.type not in FLOATS:
            return a
        t = a.type
        it = f"i{WIDTH[t]}"
        uno, sel, bits, mag, nan, r, f = (self.fresh() for _ in range(7))
        sign, inf, canon = NAN_BITS[t]
        self.emit(f"{uno} = scalar.cmpf uno, {a.name}, {a.name} : {t}")
        self.emit(f"{sel} = scf.select {uno}, {self.const(t, 'nan')}, {a.name} : {t}")
        self.emit(f"{bits} = scalar.bitcast {sel} : {t} to {it}")
        self.emit(f"{mag} = scalar.andi {bits}, {self.const(it, sign)} : {it}")
        self.emit(f"{nan} = scalar.cmpi ugt, {mag}, {self.const(it, inf)} : {it}")
        self.emit(f"{r} = scf.select {nan}, {self.const(it, canon)}, {bits} : {it}")
        self.emit(f"{f} = scalar.bitcast {r} : {it} to {t}")
        return V(f, t)

    def bits64(self, v: V) -> str:
        """`v` as an i64 bit pattern: a float's bits (NaN canonical), zero-extended."""
        if v.type in FLOATS:
            v = self.canonical_of(v)
            w = WIDTH[v.type]
            b = self.fresh()
            self.emit(f"{b} = scalar.bitcast {v.name} : {v.type} to i{w}")
            v = V(b, f"i{w}")
        if v.type == "i64":
            return v.name
        wide = self.fresh()
        self.emit(f"{wide} = scalar.extui {v.name} : {v.type} to i64")
        return wide

    def store_results(self, pool: list[V], row: str, rows: int, count: int) -> None:
        """Store `count` values picked from `pool` (their 64-bit patterns) in
        `row` of the results view %outv<rows x count x i64>."""
        for j in range(count):
            v = self.pick(pool) or pool[-1]
            self.emit(f"view.store {self.bits64(v)}, %outv[{row}, {j}] : i64, view<{rows}x{count}xi64>")

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
            with self.nested():
                self.body(inner, depth + 1, self.rng.randint(1, 4))
                v = self.of_type(inner, t)
                known &= v.bits_known
                self.emit(f"scf.yield {v.name} : {t}")
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
        with self.nested():
            inner = [*pool, V(acc, t, False)]
            self.body(inner, depth + 1, self.rng.randint(1, 4))
            v = self.of_type(inner, t)
            self.emit(f"scf.yield {v.name} : {t}")
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
        with self.nested():
            inner = [*pool, V(i, "i32"), V(a, t, False)]
            more, go = self.fresh(), self.fresh()
            self.emit(f"{more} = scalar.cmpi slt, {i}, {limit} : i32")
            data = self.compare(inner)
            self.emit(f"{go} = scalar.andi {more}, {data.name} : i1")
            self.emit(f"scf.condition {go}, {i}, {a} : i1, i32, {t}")
        self.emit(f"}} do({i2}: i32, {a2}: {t}) {{")
        with self.nested():
            inner = [*pool, V(i2, "i32"), V(a2, t, False)]
            self.body(inner, depth + 1, self.rng.randint(1, 3))
            nxt, v = self.fresh(), self.of_type(inner, t)
            self.emit(f"{nxt} = scalar.addi {i2}, {one} : i32")
            self.emit(f"scf.yield {nxt}, {v.name} : i32, {t}")
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


class _Nested:
    """`with gen.nested():` emits the enclosed lines one level deeper."""

    def __init__(self, gen: Gen) -> None:
        self.gen = gen

    def __enter__(self) -> None:
        self.gen.indent += "  "

    def __exit__(self, *exc: object) -> None:
        self.gen.indent = self.gen.indent[:-2]


# ---------------------------------------------------------------- module text


def signature(args: Sequence[tuple[str, str]]) -> str:
    return "(" + ", ".join(f"%{n}: {t}" for n, t in args) + ")"


def kernel_text(sym: str, workload: Sequence[tuple[str, str]], config: Sequence[str],
                device: Sequence[tuple[str, str]], body: Sequence[str], *, export: bool = True,
                where: str = "", device_where: str = "", modifiers: str = "") -> str:
    """A kernel.def: `config` lines end with kernel.launch.config, `body` lines
    (already indented) get kernel.return."""
    head = f"kernel.def {modifiers}" + (f'export("{sym}") ' if export else "") + f"@{sym}{signature(workload)}"
    head += (f" where [{where}]" if where else "") + " {"
    launch = "} launch" + signature(device) + (f" where [{device_where}]" if device_where else "") + " {"
    return "\n".join([head, *("  " + c for c in config), launch, *body, "  kernel.return", "}"]) + "\n"


def launch_line(sym: str, workload: Sequence[str], args: Sequence[str], wtypes: Sequence[str],
                atypes: Sequence[str]) -> str:
    w = f"[{', '.join(workload)}]" if workload else ""
    wt = f"[{', '.join(wtypes)}]" if workload else ""
    return f"kernel.launch @{sym}{w}({', '.join(args)}) : {wt}({', '.join(atypes)})"


def case_text(lines: Sequence[str]) -> str:
    return "\n".join(["check.case @run {", *("  " + x for x in lines), "  check.return", "}"]) + "\n"


def geometry_config(groups: Sequence[int], size: Sequence[int]) -> list[str]:
    """Launch-config lines for a constant geometry."""
    lines, names = [], {}
    for v in sorted(set(groups) | set(size)):
        names[v] = f"%g{v}"
        lines.append(f"%g{v} = index.constant {v} : index")
    g = ", ".join(names[v] for v in groups)
    s = ", ".join(names[v] for v in size)
    lines.append(f"kernel.launch.config workgroups({g}) workgroup_size({s}) : index")
    return lines
