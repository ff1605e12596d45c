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


class _Cycle:
    """An object only the collector frees (it refers to itself)."""

    def __init__(self):
        self.me = self


_LEFT = []  # weak references to what `leave_a_cycle` left behind


def leave_a_cycle(header, payload, context):
    """Leave cyclic garbage behind; say whether the collector runs meanwhile."""
    import gc
    import weakref

    _LEFT.append(weakref.ref(_Cycle()))
    return json.dumps({"collecting": gc.isenabled()}).encode()


def cycles_left(header, payload, context):
    """How many of the cycles earlier tasks left are still there."""
    return json.dumps({"left": sum(1 for ref in _LEFT if ref() is not None), "of": len(_LEFT)}).encode()


def where(header, payload, context):
    """Which process runs this task, for which slot, where its scratch folder is and what MAKEFLAGS it sees."""
    return json.dumps({"pid": os.getpid(), "ordinal": context.ordinal, "scratch": context.scratch,
                       "made": os.path.isdir(context.scratch), "makeflags": os.environ.get("MAKEFLAGS")}).encode()
