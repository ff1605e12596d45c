"""`loom worker --persistent_worker`: Bazel's persistent worker (JSON protocol), TOOLCHAIN.md section 12.

Bazel starts it once per kind of action and hands it each action's command
line; every one runs in a child forked from the same warm template as the
resident server's, a child that may then serve the next one
(`loomcli.commands.server.prepare`, `loomcli.runtime.persistent`). Run
without a worker, the same action is `loom worker @PARAMS`: the entry point
reads the command line from the params file (one argument per line) and
runs it as any other.
"""

from __future__ import annotations

import os
import sys

import click

from loomcli.driver import LoomError, UsageError


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--persistent_worker", "persistent", is_flag=True,
              help="Serve WorkRequests on stdin, WorkResponses on stdout (how Bazel starts it).")
def worker(persistent: bool) -> int:
    """Be a Bazel persistent worker; `loom worker @PARAMS` runs the command line in PARAMS."""
    from loomcli.commands.server import command_line, prepare
    from loomcli.runtime import action, template
    from loomcli.runtime.persistent import PersistentWorker, ProtocolError

    if not persistent:
        raise UsageError("loom worker: Bazel runs it as `loom worker --persistent_worker`, "
                         "or `loom worker @PARAMS` for one command line")
    if not template.available():
        raise UsageError("loom worker needs Linux (fork and pidfds); turn workers off with "
                         "--strategy=LoomCompile=sandboxed")
    group = click.get_current_context().find_root().command
    prepare(group)
    # Responses go to a private copy of stdout; anything else printed to fd 1 goes to the
    # worker's log (stderr), never into the protocol.
    responses = os.fdopen(os.dup(1), "wb")
    run = command_line(group)
    served = PersistentWorker(lambda argv: run(action.prepare(argv)), sys.stdin.buffer, responses)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        served.serve()
    except ProtocolError as e:
        raise LoomError(f"loom worker: the input is not a stream of WorkRequests: {e}", 2) from None
    return 0
