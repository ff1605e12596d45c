"""SIGTERM as Ctrl-C: while loom builds or compiles, `kill` takes the same
path as an interactive interrupt (drain the pool, return every jobserver
token, leave no partial output, exit 130) instead of the default action's
abrupt end with nothing cleaned up."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises `KeyboardInterrupt` in the main thread meanwhile (only
    the main thread can have signal handlers; elsewhere this does nothing).
    Nested uses restore each other's handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
