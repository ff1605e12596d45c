"""Reducing a failing test to a small reproducer.

A test fails in one *way* (`signature`): a device's results differ in one
tensor, or it does not compile with one diagnostic code, or the reference
run fails with one code. The reducer edits the module text while the same
device still fails the same way:

1. statements (an op line, or a region op with its regions) are deleted
   from the last to the first, in runs of 32, 8, 2 and 1; a statement with
   results is replaced by constants of their types (a view or buffer result
   can only go when nothing uses it);
2. constants (`scalar.constant`, `index.constant`, `check.literal`, iota
   offsets and steps) shrink towards 0 and 1.

Each candidate is parsed and verified first (cheap); only valid ones run.
Terminators and the lines a test's model reads (`Test.protected`: template
selection facts, say) are kept. The steps repeat until nothing changes or
`budget` runs are spent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from kernelfuzz.gen import Test
from kernelfuzz.runner import Finding, Judge

TERMINATORS = ("scf.yield", "scf.condition", "kernel.return", "check.return", "template.return", "func.return",
               "command.return", "kernel.launch.config")
_RESULTS = re.compile(r"^\s*(%[\w$.-]+(?:\s*,\s*%[\w$.-]+)*)\s*=\s")
_CONST = re.compile(r"((?:scalar|index)\.constant|value\(|offset\(|step\()(-?[0-9][0-9.e+-]*|-?inf|-?nan)")


def signature(f: Finding) -> str:
    """How a finding fails: what a reduced test must keep doing."""
    why = f.why
    if why.startswith("the reference run failed: "):
        rest = why[len("the reference run failed: "):]
        return "reference:" + " ".join(rest.split()[:2])
    if why.startswith(("compile: ", "run: ")):
        return " ".join(why.split()[:2])
    return "differs:" + why.split("[", 1)[0]


@dataclass
class Statement:
    start: int          # first line
    end: int            # last line (the closing `}` of a region op)
    results: list[str]


def statements(lines: list[str]) -> list[Statement]:
    """The deletable statements: ops inside regions (indented), terminators excluded."""
    out: list[Statement] = []
    stack: list[int] = []
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("}"):
            start = stack.pop() if stack else None
            if s.endswith("{"):                  # `} else {`, `} do(...) {`: the same op continues
                stack.append(start if start is not None else i)
                continue
            if start is not None and line.startswith("  ") and not lines[start].startswith("//"):
                out.append(_statement(lines, start, i))
            continue
        if s.endswith("{"):
            stack.append(i)
            continue
        if line.startswith("  ") and s and not s.startswith("//") and not s.startswith(TERMINATORS) \
                and not _is_terminator(s):
            out.append(_statement(lines, i, i))
    return sorted(out, key=lambda st: st.start)


def _is_terminator(s: str) -> bool:
    op = s.split("=", 1)[1].strip() if _RESULTS.match(s) else s
    return op.startswith(TERMINATORS)


def _statement(lines: list[str], start: int, end: int) -> Statement:
    m = _RESULTS.match(lines[start])
    names = [n.strip() for n in m.group(1).split(",")] if m else []
    return Statement(start, end, names)


def result_types(text: str) -> dict[str, str]:
    """Value name -> type text, for every op result of the module."""
    from loomcli.frontend import parse_text

    types: dict[str, str] = {}
    for op in parse_text(text, verify=False).walk():
        for r in op.results:
            types["%" + r.name] = str(r.type)
    return types


def constant_for(name: str, t: str) -> str | None:
    if t in ("index", "offset"):
        return f"{name} = index.constant 0 : {t}"
    if t.startswith("vector<"):
        zero = "0.0" if t[:-1].endswith(("f16", "f32", "f64")) else "0"
        return f"{name} = vector.constant {zero} : {t}"
    if t in ("f16", "bf16", "f32", "f64"):
        return f"{name} = scalar.constant 0.0 : {t}"
    if re.fullmatch(r"i\d+", t):
        return f"{name} = scalar.constant 0 : {t}"
    return None


def valid(text: str) -> bool:
    from loomcli.diagnostics import CompileError
    from loomcli.frontend import parse_text

    try:
        parse_text(text)
    except CompileError:
        return False
    return True


class Reducer:
    def __init__(self, text: str, interesting: Callable[[str], bool], protected: frozenset[str],
                 budget: int) -> None:
        self.text = text
        self.interesting = interesting
        self.protected = protected
        self.budget = budget
        self.runs = 0

    def attempt(self, text: str) -> bool:
        if self.runs >= self.budget or text == self.text or not valid(text):
            return False
        self.runs += 1
        if self.interesting(text):
            self.text = text
            return True
        return False

    def without(self, group: list[Statement]) -> str | None:
        """The text with `group` deleted, results replaced by constants (None if impossible)."""
        lines = self.text.split("\n")
        types = result_types(self.text)
        drop: set[int] = set()
        replacement: dict[int, list[str]] = {}
        for st in group:
            if any(lines[i].strip() in self.protected for i in range(st.start, st.end + 1)):
                return None
            indent = lines[st.start][:len(lines[st.start]) - len(lines[st.start].lstrip())]
            consts = []
            for name in st.results:
                c = constant_for(name, types.get(name, ""))
                if c is None:
                    if re.search(re.escape(name) + r"\b", "\n".join(lines[st.end + 1:])) is not None:
                        return None
                    continue
                consts.append(indent + c)
            drop.update(range(st.start, st.end + 1))
            replacement[st.start] = consts
        out = []
        for i, line in enumerate(lines):
            if i in replacement:
                out.extend(replacement[i])
            if i not in drop:
                out.append(line)
        return "\n".join(out)

    def delete_pass(self) -> bool:
        changed = False
        for size in (32, 8, 2, 1):
            sts = statements(self.text.split("\n"))
            k = len(sts)
            while k > 0 and self.runs < self.budget:
                group = sts[max(0, k - size):k]
                # Only siblings of one region form a group: nested statements go with their parent.
                group = [st for st in group if not any(o is not st and o.start <= st.start and st.end <= o.end
                                                       for o in group)]
                candidate = self.without(group)
                if candidate is not None and self.attempt(candidate):
                    changed = True
                    sts = statements(self.text.split("\n"))
                    k = min(k - size, len(sts))
                else:
                    k -= size
        return changed

    def constants_pass(self) -> bool:
        changed = False
        lines = self.text.split("\n")
        for i in range(len(lines)):
            lines = self.text.split("\n")
            if i >= len(lines) or lines[i].strip() in self.protected:
                continue
            for m in list(_CONST.finditer(lines[i])):
                value = m.group(2)
                for smaller in _smaller(value):
                    line = lines[i][:m.start(2)] + smaller + lines[i][m.end(2):]
                    if self.attempt("\n".join([*lines[:i], line, *lines[i + 1:]])):
                        changed = True
                        lines = self.text.split("\n")
                        break
        return changed

    def run(self) -> str:
        while self.runs < self.budget:
            changed = self.delete_pass()
            changed = self.constants_pass() or changed
            if not changed:
                break
        return self.text


def _smaller(value: str) -> list[str]:
    if any(c in value for c in ".eian"):
        return [v for v in ("0.0", "1.0") if v != value]
    n = int(value)
    out = [str(x) for x in (0, 1, n // 2) if abs(x) < abs(n) or (x == 1 and n not in (0, 1))]
    return list(dict.fromkeys(out))


def reduce_test(judge: Judge, finding: Finding, budget: int) -> tuple[Test, Finding]:
    """The smallest variant of `finding.test` found within `budget` runs that still
    fails the same way on the same device, and its finding."""
    device = next(d for d in judge.devices if d.name == finding.device)
    want = signature(finding)
    last: list[Finding] = [finding]

    def interesting(text: str) -> bool:
        f = judge.judge_device(replace(finding.test, text=text), device, {})
        if f is not None and not f.explained and signature(f) == want:
            last.append(f)
            return True
        return False

    text = Reducer(finding.test.text, interesting, finding.test.protected, budget).run()
    return replace(finding.test, text=text), last[-1]


def reduce_finding(judge: Judge, finding: Finding, budget: int) -> tuple[Test, Finding]:
    """`reduce_test`, except for command programs, whose reference run the
    generator's model wrote: those stay whole."""
    if finding.test.program is not None:
        return finding.test, finding
    return reduce_test(judge, finding, budget)
