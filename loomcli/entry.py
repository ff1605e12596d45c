"""The `loom` executable's entry point (and `python -m loomcli`'s).

A `loom build` that has nothing to do is answered from stat data alone
(`loomcli.build.noop`), before click, the project parser or the engine are
imported: it is run again and again by make, CMake and editors, and its
cost is almost all start-up. Everything else goes to the command line in
`loomcli.cli`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing and collections.abc would cost a no-op build more than its check
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn


def main(argv: Sequence[str] | None = None) -> Any:
    """Run one command. As the program (no `argv`) the process then ends
    without the interpreter's finalization; a caller that passes `argv`, or
    a run under a profiler or tracer, gets `SystemExit` as from any click
    program.

    As the program, Ctrl-C is `loom: error: interrupted`, exit 130, from
    this first line to the last: during start-up (before the command line
    is even read) as while a build runs, and while the process ends (exit
    handlers finish first). The audit event `loom.main` marks the point
    from which that holds (tests send SIGINT at counted events after it)."""
    if argv is not None or sys.gettrace() is not None or sys.getprofile() is not None:
        # a caller, a profiler or coverage wants the ordinary exit (their reports are written at it)
        return _run(list(sys.argv[1:] if argv is None else argv))
    import _signal  # type: ignore[import-not-found]  # no stub; the light, enum-free signal module

    _signal.signal(_signal.SIGINT, _on_interrupt)
    sys.audit("loom.main")
    try:
        try:
            _run(sys.argv[1:])
        except SystemExit as e:
            _end(e.code)
        _end(0)
    except KeyboardInterrupt:  # anywhere the command line's own handling does not reach
        _end(130, interrupted=True)


_ending = [False, False]  # [the process is ending, Ctrl-C came meanwhile]


def _on_interrupt(signum: int, frame: object) -> None:
    """SIGINT: KeyboardInterrupt (every layer cleans up on its way out), but
    noted, not raised, once the process is ending."""
    if _ending[0]:
        _ending[1] = True
        return
    raise KeyboardInterrupt


def _run(args: list[str]) -> Any:
    if args[:1] == ["worker"]:  # a Bazel action: its bytes depend on its inputs, Bazel schedules it
        import os

        os.environ.update(LOOM_CACHE="0", LOOM_JOBS="1")
        if len(args) == 2 and args[1].startswith("@"):
            from loomcli.runtime.action import prepare

            args = prepare(_params_file(args[1][1:]))
    if args[:1] == ["build"]:
        from loomcli.build.noop import check

        code = check(args[1:])
        if code is not None:
            sys.exit(code)
    if args[:1] and args[0] in SERVED:
        code = _served(args)
        if code is not None:
            sys.exit(code)
    if args[:1] == ["build"]:
        _prestart_workers(args[1:])
    from loomcli.cli import main as cli_main

    return cli_main(args)


def _params_file(path: str) -> list[str]:
    """The command line a Bazel action runs as `loom worker @PATH` when no
    persistent worker serves it: PATH holds one argument per line (Bazel's
    "multiline" params file), as the worker's request would carry them."""
    import os

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        print(f"loom: error: {path}: {e.strerror}", file=sys.stderr)
        sys.exit(1)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [os.fsdecode(line) for line in lines]


# The commands this user's resident server runs when there is one (TOOLCHAIN.md section 12).
# The others are near Python's own start-up already (`launch-eval`, `--version`, a no-op
# build), or are about the server (`server`).
SERVED = frozenset({"build", "compile", "emit", "fmt", "frontier", "link", "opt", "test"})


def _served(args: list[str]) -> int | None:
    """The exit status of `args` run by this user's server of this loom
    (`loomcli.runtime.served`), None: run it here. `LOOM_SERVER` and
    `LOOM_SERVER_IDLE` are checked first: a bad value is a usage error."""
    import os

    from loomcli.runtime import served

    try:
        mode = served.mode(os.environ)
        served.idle_timeout(os.environ)
    except served.BadSetting as e:
        print(f"loom: error: {e}", file=sys.stderr)
        return 2
    if mode == "off":
        return None
    from loomcli.service.fingerprint import server_key

    key = server_key()
    return None if key is None else served.serve(args, key, auto=mode == "auto")


# What a `loom build` pool preloads when a target emits through LLVM
# (`loomcli.service.session.preload_for`); a pool this does not cover starts its own server.
BUILD_PRELOAD = ("loomcli.service.compile", "loomcli.build.tasks", "loomcli.emit.llvm.codegen")


def _prestart_workers(args: list[str]) -> None:
    """A `loom build` that is not a no-op almost always compiles: start its
    pool's fork server now, so it warms up (0.25 s) while the command line,
    the project and the sources are read, instead of after (see
    `loomcli.runtime.spawn.prestart`). Not when the build can only run
    serially; unused, it is killed at exit."""
    import os

    if not hasattr(os, "sched_getaffinity"):  # not Linux: no fork server (`forkserver.available`)
        return
    from loomcli import settings

    try:
        n = settings.jobs()
    except Exception:  # a bad LOOM_JOBS: the command says what is wrong; nothing to warm up for it
        return
    jobs = None if n is None else str(n)
    for i, arg in enumerate(args):  # the last -j wins, as in click
        if arg in ("-j", "--jobs") and i + 1 < len(args):
            jobs = args[i + 1]
        elif arg.startswith("--jobs="):
            jobs = arg[len("--jobs="):]
        elif arg.startswith("-j") and len(arg) > 2:
            jobs = arg[2:]
    if jobs is not None and jobs.strip() in ("0", "1"):
        return
    if jobs is None and len(os.sched_getaffinity(0)) < 2:
        return
    from loomcli.runtime import spawn

    spawn.prestart(BUILD_PRELOAD)


def _end(code: object, interrupted: bool = False) -> NoReturn:
    """Exit with `code` as `sys.exit` would, minus the interpreter's
    finalization: freeing every object of a build one by one costs 30 to
    40 ms after its work is done, at every loom run. Exit handlers still
    run (temporary folders, the shared LLVM worker) and output is flushed;
    every file loom writes is closed before its command returns. A Ctrl-C
    meanwhile waits for them, then makes the exit 130."""
    _ending[0] = True
    import atexit
    import os

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    if (interrupted or _ending[1]) and status != 130:
        status = 130
        interrupted = True
    if interrupted:
        try:
            print("loom: error: interrupted", file=sys.stderr)
        except (OSError, ValueError, AttributeError):  # no stderr to say it on
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a reader that went away, a closed stream: nothing more to say
            pass
    os._exit(status & 0xFF)
