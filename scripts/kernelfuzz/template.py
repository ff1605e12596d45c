"""Family `template`: `template.apply` sites whose winner the selection rules
decide (LANGUAGE.md 10, 17.16-19), from facts and from the target.

The generator keeps a model of every site: the facts of its operands
(constants: literals, config.get bound by --config, a config.def that
--config may override; intervals, moduli and pow2 flags from the kernel's
`where`, from `index.assume`, and from an enclosing `scf.if` on
`index.cmp`) and, per provider, its predicates, `requires
[#target.subgroup.size<N>]`, `target(@t)`, `host`/`device` and priority.
`winners(profile)` applies the rules to the model; the reference run calls
those winners directly (`template.call`, provider modifiers dropped) on the
interpreter. So a wrong selection, in the compiler or in the model, shows
up as a difference on the device whose profile it concerns.

Every family has a fallback provider (priority 0, no predicates) and
distinct priorities, so selection never fails (LINK/005, LINK/006); each
provider computes something else (its ordinal is folded into the result).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

from kernelfuzz.gen import Gen, Tensor, Test, V, case_text, geometry_config, launch_line

INDEX_MIN, INDEX_MAX = -(1 << 63), (1 << 63) - 1
RECORDS = {"vk": ("spirv.target<vulkan1_3>", "vulkan1_3"), "rdna3": ("amdgpu.target<gfx1100>", "gfx1100"),
           "gfx11": ("amdgpu.target<gfx11-generic>", "gfx11-generic")}
COVERS = {"gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1151")}    # LANGUAGE.md 17.18
RESULTS = 6


# ---------------------------------------------------------------- facts and predicates


@dataclass(frozen=True)
class Pred:
    name: str                       # range min max lt le gt ge eq ne mul pow2
    args: tuple[int, ...] = ()

    def text(self, subject: str) -> str:
        return f"{self.name}({', '.join([subject, *map(str, self.args)])})"

    def holds(self, v: int) -> bool:
        a = self.args
        return {"range": lambda: a[0] <= v <= a[1], "min": lambda: v >= a[0], "max": lambda: v <= a[0],
                "lt": lambda: v < a[0], "le": lambda: v <= a[0], "gt": lambda: v > a[0], "ge": lambda: v >= a[0],
                "eq": lambda: v == a[0], "ne": lambda: v != a[0], "mul": lambda: v % a[0] == 0,
                "pow2": lambda: v > 0 and v & (v - 1) == 0}[self.name]()

    def interval(self) -> tuple[int, int] | None:
        """The predicate's set when it is an interval."""
        a, n = self.args, self.name
        if n == "range":
            return (a[0], a[1])
        bounds = {"min": (a and a[0], INDEX_MAX), "max": (INDEX_MIN, a and a[0]), "le": (INDEX_MIN, a and a[0]),
                  "ge": (a and a[0], INDEX_MAX), "eq": (a and a[0], a and a[0])}
        if n in bounds:
            return bounds[n]
        if n == "lt":
            return (INDEX_MIN, a[0] - 1)
        if n == "gt":
            return (a[0] + 1, INDEX_MAX)
        return None


@dataclass(frozen=True)
class Facts:
    """LANGUAGE.md 17.16: a constant, or an interval, a modulus and a pow2 flag."""

    const: int | None = None
    lo: int = INDEX_MIN
    hi: int = INDEX_MAX
    mod: int = 1
    pow2: bool = False

    def add(self, p: Pred) -> Facts:
        if self.const is not None:
            return self
        iv = p.interval()
        if iv is not None:
            return Facts(None, max(self.lo, iv[0]), min(self.hi, iv[1]), self.mod, self.pow2)
        if p.name == "mul":
            return Facts(None, self.lo, self.hi, math.lcm(self.mod, p.args[0]), self.pow2)
        if p.name == "pow2":
            return Facts(None, self.lo, self.hi, self.mod, True)
        return self

    def judge(self, p: Pred) -> str:
        """proven, refuted or unknown."""
        if self.const is not None:
            return "proven" if p.holds(self.const) else "refuted"
        lo, hi = self.lo, self.hi
        iv = p.interval()
        if iv is not None:
            if iv[0] <= lo and hi <= iv[1]:
                return "proven"
            return "refuted" if hi < iv[0] or iv[1] < lo else "unknown"
        if p.name == "ne":
            c = p.args[0]
            return "proven" if not lo <= c <= hi else "refuted" if lo == hi == c else "unknown"
        if p.name == "mul":
            k = p.args[0]
            if self.mod % k == 0:
                return "proven"
            return "refuted" if -(-lo // k) * k > hi else "unknown"
        if p.name == "pow2":
            if self.pow2:
                return "proven"
            powers = [1 << j for j in range(63) if lo <= 1 << j <= hi]
            return "refuted" if not powers else "unknown"
        return "unknown"


@dataclass
class Provider:
    symbol: str
    priority: int
    preds: list[tuple[int, Pred]] = field(default_factory=list)    # (argument position, predicate)
    requires: int | None = None                                      # a subgroup size
    target: str | None = None                                        # a record name
    host: bool = False


@dataclass
class Site:
    result: str                     # the apply's result name: it names the site
    family: str
    facts: list[Facts]              # one per argument (non-subject arguments: Facts())


def judge(p: Provider, site: Site, profile: Any) -> str:
    if p.host:
        return "refuted"            # 17.17: a host provider at a K-body site
    states = []
    if p.target is not None:
        chip = RECORDS[p.target][1]
        states.append("proven" if profile.chip == chip or profile.chip in COVERS.get(chip, ()) else "refuted")
    if p.requires is not None:
        size = profile.subgroup_size
        states.append("unknown" if size is None else "proven" if size == p.requires else "refuted")
    states += [site.facts[i].judge(pred) for i, pred in p.preds]
    if "refuted" in states:
        return "refuted"
    return "unknown" if "unknown" in states else "proven"


def winner(providers: list[Provider], site: Site, profile: Any) -> str:
    proven = [p for p in providers if judge(p, site, profile) == "proven"]
    return max(proven, key=lambda p: p.priority).symbol


# ---------------------------------------------------------------- the generator


class TemplateGen(Gen):
    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.protected: set[str] = set()
        self.families: dict[str, list[Provider]] = {}
        self.sites: list[Site] = []
        self.config: list[str] = []
        self.top: list[str] = []
        self.lanes = rng.choice([1, 4, 16, 32])

    def keep(self, text: str) -> None:
        """Emit a line the model reads: the reducer keeps it."""
        self.emit(text)
        self.protected.add(text.strip())

    def random_pred(self, around: int) -> Pred:
        k = self.rng.random()
        c = around + self.rng.randint(-6, 6)
        if k < 0.3:
            lo = c - self.rng.randint(0, 8)
            return Pred("range", (lo, lo + self.rng.randint(0, 16)))
        if k < 0.6:
            return Pred(self.rng.choice(["min", "max", "lt", "le", "gt", "ge"]), (c,))
        if k < 0.7:
            return Pred(self.rng.choice(["eq", "ne"]), (c,))
        if k < 0.9:
            return Pred("mul", (self.rng.choice([2, 3, 4, 8, 16]),))
        return Pred("pow2")

    def true_preds(self, v: int) -> list[Pred]:
        """Predicates that hold for v (for `where` and `index.assume`)."""
        out = []
        for _ in range(self.rng.randint(1, 3)):
            for _ in range(20):
                p = self.random_pred(v)
                if p.holds(v) and p not in out:
                    out.append(p)
                    break
        return out

    # ---------------------------------------------------------------- module parts

    def family(self, j: int) -> None:
        fam = f"fam{j}"
        self.top.append(f"template.decl @{fam}(%x: i32, %n: index, %k: i32) -> (i32)")
        providers = [Provider(f"{fam}_fallback", 0)]
        priorities = self.rng.sample(range(1, 20), self.rng.randint(1, 4))
        for i, prio in enumerate(priorities):
            p = Provider(f"{fam}_p{i}", prio)
            for _ in range(self.rng.randint(0, 2)):
                p.preds.append((self.rng.choice([1, 1, 2]), self.random_pred(self.rng.choice([0, 4, 16, 32]))))
            if self.rng.random() < 0.25:
                p.requires = self.rng.choice([8, 32, 64])
            if self.rng.random() < 0.2:
                p.target = self.rng.choice(list(RECORDS))
            p.host = self.rng.random() < 0.08
            providers.append(p)
        self.families[fam] = providers
        for ordinal, p in enumerate(providers):
            self.top.append(self.provider_text(fam, p, ordinal))

    def records(self) -> None:
        """The target records the providers name."""
        for name in sorted({p.target for ps in self.families.values() for p in ps if p.target}):
            self.top.append(f"{RECORDS[name][0]} @{name}")

    def provider_text(self, fam: str, p: Provider, ordinal: int) -> str:
        mods = ["host" if p.host else self.rng.choice(["device", ""])]
        if p.target:
            mods.append(f"target(@{p.target})")
        if p.requires:
            mods.append(f"requires [#target.subgroup.size<{p.requires}>]")
        if p.priority:
            mods.append(f"priority({p.priority})")
        names = ["%x", "%n", "%k"]
        where = ", ".join(pred.text(names[i]) for i, pred in p.preds)
        head = (f"template.def<@{fam}> {' '.join(m for m in mods if m)} @{p.symbol}(%x: i32, %n: index, %k: i32)"
                f" -> (i32)" + (f" where [{where}]" if where else "") + " {").replace("  ", " ")
        self.protected.add(head)
        g = Gen(self.rng)
        g.n = 1000 * (ordinal + 1)
        g.emit("%x64 = scalar.extsi %x : i32 to i64")
        g.emit("%n32 = index.cast %n : index to i32")
        g.emit(f"%own = scalar.constant {ordinal * 65537 + 1} : i32")
        pool = [V("%x64", "i64"), V("%x", "i32"), V("%n32", "i32"), V("%k", "i32"), V("%own", "i32")]
        g.body(pool, 1, self.rng.randint(1, 5))
        r = g.of_type([v for v in pool if v.name != "%own"], "i32")   # own ^ own would hide the provider
        g.emit(f"%r = scalar.xori {r.name}, %own : i32")
        g.emit("template.return %r : i32")
        return "\n".join([head, *g.lines, "}"])

    def config_value(self, kind: str) -> tuple[str, int]:
        """A config key of index (or i32) type bound by --config (or a config.def --config may override)."""
        key = f"fz.{kind}{len(self.config)}"
        value = self.rng.randint(0, 40)
        t = "index" if kind == "n" else "i32"
        if self.rng.random() < 0.3:
            self.top.append(f"config.def @{key} = {self.rng.randint(0, 40)} : {t}")
        elif self.rng.random() < 0.3 and t == "index":
            self.top.append(f"config.decl @{key} : %v: index where [range(%v, 0, 40)]")
        else:
            self.top.append(f"config.decl @{key} : {t}")
        self.config.append(f"{key}={value}")
        return key, value

    def index_operand(self, m_facts: Facts, m_value: int) -> tuple[str, Facts, int]:
        """(value, facts, runtime value) of an index operand for a site."""
        k = self.rng.random()
        if k < 0.25:
            c = self.rng.randint(-4, 40)
            name = self.fresh("n")
            self.keep(f"{name} = index.constant {c} : index")
            return name, Facts(c), c
        if k < 0.45:
            key, value = self.config_value("n")
            name = self.fresh("n")
            self.keep(f"{name} = config.get @{key} : index")
            return name, Facts(value), value
        if k < 0.65:
            preds = self.true_preds(m_value)
            name = self.fresh("n")
            self.keep(f"{name} = index.assume %m [{', '.join(p.text('%m') for p in preds)}] : index")
            # The result's facts are the assume's predicates only (section 10 with 17.16: the
            # predicates name the operand, their facts attach to the result; the operand's own
            # facts are not carried over).
            facts = Facts()
            for p in preds:
                facts = facts.add(p)
            return name, facts, m_value
        if k < 0.75:
            c = self.const("index", self.rng.randint(0, 3))
            name = self.fresh("n")
            self.keep(f"{name} = index.add %m, {c} : index")      # no facts derive from arithmetic
            return name, Facts(), m_value
        return "%m", m_facts, m_value

    def i32_operand(self) -> tuple[str, Facts]:
        k = self.rng.random()
        if k < 0.4:
            c = self.rng.randint(-4, 40)
            name = self.fresh("k")
            self.keep(f"{name} = scalar.constant {c} : i32")
            return name, Facts(c)
        if k < 0.7:
            key, value = self.config_value("k")
            name = self.fresh("k")
            self.keep(f"{name} = config.get @{key} : i32")
            return name, Facts(value)
        return "%kk", Facts()

    def site(self, pool: list[V], n: tuple[str, Facts], k: tuple[str, Facts]) -> None:
        fam = self.rng.choice(list(self.families))
        x = self.of_type(pool, "i32")
        r = self.fresh("s")
        self.keep(f"{r} = template.apply<@{fam}>({x.name}, {n[0]}, {k[0]}) : (i32, index, i32) -> (i32)")
        self.sites.append(Site(r, fam, [Facts(), n[1], k[1]]))
        pool.append(V(r, "i32"))

    def body_for_sites(self, pool: list[V], m_facts: Facts, m_value: int) -> None:
        for _ in range(self.rng.randint(2, 5)):
            self.body(pool, 1, self.rng.randint(0, 3))
            if self.rng.random() < 0.25:
                self.branch_sites(pool, m_facts, m_value)
            else:
                n = self.index_operand(m_facts, m_value)
                self.site(pool, n[:2], self.i32_operand())

    def branch_sites(self, pool: list[V], m_facts: Facts, m_value: int) -> None:
        """Sites under `scf.if` on `index.cmp P, %m, c`: the branch's facts hold for %m (17.16)."""
        pred = self.rng.choice(["slt", "sle", "sgt", "sge", "ult", "ule"])
        c = m_value + self.rng.randint(-3, 3)
        if pred in ("ult", "ule"):
            c = max(c, 0)
        cname, p = self.fresh("bc"), self.fresh("bp")
        self.keep(f"{cname} = index.constant {c} : index")
        self.keep(f"{p} = index.cmp {pred}, %m, {cname} : index")
        then, other = {"slt": (Pred("lt", (c,)), Pred("ge", (c,))), "sle": (Pred("le", (c,)), Pred("gt", (c,))),
                       "sgt": (Pred("gt", (c,)), Pred("le", (c,))), "sge": (Pred("ge", (c,)), Pred("lt", (c,))),
                       "ult": (Pred("range", (0, c - 1)), None), "ule": (Pred("range", (0, c)), None)}[pred]
        r = self.fresh()
        self.keep(f"{r} = scf.if {p} -> (i32) {{")
        for branch, fact in ((0, then), (1, other)):
            if branch:
                self.keep("} else {")
            inner = list(pool)
            with self.nested():
                facts = m_facts.add(fact) if fact is not None else m_facts
                self.site(inner, ("%m", facts), self.i32_operand())
                v = self.of_type(inner, "i32")
                self.emit(f"scf.yield {v.name} : i32")
        self.emit("}")
        pool.append(V(r, "i32"))

    def kernel(self) -> tuple[str, list[str]]:
        for j in range(self.rng.randint(1, 3)):
            self.family(j)
        self.records()
        m_value = self.rng.randint(0, 40)
        m_preds = self.true_preds(m_value) if self.rng.random() < 0.7 else []
        m_facts = Facts()
        for p in m_preds:
            m_facts = m_facts.add(p)
        e = self.emit
        e("%o = index.constant 0 : offset")
        e(f"%inv = buffer.view %in[%o] : buffer -> view<{self.lanes}x2xi64>")
        e(f"%outv = buffer.view %out[%o] : buffer -> view<{self.lanes}x{RESULTS}xi64>")
        e("%t = kernel.workitem.id<x> : index")
        pool = []
        for k in range(2):
            v = self.fresh("in")
            e(f"{v} = view.load %inv[%t, {k}] : view<{self.lanes}x2xi64> -> i64")
            pool.append(V(v, "i64"))
        pool.append(V("%kk", "i32"))
        mi = self.fresh()
        e(f"{mi} = index.cast %m : index to i64")
        pool.append(V(mi, "i64"))
        self.body_for_sites(pool, m_facts, m_value)
        # config also sizes a private alloca (the size must fold once config is bound).
        if self.rng.random() < 0.3:
            key, value = self.config_value("n")
            e(f"%cfg = config.get @{key} : index")
            e("%cfg1 = index.constant 1 : index")
            e("%cfgn = index.add %cfg, %cfg1 : index")
            e("%cfgo = index.cast %cfgn : index to offset")
            e("%cfg4 = index.constant 4 : offset")
            e("%cfgb = index.mul %cfgo, %cfg4 : offset")
            e("%pbuf = buffer.alloca<private> align(4) %cfgb : buffer")
            e(f"%pview = buffer.view %pbuf[%o] : buffer -> view<{value + 1}xi32>")
            v = self.of_type(pool, "i32")
            e(f"view.store {v.name}, %pview[%cfg] : i32, view<{value + 1}xi32>")
            r = self.fresh()
            e(f"{r} = view.load %pview[%cfg] : view<{value + 1}xi32> -> i32")
            pool.append(V(r, "i32"))
        sites = [p for p in pool if p.name.startswith("%s")]
        for j in range(RESULTS):
            v = sites[j % len(sites)] if sites and j % 2 == 0 else (self.pick(pool[3:] or pool) or pool[-1])
            e(f"view.store {self.bits64(v)}, %outv[%t, {j}] : i64, view<{self.lanes}x{RESULTS}xi64>")
        where = ", ".join(p.text("%m") for p in m_preds)
        head = "} launch(%m: index, %kk: i32, %in: buffer, %out: buffer)" + (f" where [{where}]" if where else "") \
            + " {"
        self.protected.add(head)
        kernel = "\n".join(['kernel.def export("fuzz") @fuzz() {',
                            *("  " + c for c in geometry_config((1, 1, 1), (self.lanes, 1, 1))),
                            head, *self.lines, "  kernel.return", "}"]) + "\n"
        m_line = f"%m = check.literal value({m_value}) : index"
        self.protected.add(m_line)
        return kernel, [m_line, f"%kk = check.literal value({self.rng.randint(-9, 9)}) : i32"]


def resolved(text: str, sites: list[Site], families: dict[str, list[Provider]], profile: Any) -> str:
    """`text` with each site's apply replaced by a call of the winner for `profile`,
    and the provider modifiers that tie a provider to a target dropped."""
    calls = {s.result: winner(families[s.family], s, profile) for s in sites}
    out = []
    for line in text.split("\n"):
        m = re.match(r"^(\s*)(%[\w$.-]+) = template\.apply<@[\w$.-]+>(.*)$", line)
        if m and m.group(2) in calls:
            line = f"{m.group(1)}{m.group(2)} = template.call @{calls[m.group(2)]}{m.group(3)}"
        elif line.startswith("template.def<"):
            line = re.sub(r" target\(@\w+\)| requires \[[^\]]*\]| host", "", line)
        out.append(line)
    return "\n".join(out)


def generate(name: str) -> Test:
    rng = random.Random(name)
    g = TemplateGen(rng)
    kernel, literals = g.kernel()
    offset = rng.randint(-(1 << 62), 1 << 62)
    step = rng.randint(-(1 << 61), 1 << 61) | 1
    tensors = (
        Tensor("in", f"tensor<{g.lanes}x2xi64>", f"check.generate.iota offset({offset}) step({step})"),
        Tensor("out", f"tensor<{g.lanes}x{RESULTS}xi64>", "check.generate.fill value(0)"),
    )
    case = case_text([*literals, *(t.generate() for t in tensors),
                      launch_line("fuzz", [], ["%m", "%kk", *(f"%{t.name}" for t in tensors)], [],
                                  ["index", "i32", *(t.type for t in tensors)])])
    text = "\n\n".join([*g.top, kernel.rstrip("\n"), case.rstrip("\n")]) + "\n"
    sites, families = g.sites, g.families
    protected = frozenset(g.protected | {line.strip() for t in g.top for line in t.split("\n")[:1]})
    return Test("template", name, text, tensors, config=tuple(g.config),
                resolve=lambda t, profile: resolved(t, sites, families, profile), protected=protected)
