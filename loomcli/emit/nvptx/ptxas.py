"""NVIDIA's PTX assembler: where it is, running it, and what `-v` reports.

`ptxas` turns PTX into a cubin for one `sm_NN`. It is NVIDIA's and closed,
so loom does not ship it; it is found, in this order, at

1. `$PTXAS` (a path to the executable);
2. `nvidia/cu*/bin/ptxas` (or `nvidia/cuda_nvcc/bin/ptxas`) of the PyPI
   package `nvidia-cuda-nvcc`, which `pip install 'loom-compiler[cuda]'`
   brings;
3. `ptxas` on `PATH` (a CUDA toolkit).

`ptxas -v` prints, per entry function, the registers, shared memory,
barriers, stack frame and spills it settled on; `parse_info` reads them for
the manifest.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from loomcli.errors import LoomError

HOW_TO_GET = ("install NVIDIA's PTX assembler: pip install 'loom-compiler[cuda]' (the nvidia-cuda-nvcc package), "
              "or set PTXAS to a ptxas executable, or put a CUDA toolkit's bin folder on PATH")

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")
_ERROR_LINE = re.compile(r"^ptxas (?:fatal|error)\s*:|, line \d+; error", re.MULTILINE)


@dataclass
class KernelInfo:
    """What `ptxas -v` reports for one entry function."""

    registers: int = 0
    shared_bytes: int = 0
    barriers: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0


@dataclass
class Assembled:
    cubin: bytes
    kernels: dict[str, KernelInfo] = field(default_factory=dict)
    log: str = ""


def _package_ptxas() -> str | None:
    """`ptxas` of an installed nvidia-cuda-nvcc wheel (cu13: nvidia/cu13/bin, cu12: nvidia/cuda_nvcc/bin)."""
    for entry in sys.path:
        base = os.path.join(entry or ".", "nvidia")
        if not os.path.isdir(base):
            continue
        for candidate in sorted(glob.glob(os.path.join(base, "cu*", "bin", "ptxas")), reverse=True) + [
                os.path.join(base, "cuda_nvcc", "bin", "ptxas")]:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def find_ptxas() -> str | None:
    """The ptxas to run, or None when there is none (see the module's docstring)."""
    from loomcli import settings

    explicit = settings.ptxas()
    if explicit:
        return explicit
    return _package_ptxas() or shutil.which("ptxas")


def require_ptxas() -> str:
    path = find_ptxas()
    if path is None:
        raise LoomError(f"building a cubin needs ptxas, which was not found; {HOW_TO_GET}", 3)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise LoomError(f"PTXAS={path} is not an executable file; {HOW_TO_GET}", 3)
    return path


def version(path: str) -> str:
    """`13.0.88` for a ptxas that says `Cuda compilation tools, release 13.0, V13.0.88`."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"\bV(\d+(?:\.\d+)+)", out)
    return m.group(1) if m else "unknown"


def parse_info(log: str) -> dict[str, KernelInfo]:
    """Per entry function, the facts of `ptxas -v` (device functions that were
    not inlined have properties too, but no entry line; they are skipped)."""
    kernels: dict[str, KernelInfo] = {}
    current: KernelInfo | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = kernels.setdefault(m.group(1), KernelInfo())
        elif m := _PROPERTIES.search(line):
            current = kernels.get(m.group(1))
        elif current is None:
            continue
        elif m := _FRAME.search(line):
            current.stack_frame_bytes, current.spill_store_bytes, current.spill_load_bytes = map(int, m.groups())
        elif m := _USED.search(line):
            current.registers = int(m.group(1))
            if s := _SMEM.search(line):
                current.shared_bytes = int(s.group(1))
            if b := _BARRIERS.search(line):
                current.barriers = int(b.group(1))
    return kernels


def assemble(ptx: bytes, arch: str, ptxas: str | None = None) -> Assembled:
    """PTX -> cubin for `arch` (`sm_90`), with `-v`'s facts. A ptxas that rejects
    our PTX is loom's fault: an internal error with what ptxas said."""
    path = ptxas or require_ptxas()
    with tempfile.TemporaryDirectory(prefix="loom-ptxas-") as tmp:
        src, out = os.path.join(tmp, "kernels.ptx"), os.path.join(tmp, "kernels.cubin")
        with open(src, "wb") as f:
            f.write(ptx)
        try:
            run = subprocess.run([path, f"-arch={arch}", "-v", "-o", out, src], capture_output=True, text=True,
                                 check=False)
        except OSError as e:
            raise LoomError(f"cannot run ptxas ({path}): {e.strerror}; {HOW_TO_GET}", 3) from None
        log = (run.stdout + run.stderr).replace(src, "<ptx>")
        if run.returncode != 0 or not os.path.exists(out):
            errors = [line for line in log.splitlines() if _ERROR_LINE.search(line)] or log.splitlines()[-3:]
            raise LoomError(f"internal: ptxas rejected the PTX generated for nvptx:{arch} "
                            f"(exit status {run.returncode}): {' '.join(errors)}", 3)
        with open(out, "rb") as f:
            cubin = f.read()
    return Assembled(cubin, parse_info(log), log)
