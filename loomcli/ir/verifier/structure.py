"""Structure and contexts (STRUCTURE/001, 003, 007, 008): terminators, the
yields of `scf` regions, where workgroup allocas and launch configurations
may stand, barrier operands.
"""

from __future__ import annotations

from loomcli.ir.core import Operation, Region
from loomcli.ir.ops import (
    KERNEL_DEF,
    SCF_CONDITION,
    TERMINATOR,
)
from loomcli.ir.types import (
    BUFFER,
    ERROR,
    I1,
    INDEX,
    OFFSET,
    Type,
    is_index_like,
)
from loomcli.ir.verifier.base import VerifierBase, kind_text


class StructureRules(VerifierBase):
    """Regions, terminators, yields and placement."""

    @staticmethod
    def _terminator_of(region: Region) -> str:
        owner = region.owner
        assert owner is not None
        return owner.opdef.regions[owner.regions.index(region)].terminator

    def check_region_end(self, op: Operation, region: Region, terminator: str) -> None:
        last = region.ops[-1] if region.ops else None
        if last is None or last.name != terminator:
            if last is not None and last.opdef.has(TERMINATOR) and last.name != terminator:
                self.error("STRUCTURE/001", last.loc, op=op.name, terminator=terminator)
            elif last is None or not last.opdef.has(TERMINATOR):
                self.error("STRUCTURE/001", region.end_loc, op=op.name, terminator=terminator)

    def _yield_types(self, region: Region) -> tuple[Operation | None, list[Type]]:
        term = region.ops[-1] if region.ops else None
        if term is None or term.name not in ("scf.yield", "scf.condition"):
            return None, []
        return term, [v.type for v in term.operands]

    def _match_yield(self, op: Operation, region: Region, want: list[Type], skip: int = 0) -> None:
        term, got = self._yield_types(region)
        if term is None:
            return
        got = got[skip:]
        if any(t is ERROR for t in got):
            return
        if got != want:
            self.error("STRUCTURE/007", term.loc, t1=", ".join(map(kind_text, got)), parent=op.name,
                       t2=", ".join(map(kind_text, want)))

    def rule_scf_if(self, op: Operation) -> None:
        if not self.operands(op, 1):
            return
        c = op.operand("condition")
        self.want(op, "condition of scf.if", c.type, c.type is I1, "i1", op.operand_loc(0))
        want = [r.type for r in op.results]
        if want and not op.attr("else", False):
            self.error("STRUCTURE/007", op.loc, t1="", parent=op.name, t2=", ".join(map(kind_text, want)))
            return
        for region in op.regions:
            self._match_yield(op, region, want)

    def rule_scf_for(self, op: Operation) -> None:
        if len(op.operands) < 3:
            self.count(op, 3, "bounds", len(op.operands))
            return
        lo, hi, step = op.operand("lower"), op.operand("upper"), op.operand("step")
        kind = lo.type
        if not self.want(op, "bounds of scf.for", kind, is_index_like(kind), "index or offset", op.operand_loc(0)):
            return
        for k, v in ((1, hi), (2, step)):
            self.want(op, f"operand {k} of scf.for", v.type, v.type is kind, kind_text(kind), op.operand_loc(k))
        s = self.constant_of(step)
        if isinstance(s, int) and s <= 0:
            self.error("TYPE/003", op.operand_loc(2), what="step", why=f"{s} is not > 0")
        body = op.region("body")
        carried = [a.type for a in body.args[1:]]
        results = [r.type for r in op.results]
        if results != carried:
            if len(results) != len(carried):
                self.count(op, len(carried), "results", len(results))
            else:
                self.error("STRUCTURE/007", op.loc, t1=", ".join(map(kind_text, carried)), parent=op.name,
                           t2=", ".join(map(kind_text, results)))
            return
        self._match_yield(op, body, carried)

    def rule_scf_while(self, op: Operation) -> None:
        before, after = op.region("before"), op.region("after")
        carried = [a.type for a in before.args]
        results = [r.type for r in op.results]
        term, got = self._yield_types(before)
        if (term is not None and term.opdef is SCF_CONDITION and got and all(t is not ERROR for t in got)
                and got[1:] != results):
            self.error("STRUCTURE/007", term.loc, t1=", ".join(map(kind_text, got[1:])), parent=op.name,
                       t2=", ".join(map(kind_text, results)))
        do_args = [a.type for a in after.args]
        if do_args != results:
            # Blame the first `do(...)` argument that differs, else the op.
            loc = next((a.loc for a, t in zip(after.args, results) if a.type != t), op.loc)
            self.error("STRUCTURE/007", loc, t1=", ".join(map(kind_text, do_args)), parent=op.name,
                       t2=", ".join(map(kind_text, results)))
        self._match_yield(op, after, carried)

    def rule_condition(self, op: Operation) -> None:
        if not op.operands:
            self.count(op, 1, "operands", 0)
            return
        c = op.operand("condition")
        self.want(op, "operand 0 of scf.condition", c.type, c.type is I1, "i1", op.operand_loc(0))

    def rule_buffer_alloca(self, op: Operation) -> None:
        if not self.operands(op, 1):
            return
        n = op.operand("bytes")
        self.want(op, "operand 0 of buffer.alloca", n.type, n.type is OFFSET, "offset", op.operand_loc(0))
        self.result(op, lambda t: t is BUFFER, "buffer")
        align = op.attr("align", 0)
        if not (0 < align <= 4096 and align & (align - 1) == 0):
            self.error("TYPE/003", op.loc_of("align"), what=f"align({align})", why="a power of two <= 4096")
        folds = self.folds(n)
        if op.attr("kind") == "workgroup":
            parent = op.parent_op
            top = parent is not None and parent.opdef is KERNEL_DEF and op.parent is parent.region("body")
            if not top or folds is False:
                self.error("STRUCTURE/008", op.loc)
        elif folds is False:
            self.error("TYPE/003", op.operand_loc(0), what="alloca size", why="it must fold to a constant")

    def rule_launch_config(self, op: Operation) -> None:
        for seg in ("workgroups", "workgroup_size", "cluster_size"):
            if seg in op._attrs:
                self.count(op, 3, seg, op._attrs[seg], op.loc_of(seg))
        for i, v in enumerate(op.operands):
            self.want(op, f"operand {i} of kernel.launch.config", v.type, v.type is INDEX, "index", op.operand_loc(i))

    def rule_no_operands(self, op: Operation) -> None:
        self.operands(op, 0)

    def rule_barrier(self, op: Operation) -> None:
        kind, scope, ordering = op._attrs.get("kind"), op._attrs.get("scope"), op._attrs.get("ordering")
        if kind == "workgroup":
            if scope not in ("subgroup", "workgroup"):
                self.error("TYPE/003", op.loc_of("scope"), what=f"scope({scope})", why="expected subgroup or workgroup")
            if ordering != "acq_rel":
                self.error("TYPE/003", op.loc_of("ordering"), what=f"ordering({ordering})", why="expected acq_rel")
        else:
            if scope != "workgroup":
                self.error("TYPE/003", op.loc_of("scope"), what=f"scope({scope})", why="expected workgroup")
            if ordering not in ("acquire", "release", "acq_rel"):
                self.error("TYPE/003", op.loc_of("ordering"), what=f"ordering({ordering})",
                           why="expected acquire, release or acq_rel")
