#!/usr/bin/env python3
"""Differential fuzzer: random well-defined Loom kernels of every op family,
run on every device and compared bit for bit.

    python scripts/fuzz_kernels.py --seed S --count N [--family F ...]
        [--device D ...] [--first K] [--keep DIR] [--no-reduce]
        [--compile-for nvptx:sm_90 ...] [-v]

Families (`--family`, repeatable; default all), each `--count` kernels:

  scalar    arithmetic, casts, compares, selects, loops, subviews, one
            workgroup-memory exchange; transcendental functions within 4 ulp
  barrier   several workgroups; phases of workgroup-memory exchanges between
            workgroup, subgroup and global barriers, also in uniform scf.if
            and scf.for
  reduce    workgroup and subgroup reductions of every kind and type, at the
            top level and in uniform control flow, short last subgroups
  atomic    view.atomic.rmw whose results do not depend on order: integer
            kinds and exact float kinds on shared counters (global and
            workgroup memory), every kind on each invocation's own slot
  vector    vector constants, splats, loads, stores, extract/insert (constant
            and dynamic lanes), reductions, lanewise arithmetic, vectors in
            scf.if/scf.for/scf.select
  template  template.apply selected by facts (where, index.assume, scf.if
            conditions, config.get bound by --config) and by target
            (`requires`, `target(@t)`)
  command   command.program.def launching several kernels (scf.for, scf.if,
            command.concurrent/serial, child programs, --spec and --config),
            split by the frontier into `.loomcmd` and kernel requests, each
            request compiled for the device and run in the program's order

Each kernel runs on every device (`--device`, default all that exist here:
see kernelfuzz/devices.py) and is judged against a reference run on the
interpreter (kernelfuzz/runner.py says which). Kernel k of family F and
seed S comes from `random.Random(f"{S}:{F}:{k}")`, so `--first k --count 1
--family F` reproduces one. `--keep DIR` writes each failing kernel there,
reduced (kernelfuzz/reduce.py; `--no-reduce` keeps it whole) with its seed,
family and the runs' results.

Prints one line per mismatch, then `N kernels (family n, ...), M
mismatches, E explained`; exits 1 on a mismatch, 2 on bad usage, 3 when a
device named by --device is not available.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> int:
    from kernelfuzz.campaign import FAMILIES, Campaign, open_devices
    from kernelfuzz.devices import DEVICES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", required=True)
    ap.add_argument("--count", type=int, required=True, help="kernels per family")
    ap.add_argument("--first", type=int, default=0, help="index of the first kernel (to reproduce one)")
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES), help="a family to run (repeatable)")
    ap.add_argument("--device", action="append", choices=sorted(DEVICES), help="a device to run on (repeatable)")
    ap.add_argument("--keep", metavar="DIR", help="write failing kernels here, reduced")
    ap.add_argument("--no-reduce", action="store_true", help="keep failing kernels whole")
    ap.add_argument("--reduce-budget", type=int, default=300, metavar="N", help="runs a reduction may take")
    ap.add_argument("--compile-for", action="append", default=[], metavar="TARGET",
                    help="also compile each kernel for this target (repeatable)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.count < 0 or args.first < 0:
        ap.error("--count and --first must be at least 0")
    families = args.family or list(FAMILIES)
    devices, missing = open_devices(args.device or list(DEVICES))
    for why in missing:
        print(f"fuzz_kernels: {why}", file=sys.stderr)
    if missing and args.device:
        return 3
    campaign = Campaign(devices, keep=args.keep, reduce=not args.no_reduce, compile_targets=args.compile_for,
                        reduce_budget=args.reduce_budget)
    tally = campaign.run(args.seed, families, args.first, args.count, args.verbose)
    print(tally.line(families))
    return 1 if sum(tally.mismatches.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
