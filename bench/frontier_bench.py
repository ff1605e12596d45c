"""The product frontier on a generated command program: 500 launches over 100 kernels.

    python bench/frontier_bench.py [--repeat N] [--kernels 100] [--launches 500] [--target amdgpu:gfx1100]

Every kernel calls a pure helper in its launch configuration and applies a
template family in its body whose providers depend on a device argument, so
each kernel has two semantic classes; the program launches the kernels
round-robin with constants that pick either class, in concurrent groups of
ten, and dispatches one external entry. Measured from the call of
`build_command_product` (link, bind, prepare, classify, publish):

* time to the first published request (when a compile could start);
* time to the finished product (command bytes, requirements, every request).

Prints the medians over `--repeat` runs and the counts, so the figures can
be checked against what was built.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HEAD = """\
func.def pure @groups(%n: index, %size: index) -> (index) {
  %one = index.constant 1 : index
  %m = index.sub %size, %one : index
  %p = index.add %n, %m : index
  %g = index.div %p, %size : index
  func.return %g : index
}

template.decl @bench.tile(%n: index)

template.def<@bench.tile> priority(5) @wide(%n: index) where [ge(%n, 1024)] {
  template.return
}

template.def<@bench.tile> @narrow(%n: index) {
  template.return
}

kernel.entry.decl @host_sync(%b: buffer)
"""

KERNEL = """\
kernel.def export("k{k}") @k{k}(%n: index) {{
  %one = index.constant 1 : index
  %size = index.constant 64 : index
  %g = func.call pure @groups(%n, %size) : (index, index) -> (index)
  kernel.launch.config workgroups(%g, %one, %one) workgroup_size(%size, %one, %one) : index
}} launch(%n: index, %scale: f32, %out: buffer) {{
  %zero = index.constant 0 : offset
  %i = kernel.workitem.dispatch.id<x> : index
  %v = buffer.view %out[%zero] : buffer -> view<[%n]xf32>
  template.apply<@bench.tile>(%n) : (index)
  %live = index.cmp ult, %i, %n : index
  scf.if %live {{
    %x = view.load %v[%i] : view<[%n]xf32> -> f32
    %y = scalar.mulf %x, %scale : f32
    view.store %y, %v[%i] : f32, view<[%n]xf32>
  }}
  kernel.return
}}
"""


def generate(kernels: int, launches: int) -> str:
    parts = [HEAD] + [KERNEL.format(k=k) for k in range(kernels)]
    body = ["command.program.def public @run() launch(%a: buffer, %b: buffer) {",
            "  %half = scalar.constant 0.5 : f32", "  %one = index.constant 1 : index"]
    sizes: dict[int, None] = {}
    calls = []
    for i in range(launches):
        k = i % kernels
        n = 256 + 64 * (i // kernels) if (i // kernels) % 2 == 0 else 2048 + 64 * (i // kernels)
        sizes[n] = None
        calls.append(f"    kernel.launch @k{k}[%n{n}](%n{n}, %half, %{'a' if i % 2 else 'b'}) "
                     f": [index](index, f32, buffer)")
    body += [f"  %n{n} = index.constant {n} : index" for n in sizes]
    for start in range(0, len(calls), 10):
        body += ["  command.concurrent {"] + calls[start:start + 10] + ["  }"]
    body += ["  kernel.dispatch @host_sync[%one](%a) : [index](buffer)", "  command.return", "}"]
    parts.append("\n".join(body) + "\n")
    return "\n".join(parts)


class Clock:
    """A RequestSink noting when the first request arrived."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.first: float | None = None
        self.count = 0

    def publish(self, request: object) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.start
        self.count += 1


def main() -> None:
    from loomcli.frontier import FrontierOptions, build_command_product
    from loomcli.frontier.prepare import dispatches
    from loomcli.targets.profiles import parse_target

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--kernels", type=int, default=100)
    ap.add_argument("--launches", type=int, default=500)
    ap.add_argument("--target", default="amdgpu:gfx1100")
    args = ap.parse_args()
    profile = parse_target(args.target)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.loom"
        path.write_text(generate(args.kernels, args.launches))
        firsts, totals = [], []
        product = None
        for _ in range(args.repeat):
            gc.collect()
            start = time.perf_counter()
            clock = Clock(start)
            product = build_command_product(FrontierOptions(input=str(path), profile=profile), clock)
            totals.append(time.perf_counter() - start)
            assert clock.first is not None and clock.count == len(product.requests)
            firsts.append(clock.first)
    assert product is not None
    n_dispatch = len(dispatches(product.programs[0].file.root))
    print(f"frontier: {args.kernels} kernels, {args.launches} launches (+1 external dispatch) -> "
          f"{n_dispatch} dispatches, {len(product.requirements)} requirements, {len(product.requests)} requests")
    first, total = statistics.median(firsts), statistics.median(totals)
    print(f"  first published request: median {first * 1000:.1f} ms (min {min(firsts) * 1000:.1f})")
    print(f"  finished product:        median {total * 1000:.1f} ms (min {min(totals) * 1000:.1f})")
    print(f"  first request at {100 * first / total:.0f}% of the product time; "
          f"{total / len(product.requests) * 1000:.2f} ms per request, {total / n_dispatch * 1000:.2f} ms per launch")


if __name__ == "__main__":
    main()
