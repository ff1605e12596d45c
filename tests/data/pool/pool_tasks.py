"""Task functions for the worker-pool tests (imported by pool workers by name)."""

from __future__ import annotations

import json
import os
import signal
import time


def echo(header, payload, context):
    return json.dumps({"ordinal": context.ordinal, "pid": os.getpid(), "scratch": os.path.isdir(context.scratch),
                       "payload": payload.decode(), "header": header}).encode()


def environ(header, payload, context):
    return json.dumps({"ppid": os.getppid(), "makeflags": os.environ.get("MAKEFLAGS")}).encode()


def die(header, payload, context):
    os.kill(os.getpid(), signal.SIGKILL)


def abort(header, payload, context):
    os.abort()


def fail(header, payload, context):
    raise ValueError("bad request")


def wait_for(header, payload, context):
    """Block until the file named in the header exists (a test releases it)."""
    with open(header["started"], "a"):
        pass
    while not os.path.exists(header["release"]):
        time.sleep(0.01)
    return str(os.getpid()).encode()
