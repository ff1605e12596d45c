"""The user documentation is true: every Loom block in docs/*.md is what
`loom fmt` prints, every op and diagnostic code is documented in
docs/language.md, and every command of docs/tutorial.md and
docs/language.md runs, in order, with the results they show.

How a fenced block is read (the words after the opening fence; the first
word is the language, the rest are markers):

```loom                 a whole module: parses, verifies and is byte-identical to
                        `loom fmt` output; outside the tutorial (whose commands
                        test its cases), its check cases pass on the interpreter
```loom fragment        not a module (op lines to illustrate a form): each op
                        name in it must be a declared op; keep these rare
```loom unformatted     parses and verifies but is not canonical (shows what
                        `loom fmt` changes)
```loom error=CODE      fails to check, and its first diagnostic is CODE
```loom pending=NAME    shows a feature that is not implemented yet: it must
                        still FAIL to check. When NAME lands, this test fails on
                        the block: remove `pending=NAME` from it (and the
                        `<!-- pending: NAME ... -->` notes beside it) in the same
                        change.
```LANG file=PATH       the test writes the block to PATH in the document's project
                        folder when it reaches it (tutorial.md and language.md);
                        `file=PATH append` adds the block to the end of PATH
```sh run               every line is a command, run with bash in the project
                        folder in document order; each must exit 0 (the last one
                        N with `exit=N`); `needs=cmake|bazel|vulkan` marks
                        commands that need that tool (skipped only where the
                        tool truly cannot run; never under CI)
```text output          directly after a `sh run` block: its output (each
                        command's stdout, then its stderr) holds these lines,
                        compared without leading and trailing blanks. Runs of
                        lines between `...` lines appear contiguously and in
                        order; `...` inside a line matches any text.

`loom` in the commands is this tree's loom (a wrapper on PATH); `$LOOM_REPO`
is this repository; `bazel` gets a private output root and loom a private
cache. Places the docs keep for features still to come are HTML comments
`<!-- pending: FEATURE (issue N) ... -->`: whoever lands FEATURE writes its
section there, with checked blocks, and removes the comment.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loomcli.diagnostics import CODES
from loomcli.ir.ops import OPS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LANGUAGE = DOCS / "language.md"
TUTORIAL = DOCS / "tutorial.md"

# Codes the language reference documents before loom emits them, with the pending feature.
PENDING_CODES: dict[str, str] = {}
LOOM_MARKERS = {"fragment", "unformatted", "error", "pending", "file"}


@dataclass
class Block:
    path: Path
    line: int                  # line of the opening fence
    lang: str
    markers: dict[str, str]    # marker -> value ("" for a bare word)
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, in order."""
    found, lines, at = [], path.read_text().split("\n"), 0
    while at < len(lines):
        m = re.match(r"^```(\S*)(.*)$", lines[at])
        if not m or not m.group(1):
            at += 1
            continue
        start, body = at, []
        at += 1
        while at < len(lines) and lines[at] != "```":
            body.append(lines[at])
            at += 1
        assert at < len(lines), f"{path.name}:{start + 1}: unclosed block"
        markers = {}
        for word in m.group(2).split():
            key, _, value = word.partition("=")
            markers[key] = value
        found.append(Block(path, start + 1, m.group(1), markers, "\n".join(body) + "\n"))
        at += 1
    return found


def doc_blocks(lang: str) -> list[Block]:
    return [b for p in sorted(DOCS.glob("*.md")) for b in blocks(p) if b.lang == lang]


def loom(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loomcli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))


# ------------------------------------------------------------------ Loom blocks


def test_loom_blocks_use_known_markers() -> None:
    for b in doc_blocks("loom"):
        unknown = set(b.markers) - LOOM_MARKERS
        assert not unknown, f"{b.where}: unknown markers {sorted(unknown)} (see the top of tests/test_docs.py)"
        kinds = {"fragment", "unformatted", "error", "pending"} & set(b.markers)
        assert len(kinds) <= 1, f"{b.where}: at most one of {sorted(kinds)}"


@dataclass
class Checked:
    """What `loom fmt --check` said about each block file."""
    codes: dict[str, list[str]] = field(default_factory=dict)    # file -> diagnostic codes, in order
    noncanonical: set[str] = field(default_factory=set)


def fmt_check(files: list[Path], cwd: Path) -> Checked:
    import json

    r = loom("fmt", "--check", "--diagnostics=json", *[f.name for f in files], cwd=cwd)
    assert r.returncode in (0, 1), r.stderr
    seen = Checked()
    for line in r.stderr.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            seen.codes.setdefault(d["file"], []).append(d["code"])
        elif line.endswith(")") and ": not canonical" in line:
            seen.noncanonical.add(line.split(": not canonical")[0])
        else:
            raise AssertionError(f"unexpected output of loom fmt --check: {line}")
    return seen


@pytest.fixture(scope="module")
def checked_blocks(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple[Block, str]], Checked, Path]:
    folder = tmp_path_factory.mktemp("loom-blocks")
    named = []
    for b in doc_blocks("loom"):
        if "fragment" in b.markers:
            continue
        name = f"{b.path.stem}-{b.line}.loom"
        (folder / name).write_text(b.text)
        named.append((b, name))
    return named, fmt_check([folder / n for _, n in named], folder), folder


def test_loom_blocks_check_as_marked(checked_blocks: tuple[list[tuple[Block, str]], Checked, Path]) -> None:
    named, seen, _ = checked_blocks
    assert named, "no Loom blocks found in docs/"
    wrong = []
    for b, name in named:
        codes, canonical = seen.codes.get(name, []), name not in seen.noncanonical
        if "pending" in b.markers:
            if not codes:
                wrong.append(f"{b.where}: `{b.markers['pending']}` works now: remove `pending=` from this block "
                             "and the docs' pending notes for it")
        elif "error" in b.markers:
            if codes[:1] != [b.markers["error"]]:
                wrong.append(f"{b.where}: expected {b.markers['error']} first, loom fmt reported {codes or 'none'}")
        elif codes:
            wrong.append(f"{b.where}: does not check: {codes}")
        elif "unformatted" in b.markers and canonical:
            wrong.append(f"{b.where}: marked unformatted but is canonical")
        elif "unformatted" not in b.markers and not canonical:
            wrong.append(f"{b.where}: not canonical (compare with `loom fmt` output)")
    assert not wrong, "\n".join(wrong)


def test_check_cases_in_loom_blocks_pass(checked_blocks: tuple[list[tuple[Block, str]], Checked, Path]) -> None:
    """The reference's examples with check cases state true facts: they pass on the interpreter."""
    named, _, folder = checked_blocks
    # A case that reads data files runs where the document's commands make them: its block is a `file=` one.
    reads_data = [b for b, _ in named if "check.generate.file" in b.text]
    assert all("file" in b.markers for b in reads_data), [b.where for b in reads_data if "file" not in b.markers]
    cases = [n for b, n in named if b.path != TUTORIAL and "check.case" in b.text
             and not set(b.markers) & {"error", "pending"} and b not in reads_data]
    assert cases, "docs/language.md shows no check case"
    r = loom("test", "--device", "interpreter", *cases, cwd=folder)
    assert r.returncode == 0, r.stdout + r.stderr


_OP_LINE = re.compile(r"^(?:%[\w$.-]+(?:, %[\w$.-]+)* = )?([A-Za-z_][\w.]*)")


def test_fragments_name_real_ops() -> None:
    fragments = [b for b in doc_blocks("loom") if "fragment" in b.markers]
    assert len(fragments) <= 6, "fragments are for rare cases: show whole modules"
    for b in fragments:
        for n, line in enumerate(b.text.splitlines(), b.line + 1):
            text = line.strip()
            if not text or text.startswith(("//", "}", "...")):
                continue
            m = _OP_LINE.match(text)
            assert m and m.group(1) in OPS, f"{b.path.name}:{n}: `{text}` does not start with a Loom op"


def names_in_code(text: str) -> set[str]:
    """The name each `...` span of a Markdown text starts with (`kernel.workitem.id<x|y|z>`:
    `kernel.workitem.id`)."""
    return {m.group(0) for span in re.findall(r"`([^`\n]+)`", text) if (m := re.match(r"[\w.]+", span))}


def test_language_reference_documents_every_op() -> None:
    """Each op of the op table is named in docs/language.md and used in one of its checked modules."""
    text = LANGUAGE.read_text()
    named = names_in_code(text)
    shown = " ".join(b.text for b in blocks(LANGUAGE)
                     if b.lang == "loom" and not set(b.markers) & {"fragment", "error", "pending"})
    used = set(re.findall(r"(?<![\w.%@#])([a-z]+(?:\.[a-z_0-9]+)+)", shown))
    missing_name = sorted(op for op in OPS if op not in named)
    missing_use = sorted(op for op in OPS if op not in used)
    assert not missing_name, f"ops docs/language.md does not name: {missing_name}"
    assert not missing_use, f"ops no checked example in docs/language.md uses: {missing_use}"


def test_language_reference_lists_every_diagnostic_code() -> None:
    """The diagnostics table of docs/language.md has one row per code loom emits, and no other."""
    text = LANGUAGE.read_text()
    rows = set(re.findall(r"^\| `([A-Z_]+/\d{3})` \|", text, re.M))
    emitted = set(CODES) | set(re.findall(r'"([A-Z_]+/\d{3})"', "\n".join(
        p.read_text() for p in (ROOT / "loomcli").rglob("*.py"))))
    assert emitted - rows == set(), f"codes without a row in docs/language.md: {sorted(emitted - rows)}"
    extra = rows - emitted - set(PENDING_CODES)
    assert not extra, f"rows for codes loom never emits: {sorted(extra)}"
    for code, feature in PENDING_CODES.items():
        if code in emitted:
            pytest.fail(f"{code} is emitted now: drop it from PENDING_CODES and its pending note "
                        f"(`{feature}`)")


# ------------------------------------------------------------------ the tutorial


def tool_missing(tool: str) -> str | None:
    """Why `needs=tool` commands cannot run here (None: they can). Under CI they must."""
    if os.environ.get("CI"):
        return None
    if tool == "vulkan":
        from loomcli.check.vulkan import unavailable_reason

        reason = unavailable_reason()
        return f"no Vulkan device: {reason}" if reason else None
    programs = {"cmake": ("cmake", "ninja"), "bazel": ("bazel",)}[tool]
    missing = [p for p in programs if shutil.which(p) is None]
    return f"no {', '.join(missing)} here" if missing else None


def commands(block: Block) -> list[str]:
    """The commands of a `sh run` block: one per line, `\\` continuing a line, `#` lines aside."""
    joined = block.text.replace("\\\n", " ")
    return [c.strip() for c in joined.splitlines() if c.strip() and not c.lstrip().startswith("#")]


def expected_lines_missing(expected: str, output: str) -> str | None:
    """The first chunk of `expected` (lines between `...` lines) that is not a contiguous run of
    `output`'s lines, chunks in order, or None. `...` inside a line matches any text."""
    out = [line.strip() for line in output.splitlines()]
    chunks: list[list[str]] = [[]]
    for line in expected.splitlines():
        if line.strip() == "...":
            chunks.append([])
        elif line.strip():
            chunks[-1].append(line.strip())
    at = 0
    for chunk in filter(None, chunks):
        patterns = [re.compile(".*".join(map(re.escape, want.split("..."))) + r"\Z") for want in chunk]
        while at + len(chunk) <= len(out) and not all(p.match(out[at + k]) for k, p in enumerate(patterns)):
            at += 1
        if at + len(chunk) > len(out):
            return "\n".join(chunk)
        at += len(chunk)
    return None


class Project:
    """A folder where a document's files are written and its commands run."""

    def __init__(self, tmp: Path) -> None:
        self.folder = tmp / "project"
        self.folder.mkdir()
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "loom"   # `loom` is this tree's loom, whatever is installed
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m loomcli "$@"\n')
        wrapper.chmod(0o755)
        self.bazel_root = tmp / "bazel-root"
        self.used_bazel = False
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "LOOM_JOBS")}
        # A private cache: the documents show what a first build compiles.
        self.env = dict(env, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", LOOM_REPO=str(ROOT),
                        PYTHONPATH=str(ROOT), LOOM_CACHE_DIR=str(tmp / "cache"))

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        if command.startswith("bazel "):
            # A private output root, so the test leaves nothing in ~/.cache/bazel.
            self.used_bazel = True
            command = (f"bazel --nohome_rc --output_user_root={self.bazel_root} --max_idle_secs=120 "
                       + command[len("bazel "):])
        return subprocess.run(["bash", "-c", command], cwd=self.folder, env=self.env, capture_output=True,
                              text=True, timeout=900)

    def close(self) -> None:
        if self.used_bazel:
            self.run("bazel shutdown")


def run_document(path: Path, tmp: Path) -> None:
    """Writes the `file=` blocks of `path` and runs its `sh run` blocks in order, checking exit
    codes and `text output` blocks; skips (at the end) only the steps whose tool cannot run."""
    project = Project(tmp)
    ran, skipped, last_output, last_run = 0, [], None, None
    try:
        for b in blocks(path):
            if "file" in b.markers:
                target = project.folder / b.markers["file"]
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("a" if "append" in b.markers else "w") as f:
                    f.write(("\n" if "append" in b.markers else "") + b.text)
            if b.lang == "sh" and "run" in b.markers:
                last_run, last_output = b, None
                why = tool_missing(b.markers["needs"]) if "needs" in b.markers else None
                if why:
                    skipped.append(f"{b.where} ({why})")
                    continue
                output, todo = [], commands(b)
                for n, command in enumerate(todo, 1):
                    want = int(b.markers.get("exit", "0")) if n == len(todo) else 0
                    r = project.run(command)
                    ran += 1
                    output.append(r.stdout + r.stderr)
                    assert r.returncode == want, (f"{b.where}: `{command}` exited {r.returncode}, the document "
                                                  f"says {want}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
                last_output = "".join(output)
            elif b.lang == "text" and "output" in b.markers:
                assert last_run is not None, f"{b.where}: an output block needs a `sh run` block before it"
                if last_output is None:     # its commands were skipped
                    continue
                missing = expected_lines_missing(b.text, last_output)
                assert missing is None, (f"{b.where}: the output of {last_run.where} lacks\n{missing}\n"
                                         f"--- it was:\n{last_output[-4000:]}")
                last_run = None
    finally:
        project.close()
    assert ran, f"no commands found in {path.name}"
    if skipped:
        pytest.skip(f"{ran} commands ran as written; skipped: {'; '.join(skipped)}")


def test_tutorial_runs_as_written(tmp_path: Path) -> None:
    run_document(TUTORIAL, tmp_path)


def test_language_reference_commands_run_as_written(tmp_path: Path) -> None:
    run_document(LANGUAGE, tmp_path)


@pytest.mark.parametrize("path", [TUTORIAL, LANGUAGE], ids=lambda p: p.name)
def test_commands_shown_are_run(path: Path) -> None:
    """Every command block is run by the test and every output block belongs to the command
    block just before it: the documents show no command or output the test does not check."""
    steps = blocks(path)
    for before, b in zip([None, *steps], steps):
        if b.lang == "text" and "output" in b.markers:
            assert before is not None and before.lang == "sh" and "run" in before.markers, b.where
    unrun = [b.where for b in steps if b.lang == "sh" and "run" not in b.markers]
    assert not unrun, f"shell blocks the test does not run: {unrun}"
