"""Running a test on a device, and judging each device against its reference.

Every device's results are compared with a *reference run* on the
interpreter: the same module where the results cannot depend on the
device, else what the language says they are for that device: at the
device's subgroup size for subgroup-dependent tests, with the template
winners the selection rules give the device's profile called directly
(template), or the command program's launches written out as a check case
in program order (command). The interpreter device is judged the same way,
so a wrong template selection or frontier shows up on every device.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelfuzz.compare import describe, first_difference
from kernelfuzz.devices import Device, InterpreterDevice, RunError
from kernelfuzz.gen import Test


@dataclass(frozen=True)
class Outcome:
    outputs: tuple[bytes, ...] = ()
    why: str = ""               # non-empty: it did not compile ("compile: ...") or run ("run: ...")


@dataclass(frozen=True)
class Finding:
    """A device whose results differ from its reference run (or that failed)."""

    test: Test
    device: str
    reference: str              # which run the device was judged against
    why: str
    explained: str = ""         # the documented difference that accounts for it, if any
    results: dict[str, str] = field(default_factory=dict)   # run -> its results, for the reproducer


class Capture:
    """A launcher wrapper that keeps the case's tensors, in the order launches
    first pass them, so their bytes can be read once the case has run."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.tensors: dict[int, Any] = {}

    def launch(self, op: Any, workload: list[Any], args: list[Any]) -> None:
        for a in args:
            if hasattr(a, "data"):
                self.tensors.setdefault(id(a), a)
        self.inner.launch(op, workload, args)


def diagnostics(e: Any) -> str:
    return "; ".join(f"{d.code} {d.message}" for d in e.diagnostics)


def run_case(device: Device, path: str, config: Sequence[str]) -> Outcome:
    """The check case @run of `path` on `device`: its tensors after the case."""
    from loomcli.check.cases import CaseRunner
    from loomcli.diagnostics import CompileError
    from loomcli.errors import LoomError
    from loomcli.frontend import load_module

    try:
        source = load_module(path)
        case = source.symbols()["run"]
        roots = sorted({"@" + op.attr("callee") for op in case.regions[0].walk_ops() if op.name == "kernel.launch"})
        module = device.compile(path, roots, config)
        launcher = device.launcher(module, path)
    except CompileError as e:
        return Outcome(why="compile: " + diagnostics(e))
    except LoomError as e:
        return Outcome(why=f"compile: {e}")
    capture = Capture(launcher)
    try:
        results = CaseRunner(source, capture, path=path).run_case(case)
    except (LoomError, RunError) as e:
        return Outcome(why=f"run: {e}")
    failed = [d for r in results for d in r.diagnostics if d.severity == "error"]
    if failed:
        return Outcome(why="run: " + "; ".join(f"{d.code} {d.message}" for d in failed))
    return Outcome(tuple(bytes(t.data) for t in capture.tensors.values()))


class Judge:
    """Runs tests on devices and compares each with its reference run. Runs
    are shared: a reference that is also a device's own run happens once."""

    def __init__(self, devices: Sequence[Device], workdir: str) -> None:
        self.devices = list(devices)
        self.workdir = workdir
        self.references: dict[int, InterpreterDevice] = {}

    def reference_device(self, subgroup_size: int) -> InterpreterDevice:
        if subgroup_size not in self.references:
            self.references[subgroup_size] = InterpreterDevice(subgroup_size)
        return self.references[subgroup_size]

    def write(self, test: Test, text: str, tag: str) -> str:
        path = os.path.join(self.workdir, f"{test.family}_{tag}.loom")
        with open(path, "w") as f:
            f.write(text)
        return path

    def reference(self, test: Test, device: Device) -> tuple[InterpreterDevice, str, str]:
        """(interpreter, module text, description) of the run `device` is judged against."""
        if test.program is not None:
            return (self.reference_device(0), test.program.reference(device.profile),
                    f"the program's launches for {device.profile.name} as a check case")
        text = test.resolve(test.text, device.profile) if test.resolve else test.text
        sg = device.subgroup_size if test.subgroup_dependent else 0
        ref = self.reference_device(sg)
        what = "the interpreter" + (f" (subgroups of {ref.subgroup_size})" if test.subgroup_dependent else "")
        if test.resolve:
            what += f", with the winners for {device.profile.name} called directly"
        return ref, text, what

    def run(self, test: Test, device: Device, text: str | None, memo: dict[Any, Outcome]) -> Outcome:
        """`test` on `device`: the command program through the frontier, or `text`'s check case."""
        key = (device.name, device.profile, text if text is not None else "program")
        if key not in memo:
            if text is None:
                from kernelfuzz.command import run_program

                memo[key] = run_program(device, test, self.workdir)
            else:
                memo[key] = run_case(device, self.write(test, text, f"{len(memo)}"), test.config)
        return memo[key]

    def judge(self, test: Test) -> list[Finding]:
        memo: dict[Any, Outcome] = {}
        return [f for d in self.devices if (f := self.judge_device(test, d, memo)) is not None]

    def judge_device(self, test: Test, device: Device, memo: dict[Any, Outcome]) -> Finding | None:
        """How `device` fails `test` against its reference run, or None."""
        ref, ref_text, what = self.reference(test, device)
        want = self.run(test, ref, ref_text, memo)
        if want.why:
            # A generator bug (UB the interpreter trapped, an invalid module): the device
            # is not run, since a driver may crash on undefined behaviour.
            return Finding(test, device.name, what, f"the reference run failed: {want.why}",
                           results={f"reference ({what})": summary(want)})
        got = self.run(test, device, None if test.program is not None else test.text, memo)
        results = {device.name: summary(got), f"reference ({what})": summary(want)}
        if got.why:
            return Finding(test, device.name, what, got.why, results=results)
        at = first_difference(test, got.outputs, want.outputs)
        if at is None:
            return None
        from kernelfuzz.known import explain

        why = describe(test, at, got.outputs, want.outputs, device.name, "reference")
        return Finding(test, device.name, what, why, explain(self, test, device, got.outputs), results)


def summary(outcome: Outcome, limit: int = 4096) -> str:
    """An outcome as text for a reproducer: the failure, or each tensor's bytes in hex."""
    if outcome.why:
        return outcome.why
    parts = []
    for i, data in enumerate(outcome.outputs):
        h = data.hex()
        parts.append(f"tensor {i}: {h[:limit]}" + ("..." if len(h) > limit else ""))
    return "\n".join(parts)
