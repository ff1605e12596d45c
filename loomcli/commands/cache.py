"""`loom cache stats|clear|prune [--max-size S]|path`: look after the compile cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from loomcli.driver import UsageError

if TYPE_CHECKING:
    from loomcli.cache import Cache


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _warn(message: str) -> None:
    click.echo(f"loom: warning: {message}", err=True)


def _cache() -> Cache:
    from loomcli import settings
    from loomcli.cache import Cache

    root = settings.cache_dir()
    if root is None:
        raise UsageError("no cache folder: set LOOM_CACHE_DIR (HOME is not an absolute path)")
    return Cache(root, settings.cache_max_size(), warn=_warn)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cache() -> None:
    """Inspect or trim the compile cache ($LOOM_CACHE_DIR, else ~/.cache/loom)."""


@cache.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for machines.")
def stats(as_json: bool) -> int:
    """Entries, size, the size bound, and hits/misses/corrupt entries so far."""
    from loomcli.cache import enabled

    c = _cache()
    problem = c.trust_problem()
    if problem is not None:
        _warn(f"{problem}; builds do not use it")
    count, size = c.usage()
    totals = c.totals()
    if as_json:
        import json

        click.echo(json.dumps({"path": c.root, "enabled": enabled(), "entries": count, "bytes": size,
                               "max_bytes": c.max_size, **{k: totals.get(k, 0) for k in
                                                            ("hits", "misses", "stores", "corrupt")}}))
        return 0
    click.echo(f"path: {c.root}{'' if enabled() else ' (off: LOOM_CACHE=0)'}")
    click.echo(f"entries: {count}")
    click.echo(f"size: {_human(size)} of {_human(c.max_size)}")
    click.echo("hits: {hits}  misses: {misses}  stores: {stores}  corrupt: {corrupt}".format(
        **{k: totals.get(k, 0) for k in ("hits", "misses", "stores", "corrupt")}))
    return 0


@cache.command()
def clear() -> int:
    """Remove every entry (and temporary files that writers which died left behind)."""
    done = _cache().clear()
    click.echo(f"removed {done.entries} entries ({_human(done.bytes)}), {done.temps} stale temporary files")
    return 0


@cache.command()
@click.option("--max-size", "max_size", metavar="S", help="Size to prune to, e.g. 500M or 2G "
              "(default: LOOM_CACHE_MAX_SIZE, else 2G).")
def prune(max_size: str | None) -> int:
    """Evict least recently used entries until the cache fits; remove stale temporary files."""
    from loomcli.cache import parse_size

    c = _cache()
    limit = None
    if max_size is not None:
        try:
            limit = parse_size(max_size)
        except ValueError as e:
            raise UsageError(f"--max-size: {e}") from None
    done = c.prune(limit)
    click.echo(f"removed {done.entries} entries ({_human(done.bytes)}), {done.temps} stale temporary files")
    return 0


@cache.command()
def path() -> int:
    """Print the cache folder."""
    click.echo(_cache().root)
    return 0
