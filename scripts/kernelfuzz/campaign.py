"""A fuzzing campaign: generate each family's tests, judge them on every
device, reduce and keep what fails, and count."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernelfuzz import atomic, collective, command, scalar, template, vector
from kernelfuzz.devices import DEVICES, Device
from kernelfuzz.gen import Test
from kernelfuzz.runner import Finding, Judge

# family -> generator of test `name` ("SEED:FAMILY:K" seeds the random stream).
FAMILIES: dict[str, Callable[[str], Test]] = {
    "scalar": scalar.generate,
    "barrier": collective.generate_barrier,
    "reduce": collective.generate_reduce,
    "atomic": atomic.generate,
    "vector": vector.generate,
    "template": template.generate,
    "command": command.generate,
}


def generate(seed: str, family: str, k: int) -> Test:
    return FAMILIES[family](f"{seed}:{family}:{k}")


def open_devices(names: Sequence[str]) -> tuple[list[Device], list[str]]:
    """The devices that can be had here, and why each other one cannot."""
    devices, missing = [], []
    for name in names:
        made = DEVICES[name]()
        if isinstance(made, str):
            missing.append(f"{name}: {made}")
        else:
            devices.append(made)
    return devices, missing


@dataclass
class Tally:
    kernels: Counter[str] = field(default_factory=Counter)
    mismatches: Counter[str] = field(default_factory=Counter)
    explained: Counter[str] = field(default_factory=Counter)     # by filter name

    def line(self, families: Sequence[str]) -> str:
        per = ", ".join(f"{f} {self.kernels[f]}" for f in families)
        return (f"{sum(self.kernels.values())} kernels ({per}), {sum(self.mismatches.values())} mismatches, "
                f"{sum(self.explained.values())} explained")


def compile_only(test: Test, target: str, workdir: str) -> str:
    """'' when `test`'s kernels compile for `target` to its native artifact (a
    cubin for nvptx when ptxas exists), else why not: the targets no device
    here runs get the same kernels through their instruction selection."""
    from kernelfuzz.devices import compile_for
    from loomcli.diagnostics import CompileError
    from loomcli.emit import backend_for
    from loomcli.emit.artifacts import emit
    from loomcli.errors import LoomError
    from loomcli.frontend import parse_text
    from loomcli.targets.profiles import parse_target

    text = test.program.reference_text if test.program is not None else test.text
    profile = parse_target(target)
    fmt = backend_for(profile).native_format
    if profile.family == "nvptx":
        from loomcli.emit.nvptx.ptxas import find_ptxas

        fmt = "nvptx-cubin" if find_ptxas() else fmt
    path = os.path.join(workdir, f"{test.family}_target.loom")
    with open(path, "w") as f:
        f.write(text)
    roots = sorted({"@" + op.attr("callee") for op in parse_text(text).symbols()["run"].regions[0].walk_ops()
                    if op.name == "kernel.launch"})
    try:
        art = emit(compile_for(profile, path, roots, test.config), profile, fmt)
    except CompileError as e:
        return "; ".join(f"{d.code} {d.message}" for d in e.diagnostics)
    except LoomError as e:
        return str(e)
    return "" if art.data else "empty artifact"


class Campaign:
    def __init__(self, devices: Sequence[Device], *, keep: str | None = None, reduce: bool = True,
                 compile_targets: Sequence[str] = (), report: Callable[[str], None] = print,
                 reduce_budget: int = 300) -> None:
        self.devices = list(devices)
        self.keep = keep
        self.reduce = reduce
        self.compile_targets = list(compile_targets)
        self.report = report
        self.reduce_budget = reduce_budget
        self.tally = Tally()
        self.findings: list[Finding] = []

    def run(self, seed: str, families: Sequence[str], first: int, count: int, verbose: bool = False) -> Tally:
        with tempfile.TemporaryDirectory(prefix="loom-fuzz-") as workdir:
            judge = Judge(self.devices, workdir)
            for k in range(first, first + count):
                for family in families:
                    test = generate(seed, family, k)
                    self.tally.kernels[family] += 1
                    findings = judge.judge(test)
                    for target in self.compile_targets:
                        why = compile_only(test, target, workdir)
                        if why:
                            findings.append(Finding(test, target, "compiling only", why))
                    for f in findings:
                        self.record(judge, f, k)
                    if verbose and not findings:
                        self.report(f"ok: {test.name}")
        return self.tally

    def record(self, judge: Judge, f: Finding, k: int) -> None:
        self.findings.append(f)
        head = f"{f.test.name}: {f.device} vs {f.reference}: {f.why}"
        if f.explained:
            self.tally.explained[f.explained] += 1
            self.report(f"explained ({f.explained}): {head}")
            return
        self.tally.mismatches[f.test.family] += 1
        self.report(f"mismatch: {head}")
        if self.keep:
            self.keep_reproducer(judge, f)

    def keep_reproducer(self, judge: Judge, f: Finding) -> None:
        from kernelfuzz.reduce import reduce_finding

        os.makedirs(self.keep, exist_ok=True)
        stem = os.path.join(self.keep, f.test.name.replace(":", "_"))
        with open(stem + ".orig.loom", "w") as out:
            out.write(f.test.text)
        reduced, final = (reduce_finding(judge, f, self.reduce_budget) if self.reduce and f.device in
                          {d.name for d in judge.devices} else (f.test, f))
        header = [f"fuzz_kernels: {f.test.name} (seed {f.test.name.rsplit(':', 2)[0]}, family {f.test.family}, "
                  f"kernel {f.test.name.rsplit(':', 1)[1]})",
                  f"{'reduced' if reduced is not f.test else 'not reduced'}; the original is "
                  f"{os.path.basename(stem)}.orig.loom",
                  f"device {final.device}, judged against {final.reference}",
                  f"difference: {final.why}"]
        if f.test.config:
            header.append("config: " + " ".join(f"--config {c}" for c in f.test.config))
        text = "".join(f"// {line}\n" for line in header) + "\n" + reduced.text
        with open(stem + ".loom", "w") as out:
            out.write(text)
        with open(stem + ".results.json", "w") as out:
            json.dump({"test": f.test.name, "family": f.test.family, "device": final.device,
                       "reference": final.reference, "difference": final.why, "config": list(f.test.config),
                       "results": final.results}, out, indent=1)
            out.write("\n")
        self.report(f"  kept {stem}.loom ({len(reduced.text.splitlines())} lines, "
                    f"from {len(f.test.text.splitlines())})")
