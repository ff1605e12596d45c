"""The shared lowering of compiled Loom IR to LLVM IR, for every LLVM-based target.

* `ir`: LLVM IR as typed values, a small builder and its printer (no LLVM);
* `target`: `LLVMTarget`, what a target contributes: data (address spaces,
  atomics' scopes, kernel attributes) and hooks that build coordinates,
  barriers and shuffles with `ir`;
* `backend`: the lowering and the worker call every LLVM back end's stages share;
* `lower`: the lowering itself, written once (`lower_module`, `plan_kernel`);
* `codegen`: LLVM's optimizer and code generator (imports llvmlite; runs in
  a worker process).
"""
