"""Family `command`: command programs through the frontier (LANGUAGE.md 12,
docs/commands.md).

A public `command.program.def @run(%s: index) launch(%b0 .. %b3)` launches
2-3 kernels in a random topology: constants, `--spec @run.s=V`, config
keys bound by `--config`, index and i32 arithmetic, `scf.for` (unrolled),
`scf.if` on folded comparisons and config flags (untaken branches vanish),
`command.concurrent` groups with `command.serial` children, and child
programs launched with `command.program.launch @child[%n]`. Each kernel
reads `src[i]` and `dst[i]`, writes `dst[i]`, and applies a template whose
winner depends on the launch's constant device arguments, so launches of
one kernel fall into several semantic classes.

The program is built as a small tree (`Stmt`) that prints the module and
also runs it on constants: the model's launches, in program order, with the
winner of every site. The device path is what `loom frontier` produces for
the device's profile (`build_command_product`, `product_files`): the
`.loomcmd` read back with `read_command`, each `kernel-N.loombc` request
compiled for the device, every dispatch run in the tree's order on four
shared buffers. It must agree with the model on the dispatches (kernel,
geometry, arguments, requirement numbering by first occurrence of a class)
and, bit for bit, with the reference run: the model's launches written out
as a check case of the resolved kernels on the interpreter. Concurrent
children write different buffers and read none another child writes, so
any order of them gives the same bytes.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelfuzz.gen import Gen, Tensor, Test, V, case_text, launch_line
from kernelfuzz.template import Facts, Provider, Site, TemplateGen, resolved, winner

BUFFERS = 4
MAXW = 48             # elements per buffer (i64); a launch covers w <= MAXW of them
SPEC_RANGE = (1, 8)
CHILD_RANGE = (1, 16)


# ---------------------------------------------------------------- the program tree


@dataclass
class Expr:
    """An SSA value of the program: `op` over operands (names) or a literal."""

    name: str
    type: str                       # index | i32 | i1
    op: str                         # const | config | add | mul | min | max | cast | cmp | ref
    args: tuple[Any, ...] = ()

    def text(self) -> str:
        a, t = self.args, self.type
        if self.op == "const":
            return f"{self.name} = {'index' if t == 'index' else 'scalar'}.constant {a[0]} : {t}"
        if self.op == "config":
            return f"{self.name} = config.get @{a[0]} : {t}"
        if self.op == "cast":
            return f"{self.name} = index.cast {a[0]} : index to i32"
        if self.op == "cmp":
            return f"{self.name} = index.cmp {a[0]}, {a[1]}, {a[2]} : index"
        kind = "index" if t == "index" else "scalar"
        op = self.op if kind == "index" else {"add": "addi", "mul": "muli", "min": "minsi", "max": "maxsi"}[self.op]
        return f"{self.name} = {kind}.{op} {a[0]}, {a[1]} : {t}"

    def value(self, env: dict[str, Any], config: dict[str, Any]) -> Any:
        a = self.args
        if self.op == "const":
            return a[0]
        if self.op == "config":
            return config[a[0]]
        if self.op == "cast":
            return _wrap32(env[a[0]])
        if self.op == "cmp":
            x, y = env[a[1]], env[a[2]]
            return {"slt": x < y, "sle": x <= y, "sgt": x > y, "sge": x >= y, "eq": x == y, "ne": x != y}[a[0]]
        x, y = env[a[0]], env[a[1]]
        r = {"add": x + y, "mul": x * y, "min": min(x, y), "max": max(x, y)}[self.op]
        return _wrap32(r) if self.type == "i32" else r


def _wrap32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


@dataclass
class Launch:
    kernel: int
    w: str
    a: str
    src: str
    dst: str


@dataclass
class For:
    iv: str
    lo: str
    hi: str
    step: str
    body: list[Any]


@dataclass
class If:
    cond: str
    then: list[Any]
    other: list[Any]


@dataclass
class Group:
    kind: str                       # concurrent | serial
    children: list[Any]


@dataclass
class Call:
    child: int
    n: str
    bufs: tuple[str, str]


Stmt = Expr | Launch | For | If | Group | Call


@dataclass
class Kernel:
    symbol: str
    size: int
    family: str
    body: list[str]                 # the launch region's lines (with the apply)


@dataclass
class ModelLaunch:
    kernel: int
    w: int
    a: int
    src: int
    dst: int
    winner: str

    @property
    def klass(self) -> tuple[int, str]:
        return (self.kernel, self.winner)


@dataclass
class Expected:
    """The model of one command test."""

    kernels: list[Kernel]
    families: dict[str, list[Provider]]
    top: list[str]                  # template decls/defs, config decls, target records
    spec: tuple[str, ...]
    inits: list[tuple[int, int]]    # (offset, step) of each buffer's iota
    run: Callable[[Any], list[ModelLaunch]]
    references: dict[str, str] = field(default_factory=dict)

    def reference(self, profile: Any) -> str:
        """The model's launches for `profile` as a check case of the resolved kernels."""
        launches = self.run(profile)
        key = repr([(x.kernel, x.w, x.a, x.src, x.dst, x.winner) for x in launches])
        if key not in self.references:
            self.references[key] = reference_text(self, launches)
        return self.references[key]

    @property
    def reference_text(self) -> str:
        from loomcli.targets.profiles import REFERENCE

        return self.reference(REFERENCE)


def site_of(kernel: Kernel, w: int, a: int) -> Site:
    return Site("%t", kernel.family, [Facts(), Facts(w), Facts(a)])


# ---------------------------------------------------------------- generating


class ProgramGen(Gen):
    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.templates = TemplateGen(rng)
        self.config: dict[str, Any] = {}
        self.bindings: list[str] = []
        self.kernels: list[Kernel] = []
        self.children: list[tuple[list[Stmt], str]] = []    # (body, where) of @child<i>

    # ---------------------------------------------------------------- expressions

    def expr(self, scope: list[Expr], t: str, op: str, *args: Any) -> str:
        e = Expr(self.fresh("p"), t, op, args)
        scope.append(e)
        return e.name

    def index_value(self, scope: list[Expr], names: list[str]) -> str:
        """Some index value (a literal, the spec argument, a config key, a loop variable, arithmetic)."""
        k = self.rng.random()
        if k < 0.3 or not names:
            return self.expr(scope, "index", "const", self.rng.randint(0, 20))
        if k < 0.4:
            key = f"fz.count{len(self.config)}"
            self.config[key] = self.rng.randint(0, 20)
            self.templates.top.append(f"config.decl @{key} : index")
            self.bindings.append(f"{key}={self.config[key]}")
            return self.expr(scope, "index", "config", key)
        if k < 0.7:
            return self.rng.choice(names)
        a, b = self.rng.choice(names), self.expr(scope, "index", "const", self.rng.randint(0, 5))
        return self.expr(scope, "index", self.rng.choice(["add", "mul", "min", "max"]), a, b)

    def width(self, scope: list[Expr], names: list[str]) -> str:
        """An index value clamped into [1, MAXW] (0 now and then: a launch of no workgroups)."""
        v = self.index_value(scope, names)
        lo = self.expr(scope, "index", "const", 0 if self.rng.random() < 0.05 else 1)
        hi = self.expr(scope, "index", "const", MAXW)
        return self.expr(scope, "index", "min", self.expr(scope, "index", "max", v, lo), hi)

    def i32_value(self, scope: list[Expr], names: list[str]) -> str:
        k = self.rng.random()
        if k < 0.35:
            return self.expr(scope, "i32", "const", self.rng.randint(-5, 40))
        if k < 0.55:
            key = f"fz.k{len(self.config)}"
            self.config[key] = self.rng.randint(-5, 40)
            self.templates.top.append(f"config.decl @{key} : i32")
            self.bindings.append(f"{key}={self.config[key]}")
            return self.expr(scope, "i32", "config", key)
        return self.expr(scope, "i32", "cast", self.index_value(scope, names))

    def condition(self, scope: list[Expr], names: list[str]) -> str:
        if self.rng.random() < 0.25:
            key = f"fz.flag{len(self.config)}"
            self.config[key] = self.rng.random() < 0.5
            self.templates.top.append(f"config.decl @{key} : i1")
            self.bindings.append(f"{key}={'true' if self.config[key] else 'false'}")
            return self.expr(scope, "i1", "config", key)
        a = self.index_value(scope, names)
        c = self.expr(scope, "index", "const", self.rng.randint(0, 10))
        return self.expr(scope, "i1", "cmp", self.rng.choice(["slt", "sle", "sgt", "sge", "eq", "ne"]), a, c)

    # ---------------------------------------------------------------- statements

    def statements(self, names: list[str], dsts: list[str], srcs: list[str], depth: int, n: int,
                   children: bool = True) -> list[Stmt]:
        out: list[Stmt] = []
        for _ in range(n):
            k = self.rng.random()
            if depth < 2 and k < 0.15:
                scope: list[Expr] = []
                lo = self.index_value(scope, names) if self.rng.random() < 0.3 else \
                    self.expr(scope, "index", "const", 0)
                hi = self.expr(scope, "index", "add", lo, self.expr(scope, "index", "const", self.rng.randint(0, 3)))
                step = self.expr(scope, "index", "const", self.rng.randint(1, 2))
                iv = self.fresh("i")
                out += scope
                out.append(For(iv, lo, hi, step, self.statements([*names, iv], dsts, srcs, depth + 1,
                                                             self.rng.randint(1, 2), children)))
            elif depth < 2 and k < 0.3:
                scope = []
                cond = self.condition(scope, names)
                out += scope
                out.append(If(cond, self.statements(names, dsts, srcs, depth + 1, self.rng.randint(0, 2), children),
                              self.statements(names, dsts, srcs, depth + 1, self.rng.randint(0, 2), children)))
            elif depth < 2 and k < 0.42 and len(dsts) >= 2:
                out.append(self.concurrent(names, dsts, srcs, depth, children))
            elif children and k < 0.52:
                scope = []
                v = self.index_value(scope, names)
                lo, hi = (self.expr(scope, "index", "const", c) for c in CHILD_RANGE)
                n_ = self.expr(scope, "index", "min", self.expr(scope, "index", "max", v, lo), hi)
                out += scope
                d = self.rng.choice(dsts)
                s = self.rng.choice([x for x in srcs if x != d] or [d])
                out.append(Call(self.rng.randrange(len(self.children)), n_, (s, d)))
            else:
                scope = []
                w = self.width(scope, names)
                a = self.i32_value(scope, names)
                out += scope
                d = self.rng.choice(dsts)
                out.append(Launch(self.rng.randrange(len(self.kernels)), w, a, self.rng.choice(srcs), d))
        return out

    def concurrent(self, names: list[str], dsts: list[str], srcs: list[str], depth: int,
                   children: bool) -> Group:
        """Children that write different buffers and read only their own or untouched ones."""
        writers = self.rng.sample(dsts, min(len(dsts), self.rng.randint(2, 3)))
        readonly = [b for b in srcs if b not in writers]
        parts: list[Any] = []
        for d in writers:
            body = self.statements(names, [d], [d, *readonly], depth + 1, self.rng.randint(1, 2), children)
            parts.append(Group("serial", body) if len(body) > 1 or self.rng.random() < 0.3 else body[0])
        return Group("concurrent", parts)

    def kernel(self, j: int) -> Kernel:
        fam = self.rng.choice(list(self.templates.families))
        g = Gen(self.rng)
        g.n = 100 * (j + 1)
        size = self.rng.choice([1, 4, 8, 16, 32])
        e = g.emit
        e("%o = index.constant 0 : offset")
        e("%i = kernel.workitem.dispatch.id<x> : index")
        e(f"%sv = buffer.view %src[%o] : buffer -> view<{MAXW}xi64>")
        e(f"%dv = buffer.view %dst[%o] : buffer -> view<{MAXW}xi64>")
        e("%live = index.cmp ult, %i, %w : index")
        e("scf.if %live {")
        with g.nested():
            e(f"%x = view.load %sv[%i] : view<{MAXW}xi64> -> i64")
            e(f"%d = view.load %dv[%i] : view<{MAXW}xi64> -> i64")
            e("%x32 = scalar.trunci %x : i64 to i32")
            e(f"%t = template.apply<@{fam}>(%x32, %w, %a) : (i32, index, i32) -> (i32)")
            e("%t64 = scalar.extsi %t : i32 to i64")
            e("%wi = index.cast %w : index to i64")
            pool = [V("%x", "i64"), V("%d", "i64"), V("%t64", "i64"), V("%wi", "i64"), V("%a", "i32")]
            g.body(pool, 1, self.rng.randint(1, 6))
            out = g.bits64(g.pick(pool[2:]) or pool[2])
            mixed = g.fresh()
            e(f"{mixed} = scalar.xori {out}, %d : i64")
            e(f"view.store {mixed}, %dv[%i] : i64, view<{MAXW}xi64>")
        e("}")
        return Kernel(f"k{j}", size, fam, g.lines)

    def program(self) -> list[Stmt]:
        for j in range(self.rng.randint(1, 2)):
            self.templates.family(j)
        self.templates.records()
        self.kernels = [self.kernel(j) for j in range(self.rng.randint(2, 3))]
        bufs = [f"%b{i}" for i in range(BUFFERS)]
        for _ in range(self.rng.randint(0, 1)):
            body = self.statements(["%n"], ["%q"], ["%p", "%q"], 1, self.rng.randint(1, 3), children=False)
            self.children.append((body, f"range(%n, {CHILD_RANGE[0]}, {CHILD_RANGE[1]})"))
        return self.statements(["%s"], bufs, bufs, 0, self.rng.randint(2, 6), children=bool(self.children))


# ---------------------------------------------------------------- text


def stmt_lines(stmts: Sequence[Stmt], indent: str) -> list[str]:
    out: list[str] = []
    for s in stmts:
        if isinstance(s, Expr):
            out.append(indent + s.text())
        elif isinstance(s, Launch):
            out.append(indent + launch_line(f"k{s.kernel}", [s.w], [s.w, s.a, s.src, s.dst], ["index"],
                                            ["index", "i32", "buffer", "buffer"]))
        elif isinstance(s, For):
            out.append(f"{indent}scf.for {s.iv} = [{s.lo} to {s.hi} step {s.step}] {{")
            out += stmt_lines(s.body, indent + "  ")
            out.append(indent + "}")
        elif isinstance(s, If):
            out.append(f"{indent}scf.if {s.cond} {{")
            out += stmt_lines(s.then, indent + "  ")
            out.append(indent + "} else {")
            out += stmt_lines(s.other, indent + "  ")
            out.append(indent + "}")
        elif isinstance(s, Group):
            out.append(f"{indent}command.{s.kind} {{")
            out += stmt_lines(s.children, indent + "  ")
            out.append(indent + "}")
        else:
            out.append(f"{indent}command.program.launch @child{s.child}[{s.n}]({s.bufs[0]}, {s.bufs[1]}) : "
                       f"[index](buffer, buffer)")
    return out


def kernel_def(k: Kernel, symbol: str | None = None, export: bool = False) -> str:
    sym = symbol or k.symbol
    exported = f'export("{sym}") ' if export else ""
    head = f"kernel.def {exported}@{sym}(%w: index) {{"
    return "\n".join([
        head,
        "  %one = index.constant 1 : index",
        f"  %size = index.constant {k.size} : index",
        f"  %bias = index.constant {k.size - 1} : index",
        "  %padded = index.add %w, %bias : index",
        "  %groups = index.div %padded, %size : index",
        "  kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%size, %one, %one) : index",
        "} launch(%w: index, %a: i32, %src: buffer, %dst: buffer) {",
        *k.body, "  kernel.return", "}"])


def program_text(gen: ProgramGen, body: list[Stmt]) -> str:
    parts = [*gen.templates.top, *(kernel_def(k) for k in gen.kernels)]
    for i, (child, where) in enumerate(gen.children):
        parts.append("\n".join([f"command.program.def @child{i}(%n: index) launch(%p: buffer, %q: buffer) "
                                f"where [{where}] {{", *stmt_lines(child, "  "), "  command.return", "}"]))
    bufs = ", ".join(f"%b{i}: buffer" for i in range(BUFFERS))
    parts.append("\n".join([f"command.program.def public @run(%s: index) launch({bufs}) "
                            f"where [range(%s, {SPEC_RANGE[0]}, {SPEC_RANGE[1]})] {{",
                            *stmt_lines(body, "  "), "  command.return", "}"]))
    return "\n\n".join(parts) + "\n"


def reference_text(model: Expected, launches: list[ModelLaunch]) -> str:
    """The launches as one check case: a clone of each kernel per class, its apply
    calling the class's winner; a first launch of @touch passes the buffers in
    ordinal order, so the case's tensors come back in that order."""
    classes: dict[tuple[int, str], str] = {}
    kernels = []
    for x in launches:
        if x.klass not in classes:
            sym = f"k{x.kernel}_c{len(classes)}"
            classes[x.klass] = sym
            text = kernel_def(model.kernels[x.kernel], sym)
            kernels.append(text.replace(f"template.apply<@{model.kernels[x.kernel].family}>",
                                        f"template.call @{x.winner}"))
    touch = "\n".join(["kernel.def @touch() {", "  %one = index.constant 1 : index",
                       "  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index",
                       "} launch(" + ", ".join(f"%b{i}: buffer" for i in range(BUFFERS)) + ") {",
                       "  kernel.return", "}"])
    tensor = f"tensor<{MAXW}xi64>"
    lines = [f"%b{i} = check.generate.iota offset({o}) step({s}) : {tensor}" for i, (o, s) in enumerate(model.inits)]
    lines.append(launch_line("touch", [], [f"%b{i}" for i in range(BUFFERS)], [], [tensor] * BUFFERS))
    for j, x in enumerate(launches):
        lines.append(f"%w{j} = check.literal value({x.w}) : index")
        lines.append(f"%a{j} = check.literal value({x.a}) : i32")
        lines.append(launch_line(classes[x.klass], [f"%w{j}"], [f"%w{j}", f"%a{j}", f"%b{x.src}", f"%b{x.dst}"],
                                 ["index"], ["index", "i32", tensor, tensor]))
    text = "\n\n".join([*model.top, touch, *kernels, case_text(lines).rstrip("\n")]) + "\n"
    return resolved(text, [], model.families, None)    # the applies are calls: this drops provider modifiers


# ---------------------------------------------------------------- the model's run


def simulate(gen: ProgramGen, body: list[Stmt], spec: int, profile: Any) -> list[ModelLaunch]:
    out: list[ModelLaunch] = []

    def run(stmts: Sequence[Stmt], env: dict[str, Any], bufs: dict[str, int]) -> None:
        for s in stmts:
            if isinstance(s, Expr):
                env[s.name] = s.value(env, gen.config)
            elif isinstance(s, Launch):
                k = gen.kernels[s.kernel]
                w, a = env[s.w], env[s.a]
                win = winner(gen.templates.families[k.family], site_of(k, w, a), profile)
                out.append(ModelLaunch(s.kernel, w, a, bufs[s.src], bufs[s.dst], win))
            elif isinstance(s, For):
                i = env[s.lo]
                while i < env[s.hi]:
                    run(s.body, {**env, s.iv: i}, bufs)
                    i += env[s.step]
            elif isinstance(s, If):
                run(s.then if env[s.cond] else s.other, env, bufs)
            elif isinstance(s, Group):
                run(s.children, env, bufs)
            else:
                child, _ = gen.children[s.child]
                run(child, {"%n": env[s.n]}, {"%p": bufs[s.bufs[0]], "%q": bufs[s.bufs[1]]})

    run(body, {"%s": spec}, {f"%b{i}": i for i in range(BUFFERS)})
    return out


def generate(name: str) -> Test:
    rng = random.Random(name)
    gen = ProgramGen(rng)
    body = gen.program()
    spec = rng.randint(*SPEC_RANGE)
    inits = [(rng.randint(-(1 << 40), 1 << 40), rng.randint(-(1 << 30), 1 << 30) | 1) for _ in range(BUFFERS)]
    model = Expected(gen.kernels, gen.templates.families, gen.templates.top, (f"@run.s={spec}",), inits,
                     lambda profile: simulate(gen, body, spec, profile))
    text = program_text(gen, body)
    tensors = tuple(Tensor(f"b{i}", f"tensor<{MAXW}xi64>", f"check.generate.iota offset({o}) step({s})")
                    for i, (o, s) in enumerate(inits))
    return Test("command", name, text, tensors, config=tuple(gen.bindings), program=model)


# ---------------------------------------------------------------- the device path


def run_program(device: Any, test: Test, workdir: str) -> Any:
    """`test`'s program through the frontier for `device`'s profile, each request
    compiled for the device and dispatched in the tree's order. An Outcome
    (runner) whose tensors are the four buffers, or why it failed or disagreed
    with the model."""
    from kernelfuzz.devices import RunError
    from kernelfuzz.runner import Outcome, diagnostics
    from loomcli.check.cases import iota
    from loomcli.diagnostics import CompileError
    from loomcli.errors import LoomError
    from loomcli.frontier import FrontierOptions, build_command_product
    from loomcli.frontier.loomcmd import read_command
    from loomcli.frontier.outputs import product_files
    from loomcli.frontier.prepare import Group as TreeGroup
    from loomcli.ir.types import SCALAR_TYPES

    model: Expected = test.program
    path = os.path.join(workdir, "command.loom")
    with open(path, "w") as f:
        f.write(test.text)
    try:
        product = build_command_product(FrontierOptions(path, profile=device.profile, config=list(test.config),
                                                        spec=list(model.spec)))
        files = product_files(product)
        command = read_command(files["program-0.loomcmd"])
    except CompileError as e:
        return Outcome(why="compile: frontier: " + diagnostics(e))
    except LoomError as e:
        return Outcome(why=f"compile: frontier: {e}")
    dispatches: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, TreeGroup):
            for c in node.children:
                walk(c)
        else:
            dispatches.append(node)
    walk(command.root)
    why = check_against_model(model, device.profile, product, dispatches)
    if why:
        return Outcome(why="run: frontier: " + why)
    executables: dict[int, Any] = {}
    try:
        for r in product.requirements:
            if r.request is None:
                continue
            request = next(q for q in product.requests if q.name + ".loombc" == r.request)
            rpath = os.path.join(workdir, r.request)
            with open(rpath, "wb") as f:
                f.write(files[r.request])
            module = device.compile(rpath, list(request.roots), list(test.config))
            executables[r.ordinal] = device.executable(module, request.roots[0][1:], rpath)
    except CompileError as e:
        return Outcome(why="compile: " + diagnostics(e))
    except LoomError as e:
        return Outcome(why=f"compile: {e}")
    i64 = SCALAR_TYPES["i64"]
    buffers = [bytearray(iota(i64, (MAXW,), o, s).data) for o, s in model.inits]
    try:
        for d in dispatches:
            args = [buffers[a.value] if a.is_buffer else a.value for a in d.arguments]
            executables[d.requirement].dispatch(d.workgroups, d.workgroup_size, args)
    except RunError as e:
        return Outcome(why=f"run: {e}")
    return Outcome(tuple(bytes(b) for b in buffers))


def check_against_model(model: Expected, profile: Any, product: Any, dispatches: list[Any]) -> str:
    """'' when the frontier's dispatches are the model's launches, else the first difference."""
    launches = model.run(profile)
    if len(dispatches) != len(launches):
        return f"{len(dispatches)} dispatches, the model has {len(launches)} launches"
    ordinals: dict[tuple[int, str], int] = {}
    for j, (d, x) in enumerate(zip(dispatches, launches)):
        want_req = ordinals.setdefault(x.klass, len(ordinals))
        k = model.kernels[x.kernel]
        groups = ((x.w + k.size - 1) // k.size, 1, 1)
        symbol = product.requirements[d.requirement].symbol
        args = [("buffer", a.value) if a.is_buffer else (a.type, a.value) for a in d.arguments]
        want_args = [("index", x.w), ("i32", x.a), ("buffer", x.src), ("buffer", x.dst)]
        got = (symbol, d.requirement, tuple(d.workgroups), tuple(d.workgroup_size), args)
        want = (k.symbol, want_req, groups, (k.size, 1, 1), want_args)
        if got != want:
            return f"dispatch {j}: {got}, the model says {want} (winner @{x.winner})"
    sources = [r for r in product.requirements if r.kind == "source"]
    if len(sources) != len(ordinals):
        return f"{len(sources)} requirements, the model has {len(ordinals)} classes"
    return ""

