"""The core IR: values with use lists, operations, regions, modules.

Loom v1 has no block labels, so a region is exactly one block: `Region`
carries the block arguments and the op list directly. An operation refers to
its declaration (`OpDef`), which gives it meaning; the operation itself is
plain data: operands, results, attributes, regions, a location and the
comments attached to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from loomcli.ir.attrs import Pred
from loomcli.ir.types import Type

if TYPE_CHECKING:
    from loomcli.ir.ops import OpDef

Loc = tuple[int, int]  # (line, column), both 1-based; (0, 0) when unknown

# Op nesting plus attribute nesting a module may have: bytecode stores at most
# this much, and the parser refuses deeper text so every module can be written.
MAX_DEPTH = 256

# An entry of a top-level op's comment list that ends a *detached* block (the
# comments before it were followed by a blank line: license and file headers,
# LANGUAGE.md 17.34); it prints as that blank line. A payload never holds a newline.
DETACHED = "\n"


class FileLoc(tuple[int, int]):
    """A (line, column) that also names its file: linking stamps the ops it
    copies from another input with these, so a diagnostic about them names
    that input (`Diagnostic.make` prefers a location's file)."""

    file: str

    def __new__(cls, loc: Loc, file: str) -> FileLoc:
        self = super().__new__(cls, (loc[0], loc[1]))
        self.file = file
        return self

    def __reduce__(self) -> Any:
        return (FileLoc, ((self[0], self[1]), self.file))


def _stamp(loc: Any, file: str) -> Any:
    return FileLoc(loc, file) if loc and loc != (0, 0) and not isinstance(loc, FileLoc) else loc


def stamp_file(op: Operation, file: str) -> None:
    """Make every location in `op` (nested ops, values, predicates) name `file`."""
    for inner in op.walk():
        inner.loc = _stamp(inner.loc, file)
        if inner.operand_locs is not None:
            inner.operand_locs = [_stamp(loc, file) for loc in inner.operand_locs]
        if inner.attr_locs is not None:
            inner.attr_locs = {k: _stamp(loc, file) for k, loc in inner.attr_locs.items()}
        for r in inner.results:
            r.loc = _stamp(r.loc, file)
        for region in inner.regions:
            region.end_loc = _stamp(region.end_loc, file)
            for a in region.args:
                a.loc = _stamp(a.loc, file)
        for value in inner._attrs.values():
            if not isinstance(value, _MAY_HOLD_PREDS):  # most are scalars: no generator for them
                continue
            for pred in _preds(value):
                pred.loc = _stamp(pred.loc, file)
                if pred.arg_locs is not None:
                    pred.arg_locs = [_stamp(loc, file) for loc in pred.arg_locs]


def _preds(value: Any) -> Iterator[Pred]:
    """The predicates in an attribute value (`_MAY_HOLD_PREDS` are the only
    kinds that hold any)."""
    if isinstance(value, Pred):
        yield value
    elif isinstance(value, (list, tuple)):
        for x in value:
            yield from _preds(x)
    elif isinstance(value, Signature) and value.where:
        yield from value.where


class Value:
    """An SSA value. `uses` lists (operation, operand index) pairs."""

    __slots__ = ("loc", "name", "type", "uses")

    def __init__(self, name: str, type: Type, loc: Loc = (0, 0)) -> None:
        self.name = name
        self.type = type
        self.uses: list[tuple[Operation, int]] = []
        self.loc = loc

    def replace_all_uses_with(self, other: Value) -> None:
        for op, i in self.uses:
            op.operands[i] = other
            other.uses.append((op, i))
        self.uses = []

    def __repr__(self) -> str:
        return f"%{self.name}"


class OpResult(Value):
    __slots__ = ("index", "op")

    def __init__(self, name: str, type: Type, op: Operation, index: int, loc: Loc = (0, 0)) -> None:
        super().__init__(name, type, loc)
        self.op = op
        self.index = index


class BlockArgument(Value):
    """An argument of a region: a signature argument, loop IV, carried value."""

    __slots__ = ("index", "region")

    def __init__(self, name: str, type: Type, region: Region | None, index: int, loc: Loc = (0, 0)) -> None:
        super().__init__(name, type, loc)
        self.region = region
        self.index = index


class LocalName(Value):
    """A name bound by a declaration without a body (`config.decl`'s subject,
    a `kernel.decl` signature argument); only types and predicates refer to it."""

    __slots__ = ()


class Signature:
    """`(%a: T, ...) -> (R...) where [...]` of a symbol op.

    For definitions the arguments are the block arguments of the region the
    signature opens; for declarations they are `LocalName`s.
    """

    __slots__ = ("args", "results", "where")

    def __init__(self, args: list[Value], results: list[Type] | None = None,
                 where: list[Pred] | None = None) -> None:
        self.args = args
        self.results = results or []
        self.where = where  # None: no `where` written

    @property
    def arg_types(self) -> list[Type]:
        return [a.type for a in self.args]


# The attribute values `_preds` looks into (it finds nothing in any other).
_MAY_HOLD_PREDS = (Pred, list, tuple, Signature)


class Region:
    """A region: one block of block arguments and operations."""

    __slots__ = ("args", "end_loc", "ops", "owner")

    def __init__(self, owner: Operation | None = None) -> None:
        self.args: list[Value] = []
        self.ops: list[Operation] = []
        self.owner = owner
        self.end_loc: Loc = (0, 0)  # the closing `}`, for diagnostics

    def walk_ops(self) -> Iterator[Operation]:
        """Pre-order walk of every op in this region, nested ones included."""
        for op in self.ops:
            yield from op.walk()

    def append(self, op: Operation) -> Operation:
        op.parent = self
        self.ops.append(op)
        return op

    @property
    def terminator(self) -> Operation | None:
        return self.ops[-1] if self.ops else None


class Operation:
    """One operation. Attributes are keyed by the names its `OpDef` declares."""

    __slots__ = (
        "_attrs",
        "attr_locs",
        "comments",
        "invalid",
        "loc",
        "opdef",
        "operand_locs",
        "operands",
        "parent",
        "regions",
        "results",
        "written_types",
    )

    def __init__(self, opdef: OpDef, operands: list[Value] | None = None,
                 result_types: list[Type] | None = None, attrs: dict[str, Any] | None = None,
                 loc: Loc = (0, 0)) -> None:
        self.opdef = opdef
        self.operands: list[Value] = []
        self.results: list[OpResult] = []
        # Read and written through `attr`, `attr_or`, `has_attr`, `set_attr`,
        # `drop_attr` and `attr_items`, which hold every name to the op's row;
        # `attrs` is taken as given, not copied.
        self._attrs: dict[str, Any] = attrs if attrs is not None else {}
        self.regions: list[Region] = []
        self.loc = loc
        self.comments: list[str] = []
        self.parent: Region | None = None
        # Source locations of operand tokens, for diagnostics; None when built in code.
        self.operand_locs: list[Loc] | None = None
        # Types the text wrote for operands (parallel to operands, None where
        # the text gives none); checked by the verifier, never printed.
        self.written_types: list[Type | None] | None = None
        # Source locations of attribute tokens (by attribute name), for diagnostics.
        self.attr_locs: dict[str, Loc] | None = None
        # The parser found this op malformed and said so: the verifier skips its rule.
        self.invalid = False
        for v in operands or ():
            self.add_operand(v)
        for t in result_types or ():
            self.add_result(t)

    @property
    def name(self) -> str:
        return self.opdef.name

    def add_operand(self, v: Value) -> None:
        v.uses.append((self, len(self.operands)))
        self.operands.append(v)

    def add_result(self, t: Type, name: str = "", loc: Loc = (0, 0)) -> OpResult:
        r = OpResult(name, t, self, len(self.results), loc)
        self.results.append(r)
        return r

    def loc_of(self, attr: str) -> Loc:
        """Location of an attribute's token, else of the op name."""
        if self.attr_locs and attr in self.attr_locs:
            return self.attr_locs[attr]
        return self.loc

    def operand_loc(self, i: int) -> Loc:
        if self.operand_locs and i < len(self.operand_locs):
            return self.operand_locs[i]
        return self.loc

    def add_region(self) -> Region:
        r = Region(self)
        self.regions.append(r)
        return r

    def drop_operand_uses(self) -> None:
        for i, v in enumerate(self.operands):
            try:
                v.uses.remove((self, i))
            except ValueError:
                pass

    @property
    def symbol(self) -> str | None:
        """The symbol this op defines, None for an op that defines none."""
        return self._attrs.get("sym")

    # ------------------------------------------------------------ named accessors
    # Names come from the op's row in the op table (`OpDef.operands`, `.results`,
    # `.region_names`, and the attributes its format directives store), so
    # `op.operand("bytes")` reads what `op.operands[0]` did and says which one.

    def operand_group(self, name: str) -> list[Value]:
        """The operands declared as `name` (a variadic group or a segment)."""
        opdef = self.opdef
        if name in opdef.segments:
            before = opdef.segments[:opdef.segments.index(name)]
            start = sum(self._attrs.get(s, 0) for s in before)
            return self.operands[start:start + self._attrs.get(name, 0)]
        where = opdef.span(opdef.operands, name, len(self.operands))
        if where is None:
            raise KeyError(f"{self.name} declares no operand `{name}`")
        return self.operands[where]

    def operand(self, name: str) -> Value:
        """The one operand declared as `name`."""
        return self._single(self.operands, self.opdef.operand_at.get(name), self.operand_group, "operand", name)

    def result_group(self, name: str) -> list[OpResult]:
        where = self.opdef.span(self.opdef.results, name, len(self.results))
        if where is None:
            raise KeyError(f"{self.name} declares no result `{name}`")
        return self.results[where]

    def result(self, name: str = "result") -> OpResult:
        """The one result declared as `name` (most ops name theirs `result`)."""
        return self._single(self.results, self.opdef.result_at.get(name), self.result_group, "result", name)

    def _single(self, values: list[Any], at: int | None, group_of: Callable[[str], list[Any]], kind: str,
                name: str) -> Any:
        """The value at a fixed name's position `at` (`OpDef.operand_at`), or
        for a name without one the only value of its group (`group_of` raises
        for a name the row lacks)."""
        if at is None:
            group = group_of(name)
            if len(group) == 1:
                return group[0]
        else:
            i = at if at >= 0 else len(values) + at
            if 0 <= i < len(values):
                return values[i]
        raise KeyError(f"{self.name} has no single {kind} `{name}`")

    def region(self, name: str) -> Region:
        names = self.opdef.region_names
        if name not in names:
            raise KeyError(f"{self.name} declares no region `{name}`")
        return self.regions[names.index(name)]

    def signature(self, name: str = "sig") -> Signature:
        """The signature attribute `name` (`sig`, or a kernel's `launch`)."""
        sig = self.attr(name)
        if not isinstance(sig, Signature):
            raise KeyError(f"{self.name}: `{name}` is not a signature")
        return sig

    def attr(self, name: str, default: Any = KeyError) -> Any:
        """The attribute `name`, one the op's format declares; `default` when
        it is not set (without one, a KeyError)."""
        if name not in self.opdef.attributes:
            raise KeyError(f"{self.name} declares no attribute `{name}`")
        if name in self._attrs:
            return self._attrs[name]
        if default is KeyError:
            raise KeyError(f"{self.name} has no attribute `{name}` set")
        return default

    def attr_or(self, name: str, default: Any = None) -> Any:
        """The attribute `name` where this op declares and sets it, else
        `default`: for code reading one attribute across kinds of op (flags,
        a callee). `name` must be one some op declares (a misspelling is a
        KeyError still)."""
        if name in self.opdef.attributes:
            return self._attrs.get(name, default)
        from loomcli.ir.ops import ATTRIBUTE_NAMES

        if name not in ATTRIBUTE_NAMES:
            raise KeyError(f"no op declares an attribute `{name}`")
        return default

    def has_attr(self, name: str) -> bool:
        """Whether the attribute `name` (one the op's format declares) is set."""
        if name not in self.opdef.attributes:
            raise KeyError(f"{self.name} declares no attribute `{name}`")
        return name in self._attrs

    def set_attr(self, name: str, value: Any, *, first: bool = False) -> None:
        """Set the attribute `name`, one the op's format declares; with
        `first`, as the first attribute (where parsing puts a leading
        modifier: bytecode keeps the order)."""
        if name not in self.opdef.attributes:
            raise KeyError(f"{self.name} declares no attribute `{name}`")
        if first:
            self._attrs = {name: value, **{k: v for k, v in self._attrs.items() if k != name}}
        else:
            self._attrs[name] = value

    def drop_attr(self, name: str) -> None:
        """Unset the attribute `name` if this op has it set (`name` must be
        one some op declares)."""
        if name not in self.opdef.attributes:
            self.attr_or(name)  # a KeyError for a name no op declares
        self._attrs.pop(name, None)

    def attr_items(self) -> Iterator[tuple[str, Any]]:
        """Every attribute set, as (name, value) in the order they were set
        (which bytecode keeps)."""
        return iter(self._attrs.items())

    def walk(self) -> Iterator[Operation]:
        """Pre-order walk of this op and everything nested in it."""
        stack = [self]
        while stack:
            op = stack.pop()
            yield op
            for region in reversed(op.regions):
                stack.extend(reversed(region.ops))

    @property
    def parent_op(self) -> Operation | None:
        return self.parent.owner if self.parent is not None else None

    def __repr__(self) -> str:
        return f"<op {self.opdef.name} at {self.loc[0]}:{self.loc[1]}>"


class Module:
    """A `.loom` file: a flat list of top-level ops plus trailing comments."""

    __slots__ = ("body", "end_comments", "path")

    def __init__(self, path: str = "<memory>") -> None:
        self.body = Region(None)
        self.path = path
        self.end_comments: list[str] = []

    @property
    def ops(self) -> list[Operation]:
        return self.body.ops

    def walk(self) -> Iterator[Operation]:
        for op in self.body.ops:
            yield from op.walk()

    def symbols(self) -> dict[str, Operation]:
        return {op._attrs["sym"]: op for op in self.body.ops if "sym" in op._attrs}
