"""loom under a jobserver, end to end: GNU make -j3 driving several
`loom build`s and `loom compile`s (pipe jobserver), and a FIFO jobserver
served by the test (ninja 1.13 is a jobserver client only, so it cannot be
the parent). Concurrency is measured from the --trace files; nothing here
depends on timing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_build import make_project

ROOT = Path(__file__).resolve().parent.parent
SAXPY = ROOT / "samples" / "saxpy.loom"
MATMUL = ROOT / "samples" / "matmul.loom"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def loom_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CI")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["LOOM_CACHE"] = "0"  # every request is a task: the bound is what is measured
    env.update(extra)
    return env


def peak_concurrency(traces: list[Path]) -> int:
    points = []
    for t in traces:
        for e in json.loads(t.read_text())["traceEvents"]:
            assert e["cat"] == "compile" and e["ph"] == "X"
            points += [(e["ts"], 1), (e["ts"] + e["dur"], -1)]
    running = peak = 0
    for _, delta in sorted(points, key=lambda p: (p[0], p[1])):  # an end before a start at the same instant
        running += delta
        peak = max(peak, running)
    return peak


def test_make_j3_bounds_every_loom_it_runs(tmp_path: Path) -> None:
    projects = [make_project(tmp_path / f"p{i}", sets=4, per_set=1) for i in range(3)]
    loom = f"{sys.executable} -m loomcli.cli"
    rules = {}
    for i, p in enumerate(projects):
        rules[f"b{i}"] = f"+{loom} build {p} -q -j 8 --trace t-b{i}.json"
    for i, src in enumerate((SAXPY, MATMUL)):
        rules[f"c{i}"] = (f"+{loom} compile {src} --out-dir out-c{i} -j 8 --trace t-c{i}.json "
                          "--target spirv:vulkan1.1 --target spirv:vulkan1.2 --target spirv:vulkan1.3")
    makefile = "all: " + " ".join(rules) + "\n" + "".join(f"{name}:\n\t{cmd}\n" for name, cmd in rules.items())
    (tmp_path / "Makefile").write_text(makefile)
    r = subprocess.run(["make", "-j3", "--no-print-directory"], cwd=tmp_path, env=loom_env(tmp_path),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "jobserver" not in r.stderr.lower() and "token" not in r.stderr.lower(), r.stderr
    assert "warning" not in r.stderr, r.stderr
    traces = sorted(tmp_path.glob("t-*.json"))
    assert len(traces) == 5
    assert sum(len(json.loads(t.read_text())["traceEvents"]) for t in traces) == 3 * 4 + 2 * 3
    assert 1 <= peak_concurrency(traces) <= 3
    # Each loom says it was bounded by make's pool: a `+` recipe gets the pipe.
    assert all(json.loads(t.read_text())["otherData"]["jobserver"] for t in traces)
    for p in projects:
        assert len(list((p / "build" / "loom" / "spirv-vulkan1.3").glob("*.spv"))) == 4


def test_a_fifo_jobserver_is_shared_and_every_token_returns(tmp_path: Path) -> None:
    fifo = tmp_path / "jobserver.fifo"
    os.mkfifo(fifo)
    server = os.open(fifo, os.O_RDWR)
    os.write(server, b"++")  # make -j3: two tokens beside each child's implicit slot
    projects = [make_project(tmp_path / f"p{i}", sets=4, per_set=1) for i in range(2)]
    env = loom_env(tmp_path, MAKEFLAGS=f" -j3 --jobserver-auth=fifo:{fifo}")
    # As a parent would: the second child runs on a token the parent holds.
    assert os.read(server, 1) == b"+"
    children = [subprocess.Popen([sys.executable, "-m", "loomcli.cli", "build", str(p), "-q", "-j", "8",
                                  "--trace", str(tmp_path / f"t{i}.json")], env=env, stderr=subprocess.PIPE,
                                 text=True)
                for i, p in enumerate(projects)]
    errors = [c.communicate(timeout=600)[1] for c in children]
    assert [c.returncode for c in children] == [0, 0], errors
    assert errors == ["", ""]
    os.write(server, b"+")
    os.set_blocking(server, False)
    assert os.read(server, 16) == b"++"  # exactly what was lent came back
    os.close(server)
    assert 1 <= peak_concurrency([tmp_path / "t0.json", tmp_path / "t1.json"]) <= 3
    for trace in (tmp_path / "t0.json", tmp_path / "t1.json"):
        assert json.loads(trace.read_text())["otherData"]["jobserver"] == f"fifo:{fifo}"


def test_an_unusable_jobserver_warns_once_and_builds_serially(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", sets=3, per_set=1)
    env = loom_env(tmp_path, MAKEFLAGS=" -j4 --jobserver-auth=97,98")
    r = subprocess.run([sys.executable, "-m", "loomcli.cli", "build", str(project), "-j", "4", "--progress", "none",
                        "--trace", str(tmp_path / "t.json")], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("warning") == 1 and "jobserver unusable" in r.stderr
    assert peak_concurrency([tmp_path / "t.json"]) == 1


def test_make_n_is_a_dry_run(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", sets=1, per_set=1)
    env = loom_env(tmp_path, MAKEFLAGS="n")
    r = subprocess.run([sys.executable, "-m", "loomcli.cli", "build", str(project), "--progress", "plain"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "would build set0 spirv:vulkan1.3" in r.stderr + r.stdout
    assert not (project / "build").exists()


@pytest.mark.parametrize(("options", "makeflags", "traces_per_run"), [
    ([], "", 1),                            # LOOM_TRACE_DIR: a new trace file per run
    (["--trace", "explicit.json"], "", 0),  # an explicit --trace wins
    ([], "n", 0),                           # make -n writes nothing
])
def test_loom_trace_dir_takes_one_new_trace_per_run(options: list[str], makeflags: str, traces_per_run: int,
                                                    tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    env = loom_env(tmp_path, LOOM_TRACE_DIR=str(folder), MAKEFLAGS=makeflags)
    for _ in range(2):
        r = subprocess.run([sys.executable, "-m", "loomcli.cli", "compile", str(SAXPY), "--target", "spirv:vulkan1.3",
                            "-o", "saxpy.spv", *options], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr
    traces = sorted(folder.glob("loom-*.trace.json")) if folder.exists() else []
    assert len(traces) == 2 * traces_per_run
    for trace in traces:
        doc = json.loads(trace.read_text())
        assert [e["name"] for e in doc["traceEvents"]] == ["saxpy spirv:vulkan1.3"]
        assert doc["otherData"] == {"jobserver": None, "slots": 1, "tokens_taken": 0}
