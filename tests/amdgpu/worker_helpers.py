"""Functions the isolated worker runs in tests (imported there by name)."""

from __future__ import annotations

import os
import signal
from typing import Any


def echo(header: dict[str, Any], payload: bytes) -> bytes:
    return header.get("prefix", "").encode() + payload


def fail(header: dict[str, Any], payload: bytes) -> bytes:
    raise ValueError(header.get("message", "failed"))


def die(header: dict[str, Any], payload: bytes) -> bytes:
    """End the worker the hard way, as an LLVM abort would."""
    os.kill(os.getpid(), int(header.get("signal", signal.SIGABRT)))
    return b""


def exit_with(header: dict[str, Any], payload: bytes) -> bytes:
    os._exit(int(header.get("status", 1)))


def noisy(header: dict[str, Any], payload: bytes) -> bytes:
    """Prints to stdout (as a library might); the reply must stay intact."""
    print("chatter on stdout")
    os.write(1, b"raw chatter on fd 1\n")
    return b"quiet"
