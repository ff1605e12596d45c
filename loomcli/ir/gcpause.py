"""Pausing Python's cyclic garbage collector while IR is built.

Parsing and decoding allocate many long-lived objects and no garbage; the
collector would rescan them again and again (measured: it nearly doubles
the time of parsing a 1 MB module), so builders pause it and restore it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
