"""`expand-math`: the transcendental functions a target lacks, as Loom ops.

Every `scalar.expf exp2f logf log2f sinf cosf tanhf powf` whose (function,
type) the profile does not list in `native_math` becomes a call of a
private pure function built once per module from `mathlib`'s routines:

    %y = scalar.sinf %x : f32
    ->
    %y = func.call pure @loom.math.sin.f32(%x) : (f32) -> (f32)

Functions rather than inline copies: the argument reduction of sin and
cos (`@loom.math.rem_pio2.<type>`, which both call) is a few hundred ops
with its Payne-Hanek part, a kernel often calls one function many times,
and every back end lowers `func.call`; a later `inline` pass (or LLVM) may
still inline them. The names start with
`loom.math.` and take the linker's `.N` suffix if a module already has
such a symbol, so they never collide with a user's.

f16 and bf16 go through f32 and round once (`extf`, the f32 function or
the native f32 op, `fptrunc`); f32 pow goes through the f64 routine when
the profile has f64 (and i64). The f64 routines handle exponent bits in i64: f64
math on a profile with f64 but without i64 is TARGET/005 at the op (no
profile here is such). Without a target nothing is native and f64 and i64
are assumed (what `loom opt` shows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.builder import Namer, create, substitute
from loomcli.ir.core import BlockArgument, Module, Operation, Signature, Value
from loomcli.ir.ops import OpTable
from loomcli.ir.types import BF16, F16, F32, F64, I32, Type
from loomcli.passes import mathlib
from loomcli.passes.mathlib import Builder, MathLib
from loomcli.passes.registry import ModulePass, PassContext
from loomcli.targets.profiles import Profile

# Loom op -> the function's name in profiles' `native_math`.
TRANSCENDENTAL = OpTable("passes.expand_math.TRANSCENDENTAL", {
    "scalar.expf": "exp", "scalar.exp2f": "exp2", "scalar.logf": "log", "scalar.log2f": "log2",
    "scalar.sinf": "sin", "scalar.cosf": "cos", "scalar.tanhf": "tanh", "scalar.powf": "pow"})
_NARROW = (F16, BF16)


@dataclass(frozen=True)
class ExpandMath(ModulePass):
    name = "expand-math"
    summary = "expand exp, log, sin, cos, tanh, pow the target lacks into Loom scalar ops (private functions)"

    def removes(self, target: Profile | None) -> frozenset[str]:
        """The functions the target has for no type at all."""
        native = {fn for fn, _ in target.native_math} if target is not None else set()
        return frozenset(name for name, fn in TRANSCENDENTAL.items() if fn not in native)

    def applies(self, module: Module, ctx: PassContext) -> bool:
        native = ctx.target.native_math if ctx.target is not None else frozenset()
        return any(op.name in TRANSCENDENTAL and (TRANSCENDENTAL[op.name], op.results[0].type.name) not in native
                   for top in module.ops for op in top.walk())

    def run(self, module: Module, ctx: PassContext) -> None:
        profile = ctx.target
        native = profile.native_math if profile is not None else frozenset()
        features = profile.features if profile is not None else frozenset({"f64", "i64"})
        library = Library(module, features)
        todo = [(top, op) for top in module.ops for op in top.walk() if op.name in TRANSCENDENTAL]
        for top, op in todo:
            fn = TRANSCENDENTAL[op.name]
            t = op.results[0].type
            if (fn, t.name) in native:
                continue
            if t is F64 and "i64" not in features:
                # The f64 routines read and build exponent bits through i64.
                raise CompileError([Diagnostic.make("TARGET/005", module.path, op.loc, k=(top.symbol or "?"),
                                                    feature=f"i64 for {op.name} on f64",
                                                    target=profile.name if profile is not None else "none")])
            if t in _NARROW:  # through f32, one rounding at the end
                namer = Namer.for_op(op)
                wide = [_insert_before(op, create("scalar.extf", [v], [F32]), namer) for v in op.operands]
                if (fn, "f32") in native:
                    inner = create(op.name, wide, [F32], {"flags": op.attr("flags", ())})
                else:
                    inner = library.call_op(fn, F32, wide)
                substitute(op, create("scalar.fptrunc", [_insert_before(op, inner, namer)]))
            else:
                substitute(op, library.call_op(fn, t, op.operands, results=False))


def _insert_before(anchor: Operation, op: Operation, namer: Namer) -> Value:
    """Put `op` before `anchor`; its result, freshly named."""
    region = anchor.parent
    assert region is not None
    region.ops.insert(region.ops.index(anchor), op)
    op.parent = region
    result = op.results[0]
    result.name = namer.fresh("wide")
    return result


class Library:
    """The math functions of one module, built when first called."""

    def __init__(self, module: Module, features: Iterable[str]) -> None:
        self.module = module
        self.features = frozenset(features)
        self.names: dict[tuple[str, str], str] = {}
        self.taken = set(module.symbols())

    def call_op(self, fn: str, t: Type, args: Iterable[Value], results: bool = True) -> Operation:
        """A call of the function; without `results`, for `substitute` to give it the replaced op's."""
        return _call(self.function(fn, t), list(args), [t] if results else [])

    def function(self, fn: str, t: Type) -> str:
        key = (fn, t.name)
        name = self.names.get(key)
        if name is None:
            name = self.names[key] = self._fresh(f"loom.math.{fn}.{t.name}")
            self.module.body.append(self._build(name, fn, t))
        return name

    def _fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}.{n}"
        self.taken.add(name)
        return name

    def _build(self, name: str, fn: str, t: Type) -> Operation:
        arity = 2 if fn == "pow" else 1
        results = [t, I32] if fn == "rem_pio2" else [t]
        fdef = create("func.def", attrs={"pure": True, "sym": name})
        body = fdef.regions[0]
        arg_names = ("x", "y")[:arity]
        body.args = [BlockArgument(n, t, body, i) for i, n in enumerate(arg_names)]
        fdef.set_attr("sig", Signature(body.args, results))
        b = Builder(body, Namer(taken=arg_names))
        lib = MathLib(b, t.bits, "i64" in self.features,  # type: ignore[attr-defined]
                      reduce=None if fn == "rem_pio2" else self._reduce(b, t))
        if fn == "pow":
            values = [mathlib.pow_special(lib, body.args[0], body.args[1], core=self._pow_core(lib, t))]
        elif fn == "rem_pio2":
            values = mathlib.rem_pio2(lib, body.args[0])
        else:
            values = [mathlib.UNARY[fn](lib, body.args[0])]
        b.op("func.return", values, ())
        return fdef

    def _reduce(self, b: Builder, t: Type) -> Callable[[Value], Sequence[Value]]:
        """sin's and cos's argument reduction: a call of one function per type."""
        def call(x: Value) -> Sequence[Value]:
            op = _call(self.function("rem_pio2", t), [x], [t, I32])
            b.region.append(op)
            for r, hint in zip(op.results, ("r", "q")):
                r.name = b.namer.fresh(hint)
            return op.results
        return call

    def _pow_core(self, lib: MathLib, t: Type) -> Callable[[Value, Value], Value]:
        """|x|**y for finite positive |x| and finite y: f32 through the f64 function where there is f64."""
        if t is F32 and {"f64", "i64"} <= self.features:
            def through_f64(ax: Value, y: Value) -> Value:
                call = _call(self.function("pow", F64), [lib.cast("extf", v, F64) for v in (ax, y)], [F64])
                lib.b.region.append(call)
                call.results[0].name = lib.b.namer.fresh("wide")
                return lib.cast("fptrunc", call.results[0], F32)
            return through_f64
        return lambda ax, y: mathlib.pow_core(lib, ax, y)


def _call(callee: str, args: list[Value], result_types: list[Type]) -> Operation:
    return create("func.call", args, result_types, {"pure": True, "callee": callee, "nworkload": 0,
                                                    "written_nworkload": 0})


__all__ = ["TRANSCENDENTAL", "ExpandMath"]
