"""Compile a kernel in memory for amdgpu:gfx1100, evaluate its launch, print the artifact."""

import loomcli as loom

KERNEL = """\
// Workload values shape the grid; the device signature is empty.
kernel.def export("workload_grid") @workload_grid(%element_count: index) {
  %unit = index.constant 1 : index
  %workgroup_size = index.constant 64 : index
  %rounding = index.constant 63 : index
  %rounded_count = index.add %element_count, %rounding : index
  %workgroup_count = index.div %rounded_count, %workgroup_size : index
  kernel.launch.config workgroups(%workgroup_count, %unit, %unit) workgroup_size(%workgroup_size, %unit, %unit) : index
} launch() {
  kernel.return
}
"""

source = loom.Source.from_text(KERNEL, name="guide_jit_kernel.loom")
compiler = loom.Compiler()
result = compiler.compile(source, target=loom.Target("amdgpu:gfx1100"),
                          outputs=("amdgpu-hsaco", "launch-config"))
if not result.ok:
    raise SystemExit("\n".join(map(str, result.diagnostics)))

program = loom.LaunchProgram(result.artifacts["launch-config"].data)
launch = program.invoke(program.lookup(result.exports[0]), [1009])
print(f"workload={launch.workload[0]} workgroups={'x'.join(map(str, launch.workgroups))} "
      f"workgroup_size={'x'.join(map(str, launch.workgroup_size))}")
artifact = result.artifacts["amdgpu-hsaco"]
print(f"artifact={artifact.name} format={artifact.format} bytes={len(artifact.data)}")
