"""`loom server start|status|stop|run`: the resident compile service (TOOLCHAIN.md section 12).

A server keeps a warm template of loom (`loomcli.runtime.template`) for
every `loom` process of this user that a build system starts; those
processes hand it their command line (`loomcli.runtime.served`) and it runs
each in a child forked from the template (`loomcli.runtime.resident`).
`run` is the server itself, in the foreground; `start` starts it in the
background and returns once it serves.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from loomcli.driver import LoomError, UsageError

# What a template imports besides every module of loom (each one missing would be imported
# again by every request that needs it): what the commands load lazily from elsewhere
# (difflib: click's parser builds a NoSuchOption, with close matches, for every short option;
# click._textwrap: click prints a usage error with it). A request that imports a module the
# template lacks also ends its child, instead of leaving it warm (`template.Settled`).
PRELOAD = ("tomllib", "difflib", "click._textwrap", "rich.console", "rich.live", "rich.progress", "rich.table")


def _settings(given: str | None = None, keyed: bool = True) -> tuple[str, str, int]:
    """(folder, key, idle timeout) of this loom's server (the key "" unless
    `keyed`); usage errors for bad settings."""
    from loomcli.runtime import served
    from loomcli.service.fingerprint import server_key

    try:
        idle = served.idle_timeout(os.environ, given)
        served.mode(os.environ)
    except served.BadSetting as e:
        raise UsageError(str(e)) from None
    key = server_key() if keyed else ""
    if key is None:
        raise LoomError("loom's code (or llvmlite) changed a moment ago; try again in two seconds", 3)
    return served.folder(os.environ), key, idle


def _status(place: str, key: str) -> dict[str, Any] | None:
    from loomcli.runtime.resident import ask

    answer = ask(place, key, b"status")
    return answer[1] if answer is not None else None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def server() -> None:
    """The resident compile service: warm compiles for every loom process of this user.

    LOOM_SERVER=auto starts it on first use, LOOM_SERVER=off never uses it;
    unset, a running server is used and none is started."""


@server.command()
@click.option("--idle-timeout", "idle", metavar="SECONDS",
              help="Exit after this many seconds without a command (default: LOOM_SERVER_IDLE, else 600).")
def start(idle: str | None) -> int:
    """Start this loom's server in the background (exit 0 if it runs already)."""
    from loomcli.runtime import served

    place, key, timeout = _settings(idle)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if _status(place, key) is not None:
            return 0
        read, write = os.pipe()
        try:
            started = served.start(place, key, timeout, ready=write)
        finally:
            os.close(write)
        with os.fdopen(read, "rb") as ready:
            line = ready.read(4096).decode("utf-8", "replace").strip()
        if started:
            if line == "ready" or line.startswith("running"):
                return 0
            raise LoomError(f"the server did not start: {line or 'it ended without a word'}", 3)
        if not served.private(place):
            raise LoomError(f"{place}: not a private folder of this user (mode 0700, owned by uid {os.geteuid()}); "
                            "the server will not use it", 3)
        time.sleep(0.05)  # another loom is starting it: it answers in a moment
    raise LoomError("the server did not answer within 120 s", 3)


@server.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for machines.")
def status(as_json: bool) -> int:
    """Say whether this loom's server runs (exit 0) or not (exit 1)."""
    from loomcli import __version__
    from loomcli.runtime import served
    from loomcli.service.fingerprint import compiler_fingerprint

    place, key, _ = _settings()
    doc = _status(place, key) or {"running": False, "pid": None, "version": __version__,
                                  "code_hash": compiler_fingerprint(), "uptime_s": None, "requests": 0,
                                  "socket": served.socket_path(place, key)}
    if as_json:
        click.echo(json.dumps(doc, sort_keys=True))
    elif doc["running"]:
        click.echo(f"loom server: running, pid {doc['pid']}, loom {doc['version']} (code {doc['code_hash'][:12]}), "
                   f"up {doc['uptime_s']:.0f} s, {doc['requests']} commands served, socket {doc['socket']}")
    else:
        click.echo(f"loom server: not running (socket {doc['socket']})")
    return 0 if doc["running"] else 1


@server.command()
@click.option("-o", "--output", required=True, metavar="PATH", help="Where the program is written.")
@click.option("--launcher", metavar="PATH",
              help="The loom program it stands in for (default: the one running this command).")
@click.option("--cc", metavar="COMPILER", help="The C compiler (default: $CC, else cc, gcc or clang).")
def client(output: str, launcher: str | None, cc: str | None) -> int:
    """Build the native client: a program that hands a served command to the
    server without starting Python (a build system's commands call it as
    they would call loom). It runs everything it does not hand over, and
    every command no server takes, through the launcher."""
    import shlex
    import shutil
    import subprocess
    import tempfile

    from loomcli.errors import atomic_write
    from loomcli.runtime import served

    if launcher is None:
        launcher = served.launcher()
        if launcher is None:
            raise UsageError("cannot tell which loom program runs this; pass --launcher")
    launcher = os.path.abspath(launcher)
    if not (os.path.isfile(launcher) and os.access(launcher, os.X_OK)):
        raise UsageError(f"--launcher {launcher}: not an executable file")
    words = shlex.split(cc or os.environ.get("CC", "")) or \
        next(([found] for name in ("cc", "gcc", "clang") if (found := shutil.which(name))), [])
    if not words:
        raise LoomError("no C compiler to build the native client with (cc, gcc or clang; or set CC)", 3)
    source = os.path.join(os.path.dirname(os.path.abspath(served.__file__)), "client.c")
    with open(source, "rb") as f:
        text = b'#define LOOM_LAUNCHER "' + _c_string(os.fsencode(launcher)) + b'"\n#line 1 "client.c"\n' + f.read()
    # The compiler writes into a private folder; the program is then published like any output:
    # atomically, with its mode set, a folder or a missing parent a one-line error.
    with tempfile.TemporaryDirectory(prefix="loom-client-") as scratch:
        built = os.path.join(scratch, "loom-client")
        try:
            r = subprocess.run([*words, "-O2", "-x", "c", "-", "-o", built], input=text, capture_output=True)
        except OSError as e:
            raise LoomError(f"cannot run the C compiler {words[0]}: {e.strerror}", 3) from None
        if r.returncode != 0 or not os.path.isfile(built):
            tail = r.stderr.decode(errors="replace").strip().splitlines()[-3:] or [f"exit status {r.returncode}"]
            raise LoomError(f"the C compiler {words[0]} failed on the native client: " + " / ".join(tail), 3)
        with open(built, "rb") as f:
            program = f.read()
    atomic_write(output, program, mode=0o755)
    return 0


def _c_string(data: bytes) -> bytes:
    """`data` as the inside of a C string literal (octal escapes: never read on into a next digit)."""
    return b"".join(bytes([c]) if 0x20 <= c < 0x7F and c not in b'"\\?' else b"\\%03o" % c for c in data)


@server.command()
@click.option("--all", "every", is_flag=True, help="Stop every server of this user (any loom build).")
def stop(every: bool) -> int:
    """Stop this loom's server once its running commands end; wait until it has exited."""
    from loomcli.runtime import served

    place, key, _ = _settings(keyed=not every)
    keys = [key]
    if every:
        keys = sorted(name[:-len(".sock")] for name in os.listdir(place) if name.endswith(".sock")) \
            if served.private(place) else []
    stopped = [pid for pid in (_stop(place, k) for k in keys) if pid is not None]
    if not stopped:
        click.echo("loom server: not running")
    for pid in stopped:
        click.echo(f"loom server: stopped (pid {pid})")
    return 0


def _stop(place: str, key: str) -> int | None:
    """Stop the server of `key` and wait until its process has ended: its pid, None if none ran."""
    from loomcli.runtime.resident import ask

    doc = _status(place, key)
    if doc is None:
        return None
    try:  # before the stop: once it has ended, its pid may be another's
        pidfd: int | None = os.pidfd_open(int(doc["pid"]))
    except OSError:
        pidfd = None
    answer = ask(place, key, b"stop")
    if answer is None:
        if pidfd is not None:
            os.close(pidfd)
        return None
    sock = answer[0]
    try:
        while sock.recv(4096):  # the connection closes as the server ends
            pass
    except OSError:
        pass
    sock.close()
    if pidfd is not None:
        import select

        select.select([pidfd], [], [])
        os.close(pidfd)
    return int(doc["pid"])


@server.command()
@click.option("--idle-timeout", "idle", metavar="SECONDS",
              help="Exit after this many seconds without a command (default: LOOM_SERVER_IDLE, else 600).")
@click.option("--lock-fd", type=int, hidden=True)
@click.option("--ready-fd", type=int, hidden=True)
@click.option("--launcher", hidden=True, help="The `loom` script the starter ran (for the native client).")
def run(idle: str | None, lock_fd: int | None, ready_fd: int | None, launcher: str | None) -> int:
    """Be this loom's server, in the foreground (Ctrl-C stops it)."""
    import fcntl

    from loomcli import __version__
    from loomcli.runtime import resident, served, template
    from loomcli.service.fingerprint import compiler_fingerprint, server_key

    def report(line: str) -> None:
        if ready_fd is not None:
            try:
                os.write(ready_fd, line.encode() + b"\n")
            except OSError:
                pass

    try:
        if not template.available():
            raise LoomError("the resident server needs Linux (fork, pidfds, descriptor passing)", 3)
        place, key, timeout = _settings(idle)
        if lock_fd is not None:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours: handed over by the starter
            lock: int | None = lock_fd
        else:
            lock = served.take_lock(place, key)
        if lock is None:
            doc = _status(place, key)
            if doc is not None:
                report(f"running {doc['pid']}")
                click.echo(f"loom server: running already (pid {doc['pid']})", err=True)
                return 0
            raise LoomError(f"{place}: cannot take this loom's server lock", 3)
        native = resident.Native.of(launcher, os.environ.pop(served.ENV_ORIGIN, None), server_key)
        os.chdir("/")
        group = click.get_current_context().find_root().command
        prepare(group)
        if server_key() != key:
            raise LoomError("loom's code changed while the server started", 3)
        describe = {"version": __version__, "code_hash": compiler_fingerprint()}
        instance = resident.Server(place, key, describe, command_line(group), timeout, lock, native)
        instance.listen()
    except BaseException as e:
        report(f"error: {e}")
        raise
    report("ready")
    if ready_fd is not None:
        os.close(ready_fd)
    instance.serve()
    return 0


def command_line(group: Any) -> Callable[[list[str]], Any]:
    """The ordinary command line of `group` (the root `loom` group), as a child runs it."""
    from loomcli.driver import run_cli

    def run(argv: list[str]) -> Any:
        return run_cli(group, argv)

    return run


def prepare(group: Any) -> None:
    """Make this process a warm template: every command of `group`, every
    module of loom and PRELOAD imported, and those with a `warm()` prepared
    (what cannot be imported here, llvmlite missing say, is left to the
    commands to report)."""
    import importlib
    import pkgutil

    import loomcli
    from loomcli.runtime.isolated import warm_and_freeze

    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        group.get_command(ctx, name)
    names = [info.name for info in pkgutil.walk_packages(loomcli.__path__, "loomcli.")
             if not info.name.endswith("__main__")]
    usable = []
    for name in [*sorted(names), *PRELOAD]:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        usable.append(name)
    rehearse()
    warm_and_freeze(usable)  # the template: every child forked from it starts warm
    sys.stdout.flush()


# A small kernel the template compiles once for one profile of each code generator (`rehearse`).
REHEARSAL = b"""\
kernel.def export("k") @k(%n: index) {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%n: index, %a: f32, %x: buffer) {
  %zero = index.constant 0 : offset
  %i = kernel.workitem.dispatch.id<x> : index
  %v = buffer.view %x[%zero] : buffer -> view<[%n]xf32>
  %xi = view.load %v[%i] : view<[%n]xf32> -> f32
  %r = scalar.mulf %a, %xi : f32
  view.store %r, %v[%i] : f32, view<[%n]xf32>
  kernel.return
}
"""
REHEARSED = ("spirv:vulkan1.3", "amdgpu:gfx1100", "nvptx:sm_80")


def rehearse() -> list[str]:
    """Compile `REHEARSAL` for each of `REHEARSED` through the compile entry
    point, here, and throw the results away: what a first compile builds
    lazily (LLVM's target machine, its passes' and code generator's state,
    loom's own caches) is then the template's, shared by every child instead
    of built again by each (a few milliseconds of every .hsaco request; other
    chips still make their own target machine, about 2 ms). LLVM runs in this
    process, as in every child. A generator that cannot run here (llvmlite
    missing, say) is left to the commands to report. The targets that compiled."""
    from loomcli.emit import NATIVE_FORMAT
    from loomcli.runtime.isolated import become_worker
    from loomcli.service.compile import compile_request
    from loomcli.service.request import CompileRequest

    become_worker()
    compiled = []
    for target in REHEARSED:
        outcome = compile_request(CompileRequest(module=REHEARSAL, target=target, launch_config=True, manifest=True,
                                                 format=NATIVE_FORMAT[target.split(":")[0]], path="<rehearsal>"))
        if outcome.status == "ok":
            compiled.append(target)
    return compiled
