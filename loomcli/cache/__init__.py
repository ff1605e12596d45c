"""The content-addressed compile cache (TOOLCHAIN.md section 10).

An entry is one file, `ROOT/v1/<2 hex>/<key>`, published atomically (a
temporary file in the same folder, then a rename), so concurrent builds
sharing a folder never see a partial entry. Its layout:

    magic "LOOMCACHE1\\n" | sha256 of the data (32 bytes) | u64 data length | data

Every read checks the magic, the length and the checksum; an entry that
fails is a miss, is removed, and is counted. A hit refreshes the entry's
mtime, which is what least-recently-used eviction (`prune`) orders by.
A folder we cannot write turns the cache off for the run with one warning.

`open_cache()` reads the settings: `LOOM_CACHE=0` (or `--no-cache`) turns it
off, `LOOM_CACHE_DIR` moves it (default `$XDG_CACHE_HOME/loom`, else
`~/.cache/loom`), `LOOM_CACHE_MAX_SIZE` bounds it (default 2G).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

MAGIC = b"LOOMCACHE1\n"
_HEAD = struct.Struct("<32sQ")
DEFAULT_MAX_SIZE = 2 << 30
_KEY = re.compile(r"^[0-9a-f]{64}$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """`500M`, `2G`, `1.5GiB`, `4096` -> bytes (ValueError otherwise)."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"not a size: {text!r} (write e.g. 500M or 2G)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def default_root(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    if env.get("LOOM_CACHE_DIR"):
        return env["LOOM_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "loom")


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("LOOM_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


# Writers publish through a temporary file (`TEMP_PREFIX`...) renamed into
# place; a writer holds it only for one `put` (milliseconds, seconds for a
# large entry on a slow disk). One older than STALE_TEMP_AGE_S belongs to a
# writer that died (SIGKILL, power loss) and will never be renamed, so prune
# and clear remove it. A younger one is left alone: removing a live writer's
# file would make its rename fail, and that writer would then build without
# its cache. An hour is far beyond any live write and still reclaims the
# leftovers the next time anyone prunes.
TEMP_PREFIX = ".tmp-"
STALE_TEMP_AGE_S = 3600


class Pruned(NamedTuple):
    entries: int      # entries removed
    bytes: int        # their bytes
    temps: int        # stale temporary files removed


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    stores: int = 0
    corrupt: int = 0  # entries that failed verification (removed)


class Cache:
    """One cache folder. Thread-safe; safe for several processes at once."""

    def __init__(self, root: str, max_size: int = DEFAULT_MAX_SIZE,
                 warn: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.max_size = max_size
        self.stats = CacheStats()
        self._warn = warn
        self._lock = threading.Lock()
        self._writable = True

    # ------------------------------------------------------------ entries

    def _path(self, key: str) -> str:
        if not _KEY.match(key):
            raise ValueError(f"bad cache key {key!r}")
        return os.path.join(self.root, "v1", key[:2], key)

    def get(self, key: str) -> bytes | None:
        """The verified data under `key`, or None (a miss)."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError:
            self._count("misses")
            return None
        data = _verify(raw)
        if data is None:
            self._count("corrupt")
            self._count("misses")
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used = oldest mtime
        self._count("hits")
        return data

    def put(self, key: str, data: bytes) -> None:
        """Publish `data` under `key` atomically; an unwritable folder warns once and turns the cache off."""
        if not self._writable:
            return
        path = self._path(key)
        folder = os.path.dirname(path)
        tmp = None
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=folder)
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + _HEAD.pack(hashlib.sha256(data).digest(), len(data)) + data)
            os.replace(tmp, path)
            tmp = None
            self._count("stores")
        except OSError as e:
            with self._lock:
                first = self._writable
                self._writable = False
            if first and self._warn is not None:
                self._warn(f"cache folder {self.root} is not writable ({e.strerror or e}); building without the cache")
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    # ------------------------------------------------------------ maintenance

    def entries(self) -> Iterator[tuple[str, int, float]]:
        """(path, size, mtime) of every entry."""
        base = os.path.join(self.root, "v1")
        try:
            shards = sorted(os.scandir(base), key=lambda e: e.name)
        except OSError:
            return
        for shard in shards:
            if not shard.is_dir():
                continue
            try:
                items = list(os.scandir(shard.path))
            except OSError:
                continue
            for item in items:
                if _KEY.match(item.name):
                    try:
                        st = item.stat()
                    except OSError:
                        continue
                    yield item.path, st.st_size, st.st_mtime

    def usage(self) -> tuple[int, int]:
        """(entry count, total bytes)."""
        count = size = 0
        for _, n, _ in self.entries():
            count += 1
            size += n
        return count, size

    def prune(self, max_size: int | None = None) -> Pruned:
        """Evict least recently used entries until the cache fits, and remove
        the stale temporary files of writers that died (`remove_stale_temps`)."""
        limit = self.max_size if max_size is None else max_size
        temps = self.remove_stale_temps()
        items = sorted(self.entries(), key=lambda e: (e[2], e[0]))
        total = sum(n for _, n, _ in items)
        removed = freed = 0
        for path, n, _ in items:
            if total <= limit:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
                freed += n
            total -= n
        return Pruned(removed, freed, temps)

    def clear(self) -> Pruned:
        """Remove every entry, the counters and the stale temporary files (a
        younger temporary file may be a live writer's, and stays)."""
        temps = self.remove_stale_temps()
        removed = freed = 0
        for path, n, _ in list(self.entries()):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
                freed += n
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.root, "stats.json"))
        return Pruned(removed, freed, temps)

    def remove_stale_temps(self, now: float | None = None) -> int:
        """Remove temporary files (`.tmp-*`, in the cache folder and its
        shards) last written more than STALE_TEMP_AGE_S ago; the count removed."""
        limit = (time.time() if now is None else now) - STALE_TEMP_AGE_S
        removed = 0
        for folder, _, files in os.walk(self.root):
            for name in files:
                if not name.startswith(TEMP_PREFIX):
                    continue
                path = os.path.join(folder, name)
                try:
                    if os.lstat(path).st_mtime < limit:
                        os.unlink(path)
                        removed += 1
                except OSError:  # renamed or removed meanwhile by its writer or another pruner
                    continue
        return removed

    # ------------------------------------------------------------ totals across runs

    def record_totals(self) -> None:
        """Add this run's counters to `stats.json` (under a lock file)."""
        if not self._writable or not any(vars(self.stats).values()):
            return
        try:
            import fcntl

            os.makedirs(self.root, exist_ok=True)
            with open(os.path.join(self.root, "stats.lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                totals = self.totals()
                for k, v in vars(self.stats).items():
                    totals[k] = totals.get(k, 0) + v
                path = os.path.join(self.root, "stats.json")
                fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=self.root)
                with os.fdopen(fd, "w") as f:
                    json.dump(totals, f, sort_keys=True)
                os.replace(tmp, path)
        except OSError:
            pass

    def totals(self) -> dict[str, int]:
        try:
            with open(os.path.join(self.root, "stats.json")) as f:
                data = json.load(f)
            return {k: int(v) for k, v in data.items() if k in vars(CacheStats())}
        except (OSError, ValueError, AttributeError):
            return {}


def _verify(raw: bytes) -> bytes | None:
    if not raw.startswith(MAGIC) or len(raw) < len(MAGIC) + _HEAD.size:
        return None
    digest, length = _HEAD.unpack_from(raw, len(MAGIC))
    data = raw[len(MAGIC) + _HEAD.size:]
    if len(data) != length or hashlib.sha256(data).digest() != digest:
        return None
    return data


def open_cache(no_cache: bool = False, environ: Mapping[str, str] | None = None,
               warn: Callable[[str], None] | None = None) -> Cache | None:
    """The cache the settings ask for, or None when it is off."""
    env = os.environ if environ is None else environ
    if no_cache or not enabled(env):
        return None
    max_size = DEFAULT_MAX_SIZE
    if env.get("LOOM_CACHE_MAX_SIZE"):
        try:
            max_size = parse_size(env["LOOM_CACHE_MAX_SIZE"])
        except ValueError as e:
            from loomcli.errors import UsageError

            raise UsageError(f"LOOM_CACHE_MAX_SIZE: {e}") from None
    return Cache(default_root(env), max_size, warn)
