"""Every Loom v1 operation, declared once, as data.

A row gives the op's textual format (directives that parse and print
themselves), its regions, traits, the contexts it may appear in, the name of
its typing rule (checked by `loomcli.ir.verifier`) and the canonical example
of LANGUAGE.md section 7. Parser, printer, verifier and bytecode all read
this table; adding an op is one row here plus, if it needs one, a rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from loomcli.ir.format import (
    Bindings,
    Callee,
    CallTypes,
    ConfigDeclType,
    Dict,
    Directive,
    Do,
    Else,
    ForHeader,
    Indexed,
    Kind,
    KwParen,
    Leading,
    Literal,
    Modifiers,
    Operands,
    Pack,
    ParenOperands,
    Predicate,
    Preds,
    Punct,
    Region,
    ResultTypes,
    SigArgs,
    SigResults,
    StringAttr,
    SymbolList,
    SymKind,
    SymName,
    TypeArrow,
    TypeAttr,
    TypeEach,
    TypeSame,
    Where,
)
from loomcli.ir.types import I1

# Contexts (LANGUAGE.md section 3).
MODULE = "module"
K_CFG, K_BODY = "launch-config region", "kernel body"
F_DEV, F_HOST, F_ANY = "device function", "host function", "function"
PROGRAM, CASE = "command program", "check case"

ALL = frozenset({K_CFG, K_BODY, F_DEV, F_HOST, F_ANY, PROGRAM, CASE})
NOT_CFG = ALL - {K_CFG}
KERNEL_AND_FUNCS = frozenset({K_BODY, F_DEV, F_HOST, F_ANY})
DEVICE = frozenset({K_BODY, F_DEV})
BODY = frozenset({K_BODY})
FUNCS = frozenset({F_DEV, F_HOST, F_ANY})
LAUNCHERS = frozenset({PROGRAM, CASE})
TOP = frozenset({MODULE})
DEVICE_SITES = frozenset({K_BODY, F_DEV})
HOST_SITES = frozenset({K_CFG, PROGRAM, CASE, F_HOST})


def function_context(convention: str | None) -> str:
    """The context of a function or template body with this `convention` (section 3)."""
    return {"device": F_DEV, "host": F_HOST}.get(convention or "", F_ANY)


def may_call(ctx: str | None, convention: str | None) -> bool:
    """May a site in context `ctx` call (or select) a callee with this
    `convention`? `device` callees only from device sites, `host` ones only
    from host sites, unannotated ones from anywhere (sections 3 and 17.17)."""
    if convention == "device":
        return ctx in DEVICE_SITES
    if convention == "host":
        return ctx in HOST_SITES
    return True

# Traits.
PURE = "pure"                # no side effects; may fold
TERMINATOR = "terminator"
SYMBOL = "symbol"            # defines a module symbol
CONVERGENT = "convergent"    # barriers and collectives
COORDINATE = "coordinate"    # kernel coordinates
MEMORY = "memory"            # memory access or allocation (forbidden in `pure`)
LAUNCH = "launch"            # launches or dispatches work
COMMUTATIVE = "commutative"  # two operands that may swap (the canonicalizer orders constants right)
TARGET_RECORD = "target record"  # `<family>.target<chip> @r {keys}` (LANGUAGE.md 7.8)
CALL = "call"                # runs a function body (func.call, template.call)
FUNCTION = "function"        # a function body that calls run (func.def, template.def)
UNIFORM = "uniform"          # its result is one value for the whole workgroup, whatever its operands
APPROXIMATE = "approximate"  # no exactly rounded result (section 7.2): never folded; each target's precision

FASTMATH = ("reassoc", "nnan", "ninf", "nsz", "arcp", "contract", "afn")
OVERFLOW = ("nsw", "nuw")
CMPI = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
CMPF = ("oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une", "uno")
COMBINE = ("addi", "muli", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui",
           "addf", "mulf", "minimumf", "maximumf", "minnumf", "maxnumf")
RMW = ("xchgi", "addi", "subi", "andi", "ori", "xori", "minsi", "maxsi", "minui", "maxui",
       "xchgf", "addf", "minimumf", "maximumf", "minnumf", "maxnumf")
AXES = ("x", "y", "z")
MEMORY_SPACES = ("global", "workgroup", "private", "constant")
ORDERINGS = ("relaxed", "acquire", "release", "acq_rel", "seq_cst")
SCOPES = ("subgroup", "workgroup", "device", "system")
AMDGPU_CHIPS = ("gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1151",
                "gfx1200", "gfx1201", "gfx9-generic", "gfx9-4-generic", "gfx10-3-generic",
                "gfx11-generic", "gfx12-generic")
VULKAN_ENVS = ("vulkan1_1", "vulkan1_2", "vulkan1_3")
NVPTX_CHIPS = ("sm_80", "sm_89", "sm_90", "sm_100")
CPU_HOSTS = ("x86-64",)
# The target record ops (section 7.8): `target(@t)` names one of these.


@dataclass(frozen=True)
class RegionSpec:
    terminator: str
    context: str | None = None   # None: the parent's context; "convention": from host/device
    isolated: bool = False
    elide: bool = False          # an operand-free terminator is elided in text


@dataclass(eq=False)
class OpDef:
    name: str
    format: tuple[Directive, ...]
    rule: str | None = None
    contexts: frozenset[str] = ALL
    traits: frozenset[str] = frozenset()
    regions: tuple[RegionSpec, ...] = ()
    example: str = ""
    segments: tuple[str, ...] = ()     # attribute names holding operand-group sizes, in order
    indexed_base: int = 0              # operand position of an indexed base (`%v[...]`)
    leading_operands: int = 0          # operands before carried inits (scf.for bounds)
    legacy_dict: bool = False          # `op {…}` was the legacy spelling (PARSE/011)
    operand_keywords: tuple[str, ...] = field(default=())
    symbol_kind: str = ""              # what messages call the symbol a SYMBOL op defines ("function")
    # Names for the named accessors (`Operation.operand`, `.result`, `.region`):
    # one per position; `*name` is a variadic group taking what the fixed
    # names around it leave (at most one per list). Operand groups sized by
    # `segments` are named by their segment attribute. Attribute names come
    # from the format's directives (`Directive.attributes`).
    operands: tuple[str, ...] = ()
    results: tuple[str, ...] = ()
    region_names: tuple[str, ...] = ()
    attributes: frozenset[str] = field(init=False, default=frozenset())
    # Where each fixed name of `operands` / `results` sits: its index, or
    # (after a variadic group) its index from the end, negative. Passes ask
    # `op.operand(name)` of most ops they visit; this answers without a scan.
    operand_at: dict[str, int] = field(init=False, repr=False, default_factory=dict)
    result_at: dict[str, int] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.operand_keywords = tuple(d.word for d in self.format if isinstance(d, KwParen) and d.inner == "operand")
        self.has_kind = any(isinstance(d, (Kind, SymKind)) for d in self.format[:1])
        self.attributes = frozenset(a for d in self.format for a in d.attributes())
        for names in (self.operands, self.results):
            assert sum(n.startswith("*") for n in names) <= 1, (self.name, names)
        assert not self.region_names or len(self.region_names) == len(self.regions), self.name
        self.operand_at = _fixed_positions(self.operands, self.segments)
        self.result_at = _fixed_positions(self.results, ())

    def has(self, trait: str) -> bool:
        return trait in self.traits

    def span(self, names: tuple[str, ...], name: str, count: int) -> slice | None:
        """Where `name` sits among `count` operands or results named by `names`
        (one position for a fixed name), None if `names` lacks it."""
        for at, declared in enumerate(names):
            if declared.lstrip("*") != name:
                continue
            if declared.startswith("*"):
                return slice(at, count - (len(names) - at - 1))
            after_variadic = any(n.startswith("*") for n in names[:at])
            start = count - (len(names) - at) if after_variadic else at
            return slice(start, start + 1)
        return None


def _fixed_positions(names: tuple[str, ...], groups: tuple[str, ...]) -> dict[str, int]:
    """`OpDef.operand_at` / `.result_at` for `names`; `groups` (segment
    attributes) are groups whatever `names` says."""
    at: dict[str, int] = {}
    variadic = False
    for i, name in enumerate(names):
        if name.startswith("*"):
            variadic = True
        elif name not in groups:
            at[name] = i - len(names) if variadic else i
    return at


OPS: dict[str, OpDef] = {}


def op(name: str, *fmt: Directive, **kw: Any) -> OpDef:
    if "traits" in kw:
        kw["traits"] = frozenset(kw["traits"])
    d = OpDef(name, tuple(fmt), **kw)
    assert name not in OPS, name
    OPS[name] = d
    return d


_P = {PURE}
# Operand and result names many rows share (for the named accessors).
_RESULT = ("result",)
_UNARY = ("value",)
_BINARY = ("lhs", "rhs")
_LOAD = ("view", "*indices")
_STORE = ("value", "view", "*indices")

# ------------------------------------------------------------------ index (7.1)
op("index.constant", Literal(), TypeSame(), rule="constant", traits={PURE, UNIFORM}, results=_RESULT,
   example="%c = index.constant 64 : index")
op("index.cast", Operands(), TypeArrow([0], "to"), rule="index_cast", traits=_P, operands=_UNARY, results=_RESULT,
   example="%i = index.cast %x : i64 to index")
_COMMUTES = {"add", "mul", "min", "max", "andi", "ori", "xori", "addi", "muli", "minsi", "maxsi", "minui", "maxui",
             "addf", "mulf", "minimumf", "maximumf", "minnumf", "maxnumf"}


_APPROXIMATES = {"rsqrtf", "expf", "exp2f", "logf", "log2f", "tanhf", "sinf", "cosf", "powf"}


def _arith(name: str) -> set[str]:
    traits = {PURE, COMMUTATIVE} if name in _COMMUTES else {PURE}
    return traits | {APPROXIMATE} if name in _APPROXIMATES else traits


for _n in ("add", "sub", "mul", "div", "rem", "min", "max", "andi", "ori", "xori", "shli", "shrsi", "shrui"):
    op(f"index.{_n}", Operands(), TypeSame(), rule="index_binary", traits=_arith(_n), operands=_BINARY, results=_RESULT,
       example=f"%r = index.{_n} %a, %b : index")
op("index.madd", Operands(), TypeSame(), rule="index_ternary", traits=_P, operands=("a", "b", "c"), results=_RESULT,
   example="%r = index.madd %a, %b, %c : index")
op("index.scale", Operands(), TypeArrow([0, 1]), rule="index_scale", traits=_P, operands=("index", "scale"),
   results=_RESULT,
   example="%o = index.scale %i, %s : index, offset -> offset")
op("index.cmp", Predicate(CMPI), Operands(), TypeSame(result=I1), rule="index_cmp", traits=_P,
   operands=_BINARY, results=_RESULT,
   example="%p = index.cmp ult, %a, %b : index")
op("index.assume", Operands(), Preds(), TypeEach(mirror=True), rule="index_assume", traits=_P,
   operands=("*values",), results=("*values",),
   example="%a2, %b2 = index.assume %a, %b [mul(%a, 16), range(%b, 0, 255)] : index, offset")

# ------------------------------------------------------------------ scalar (7.2)
op("scalar.constant", Literal(), TypeSame(), rule="constant", traits={PURE, UNIFORM}, results=_RESULT,
   example="%c = scalar.constant 0.5 : f32")
for _n in ("addi", "subi", "muli", "shli"):
    op(f"scalar.{_n}", Kind(OVERFLOW, flags=True, attr="flags"), Operands(), TypeSame(), rule="int_binary",
       traits=_arith(_n), operands=_BINARY, results=_RESULT, example=f"%r = scalar.{_n}<nsw> %a, %b : i32")
for _n in ("divsi", "divui", "remsi", "remui", "minsi", "maxsi", "minui", "maxui", "andi", "ori", "xori",
           "shrsi", "shrui"):
    op(f"scalar.{_n}", Operands(), TypeSame(), rule="int_binary", traits=_arith(_n), operands=_BINARY, results=_RESULT,
       example=f"%r = scalar.{_n} %a, %b : i32")
for _n in ("addf", "subf", "mulf", "divf", "minimumf", "maximumf", "minnumf", "maxnumf", "powf"):
    op(f"scalar.{_n}", Kind(FASTMATH, flags=True, attr="flags"), Operands(), TypeSame(), rule="float_binary",
       traits=_arith(_n), operands=_BINARY, results=_RESULT, example=f"%r = scalar.{_n}<nnan|nsz> %a, %b : f32")
for _n in ("sqrtf", "negf", "rsqrtf", "expf", "exp2f", "logf", "log2f", "tanhf", "sinf", "cosf"):
    op(f"scalar.{_n}", Kind(FASTMATH, flags=True, attr="flags"), Operands(), TypeSame(), rule="float_unary",
       traits=_arith(_n), operands=_UNARY, results=_RESULT, example=f"%r = scalar.{_n} %x : f32")
for _n in ("absf", "floorf", "ceilf"):
    op(f"scalar.{_n}", Operands(), TypeSame(), rule="float_unary", traits=_P, operands=_UNARY, results=_RESULT,
       example=f"%r = scalar.{_n} %x : f32")
op("scalar.fmaf", Kind(FASTMATH, flags=True, attr="flags"), Operands(), TypeSame(), rule="float_ternary",
   traits=_P, operands=("a", "b", "c"), results=_RESULT, example="%r = scalar.fmaf %a, %b, %c : f32")
op("scalar.cmpf", Kind(FASTMATH, flags=True, attr="flags"), Predicate(CMPF), Operands(), TypeSame(result=I1),
   rule="float_cmp", traits=_P, operands=_BINARY, results=_RESULT, example="%p = scalar.cmpf olt, %a, %b : f32")
op("scalar.cmpi", Predicate(CMPI), Operands(), TypeSame(result=I1), rule="int_cmp", traits=_P,
   operands=_BINARY, results=_RESULT,
   example="%p = scalar.cmpi slt, %a, %b : i32")
for _n, _ex in (("sitofp", "i32 to f32"), ("uitofp", "i32 to f32"), ("fptosi", "f32 to i32"),
                ("fptoui", "f32 to i32"), ("extf", "f16 to f32"), ("fptrunc", "f32 to f16"),
                ("extsi", "i8 to i32"), ("extui", "i8 to i32"), ("trunci", "i32 to i8"),
                ("bitcast", "f32 to i32")):
    op(f"scalar.{_n}", Operands(), TypeArrow([0], "to"), rule=f"cast_{_n}", traits=_P, operands=_UNARY, results=_RESULT,
       example=f"%f = scalar.{_n} %i : {_ex}")

# ------------------------------------------------------------------ scf (7.3)
_YIELD = RegionSpec("scf.yield", elide=True)
op("scf.if", Operands(), ResultTypes(), Region(0), Else(), rule="scf_if", contexts=NOT_CFG,
   regions=(_YIELD, _YIELD), operands=("condition",), results=("*results",), region_names=("then", "else"),
   example="%r = scf.if %c -> (f32) {")
op("scf.for", ForHeader(), Bindings(optional=True), ResultTypes(), Region(0), rule="scf_for",
   contexts=NOT_CFG, regions=(_YIELD,), leading_operands=3, operands=("lower", "upper", "step", "*inits"),
   results=("*results",), region_names=("body",),
   example="%r = scf.for %i = [%lo to %hi step %s](%acc = %init : f32) -> (f32) {")
op("scf.while", Bindings(optional=True), ResultTypes(), Region(0), Do(), rule="scf_while",
   contexts=KERNEL_AND_FUNCS, regions=(RegionSpec("scf.condition"), _YIELD), operands=("*inits",),
   results=("*results",), region_names=("before", "after"),
   example="%r = scf.while(%x = %init : index) -> (index) {")
op("scf.yield", Operands(), TypeEach(), contexts=NOT_CFG, traits={TERMINATOR}, operands=("*values",),
   example="scf.yield %a, %b : f32, i32")
op("scf.condition", Operands(), TypeEach(), rule="condition", contexts=KERNEL_AND_FUNCS, traits={TERMINATOR},
   operands=("condition", "*values"),
   example="scf.condition %go, %x : i1, index")
op("scf.select", Operands(), TypeSame(operands=[1, 2]), rule="select", traits=_P,
   operands=("condition", "true_value", "false_value"), results=_RESULT,
   example="%r = scf.select %c, %a, %b : f32")

# ------------------------------------------------------------------ buffer, view (7.4)
_MEM = {MEMORY}
op("buffer.view", Indexed(literals=False), TypeArrow([0]), rule="buffer_view", contexts=DEVICE, traits=_P,
   operands=("buffer", "offset"), results=_RESULT,
   example="%v = buffer.view %b[%off] : buffer -> view<[%n]x16xf32>")
op("buffer.alloca", Kind(("workgroup", "private")), KwParen("align", "int"), Operands(), TypeSame(operands=[]),
   rule="buffer_alloca", contexts=DEVICE, traits=_MEM, legacy_dict=True, operands=("bytes",), results=_RESULT,
   example="%s = buffer.alloca<workgroup> align(16) %bytes : buffer")
op("buffer.pack", Pack(), TypeSame(result="pack"), rule="buffer_pack", contexts=DEVICE, traits=_P,
   operands=("*sizes",), results=("total", "*offsets"),
   example="%t, %o0, %o1 = buffer.pack [align(16) %n0, align(256) %n1] : offset")
op("buffer.assume.noalias", Operands(), TypeEach(mirror=True), rule="assume_noalias", contexts=DEVICE,
   traits=_P, operands=("*buffers",), results=("*buffers",),
   example="%a2, %b2 = buffer.assume.noalias %a, %b : buffer, buffer")
op("buffer.assume.alignment", Operands(), Dict(keys={"minimum_alignment": int}), TypeSame(),
   rule="assume_alignment", contexts=DEVICE, traits=_P, operands=("buffer",), results=_RESULT,
   example="%a2 = buffer.assume.alignment %a {minimum_alignment = 64} : buffer")
op("buffer.assume.memory_space", Kind(MEMORY_SPACES), Operands(), TypeSame(), rule="assume_memory_space",
   contexts=DEVICE, traits=_P, legacy_dict=True, operands=("buffer",), results=_RESULT,
   example="%g = buffer.assume.memory_space<global> %b : buffer")
op("view.load", Indexed(), TypeArrow([0]), rule="view_load", contexts=DEVICE, traits=_MEM, operands=_LOAD,
   results=_RESULT,
   example="%x = view.load %v[%i, 0] : view<[%n]x4xf32> -> f32")
op("view.store", Leading(), Indexed(), TypeEach(operands=[0, 1]), rule="view_store", contexts=DEVICE,
   traits=_MEM, indexed_base=1, operands=_STORE, example="view.store %x, %v[%i, 0] : f32, view<[%n]x4xf32>")
op("view.subview", Indexed(), TypeArrow([0]), rule="view_subview", contexts=DEVICE, traits=_P, operands=_LOAD,
   results=_RESULT,
   example="%w = view.subview %v[%r, 0] : view<[%m]x[%n]xf32> -> view<16x[%n]xf32>")
op("view.atomic.rmw", Kind(RMW), Leading(), Indexed(), Dict(keys={"ordering": ORDERINGS, "scope": SCOPES}),
   TypeArrow([0, 1]), rule="atomic_rmw", contexts=DEVICE, traits=_MEM, indexed_base=1, operands=_STORE, results=_RESULT,
   example="%o = view.atomic.rmw<addf> %x, %v[%i] {ordering = relaxed, scope = device} : f32, view<[%n]xf32> -> f32")

# ------------------------------------------------------------------ vector (7.5)
op("vector.constant", Literal(), TypeSame(), rule="vector_constant", contexts=DEVICE, traits={PURE, UNIFORM},
   results=_RESULT, example="%z = vector.constant 0.0 : vector<8xf32>")
op("vector.splat", Operands(), TypeSame(operands=[], legacy_arrow=True), rule="vector_splat", contexts=DEVICE,
   traits=_P, operands=_UNARY, results=_RESULT, example="%v = vector.splat %s : vector<8xf32>")
op("vector.load", Indexed(), TypeArrow([0]), rule="vector_load", contexts=DEVICE, traits=_MEM, operands=_LOAD,
   results=_RESULT,
   example="%v = vector.load %w[%r, %c] : view<[%m]x64xf32> -> vector<8xf32>")
op("vector.store", Leading(), Indexed(), TypeEach(operands=[0, 1]), rule="vector_store", contexts=DEVICE,
   traits=_MEM, indexed_base=1, operands=_STORE,
   example="vector.store %v, %w[%r, %c] : vector<8xf32>, view<[%m]x64xf32>")
op("vector.extract", Indexed(), TypeArrow([0]), rule="vector_extract", contexts=DEVICE, traits=_P,
   operands=("vector", "*indices"), results=_RESULT,
   example="%x = vector.extract %v[%k] : vector<8xf32> -> f32")
op("vector.insert", Leading("into"), Indexed(), TypeEach(operands=[0, 1], mirror=1), rule="vector_insert",
   contexts=DEVICE, traits=_P, indexed_base=1, operands=("value", "vector", "*indices"), results=_RESULT,
   example="%u = vector.insert %x into %v[%k] : f32, vector<8xf32>")
op("vector.reduce", Kind(COMBINE), Operands(), TypeEach(mirror=1, legacy_arrow=True), rule="vector_reduce",
   contexts=DEVICE, traits=_P, operands=("vector", "init"), results=_RESULT,
   example="%s = vector.reduce<addf> %v, %init : vector<8xf32>, f32")
for _n in ("fmaf", "addf", "mulf"):
    op(f"vector.{_n}", Kind(FASTMATH, flags=True, attr="flags"), Operands(), TypeSame(), rule="vector_arith",
       contexts=DEVICE, traits=_P, operands=("a", "b", "c") if _n == "fmaf" else _BINARY, results=_RESULT,
       example=f"%r = vector.{_n} %a, %b : vector<8xf32>")
for _n in ("addi", "muli"):
    op(f"vector.{_n}", Operands(), TypeSame(), rule="vector_arith", contexts=DEVICE, traits=_P,
       operands=_BINARY, results=_RESULT,
       example=f"%r = vector.{_n} %a, %b : vector<8xi32>")

# ------------------------------------------------------------------ kernel (7.6)
op("kernel.def", Modifiers(("retain", "target", "export")), SymName(), SigArgs("sig", region=0), Where("sig"),
   Region(0), SigArgs("launch", region=1, glued=False), Where("launch"), Region(1), rule="kernel_def",
   contexts=TOP, traits={SYMBOL},
   regions=(RegionSpec("kernel.launch.config", K_CFG, isolated=True),
            RegionSpec("kernel.return", K_BODY, isolated=True)), region_names=("config", "body"),
   example="kernel.def export(\"k\") @k(%n: index) {", symbol_kind="kernel")
op("kernel.decl", SymName(), SigArgs("sig"), Where("sig"), SigArgs("launch", glued=False), Where("launch"),
   rule="kernel_decl", contexts=TOP, traits={SYMBOL},
   example="kernel.decl @k(%n: index) launch(%n: index, %out: buffer)", symbol_kind="kernel")
op("kernel.entry.decl", SymName(), SigArgs("sig"), Where("sig"), rule="entry_decl", contexts=TOP,
   traits={SYMBOL}, example="kernel.entry.decl @external(%storage: buffer)", symbol_kind="entry")
op("kernel.launch", Callee(workload=True), CallTypes(results=False), rule="launch", contexts=LAUNCHERS,
   traits={LAUNCH}, operands=("*args",), example="kernel.launch @k[%n](%n, %out) : [index](index, buffer)")
op("kernel.dispatch", Callee(workload=True), CallTypes(results=False), rule="dispatch",
   contexts=frozenset({PROGRAM}), traits={LAUNCH}, operands=("*args",),
   example="kernel.dispatch @external[%x](%b) : [index](buffer)")
op("kernel.launch.config", KwParen("workgroups", "operands"), KwParen("workgroup_size", "operands"),
   KwParen("cluster_size", "operands", optional=True), TypeSame(result=False), rule="launch_config",
   contexts=frozenset({K_CFG}), traits={TERMINATOR},
   segments=("workgroups", "workgroup_size", "cluster_size"),
   example="kernel.launch.config workgroups(%gx, %c1, %c1) workgroup_size(%c64, %c1, %c1) : index")
for _n in ("workitem.id", "workgroup.id", "workgroup.size", "workgroup.count", "workitem.dispatch.id"):
    op(f"kernel.{_n}", Kind(AXES), TypeSame(operands=[]), rule="coordinate", contexts=BODY,
       traits={PURE, COORDINATE} | ({UNIFORM} if _n.startswith("workgroup.") else set()), results=_RESULT,
       example=f"%t = kernel.{_n}<x> : index")
for _n in ("subgroup.size", "subgroup.lane.id"):
    op(f"kernel.{_n}", TypeSame(operands=[]), rule="coordinate", contexts=BODY,
       traits={PURE, COORDINATE} | ({UNIFORM} if _n == "subgroup.size" else set()), results=_RESULT,
       example=f"%t = kernel.{_n} : index")
op("kernel.barrier", Kind(("workgroup", "global")), KwParen("scope", "ident"), KwParen("ordering", "ident"),
   rule="barrier", contexts=BODY, traits={CONVERGENT}, legacy_dict=True,
   example="kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)")
for _n in ("workgroup.reduce", "subgroup.reduce"):
    op(f"kernel.{_n}", Kind(COMBINE), Operands(), TypeSame(), rule="collective_reduce", contexts=BODY,
       traits={CONVERGENT} | ({UNIFORM} if _n == "workgroup.reduce" else set()), operands=_UNARY, results=_RESULT,
       example=f"%s = kernel.{_n}<addf> %v : f32")
op("kernel.return", rule="no_operands", contexts=BODY, traits={TERMINATOR}, example="kernel.return")

# ------------------------------------------------------------------ func, template (7.7)
_FUNC_BODY = RegionSpec("func.return", "convention", isolated=True)
_TEMPLATE_BODY = RegionSpec("template.return", "convention", isolated=True)
op("func.def", Modifiers(("public", "retain", "host", "device", "pure", "inline", "noinline", "target")),
   SymName(), SigArgs("sig", region=0), SigResults(), Where("sig"), Region(0), rule="func_def", contexts=TOP,
   traits={SYMBOL, FUNCTION}, regions=(_FUNC_BODY,), region_names=("body",),
   example="func.def public pure @twice(%x: f32) -> (f32) {",
   symbol_kind="function")
op("func.decl", Modifiers(("public", "host", "device", "pure")), SymName(), SigArgs("sig"), SigResults(),
   Where("sig"), rule="func_decl", contexts=TOP, traits={SYMBOL},
   example="func.decl pure @twice(%x: f32) -> (f32)", symbol_kind="function")
op("func.call", Modifiers(("pure", "inline", "noinline")), Callee(workload=False), CallTypes(), rule="call",
   traits={CALL}, operands=("*args",), results=("*results",),
   example="%y = func.call pure @twice(%x) : (f32) -> (f32)")
op("func.return", Operands(), TypeEach(), rule="return", contexts=FUNCS, traits={TERMINATOR}, operands=("*values",),
   example="func.return %a, %b : f32, i32")
op("template.decl", SymName(), SigArgs("sig"), SigResults(), Where("sig"), rule="template_decl", contexts=TOP,
   traits={SYMBOL}, example="template.decl @tile.pick(%n: index) -> (index)", symbol_kind="template family")
op("template.def", SymKind("family"),
   Modifiers(("public", "retain", "host", "device", "pure", "target", "requires", "priority")),
   SymName(), SigArgs("sig", region=0), SigResults(), Where("sig"), Region(0), rule="template_def",
   contexts=TOP, traits={SYMBOL, FUNCTION}, regions=(_TEMPLATE_BODY,), region_names=("body",),
   example="template.def<@tile.pick> requires [#target.subgroup.size<64>] priority(5) "
           "@pick64(%n: index) -> (index) where [ge(%n, 64)] {", symbol_kind="template provider")
op("template.apply", SymKind("family"), ParenOperands(), CallTypes(), rule="apply",
   contexts=KERNEL_AND_FUNCS, operands=("*args",), results=("*results",),
   example="%t = template.apply<@tile.pick>(%n) : (index) -> (index)")
op("template.call", Callee(workload=False), CallTypes(), rule="template_call", contexts=KERNEL_AND_FUNCS,
   traits={CALL}, operands=("*args",), results=("*results",),
   example="%t = template.call @pick64(%n) : (index) -> (index)")
op("template.return", Operands(), TypeEach(), rule="return", contexts=FUNCS, traits={TERMINATOR}, operands=("*values",),
   example="template.return %t : index")

# ------------------------------------------------------------------ config, targets, module (7.8)
op("config.decl", SymName(), ConfigDeclType(), rule="config_decl", contexts=TOP, traits={SYMBOL},
   example="config.decl @model.layers : %v: index where [range(%v, 1, 256)]", symbol_kind="config key")
op("config.def", SymName(), Punct("="), Literal(), TypeAttr(), rule="config_def", contexts=TOP,
   traits={SYMBOL}, example="config.def @model.layers = 32 : index", symbol_kind="config key")
op("config.get", SymName("ref"), TypeSame(operands=[]), rule="config_get", traits={PURE, UNIFORM}, results=_RESULT,
   example="%l = config.get @model.layers : index")
op("amdgpu.target", Kind(AMDGPU_CHIPS), SymName(), Dict(), rule="target_record", contexts=TOP,
   traits={SYMBOL, TARGET_RECORD}, example="amdgpu.target<gfx1100> @rdna3 {subgroup_size = 32}", symbol_kind="target")
op("spirv.target", Kind(VULKAN_ENVS), SymName(), Dict(), rule="target_record", contexts=TOP,
   traits={SYMBOL, TARGET_RECORD}, example="spirv.target<vulkan1_3> @vk {subgroup_size = 32}", symbol_kind="target")
op("nvptx.target", Kind(NVPTX_CHIPS), SymName(), Dict(), rule="target_record", contexts=TOP,
   traits={SYMBOL, TARGET_RECORD}, example="nvptx.target<sm_90> @hopper {max_flat_workgroup_size = 256}",
   symbol_kind="target")
op("cpu.target", Kind(CPU_HOSTS), SymName(), Dict(), rule="target_record", contexts=TOP,
   traits={SYMBOL, TARGET_RECORD}, example="cpu.target<x86-64> @host {subgroup_size = 16}", symbol_kind="target")
op("target.subgroup.size", TypeSame(operands=[]), rule="subgroup_size", traits={PURE, UNIFORM}, results=_RESULT,
   example="%s = target.subgroup.size : index")
op("module.import", StringAttr("key"), SymbolList(), rule="module_import", contexts=TOP,
   example="module.import \"kernels\" [@scale, @shift]")

# ------------------------------------------------------------------ command, check (7.9)
op("command.program.def", Modifiers(("public", "retain", "target")), SymName(), SigArgs("sig", region=0),
   SigArgs("launch", region=0, glued=False), Where("launch"), Region(0), rule="program_def", contexts=TOP,
   traits={SYMBOL}, regions=(RegionSpec("command.return", PROGRAM, isolated=True),), region_names=("body",),
   example="command.program.def public @run(%n: index) launch(%b: buffer) where [range(%n, 1, 64)] {",
   symbol_kind="command program")
op("command.program.decl", Modifiers(("public", "retain", "target")), SymName(), SigArgs("sig"),
   SigArgs("launch", glued=False), Where("launch"), rule="program_decl", contexts=TOP, traits={SYMBOL},
   example="command.program.decl public @run(%n: index) launch(%b: buffer)", symbol_kind="command program")
op("command.program.launch", Callee(workload=True), CallTypes(results=False), rule="program_launch",
   contexts=frozenset({PROGRAM}), traits={LAUNCH}, operands=("*args",),
   example="command.program.launch @stage[%n](%b) : [index](buffer)")
_CMD_YIELD = RegionSpec("command.yield", elide=True)
for _n in ("concurrent", "serial"):
    op(f"command.{_n}", Region(0), rule="no_operands",
       contexts=frozenset({PROGRAM}), regions=(_CMD_YIELD,), region_names=("body",),
       example=f"command.{_n} {{")
op("command.yield", rule="no_operands", contexts=frozenset({PROGRAM}), traits={TERMINATOR},
   example="command.yield")
op("command.return", rule="no_operands", contexts=frozenset({PROGRAM}), traits={TERMINATOR},
   example="command.return")
_CASE = frozenset({CASE})
op("check.case", Modifiers(("public",)), SymName(), Region(0), rule="no_operands", contexts=TOP,
   traits={SYMBOL}, regions=(RegionSpec("check.return", CASE, isolated=True),), region_names=("body",),
   example="check.case public @c {",
   symbol_kind="check case")
op("check.literal", KwParen("value", "lit"), TypeSame(operands=[]), rule="check_literal", contexts=_CASE,
   results=_RESULT,
   example="%a = check.literal value(2.0) : f32")
op("check.param.choice", KwParen("values", "lits"), KwParen("name", "str"), TypeSame(operands=[]),
   rule="check_param", contexts=_CASE,
   results=_RESULT, example="%n = check.param.choice values([1, 64]) name(\"n\") : index")
op("check.generate.fill", KwParen("value", "lit"), TypeSame(operands=[]), rule="check_fill", contexts=_CASE,
   results=_RESULT,
   example="%t = check.generate.fill value(0.0) : tensor<[%n]xf32>")
op("check.generate.iota", KwParen("offset", "lit"), KwParen("step", "lit"), TypeSame(operands=[]),
   rule="check_iota", contexts=_CASE,
   results=_RESULT, example="%t = check.generate.iota offset(1.0) step(0.5) : tensor<4x[%n]xf32>")
op("check.generate.file", KwParen("path", "str"), TypeSame(operands=[]), rule="check_file", contexts=_CASE,
   results=_RESULT, example="%t = check.generate.file path(\"data/x.npy\") : tensor<[%n]xf32>")
op("check.expect.equal", KwParen("actual", "operand"), KwParen("expected", "operand"), TypeSame(result=False),
   rule="check_expect", contexts=_CASE, operands=("actual", "expected"),
   example="check.expect.equal actual(%y) expected(%w) : tensor<[%n]xf32>")
op("check.expect.close", KwParen("actual", "operand"), KwParen("expected", "operand"), KwParen("atol", "lit"),
   KwParen("rtol", "lit"), KwParen("nan", "ident", optional=True), TypeSame(result=False), rule="check_expect",
   contexts=_CASE, operands=("actual", "expected"),
   example="check.expect.close actual(%y) expected(%w) atol(0.0) rtol(0.0001) nan(same) : f32")
op("check.return", rule="no_operands", contexts=_CASE, traits={TERMINATOR}, example="check.return")
op("check.benchmark", SymKind("case"), SymName(), Dict(), rule="benchmark", contexts=TOP, traits={SYMBOL},
   example="check.benchmark<@saxpy_case> @saxpy_big {n = 1009}", symbol_kind="benchmark")

# Rows that code names one at a time (`op.opdef is KERNEL_DEF`): a misspelled
# name fails at import, where a string comparison would be silently false.
BUFFER_ALLOCA = OPS["buffer.alloca"]
BUFFER_ASSUME_NOALIAS = OPS["buffer.assume.noalias"]
BUFFER_VIEW = OPS["buffer.view"]
CHECK_BENCHMARK = OPS["check.benchmark"]
CHECK_CASE = OPS["check.case"]
CHECK_EXPECT_CLOSE = OPS["check.expect.close"]
CHECK_PARAM_CHOICE = OPS["check.param.choice"]
COMMAND_PROGRAM_DECL = OPS["command.program.decl"]
COMMAND_PROGRAM_DEF = OPS["command.program.def"]
COMMAND_YIELD = OPS["command.yield"]
CONFIG_DECL = OPS["config.decl"]
CONFIG_DEF = OPS["config.def"]
CONFIG_GET = OPS["config.get"]
FUNC_CALL = OPS["func.call"]
FUNC_DEF = OPS["func.def"]
INDEX_ASSUME = OPS["index.assume"]
INDEX_CMP = OPS["index.cmp"]
INDEX_CONSTANT = OPS["index.constant"]
INDEX_DIV = OPS["index.div"]
INDEX_REM = OPS["index.rem"]
SCALAR_CONSTANT = OPS["scalar.constant"]
KERNEL_BARRIER = OPS["kernel.barrier"]
KERNEL_DECL = OPS["kernel.decl"]
KERNEL_DEF = OPS["kernel.def"]
KERNEL_DISPATCH = OPS["kernel.dispatch"]
KERNEL_LAUNCH = OPS["kernel.launch"]
KERNEL_LAUNCH_CONFIG = OPS["kernel.launch.config"]
KERNEL_RETURN = OPS["kernel.return"]
KERNEL_SUBGROUP_REDUCE = OPS["kernel.subgroup.reduce"]
KERNEL_SUBGROUP_SIZE = OPS["kernel.subgroup.size"]
KERNEL_WORKGROUP_COUNT = OPS["kernel.workgroup.count"]
KERNEL_WORKGROUP_ID = OPS["kernel.workgroup.id"]
KERNEL_WORKGROUP_REDUCE = OPS["kernel.workgroup.reduce"]
KERNEL_WORKGROUP_SIZE = OPS["kernel.workgroup.size"]
KERNEL_WORKITEM_DISPATCH_ID = OPS["kernel.workitem.dispatch.id"]
KERNEL_WORKITEM_ID = OPS["kernel.workitem.id"]
MODULE_IMPORT = OPS["module.import"]
SCALAR_DIVSI = OPS["scalar.divsi"]
SCALAR_EXTSI = OPS["scalar.extsi"]
SCALAR_REMSI = OPS["scalar.remsi"]
SCALAR_FPTOSI = OPS["scalar.fptosi"]
SCALAR_SITOFP = OPS["scalar.sitofp"]
SCF_CONDITION = OPS["scf.condition"]
SCF_FOR = OPS["scf.for"]
SCF_IF = OPS["scf.if"]
SCF_SELECT = OPS["scf.select"]
SCF_WHILE = OPS["scf.while"]
SCF_YIELD = OPS["scf.yield"]
TARGET_SUBGROUP_SIZE = OPS["target.subgroup.size"]
TEMPLATE_APPLY = OPS["template.apply"]
TEMPLATE_CALL = OPS["template.call"]
TEMPLATE_DECL = OPS["template.decl"]
TEMPLATE_DEF = OPS["template.def"]
VECTOR_FMAF = OPS["vector.fmaf"]
VECTOR_LOAD = OPS["vector.load"]
VECTOR_STORE = OPS["vector.store"]
VIEW_ATOMIC_RMW = OPS["view.atomic.rmw"]
VIEW_SUBVIEW = OPS["view.subview"]

# The scalar literals: what folding and evaluation start from.
CONSTANT_OPS = ("index.constant", "scalar.constant")

# Removed spellings that get a pointed PARSE/006 (section 1).
RENAMED_OPS = {
    "func.template": "template.def", "func.ukernel": "template.def",
    "func.apply": "template.apply", "func.provider.decl": "template.decl",
}


# Every attribute name some op's format declares (what `Operation.attr_or` may ask for).
ATTRIBUTE_NAMES = frozenset(a for d in OPS.values() for a in d.attributes)


def ops_with(trait: str) -> frozenset[str]:
    """The names of the ops that declare `trait`."""
    return frozenset(name for name, d in OPS.items() if d.has(trait))


TARGET_RECORDS = tuple(name for name, d in OPS.items() if d.has(TARGET_RECORD))  # in declaration order


V = TypeVar("V")


class OpTable(dict[str, V]):
    """A table keyed by op name (folders, rewrite patterns, instruction
    selectors, interpreter handlers): every key must be a declared op, so a
    misspelled or removed name fails when the table's module is imported,
    not when a program first reaches it. `what` names the table in that
    error and in coverage tests (tests/test_op_tables.py)."""

    def __init__(self, what: str, entries: Mapping[str, V] | None = None) -> None:
        super().__init__()
        self.what = what
        self.update(entries or {})

    def __setitem__(self, name: str, value: V) -> None:
        if name not in OPS:
            raise KeyError(f"{self.what}: {name!r} is not a Loom op (loomcli.ir.ops)")
        if name in self:
            raise KeyError(f"{self.what}: {name!r} is registered twice")
        super().__setitem__(name, value)

    def update(self, entries: Mapping[str, V], /) -> None:  # type: ignore[override]
        for name, value in entries.items():
            self[name] = value

    def setdefault(self, name: str, value: V) -> V:
        if name not in self:
            self[name] = value
        return self[name]

    def register(self, *names: str) -> Callable[[V], V]:
        """A decorator that enters its function under every name in `names`."""
        def enter(value: V) -> V:
            for name in names:
                self[name] = value
            return value
        return enter


def op_names(*names: str) -> frozenset[str]:
    """A set of op names, each checked like an `OpTable` key (a misspelled
    name fails at import)."""
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise KeyError(f"{', '.join(map(repr, unknown))} is not a Loom op (loomcli.ir.ops)")
    return frozenset(names)
