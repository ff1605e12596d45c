"""The shared lowering of compiled Loom IR to LLVM IR, for every LLVM-based target.

* `target`: `LLVMTarget`, the data a target contributes (address spaces,
  coordinates, barriers, shuffles, atomics' scopes, kernel attributes);
* `lower`: the lowering itself, written once (`lower_module`, `plan_kernel`);
* `codegen`: LLVM's optimizer and code generator (imports llvmlite; runs in
  a worker process).
"""
