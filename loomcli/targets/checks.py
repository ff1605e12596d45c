"""Which profile a root compiles for, and the compile-time TARGET checks
(LANGUAGE.md 7.8, 8 and 17.26-30).

`profile_for` resolves a root's profile: a root pinned with `target(@t)`
uses its record's profile, and `--target` must then name the same chip;
other roots use `--target`. `check_kernel` runs every check a kernel meets
once its profile is chosen:

* TARGET/001: a cluster size that folds to other than 1x1x1; a reachable
  `target.subgroup.size` without a fixed size; a called function pinned to
  a target this profile does not match; `scope = system` on spirv;
* TARGET/002: a workgroup size that does not fold, on spirv;
* TARGET/003: a folded workgroup size above the per-axis or flat limit;
* TARGET/004: `workgroup_storage_bytes` above `max_workgroup_storage_bytes`;
* TARGET/005: a type the profile's features lack (f16, f64, i64, 8/16-bit
  storage) in the body or a device function it calls;
* TARGET/006: push constants (spirv) above `max_push_constant_bytes`;
* TARGET/007: private allocas (the body and every function it calls,
  aligned as workgroup allocas are) above `max_private_bytes` (17.36).

Sizes "fold" as LANGUAGE.md 17.15 says: the launch-config region is run on
constants with the workload unknown (`loomcli.semantics.launch`).
"""

from __future__ import annotations

from collections.abc import Iterator

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.ir.core import Module, Operation, Value
from loomcli.ir.ops import BUFFER_ALLOCA, CALL, KERNEL_LAUNCH_CONFIG, TARGET_SUBGROUP_SIZE, VIEW_ATOMIC_RMW
from loomcli.ir.types import ELEMENT_BYTES, F16, F64, I64, ScalarType, ShapedType, Type
from loomcli.semantics.evaluate import Evaluator
from loomcli.targets.profiles import Profile
from loomcli.targets.records import RECORD_OPS, pinned_record, record_profile


def profile_for(module: Module, op: Operation, cli_profile: Profile | None) -> Profile | None:
    """The profile root `op` (a kernel or other symbol op) compiles for.

    Pinned (`target(@t)`): the record's profile; a `cli_profile` naming
    another chip is TARGET/001 (17.30). Unpinned: `cli_profile` (None when
    there is no target). Raises CompileError for a bad record."""
    return ModuleChecks(module).profile_for(op, cli_profile)


def check_kernel(module: Module, kernel: Operation, profile: Profile) -> list[Diagnostic]:
    """Every compile-time TARGET diagnostic of `kernel` for `profile` (a
    pinned kernel is checked against its own record), sorted."""
    return ModuleChecks(module).check_kernel(kernel, profile)


def check_module(module: Module, profile: Profile | None) -> list[Diagnostic]:
    """`check_records` plus `check_kernel` for every exported kernel, sharing
    the work of looking symbols up (use this for many kernels)."""
    from loomcli.targets.abi import exported_kernels
    from loomcli.targets.records import check_records

    checks = ModuleChecks(module)
    diags = check_records(module)
    for kernel in exported_kernels(module):
        try:
            resolved = checks.profile_for(kernel, profile)
        except CompileError as e:
            diags += e.diagnostics
            continue
        if resolved is not None:
            diags += checks.check_kernel(kernel, resolved)
    return sorted(diags, key=lambda d: d.sort_key)


class ModuleChecks:
    """The checks of one module; symbols and evaluators are built once."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.symbols = module.symbols()
        self._evaluators: dict[int | None, Evaluator] = {}

    def evaluator(self, subgroup_size: int | None) -> Evaluator:
        ev = self._evaluators.get(subgroup_size)
        if ev is None:
            ev = self._evaluators[subgroup_size] = Evaluator(self.module, subgroup_size=subgroup_size)
        return ev

    def profile_for(self, op: Operation, cli_profile: Profile | None) -> Profile | None:
        record = pinned_record(self.module, op, self.symbols)
        if record is None:
            return cli_profile
        profile, diags = record_profile(record, self.module.path)
        if cli_profile is not None and cli_profile.chip != profile.chip:
            diags.append(Diagnostic.make(
                "TARGET/001", self.module.path, op.loc_of("target"),
                text=f"--target={cli_profile.name} for @{op.symbol} pinned to "
                     f"@{record.attr('sym')} ({profile.name})"))
        if diags:
            raise CompileError(diags)
        return profile

    def check_kernel(self, kernel: Operation, profile: Profile) -> list[Diagnostic]:
        try:
            resolved = self.profile_for(kernel, profile)
        except CompileError as e:
            return e.diagnostics
        assert resolved is not None
        checker = _KernelChecker(self, kernel, resolved)
        checker.run()
        return sorted(checker.diags, key=lambda d: d.sort_key)


class _KernelChecker:
    def __init__(self, checks: ModuleChecks, kernel: Operation, profile: Profile) -> None:
        self.checks = checks
        self.module = checks.module
        self.kernel = kernel
        self.profile = profile
        self.sym = kernel.attr("sym")
        self.symbols = checks.symbols
        self.diags: list[Diagnostic] = []

    def error(self, code: str, loc: tuple[int, int], **fields: object) -> None:
        self.diags.append(Diagnostic.make(code, self.module.path, loc, "error", **fields))

    def run(self) -> None:
        self.check_profile()
        self.check_geometry()
        self.check_storage()
        self.check_private()
        self.check_push_constants()
        self.check_body()

    # ------------------------------------------------------------ launch geometry

    def check_profile(self) -> None:
        """A required subgroup size needs SPIR-V 1.6 (VK_EXT_subgroup_size_control in core)."""
        p = self.profile
        if p.subgroup_size is not None and p.spirv_version is not None and p.spirv_version < (1, 6):
            self.error("TARGET/001", self.kernel.loc, text=f"subgroup_size on {p.selector}")

    def check_geometry(self) -> None:
        from loomcli.semantics.launch import fold_launch_config

        config = self.kernel.region("config").terminator
        if config is None or config.opdef is not KERNEL_LAUNCH_CONFIG:
            return
        folded = fold_launch_config(self.module, self.kernel, self.profile.subgroup_size,
                                    self.checks.evaluator(self.profile.subgroup_size))
        p = self.profile
        cluster = folded.values["cluster_size"]
        if any(c is not None and c != 1 for c in cluster):
            self.error("TARGET/001", config.loc_of("cluster_size"), text=f"cluster_size {_triple(cluster)}")
        size = folded.values["workgroup_size"]
        loc = config.loc_of("workgroup_size")
        if p.family == "spirv" and None in size:
            self.error("TARGET/002", loc, k=self.sym, target=p.family)
        over_axis = any(s is not None and s > m for s, m in zip(size, p.max_workgroup_size))
        over_flat = None not in size and size[0] * size[1] * size[2] > p.max_flat_workgroup_size
        if over_axis or over_flat:
            x, y, z = (("?" if s is None else str(s)) for s in size)
            # The limit the size broke, so the user knows what to write instead.
            if over_axis:
                limit = "at most {}x{}x{} per axis".format(*p.max_workgroup_size)
            else:
                limit = f"{size[0] * size[1] * size[2]} invocations, at most {p.max_flat_workgroup_size}"
            self.error("TARGET/003", loc, x=x, y=y, z=z, target=p.name, limit=limit)

    # ------------------------------------------------------------ storage and ABI

    def check_storage(self) -> None:
        from loomcli.targets.abi import workgroup_storage_bytes

        p = self.profile
        try:
            total = workgroup_storage_bytes(self.kernel, p.subgroup_size, p.max_flat_workgroup_size)
        except ValueError:
            self.error("STRUCTURE/008", self.kernel.loc)
            return
        if total > p.max_workgroup_storage_bytes:
            self.error("TARGET/004", self._storage_loc(), n=total, limit=p.max_workgroup_storage_bytes)

    def check_private(self) -> None:
        from loomcli.semantics.fold import align_up, constant_of

        limit = self.profile.max_private_bytes
        total = 0
        for op in self._device_ops():
            if op.opdef is BUFFER_ALLOCA and op.attr("kind", None) == "private":
                size = constant_of(op.operand("bytes")) if op.operands else None
                if isinstance(size, int) and not isinstance(size, bool):
                    total = align_up(total, op.attr("align", 1)) + size
                    if total > limit:
                        self.error("TARGET/007", op.loc, n=total, limit=limit)
                        return

    def _storage_loc(self) -> tuple[int, int]:
        """The first workgroup alloca that crosses the limit, else the kernel."""
        from loomcli.semantics.fold import align_up, constant_of

        offset = 0
        for op in self.kernel.region("body").ops:
            if op.opdef is BUFFER_ALLOCA and op.attr("kind", None) == "workgroup":
                offset = align_up(offset, op.attr("align", 1)) + constant_of(op.operand("bytes"))
                if offset > self.profile.max_workgroup_storage_bytes:
                    return op.loc
        return self.kernel.loc

    def check_push_constants(self) -> None:
        from loomcli.targets.abi import kernel_abi

        limit = self.profile.max_push_constant_bytes
        if self.profile.family != "spirv" or limit is None:
            return
        abi = kernel_abi(self.kernel, "spirv")
        if abi.args_bytes <= limit:
            return
        first = next(q for q in abi.scalars if q.byte_offset + q.byte_length > limit)
        loc = self.kernel.region("body").args[first.index].loc
        self.error("TARGET/006", loc if loc != (0, 0) else self.kernel.loc, k=self.sym, n=abi.args_bytes, limit=limit)

    # ------------------------------------------------------------ the device body

    def check_body(self) -> None:
        """Features, `target.subgroup.size`, pinned callees and atomic scopes
        over the body and every function it calls."""
        p = self.profile
        missing: dict[str, tuple[int, int]] = {}
        for a in self.kernel.region("body").args:
            for feature in _features_of(a.type):
                missing.setdefault(feature, a.loc if a.loc != (0, 0) else self.kernel.loc)
        subgroup_reported = False
        for op in self._device_ops():
            for feature in _op_features(op):
                missing.setdefault(feature, op.loc)
            if op.opdef is TARGET_SUBGROUP_SIZE and p.subgroup_size is None and not subgroup_reported:
                subgroup_reported = True
                self.error("TARGET/001", op.loc, text=f"target.subgroup.size on {p.name}")
            elif op.opdef is VIEW_ATOMIC_RMW and p.family == "spirv":
                scope = (op.attr("dict", None) or {}).get("scope")
                if str(scope) == "system":
                    self.error("TARGET/001", op.loc_of("dict"), text=f"scope = system on {p.name}")
            elif op.opdef.has(CALL):
                self._check_pinned_callee(op)
        if self._config_uses_subgroup_size() and p.subgroup_size is None and not subgroup_reported:
            op = next(o for o in self._config_ops() if o.opdef is TARGET_SUBGROUP_SIZE)
            self.error("TARGET/001", op.loc, text=f"target.subgroup.size on {p.name}")
        for feature, loc in missing.items():
            if feature not in p.features:
                self.error("TARGET/005", loc, k=self.sym, feature=feature, target=p.name)

    def _check_pinned_callee(self, op: Operation) -> None:
        callee = self.symbols.get(op.attr("callee", ""))
        if callee is None or callee.attr_or("target") is None:
            return
        record = self.symbols.get(callee.attr_or("target"))
        if record is None or record.name not in RECORD_OPS:
            return
        if not self.profile.matches_record(record.attr("kind")):
            self.error("TARGET/001", op.loc_of("callee"),
                       text=f"@{callee.attr('sym')} is pinned to @{record.attr('sym')}, not {self.profile.name}")

    def _device_ops(self) -> Iterator[Operation]:
        yield from reachable_ops(self.kernel.region("body").ops, self.symbols)

    def _config_ops(self) -> Iterator[Operation]:
        yield from reachable_ops(self.kernel.region("config").ops, self.symbols)

    def _config_uses_subgroup_size(self) -> bool:
        return any(o.opdef is TARGET_SUBGROUP_SIZE for o in self._config_ops())


def reachable_ops(ops: list[Operation], symbols: dict[str, Operation]) -> Iterator[Operation]:
    """Every op of `ops` (nested ones included) and of every function body
    they call, transitively; each function once."""
    seen: set[str] = set()
    stack = [iter(ops)]
    while stack:
        for top in stack[-1]:
            for op in top.walk():
                yield op
                name = op.attr("callee", None) if op.opdef.has(CALL) else None
                if name and name not in seen and (callee := symbols.get(name)) is not None and callee.regions:
                    seen.add(name)
                    stack.append(iter(callee.regions[0].ops))
            break
        else:
            stack.pop()


def _features_of(t: Type) -> list[str]:
    """The profile features a value of type `t` needs on a device (17.30):
    f16, f64, i64 arithmetic; 8- and 16-bit elements in memory need
    int8_storage / int16_storage."""
    out: list[str] = []
    if isinstance(t, ShapedType):
        out += _features_of(t.elem)
        if t.name == "view":
            size = ELEMENT_BYTES.get(t.elem)
            if size == 1:
                out.append("int8_storage")
            elif size == 2:
                out.append("int16_storage")
        return out
    if isinstance(t, ScalarType):
        if t is F16:
            out.append("f16")
        elif t is F64:
            out.append("f64")
        elif t is I64:
            out.append("i64")
    return out


def _op_features(op: Operation) -> Iterator[str]:
    values: list[Value] = list(op.results)
    for region in op.regions:
        values += region.args
    for v in values:
        yield from _features_of(v.type)
    for key in ("type",):
        t = op.attr_or(key)
        if isinstance(t, Type):
            yield from _features_of(t)


def _triple(values: tuple[int | None, ...]) -> str:
    return "x".join("?" if v is None else str(v) for v in values)
