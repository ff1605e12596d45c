"""LLVM code generation: LLVM IR text in, object or assembly bytes out.

This module imports llvmlite and is meant to run inside a worker process
(`loomcli.runtime.isolated`): LLVM reports some errors by aborting, and an
abort there cannot take `loom` down. Target machines are created once per
process and reused; a pass builder is made per module (see `_optimize`).

Request header (JSON): `triple`, `cpu`, `features`, `datalayout` (checked
against the target machine's), `emit` ("object" | "assembly" |
"optimized-ir"), `opt` (0-3), `link` (LLVM IR texts linked into the module
before it is verified and optimized).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import llvmlite.binding as llvm


@cache
def _initialized() -> bool:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    # The host's assembler parser: the cpu run-time's fiber switch is module-level assembly.
    llvm.initialize_native_asmparser()
    return True


@cache
def _machine(triple: str, cpu: str, features: str, opt: int) -> Any:
    _initialized()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="pic", codemodel="default")


def _optimize(module: Any, tm: Any, opt: int) -> None:
    """Run LLVM's per-module default pipeline at `opt` on `module`.

    The pass builder is made for this one run and disposed after it (making
    one costs ~10 us). llvmlite registers the run's pass instrumentation on
    the builder and never removes it, so a builder kept for the process made
    every later run slower (the O3 pipeline of a four-kernel module took
    2.5 ms fresh and 10.8 ms after 300 runs) and left the builder holding
    callbacks of runs that had ended.
    """
    with (llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=opt)) as builder,
          builder.getModulePassManager() as pipeline):
        pipeline.run(module, builder)


def warm() -> None:
    """Worker start-up: initialize LLVM before the first request arrives."""
    _initialized()


def compile_ir(header: dict[str, Any], ir: bytes) -> bytes:
    triple, cpu, features = header["triple"], header["cpu"], header.get("features", "")
    opt = int(header.get("opt", 3))
    tm = _machine(triple, cpu, features, opt)
    want = header.get("datalayout")
    if want and want != str(tm.target_data):
        raise ValueError(f"data layout mismatch: lowering uses {want!r}, LLVM {str(tm.target_data)!r}")
    module = llvm.parse_assembly(ir.decode())
    for text in header.get("link", ()):
        module.link_in(llvm.parse_assembly(text))
    module.verify()
    if opt:
        _optimize(module, tm, opt)
    emit = header.get("emit", "object")
    if emit == "object":
        return bytes(tm.emit_object(module))
    if emit == "assembly":
        return tm.emit_assembly(module).encode()
    if emit == "optimized-ir":
        return str(module).encode()
    raise ValueError(f"unknown emit kind {emit!r}")


def verify_ir(header: dict[str, Any], ir: bytes) -> bytes:
    """Parse and verify only (tests, `llvmir-text` checks)."""
    _initialized()
    llvm.parse_assembly(ir.decode()).verify()
    return b""
