"""Module-level SPIR-V emission: checks, entry points, interfaces, manifest.

`SpirvEmitter.run` checks every kernel against the profile (TARGET/001-006),
analyses memory roots, writes one GLCompute entry point per kernel (device
functions become OpFunctions specialized per candidate roots of their buffer
and view arguments), and returns the `Artifact` with its manifest facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit import Artifact
from loomcli.emit.spirv.lower import BufferValue, Lowerer
from loomcli.emit.spirv.memory import Facts, Root, RootAnalysis, SpecKey, decide_storage, sorted_roots
from loomcli.emit.spirv.spec import (
    EXEC_LOCAL_SIZE,
    EXEC_SIGNED_ZERO_INF_NAN_PRESERVE,
    GLCOMPUTE,
    SC,
    BuiltIn,
    Cap,
    Dec,
    Op,
)
from loomcli.emit.spirv.writer import FunctionWriter, ModuleWriter, string_words
from loomcli.ir.core import Module, Operation
from loomcli.ir.ops import FUNCTION, KERNEL_RETURN
from loomcli.ir.types import BF16, F16, F32, F64, I1, I64, ScalarType
from loomcli.targets.abi import KernelABI, exported_kernels, kernel_abi, workgroup_size_constants
from loomcli.targets.abi import workgroup_storage_bytes as storage_bytes

MAX_INSTRUCTION_WORDS = 0xFFFF  # SPIR-V's word count is a 16-bit field

if TYPE_CHECKING:
    from loomcli.targets.profiles import Profile

VEC3_BUILTINS = frozenset({BuiltIn.NumWorkgroups, BuiltIn.WorkgroupId, BuiltIn.LocalInvocationId,
                           BuiltIn.GlobalInvocationId})


@dataclass(eq=False)
class KernelInfo:
    op: Operation
    profile: Profile                  # the kernel's own (a pinned kernel uses its record's)
    abi: KernelABI
    workgroup_size: tuple[int, int, int]
    storage_bytes: int
    facts: Facts | None = None
    fw: FunctionWriter | None = None


@dataclass(eq=False)
class FunctionSpec:
    fw: FunctionWriter
    param_roots: list[tuple[Root, ...]]
    result_roots: list[tuple[Root, ...]]
    result_components: list[int] = field(default_factory=list)


class SpirvEmitter:
    def __init__(self, module: Module, profile: Profile) -> None:
        if profile.spirv_version is None:
            raise ValueError(f"emit_spirv needs a spirv profile, not {profile.name}")
        self.module = module
        self.profile = profile
        self.path = module.path
        self.version = profile.spirv_version
        self.m = ModuleWriter(self.version)
        self.analysis = RootAnalysis(module)
        self.specs: dict[SpecKey, FunctionSpec] = {}
        self.inputs: set[int] = set()

    # ------------------------------------------------------------ kernel facts

    def info(self, kernel: Operation, p: Profile) -> KernelInfo:
        """The facts emission relies on. The TARGET checks (`loomcli.targets.checks`,
        run once by the emission gateway `loomcli.emit.artifacts`) guarantee them."""
        size = workgroup_size_constants(kernel) or _folded_size(self.module, kernel, p)
        if size is None:
            raise ValueError(f"@{kernel.attr('sym')}: workgroup size unknown; emit through loomcli.emit.artifacts, "
                             "which runs the TARGET checks first")
        total = storage_bytes(kernel, p.subgroup_size, p.max_flat_workgroup_size)
        return KernelInfo(kernel, p, kernel_abi(kernel, "spirv"), size, total)

    # ------------------------------------------------------------ globals

    def builtin(self, which: int) -> tuple[int, int]:
        m = self.m
        t = m.vector(m.int(32), 3) if which in VEC3_BUILTINS else m.int(32)
        var, created = m.interned_variable(("builtin", which), SC.Input, t)
        if created:
            m.decorate(var, Dec.BuiltIn, which)
            self.inputs.add(var)
        return var, t

    def storage_buffer(self, binding: int, storage: tuple[str, int], elem_t: int) -> int:
        """The binding's declaration as a runtime array of `storage` elements; one
        binding used with several element types gets several aliased declarations."""
        m = self.m
        block = m.block_struct((m.runtime_array(elem_t, storage[1] // 8),), (0,))
        var, created = m.interned_variable(("sb", binding, storage), SC.StorageBuffer, block)
        if created:
            m.decorate(var, Dec.DescriptorSet, 0)
            m.decorate(var, Dec.Binding, binding)
            m.decorate(var, Dec.Aliased)
        return var

    def root_variable(self, root: Root, elem_t: int) -> int:
        if not root.var:
            n = max(-(-root.size // root.word_bytes), 1)
            sc = SC.Workgroup if root.kind == "workgroup" else SC.Private
            root.var = self.m.variable(sc, self.m.array(elem_t, n))
        return root.var

    # ------------------------------------------------------------ functions

    def function(self, key: SpecKey, call: Operation) -> FunctionSpec:
        spec = self.specs.get(key)
        if spec is not None:
            return spec
        fn = self.analysis.symbols.get(key[0])
        if fn is None or not fn.opdef.has(FUNCTION):
            raise CompileError([Diagnostic.make("LINK/001", self.path, call.loc, s=key[0])])
        facts = self.analysis.function(key)
        body = fn.region("body")
        shaper = Lowerer(self, None, facts, None)  # type: ignore[arg-type]
        param_roots = [sorted_roots(r) for r in key[1]]
        params: list[int] = []
        for arg, roots in zip(body.args, param_roots):
            params.extend(shaper.shape(arg.type, roots))
        term = body.terminator
        result_roots = [sorted_roots(r) for r in facts.results]
        comps: list[int] = []
        if term is not None:
            for v, roots in zip(term.operands, result_roots):
                comps.extend(shaper.shape(v.type, roots))
        m = self.m
        ret = m.void() if not comps else comps[0] if len(comps) == 1 else m.struct(tuple(comps))
        fw = FunctionWriter(m, ret, tuple(params))
        spec = self.specs[key] = FunctionSpec(fw, param_roots, result_roots, comps)
        lo = Lowerer(self, fw, facts, None)
        fw.label()
        start = 0
        for arg, roots in zip(body.args, param_roots):
            n = len(lo.shape(arg.type, roots))
            lo.env[arg] = lo.retarget_ids(arg, fw.params[start:start + n], roots)
            start += n
        term = lo.block(body)
        flat: list[int] = []
        for v, roots in zip(term.operands, result_roots):
            flat.extend(lo.flatten(v.type, lo.env[v], roots))
        if not flat:
            fw.op(Op.Return)
        elif len(flat) == 1:
            fw.op(Op.ReturnValue, flat[0])
        else:
            fw.op(Op.ReturnValue, fw.val(Op.CompositeConstruct, ret, *flat))
        return spec

    # ------------------------------------------------------------ kernels

    def kernel(self, info: KernelInfo) -> None:
        m = self.m
        body = info.op.region("body")
        fw = info.fw = FunctionWriter(m, m.void(), ())
        lo = Lowerer(self, fw, info.facts, info)  # type: ignore[arg-type]
        fw.label()
        self._push_constants(lo, info)
        term = lo.block(body)
        if term.opdef is not KERNEL_RETURN:  # pragma: no cover - the verifier guarantees it
            raise lo.fail("STRUCTURE/001", term, op="kernel.def", terminator="kernel.return")
        fw.op(Op.Return)

    def _push_constants(self, lo: Lowerer, info: KernelInfo) -> None:
        m = self.m
        args = info.op.region("body").args
        scalars = info.abi.scalars
        for p in info.abi.buffers:
            arg = args[p.index]
            lo.env[arg] = BufferValue(lo.roots_of(arg), None)
        if not scalars:
            return
        members = []
        for p in scalars:
            t = args[p.index].type
            members.append(m.int(64) if t is I64 else m.float(64) if t is F64 else m.float(32) if t is F32
                           else m.int(32))
        block = m.block_struct(tuple(members), tuple(p.byte_offset for p in scalars))
        var = m.variable(SC.PushConstant, block)
        lo.fw.use_global(var)
        for k, (p, mt) in enumerate(zip(scalars, members)):
            ptr = lo.val(Op.AccessChain, m.pointer(SC.PushConstant, mt), var, lo.u32(k))
            raw = lo.val(Op.Load, mt, ptr)
            lo.env[args[p.index]] = self._from_slot(lo, args[p.index].type, raw)  # type: ignore[arg-type]

    @staticmethod
    def _from_slot(lo: Lowerer, t: ScalarType, raw: int) -> int:
        """A scalar parameter from its push-constant slot (low bits of a 4-byte
        slot for narrow types; i1 arrives as 0/1)."""
        if t is I1:
            return lo.cmp(Op.INotEqual, raw, lo.u32(0))
        if t.category == "int" and t.bits in (8, 16):
            return lo.val(Op.UConvert, lo.vtype(t), raw)
        if t is F16:
            pair = lo.bitcast(lo.m.vector(lo.vtype(t), 2), raw)
            return lo.val(Op.CompositeExtract, lo.vtype(t), pair, 0)
        if t is BF16:
            return lo.bitcast(lo.m.float(32), lo.ishl(raw, 16))
        return raw

    def _interface(self, fw: FunctionWriter) -> list[int]:
        seen: dict[int, None] = {}
        done: set[int] = set()

        def visit(f: FunctionWriter) -> None:
            if f.id in done:
                return
            done.add(f.id)
            for v in f.globals_used:
                seen[v] = None
            for callee in f.callees.values():
                visit(callee)

        visit(fw)
        if self.version >= (1, 4):
            return list(seen)
        return [v for v in seen if v in self.inputs]

    # ------------------------------------------------------------ driver

    def run(self) -> Artifact:
        infos = [self.info(kernel, _kernel_profile(self.module, kernel, self.profile))
                 for kernel in exported_kernels(self.module)]
        for info in infos:
            args = info.op.region("body").args
            info.facts = self.analysis.kernel(info.op, {args[p.index]: p.binding for p in info.abi.buffers})
        for root in self.analysis.allocas.values():
            why = decide_storage(root)
            if why is not None:
                assert root.op is not None
                owner = root.op.parent_op
                sym = (owner.symbol or "?") if owner is not None else "?"
                raise CompileError([Diagnostic.make("TARGET/005", self.path, root.op.loc, k=sym, feature=why,
                                                    target=self.profile.name)])
        for info in infos:
            self.kernel(info)
        m = self.m
        for info in infos:
            assert info.fw is not None
            inst = [Op.EntryPoint, GLCOMPUTE, info.fw.id, *string_words(info.abi.export), *self._interface(info.fw)]
            if len(inst) > MAX_INSTRUCTION_WORDS:  # the word count is a 16-bit field
                raise CompileError([Diagnostic.make(
                    "TARGET/005", self.path, info.op.loc, k=info.op.attr("sym", "?"),
                    feature=f"an entry point name of {len(info.abi.export.encode())} bytes",
                    target=f"{self.profile.name} (at most {4 * (MAX_INSTRUCTION_WORDS - 4) - 1})")])
            m.entry_points.append(inst)
            m.execution_modes.append([Op.ExecutionMode, info.fw.id, EXEC_LOCAL_SIZE, *info.workgroup_size])
            # Signed zeros, infinities and NaNs follow IEEE (LANGUAGE.md 7.2) where the profile can ask.
            for bits in self.profile.ieee_preserve_widths:
                if ("float", bits) in m.declared_types():
                    m.capability(Cap.SignedZeroInfNanPreserve)
                    m.execution_modes.append([Op.ExecutionMode, info.fw.id, EXEC_SIGNED_ZERO_INF_NAN_PRESERVE, bits])
        return Artifact("spirv-binary", m.to_bytes(), [self._manifest(i) for i in infos], self._target())

    def _manifest(self, info: KernelInfo) -> dict[str, object]:
        abi = info.abi
        entry: dict[str, object] = {
            **abi.manifest_head(),
            "workgroup_size": list(info.workgroup_size),
            "push_constant_bytes": abi.args_bytes,
            "parameters": [p.manifest("spirv") for p in abi.params],
            "resources": {"workgroup_storage_bytes": info.storage_bytes},
        }
        if info.profile.subgroup_size is not None:
            entry["required_subgroup_size"] = info.profile.subgroup_size
        return entry

    def _target(self) -> dict[str, object]:
        p = self.profile
        target: dict[str, object] = {"family": "spirv", "selector": p.selector, "triple": p.triple,
                                     "spirv_version": f"{self.version[0]}.{self.version[1]}"}
        if p.subgroup_size is not None:
            target["subgroup_size"] = p.subgroup_size
        return target


def _kernel_profile(module: Module, kernel: Operation, profile: Profile) -> Profile:
    """The kernel's profile: its pinned record's, else the one emitted for."""
    from loomcli.targets.checks import profile_for

    return profile_for(module, kernel, profile) or profile


def _folded_size(module: Module, kernel: Operation, profile: Profile) -> tuple[int, int, int] | None:
    """The workgroup size by running the launch configuration on constants
    (for modules whose passes left the size unfolded in the IR)."""
    try:
        from loomcli.semantics.launch import fold_launch_config
    except ImportError:  # pragma: no cover
        return None
    size = fold_launch_config(module, kernel, profile.subgroup_size).values.get("workgroup_size")
    if size is None or any(not isinstance(v, int) or isinstance(v, bool) for v in size):
        return None
    return (size[0], size[1], size[2])
