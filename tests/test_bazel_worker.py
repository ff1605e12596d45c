"""The Bazel rules with persistent workers (`loom worker`), built with real Bazels, offline.

Bazel 7.7.1 (bzlmod) offers the rules' actions to multiplex workers with no flag; Debian's Bazel
4.2.3 speaks JSON to workers only with --experimental_worker_allow_json_protocol, so there the rules
offer (singleplex) workers on request (--@loom_rules//:persistent_workers=on), as docs/bazel.md
says. One scenario over the examples, on each Bazel: a build with workers off; a clean build with
workers (--keep_going) in which the worker is killed in the middle of a compile (a `sitecustomize`
hook, `HOOK`, holds the first compile until then): Bazel fails the actions that worker was running
(it does not retry them), starts a new worker for the rest; the next build reruns only those in a
new worker and succeeds; then a clean build with workers, and on 7.7.1 one with
--experimental_worker_multiplex_sandboxing (each request in its own sandbox folder). Every compile,
link and frontier action of those ran in a worker (Bazel's execution log), and every output is
byte-identical to the build without workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bazel_harness import ROOT, Bazels, Workspace, loom_spawns, outputs, read_execution_log
from task_hooks import worker_compile_hook
from test_pool import alive

# Bazel version -> (the flags that turn workers on, the flags that turn them off).
WORKER_FLAGS = {
    "4.2.3": (["--experimental_worker_allow_json_protocol", "--@loom_rules//:persistent_workers=on"], []),
    "7.7.1": ([], ["--@loom_rules//:persistent_workers=off"]),
}
# The actions the rules offer to workers (the package's is a shell script of its own).
WORKER_MNEMONICS = {"LoomCompile", "LoomLink", "LoomFrontier"}

# In a worker's request only (not the worker's own warm-up): every compile leaves `ran-<worker pid>`;
# the first one (of any worker, once per hook folder) writes "<worker pid>" to `held`, then waits
# until the worker is killed.
HOOK = worker_compile_hook('''\
import os, time

_WORKER = os.getpid()  # the worker process; its requests run in children forked from it

def _wrap(inner):
    def compile_request(request):
        folder = os.environ.get("LOOM_TEST_HOOK_DIR")
        if not folder or os.getpid() == _WORKER:  # the worker's own warm-up compiles
            return inner(request)
        open(os.path.join(folder, f"ran-{_WORKER}"), "w").close()
        held = os.path.join(folder, "held")
        try:  # the claim stays, so only the first compile of all is held
            os.close(os.open(held + ".claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return inner(request)
        with open(held + ".tmp", "w") as f:
            f.write(str(_WORKER))
        os.rename(held + ".tmp", held)
        while True:
            time.sleep(0.05)
    return compile_request
''')


def runners(log: Path) -> dict[str, set[str]]:
    """Mnemonic -> the runners Bazel's execution log names for the loom actions."""
    found: dict[str, set[str]] = {}
    for spawn in loom_spawns(read_execution_log(log)):
        found.setdefault(spawn["mnemonic"], set()).add(spawn.get("runner", ""))
    return found


def hooked_loom(folder: Path, held: Path) -> Path:
    """LOOM_BIN for the rules: this checkout's loom with `HOOK` in its PYTHONPATH (a chroot sees `folder`)."""
    hooks = folder / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOK)
    wrapper = folder / "loom"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH='{ROOT}:{hooks}' LOOM_TEST_HOOK_DIR='{held}' "
                       f"exec '{sys.executable}' -m loomcli \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def worker_logs(output_base: Path) -> list[str]:
    """The names of the worker logs Bazel wrote (`multiplex-worker-N-Loom.log` for a multiplex one)."""
    return sorted(p.name for p in (output_base / "bazel-workers").glob("*.log"))


def build_killing_the_worker(bazel: Workspace, flags: list[str], held: Path) -> tuple[int, str]:
    """A clean build with workers whose first held compile's worker is killed: (its pid, Bazel's
    stderr); the build must fail. Bazel's multiplexer now and then never answers the requests of a
    worker that died (bazelbuild/bazel#10288, #25076: the build waits forever with the worker and all
    it started gone); such a build is ended (its server killed) and run once more."""
    output_base = bazel.info("output_base")
    for attempt in (1, 2):
        for path in held.iterdir():
            path.unlink()
        bazel.run("clean")
        argv, env = bazel.bazel.command([*bazel.startup, "build", *bazel.flags, *flags, "--keep_going", "//..."],
                                        bazel.examples, bazel.env)
        build = subprocess.Popen(argv, cwd=bazel.examples, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        deadline = time.monotonic() + 600
        while not (held / "held").exists():
            assert build.poll() is None and time.monotonic() < deadline, build.communicate()[1][-4000:]
            time.sleep(0.05)
        killed = int((held / "held").read_text())
        os.kill(killed, signal.SIGKILL)
        try:
            _, err = build.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            assert attempt == 1 and not alive(killed), "Bazel waited for a killed worker twice"
            os.kill(int((output_base / "server" / "server.pid.txt").read_text()), signal.SIGKILL)
            build.communicate(timeout=300)
            continue
        assert build.returncode != 0, err[-3000:]
        return killed, err
    raise AssertionError("unreachable")


@pytest.mark.parametrize(("version", "form"), [("4.2.3", "workspace"), ("7.7.1", "bzlmod")])
def test_workers_give_the_unworked_bytes_and_survive_a_killed_worker(bazels: Bazels, tmp_path: Path,
                                                                     version: str, form: str) -> None:
    on, off = WORKER_FLAGS[version]
    held = tmp_path / "held"
    held.mkdir()
    loom = hooked_loom(tmp_path, held)
    with Workspace(bazels[version], tmp_path / "ws", loom, form) as bazel:
        bin_dir = bazel.info("bazel-bin")

        every = loom_spawns(bazel.build(tmp_path / "off.json", *off))
        alone = outputs(bin_dir)
        ran = runners(tmp_path / "off.json")
        assert set(ran) >= WORKER_MNEMONICS
        assert not any("worker" in r for rs in ran.values() for r in rs), ran
        assert not list(held.glob("ran-*"))

        # With workers; the worker is killed while it compiles: its actions fail, and only those.
        killed, err = build_killing_the_worker(bazel, on, held)
        assert "WorkResponse" in err or "Worker process" in err, err[-3000:]

        # The next build reruns what failed in a worker Bazel started anew, with the bytes of the build without.
        rerun = loom_spawns(bazel.build(tmp_path / "after-kill.json", *on))
        assert 0 < len(rerun) < len(every), [spawn["mnemonic"] for spawn in rerun]
        assert any("worker" in r for rs in runners(tmp_path / "after-kill.json").values() for r in rs)
        assert {p.name for p in held.glob("ran-*")} - {f"ran-{killed}"}, "no worker but the killed one compiled"
        assert outputs(bin_dir) == alone

        # A clean build with workers: every loom action but the package's in a worker, the same bytes.
        bazel.run("clean")
        bazel.build(tmp_path / "workers.json", *on)
        ran = runners(tmp_path / "workers.json")
        for mnemonic in WORKER_MNEMONICS:
            assert ran[mnemonic] and all("worker" in r for r in ran[mnemonic]), ran
        assert ran["LoomPackage"] and not any("worker" in r for r in ran["LoomPackage"])
        assert outputs(bin_dir) == alone
        multiplexed = [n for n in worker_logs(bazel.info("output_base")) if n.startswith("multiplex-worker-")]
        assert bool(multiplexed) == bazel.bazel.modern, worker_logs(bazel.info("output_base"))

        if bazel.bazel.modern:  # each request in its own sandbox folder: its outputs are found only there
            bazel.run("clean")
            bazel.build(tmp_path / "sandboxed.json", *on, "--experimental_worker_multiplex_sandboxing")
            ran = runners(tmp_path / "sandboxed.json")
            for mnemonic in WORKER_MNEMONICS:
                assert ran[mnemonic] and all("worker" in r for r in ran[mnemonic]), ran
            assert outputs(bin_dir) == alone
