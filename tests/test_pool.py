"""The worker pool and the compile entry point: ordinals, scratch, crashes,
cancellation without orphans, and one request compiled inline, in the pool
and from the cache with identical bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loomcli.cache import Cache
from loomcli.runtime import forkserver, spawn
from loomcli.runtime.jobserver import TokenGate
from loomcli.runtime.pool import WorkerPool, resolve_jobs
from loomcli.runtime.tasks import InlineExecutor, Task, WorkerContext
from loomcli.service.compile import compile_request
from loomcli.service.dispatch import CompileService
from loomcli.service.front import CompileOptions, front_end
from loomcli.service.key import cache_key
from loomcli.service.request import CompileOutcome, CompileRequest

ROOT = Path(__file__).resolve().parent.parent
TASKS = str(Path(__file__).resolve().parent / "data" / "pool")


@pytest.fixture
def task_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", TASKS + os.pathsep + os.environ.get("PYTHONPATH", ""))


# Both ways a pool starts its workers: forked from a warm server, and each its own interpreter.
START = [pytest.param(True, id="forked", marks=pytest.mark.skipif(not forkserver.available(),
                                                                reason="no fork server on this platform")),
         pytest.param(False, id="spawned")]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def saxpy_request(target: str, fmt: str) -> CompileRequest:
    from loomcli.bytecode import write_module

    front = front_end(*CompileOptions(input=str(ROOT / "samples" / "saxpy.loom")).front_end_inputs())
    return CompileRequest(module=write_module(front.module), target=target, format=fmt, launch_config=True,
                          manifest=True, artifact_name="saxpy" + (".spv" if fmt == "spirv-binary" else ".hsaco"),
                          launch_config_name="saxpy.launch.loombc")


@pytest.mark.parametrize("fork", START)
def test_ordinals_are_dense_and_scratch_is_private(task_path: None, fork: bool) -> None:
    with WorkerPool(2, preload=("pool_tasks",), fork=fork) as pool:
        futures = [pool.submit(Task("pool_tasks:echo", {"i": i}, str(i).encode(), f"t{i}")) for i in range(8)]
        replies = [json.loads(f.result().value) for f in futures]
    assert [r["payload"] for r in replies] == [str(i) for i in range(8)]
    assert {r["ordinal"] for r in replies} <= {0, 1}
    assert all(r["scratch"] for r in replies)
    by_ordinal: dict[int, set[int]] = {}
    for r in replies:
        by_ordinal.setdefault(r["ordinal"], set()).add(r["pid"])
    assert all(len(pids) == 1 for pids in by_ordinal.values())  # one warm process per slot
    assert not any(alive(pid) for pids in by_ordinal.values() for pid in pids)
    assert len(pool.events) == 8 and all(e.status == "ok" for e in pool.events)


@pytest.mark.parametrize("fork", START)
@pytest.mark.parametrize("function", ["pool_tasks:die", "pool_tasks:abort"])
def test_a_dying_worker_fails_only_its_task_and_is_replaced(task_path: None, function: str, fork: bool) -> None:
    with WorkerPool(1, fork=fork) as pool:
        first = json.loads(pool.submit(Task("pool_tasks:echo")).result().value)
        dead = pool.submit(Task(function)).result()
        after = pool.submit(Task("pool_tasks:echo")).result()
    assert dead.status == "crashed" and "worker 0 died" in dead.message
    assert after.ok and json.loads(after.value)["pid"] != first["pid"]
    assert not alive(first["pid"])


def test_a_task_runs_without_the_collector_and_what_it_left_is_collected_after(task_path: None) -> None:
    """The collector is paused while a task runs (a compile's module is not
    scanned again and again) and collects the task's garbage once it replied."""
    with WorkerPool(1) as pool:
        during = [json.loads(pool.submit(Task("pool_tasks:leave_a_cycle")).result().value) for _ in range(3)]
        after = json.loads(pool.submit(Task("pool_tasks:cycles_left")).result().value)
    assert during == [{"collecting": False}] * 3
    assert after == {"left": 0, "of": 3}


def test_a_raising_function_is_a_status_not_an_exception(task_path: None) -> None:
    with WorkerPool(1) as pool:
        result = pool.submit(Task("pool_tasks:fail")).result()
    assert result.status == "raised" and "ValueError: bad request" in result.message


def test_a_task_that_fails_in_the_coordinator_is_a_status_and_the_slot_serves_on(task_path: None) -> None:
    """A header that does not encode (a TOML date reached one) used to kill the
    slot's thread with a traceback and leave the build waiting."""
    import datetime

    with WorkerPool(1) as pool:
        bad = pool.submit(Task("pool_tasks:echo", {"when": datetime.date(2026, 12, 1)})).result(timeout=300)
        after = pool.submit(Task("pool_tasks:echo")).result()
    assert bad.status == "raised" and bad.message.startswith("internal: TypeError"), bad
    assert after.status == "ok"


@pytest.mark.parametrize("fork", START)
def test_cancel_drains_kills_and_leaves_no_process(task_path: None, tmp_path: Path, fork: bool) -> None:
    pool = WorkerPool(2, fork=fork)
    release = tmp_path / "release"
    started = [tmp_path / f"started-{i}" for i in range(5)]
    futures = [pool.submit(Task("pool_tasks:wait_for", {"started": str(s), "release": str(release)}))
               for s in started]
    while sum(s.exists() for s in started) < 2:  # both slots are busy; three tasks queue behind them
        threading.Event().wait(0.01)
    pids = [w.pid for w in pool._workers]
    server = pool._server._proc.pid if pool._server is not None and pool._server._proc is not None else None
    pool.close(cancel=True)
    statuses = [f.result().status for f in futures]
    assert statuses.count("cancelled") == 5
    assert sum(s.exists() for s in started) == 2
    # The cancel path SIGKILLs; workers forked from the server die with it (their parent-death
    # signal), and the kernel finishes that on its own time: a bound for it, not a timing assertion.
    deadline = time.monotonic() + 30
    while any(pid is not None and alive(pid) for pid in [*pids, server]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(pid is not None and alive(pid) for pid in [*pids, server])
    assert threading.active_count() == 1 or all(not t.name.startswith("loom-slot") for t in threading.enumerate())


def test_running_tasks_never_exceed_the_gate(task_path: None) -> None:
    running = [0]
    peak = [0]
    lock = threading.Lock()

    def start(task: Task, ordinal: int) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])

    def end(event: object) -> None:
        with lock:
            running[0] -= 1

    gate = TokenGate(None, 2)
    with WorkerPool(4, gate=gate, on_start=start, on_event=end) as pool:
        results = [f.result() for f in [pool.submit(Task("pool_tasks:echo")) for _ in range(12)]]
    gate.close()
    assert all(r.ok for r in results)
    assert 1 <= peak[0] <= 2


needs_fork = pytest.mark.skipif(not forkserver.available(), reason="no fork server on this platform")


@needs_fork
def test_forked_workers_share_one_server_and_take_makeflags_at_fork(task_path: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers are children of one warm server, and each gets the MAKEFLAGS
    the coordinator has when it is forked: a jobserver loom serves may be
    newer than the server (the entry point starts it early)."""
    monkeypatch.setenv("MAKEFLAGS", "old")
    with WorkerPool(2, preload=("pool_tasks",), fork=True) as pool:
        pool._server.start()
        monkeypatch.setenv("MAKEFLAGS", " -j2 --jobserver-auth=fifo:/nowhere")
        replies = [json.loads(f.result().value) for f in [pool.submit(Task("pool_tasks:environ")) for _ in range(4)]]
        server = pool._server._proc.pid
    assert {r["ppid"] for r in replies} == {server}
    assert {r["makeflags"] for r in replies} == {" -j2 --jobserver-auth=fifo:/nowhere"}
    assert not alive(server)


def pidfds() -> int:
    """How many pidfds this process holds."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{name}") == "anon_inode:[pidfd]"
        except OSError:  # the listing's own descriptor, closed meanwhile
            pass
    return count


@needs_fork
def test_a_slot_sees_its_worker_run_or_end_without_asking_the_server(task_path: None) -> None:
    """Between tasks a slot asks whether its worker still runs (three times a
    task). A round trip to the fork server each time woke a third process
    per question while both cores compiled; the worker's pidfd answers
    instead, and only a worker that ended is asked about, to reap it. One
    killed while idle is replaced before the next task, which runs."""
    before = pidfds()
    with WorkerPool(1, fork=True) as pool:
        asked: list[int] = []
        poll = pool._server.poll
        pool._server.poll = lambda pid, generation: asked.append(pid) or poll(pid, generation)  # type: ignore[method-assign]
        first = [json.loads(pool.submit(Task("pool_tasks:echo")).result().value) for _ in range(4)]
        assert asked == [] and len({r["pid"] for r in first}) == 1
        os.kill(first[0]["pid"], 9)
        while alive(first[0]["pid"]):  # a zombie until the server reaps it: dead to the check
            threading.Event().wait(0.01)
        after = pool.submit(Task("pool_tasks:echo")).result()
        assert after.ok and json.loads(after.value)["pid"] != first[0]["pid"]
        assert asked == [first[0]["pid"]]
    assert pidfds() == before  # each worker's pidfd is closed once its end is known


@pytest.fixture
def keeping(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process keeps its pools between commands, as a resident server's child that serves again does."""
    from loomcli.runtime import pool

    monkeypatch.setattr(pool, "_keeping", [True])
    monkeypatch.setattr(pool, "_parked", [])
    yield
    pool.end_parked()


def run_where(pool: WorkerPool, n: int) -> list[dict]:
    pool.warm()
    return [json.loads(f.result().value) for f in [pool.submit(Task("pool_tasks:where")) for _ in range(n)]]


def worker_pids(pool: WorkerPool) -> set[int]:
    for worker in pool._workers:
        worker.start()  # its slot may not have started it yet
    return {pid for w in pool._workers for pid in [w.pid] if pid is not None}


@needs_fork
def test_a_pool_that_ends_normally_is_kept_for_the_next_one(task_path: None, keeping: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """In a process that runs command after command, the next pool's tasks run
    in the last pool's worker processes (same slots), moved to its own scratch
    folder and seeing today's MAKEFLAGS; nothing of the first pool's folder is
    left. The kept processes are the parked pool's only: a pool cancelled or
    made in another environment starts its own, and the kept ones end."""
    from loomcli.runtime import pool as pools

    monkeypatch.setenv("MAKEFLAGS", "first")
    with WorkerPool(2, preload=("pool_tasks",), fork=True) as first:
        before = run_where(first, 6)
        kept, server = worker_pids(first), first._server.pid
    assert {r["pid"] for r in before} <= kept and len(kept) == 2
    assert pools.parked_children() == {server} and all(alive(pid) for pid in kept)
    assert not os.path.exists(os.path.dirname(before[0]["scratch"]))

    monkeypatch.setenv("MAKEFLAGS", "second")
    with WorkerPool(2, preload=("pool_tasks",), fork=True) as second:
        after = run_where(second, 6)
        assert second._server.pid == server and worker_pids(second) == kept
    assert {r["pid"] for r in after} <= kept and {r["ordinal"] for r in after} <= {0, 1}
    assert all(r["made"] and r["makeflags"] == "second" for r in after)
    assert {os.path.dirname(r["scratch"]) for r in after} != {os.path.dirname(before[0]["scratch"])}
    by_slot = {r["ordinal"]: r["pid"] for r in before + after}  # a slot keeps its process
    assert all(by_slot[r["ordinal"]] == r["pid"] for r in before + after)

    monkeypatch.setenv("LOOM_TEST_OTHER", "1")  # another environment: its own workers
    with WorkerPool(2, preload=("pool_tasks",), fork=True) as other:
        run_where(other, 4)
        fresh = worker_pids(other)
    assert fresh.isdisjoint(kept) and not any(alive(pid) for pid in [*kept, server])

    with pytest.raises(KeyboardInterrupt), WorkerPool(2, preload=("pool_tasks",), fork=True) as cancelled:
        run_where(cancelled, 2)
        taken = worker_pids(cancelled)
        raise KeyboardInterrupt
    assert taken == fresh and pools.parked_children() == set()
    deadline = time.monotonic() + 30  # the cancel path SIGKILLs: a bound for the kernel, not a timing assertion
    while any(alive(pid) for pid in taken) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(alive(pid) for pid in taken)


def test_a_pool_that_must_hand_on_a_jobserver_pipe_is_not_kept(keeping: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers inherit a pipe jobserver's descriptors when they are forked: a
    kept one would lack the next build's, so such a pool is never kept."""
    from loomcli.runtime import pool as pools

    r, w = os.pipe()
    try:
        monkeypatch.setenv("MAKEFLAGS", f" -j2 --jobserver-auth={r},{w}")
        assert pools._Origin.now(()) is None
        monkeypatch.setenv("MAKEFLAGS", " -j2 --jobserver-auth=fifo:/nowhere")
        assert pools._Origin.now(()) is not None
    finally:
        os.close(r)
        os.close(w)


@needs_fork
def test_a_dead_fork_server_fails_the_running_task_and_is_started_again(task_path: None, tmp_path: Path) -> None:
    release = tmp_path / "release"
    with WorkerPool(1, fork=True) as pool:
        first = json.loads(pool.submit(Task("pool_tasks:echo")).result().value)
        running = pool.submit(Task("pool_tasks:wait_for", {"started": str(tmp_path / "started"),
                                                           "release": str(release)}))
        while not (tmp_path / "started").exists():
            threading.Event().wait(0.01)
        old_server = pool._server._proc.pid
        os.kill(old_server, 9)  # its workers die with it (PR_SET_PDEATHSIG)
        lost = running.result()
        after = json.loads(pool.submit(Task("pool_tasks:echo")).result().value)
        new_server = pool._server._proc.pid
    assert lost.status == "crashed" and "worker 0 died" in lost.message, lost
    assert new_server != old_server and after["pid"] != first["pid"]
    assert not alive(first["pid"]) and not alive(after["pid"]) and not alive(new_server)


WARM_THEN_COMPILE = """\
import sys
from loomcli.runtime.isolated import become_worker
become_worker()  # LLVM in this process, as in a pool worker
import loomcli.build.tasks, loomcli.emit.llvm.codegen as codegen, loomcli.service.compile as compile
compile.warm(); codegen.warm()
before = set(sys.modules)
for target, fmt in (("amdgpu:gfx1100", "amdgpu-hsaco"), ("spirv:vulkan1.3", "spirv-binary")):
    outcome = compile.compile_request(compile.CompileRequest(
        module=open(sys.argv[1], "rb").read(), target=target, format=fmt, launch_config=True, manifest=True,
        artifact_name="k", launch_config_name="k.launch.loombc"))
    assert outcome.ok, outcome.message
print(sorted(m for m in set(sys.modules) - before if m.startswith("loomcli")))
"""


def test_warm_leaves_no_loom_module_for_a_first_task_to_import(tmp_path: Path) -> None:
    """A fork server warms once for every worker it forks: what `warm()`
    leaves out, each worker's first task imports again."""
    module = saxpy_request("spirv:vulkan1.3", "spirv-binary").module
    (tmp_path / "saxpy.loombc").write_bytes(module)
    r = subprocess.run([sys.executable, "-c", WARM_THEN_COMPILE, str(tmp_path / "saxpy.loombc")], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@needs_fork
def test_a_prestarted_server_is_adopted_once_or_killed_at_exit(tmp_path: Path) -> None:
    code = (
        "import os, sys\n"
        "from loomcli.runtime import spawn\n"
        "jobserver, other = os.pipe(), os.pipe()\n"
        "for fd in (*jobserver, *other):\n"
        "    os.set_inheritable(fd, True)\n"
        "os.environ['MAKEFLAGS'] = ' -j2 --jobserver-auth=%d,%d' % jobserver\n"
        "spawn.prestart(('loomcli.runtime.tasks', 'loomcli.service.compile'))\n"
        "del os.environ['MAKEFLAGS']\n"
        "assert set(sys.modules) & {'subprocess', 'socket', 'loomcli.runtime.forkserver'} == set()  # started light\n"
        "pid = spawn._started[0].process.pid\n"
        "def link(n):  # a descriptor the starting server closes between listdir and readlink is not held\n"
        "    try:\n"
        "        return os.readlink(f'/proc/{pid}/fd/{n}')\n"
        "    except FileNotFoundError:\n"
        "        return None\n"
        "held = {link(n) for n in os.listdir(f'/proc/{pid}/fd')}\n"
        "# It keeps the jobserver's pipe that MAKEFLAGS names; any other descriptor we inherited is closed.\n"
        "assert os.readlink(f'/proc/self/fd/{jobserver[0]}') in held, held\n"
        "assert os.readlink(f'/proc/self/fd/{other[0]}') not in held, held\n"
        "print(pid, flush=True)\n"
        "from loomcli.runtime import forkserver\n"
        "from loomcli.runtime.pool import WorkerPool\n"
        "from loomcli.runtime.tasks import Task\n"
        "assert forkserver.adopt(('loomcli.service.compile', 'loomcli.build.tasks')) is None  # not covered\n"
        "if sys.argv[1] == 'adopt':\n"
        "    server = forkserver.adopt(('loomcli.service.compile',))\n"
        "    assert server is not None and forkserver.adopt(('loomcli.service.compile',)) is None  # handed out once\n"
        "    with WorkerPool(1, ('loomcli.service.compile',), server=server) as pool:\n"
        "        result = pool.submit(Task('pool_tasks:environ')).result()\n"
        "    print(result.value.decode())\n"
    )
    for mode in ("adopt", "exit"):
        r = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + TASKS})
        assert r.returncode == 0, r.stderr
        pid = int(r.stdout.split()[0])
        if mode == "adopt":  # the task ran in a worker forked from that server
            assert json.loads(r.stdout.split(None, 1)[1])["ppid"] == pid
        deadline = time.monotonic() + 30  # a bound for the kernel to finish a SIGKILL, not a timing assertion
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not alive(pid), mode


@pytest.mark.parametrize("args,env,started", [
    (["-j", "2", "."], {}, True),
    (["--jobs=4"], {}, True),
    (["-j1"], {}, False),
    (["-j", "1", "."], {"LOOM_JOBS": "4"}, False),
    ([], {"LOOM_JOBS": "1"}, False),
    (["-j", "1", "-j", "3"], {}, True),   # the last -j wins
])
def test_the_entry_point_prestarts_a_server_only_for_a_parallel_build(
        monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], started: bool) -> None:
    from loomcli import entry

    monkeypatch.delenv("LOOM_JOBS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(spawn, "prestart", lambda preload: calls.append(tuple(preload)))
    calls: list[tuple[str, ...]] = []
    entry._prestart_workers(args)
    assert calls == ([entry.BUILD_PRELOAD] if started else [])


def test_jobs_come_from_the_flag_then_loom_jobs() -> None:
    assert resolve_jobs(3, {"LOOM_JOBS": "7"}) == 3
    assert resolve_jobs(None, {"LOOM_JOBS": "7"}) == 7
    assert resolve_jobs(None, {}) >= 1
    from loomcli.errors import UsageError

    for bad in ("0", "many"):
        with pytest.raises(UsageError):
            resolve_jobs(None, {"LOOM_JOBS": bad})


@pytest.mark.parametrize("style", ["fifo", "pipe"])
def test_huge_job_counts_are_clamped_to_what_a_jobserver_pipe_holds(style: str) -> None:
    """`-j 99999999999` was an internal MemoryError (a 100 GB token write) and
    `-j 70000` lost the tokens past the pipe's 64 KiB."""
    from loomcli.runtime.jobserver import JobserverServer
    from loomcli.runtime.pool import MAX_JOBS

    assert resolve_jobs(99999999999, {}) == MAX_JOBS
    assert resolve_jobs(None, {"LOOM_JOBS": "70000"}) == MAX_JOBS
    server = JobserverServer(resolve_jobs(99999999999, {}), style)
    assert server.close() == 0  # every token written was there to take back


@pytest.mark.parametrize("target", ["amdgpu:gfx1100", "spirv:vulkan1.3", None])
def test_the_last_use_of_a_front_end_specializes_its_module_in_place(target: str | None) -> None:
    """A compile's front end is specialized on a copy of its module, so it can
    serve another target; its last use (`consume`: a request's only target, a
    kernel set's last) specializes the module itself into the same result."""
    from loomcli.pipeline import specialize
    from loomcli.targets.profiles import parse_target
    from loomcli.text.printer import print_module

    profile = parse_target(target) if target else None
    front = front_end(*CompileOptions(input=str(ROOT / "samples" / "matmul.loom")).front_end_inputs())
    before = print_module(front.module)
    copied = specialize(front, profile, for_execution=True)
    assert print_module(front.module) == before and copied.module is not front.module
    consumed = specialize(front, profile, for_execution=True, consume=True)
    assert consumed.module is front.module and print_module(consumed.module) == print_module(copied.module)


@pytest.mark.parametrize("target,fmt,magic", [("amdgpu:gfx1100", "amdgpu-hsaco", b"\x7fELF"),
                                               ("spirv:vulkan1.3", "spirv-binary", b"\x03\x02\x23\x07")])
def test_one_request_inline_in_the_pool_and_from_the_cache(tmp_path: Path, target: str, fmt: str,
                                                           magic: bytes) -> None:
    request = saxpy_request(target, fmt)
    direct = compile_request(request)
    assert direct.ok and direct.artifact.startswith(magic)
    assert json.loads(direct.manifest)["kernels"][0]["launch_config"] == "saxpy.launch.loombc"
    inline = InlineExecutor()
    try:
        service = CompileService(inline)
        via_inline = service.submit(request).result()
    finally:
        inline.close()
    cache = Cache(str(tmp_path / "cache"))
    with WorkerPool(2, preload=("loomcli.service.compile",)) as pool:
        service = CompileService(pool, cache)
        via_pool = service.submit(request).result()
        assert service.compiled == 1 and service.hits == 0
        from_cache = service.submit(request).result()
        assert service.compiled == 1 and service.hits == 1  # a hit creates no task
    assert len(pool.events) == 1
    for other in (via_inline, via_pool, from_cache):
        assert (other.artifact, other.launch_config, other.manifest) == \
               (direct.artifact, direct.launch_config, direct.manifest)


def test_an_inline_workers_scratch_folder_is_made_only_when_a_task_asks(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    inline = InlineExecutor()
    service = CompileService(inline)
    assert service.submit(saxpy_request("spirv:vulkan1.3", "spirv-binary")).result().ok
    assert list(tmp_path.iterdir()) == []  # a compile never asks: no folder made and removed for it
    context = WorkerContext(0, inline)
    scratch = Path(context.scratch)
    assert scratch.is_dir() and scratch.parent == tmp_path and context.scratch == str(scratch)
    assert WorkerContext(0, inline).scratch == str(scratch)  # one folder per worker, not per task
    inline.close()
    assert not scratch.exists()


def test_outcomes_keep_status_apart_from_diagnostics() -> None:
    bad = CompileRequest(module=b"kernel.def export(\"k\") @k() {\n", target="spirv:vulkan1.3", format="spirv-binary")
    outcome = compile_request(bad)
    assert outcome.status == "failed" and outcome.diagnostics and outcome.diagnostics[0].code.startswith("PARSE")
    assert CompileOutcome.decode(outcome.encode()) == outcome
    no_target = compile_request(CompileRequest(module=b"", format="amdgpu-hsaco"))
    assert no_target.status == "error" and no_target.exit_code == 2
    for broken in (b"", b"LOOMOUT\x01\xff\xff\xff\xff", outcome.encode()[:-3] + b"}"):
        with pytest.raises(ValueError):
            CompileOutcome.decode(broken)


def test_the_key_covers_what_changes_bytes_and_not_the_path() -> None:
    base = saxpy_request("amdgpu:gfx1100", "amdgpu-hsaco")
    from dataclasses import replace

    assert cache_key(base) == cache_key(replace(base, path="elsewhere/saxpy.loom"))
    changed = [replace(base, target="amdgpu:gfx942"), replace(base, pipeline="none"),
               replace(base, config=(("a", "1"),)), replace(base, manifest=False),
               replace(base, artifact_name="other.hsaco"), replace(base, module=base.module + b" ")]
    keys = {cache_key(r) for r in changed}
    assert len(keys) == len(changed) and cache_key(base) not in keys
