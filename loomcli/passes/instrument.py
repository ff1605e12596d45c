"""Instrumented test builds: the faults the interpreter traps, caught on any device
(LANGUAGE.md 17.37).

`instrument(module, profile)` rewrites, in place, every exported kernel of a
module compiled for `loom test` so that a run on a device reports what the
reference interpreter would have stopped at:

* every view access (`view.load`, `view.store`, `view.atomic.rmw`,
  `vector.load`, `vector.store`) is guarded: it runs only when each index
  lies in the view's extents (a vector's lanes included), the element lies
  in the view's root (a buffer parameter, whose byte length the host
  passes, or an alloca, whose size the body computes) and the view's base
  is aligned to its element; otherwise a load yields zero, a store does
  nothing, and the fault is recorded;
* a `view.subview` whose window leaves its parent records a fault;
* integer division and remainder (`scalar.divsi/divui/remsi/remui`,
  `index.div/rem`) and shifts (`scalar.shli/shrsi/shrui`,
  `index.shli/shrsi/shrui`) whose operands the folders call undefined run
  on harmless operands instead (a divisor of 1, a shift of 0), and the
  fault is recorded.

Accesses proven in bounds at instrumentation time are left alone: indices
whose interval (constants, `scf.for` counters with constant bounds,
workitem ids under a constant workgroup size, sums and products of those)
lies in the view's static extents, in a view proven to fit its root
(constant base and sizes: workgroup tiles). Divisions and shifts by a
harmless constant are left alone too.

A fault goes to the invocation's own record in private memory (its first
fault only: the site number + 1, then the site's payload), so that, while
nothing faults, a check costs compares and a branch not taken, never a
store. Before the kernel returns, an invocation with a record counts it in
the *status buffer*, one more buffer parameter appended to the kernel's
launch arguments (so it takes the last binding, or the last pointer
slot): an i32 count at byte 0, incremented atomically, and from byte 8
words (i32, or i64 where the profile's index or offset width or an
operand needs 64 bits): first the byte length of each buffer parameter,
written by the host before the launch, then the record of the invocation
that saw the count at 0. The host reads the buffer back after the launch
and turns the record into the interpreter's diagnostic
(`loomcli.check.faults`).

Accesses are checked where the kernel body makes them. Calls to device
functions that hold checked ops are inlined first when they can be; what
stays in a function that cannot be inlined is not checked. A view whose
root the body cannot see (a function argument) is checked against its
extents only. Compiled artifacts (`loom compile`, `loom build`, `loom
emit`) never pass through here: only `loom test`'s session calls it, on
the module it compiled for its own run, and its benchmarks time a copy
made before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loomcli.ir.attrs import Ident
from loomcli.ir.builder import Namer, create, legalize_names
from loomcli.ir.core import BlockArgument, Module, Operation, Region, Value
from loomcli.ir.ops import (
    BUFFER_ALLOCA,
    BUFFER_ASSUME_NOALIAS,
    BUFFER_VIEW,
    INDEX_ASSUME,
    KERNEL_WORKGROUP_SIZE,
    KERNEL_WORKITEM_ID,
    SCF_FOR,
    VECTOR_LOAD,
    VECTOR_STORE,
    VIEW_SUBVIEW,
    op_names,
)
from loomcli.ir.types import (
    BUFFER,
    ELEMENT_BYTES,
    I1,
    I32,
    I64,
    INDEX,
    OFFSET,
    ScalarType,
    ShapedType,
    Type,
    lane_count,
    shaped,
)
from loomcli.passes.inline import can_inline, inline_call
from loomcli.passes.rewrite import Rewriter
from loomcli.semantics.fold import canonical, constant_of, to_literal
from loomcli.targets.abi import exported_kernels
from loomcli.targets.profiles import Profile

ACCESSES = op_names("view.load", "view.store", "view.atomic.rmw", "vector.load", "vector.store")
SCALAR_DIVISIONS = op_names("scalar.divsi", "scalar.divui", "scalar.remsi", "scalar.remui")
SIGNED_DIVISIONS = op_names("scalar.divsi", "scalar.remsi")
UNSIGNED_OPERANDS = op_names("scalar.divui", "scalar.remui", "scalar.shli", "scalar.shrsi", "scalar.shrui")
SCALAR_SHIFTS = op_names("scalar.shli", "scalar.shrsi", "scalar.shrui")
INDEX_DIVISIONS = op_names("index.div", "index.rem")
INDEX_SHIFTS = op_names("index.shli", "index.shrsi", "index.shrui")
BINARIES = SCALAR_DIVISIONS | SCALAR_SHIFTS | INDEX_DIVISIONS | INDEX_SHIFTS
CHECKED = ACCESSES | BINARIES | op_names("view.subview")
CALLS = op_names("func.call", "template.call")
_BOUNDED = op_names("index.add", "index.sub", "index.mul", "index.madd")
_BUFFER_ASSUMES = op_names("buffer.assume.alignment", "buffer.assume.memory_space")

STATUS_NAME = "loom_status"
RECORD_AT = 8          # byte offset of the first word after the i32 fault count
_MAX_INLINE_ROUNDS = 64


@dataclass(frozen=True)
class Site:
    """One checked op. `kind` is "access" (payload: indices and extents; for a
    vector also strides, base byte offset and root byte length or -1),
    "subview" (origin, extents, parent extents) or "binary" (the two operands)."""

    op: Operation
    kind: str
    view: str = ""          # the view's name as the interpreter gives it
    rank: int = 0
    lanes: int = 1


@dataclass
class KernelProbe:
    """The status buffer of one instrumented kernel."""

    kernel: str                      # symbol
    status_arg: int                  # position of the status buffer among the launch arguments
    buffer_args: tuple[int, ...]     # positions of the user's buffer parameters, in order
    word: ScalarType                 # I32 or I64
    payload_words: int
    sites: list[Site] = field(default_factory=list)

    @property
    def word_bytes(self) -> int:
        return ELEMENT_BYTES[self.word]

    @property
    def record_word(self) -> int:
        """Word index (from RECORD_AT) of the site number."""
        return len(self.buffer_args)

    @property
    def status_bytes(self) -> int:
        return RECORD_AT + (self.record_word + 1 + self.payload_words) * self.word_bytes


def instrument(module: Module, profile: Profile) -> dict[str, KernelProbe]:
    """Instrument every exported kernel of `module` (compiled for `profile`);
    returns their probes by kernel symbol."""
    rw = Rewriter(module)
    probes = {}
    for kernel in exported_kernels(module):
        _inline_checked_calls(module, kernel, rw)
        probes[kernel.attr("sym")] = _KernelInstrumentation(kernel, profile, rw).run()
    legalize_names(module)
    return probes


def _holds_checked(op: Operation, symbols: dict[str, Operation], seen: set[str]) -> bool:
    for inner in op.walk():
        if inner.opdef.name in CHECKED:
            return True
        if inner.opdef.name in CALLS:
            callee = inner.attr("callee", "")
            target = symbols.get(callee)
            if target is not None and callee not in seen:
                seen.add(callee)
                if target.regions and _holds_checked(target, symbols, seen):
                    return True
    return False


def _inline_checked_calls(module: Module, kernel: Operation, rw: Rewriter) -> None:
    """Inline the calls of `kernel`'s body whose callee holds a checked op."""
    for _ in range(_MAX_INLINE_ROUNDS):
        symbols = module.symbols()
        done = 0
        for call in [op for op in kernel.region("body").walk_ops()
                     if op.opdef.name in CALLS]:
            callee = symbols.get(call.attr("callee", ""))
            if callee is None or not callee.regions or not _holds_checked(callee, symbols, set()):
                continue
            if can_inline(call, callee, symbols):
                inline_call(call, callee, rw)
                done += 1
        if not done:
            return


@dataclass
class _Provenance:
    """Where a view's elements live, as values of the body: its base byte
    offset, extents and element strides; `room`, the bytes from the base to
    its root's end (0 past the end; None: the root is unknown) and
    `aligned`, whether the base is a multiple of the element size (None:
    known to be). `fits`: proven at instrumentation time that every element
    lies in the root, aligned."""

    base: Value
    extents: list[Value]
    strides: list[Value]
    name: str
    room: Value | None
    aligned: Value | None
    fits: bool


class _KernelInstrumentation:
    def __init__(self, kernel: Operation, profile: Profile, rw: Rewriter) -> None:
        self.kernel = kernel
        self.body: Region = kernel.region("body")
        self.rw = rw
        self.namer = Namer(self.body)
        wide = max(profile.index_bitwidth, profile.offset_bitwidth) > 32 or any(
            op.opdef.name in SCALAR_DIVISIONS | SCALAR_SHIFTS and _bits(op.operands[0].type) > 32
            for op in self.body.walk_ops())
        self.word: ScalarType = I64 if wide else I32
        self.provenance: dict[Value, _Provenance] = {}
        self.sites: list[Site] = []
        self.buffer_args = [i for i, a in enumerate(self.body.args) if a.type is BUFFER]
        self.payload = 2
        self.ranges: dict[Value, tuple[int, int] | None] = {}
        config = kernel.region("config").ops[-1]
        sizes = [constant_of(v) for v in config.operand_group("workgroup_size")]
        self.workgroup_size = sizes if all(isinstance(n, int) and n > 0 for n in sizes) and len(sizes) == 3 \
            else None

    def run(self) -> KernelProbe:
        checked = [op for op in self.body.walk_ops() if op.opdef.name in CHECKED]
        status = BlockArgument(self.namer.fresh(STATUS_NAME), BUFFER, self.body, len(self.body.args))
        self.body.args.append(status)
        self.kernel.signature("launch").args.append(status)
        self.status = status
        for op in checked:
            if op.opdef.name in ACCESSES:
                rank = len(self._view_type(op).dims)
                self.payload = max(self.payload, 3 * rank + 2)
            elif op.opdef is VIEW_SUBVIEW:
                self.payload = max(self.payload, 3 * len(shaped(op.result().type).dims))
        self._status_views()
        self._local_record()
        for op in [op for op in self.body.walk_ops() if op.opdef is BUFFER_VIEW or op.opdef is VIEW_SUBVIEW]:
            self._trace(op)
        for op in checked:
            if op.opdef.name in ACCESSES:
                self._access(op)
            elif op.opdef is VIEW_SUBVIEW:
                self._subview(op)
            else:
                self._binary(op)
        if self.sites:
            self._publish()
        return KernelProbe(self.kernel.attr("sym"), len(self.body.args) - 1, tuple(self.buffer_args), self.word,
                           self.payload, self.sites)

    # ------------------------------------------------------------ building

    def _new(self, anchor: Operation, name: str, operands: Sequence[Value] = (), result: Type | None = None,
             attrs: dict[str, Any] | None = None, stem: str = "chk") -> Operation:
        op = create(name, operands, (result,) if result is not None else (), attrs,
                    (self.namer.fresh(stem),) if result is not None else (), anchor.loc)
        return self.rw.insert_before(anchor, op)

    def _val(self, anchor: Operation, name: str, operands: Sequence[Value], result: Type,
             attrs: dict[str, Any] | None = None, stem: str = "chk") -> Value:
        return self._new(anchor, name, operands, result, attrs, stem).result()

    def _const(self, anchor: Operation, value: Any, t: Type, stem: str = "chk_c") -> Value:
        name = "index.constant" if t is INDEX or t is OFFSET else "scalar.constant"
        return self._val(anchor, name, (), t, {"value": to_literal(canonical(value, t), t)}, stem)

    def _and(self, anchor: Operation, conds: list[Value]) -> Value:
        if not conds:
            return self._const(anchor, True, I1, "chk_ok")
        acc = conds[0]
        for c in conds[1:]:
            acc = self._val(anchor, "scalar.andi", (acc, c), I1, stem="chk_ok")
        return acc

    def _or(self, anchor: Operation, a: Value, b: Value) -> Value:
        return self._val(anchor, "scalar.ori", (a, b), I1, stem="chk_bad")

    def _icmp(self, anchor: Operation, pred: str, a: Value, b: Value) -> Value:
        name = "index.cmp" if a.type is INDEX or a.type is OFFSET else "scalar.cmpi"
        return self._val(anchor, name, (a, b), I1, {"predicate": pred}, "chk_cmp")

    def _if(self, anchor: Operation, cond: Value, results: Sequence[Type] = ()) -> Operation:
        op = create("scf.if", (cond,), results, {"else": bool(results)}, [self.namer.fresh("chk_r") for _ in results],
                    anchor.loc)
        return self.rw.insert_before(anchor, op)

    def _yield(self, region: Region, values: Sequence[Value] = ()) -> Operation:
        return self.rw.insert_at_end(region, create("scf.yield", values))

    def _to_word(self, anchor: Operation, v: Value, signed: bool = True) -> Value:
        t = v.type
        if t is INDEX or t is OFFSET:
            return self._val(anchor, "index.cast", (v,), self.word, stem="chk_w")
        if t is self.word:
            return v
        bits = _bits(t)
        if bits == ELEMENT_BYTES[self.word] * 8:
            return v
        return self._val(anchor, "scalar.extsi" if signed and bits > 1 else "scalar.extui", (v,), self.word,
                         stem="chk_w")

    # ------------------------------------------------------------ the status buffer

    def _status_views(self) -> None:
        first = self.body.ops[0]
        zero = self._const(first, 0, OFFSET, "chk_at")
        self.flag = self._val(first, "buffer.view", (self.status, zero), ShapedType("view", (1,), I32),
                              {"indices": (None,)}, "loom_faults")
        at = self._const(first, RECORD_AT, OFFSET, "chk_at")
        words = len(self.buffer_args) + 1 + self.payload
        self.words = self._val(first, "buffer.view", (self.status, at), ShapedType("view", (words,), self.word),
                               {"indices": (None,)}, "loom_record")
        self.root_bytes: dict[int, Value] = {}
        for k, arg in enumerate(self.buffer_args):
            if self.body.args[arg].uses:
                w = self._val(first, "view.load", (self.words,), self.word, {"indices": (k,)}, "chk_len")
                self.root_bytes[arg] = self._val(first, "index.cast", (w,), OFFSET, stem="chk_len")

    def _local_record(self) -> None:
        """The invocation's own record, in private memory: word 0 is 0 until
        its first fault (then the site number + 1), the payload follows. Kept
        out of the status buffer until the end, so a fault site costs, while
        nothing faults, a compare and a branch not taken, not a masked
        global store (lavapipe runs both sides of a divergent branch)."""
        first = self.body.ops[0]
        words = 1 + self.payload
        size = self._const(first, words * ELEMENT_BYTES[self.word], OFFSET, "chk_bytes")
        local = self._val(first, "buffer.alloca", (size,), BUFFER,
                          {"kind": "private", "align": ELEMENT_BYTES[self.word]}, "loom_fault")
        zero = self._const(first, 0, OFFSET, "chk_at")
        self.local = self._val(first, "buffer.view", (local, zero), ShapedType("view", (words,), self.word),
                               {"indices": (None,)}, "loom_local")
        self._new(first, "view.store", (self._const(first, 0, self.word, "chk_none"), self.local),
                  attrs={"indices": (0,)})

    def _publish(self) -> None:
        """Before the kernel returns: an invocation that faulted counts its
        fault, and the first to count it copies its record to the status buffer."""
        end = self.body.ops[-1]
        site = self._val(end, "view.load", (self.local,), self.word, {"indices": (0,)}, "chk_faulted")
        faulted = self._icmp(end, "ne", site, self._const(end, 0, self.word, "chk_none"))
        if_faulted = self._if(end, faulted)
        self._yield(if_faulted.region("else"))
        inner = self._yield(if_faulted.region("then"))
        one = self._const(inner, 1, I32)
        old = self._val(inner, "view.atomic.rmw", (one, self.flag), I32,
                        {"kind": "addi", "indices": (0,),
                         "dict": {"ordering": Ident("relaxed"), "scope": Ident("device")}}, "chk_old")
        first = self._icmp(inner, "eq", old, self._const(inner, 0, I32))
        if_first = self._if(inner, first)
        self._yield(if_first.region("else"))
        copy = self._yield(if_first.region("then"))
        base = len(self.buffer_args)
        for j in range(1 + self.payload):
            w = self._val(copy, "view.load", (self.local,), self.word, {"indices": (j,)}, "chk_word")
            self._new(copy, "view.store", (w, self.words), attrs={"indices": (base + j,)})

    def _record(self, anchor: Operation, site: Site, payload: Sequence[Value]) -> None:
        """At `anchor`, on the path where `site` faults: the invocation's first
        fault goes to its own record."""
        self.sites.append(site)
        none = self._const(anchor, 0, self.word, "chk_none")
        seen = self._val(anchor, "view.load", (self.local,), self.word, {"indices": (0,)}, "chk_seen")
        fresh = self._icmp(anchor, "eq", seen, none)
        if_fresh = self._if(anchor, fresh)
        self._yield(if_fresh.region("else"))
        end = self._yield(if_fresh.region("then"))
        values = [self._const(end, len(self.sites), self.word, "chk_site")]
        values += [self._to_word(end, v) for v in payload]
        for j, v in enumerate(values):
            self._new(end, "view.store", (v, self.local), attrs={"indices": (j,)})

    # ------------------------------------------------------------ views

    def _view_type(self, op: Operation) -> ShapedType:
        t = op.operand("view").type
        assert isinstance(t, ShapedType)
        return t

    def _dims(self, anchor: Operation, t: ShapedType) -> list[Value]:
        return [d if isinstance(d, Value) else self._const(anchor, d, INDEX, "chk_dim") for d in t.dims]

    def _indices(self, anchor: Operation, op: Operation) -> list[Value]:
        rest = iter(op.operand_group("indices"))
        return [next(rest) if item is None else self._const(anchor, int(item), INDEX, "chk_i")
                for item in op.attr("indices", ())]

    def _after(self, op: Operation) -> Operation:
        region = op.parent
        assert region is not None
        return region.ops[region.ops.index(op) + 1]

    def _trace(self, op: Operation) -> None:
        """The provenance of a `buffer.view` or `view.subview` result, computed after it."""
        result = op.result()
        t = result.type
        assert isinstance(t, ShapedType)
        anchor = self._after(op)
        extents = self._dims(anchor, t)
        esize = ELEMENT_BYTES[t.elem]
        if op.opdef is BUFFER_VIEW:
            root = self._root_bytes(op.operand("buffer"))
            strides: list[Value] = []
            stride = self._const(anchor, 1, INDEX, "chk_stride")
            for e in reversed(extents):
                strides.append(stride)
                stride = self._val(anchor, "index.mul", (stride, e), INDEX, stem="chk_stride")
            strides.reverse()
            base = op.operand("offset")
            static = [constant_of(v) for v in (base, root) if v is not None]
            fits = False
            if root is not None and all(isinstance(c, int) for c in static) and all(isinstance(d, int) for d in t.dims):
                end = static[0] + math.prod(t.dims) * esize   # type: ignore[arg-type]
                fits = static[0] % esize == 0 and end <= static[1]
        else:
            parent = self.provenance.get(op.operand("view"))
            if parent is None:
                return
            root = None
            origin = self._indices(anchor, op)
            pos = self._position(anchor, origin, parent.strides)
            size = self._const(anchor, esize, OFFSET, "chk_esize")
            moved = self._val(anchor, "index.scale", (pos, size), OFFSET, stem="chk_base")
            base = self._val(anchor, "index.add", (parent.base, moved), OFFSET, stem="chk_base")
            strides = parent.strides
            fits = parent.fits and self._window_proven(op, t, origin, self._view_type(op))
        if fits:
            self.provenance[result] = _Provenance(base, extents, strides, "%" + result.name, None, None, True)
            return
        aligned = None
        if esize > 1 and not (isinstance(constant_of(base), int) and constant_of(base) % esize == 0):
            size = self._const(anchor, esize, OFFSET, "chk_esize")
            rem = self._val(anchor, "index.rem", (base, size), OFFSET, stem="chk_align")
            aligned = self._icmp(anchor, "eq", rem, self._const(anchor, 0, OFFSET, "chk_zero"))
        room = None
        if op.opdef is BUFFER_VIEW and root is not None:
            inside = self._icmp(anchor, "ule", base, root)
            left = self._val(anchor, "index.sub", (root, base), OFFSET, stem="chk_room")
            room = self._val(anchor, "scf.select", (inside, left, self._const(anchor, 0, OFFSET, "chk_zero")),
                             OFFSET, stem="chk_room")
        elif op.opdef is VIEW_SUBVIEW:
            parent = self.provenance[op.operand("view")]
            if parent.room is not None:
                # The parent's room, less what the subview moved its base by.
                moved = self._val(anchor, "index.sub", (base, parent.base), OFFSET, stem="chk_moved")
                inside = self._icmp(anchor, "ule", moved, parent.room)
                left = self._val(anchor, "index.sub", (parent.room, moved), OFFSET, stem="chk_room")
                room = self._val(anchor, "scf.select", (inside, left, self._const(anchor, 0, OFFSET, "chk_zero")),
                                 OFFSET, stem="chk_room")
            if parent.aligned is not None:
                aligned = parent.aligned if aligned is None else self._and(anchor, [parent.aligned, aligned])
        self.provenance[result] = _Provenance(base, extents, strides, "%" + result.name, room, aligned, False)

    def _root_bytes(self, buf: Value) -> Value | None:
        while True:
            owner = getattr(buf, "op", None)
            if isinstance(buf, BlockArgument) and buf.region is self.body:
                return self.root_bytes.get(buf.index)
            if owner is None:
                return None
            if owner.opdef is BUFFER_ALLOCA:
                return owner.operand("bytes")
            if owner.opdef.name in _BUFFER_ASSUMES:
                buf = owner.operand("buffer")
            elif owner.opdef is BUFFER_ASSUME_NOALIAS:
                buf = owner.operands[buf.index]   # type: ignore[attr-defined]
            else:
                return None

    def _position(self, anchor: Operation, idx: Sequence[Value], strides: Sequence[Value]) -> Value:
        pos = self._const(anchor, 0, INDEX, "chk_pos")
        for i, s in zip(idx, strides):
            pos = self._val(anchor, "index.madd", (i, s, pos), INDEX, stem="chk_pos")
        return pos

    # ------------------------------------------------------------ what is proven in bounds

    def _range(self, v: Value) -> tuple[int, int] | None:
        """An interval `v` lies in, from constants, loop bounds and the
        workgroup size; None when unknown."""
        if v in self.ranges:
            return self.ranges[v]
        self.ranges[v] = None   # a cycle (none in SSA) or a recursion would stop here
        found = self._range_of(v)
        self.ranges[v] = found
        return found

    def _range_of(self, v: Value) -> tuple[int, int] | None:
        c = constant_of(v)
        if isinstance(c, int) and not isinstance(c, bool):
            return c, c
        if isinstance(v, BlockArgument):
            owner = v.region.owner if v.region is not None else None
            if owner is not None and owner.opdef is SCF_FOR and v.index == 0:
                first, last, step = (self._range(owner.operand(n)) for n in ("lower", "upper", "step"))
                if first is not None and last is not None and step is not None and step[0] > 0:
                    return first[0], max(first[0], last[1] - 1)
            return None
        op = getattr(v, "op", None)
        if op is None:
            return None
        name = op.opdef.name
        if (op.opdef is KERNEL_WORKITEM_ID or op.opdef is KERNEL_WORKGROUP_SIZE) and self.workgroup_size is not None:
            n = self.workgroup_size["xyz".index(op.attr("kind"))]
            return (0, n - 1) if op.opdef is KERNEL_WORKITEM_ID else (n, n)
        if op.opdef is INDEX_ASSUME:
            return self._range(op.operands[v.index])   # type: ignore[attr-defined]
        args = [self._range(x) for x in op.operands]
        if None in args or name not in _BOUNDED:
            return None
        a, b = args[0], args[1]
        assert a is not None and b is not None
        if name == "index.add":
            return a[0] + b[0], a[1] + b[1]
        if name == "index.sub":
            return a[0] - b[1], a[1] - b[0]
        products = [x * y for x in a for y in b]
        lo, hi = min(products), max(products)
        if name == "index.madd":
            c3 = args[2]
            assert c3 is not None
            return lo + c3[0], hi + c3[1]
        return lo, hi

    def _within(self, i: Value, extent: Value | int, lanes: int = 1) -> bool:
        """Proven: i .. i + lanes - 1 lie in [0, extent)."""
        r, e = self._range(i), self._range(extent) if isinstance(extent, Value) else (extent, extent)
        return r is not None and e is not None and r[0] >= 0 and r[1] + lanes - 1 < e[0]

    def _window_proven(self, op: Operation, t: ShapedType, origin: Sequence[Value], parent: ShapedType) -> bool:
        """A subview's window proven inside its parent's extents."""
        for o, e, pe in zip(origin, t.dims, parent.dims):
            r, er, pr = (self._range(x) if isinstance(x, Value) else (x, x) for x in (o, e, pe))
            if r is None or er is None or pr is None or r[0] < 0 or r[1] + er[1] > pr[0]:
                return False
        return True

    # ------------------------------------------------------------ guarding accesses

    def _access(self, op: Operation) -> None:
        t = self._view_type(op)
        view = op.operand("view")
        prov = self.provenance.get(view)
        lanes = lane_count(op.results[0].type) if op.opdef is VECTOR_LOAD else \
            lane_count(op.operand("value").type) if op.opdef is VECTOR_STORE else 1
        idx = self._indices(op, op)
        extents = prov.extents if prov is not None else self._dims(op, t)
        conds = []
        for d, (i, e) in enumerate(zip(idx, extents)):
            n = lanes if d == len(idx) - 1 else 1
            if self._within(i, e, n):
                continue
            # One unsigned compare: a negative index is a huge unsigned one.
            conds.append(self._icmp(op, "ult", i, e))
            if n > 1:
                last = self._val(op, "index.add", (i, self._const(op, n - 1, INDEX, "chk_lanes")), INDEX)
                conds.append(self._icmp(op, "ult", last, e))
        esize = ELEMENT_BYTES[t.elem]
        minus = self._const(op, -1, self.word, "chk_unknown")
        # The interpreter names the indices of the access, whichever check failed,
        # and a vector's first faulty lane: only vectors need the root to tell it.
        if prov is not None and lanes == 1:
            payload: list[Value] = [*idx, *extents]
            if prov.aligned is not None:
                conds.append(prov.aligned)
            if prov.room is not None:
                conds.append(self._root_check(op, idx, prov, esize, lanes))
        elif prov is not None:
            payload = [*idx, *extents, *prov.strides, prov.base]
            if prov.aligned is not None:
                conds.append(prov.aligned)
            if prov.room is not None:
                conds.append(self._root_check(op, idx, prov, esize, lanes))
                payload.append(self._val(op, "index.add", (prov.base, prov.room), OFFSET, stem="chk_root"))
            else:
                payload.append(minus)
        elif lanes == 1:
            payload = [*idx, *extents]
        else:
            zero = self._const(op, 0, INDEX, "chk_zero")
            payload = [*idx, *extents, *[zero] * len(idx), self._const(op, 0, OFFSET, "chk_zero"), minus]
        if not conds:
            return    # proven in bounds: nothing to guard
        ok = self._and(op, conds)
        results = [r.type for r in op.results]
        guard = self._if(op, ok, results)
        then_end = self._yield(guard.region("then"))
        else_end = self._yield(guard.region("else"))
        for r, g in zip(op.results, guard.results):
            self.rw.replace_value(r, g)
            g.name, r.name = r.name, g.name
        self.rw.move_before(op, then_end)
        for r in op.results:
            then_end.add_operand(r)
        self._record(else_end, Site(op, "access", prov.name if prov is not None else "%" + view.name,
                                    len(idx), lanes), payload)
        for t_r in results:
            else_end.add_operand(self._zero(else_end, t_r))

    def _root_check(self, op: Operation, idx: Sequence[Value], prov: _Provenance, esize: int, lanes: int) -> Value:
        """The access's last byte lies within the room after the view's base."""
        assert prov.room is not None
        pos = self._position(op, idx, prov.strides)
        size = self._const(op, esize, OFFSET, "chk_esize")
        at = self._val(op, "index.scale", (pos, size), OFFSET, stem="chk_at")
        end = self._val(op, "index.add", (at, self._const(op, esize * lanes, OFFSET, "chk_span")), OFFSET,
                        stem="chk_end")
        return self._icmp(op, "ule", end, prov.room)

    def _zero(self, anchor: Operation, t: Type) -> Value:
        if isinstance(t, ShapedType):
            return self._val(anchor, "vector.constant", (), t, {"value": to_literal(canonical(0, t.elem), t.elem)},
                             "chk_zero")
        return self._const(anchor, 0, t, "chk_zero")

    def _subview(self, op: Operation) -> None:
        t = op.result().type
        assert isinstance(t, ShapedType)
        src = op.operand("view")
        parent = self.provenance.get(src)
        anchor = op
        origin = self._indices(anchor, op)
        ext = self._dims(anchor, t)
        parent_ext = parent.extents if parent is not None else self._dims(anchor, self._view_type(op))
        if parent is not None and self._window_proven(op, t, origin, self._view_type(op)):
            return
        zero = self._const(anchor, 0, INDEX, "chk_zero")
        conds = []
        for o, e, pe in zip(origin, ext, parent_ext):
            conds.append(self._icmp(anchor, "sge", o, zero))
            end = self._val(anchor, "index.add", (o, e), INDEX, stem="chk_end")
            conds.append(self._icmp(anchor, "sle", end, pe))
        ok = self._and(anchor, conds)
        bad = self._val(anchor, "scalar.xori", (ok, self._const(anchor, True, I1)), I1, stem="chk_bad")
        guard = self._if(anchor, bad)
        end_then = self._yield(guard.region("then"))
        self._yield(guard.region("else"))
        name = parent.name if parent is not None else "%" + src.name
        self._record(end_then, Site(op, "subview", name, len(origin)), [*origin, *ext, *parent_ext])

    # ------------------------------------------------------------ division and shifts

    def _proven_defined(self, op: Operation) -> bool:
        """The folders' conditions hold for every value the operands may take."""
        name = op.opdef.name
        a, b = (self._range(v) for v in op.operands)
        if name in INDEX_DIVISIONS:
            return a is not None and b is not None and a[0] >= 0 and b[0] > 0
        if name in INDEX_SHIFTS:
            return b is not None and b[0] >= 0 and b[1] <= 63
        n = _bits(op.operands[0].type)
        if b is None:
            return False
        low, high = canonical(b[0], op.operands[1].type), canonical(b[1], op.operands[1].type)
        if low != high:
            return False   # only constants: a scalar's range is its constant's
        if name in SCALAR_SHIFTS:
            return 0 <= low % (1 << n) < n
        if low == 0:
            return False
        return name not in SIGNED_DIVISIONS or low != -1 or (
            a is not None and a[0] == a[1] and canonical(a[0], op.operands[0].type) != -(1 << (n - 1)))

    def _binary(self, op: Operation) -> None:
        name = op.opdef.name
        a, b = op.operands
        t = a.type
        if self._proven_defined(op):
            return
        if name in INDEX_DIVISIONS or name in INDEX_SHIFTS:
            zero = self._const(op, 0, t, "chk_zero")
            if name in INDEX_DIVISIONS:
                bad = self._or(op, self._icmp(op, "slt", a, zero), self._icmp(op, "sle", b, zero))
                safe_a = self._val(op, "scf.select", (bad, zero, a), t, stem="chk_safe")
                self.rw.set_operand(op, 0, safe_a)
                replacement = self._const(op, 1, t, "chk_one")
            else:
                top = self._const(op, 63, t, "chk_max")
                bad = self._or(op, self._icmp(op, "slt", b, zero), self._icmp(op, "sgt", b, top))
                replacement = zero
        else:
            n = _bits(t)
            if name in SCALAR_SHIFTS:
                bad = self._icmp(op, "uge", b, self._const(op, n, t, "chk_bits"))
                replacement = self._const(op, 0, t, "chk_zero")
            else:
                bad = self._icmp(op, "eq", b, self._const(op, 0, t, "chk_zero"))
                if name in SIGNED_DIVISIONS and n > 1:
                    low = self._icmp(op, "eq", a, self._const(op, -(1 << (n - 1)), t, "chk_min"))
                    neg = self._icmp(op, "eq", b, self._const(op, -1, t, "chk_neg"))
                    bad = self._or(op, bad, self._and(op, [low, neg]))
                replacement = self._const(op, 1, t, "chk_one")
        safe_b = self._val(op, "scf.select", (bad, replacement, b), t, stem="chk_safe")
        self.rw.set_operand(op, 1, safe_b)
        guard = self._if(op, bad)
        end = self._yield(guard.region("then"))
        self._yield(guard.region("else"))
        unsigned = name in UNSIGNED_OPERANDS
        self._record(end, Site(op, "binary"),
                     [self._to_word(end, a, signed=not unsigned), self._to_word(end, b, signed=not unsigned)])


def _bits(t: Type) -> int:
    """The width of a scalar integer type (i1: 1)."""
    return ELEMENT_BYTES[t] * 8 if isinstance(t, ScalarType) and t is not I1 else 1


__all__ = ["ACCESSES", "BINARIES", "CHECKED", "RECORD_AT", "KernelProbe", "Site", "instrument"]
