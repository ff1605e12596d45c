"""`expand-collectives` against the interpreter: every kernel launch of a
file runs twice on the reference interpreter, once as compiled and once
after the pass, and must leave the same bytes in every buffer (a third check
of workgroup reductions beside the folder and the devices).

Workgroup shapes: the files' own constant sizes, and `SHAPES` through a
kernel whose workgroup size is a launch argument (so the scratch is sized
for the profile's largest workgroup): short last subgroups, 2-D and 3-D
workgroups, one invocation. Subgroup sizes: the reference 32, 8, and none
fixed (the pass then counts one invocation per subgroup). Float sums and
products are of values whose every partial result is exact, since `addf`
and `mulf` may associate in any order (LANGUAGE.md 7.5).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from loomcli.check.cases import CaseRunner, Tensor
from loomcli.check.interpreter import InterpreterLauncher
from loomcli.ir.clone import clone_op
from loomcli.ir.core import Module, Operation
from loomcli.ir.verifier import verify
from loomcli.passes import PassContext, parse_pipeline
from loomcli.service.front import CompileOptions, compile_module
from loomcli.targets.profiles import REFERENCE, Profile

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "tests" / "exec" / "reductions.loom", ROOT / "tests" / "conformance" / "reductions_sizes.loom"]
PROFILES = {"sg32": REFERENCE, "sg8": dataclasses.replace(REFERENCE, subgroup_size=8),
            "no_fixed_sg": dataclasses.replace(REFERENCE, subgroup_size=None)}
SHAPES = [(100, 1, 1), (7, 5, 3), (32, 2, 1), (1, 1, 1), (33, 1, 1), (64, 1, 1)]

# (type, kind, the value each invocation contributes, from %lin : i32 = its linear id)
SITES = [
    ("i32", "addi", "lin"), ("i32", "maxsi", "neg"), ("i32", "minui", "lin"), ("i32", "xori", "lin"),
    ("i1", "andi", "odd"), ("i1", "ori", "odd"), ("i1", "xori", "odd"),
    ("i8", "muli", "lin8"), ("i16", "addi", "lin16"), ("i64", "minsi", "neg64"),
    ("f32", "addf", "linf"), ("f32", "minimumf", "negf"), ("f32", "maxnumf", "linf"),
    ("f64", "mulf", "sign64"), ("f16", "addf", "mod4h"), ("bf16", "maxnumf", "mod4b"), ("bf16", "addf", "oddb"),
]

VALUES = """\
  %lin = index.cast %linear : index to i32
  %c0i = scalar.constant 0 : i32
  %neg = scalar.subi %c0i, %lin : i32
  %odd = scalar.trunci %lin : i32 to i1
  %lin8 = scalar.trunci %lin : i32 to i8
  %lin16 = scalar.trunci %lin : i32 to i16
  %neg64 = scalar.extsi %neg : i32 to i64
  %linf = scalar.sitofp %lin : i32 to f32
  %negf = scalar.negf %linf : f32
  %c3 = scalar.constant 3 : i32
  %mod4 = scalar.andi %lin, %c3 : i32
  %mod4h = scalar.sitofp %mod4 : i32 to f16
  %mod4b = scalar.sitofp %mod4 : i32 to bf16
  %oddi = scalar.extui %odd : i1 to i32
  %oddb = scalar.sitofp %oddi : i32 to bf16
  %two = scalar.constant 2 : i32
  %twice = scalar.muli %oddi, %two : i32
  %one = scalar.constant 1 : i32
  %signi = scalar.subi %one, %twice : i32
  %sign64 = scalar.sitofp %signi : i32 to f64
"""


def shapes_source() -> str:
    """A kernel with a workgroup size from its workload, one reduction per
    row of SITES (one nested in a uniform loop, so sites reuse the slots),
    a workgroup alloca after the first site, and one check case per shape."""
    params = ", ".join(f"%o{k}: buffer" for k in range(len(SITES)))
    body = [VALUES]
    for k, (t, kind, value) in enumerate(SITES):
        body.append(f"  %v{k} = buffer.view %o{k}[%zero] : buffer -> view<[%total]x{t}>\n")
        if k == 3:
            body.append(f"  %r{k} = scf.for %it = [%c0 to %c2 step %c1](%acc = %lin : i32) -> (i32) {{\n"
                        f"    %s{k} = kernel.workgroup.reduce<{kind}> %acc : i32\n"
                        f"    scf.yield %s{k} : i32\n  }}\n")
        else:
            body.append(f"  %r{k} = kernel.workgroup.reduce<{kind}> %{value} : {t}\n")
        body.append(f"  view.store %r{k}, %v{k}[%g] : {t}, view<[%total]x{t}>\n")
    kernel = f"""kernel.def @shapes(%x: index, %y: index, %z: index, %total: index) {{
  %c1 = index.constant 1 : index
  %c2 = index.constant 2 : index
  kernel.launch.config workgroups(%c2, %c1, %c1) workgroup_size(%x, %y, %z) : index
}} launch(%x: index, %y: index, %z: index, %total: index, {params}) {{
  %zero = index.constant 0 : offset
  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %c2 = index.constant 2 : index
  %ix = kernel.workitem.id<x> : index
  %iy = kernel.workitem.id<y> : index
  %iz = kernel.workitem.id<z> : index
  %yz = index.madd %y, %iz, %iy : index
  %linear = index.madd %x, %yz, %ix : index
  %gx = kernel.workgroup.id<x> : index
  %flat_xy = index.mul %x, %y : index
  %flat = index.mul %flat_xy, %z : index
  %g = index.madd %gx, %flat, %linear : index
{''.join(body)}  %bytes = index.constant 4 : offset
  %own = buffer.alloca<workgroup> align(4) %bytes : buffer
  %ownv = buffer.view %own[%zero] : buffer -> view<1xi32>
  view.store %r0, %ownv[0] : i32, view<1xi32>
  kernel.return
}}
"""
    cases = []
    for x, y, z in SHAPES:
        total = 2 * x * y * z
        fills = "".join(f"  %t{k} = check.generate.fill value({'0.0' if t[0] in 'fb' else '0'}) : tensor<{total}x{t}>\n"
                        for k, (t, _, _) in enumerate(SITES))
        args = ", ".join(f"%t{k}" for k in range(len(SITES)))
        types = ", ".join(f"tensor<{total}x{t}>" for t, _, _ in SITES)
        cases.append(f"""check.case @shape_{x}x{y}x{z} {{
  %x = check.literal value({x}) : index
  %y = check.literal value({y}) : index
  %z = check.literal value({z}) : index
  %total = check.literal value({total}) : index
{fills}  kernel.launch @shapes[%x, %y, %z, %total](%x, %y, %z, %total, {args}) : \
[index, index, index, index](index, index, index, index, {types})
  check.return
}}
""")
    return kernel + "\n" + "\n".join(cases)


class PairedLauncher:
    """Runs each launch on the compiled module, then again, from the same
    inputs, on its expanded clone; records both results."""

    def __init__(self, compiled: Module, expanded: Module, profile: Profile, path: str) -> None:
        self.before = InterpreterLauncher(compiled, profile, path)
        self.after = InterpreterLauncher(expanded, profile, path)
        self.launches: list[tuple[str, list[bytes], list[bytes]]] = []

    def launch(self, op: Operation, workload: list[Any], args: list[Any]) -> None:
        tensors = [a for a in args if isinstance(a, Tensor)]
        inputs = [bytes(t.data) for t in tensors]
        self.before.launch(op, workload, args)
        want = [bytes(t.data) for t in tensors]
        for t, data in zip(tensors, inputs):
            t.data[:] = data
        self.after.launch(op, workload, args)
        got = [bytes(t.data) for t in tensors]
        self.launches.append((op.attr("callee"), want, got))


def expanded(module: Module, profile: Profile) -> Module:
    out = Module(module.path)
    for op in module.ops:
        out.body.append(clone_op(op))
    parse_pipeline("expand-collectives").run(out, PassContext(target=profile, verify_each=True))
    return out


def run_paired(path: str, profile: Profile) -> PairedLauncher:
    from loomcli.frontend import load_module

    source = load_module(path)
    roots = sorted({"@" + op.attr("callee") for op in source.walk() if op.name == "kernel.launch"})
    compiled = compile_module(CompileOptions(input=path, profile=profile, roots=roots, for_execution=True)).module
    after = expanded(compiled, profile)
    assert not any(op.name == "kernel.workgroup.reduce" for op in after.walk())
    assert not [d for d in verify(after) if d.severity == "error"]
    launcher = PairedLauncher(compiled, after, profile, path)
    runner = CaseRunner(compiled, launcher, path=path)
    for case in [op for op in source.ops if op.name == "check.case"]:
        for result in runner.run_case(case):
            assert result.passed, [d.render() for d in result.diagnostics]
    assert launcher.launches
    return launcher


def assert_same(launcher: PairedLauncher) -> None:
    for callee, want, got in launcher.launches:
        for k, (w, g) in enumerate(zip(want, got)):
            assert w == g, f"@{callee}: buffer {k} differs after expand-collectives"


DEVICE_TARGETS = ["amdgpu:gfx1100", "amdgpu:gfx942", "spirv:vulkan1.3", "nvptx:sm_90"]


# tests/amdgpu/collectives.loom takes its workgroup size from the workload,
# which spirv refuses (TARGET/002), so that pair is not a case.
STORAGE_CASES = [pytest.param(path, target, id=f"{path.name}-{target}")
                 for path in [ROOT / "tests" / "amdgpu" / "collectives.loom", *FILES] for target in DEVICE_TARGETS
                 if not (path.name == "collectives.loom" and target.startswith("spirv:"))]


@pytest.mark.parametrize(("path", "target"), STORAGE_CASES)
def test_expansion_keeps_workgroup_storage_bytes(path: Path, target: str) -> None:
    """The contract's workgroup_storage_bytes (allocas plus reduction scratch,
    LANGUAGE.md 17.28) is the plain alloca walk of the legalized kernel, so
    manifests and launch configs read the same value from either module."""
    from loomcli.emit.artifacts import legalize
    from loomcli.targets.abi import exported_kernels, workgroup_allocas_bytes, workgroup_storage_bytes
    from loomcli.targets.profiles import parse_target

    profile = parse_target(target)
    compiled = compile_module(CompileOptions(input=str(path), profile=profile, for_execution=True)).module
    legal = legalize(compiled, profile)
    assert "expand-collectives" in profile.legalize
    kernels = {k.attr("sym"): k for k in exported_kernels(legal, {op.attr("sym") for op in legal.ops
                                                                   if op.name == "kernel.def"})}
    for kernel in exported_kernels(compiled, set(kernels)):
        size = profile.subgroup_size
        want = workgroup_storage_bytes(kernel, size, profile.max_flat_workgroup_size)
        assert workgroup_allocas_bytes(kernels[kernel.attr("sym")]) == want, kernel.attr("sym")


@pytest.mark.parametrize("profile", PROFILES.values(), ids=PROFILES.keys())
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_files_run_the_same_expanded(path: Path, profile: Profile) -> None:
    assert_same(run_paired(str(path), profile))


@pytest.mark.parametrize("profile", PROFILES.values(), ids=PROFILES.keys())
def test_workgroup_shapes_run_the_same_expanded(tmp_path: Path, profile: Profile) -> None:
    src = tmp_path / "shapes.loom"
    src.write_text(shapes_source())
    launcher = run_paired(str(src), profile)
    assert len(launcher.launches) == len(SHAPES)
    assert_same(launcher)


BARRIER_UNDER_A_REDUCTION = """\
kernel.def export("k") @k(%n: index) {
  %c64 = index.constant 64 : index
  %c1 = index.constant 1 : index
  kernel.launch.config workgroups(%n, %c1, %c1) workgroup_size(%c64, %c1, %c1) : index
} launch(%n: index, %out: buffer) {
  %t = kernel.workitem.id<x> : index
  %x = index.cast %t : index to i32
  %s = kernel.workgroup.reduce<addi> %x : i32
  %z = scalar.constant 0 : i32
  %p = scalar.cmpi sgt, %s, %z : i32
  scf.if %p {
    kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)
    scf.yield
  }
  kernel.return
}
"""


def test_legalized_ir_is_checked_without_the_source_uniformity_rule(tmp_path: Path) -> None:
    """A barrier under a reduction's result is valid source; once expanded, the
    result is a load the source-level rule does not call uniform. `--verify-each`
    and `loom opt` check legalized IR without that rule, and nothing else is lost."""
    import subprocess
    import sys

    path = tmp_path / "k.loom"
    path.write_text(BARRIER_UNDER_A_REDUCTION)
    module = compile_module(CompileOptions(input=str(path), profile=REFERENCE)).module
    assert not verify(module)
    parse_pipeline("expand-collectives").run(module, PassContext(target=REFERENCE, verify_each=True))
    assert [d.code for d in verify(module)] == ["STRUCTURE/005"]   # the source-level rule
    assert not verify(module, source_level=False)
    r = subprocess.run([sys.executable, "-m", "loomcli", "opt", str(path), "--pipeline", "expand-collectives"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "kernel.subgroup.reduce<addi>" in r.stdout, r.stderr
