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
        dead = [tmp_path / "v1" / "aa" / ".tmp-00112233445566aa", tmp_path / ".tmp-00112233445566bb"]
        live = tmp_path / "v1" / "aa" / ".tmp-00112233445566cc"  # an entry's, stats.json's, a live writer's
        for path in [*dead, live]:
            path.write_bytes(b"partial")
        for path in dead:
            os.utime(path, (old, old))
        assert run("cache", command) == 0
        assert capsys.readouterr().out.endswith(", 2 stale temporary files\n")
        assert [p.exists() for p in dead] == [False, False] and live.exists()
        assert (tmp_path / "v1" / "aa" / KEY_A).exists() == (command == "prune")  # under its bound / cleared
        live.unlink()


# ---------------------------------------------------------------- a hostile cache folder (issue 25)


def entry_path(root: Path, key: str) -> Path:
    return root / "v1" / key[:2] / key


def planted(root: Path, key: str) -> Path:
    """The entry's name, free for something else to be planted there."""
    path = entry_path(root, key)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists() or path.is_symlink():
        path.unlink()
    return path


@pytest.mark.parametrize("plant", [
    pytest.param(lambda p: os.mkfifo(p), id="fifo"),                       # 1: blocked forever in the read
    pytest.param(lambda p: os.symlink("/dev/zero", p), id="dev-zero"),     # 2: read without a bound
    pytest.param(lambda p: os.truncate(p.write_bytes(b"") or p, 3 << 30), id="huge-sparse"),
    pytest.param(lambda p: os.symlink("elsewhere", p), id="dangling-link"),
    pytest.param(lambda p: p.mkdir(), id="folder"),
])
def test_a_planted_entry_is_refused_without_reading_it(tmp_path: Path, plant) -> None:
    """Items 1 and 2: the entry is opened without following a link or
    blocking, and its type and size are checked before a byte is read."""
    cache = Cache(str(tmp_path))
    path = planted(tmp_path, KEY_A)
    plant(path)
    assert cache.get(KEY_A) is None
    assert (cache.stats.corrupt, cache.stats.misses, cache.stats.hits) == (1, 1, 0)
    assert path.is_dir() or not (path.exists() or path.is_symlink())   # removed (a folder is left alone)
    if not path.is_dir():
        cache.put(KEY_A, b"fresh")
        assert cache.get(KEY_A) == b"fresh"


def test_an_entry_is_bound_to_its_key(tmp_path: Path) -> None:
    """Item 9: two entries swapped (a sync tool, a restore) verify as corrupt,
    never as each other's data."""
    cache = Cache(str(tmp_path))
    cache.put(KEY_A, b"kernel set A")
    cache.put(KEY_B, b"kernel set B")
    a, b = entry_path(tmp_path, KEY_A), entry_path(tmp_path, KEY_B)
    raw_a, raw_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(raw_b)
    b.write_bytes(raw_a)
    assert cache.get(KEY_A) is None and cache.get(KEY_B) is None
    assert cache.stats.corrupt == 2 and not a.exists() and not b.exists()


def test_an_entry_someone_else_could_write_is_corrupt(tmp_path: Path) -> None:
    cache = Cache(str(tmp_path))
    cache.put(KEY_A, b"data")
    os.chmod(entry_path(tmp_path, KEY_A), 0o666)
    assert cache.get(KEY_A) is None and cache.stats.corrupt == 1


@pytest.mark.parametrize("content", [
    b'{"hits": null}', b"[1]", b'{"hits": 1e400}', b"NaN", b'{"hits": NaN}', b'{"hits": -1}',
    b'{"hits": true}', b'{"hits": 1.5}', b"not json", b"\xff\xfe", b"[" * 100000, b"{}" + b" " * (1 << 17),
    b'{"hits": 1' + b"0" * 5000 + b"}",
])
def test_damaged_counters_are_reset_with_one_warning(tmp_path: Path, content: bytes) -> None:
    """Item 3: a damaged stats.json reads as zeros, warns once and is
    rewritten; never an exception."""
    warnings: list[str] = []
    cache = Cache(str(tmp_path), warn=warnings.append)
    (tmp_path / "stats.json").write_bytes(content)
    assert cache.totals() == {}
    assert cache.totals() == {"hits": 0, "misses": 0, "stores": 0, "corrupt": 0}  # reset: read again, no warning
    assert len(warnings) == 1 and "damaged" in warnings[0]
    cache.put(KEY_A, b"x")
    cache.record_totals()
    assert json.loads((tmp_path / "stats.json").read_text()) == {"corrupt": 0, "hits": 0, "misses": 0, "stores": 1}


@pytest.mark.parametrize("plant", [lambda p: os.mkfifo(p), lambda p: os.symlink("/dev/zero", p), lambda p: p.mkdir()],
                         ids=["fifo", "dev-zero", "folder"])
def test_counters_and_their_lock_are_never_followed_or_waited_on(tmp_path: Path, plant) -> None:
    for name in ("stats.json", "stats.lock"):
        folder = tmp_path / name.replace(".", "-")
        folder.mkdir()
        plant(folder / name)
        warnings: list[str] = []
        cache = Cache(str(folder), warn=warnings.append)
        assert cache.totals() == {} if name == "stats.json" else True
        cache.put(KEY_A, b"x")
        cache.record_totals()  # returns: no block on a FIFO, no write through a link
        assert len(warnings) == 1, warnings
    assert not Path("/dev/zero").is_symlink()


def test_a_held_counter_lock_delays_a_build_boundedly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    import loomcli.cache as cache_module

    monkeypatch.setattr(cache_module, "LOCK_WAIT_S", 0.05)
    warnings: list[str] = []
    cache = Cache(str(tmp_path), warn=warnings.append)
    cache.put(KEY_A, b"x")
    (tmp_path / "stats.lock").touch()
    with open(tmp_path / "stats.lock", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        cache.record_totals()
    assert len(warnings) == 1 and "held" in warnings[0] and not (tmp_path / "stats.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir()
    os.chown(folder, 65534, 65534)
    warnings: list[str] = []
    assert open_cache(environ={"LOOM_CACHE_DIR": str(folder)}, warn=warnings.append) is None
    assert len(warnings) == 1 and "belongs to another user (uid 65534)" in warnings[0]


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777, 0o722])
def test_a_folder_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, mode)
    warnings: list[str] = []
    assert open_cache(environ={"LOOM_CACHE_DIR": str(folder)}, warn=warnings.append) is None
    assert len(warnings) == 1 and "writable by others" in warnings[0] and "building without the cache" in warnings[0]
    os.chmod(folder, 0o755)
    (folder / "v1").mkdir(mode=0o777)
    os.chmod(folder / "v1", 0o777)
    assert open_cache(environ={"LOOM_CACHE_DIR": str(folder)}, warn=warnings.append) is None


def test_a_new_folder_is_private(tmp_path: Path) -> None:
    root = tmp_path / "new" / "cache"
    old = os.umask(0o002)  # whatever the umask, loom's folders are 0700
    try:
        cache = open_cache(environ={"LOOM_CACHE_DIR": str(root)})
        assert cache is not None
        cache.put(KEY_A, b"x")
    finally:
        os.umask(old)
    for folder in (root, root / "v1", root / "v1" / "aa"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert entry_path(root, KEY_A).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("command", ["prune", "clear"])
def test_cleaning_a_folder_loom_did_not_make_deletes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Item 11: with LOOM_CACHE_DIR=$HOME (or a project folder), neither
    `loom cache prune|clear` nor a build's own pruning deletes the user's files."""
    from loomcli.cache import STALE_TEMP_AGE_S

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("LOOM_CACHE_DIR", str(home))
    old = time.time() - STALE_TEMP_AGE_S - 60
    mine = [home / ".tmp-notes", home / "work" / ".tmp-draft", home / "work" / "paper.tex"]
    for path in mine:
        path.parent.mkdir(exist_ok=True)
        path.write_text("the user's")
        os.utime(path, (old, old))
    Cache(str(home)).put(KEY_A, b"an entry")
    assert run("cache", command, *(["--max-size", "0"] if command == "prune" else [])) == 0
    out, err = capsys.readouterr()
    assert "removed 0 entries" in out and err.count("warning") == 1 and "loom did not make" in err
    assert all(p.read_text() == "the user's" for p in mine) and entry_path(home, KEY_A).exists()
    monkeypatch.setenv("LOOM_CACHE_MAX_SIZE", "1")  # a build over the bound prunes: no more than the command
    assert run("compile", SAXPY, "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "a.spv")) == 0
    assert all(p.read_text() == "the user's" for p in mine)
    assert capsys.readouterr().err.count("loom did not make") == 1


def test_a_counters_writer_killed_midway_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A build SIGKILLed while it replaced `stats.json` left its `.tmp-` file
    in the cache folder for an hour. Writers of the counters hold their
    lock, so the next one removes such a file at once; a young temporary
    file in a shard (an entry being written) stays, and so does everything
    in a folder that holds files loom did not make."""
    cache = Cache(str(tmp_path))
    cache.put(KEY_A, b"x")
    dead = tmp_path / ".tmp-0123456789abcdef"
    dead.write_bytes(b'{"hits": 1')  # cut short where the writer died
    live = tmp_path / "v1" / "aa" / ".tmp-fedcba9876543210"
    live.write_bytes(b"")
    assert cache.get(KEY_A) == b"x"
    cache.record_totals()
    assert not dead.exists() and live.exists()
    assert json.loads((tmp_path / "stats.json").read_text())["hits"] == 1
    dead.write_bytes(b"")
    (tmp_path / "notes.txt").write_text("the user's")  # a folder loom did not make alone: left alone
    cache = Cache(str(tmp_path))
    assert cache.get(KEY_A) == b"x"
    cache.record_totals()
    assert dead.exists() and json.loads((tmp_path / "stats.json").read_text())["hits"] == 2


def test_temporary_names_are_only_looms_own(tmp_path: Path) -> None:
    """Only `.tmp-` and 16 hex digits, where loom writes them (the folder and
    its shards), count as loom's temporary files; anything else is foreign."""
    from loomcli.cache import STALE_TEMP_AGE_S

    cache = Cache(str(tmp_path))
    cache.put(KEY_A, b"x")
    old = time.time() - STALE_TEMP_AGE_S - 60
    ours = [tmp_path / ".tmp-0123456789abcdef", tmp_path / "v1" / "aa" / ".tmp-0123456789abcdef"]
    for path in ours:
        path.write_bytes(b"")
        os.utime(path, (old, old))
    assert cache.remove_stale_temps() == 2
    (tmp_path / "v1" / "aa" / ".tmp-short").write_bytes(b"")
    assert cache.remove_stale_temps() == 0 and (tmp_path / "v1" / "aa" / ".tmp-short").exists()


def test_compile_hits_the_cache_another_process_filled(tmp_path: Path) -> None:
    """The key described the target profile by its repr, whose sets follow
    per-process string hashing: a second `loom compile` of the same input
    missed almost always. Two hash seeds must give one key."""
    argv = [sys.executable, "-m", "loomcli", "compile", SAXPY, "--target", "amdgpu:gfx1100", "-o"]
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONPATH=str(ROOT), LOOM_CACHE_DIR=str(tmp_path / "c"), PYTHONHASHSEED=seed)
        subprocess.run([*argv, str(tmp_path / f"{seed}.hsaco")], env=env, check=True)
    assert [p.name for p in (tmp_path / "c").glob("v1/*/*")].__len__() == 1
    assert len({(tmp_path / f"{s}.hsaco").read_bytes() for s in "123"}) == 1
