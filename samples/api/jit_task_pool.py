"""Eight typed config modules parsed once, eight compiles of one kernel on a four-worker pool."""

import loomcli as loom

KERNEL = """\
config.decl @jit.workgroup_size : index

kernel.def export("scale") @scale(%n: index) {
  %one = index.constant 1 : index
  %size = config.get @jit.workgroup_size : index
  %bias = index.sub %size, %one : index
  %padded = index.add %n, %bias : index
  %groups = index.div %padded, %size : index
  kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%size, %one, %one) : index
} launch() {
  kernel.return
}
"""

source = loom.Source.from_text(KERNEL, name="jit_task_pool.loom")
configs = [loom.Source.from_text(f"config.def @jit.workgroup_size = {32 * (i + 1)} : index\n",
                                 name="jit_task_pool_config.loom") for i in range(8)]
compiler = loom.Compiler()
with loom.TaskPool(max_workers=4) as pool:
    futures = [pool.submit_compile(source, compiler=compiler, config_modules=(config,),
                                   require_resolved_config=True, outputs=("loom-bytecode",))
               for config in configs]
    results = [f.result() for f in futures]
failed = [d for r in results for d in r.diagnostics if not r.ok]
if failed:
    raise SystemExit("\n".join(map(str, failed)))
print(f"compiled={sum(1 for r in results if 'loom-bytecode' in r.artifacts)}")
