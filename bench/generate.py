"""Generate a large, valid, canonical Loom module for benchmarks.

The module repeats the kernels of the samples (saxpy, tree reduction, tiled
matmul) with fresh symbols and export names until it reaches the requested
size, so its op mix is that of real kernels.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
KERNELS = ("saxpy.loom", "reduction.loom", "matmul.loom")


def _kernel_only(text: str) -> str:
    """The `kernel.def` of a sample, without its check cases."""
    start = text.index("kernel.def")
    end = text.find("\ncheck.case", start)
    return text[start:end if end >= 0 else len(text)].rstrip("\n")


def generate(target_bytes: int) -> str:
    templates = [_kernel_only((SAMPLES / name).read_text()) for name in KERNELS]
    parts: list[str] = []
    size = 0
    i = 0
    while size < target_bytes:
        t = templates[i % len(templates)]
        # Rename the symbol and export so every kernel is distinct.
        t = re.sub(r'export\("(\w+)"\) @(\w+)', lambda m, i=i: f'export("{m.group(1)}_{i}") @{m.group(2)}_{i}', t)
        parts.append(t)
        size += len(t) + 2
        i += 1
    return "\n\n".join(parts) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bytes", type=int, default=1_000_000)
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args()
    text = generate(args.bytes)
    if args.output == "-":
        print(text, end="")
    else:
        Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
