"""The content-addressed compile cache (TOOLCHAIN.md section 10).

An entry is one file, `ROOT/v1/<2 hex>/<key>`, published atomically (an
anonymous file linked into place, or a temporary file renamed), so
concurrent builds sharing a folder never see a partial entry. Its layout:

    magic "LOOMCACHE2\\n" | key (32 bytes) | u64 data length | sha256 (32 bytes) | data

where the sha256 covers the magic, the key, the length and the data. Every
read checks all of it against the key it asked for, so an entry is bound to
its key: a file copied, swapped or restored under another key's name is a
corrupt entry, not another kernel's code. An entry that fails is a miss, is
removed, and is counted. A hit refreshes the entry's mtime, which is what
least-recently-used eviction (`prune`) orders by.

Everything in the folder is read as hostile: regular files only, opened
without following a link and without blocking (a FIFO planted at an
entry's name is refused, not waited on), size-checked before reading, the
counters (`stats.json`) too. A damaged counter file is reset with one
warning. The trust model (docs/build.md): the cache is trusted as far as
whoever can write its folder, so a folder owned by another user or
writable by anyone but its owner is refused (`trust_problem`) and the
build runs without it; loom makes its own folders 0700. Cleaning and
pruning remove only what loom names and writes (entries, its own temporary
files, the counters), only in the folders it made, and leave a folder that
holds anything else alone, with one warning.

`open_cache()` reads the settings (`loomcli.settings`): `LOOM_CACHE=0` (or
`--no-cache`) turns it off, `LOOM_CACHE_DIR` moves it (default
`$XDG_CACHE_HOME/loom`, else `~/.cache/loom`), `LOOM_CACHE_MAX_SIZE` bounds
it (default 2G).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import NamedTuple

from loomcli import settings
from loomcli.settings import DEFAULT_CACHE_MAX_SIZE as DEFAULT_MAX_SIZE
from loomcli.settings import parse_size as parse_size

__all__ = ["DEFAULT_MAX_SIZE", "MAGIC", "Cache", "CacheStats", "Pruned", "open_cache", "parse_size"]

MAGIC = b"LOOMCACHE2\n"
_HEAD = struct.Struct("<32sQ32s")   # key, data length, sha256
_KEY = re.compile(r"^[0-9a-f]{64}$")
_SHARD = re.compile(r"^[0-9a-f]{2}$")
VERSION_FOLDER = "v1"
STATS_FILE = "stats.json"
LOCK_FILE = "stats.lock"

# Bounds checked before anything is read. No artifact of a 64 MiB input
# (the input limit) comes near MAX_ENTRY_BYTES; a larger one is not
# stored, and a larger file at an entry's name is corrupt.
MAX_ENTRY_BYTES = 256 << 20
MAX_STATS_BYTES = 64 << 10
MAX_COUNT = (1 << 63) - 1
# How long `record_totals` waits for another process's lock on the counters
# before leaving this run's counts out (with a warning): a stopped process
# holding it must not hang every build at its end.
LOCK_WAIT_S = 5.0

# Writers publish through an anonymous file linked into place; where the
# system has none, through a temporary file (`.tmp-` and 16 hex digits)
# renamed into place. A writer holds one only for one `put` (milliseconds,
# seconds for a large entry on a slow disk). One older than
# STALE_TEMP_AGE_S belongs to a writer that died (SIGKILL, power loss) and
# will never be renamed, so prune and clear remove it. A younger one is
# left alone: removing a live writer's file would make its rename fail.
TEMP_PREFIX = ".tmp-"
_TEMP = re.compile(r"^\.tmp-[0-9a-f]{16}$")
STALE_TEMP_AGE_S = 3600

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PRIVATE = 0o700


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


COUNTERS = tuple(f.name for f in fields(CacheStats))


class Cache:
    """One cache folder. Thread-safe; safe for several processes at once."""

    def __init__(self, root: str, max_size: int = DEFAULT_MAX_SIZE,
                 warn: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.max_size = max_size
        self.stats = CacheStats()
        self._warn = warn
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._writable = True
        self._uid = os.geteuid()

    def warn(self, message: str) -> None:
        """Say `message` once per cache."""
        with self._lock:
            if message in self._warned:
                return
            self._warned.add(message)
        if self._warn is not None:
            self._warn(message)

    # ------------------------------------------------------------ trust

    def trust_problem(self, create: bool = False) -> str | None:
        """Why this folder must not be used (None: it may). Its owner must be
        this user and nobody else may write it: whoever can write a cache
        folder chooses the code a build publishes. `create` makes a missing
        folder first (0700)."""
        if create:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(self.root)), exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.root, _PRIVATE)
            except OSError as e:
                return f"cache folder {self.root} is not writable ({e.strerror or e})"
        for path, follow in ((self.root, True), (os.path.join(self.root, VERSION_FOLDER), False)):
            try:
                st = os.stat(path) if follow else os.lstat(path)
            except FileNotFoundError:
                continue
            except OSError as e:
                return f"cache folder {path} cannot be read ({e.strerror or e})"
            problem = self._folder_problem(path, st)
            if problem is not None:
                return problem
        return None

    def _folder_problem(self, path: str, st: os.stat_result) -> str | None:
        if not stat.S_ISDIR(st.st_mode):
            return f"cache folder {path} is not a folder"
        if st.st_uid != self._uid:
            return f"cache folder {path} belongs to another user (uid {st.st_uid})"
        if st.st_mode & 0o022:
            return (f"cache folder {path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}; "
                    f"`chmod go-w` it to use it)")
        return None

    # ------------------------------------------------------------ entries

    def _path(self, key: str) -> str:
        if not _KEY.match(key):
            raise ValueError(f"bad cache key {key!r}")
        return os.path.join(self.root, VERSION_FOLDER, key[:2], key)

    def get(self, key: str) -> bytes | None:
        """The verified data under `key`, or None (a miss)."""
        path = self._path(key)
        try:
            fd = os.open(path, _READ_FLAGS)
        except OSError as e:
            if e.errno == errno.ELOOP:  # a symlink at an entry's name: never followed
                self._corrupt(path)
            else:
                self._count("misses")
            return None
        try:
            raw = self._read_entry(fd)
            data = None if raw is None else _verify(raw, key)
            if data is not None:
                with contextlib.suppress(OSError):
                    os.utime(fd)  # least recently used = oldest mtime
        except OSError:
            data = None
        finally:
            os.close(fd)
        if data is None:
            self._corrupt(path)
            return None
        self._count("hits")
        return data

    def _read_entry(self, fd: int) -> bytes | None:
        """An entry's bytes, or None for a file that cannot be one: not a
        regular file (a FIFO, a device, a folder), not this user's, writable by
        others, or larger than any entry."""
        st = os.fstat(fd)
        limit = len(MAGIC) + _HEAD.size + MAX_ENTRY_BYTES
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != self._uid or st.st_mode & 0o022
                or st.st_size > limit):
            return None
        return _read_bounded(fd, limit)

    def _corrupt(self, path: str) -> None:
        self._count("corrupt")
        self._count("misses")
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                os.unlink(path)

    def put(self, key: str, data: bytes) -> None:
        """Publish `data` under `key` atomically; a folder that cannot be
        written (read-only, full) warns once and turns the cache off."""
        if not self._writable or len(data) > MAX_ENTRY_BYTES:
            return
        path = self._path(key)
        raw = _entry(key, data)
        try:
            folder = self._make_folders(os.path.dirname(path))
            published = _publish(folder, os.path.basename(path), raw, replace=False)
        except OSError as e:
            with self._lock:
                first = self._writable
                self._writable = False
            if first:
                self.warn(f"cache folder {self.root} is not writable ({e.strerror or e}); "
                          f"building without the cache")
            return
        if published:
            self._count("stores")

    def _make_folders(self, shard: str) -> str:
        """The shard folder, made (0700, as its parent) where missing."""
        for folder in (self.root, os.path.dirname(shard), shard):
            try:
                os.mkdir(folder, _PRIVATE)
            except FileExistsError:
                pass
        return shard

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    # ------------------------------------------------------------ maintenance

    def _scan(self) -> tuple[list[tuple[str, int, float]], list[str], list[str]]:
        """(entries as (path, size, mtime), loom's temporary files, what loom
        did not make) of the folder. Only the names loom writes count as its
        own: `v1/`, the counters and their lock, two-hex shard folders and in
        them 64-hex entries of that shard; symlinks are never followed."""
        entries: list[tuple[str, int, float]] = []
        temps: list[str] = []
        foreign: list[str] = []
        try:
            top = list(os.scandir(self.root))
        except FileNotFoundError:
            return entries, temps, foreign
        for item in top:
            if item.name == VERSION_FOLDER and item.is_dir(follow_symlinks=False):
                continue
            if item.name in (STATS_FILE, LOCK_FILE) and item.is_file(follow_symlinks=False):
                continue
            (temps if _TEMP.match(item.name) and item.is_file(follow_symlinks=False) else foreign).append(item.path)
        base = os.path.join(self.root, VERSION_FOLDER)
        try:
            shards = sorted(os.scandir(base), key=lambda e: e.name) if os.path.isdir(base) else []
        except OSError:
            shards = []
        for shard in shards:
            if not (_SHARD.match(shard.name) and shard.is_dir(follow_symlinks=False)):
                foreign.append(shard.path)
                continue
            try:
                items = sorted(os.scandir(shard.path), key=lambda e: e.name)
            except OSError:
                continue
            for item in items:
                if not item.is_file(follow_symlinks=False):
                    if not (_KEY.match(item.name) and item.name.startswith(shard.name)):
                        foreign.append(item.path)  # a damaged entry (a FIFO, a link) is `get`'s to remove
                    continue
                if _KEY.match(item.name) and item.name.startswith(shard.name):
                    try:
                        st = item.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    entries.append((item.path, st.st_size, st.st_mtime))
                elif _TEMP.match(item.name):
                    temps.append(item.path)
                else:
                    foreign.append(item.path)
        return entries, temps, foreign

    def entries(self) -> Iterator[tuple[str, int, float]]:
        """(path, size, mtime) of every entry."""
        yield from self._scan()[0]

    def usage(self) -> tuple[int, int]:
        """(entry count, total bytes)."""
        entries = self._scan()[0]
        return len(entries), sum(n for _, n, _ in entries)

    def _maintainable(self) -> tuple[list[tuple[str, int, float]], list[str]] | None:
        """Entries and temporary files to clean, or None (with one warning)
        when the folder is not one loom may clean: not trusted, or holding
        files loom did not make."""
        problem = self.trust_problem()
        if problem is not None:
            self.warn(f"{problem}; left alone")
            return None
        entries, temps, foreign = self._scan()
        if foreign:
            shown = ", ".join(os.path.relpath(p, self.root) for p in foreign[:3])
            more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
            self.warn(f"cache folder {self.root} holds files loom did not make ({shown}{more}); left alone")
            return None
        return entries, temps

    def prune(self, max_size: int | None = None) -> Pruned:
        """Evict least recently used entries until the cache fits, and remove
        the stale temporary files of writers that died."""
        limit = self.max_size if max_size is None else max_size
        found = self._maintainable()
        if found is None:
            return Pruned(0, 0, 0)
        entries, temps = found
        stale = self._remove_stale(temps)
        total = sum(n for _, n, _ in entries)
        removed = freed = 0
        for path, n, _ in sorted(entries, key=lambda e: (e[2], e[0])):
            if total <= limit:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
                freed += n
            total -= n
        return Pruned(removed, freed, stale)

    def clear(self) -> Pruned:
        """Remove every entry, the counters and the stale temporary files (a
        younger temporary file may be a live writer's, and stays)."""
        found = self._maintainable()
        if found is None:
            return Pruned(0, 0, 0)
        entries, temps = found
        stale = self._remove_stale(temps)
        removed = freed = 0
        for path, n, _ in entries:
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
                freed += n
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.root, STATS_FILE))
        return Pruned(removed, freed, stale)

    def remove_stale_temps(self, now: float | None = None) -> int:
        """Remove loom's temporary files last written more than
        STALE_TEMP_AGE_S ago; the count removed."""
        found = self._maintainable()
        return 0 if found is None else self._remove_stale(found[1], now)

    def _remove_stale(self, temps: list[str], now: float | None = None) -> int:
        limit = (time.time() if now is None else now) - STALE_TEMP_AGE_S
        removed = 0
        for path in temps:
            try:
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and st.st_uid == self._uid and st.st_mtime < limit:
                    os.unlink(path)
                    removed += 1
            except OSError:  # renamed or removed meanwhile by its writer or another pruner
                continue
        return removed

    # ------------------------------------------------------------ totals across runs

    def record_totals(self) -> None:
        """Add this run's counters to `stats.json`, under a lock file. Best
        effort: counters are advice, never a reason for a build to fail."""
        if not self._writable or not any(vars(self.stats).values()):
            return

        def add() -> None:
            totals, damage = self._read_totals()
            if damage is not None:
                self.warn(damage)
            for k, v in vars(self.stats).items():
                totals[k] = min(MAX_COUNT, totals.get(k, 0) + v)
            self._write_totals(totals)

        self._locked(add)

    def totals(self) -> dict[str, int]:
        """The counters of every run so far. A damaged `stats.json` (not a
        file, too large, not JSON, a value that is no count) reads as zeros,
        with one warning, and is reset."""
        totals, damage = self._read_totals()
        if damage is None:
            return totals
        self.warn(damage)

        def reset() -> None:  # unless a writer mended it meanwhile
            if self._read_totals()[1] is not None:
                self._write_totals({})

        if self._writable:
            self._locked(reset)
        return {}

    def _locked(self, action: Callable[[], None]) -> None:
        """Run `action` holding the counters' lock; skipped (at most one
        warning) when the lock cannot be had within LOCK_WAIT_S."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return
        path = os.path.join(self.root, LOCK_FILE)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as e:
            if e.errno != errno.ENOENT:  # no folder yet: nothing to record in
                self.warn(f"cache lock {path} cannot be opened ({e.strerror or e}); counters not recorded")
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self.warn(f"cache lock {path} is not a file; counters not recorded")
                return
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        self.warn(f"cache lock {path} held for over {LOCK_WAIT_S:.0f} s by another process; "
                                  f"counters not recorded")
                        return
                    time.sleep(0.01)
            action()
        except OSError:
            pass
        finally:
            os.close(fd)

    def _read_totals(self) -> tuple[dict[str, int], str | None]:
        """(the counters, None) or ({}, why `stats.json` is damaged)."""
        path = os.path.join(self.root, STATS_FILE)

        def damaged(why: str) -> tuple[dict[str, int], str]:
            return {}, f"cache counters {path} were damaged ({why}); reset to zero"

        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return {}, None
        except OSError as e:
            return damaged(e.strerror or str(e))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return damaged("not a file")
            raw = _read_bounded(fd, MAX_STATS_BYTES)
        except OSError as e:
            return damaged(e.strerror or str(e))
        finally:
            os.close(fd)
        if raw is None:
            return damaged(f"larger than {MAX_STATS_BYTES} bytes")
        try:
            return _counts(raw), None
        except ValueError as e:
            return damaged(str(e))

    def _write_totals(self, totals: dict[str, int]) -> None:
        """Replace `stats.json` (the caller holds the counters' lock). Only a
        writer of the counters puts a temporary file in the cache folder
        itself (entries are written in their shards), and every such writer
        holds this lock: one found now belongs to a writer that was killed
        between creating and renaming it, and is removed at once instead of
        an hour later (`STALE_TEMP_AGE_S`); not in a folder that holds
        anything loom did not make (cleaning leaves such a folder alone)."""
        raw = (json.dumps({k: totals.get(k, 0) for k in COUNTERS}, sort_keys=True) + "\n").encode()
        _publish(self.root, STATS_FILE, raw, replace=True)
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        temps = [name for name in names if _TEMP.match(name)]
        if not temps or any(name not in (VERSION_FOLDER, STATS_FILE, LOCK_FILE) for name in names if name not in temps):
            return
        for name in temps:
            path = os.path.join(self.root, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and st.st_uid == self._uid:
                    os.unlink(path)


def _counts(raw: bytes) -> dict[str, int]:
    """The counters of `stats.json`'s bytes (ValueError: damaged)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is no count")

    try:
        doc = json.loads(raw, parse_constant=refuse)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    out = {}
    for k in COUNTERS:
        v = doc.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_COUNT:
            raise ValueError(f"`{k}` is no count")
        out[k] = v
    return out


def _read_bounded(fd: int, limit: int) -> bytes | None:
    """Up to `limit` bytes of `fd`; None when there are more."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(limit + 1 - total, 1 << 20))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None


def _digest(key_raw: bytes, length: int, data: bytes) -> bytes:
    h = hashlib.sha256(MAGIC)
    h.update(key_raw)
    h.update(length.to_bytes(8, "little"))
    h.update(data)
    return h.digest()


def _entry(key: str, data: bytes) -> bytes:
    key_raw = bytes.fromhex(key)
    return MAGIC + _HEAD.pack(key_raw, len(data), _digest(key_raw, len(data), data)) + data


def _verify(raw: bytes, key: str) -> bytes | None:
    """The data of entry bytes `raw` if they are an intact entry of `key`."""
    start = len(MAGIC) + _HEAD.size
    if not raw.startswith(MAGIC) or len(raw) < start:
        return None
    key_raw, length, digest = _HEAD.unpack_from(raw, len(MAGIC))
    data = raw[start:]
    if key_raw != bytes.fromhex(key) or len(data) != length or _digest(key_raw, length, data) != digest:
        return None
    return data


def _publish(folder: str, name: str, raw: bytes, replace: bool) -> bool:
    """Put `raw` at `folder/name` complete or not at all; False when the name
    was taken and `replace` is off (an entry another writer stored first: the
    same key, the same bytes). An anonymous file (O_TMPFILE) linked into
    place leaves nothing behind if loom is killed; elsewhere, and to replace
    a file, a `.tmp-` file renamed into place. The final name is never
    followed: a link or FIFO planted there is replaced, not written through."""
    path = os.path.join(folder, name)
    if not replace and hasattr(os, "O_TMPFILE"):
        try:
            fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
        else:
            try:
                _write_all(fd, raw)
                proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as e:
                os.close(fd)
                if e.errno != errno.ENOENT:  # no /proc: a named temporary file below
                    raise
            else:
                try:
                    os.link(str(fd), path, src_dir_fd=proc, follow_symlinks=True)
                    return True
                except FileExistsError:
                    return False
                finally:
                    os.close(proc)
                    os.close(fd)
    for _ in range(100):
        tmp = os.path.join(folder, f"{TEMP_PREFIX}{os.urandom(8).hex()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", folder)
    try:
        try:
            _write_all(fd, raw)
        finally:
            os.close(fd)
        if not replace:
            try:
                os.link(tmp, path, follow_symlinks=False)
                return True
            except FileExistsError:
                return False
        os.replace(tmp, path)
        tmp = ""
        return True
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _write_all(fd: int, raw: bytes) -> None:
    view = memoryview(raw)
    while view:
        view = view[os.write(fd, view):]


def default_root(environ: Mapping[str, str] | None = None) -> str | None:
    return settings.cache_dir(environ)


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    return settings.cache_enabled(environ)


def open_cache(no_cache: bool = False, environ: Mapping[str, str] | None = None,
               warn: Callable[[str], None] | None = None) -> Cache | None:
    """The cache the settings ask for, or None when it is off or its folder
    cannot be trusted (one warning says why)."""
    if no_cache or not settings.cache_enabled(environ):
        return None
    max_size = settings.cache_max_size(environ)
    root = settings.cache_dir(environ)
    if root is None:
        if warn is not None:
            warn("no cache folder: set LOOM_CACHE_DIR (HOME is not an absolute path); building without the cache")
        return None
    cache = Cache(root, max_size, warn)
    problem = cache.trust_problem(create=True)
    if problem is not None:
        cache.warn(f"{problem}; building without the cache")
        return None
    return cache
