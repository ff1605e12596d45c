"""The compile cache: verified single-file entries, LRU pruning, an unwritable
folder, concurrent writers, and `loom compile` / `loom cache` using it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loomcli.cache import MAGIC, Cache, open_cache, parse_size
from loomcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAXPY = str(ROOT / "samples" / "saxpy.loom")
KEY_A = "a" * 64
KEY_B = "b" * 64


def run(*argv: str) -> int:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    return e.value.code or 0


def test_round_trip_and_counters(tmp_path: Path) -> None:
    cache = Cache(str(tmp_path))
    assert cache.get(KEY_A) is None
    cache.put(KEY_A, b"data")
    assert cache.get(KEY_A) == b"data"
    assert (cache.stats.hits, cache.stats.misses, cache.stats.stores, cache.stats.corrupt) == (1, 1, 1, 0)
    entry = tmp_path / "v1" / "aa" / KEY_A
    assert entry.read_bytes().startswith(MAGIC)
    assert [p.name for p in entry.parent.iterdir()] == [KEY_A]  # nothing temporary left


@pytest.mark.parametrize("damage", [
    lambda raw: raw[:-1],                                # truncated
    lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]),         # a flipped bit
    lambda raw: b"X" + raw[1:],                          # not an entry
    lambda raw: raw + b"more",                           # trailing bytes
    lambda raw: b"",                                     # empty
])
def test_a_damaged_entry_is_a_miss_removed_and_counted(tmp_path: Path, damage) -> None:
    cache = Cache(str(tmp_path))
    cache.put(KEY_A, b"0123456789")
    entry = tmp_path / "v1" / "aa" / KEY_A
    entry.write_bytes(damage(entry.read_bytes()))
    assert cache.get(KEY_A) is None
    assert cache.stats.corrupt == 1 and not entry.exists()


def test_prune_evicts_least_recently_used(tmp_path: Path) -> None:
    cache = Cache(str(tmp_path))
    keys = [c * 64 for c in "0123"]
    for i, key in enumerate(keys):
        cache.put(key, bytes(1000))
        path = tmp_path / "v1" / key[:2] / key
        os.utime(path, (1000 + i, 1000 + i))
    os.utime(tmp_path / "v1" / "00" / keys[0], (2000, 2000))  # the oldest was just used
    one = (tmp_path / "v1" / "11" / keys[1]).stat().st_size
    removed, freed, temps = cache.prune(2 * one)
    assert (removed, freed, temps) == (2, 2 * one, 0)
    assert [cache.get(k) is not None for k in keys] == [True, False, False, True]


def test_sizes() -> None:
    assert [parse_size(s) for s in ("4096", "1k", "500M", "2G", "1.5GiB")] == \
           [4096, 1024, 500 << 20, 2 << 30, 3 << 29]
    with pytest.raises(ValueError):
        parse_size("lots")


def test_an_unwritable_folder_warns_once_and_builds_without(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    warnings: list[str] = []
    cache = Cache(str(blocker / "cache"), warn=warnings.append)
    for key in (KEY_A, KEY_B):
        assert cache.get(key) is None
        cache.put(key, b"x")
    assert len(warnings) == 1 and "not writable" in warnings[0]


def test_settings_turn_it_off(tmp_path: Path) -> None:
    assert open_cache(environ={"LOOM_CACHE": "0", "LOOM_CACHE_DIR": str(tmp_path)}) is None
    assert open_cache(no_cache=True, environ={"LOOM_CACHE_DIR": str(tmp_path)}) is None
    on = open_cache(environ={"LOOM_CACHE_DIR": str(tmp_path), "LOOM_CACHE_MAX_SIZE": "1M"})
    assert on is not None and on.root == str(tmp_path) and on.max_size == 1 << 20


WRITER = """
import sys
from loomcli.cache import Cache
cache = Cache(sys.argv[1])
fill = sys.argv[2].encode()
for i in range(300):
    cache.put(sys.argv[3], fill * (1000 + 37 * (i % 50)))
"""


def test_concurrent_writers_never_show_a_partial_entry(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), fill, KEY_A], env=env)
               for fill in "xy"]
    cache = Cache(str(tmp_path))
    seen = 0
    while any(w.poll() is None for w in writers):
        data = cache.get(KEY_A)
        if data is not None:
            assert len(set(data)) == 1
            seen += 1
    assert all(w.wait() == 0 for w in writers)
    assert cache.stats.corrupt == 0
    assert cache.get(KEY_A) is not None


def test_compile_uses_the_cache_and_bytes_never_differ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "cache"))
    outputs = {}
    for name, extra in [("cold", []), ("hit", []), ("nocache", ["--no-cache"])]:
        out = tmp_path / name
        trace = tmp_path / f"{name}.trace.json"
        assert run("compile", SAXPY, "--out-dir", str(out), "--target", "amdgpu:gfx1100", "--target",
                   "spirv:vulkan1.3", "--manifest", str(out), "--emit-launch-config", str(out),
                   "--trace", str(trace), *extra) == 0
        outputs[name] = {p.name: p.read_bytes() for p in out.iterdir()}
        events = json.loads(trace.read_text())["traceEvents"]
        assert len(events) == (0 if name == "hit" else 2)  # a hit creates no task
    assert len(outputs["cold"]) == 6
    assert outputs["cold"] == outputs["hit"] == outputs["nocache"]
    monkeypatch.setenv("LOOM_CACHE", "0")
    assert run("cache", "stats", "--json") == 0


def test_cache_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "c"))
    assert run("compile", SAXPY, "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "a.spv")) == 0
    assert run("compile", SAXPY, "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "b.spv")) == 0
    capsys.readouterr()
    assert run("cache", "path") == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "c")
    assert run("cache", "stats", "--json") == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["entries"], stats["hits"], stats["misses"], stats["stores"]) == (1, 1, 1, 1)
    assert run("cache", "stats") == 0
    assert "entries: 1" in capsys.readouterr().out
    assert run("cache", "prune", "--max-size", "lots") == 2
    assert run("cache", "prune", "--max-size", "0") == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert run("compile", SAXPY, "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "c.spv")) == 0
    assert run("cache", "clear") == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert (tmp_path / "a.spv").read_bytes() == (tmp_path / "b.spv").read_bytes() == (tmp_path / "c.spv").read_bytes()


def test_prune_and_clear_remove_only_stale_temporary_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A writer that died leaves its `.tmp-*` file; one old enough
    (STALE_TEMP_AGE_S) is removed and counted, a younger one may be a live
    writer's and stays."""
    from loomcli.cache import STALE_TEMP_AGE_S

    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    cache = Cache(str(tmp_path))
    cache.put(KEY_A, b"kept")
    old = time.time() - STALE_TEMP_AGE_S - 60
    for command in ("prune", "clear"):
        dead = [tmp_path / "v1" / "aa" / ".tmp-dead1", tmp_path / ".tmp-dead2"]  # an entry's, stats.json's
        live = tmp_path / "v1" / "aa" / ".tmp-live"
        for path in [*dead, live]:
            path.write_bytes(b"partial")
        for path in dead:
            os.utime(path, (old, old))
        assert run("cache", command) == 0
        assert capsys.readouterr().out.endswith(", 2 stale temporary files\n")
        assert [p.exists() for p in dead] == [False, False] and live.exists()
        assert (tmp_path / "v1" / "aa" / KEY_A).exists() == (command == "prune")  # under its bound / cleared
        live.unlink()
