"""Code size and emission time of a math-heavy kernel, per target family.

    PYTHONPATH=<tree> python bench/math_cost.py [tests/amdgpu/scalars.loom]

Emission here is legalization (`expand-math`), instruction selection and,
for LLVM targets, LLVM's optimizer and code generator in the warm worker.
Run it with PYTHONPATH at two trees to compare them; each figure is the
median of five emissions of a freshly compiled module.
"""

from __future__ import annotations

import re
import statistics
import sys
import time

from loomcli.emit.artifacts import Emission
from loomcli.service.front import CompileOptions, compile_module
from loomcli.targets.profiles import parse_target

AMDGPU_INSTRUCTION = re.compile(r"^\s+(?:s_|v_|global_|buffer_|ds_|flat_|scratch_)\w*", re.M)
OUTPUTS = [("spirv:vulkan1.3", "spirv-binary"), ("amdgpu:gfx1100", "amdgpu-hsaco"), ("amdgpu:gfx1100", "asm"),
           ("nvptx:sm_90", "nvptx-ptx")]


def main(path: str) -> None:
    for target, fmt in OUTPUTS:
        profile = parse_target(target)
        try:
            times = []
            for _ in range(5):
                module = compile_module(CompileOptions(input=path, profile=profile)).module
                start = time.perf_counter()
                artifact = Emission(module, profile).artifact(fmt)
                times.append(time.perf_counter() - start)
        except Exception as e:  # an older tree may not compile the kernel for every target
            print(f"{target} {fmt}: {type(e).__name__}: {str(e)[:120]}")
            continue
        extra = ""
        if fmt == "asm":
            extra = f" instructions={len(AMDGPU_INSTRUCTION.findall(artifact.data.decode()))}"
        elif fmt == "nvptx-ptx":
            extra = f" ptx_lines={artifact.data.decode().count(chr(10))}"
        print(f"{target} {fmt}: bytes={len(artifact.data)} emit_median_s={statistics.median(times):.3f}{extra}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/amdgpu/scalars.loom")
