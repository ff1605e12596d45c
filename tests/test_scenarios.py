"""Table-driven command scenarios: small modules on disk, one command, the exact output.

Each `tests/scenarios/*.txt` file holds scenarios:

    ### name                 starts a scenario
    $ loom link a.loom ...   a command (run in a fresh folder); several run in order,
                             the expectations are about the last one
    == a.loom                a file to create (until the next header)
    -- stdout / -- stderr    the exact expected output
    -- file NAME             the exact expected content of a file the command wrote
    -- exit N                the expected exit status (default 0)

A blank line that ends a section only separates it from the next header.

Output paths are relative to the scenario folder, so expectations do not
depend on where the tests run.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loomcli.cli import main

HERE = Path(__file__).resolve().parent / "scenarios"


@dataclass
class Scenario:
    name: str
    commands: list[list[str]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    stdout: str | None = None
    stderr: str | None = None
    exit: int = 0
    outputs: dict[str, str] = field(default_factory=dict)


def load(path: Path) -> list[Scenario]:
    scenarios: list[Scenario] = []
    current: Scenario | None = None
    section: tuple[str, str] | None = None
    buf: list[str] = []

    def flush() -> None:
        if current is None or section is None:
            return
        text = "".join(buf)
        if text.endswith("\n\n") or text == "\n":
            text = text[:-1]  # the blank line before the next header separates scenarios
        kind, arg = section
        if kind == "file":
            current.files[arg] = text
        elif kind == "stdout":
            current.stdout = text
        elif kind == "stderr":
            current.stderr = text
        elif kind == "output":
            current.outputs[arg] = text

    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("### "):
            flush()
            current = Scenario(line[4:].strip())
            scenarios.append(current)
            section, buf = None, []
        elif line.startswith("$ loom "):
            flush()
            section, buf = None, []
            assert current is not None
            current.commands.append(shlex.split(line[len("$ loom "):]))
        elif line.startswith("== "):
            flush()
            section, buf = ("file", line[3:].strip()), []
        elif line.startswith("-- exit "):
            flush()
            section, buf = None, []
            assert current is not None
            current.exit = int(line.split()[2])
        elif line.startswith("-- file "):
            flush()
            section, buf = ("output", line[len("-- file "):].strip()), []
        elif line.rstrip("\n") in ("-- stdout", "-- stderr"):
            flush()
            section, buf = (line[3:].strip(), ""), []
        elif section is not None:
            buf.append(line)
        elif line.strip() and not line.startswith("#"):
            raise ValueError(f"{path.name}: stray line {line!r}")
    flush()
    return scenarios


CASES = [(p.stem, s) for p in sorted(HERE.glob("*.txt")) for s in load(p)]


@pytest.mark.parametrize("scenario", [s for _, s in CASES], ids=[f"{f}:{s.name}" for f, s in CASES])
def test_scenario(scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                  capsys: pytest.CaptureFixture[str]) -> None:
    for name, text in scenario.files.items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOM_DEBUG", raising=False)
    for setup in scenario.commands[:-1]:
        with pytest.raises(SystemExit) as setup_exit:
            main(setup)
        assert not setup_exit.value.code, capsys.readouterr().err
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(scenario.commands[-1])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if scenario.stdout is not None:
        assert out == scenario.stdout
    if scenario.stderr is not None:
        assert err == scenario.stderr
    assert (exit_info.value.code or 0) == scenario.exit, err
    for name, text in scenario.outputs.items():
        assert (tmp_path / name).read_text() == text, name


def test_scenario_files_are_well_formed() -> None:
    assert CASES, "no scenarios found"
    for _, s in CASES:
        assert s.commands, s.name
