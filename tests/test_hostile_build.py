"""A build attacked from outside (issue 25): a hostile cache folder, a hostile
environment, hostile project files, signals, faults. One section per
numbered failure of the issue; each runs `loom` as a process, as a user or
build system would, with a timeout wherever the old failure was a hang.
Nothing depends on timing: a signal arrives at a counted event, a fault at
a counted system call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from test_build import make_project, outputs

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 300  # far above any of these builds; only a hang reaches it


def env_for(cache: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "CI", "LOOM_CACHE", "LOOM_DEBUG", "SOURCE_DATE_EPOCH", "LOOM_JOBS")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if cache is not None:
        env["LOOM_CACHE_DIR"] = str(cache)
    env.update(extra)
    return env


def loom(*argv: str, env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", TIMEOUT)
    return subprocess.run([sys.executable, "-m", "loomcli", *argv], env=env, **kw)


def clean(r: subprocess.CompletedProcess) -> str:
    """stderr of a run that did not crash."""
    assert "Traceback" not in r.stderr and "internal" not in r.stderr, r.stderr
    return r.stderr


def item_keys(out: Path) -> dict[str, str]:
    """item name -> its source key, from the state file."""
    return {name: entry["key"] for name, entry in json.loads((out / ".loom-build.json").read_text())["items"].items()}


def entry_of(cache: Path, key: str) -> Path:
    return cache / "v1" / key[:2] / key


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """(project, cache, the outputs of a build without the cache) after one cached build."""
    project = make_project(tmp_path / "p", sets=2, per_set=1, targets=("spirv:vulkan1.3", "amdgpu:gfx1100"))
    cache = tmp_path / "cache"
    r = loom("build", str(project), "-q", "--no-cache", env=env_for(cache))
    assert r.returncode == 0, r.stderr
    want = outputs(project / "build" / "loom")
    import shutil

    shutil.rmtree(project / "build")
    assert loom("build", str(project), "-q", env=env_for(cache)).returncode == 0
    assert outputs(project / "build" / "loom") == want
    return project, cache, want


def cache_stats(cache: Path) -> dict[str, int]:
    r = loom("cache", "stats", "--json", env=env_for(cache))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def rebuild(project: Path, cache: Path, *argv: str) -> subprocess.CompletedProcess:
    import shutil

    shutil.rmtree(project / "build")
    return loom("build", str(project), "-q", *argv, env=env_for(cache))


# ---------------------------------------------------------------- 1, 2: planted cache entries


@pytest.mark.parametrize("plant", ["fifo", "dev-zero"])
def test_1_2_planted_entries_neither_hang_nor_exhaust_a_build(built, plant: str) -> None:
    """1: a FIFO at an entry's name blocked `loom build` forever; 2: a link to
    /dev/zero grew memory until MemoryError. Both are now corrupt entries:
    a miss, removed, counted, and the build's bytes are a fresh build's."""
    project, cache, want = built
    keys = item_keys(project / "build" / "loom")
    for key in keys.values():
        entry_of(cache, key).unlink()
        if plant == "fifo":
            os.mkfifo(entry_of(cache, key))
        else:
            os.symlink("/dev/zero", entry_of(cache, key))
    r = rebuild(project, cache)
    assert r.returncode == 0, clean(r)
    assert outputs(project / "build" / "loom") == want
    assert cache_stats(cache)["corrupt"] == len(keys)
    assert all(entry_of(cache, k).is_file() and not entry_of(cache, k).is_symlink() for k in keys.values())


def test_1_a_fifo_entry_does_not_hang_loom_compile(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    src = str(ROOT / "samples" / "saxpy.loom")
    argv = ("compile", src, "--target", "spirv:vulkan1.3", "-o", str(tmp_path / "a.spv"))
    assert loom(*argv, env=env_for(cache)).returncode == 0
    [entry] = list(cache.glob("v1/*/*"))
    entry.unlink()
    os.mkfifo(entry)
    r = loom(*argv, env=env_for(cache))
    assert r.returncode == 0, clean(r)
    assert entry.is_file()


# ---------------------------------------------------------------- 3: damaged counters


@pytest.mark.parametrize("content", ['{"hits": null}', "[1]", "1e400", "NaN", '{"hits": 1e400}'])
def test_3_damaged_counters_never_fail_a_build_or_cache_stats(built, content: str) -> None:
    project, cache, want = built
    (cache / "stats.json").write_text(content)
    r = rebuild(project, cache)
    assert r.returncode == 0, clean(r)
    assert r.stderr.count("warning") == 1 and "stats.json were damaged" in r.stderr
    assert (project / "build" / "loom" / ".loom-build.json").is_file() and outputs(project / "build" / "loom") == want
    (cache / "stats.json").write_text(content)
    r = loom("cache", "stats", env=env_for(cache))
    assert r.returncode == 0 and r.stderr.count("warning") == 1, clean(r)
    assert cache_stats(cache)["entries"] == 4  # reset: read again without a warning


# ---------------------------------------------------------------- 9: entries bound to their keys


def test_9_swapped_entries_are_corrupt_not_each_other(built) -> None:
    """Two entries swapped (a sync tool, a restore): each is a miss, never the
    other kernel set's code object, launch config and manifest."""
    project, cache, want = built
    keys = item_keys(project / "build" / "loom")
    a, b = entry_of(cache, keys["spirv-vulkan1.3/set0"]), entry_of(cache, keys["spirv-vulkan1.3/set1"])
    raw_a, raw_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(raw_b)
    b.write_bytes(raw_a)
    r = rebuild(project, cache)
    assert r.returncode == 0, clean(r)
    assert outputs(project / "build" / "loom") == want
    assert cache_stats(cache)["corrupt"] == 2


def test_9_a_cache_folder_others_can_write_is_not_used(built) -> None:
    project, cache, want = built
    before = cache_stats(cache)
    os.chmod(cache, 0o777)
    r = rebuild(project, cache)
    assert r.returncode == 0 and r.stderr.count("warning") == 1 and "writable by others" in r.stderr, clean(r)
    assert outputs(project / "build" / "loom") == want
    os.chmod(cache, 0o700)
    assert cache_stats(cache) == before  # the refused folder was neither read nor written


# ---------------------------------------------------------------- 7: globs never reach the build's outputs


@pytest.mark.parametrize("pattern, argv", [
    ("**/*.loom*", ()),                        # sources and bytecode, the last build's launch configs included
    ("src/**/*", ("--out-dir", "src/out")),    # --out-dir inside the source folder
    ("**/*.loom*", ("--package",)),            # dist/ too
])
def test_7_a_recursive_glob_never_matches_the_outputs(tmp_path: Path, pattern: str, argv: tuple[str, ...]) -> None:
    """The first build passed and every later one failed (`... share the stem
    saxpy.launch in one set`) or linked its own outputs back in. Outputs are
    excluded from every glob and their folders are not listed, so a rebuild
    is a no-op."""
    project = tmp_path / "p"
    (project / "src").mkdir(parents=True)
    (project / "src" / "saxpy.loom").write_bytes((ROOT / "samples" / "saxpy.loom").read_bytes())
    (project / "loom.toml").write_text(
        '[project]\nname = "p"\nversion = "1"\n[build]\ntargets = ["spirv:vulkan1.3", "amdgpu:gfx1100"]\n'
        f'[[kernels]]\nname = "saxpy"\nsrcs = ["{pattern}"]\n')
    out = project / ("src/out" if "--out-dir" in argv else "build/loom")
    argv = tuple(str(project / a) if a == "src/out" else a for a in argv)
    first = loom("build", str(project), *argv, env=env_for(tmp_path / "cache"))
    assert first.returncode == 0, clean(first)
    want = outputs(out)
    for _ in range(2):
        again = loom("build", str(project), *argv, env=env_for(tmp_path / "cache"))
        assert again.returncode == 0, clean(again)
        assert "0 compiled, 0 cached, 2 up to date" in again.stdout and outputs(out) == want


def test_7_a_glob_that_matches_only_outputs_is_refused(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", sets=1, per_set=1)
    assert loom("build", str(project), "-q", env=env_for(None)).returncode == 0
    toml = (project / "loom.toml").read_text() + '\n[[kernels]]\nname = "again"\nsrcs = ["build/**/*.loombc"]\n'
    (project / "loom.toml").write_text(toml)
    r = loom("build", str(project), env=env_for(None))
    line = toml.splitlines().index('srcs = ["build/**/*.loombc"]') + 1
    assert r.returncode == 1
    assert f"loom.toml:{line}: [[kernels]] 'again': key `srcs`: 'build/**/*.loombc' " \
           "matches only the build's own outputs" in r.stderr, r.stderr


# ---------------------------------------------------------------- 12, 13: inputs bounded and typed


@pytest.mark.parametrize("size", [70 << 20, 3 << 30])
def test_12_a_source_over_the_input_limit_is_refused_before_reading(tmp_path: Path, size: int) -> None:
    project = make_project(tmp_path / "p", sets=1, per_set=1)
    with open(project / "k" / "set0" / "big.loom", "wb") as f:
        f.truncate(size)  # sparse: no disk, and no memory unless it is read
    r = loom("build", str(project), env=env_for(tmp_path / "cache"))
    assert r.returncode == 1 and "k/set0/big.loom: input larger than the 64 MiB limit" in clean(r)


@pytest.mark.parametrize("command", ["build -f", "build", "test"])
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "huge", "folder"])
def test_13_the_project_file_is_bounded_and_typed(tmp_path: Path, kind: str, command: str) -> None:
    """`loom build -f /dev/zero` printed a MemoryError traceback from the
    no-op check; a FIFO loom.toml hung. The no-op check and every command
    that reads a loom.toml (`build`, `test`) refuse them before reading."""
    path = tmp_path / "loom.toml"
    if kind == "dev-zero":
        if command != "build -f":
            pytest.skip("only -f names a device")
        path = Path("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(5 << 30)
    else:
        path.mkdir()
    argv = ["build", "-f", str(path)] if command == "build -f" else [command]
    r = loom(*argv, str(tmp_path), env=env_for(tmp_path / "cache"))
    assert r.returncode in (1, 2) and r.stderr.count("\n") == 1 and str(path) in clean(r), r.stderr


def test_13_a_fifo_at_the_state_files_never_hangs(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", sets=1, per_set=1)
    out = project / "build" / "loom"
    assert loom("build", str(project), "-q", env=env_for(None)).returncode == 0
    want = outputs(out)
    for name in (".loom-build.json", ".loom-build.noop"):
        (out / name).unlink(missing_ok=True)
        os.mkfifo(out / name)
    r = loom("build", str(project), "-q", env=env_for(None))
    assert r.returncode == 0, clean(r)
    assert outputs(out) == want and (out / ".loom-build.json").is_file()


def test_a_killed_builds_temporary_files_go_even_when_all_is_up_to_date(tmp_path: Path) -> None:
    """A build SIGKILLed between naming a temporary file and renaming it (the
    state file, the no-op record, an output of an item that is current
    again) left `.loom-*.tmp` for good: the next build cleaned only when
    something was stale."""
    project = make_project(tmp_path / "p", sets=1, per_set=1)
    out = project / "build" / "loom"
    assert loom("build", str(project), "-q", env=env_for(None)).returncode == 0
    strays = [out / ".loom-0123456789ab.tmp", out / "spirv-vulkan1.3" / ".loom-ba9876543210.tmp"]
    for stray in strays:
        stray.write_bytes(b"half")
    (out / ".loom-build.noop").unlink(missing_ok=True)  # as a kill before the record was renamed leaves it
    r = loom("build", str(project), env=env_for(None))
    assert r.returncode == 0 and "1 up to date" in r.stdout, clean(r)
    assert not any(stray.exists() for stray in strays)


# ---------------------------------------------------------------- 14: output names checked at load


@pytest.mark.parametrize("extra, line_of, message", [
    ('[[command]]\nname = "set0.spv"\nsrcs = ["k/set0/*.loom"]\n', "set0.spv",
     "[[command]] 'set0.spv': key `name`: its output folder `set0.spv` is also the output `set0.spv` of "
     "[[kernels]] 'set0'"),
    ('[[command]]\nname = "set0.manifest.json"\nsrcs = ["k/set0/*.loom"]\n', "set0.manifest.json",
     "its output folder `set0.manifest.json` is also the output `set0.manifest.json`"),
    ('[[kernels]]\nname = "SET0"\nsrcs = ["k/set0/*.loom"]\n', "SET0",
     "[[kernels]] 'SET0': key `name`: its output `SET0.hsaco` is also the output `set0.hsaco` of [[kernels]] "
     "'set0' on a file system that ignores case"),
])
def test_14_colliding_output_names_are_refused_at_load(tmp_path: Path, extra: str, line_of: str,
                                                       message: str) -> None:
    project = make_project(tmp_path / "p", sets=1, per_set=1, extra="\n" + extra)
    lines = (project / "loom.toml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text == f'name = "{line_of}"')
    r = loom("build", str(project), env=env_for(None))
    assert r.returncode == 1 and f"loom.toml:{line}: " in r.stderr and message in r.stderr, r.stderr
    assert not (project / "build").exists()


# ---------------------------------------------------------------- 4 and the environment: validated where read


@pytest.mark.parametrize("value", ["abc", "1e9", "-1", "4294967296", "99999999999999999999", " 1.5", "0x10", "١٢"])
def test_4_a_bad_source_date_epoch_is_a_usage_error_before_the_build(tmp_path: Path, value: str) -> None:
    """It was `loom: error: internal: ...` after the whole build."""
    project = make_project(tmp_path / "p", sets=1, per_set=1)
    r = loom("build", str(project), "--package", env=env_for(tmp_path / "cache", SOURCE_DATE_EPOCH=value))
    assert r.returncode == 2 and r.stderr.startswith("loom: error: SOURCE_DATE_EPOCH=") and \
        r.stderr.count("\n") == 1, r.stderr
    assert not (project / "build").exists() and not (project / "dist").exists()


@pytest.mark.parametrize("value, mtime", [("", 0), ("0", 0), ("1700000000", 1700000000), ("4294967295", 4294967295)])
def test_4_good_source_date_epochs(tmp_path: Path, value: str, mtime: int) -> None:
    import tarfile

    project = make_project(tmp_path / "p", sets=1, per_set=1)
    r = loom("build", str(project), "-q", "--package", env=env_for(tmp_path / "cache", SOURCE_DATE_EPOCH=value))
    assert r.returncode == 0, clean(r)
    with tarfile.open(project / "dist" / "p-1.0.loompkg.tar.gz") as tar:
        assert {m.mtime for m in tar.getmembers()} == {mtime}


@pytest.mark.parametrize("name, value, message", [
    ("LOOM_JOBS", "many", "LOOM_JOBS='many' is not a number"),
    ("LOOM_JOBS", "0", "LOOM_JOBS=0: the job count must be at least 1"),
    ("LOOM_JOBS", "-3", "LOOM_JOBS='-3' is not a number"),
    ("LOOM_CACHE", "maybe", "LOOM_CACHE='maybe': expected one of"),
    ("LOOM_CACHE_MAX_SIZE", "lots", "LOOM_CACHE_MAX_SIZE: not a size: 'lots'"),
    ("LOOM_CACHE_MAX_SIZE", "1e400G", "LOOM_CACHE_MAX_SIZE: not a size"),
    ("LOOM_CACHE_MAX_SIZE", "9" * 400, "LOOM_CACHE_MAX_SIZE: not a size"),
])
def test_bad_environment_values_are_one_line_naming_them(tmp_path: Path, name: str, value: str, message: str) -> None:
    project = make_project(tmp_path / "p", sets=1, per_set=1)
    for argv in (("build", str(project)), ("compile", str(ROOT / "samples" / "saxpy.loom"), "--target",
                                             "spirv:vulkan1.3", "-o", str(tmp_path / "a.spv"))):
        r = loom(*argv, env=env_for(tmp_path / "cache", **{name: value}))
        assert r.returncode == 2 and r.stderr == f"loom: error: {message}" + r.stderr.split(message, 1)[1], r.stderr
        assert r.stderr.count("\n") == 1
    assert not (project / "build").exists() and not (tmp_path / "a.spv").exists()


@pytest.mark.parametrize("extra", [
    {"LOOM_JOBS": "99999999999"},                  # clamped to 4096
    {"LOOM_CACHE": "OFF"}, {"LOOM_CACHE": " yes "},
    {"LOOM_CACHE_DIR": ""},                        # empty: unset (the XDG default below)
    {"XDG_CACHE_HOME": "relative/cache"},          # relative: ignored, as the XDG specification says
    {"HOME": "not/absolute", "XDG_CACHE_HOME": ""},  # the password database's home instead
    {"TMPDIR": "/no/such/folder"},                 # the workers' stderr files go to /tmp
    {"COLUMNS": "100000000"}, {"COLUMNS": "-5"}, {"COLUMNS": "abc"}, {"NO_COLOR": "1"}, {"TERM": "dumb"},
    {"LOOM_DEBUG": "yes please"}, {"SOURCE_DATE_EPOCH": "garbage"},  # read only with --package
])
def test_clamped_or_ignored_environment_values_still_build(tmp_path: Path, extra: dict[str, str]) -> None:
    project = make_project(tmp_path / "p", sets=1, per_set=1)
    env = env_for(None, **extra)
    if "LOOM_CACHE_DIR" not in extra and "HOME" not in extra and "XDG_CACHE_HOME" not in extra:
        env["LOOM_CACHE_DIR"] = str(tmp_path / "cache")
    if "HOME" in extra or "XDG_CACHE_HOME" in extra or "LOOM_CACHE_DIR" in extra:
        env.pop("LOOM_CACHE_DIR", None)
        env["LOOM_CACHE"] = "0"  # the folders named exist, but the test must not fill the user's cache
    r = loom("build", str(project), "--progress", "rich", env=env, cwd=tmp_path)
    assert r.returncode == 0 and "warning" not in r.stderr, clean(r)


def test_the_cache_folder_each_setting_names(tmp_path: Path) -> None:
    from loomcli import settings

    assert settings.cache_dir({"LOOM_CACHE_DIR": "rel/c"}) == os.path.abspath("rel/c")
    assert settings.cache_dir({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == "/x/loom"
    assert settings.cache_dir({"XDG_CACHE_HOME": "x", "HOME": "/h"}) == "/h/.cache/loom"
    import pwd

    assert settings.cache_dir({"HOME": ""}) == os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".cache", "loom")


def test_every_environment_variable_loom_reads_is_listed_and_documented() -> None:
    """settings.VARIABLES, docs/build.md's table and the names read anywhere
    in loomcli are one list: a new variable read without its check and its
    line in the docs fails here."""
    import re

    from loomcli import settings

    table = (ROOT / "docs" / "build.md").read_text().split("## The environment", 1)[1]
    assert set(re.findall(r"^\| `([A-Z_]+)` \|", table, re.MULTILINE)) == set(settings.VARIABLES)
    read: set[str] = set()
    for path in (ROOT / "loomcli").rglob("*.py"):
        source = path.read_text()
        read |= set(re.findall(r'(?:\benv|environ|_env\(environ\))\.get\(\s*"([A-Z][A-Z0-9_]*)"', source))
        read |= set(re.findall(r'^ENV_[A-Z]+ = "([A-Z_]+)"', source, re.MULTILINE))
        read |= set(re.findall(r'\bflag\("([A-Z_]+)"', source))
    assert {"LOOM_CACHE_DIR", "LOOM_SERVER", "LOOM_CACHE", "XDG_RUNTIME_DIR"} <= read  # the scan sees them
    passed_on = {"PYTHONPATH"}  # handed to the processes loom starts, never interpreted
    assert read - passed_on <= set(settings.VARIABLES), sorted(read - passed_on - set(settings.VARIABLES))


# ---------------------------------------------------------------- 5: Ctrl-C from the first instruction to the last

# A `sitecustomize` that sends SIGINT at the K-th audit event of the main
# thread after `loom.main` (imports, opens, renames, process starts, ...):
# deterministic points from the start of `loomcli.entry.main` to its end,
# with no timing. K = 0 only counts, written to LOOM_TEST_EVENTS at exit.
SIGINT_AT = '''
import _signal, _thread, os, sys

_at = int(os.environ.get("LOOM_TEST_SIGINT_AT", "0"))
_main = _thread.get_ident()
_seen = [False, 0]


def _count():
    with open(os.environ["LOOM_TEST_EVENTS"], "w") as f:
        f.write(str(_seen[1]))


def _hook(event, args):
    if event == "loom.main" and not _seen[0]:
        _seen[0] = True
        if not _at:
            import atexit
            atexit.register(_count)
        return
    if not _seen[0] or _thread.get_ident() != _main:
        return
    _seen[1] += 1
    if _seen[1] == _at:
        _signal.raise_signal(_signal.SIGINT)


sys.addaudithook(_hook)
'''


class Tokens:
    """A make-like pipe jobserver of `n` tokens that the test owns: after a
    run, every token must be back."""

    def __init__(self, n: int = 3) -> None:
        self.n = n
        self.r, self.w = os.pipe()
        os.write(self.w, b"+" * n)

    def makeflags(self) -> str:
        return f"-j{self.n + 1} --jobserver-auth={self.r},{self.w}"

    def count(self) -> int:
        os.set_blocking(self.r, False)
        got = b""
        try:
            while chunk := os.read(self.r, 64):
                got += chunk
        except BlockingIOError:
            pass
        os.set_blocking(self.r, True)
        os.write(self.w, got)
        return len(got)


def interrupted_at(k: int, argv: list[str], env: dict[str, str], hooks: Path, tokens: Tokens,
                   cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(env, LOOM_TEST_SIGINT_AT=str(k), LOOM_TEST_EVENTS=str(hooks / "events"),
               MAKEFLAGS=tokens.makeflags(), PYTHONPATH=env["PYTHONPATH"] + os.pathsep + str(hooks))
    return subprocess.run([sys.executable, "-m", "loomcli", *argv], env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, pass_fds=(tokens.r, tokens.w), cwd=cwd)


def item_sets(out: Path) -> dict[str, dict[str, bytes]]:
    """item (folder/set) -> its files."""
    sets: dict[str, dict[str, bytes]] = {}
    for name, data in outputs(out).items():
        folder, file = name.rsplit("/", 1)
        sets.setdefault(f"{folder}/{file.split('.')[0]}", {})[file] = data
    return sets


def points(n: int, count: int, seed: int) -> list[int]:
    """`count` event numbers spread over 1..n: the first few, the last, and
    others at random (seeded)."""
    import random

    rng = random.Random(seed)
    chosen = {1, 2, 3, n // 2, n - 1, n}
    while len(chosen) < min(count, n):
        chosen.add(rng.randint(1, n))
    return sorted(k for k in chosen if 1 <= k <= n)


@pytest.mark.parametrize("scenario", ["compile", "cache-hits", "no-op"])
def test_5_ctrl_c_anywhere_is_one_line_exit_130_nothing_partial_no_token_lost(tmp_path: Path, scenario: str) -> None:
    """SIGINT at counted points from `loom.main` to the end of the process:
    every run ends `loom: error: interrupted`, exit 130, no traceback; every
    item's files are the old set or the new set; no temporary file; every
    jobserver token back; and the next build gives a clean build's bytes."""
    import shutil

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SIGINT_AT)
    project = make_project(tmp_path / "p", sets=2, per_set=1, targets=("spirv:vulkan1.3", "amdgpu:gfx1100"))
    out = project / "build" / "loom"
    cache = tmp_path / "cache"
    env = env_for(cache)
    argv = ["build", str(project), "-q"]
    assert loom(*argv, env=env).returncode == 0
    old = item_sets(out)
    if scenario != "no-op":  # edit a source: the new sets differ from the old in every item of set0
        src = project / "k" / "set0" / "k0.loom"
        src.write_text(src.read_text().replace("index.constant 32 :", "index.constant 64 :"))
        os.utime(src, (1, 1))  # old enough to be trusted by stat at once
    reference = tmp_path / "reference"
    shutil.copytree(project, reference, symlinks=True, ignore=shutil.ignore_patterns("build"))
    assert loom("build", str(reference), "-q", "--no-cache", env=env).returncode == 0
    new = item_sets(reference / "build" / "loom")
    if scenario == "cache-hits":  # fill the cache with the new outputs
        assert loom("build", str(reference), "-q", "--out-dir", str(tmp_path / "elsewhere"), env=env).returncode == 0
    saved = tmp_path / "saved"
    shutil.copytree(out, saved, symlinks=True)
    saved_cache = tmp_path / "saved-cache"
    shutil.copytree(cache, saved_cache, symlinks=True)
    tokens = Tokens()
    counted = interrupted_at(0, argv, env, hooks, tokens)
    assert counted.returncode == 0, counted.stderr
    n = int((hooks / "events").read_text()) - 1  # the last one was the count's own open()
    assert n > 100, n
    for k in points(n, 9, seed=zlib.crc32(scenario.encode())):
        shutil.rmtree(out)
        shutil.copytree(saved, out, symlinks=True)
        shutil.rmtree(cache)
        shutil.copytree(saved_cache, cache, symlinks=True)
        r = interrupted_at(k, argv, env, hooks, tokens)
        assert (r.returncode, r.stderr) == (130, "loom: error: interrupted\n"), f"event {k} of {n}: {r.stderr}"
        assert tokens.count() == tokens.n, f"event {k}: a jobserver token was lost"
        assert [p for p in out.rglob("*") if p.name.endswith(".tmp")] == [], f"event {k}"
        assert [p for p in cache.rglob(".tmp-*")] == [], f"event {k}"
        for item, files in item_sets(out).items():
            assert files in (old.get(item), new.get(item)), f"event {k}: {item} is neither the old set nor the new"
        again = loom(*argv, env=env)
        assert again.returncode == 0, clean(again)
        assert item_sets(out) == new, f"event {k}: the rebuild differs from a clean build"


# ---------------------------------------------------------------- 8: only a FIFO or a pipe is a jobserver


def jobserver_cases(tmp_path: Path) -> list[tuple[str, str, tuple[int, ...], list[Path]]]:
    """(id, MAKEFLAGS, descriptors to pass, files that must stay unchanged)."""
    regular = tmp_path / "tokens.txt"
    regular.write_text("ABCDEFGHIJ")
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    planted = tmp_path / "GMfifo4242"
    planted.symlink_to(victim)
    r1, w1 = os.pipe()
    _r2, w2 = os.pipe()
    os.write(w1, b"++")
    os.write(w2, b"++")
    f = os.open(regular, os.O_RDWR)
    return [
        ("regular-file", f"-j4 --jobserver-auth=fifo:{regular}", (), [regular]),
        ("planted-symlink", f"-j4 --jobserver-auth=fifo:{planted}", (), [victim]),
        ("dev-null", "-j4 --jobserver-auth=fifo:/dev/null", (), []),
        ("dev-zero", "-j4 --jobserver-auth=fifo:/dev/zero", (), []),
        ("stdin-stdout", "-j4 --jobserver-auth=0,1", (), []),
        ("two-pipes", f"-j4 --jobserver-auth={r1},{w2}", (r1, w2), []),
        ("file-descriptors", f"-j4 --jobserver-auth={f},{f}", (f,), [regular]),
        ("closed", "-j4 --jobserver-auth=900,901", (), []),
        ("huge", "-j4 --jobserver-auth=99999999999999999999,1", (), []),
        ("empty-fifo", "-j4 --jobserver-auth=fifo:", (), []),
    ]


def test_8_a_jobserver_that_is_no_pipe_is_one_warning_and_a_serial_build(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", sets=2, per_set=1)
    want = None
    for name, makeflags, fds, files in jobserver_cases(tmp_path):
        before = [p.read_bytes() for p in files]
        env = env_for(None, MAKEFLAGS=makeflags, LOOM_CACHE="0")
        r = subprocess.run([sys.executable, "-m", "loomcli", "build", str(project), "--progress", "plain",
                            "--trace", str(tmp_path / "trace.json")], env=env, capture_output=True, text=True,
                           timeout=TIMEOUT, pass_fds=fds, stdin=subprocess.PIPE if name == "stdin-stdout" else None)
        assert r.returncode == 0, f"{name}: {clean(r)}"
        assert r.stderr.count("warning") == 1 and "jobserver unusable, building serially" in r.stderr, \
            f"{name}: {r.stderr}"
        assert [p.read_bytes() for p in files] == before, f"{name}: loom changed a file that is no jobserver"
        other = json.loads((tmp_path / "trace.json").read_text())["otherData"]
        assert other["slots"] == 1 and other["tokens_taken"] == 0, name
        got = outputs(project / "build" / "loom")
        assert want is None or got == want, name
        want = got
        import shutil

        shutil.rmtree(project / "build")


# ---------------------------------------------------------------- 6: faults, full disks, kills (attack_builds)


def attacks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("attack_builds", ROOT / "scripts" / "attack_builds.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["attack_builds"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_6_a_write_that_fails_anywhere_leaves_old_or_new_sets(tmp_path: Path) -> None:
    """The out-dir's disk full from its K-th opening for writing on (K = 1,
    2, the last and others spread, seeded; a rebuild that compiles some
    items and publishes cache hits for others): every run ends in one line
    or exit 0, each item's files are its old set or its new set, the cache
    stays intact with no temporary file, and the next build is a clean
    build's bytes. (Published one file at a time, K = 2 left a new code
    object beside the old launch config and manifest.)"""
    figures = attacks().write_faults(tmp_path, points=10, seed=6, outputs_only=True)
    assert figures.findings == [], "\n".join(figures.findings)
    assert figures.faults == figures.survived == 10


def test_6_a_full_disk_leaves_old_or_new_sets(tmp_path: Path) -> None:
    """The out-dir and the cache on a small tmpfs with nothing, some, or
    nearly enough room left: a real ENOSPC wherever the build's writes reach it."""
    figures = attacks().full_disk(tmp_path, steps=4)
    if figures is None:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    assert figures.findings == [], "\n".join(figures.findings)
    assert figures.survived == 4 and figures.faults >= 2


def test_concurrent_builds_sharing_a_cache_survive_sigkill(tmp_path: Path) -> None:
    """Three copies of a project share one cache; two rounds of builds of
    random variants, half of them SIGKILLed (alone or with their workers)
    at random moments: every item is old-complete or new-complete, no
    process outlives its build, the cache's entries are intact, `loom
    cache stats` is sane, and every rebuild is byte-identical to a clean build."""
    figures = attacks().kill_storm(tmp_path, rounds=2, builders=3, seed=25)
    assert figures.findings == [], "\n".join(figures.findings)
    assert figures.experiments == figures.survived == 6
