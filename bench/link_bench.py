"""Link + default pipeline on a generated project (issue: it should grow linearly).

    python bench/link_bench.py [--repeat N] [--sizes 50,200,800] [--libraries 20]

Each project has `--libraries` library modules of public pure helpers and one
kernel module of N exported kernels; every kernel calls helpers from several
libraries through declarations, reads a config key and applies a template
family, so linking, binding, selection and the passes all have work to do.
Prints medians per size and the time per kernel, whose flatness shows
linear growth.
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

HELPER = """\
func.def public pure @lib{l}.scale{h}(%x: index) -> (index) {{
  %c = index.constant {c} : index
  %y = index.mul %x, %c : index
  %z = index.add %y, %c : index
  func.return %z : index
}}
"""

KERNEL = """\
kernel.def export("k{k}") @k{k}(%n: index) {{
  %one = index.constant 1 : index
  %group = index.constant 64 : index
  %a = func.call pure @lib{l1}.scale{h1}(%n) : (index) -> (index)
  %b = func.call pure @lib{l2}.scale{h2}(%a) : (index) -> (index)
  %g = index.div %b, %group : index
  kernel.launch.config workgroups(%g, %one, %one) workgroup_size(%group, %one, %one) : index
}} launch(%n: index, %out: buffer) {{
  %zero = index.constant 0 : offset
  %i = kernel.workitem.dispatch.id<x> : index
  %v = buffer.view %out[%zero] : buffer -> view<[%n]xf32>
  %scale = config.get @bench.scale : f32
  %t = template.apply<@bench.tile>(%n) : (index) -> (index)
  %live = index.cmp ult, %i, %n : index
  scf.if %live {{
    %x = view.load %v[%i] : view<[%n]xf32> -> f32
    %y = scalar.mulf %x, %scale : f32
    view.store %y, %v[%i] : f32, view<[%n]xf32>
  }}
  kernel.return
}}
"""

FAMILY = """\
config.decl @bench.scale : f32

template.decl @bench.tile(%n: index) -> (index)

template.def<@bench.tile> priority(2) @bench.tile_big(%n: index) -> (index) where [ge(%n, 1024)] {
  template.return %n : index
}

template.def<@bench.tile> @bench.tile_any(%n: index) -> (index) {
  template.return %n : index
}
"""


def make_project(folder: Path, kernels: int, libraries: int) -> tuple[Path, list[Path]]:
    helpers = max(1, kernels // libraries)
    libs = []
    for lib in range(libraries):
        text = "\n".join(HELPER.format(l=lib, h=h, c=lib * 7 + h + 1) for h in range(helpers))
        path = folder / f"lib{lib}.loom"
        path.write_text(text)
        libs.append(path)
    decls: dict[str, None] = {}
    bodies = []
    for k in range(kernels):
        l1, l2 = k % libraries, (k * 7 + 3) % libraries
        h1, h2 = k % helpers, (k * 3 + 1) % helpers
        for lib, h in ((l1, h1), (l2, h2)):
            decls.setdefault(f"func.decl public pure @lib{lib}.scale{h}(%x: index) -> (index)", None)
        bodies.append(KERNEL.format(k=k, l1=l1, h1=h1, l2=l2, h2=h2))
    main = folder / "kernels.loom"
    main.write_text(FAMILY + "\n" + "\n\n".join(decls) + "\n\n" + "\n".join(bodies))
    return main, libs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="50,200,800")
    ap.add_argument("--libraries", type=int, default=20)
    args = ap.parse_args()

    from loomcli.service.front import CompileOptions, compile_module
    from loomcli.targets.profiles import parse_target

    print(f"{'kernels':>8} {'libraries':>9} {'median':>10} {'per kernel':>11}   "
          f"(link + bind + select + default pipeline, n={args.repeat})")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            main_path, libs = make_project(Path(tmp), size, args.libraries)
            options = CompileOptions(input=str(main_path), libraries=[str(p) for p in libs],
                                     config=["bench.scale=2.0"], profile=parse_target("amdgpu:gfx1100"))
            times = []
            for _ in range(args.repeat):
                gc.collect()  # each run starts clean, as timeit does
                t = time.perf_counter()
                compile_module(options)
                times.append(time.perf_counter() - t)
            med = statistics.median(times)
            print(f"{size:>8} {args.libraries:>9} {med * 1e3:>8.0f} ms {med / size * 1e3:>8.2f} ms")


if __name__ == "__main__":
    main()
