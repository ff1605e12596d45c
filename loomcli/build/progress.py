"""How `loom build` shows its progress: a rich live display in a terminal,
plain lines under CI, a pipe or a build tool, nothing with `-q`.

This is the one place below `commands/` that may import rich (lazily, and
only for the live display).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from loomcli.runtime.pool import TaskEvent

STATES = ("compiled", "cached", "up-to-date", "failed")


def choose(mode: str, quiet: bool, stream: TextIO | None = None, environ: dict[str, str] | None = None) -> str:
    """`--progress auto|rich|plain|none` and `-q` -> the display to use."""
    if quiet or mode == "none":
        return "none"
    if mode != "auto":
        return mode
    from loomcli import settings

    out = stream if stream is not None else sys.stdout
    tty = hasattr(out, "isatty") and out.isatty()
    if not tty or settings.plain_terminal(environ) or settings.makeflags(environ) is not None:
        return "plain"
    return "rich"


class _Tally:
    """What every display counts (thread-safe: pool threads report task events)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.targets: list[str] = []
        self.totals: dict[str, int] = {}
        self.counts: dict[str, Counter[str]] = {}
        self.running: Counter[str] = Counter()
        self.start = time.monotonic()

    def plan(self, targets: list[str], totals: dict[str, int]) -> None:
        with self.lock:
            self.targets = list(targets)
            self.totals = dict(totals)
            self.counts = {t: Counter() for t in targets}

    def item(self, target: str, state: str) -> None:
        with self.lock:
            self.counts[target][state] += 1

    def started(self, label: str) -> None:
        with self.lock:
            self.running[label] += 1

    def finished(self, event: TaskEvent) -> None:
        with self.lock:
            if self.running[event.label] > 0:
                self.running[event.label] -= 1
            self.running += Counter()  # drops zero counts

    def done(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())

    def total(self) -> int:
        return sum(self.totals.values())

    def summary(self) -> str:
        c: Counter[str] = Counter()
        for counts in self.counts.values():
            c.update(counts)
        return summary_line(self.total(), len(self.targets), c, time.monotonic() - self.start)


def summary_line(items: int, targets: int, counts: Mapping[str, int], elapsed: float) -> str:
    """The build's last line after its headline (also printed by loomcli.build.noop)."""
    return (f"{items} items for {targets} target{'s' if targets != 1 else ''}: "
            f"{counts.get('compiled', 0)} compiled, {counts.get('cached', 0)} cached, "
            f"{counts.get('up-to-date', 0)} up to date, {counts.get('failed', 0)} failed in {elapsed:.2f}s")


class NoProgress(_Tally):
    def item(self, target: str, name: str, state: str) -> None:  # type: ignore[override]
        _Tally.item(self, target, state)

    def message(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def close(self, headline: str) -> None:
        pass


class PlainProgress(NoProgress):
    """One line per item built, then a summary."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self.stream = stream if stream is not None else sys.stdout

    def item(self, target: str, name: str, state: str) -> None:  # type: ignore[override]
        _Tally.item(self, target, state)
        if state != "up-to-date":
            with self.lock:
                line = f"loom: [{self.done()}/{self.total()}] {state} {name} {target}"
                print(line, file=self.stream, flush=True)

    def close(self, headline: str) -> None:
        print(f"loom: {headline}: {self.summary()}", file=self.stream, flush=True)


class RichProgress(NoProgress):
    """A live table: per-target counts, cache hits, running items, elapsed, estimate."""

    def __init__(self, title: str) -> None:
        super().__init__()
        from rich.console import Console
        from rich.live import Live

        from loomcli import settings

        self.title = title
        # COLUMNS clamped (rich reads it unchecked); NO_COLOR is rich's own to honour.
        self.console = Console(width=settings.columns())
        self.live = Live(console=self.console, refresh_per_second=8, transient=False,
                         get_renderable=self.render)
        self.live.start()

    def render(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        with self.lock:
            table = Table(title=self.title, title_justify="left", expand=False, box=None, padding=(0, 2))
            for col in ("target", "done", "compiled", "cached", "up to date", "failed"):
                table.add_column(col, justify="left" if col == "target" else "right")
            for t in self.targets:
                c = self.counts.get(t, Counter())
                table.add_row(t, f"{sum(c.values())}/{self.totals.get(t, 0)}", str(c["compiled"]), str(c["cached"]),
                              str(c["up-to-date"]), Text(str(c["failed"]), style="red" if c["failed"] else ""))
            elapsed = time.monotonic() - self.start
            done, total = self.done(), self.total()
            eta = f", about {elapsed / done * (total - done):.1f}s left" if 0 < done < total else ""
            running = ", ".join(sorted(self.running.elements())[:4]) or "-"
            table.caption = f"elapsed {elapsed:.1f}s{eta} | running: {running}"
            table.caption_justify = "left"
            return table

    def message(self, text: str) -> None:
        self.live.console.print(text, markup=False, highlight=False)

    def close(self, headline: str) -> None:
        self.live.refresh()
        self.live.stop()
        self.console.print(f"loom: {headline}: {self.summary()}", markup=False, highlight=False)


def make_progress(kind: str, title: str) -> NoProgress:
    if kind == "rich":
        return RichProgress(title)
    if kind == "plain":
        return PlainProgress()
    return NoProgress()
