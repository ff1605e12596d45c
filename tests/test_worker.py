"""`loom worker`: Bazel's JSON persistent-worker protocol, spoken to a real worker process.

Requests are written as Bazel 4.2 writes them (each object spread over
several lines) or as Bazel 7 does (one line); every answer is compared with
the same command line run as Bazel runs an action without a worker (`loom
worker @PARAMS`, a process of its own): the same exit code, the same text,
the same bytes. A `sitecustomize` in the worker's PYTHONPATH (`HOOK`) makes
the compile of a file named `crash.loom` abort and one named `block.loom`
wait until it is ended, so crashes and cancellations happen at a known point;
one of `pid.loom` says which process compiled it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from task_hooks import worker_compile_hook

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker forks: Linux only")

HOOK = worker_compile_hook('''\
import os, time

def _wrap(inner):
    def compile_request(request):
        name = os.path.basename(request.path or "")
        if name == "crash.loom":
            os.abort()
        if name == "block.loom":
            with open("blocked", "w") as f:
                f.write(str(os.getpid()))
            while True:
                time.sleep(0.05)
        if name == "pid.loom":
            with open("pids", "a") as f:
                f.write(f"{os.getpid()}\\n")
        return inner(request)
    return compile_request
''')


class Worker:
    """A `loom worker --persistent_worker` in `folder` (its execution root)."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder = folder
        self.proc = subprocess.Popen([sys.executable, "-m", "loomcli", "worker", "--persistent_worker"], cwd=folder,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send(self, request: dict, spread: bool = True) -> None:
        assert self.proc.stdin is not None
        text = json.dumps(request, indent=2 if spread else None)  # Bazel 4.2 spreads one over lines
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), (line, self.proc.poll())
        return json.loads(line)

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=120)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOK)
    return {**{k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")},
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(hooks)])}


@pytest.fixture
def worker(tmp_path: Path, env: dict[str, str]) -> Iterator[Worker]:
    root = execroot(tmp_path / "root")
    w = Worker(root, env)
    yield w
    if w.proc.poll() is None:
        w.close()


def execroot(folder: Path) -> Path:
    """A folder laid out as the actions below expect: sources under `src/`, nothing under `out/`."""
    (folder / "src").mkdir(parents=True)
    for name in ("saxpy.loom", "matmul.loom", "frontier.loom"):
        shutil.copy(SAMPLES / name, folder / "src" / name)
    (folder / "src" / "bad.loom").write_text('kernel.def export("k") @k(%n: index) {\n'
                                             '  %x = scalar.addf %n, %n : f32\n}\n')
    for name in ("crash.loom", "block.loom", "pid.loom"):
        shutil.copy(SAMPLES / "saxpy.loom", folder / "src" / name)
    return folder


def direct(folder: Path, env: dict[str, str], arguments: list[str]) -> tuple[int, str]:
    """The action run as Bazel runs it without a worker: `loom worker @PARAMS`."""
    params = folder / "action.params"
    params.write_text("".join(a + "\n" for a in arguments))
    r = subprocess.run([sys.executable, "-m", "loomcli", "worker", f"@{params}"], cwd=folder, env=env,
                       capture_output=True, text=True, timeout=300)
    params.unlink()
    return r.returncode, r.stdout + r.stderr


def wait_for(path: Path, cap: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + cap
    while not path.exists():
        assert time.monotonic() < deadline, f"gave up waiting for {path}"
        time.sleep(0.02)


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


ACTIONS = {
    "compile hsaco": ["--mkdir", "out/k", "compile", "src/saxpy.loom", "--target", "amdgpu:gfx1100",
                      "-o", "out/k/s.hsaco", "--emit-launch-config", "out/k/s.launch.loombc",
                      "--manifest", "out/k/s.manifest.json"],
    "compile spv": ["--mkdir", "out", "compile", "src/matmul.loom", "--target", "spirv:vulkan1.3",
                    "-o", "out/m.spv"],
    "link": ["--mkdir", "out/lib", "link", "src/saxpy.loom", "src/matmul.loom", "--mode", "merge",
             "-o", "out/lib/all.loombc"],
    "frontier": ["--mkdir", "out/f", "frontier", "src/frontier.loom", "--out-dir", "out/f", "-q",
                 "--target", "spirv:vulkan1.3", "--compile", "-j", "1"],
    "an input error": ["--mkdir", "out", "compile", "src/bad.loom", "--target", "spirv:vulkan1.3", "-o", "out/b.spv"],
    "a usage error": ["compile", "src/saxpy.loom", "--bogus"],
}


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_an_answer_is_the_action_run_on_its_own(worker: Worker, tmp_path: Path, env: dict[str, str],
                                                name: str) -> None:
    worker.send({"arguments": ACTIONS[name], "inputs": [{"path": "src/saxpy.loom", "digest": "AA=="}]})
    answer = worker.answer()
    served = files(worker.folder / "out") if (worker.folder / "out").exists() else {}
    alone = execroot(tmp_path / "alone")
    code, text = direct(alone, env, ACTIONS[name])
    assert (answer.get("exitCode", 0), answer.get("output", "")) == (code, text)
    assert served == (files(alone / "out") if (alone / "out").exists() else {})
    assert answer.get("requestId", 0) == 0
    if name.startswith("compile"):
        assert code == 0 and served


def test_one_worker_answers_action_after_action_as_each_run_on_its_own(worker: Worker, tmp_path: Path,
                                                                      env: dict[str, str]) -> None:
    """Every action twice, one after another, by one worker (so most of them in a child that
    served the one before): each answer and its outputs are the action's run on its own."""
    alone: dict[str, tuple[int, str, dict[str, bytes]]] = {}
    for name in sorted(ACTIONS):
        folder = execroot(tmp_path / "alone" / name.replace(" ", "-"))
        code, text = direct(folder, env, ACTIONS[name])
        alone[name] = code, text, files(folder / "out") if (folder / "out").exists() else {}
    for name in sorted(ACTIONS) * 2:
        shutil.rmtree(worker.folder / "out", ignore_errors=True)
        worker.send({"arguments": ACTIONS[name]}, spread=False)
        answer = worker.answer()
        served = files(worker.folder / "out") if (worker.folder / "out").exists() else {}
        assert (answer.get("exitCode", 0), answer.get("output", ""), served) == alone[name], name


PID = ["--mkdir", "out", "compile", "src/pid.loom", "--target", "spirv:vulkan1.3", "-o", "out/p.spv"]


def test_a_child_serves_again_but_not_after_a_cancel_or_a_crash(worker: Worker) -> None:
    """A compile's child serves the next request; a cancelled request's child and a crashed one
    do not (the pid that compiled `pid.loom` says which child ran it)."""
    def compiled_in() -> str:
        worker.send({"arguments": PID})
        assert worker.answer() == {"exitCode": 0, "output": "", "requestId": 0}
        return (worker.folder / "pids").read_text().split()[-1]

    first = compiled_in()
    assert compiled_in() == first
    worker.send({"arguments": ["--mkdir", "out", "compile", "src/block.loom", "--target", "spirv:vulkan1.3",
                               "-o", "out/b.spv"], "requestId": 1})
    wait_for(worker.folder / "blocked")
    assert (worker.folder / "blocked").read_text() == first  # the warm child took it
    worker.send({"requestId": 1, "cancel": True})
    assert worker.answer()["wasCancelled"] is True
    after_cancel = compiled_in()
    assert after_cancel != first
    worker.send({"arguments": ["--mkdir", "out", "compile", "src/crash.loom", "--target", "spirv:vulkan1.3",
                               "-o", "out/c.spv"]})
    assert worker.answer()["exitCode"] == 3
    assert compiled_in() not in (first, after_cancel)
    assert worker.close() == 0


def test_multiplexed_requests_run_at_once_in_their_sandboxes(worker: Worker, tmp_path: Path,
                                                              env: dict[str, str]) -> None:
    """Requests with ids are all taken before any is answered; each runs in its sandbox folder."""
    names = sorted(ACTIONS)
    for n, name in enumerate(names, start=1):
        sandbox = worker.folder / "sandbox" / str(n)
        execroot(sandbox)
        worker.send({"arguments": ACTIONS[name], "requestId": n, "sandboxDir": f"sandbox/{n}"}, spread=n % 2 == 0)
    answers = {a["requestId"]: a for a in (worker.answer() for _ in names)}
    assert sorted(answers) == list(range(1, len(names) + 1))
    for n, name in enumerate(names, start=1):
        alone = execroot(tmp_path / f"alone-{n}")
        code, text = direct(alone, env, ACTIONS[name])
        assert (answers[n].get("exitCode", 0), answers[n].get("output", "")) == (code, text), name
        sandbox = worker.folder / "sandbox" / str(n)
        assert files(sandbox) == files(alone), name
    assert not (worker.folder / "out").exists()  # nothing was written outside the sandboxes


def test_a_crashed_request_is_its_exit_3_and_the_worker_serves_on(worker: Worker) -> None:
    worker.send({"arguments": ["--mkdir", "out", "compile", "src/crash.loom", "--target", "spirv:vulkan1.3",
                               "-o", "out/c.spv"], "requestId": 7})
    answer = worker.answer()
    assert answer["requestId"] == 7 and answer["exitCode"] == 3
    assert "crashed in the loom worker (signal 6)" in answer["output"]
    assert not (worker.folder / "out" / "c.spv").exists()
    worker.send({"arguments": ACTIONS["compile spv"], "requestId": 8})
    assert worker.answer() == {"exitCode": 0, "output": "", "requestId": 8}
    assert worker.close() == 0


def test_a_cancelled_request_says_so(worker: Worker) -> None:
    worker.send({"arguments": ["--mkdir", "out", "compile", "src/block.loom", "--target", "spirv:vulkan1.3",
                               "-o", "out/b.spv"], "requestId": 3})
    worker.send({"arguments": ACTIONS["compile spv"], "requestId": 4})
    first = worker.answer()
    assert first == {"exitCode": 0, "output": "", "requestId": 4}  # the blocked one does not hold it up
    wait_for(worker.folder / "blocked")  # the hook marks the moment the request is inside its compile
    worker.send({"requestId": 3, "cancel": True})
    answer = worker.answer()
    assert answer["requestId"] == 3 and answer["wasCancelled"] is True
    assert not (worker.folder / "out" / "b.spv").exists()


def test_the_worker_ends_when_bazel_closes_its_input(worker: Worker) -> None:
    worker.send({"arguments": ["--mkdir", "out", "compile", "src/block.loom", "--target", "spirv:vulkan1.3",
                               "-o", "out/b.spv"], "requestId": 1})
    wait_for(worker.folder / "blocked")
    assert worker.close() == 0  # its running request ended with it
    assert not (worker.folder / "out" / "b.spv").exists()


def test_what_is_not_a_request_stream_ends_the_worker(worker: Worker) -> None:
    assert worker.proc.stdin is not None
    worker.proc.stdin.write(b'{"arguments": ["fmt"]} [1, 2]\n')
    worker.proc.stdin.flush()
    worker.answer()  # the request before the garbage is served
    code = worker.close()
    assert code != 0
    assert worker.proc.stderr is not None
    assert b"between requests" in worker.proc.stderr.read()


def test_a_request_id_already_running_ends_the_worker(worker: Worker) -> None:
    """Two requests under one id could not be told apart: the first is still answered."""
    request = json.dumps({"arguments": ACTIONS["compile spv"], "requestId": 5}).encode()
    assert worker.proc.stdin is not None
    worker.proc.stdin.write(request + request + b"\n")  # the second arrives while the first compiles
    worker.proc.stdin.flush()
    assert worker.answer() == {"exitCode": 0, "output": "", "requestId": 5}
    assert worker.close() != 0
    assert worker.proc.stderr is not None
    assert b"request 5 is already running" in worker.proc.stderr.read()


def test_worker_needs_the_flag_or_a_params_file(env: dict[str, str], tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "loomcli", "worker"], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "--persistent_worker" in r.stderr
    r = subprocess.run([sys.executable, "-m", "loomcli", "worker", f"@{tmp_path}/none"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip() == f"loom: error: {tmp_path}/none: No such file or directory"
