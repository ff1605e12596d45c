"""Whole builds attacked from outside (issue 25's classes), for
`scripts/fuzz_hostile.py --builds` and, in short runs, the test suite.

Every experiment runs `loom` as a process, as a user or a build system
would, on copies of samples/project whose variants differ in one [config]
value (so each variant's outputs differ from the others'):

- `kill_storm`: several builds of different copies share one cache folder,
  each of a variant chosen at random, and random ones are SIGKILLed (the
  process alone, or its whole group) at random moments;
- `write_faults`: a build whose openings of files for writing fail with
  ENOSPC from the K-th on (an audit hook in a `sitecustomize`: counted, so
  the same K is the same point every time), for K over every opening;
- `full_disk`: the out-dir and the cache on a small tmpfs, filled so that
  only so many bytes are free, for a sweep of sizes (needs root to mount);
- `strace_faults`: `strace -f -e inject=write:error=ENOSPC:when=N`, the
  N-th write of every process failing (needs strace);
- `hostile_inputs`: FIFOs, links to /dev/zero, huge sparse files, garbage
  and folders planted at cache entries, the counters and the build's
  bookkeeping, with a bad environment value (`BAD_VALUES`) each time.

After each experiment, what must hold whatever happened: every item's
files are one variant's complete set, the old one or the new one (never a
partial file; a mix only where a SIGKILL landed between two renames of a
set, and then one the state file does not vouch for, so that the next
build redoes it); no temporary file is left in the out-dir and
none in the cache but those a concurrent writer still holds; `loom cache
stats` answers and its counts are sane; every cache entry is intact for
its key; and the next build (no fault) gives the bytes of a clean build of
its variant. A violation is a finding; the figures count experiments,
faults injected, kills, and the builds that survived them with nothing lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "project"
VARIANTS = (128, 64, 256)  # [config] "blas.group"
TIMEOUT = 600  # only a hang reaches it


@dataclass
class Figures:
    experiments: int = 0   # builds run under attack
    faults: int = 0        # faults injected (failed opens or writes, full disks)
    kills: int = 0         # builds SIGKILLed
    survived: int = 0      # experiments after which every check held
    disowned: int = 0      # items a SIGKILL left mixed between two renames, disowned by the state file, rebuilt
    findings: list[str] = field(default_factory=list)

    def add(self, other: Figures) -> None:
        self.experiments += other.experiments
        self.faults += other.faults
        self.kills += other.kills
        self.survived += other.survived
        self.disowned += other.disowned
        self.findings += other.findings

    def record(self, lost: list[str]) -> None:
        """One experiment's findings (none: it survived)."""
        self.findings += lost
        self.survived += not lost

    def line(self) -> str:
        return (f"{self.experiments} experiments, {self.faults} faults injected, {self.kills} kills, "
                f"{self.survived} survived with nothing lost ({self.disowned} items a kill left mixed, "
                f"disowned by the state file and rebuilt), {len(self.findings)} findings")


def loom_env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "CI", "LOOM_CACHE", "LOOM_DEBUG", "LOOM_JOBS", "LOOM_SERVER",
                        "SOURCE_DATE_EPOCH", "LOOM_CACHE_MAX_SIZE")}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["LOOM_CACHE_DIR"] = str(cache)
    env["LOOM_SERVER"] = "off"  # each build its own process, killed as such
    env.update(extra)
    return env


def build_argv(project: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "loomcli", "build", str(project), "--out-dir", str(out), "-q", "-j", "2", *extra]


def make_copy(folder: Path, variant: int) -> Path:
    """A copy of samples/project (its build folder left out) of `variant`."""
    shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns("build", "dist"))
    set_variant(folder, variant)
    return folder


def set_variant(project: Path, variant: int) -> None:
    toml = project / "loom.toml"
    text = toml.read_text()
    head, rest = text.split('"blas.group" = ', 1)
    toml.write_text(f'{head}"blas.group" = {variant}\n{rest.split(chr(10), 1)[1]}')
    os.utime(toml, (1, 1))  # old enough to be trusted by its stat at once, but never the last build's stamp
    os.utime(toml, None)


def item_sets(out: Path) -> dict[str, dict[str, bytes]]:
    """item (`target/set` or `target/command`) -> its files' bytes (bookkeeping left out)."""
    sets: dict[str, dict[str, bytes]] = {}
    if not out.is_dir():
        return sets
    for p in sorted(out.rglob("*")):
        if not p.is_file() or p.name.startswith(".loom-build."):
            continue
        parts = p.relative_to(out).parts
        item = f"{parts[0]}/{parts[1]}" if len(parts) > 2 else f"{parts[0]}/{parts[1].split('.')[0]}"
        sets.setdefault(item, {})["/".join(parts[1:])] = p.read_bytes()
    return sets


def strays(folder: Path) -> list[str]:
    """Temporary files: `.tmp-*` (the cache's) and `*.tmp` (the out-dir's)."""
    if not folder.is_dir():
        return []
    return sorted(str(p) for p in folder.rglob("*") if p.name.startswith(".tmp") or p.name.endswith(".tmp"))


class References:
    """Each variant's outputs, from a clean build without the cache (made once)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.sets: dict[int, dict[str, dict[str, bytes]]] = {}

    def __getitem__(self, variant: int) -> dict[str, dict[str, bytes]]:
        if variant not in self.sets:
            project = make_copy(self.work / f"reference-{variant}", variant)
            out = project / "out"
            r = subprocess.run(build_argv(project, out, "--no-cache"), env=loom_env(self.work / "no-cache"),
                               capture_output=True, text=True, timeout=TIMEOUT)
            if r.returncode != 0:
                raise RuntimeError(f"the reference build of variant {variant} failed: {r.stderr}")
            self.sets[variant] = item_sets(out)
        return self.sets[variant]


def check_cache(cache: Path, env: dict[str, str], settled: bool) -> list[str]:
    """The cache after an experiment: `loom cache stats` answers with sane
    counts, every entry is intact for its key, and (`settled`: nobody writes
    it now) no temporary file is left."""
    sys.path.insert(0, str(ROOT))
    from loomcli.cache import VERSION_FOLDER, _verify

    found = []
    r = subprocess.run([sys.executable, "-m", "loomcli", "cache", "stats", "--json"], env=env, capture_output=True,
                       text=True, timeout=TIMEOUT)
    if r.returncode != 0 or "warning" in r.stderr:
        found.append(f"cache stats: exit {r.returncode}: {r.stderr.strip()}")
    else:
        stats = json.loads(r.stdout)
        if any(not isinstance(v, int) or v < 0 for k, v in stats.items() if isinstance(v, int | float)):
            found.append(f"cache stats: insane counts {stats}")
    entries = [p for p in (cache / VERSION_FOLDER).glob("*/*") if not p.name.startswith(".")]
    for p in entries:
        if _verify(p.read_bytes(), p.name) is None:
            found.append(f"cache entry {p.name} is not intact")
    if settled and (left := strays(cache)):
        found.append(f"temporary files left in the cache: {left}")
    return found


def check_out(out: Path, old: dict[str, dict[str, bytes]], new: dict[str, dict[str, bytes]],
              killed: Figures | None = None) -> list[str]:
    """Every item of `out` is its old set or its new set (or missing, if it
    had none). `killed`: the build was SIGKILLed, which can land between two
    renames of one set; a mix is then allowed only if the state file does
    not vouch for it (the next build redoes the item: `settle` checks that),
    and is counted in `killed.disowned`."""
    found = []
    for item, files in item_sets(out).items():
        if files != old.get(item) and files != new.get(item):
            if killed is not None and not vouched(out, item, files):
                killed.disowned += 1
                continue
            found.append(f"{out}: {item} is neither the old set nor the new one ({sorted(files)})")
    return found


def vouched(out: Path, item: str, files: dict[str, bytes]) -> bool:
    """Whether the state file records exactly these bytes for `item`."""
    try:
        items = json.loads((out / ".loom-build.json").read_text())["items"]
        entry = items.get(item) or items.get(item + "/")  # a command's entry names its folder
        recorded = entry["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    named = {name.split("/", 1)[-1]: data for name, data in files.items()}
    return set(recorded) == set(named) and all(
        hashlib.sha256(data).hexdigest() == recorded[name][0] for name, data in named.items())


def settle(project: Path, out: Path, env: dict[str, str], want: dict[str, dict[str, bytes]]) -> list[str]:
    """The next build, with nothing attacking it: a clean build's bytes, no temporary file."""
    r = subprocess.run(build_argv(project, out), env=env, capture_output=True, text=True, timeout=TIMEOUT)
    found = []
    if r.returncode != 0 or "Traceback" in r.stderr or "internal" in r.stderr:
        found.append(f"{project}: the build after the attack failed (exit {r.returncode}): {r.stderr.strip()}")
    elif item_sets(out) != want:
        found.append(f"{project}: the build after the attack differs from a clean build")
    if left := strays(out):
        found.append(f"{project}: temporary files left in the out-dir: {left}")
    return found


def aftermath(label: str, bad: str | None, project: Path, out: Path, cache: Path, env: dict[str, str],
              old: dict[str, dict[str, bytes]], new: dict[str, dict[str, bytes]]) -> list[str]:
    """Everything that must hold after one attacked build of `project` from
    the `old` outputs to the `new` (see the module docstring); `bad`: how
    the run itself ended wrongly, if it did."""
    found = [bad] if bad else []
    found += check_out(out, old, new) + check_cache(cache, env, settled=True) + settle(project, out, env, new)
    return [f"{label}: {f}" for f in found]


def bad_ending(r: subprocess.CompletedProcess) -> str | None:
    """A run that was not killed must end cleanly: exit 0, or an error in one line, never a traceback."""
    if r.returncode == 0:
        return None
    err = r.stderr.strip()
    if "Traceback" in err or "internal" in err or r.returncode not in (1, 3) or not err.startswith("loom: "):
        return f"exit {r.returncode}: {err[-1500:]}"
    return None


# ---------------------------------------------------------------- concurrent builds under SIGKILL


@dataclass
class Copy:
    """One project copy of the storm: its out-dir, the variant its outputs are, their item sets."""

    project: Path
    variant: int

    @property
    def out(self) -> Path:
        return self.project / "out"


@dataclass
class Storming:
    copy: Copy
    variant: int          # what this build builds
    proc: subprocess.Popen
    kill_at: float | None  # seconds after the round's start; None: left alone
    group: bool           # SIGKILL the whole process group (a CI cancel), else the process (the OOM killer)


def kill_storm(work: Path, rounds: int, builders: int = 3, seed: int = 1,
               references: References | None = None) -> Figures:
    """`builders` copies share one cache; each round every copy builds a
    random variant and a random half of the builds are SIGKILLed after a
    random delay (within a build's usual length, most of them early)."""
    rng = random.Random(seed)
    refs = references or References(work)
    figures = Figures()
    cache = work / "shared-cache"
    env = loom_env(cache)
    copies = [Copy(make_copy(work / f"copy-{i}", VARIANTS[0]), VARIANTS[0]) for i in range(builders)]
    span = 3.0  # seconds: about a build's length here
    for _ in range(rounds):
        runs = []
        for copy in copies:
            variant = rng.choice(VARIANTS)
            set_variant(copy.project, variant)
            proc = subprocess.Popen(build_argv(copy.project, copy.out), env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            runs.append(Storming(copy, variant, proc, span * rng.random() ** 2 if rng.random() < 0.5 else None,
                                 rng.random() < 0.5))
        began = time.monotonic()
        for run in sorted((r for r in runs if r.kill_at is not None), key=lambda r: r.kill_at or 0):
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.proc.wait(timeout=max(0.0, began + (run.kill_at or 0) - time.monotonic()))
            if run.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.proc.pid, signal.SIGKILL) if run.group else os.kill(run.proc.pid, signal.SIGKILL)
                figures.kills += 1
        lost: dict[int, list[str]] = {}
        for i, run in enumerate(runs):
            _, err = run.proc.communicate(timeout=TIMEOUT)
            figures.experiments += 1
            lost[i] = []
            if run.proc.returncode != -signal.SIGKILL and (bad := bad_ending(
                    subprocess.CompletedProcess(run.proc.args, run.proc.returncode, "", err))):
                lost[i].append(f"{run.copy.project}: {bad}")
            killed = figures if run.proc.returncode == -signal.SIGKILL else None
            lost[i] += check_out(run.copy.out, refs[run.copy.variant], refs[run.variant], killed)
        for run in runs:  # what a killed build left running (its workers) ends with it
            if not gone(run.proc.pid):
                figures.findings.append(f"processes of a killed build still run {GONE_CAP_S} s later")
        for i, run in enumerate(runs):
            lost[i] += settle(run.copy.project, run.copy.out, env, refs[run.variant])
            run.copy.variant = run.variant
            figures.record(lost[i])
        figures.findings += check_cache(cache, env, settled=True)
    return figures


GONE_CAP_S = 60.0


def gone(group: int) -> bool:
    """Wait until no process of process group `group` is left (at most GONE_CAP_S)."""
    deadline = time.monotonic() + GONE_CAP_S
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------- faults at counted openings

# A `sitecustomize` that makes the K-th opening of a file for writing under
# LOOM_TEST_FAULT_UNDER fail with ENOSPC, and every one after it: a disk
# that fills up at that moment (a single failure would be absorbed: an
# anonymous file that cannot be made falls back to a named one). K = 0:
# only count, written to LOOM_TEST_OPENS at exit. Making an anonymous file
# in a folder (O_TMPFILE) counts: that is how outputs and entries start.
OPEN_FAULT = '''
import errno, os, sys

_at = int(os.environ.get("LOOM_TEST_FAULT_AT", "0"))
_seen = [0]
_writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _count():
    with open(os.environ["LOOM_TEST_OPENS"], "w") as f:
        f.write(str(_seen[0]))


def _hook(event, args):
    if event != "open" or not isinstance(args[0], (str, bytes)):
        return
    flags = args[2] if isinstance(args[2], int) else 0
    if not (flags & _writes or (isinstance(args[1], str) and any(c in args[1] for c in "wax+"))):
        return
    path = os.fsdecode(args[0])
    if not path.startswith(os.environ["LOOM_TEST_FAULT_UNDER"]):
        return
    _seen[0] += 1
    if _at and _seen[0] >= _at:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


if os.environ.get("LOOM_TEST_OPENS") or os.environ.get("LOOM_TEST_FAULT_AT"):
    if not int(os.environ.get("LOOM_TEST_FAULT_AT", "0")):
        import atexit
        atexit.register(_count)
    sys.addaudithook(_hook)
'''


def write_faults(work: Path, points: int | None = None, seed: int = 1, references: References | None = None,
                 outputs_only: bool = False) -> Figures:
    """A rebuild (the old variant on disk and in the cache, a new variant to
    build whose SPIR-V half is cached) whose K-th write-opening fails, for K
    over every opening under the work folder (`outputs_only`: under the
    out-dir), or `points` of them, spread."""
    refs = references or References(work)
    figures = Figures()
    hooks = work / "fault-hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(OPEN_FAULT)
    project = make_copy(work / "faulted", VARIANTS[0])
    out, cache = project / "out", work / "faulted-cache"
    env = loom_env(cache)
    assert subprocess.run(build_argv(project, out), env=env, capture_output=True, timeout=TIMEOUT).returncode == 0
    helper = make_copy(work / "faulted-helper", VARIANTS[2])  # the new variant's SPIR-V items, cached
    assert subprocess.run(build_argv(helper, helper / "out", "--target", "spirv:vulkan1.3"), env=env,
                          capture_output=True, timeout=TIMEOUT).returncode == 0
    set_variant(project, VARIANTS[2])
    saved_out, saved_cache = work / "faulted-saved-out", work / "faulted-saved-cache"
    shutil.copytree(out, saved_out, symlinks=True)
    shutil.copytree(cache, saved_cache, symlinks=True)
    fault_env = dict(env, PYTHONPATH=env["PYTHONPATH"] + os.pathsep + str(hooks),
                     LOOM_TEST_FAULT_UNDER=str(out if outputs_only else work), LOOM_TEST_OPENS=str(hooks / "opens"))

    def restore() -> None:
        shutil.rmtree(out)
        shutil.copytree(saved_out, out, symlinks=True)
        shutil.rmtree(cache)
        shutil.copytree(saved_cache, cache, symlinks=True)

    counted = subprocess.run(build_argv(project, out, "-j", "1"), env=fault_env, capture_output=True, text=True,
                             timeout=TIMEOUT)
    if counted.returncode != 0:
        raise RuntimeError(f"the counting build failed: {counted.stderr}")
    n = int((hooks / "opens").read_text())
    chosen = list(range(1, n + 1))
    if points is not None and points < n:
        rng = random.Random(seed)
        chosen = sorted({1, 2, n, *rng.sample(range(3, n), points - 3)})  # `points` distinct openings
    del fault_env["LOOM_TEST_OPENS"]
    for k in chosen:
        restore()
        r = subprocess.run(build_argv(project, out, "-j", "1"), env=dict(fault_env, LOOM_TEST_FAULT_AT=str(k)),
                           capture_output=True, text=True, timeout=TIMEOUT)
        figures.experiments += 1
        figures.faults += 1
        figures.record(aftermath(f"fault at opening {k} of {n}", bad_ending(r), project, out, cache, env,
                                 refs[VARIANTS[0]], refs[VARIANTS[2]]))
    return figures


# ---------------------------------------------------------------- a full disk (tmpfs)


@contextlib.contextmanager
def small_disk(folder: Path, size: int) -> Iterator[Path | None]:
    """A tmpfs of `size` bytes mounted at `folder`; None when it cannot be mounted (not root)."""
    folder.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)],
                       capture_output=True)
    if r.returncode != 0:
        yield None
        return
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(disk: Path, leave: int) -> None:
    """Fill `disk` until only about `leave` bytes are free."""
    filler = disk / "filler"
    with contextlib.suppress(FileNotFoundError):
        filler.unlink()
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        f.write(b"\0" * max(0, free - leave))


def full_disk(work: Path, steps: int = 8, references: References | None = None) -> Figures | None:
    """The out-dir and the cache on a tmpfs with `leave` bytes free, for
    `steps` sizes from nothing to about what a build writes; None if no
    tmpfs can be mounted."""
    refs = references or References(work)
    figures = Figures()
    project = make_copy(work / "disk-project", VARIANTS[0])
    with small_disk(work / "disk", 8 << 20) as disk:
        if disk is None:
            return None
        out, cache = disk / "out", disk / "cache"
        env = loom_env(cache)
        r = subprocess.run(build_argv(project, out), env=env, capture_output=True, text=True, timeout=TIMEOUT)
        if r.returncode != 0:
            raise RuntimeError(f"the first build on the tmpfs failed: {r.stderr}")
        used = sum(p.stat().st_size for p in disk.rglob("*") if p.is_file())
        saved = work / "disk-saved"
        shutil.copytree(disk, saved, symlinks=True)
        set_variant(project, VARIANTS[1])
        for step in range(steps):
            leave = used * step // max(1, steps - 1)
            for child in disk.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            for child in saved.iterdir():
                (shutil.copytree if child.is_dir() else shutil.copy2)(child, disk / child.name)
            fill(disk, leave)
            r = subprocess.run(build_argv(project, out), env=env, capture_output=True, text=True, timeout=TIMEOUT)
            figures.experiments += 1
            figures.faults += r.returncode != 0 or "No space left" in r.stderr
            (disk / "filler").unlink()
            figures.record(aftermath(f"{leave} bytes free", bad_ending(r), project, out, cache, env,
                                     refs[VARIANTS[0]], refs[VARIANTS[1]]))
    return figures


# ---------------------------------------------------------------- strace: the N-th write of every process fails


def strace_faults(work: Path, points: int = 10, seed: int = 1, references: References | None = None) -> Figures | None:
    """`strace -f -e inject=write:error=ENOSPC:when=N` for `points` values of
    N: every process of the build (workers included) has its N-th write
    fail. None if strace is not installed or cannot trace here."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    refs = references or References(work)
    figures = Figures()
    rng = random.Random(seed)
    project = make_copy(work / "strace-project", VARIANTS[0])
    out, cache = project / "out", work / "strace-cache"
    env = loom_env(cache)
    if subprocess.run(build_argv(project, out), env=env, capture_output=True, timeout=TIMEOUT).returncode != 0:
        raise RuntimeError("the first build failed")
    probe = subprocess.run([strace, "-f", "-o", "/dev/null", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    saved_out, saved_cache = work / "strace-saved-out", work / "strace-saved-cache"
    shutil.copytree(out, saved_out, symlinks=True)
    shutil.copytree(cache, saved_cache, symlinks=True)
    set_variant(project, VARIANTS[1])
    for n in sorted({1, 2, 3, *(rng.randint(4, 400) for _ in range(max(0, points - 3)))}):
        shutil.rmtree(out)
        shutil.copytree(saved_out, out, symlinks=True)
        shutil.rmtree(cache)
        shutil.copytree(saved_cache, cache, symlinks=True)
        r = subprocess.run([strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=write,pwrite64,writev",
                            "-e", f"inject=write,pwrite64,writev:error=ENOSPC:when={n}",
                            *build_argv(project, out)], env=env, capture_output=True, text=True, timeout=TIMEOUT)
        figures.experiments += 1
        figures.faults += 1
        # A failed write to stderr may cut the one line short: exit 0, 1 or 3, never a traceback.
        bad = f"exit {r.returncode}: {r.stderr[-1500:]}" \
            if r.returncode not in (0, 1, 3) or "Traceback" in r.stderr else None
        figures.record(aftermath(f"write {n}", bad, project, out, cache, env, refs[VARIANTS[0]], refs[VARIANTS[1]]))
    return figures


# ---------------------------------------------------------------- hostile files and environment values


def _plant(rng: random.Random, path: Path) -> str:
    """Replace the file at `path` with something hostile; what it was."""
    if path.is_dir() and not path.is_symlink():  # planted by an earlier experiment
        shutil.rmtree(path)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    kind = rng.choice(["fifo", "dev-zero", "huge", "garbage", "empty", "folder", "dangling"])
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(5 << 30)  # sparse: no disk, and no memory unless it is read
    elif kind == "garbage":
        path.write_bytes(os.urandom(rng.randint(1, 4096)))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(path.parent / "nowhere")
    return kind


BAD_VALUES = {
    "LOOM_JOBS": ["0", "-1", "many", "1e3", "9" * 40, " ", "4097"],
    "LOOM_CACHE": ["maybe", "2", "", "OFF"],
    "LOOM_CACHE_MAX_SIZE": ["lots", "1e400G", "-5M", "9" * 400, "0"],
    "LOOM_CACHE_DIR": ["", "relative/cache", "/dev/null", "/proc/self"],
    "SOURCE_DATE_EPOCH": ["abc", "-1", "1e9", "4294967296", "0x10"],
    "MAKEFLAGS": ["-j4 --jobserver-auth=fifo:/dev/null", "-j4 --jobserver-auth=0,1", "-j4 --jobserver-auth=fifo:",
                  "-j4 --jobserver-auth=99999999999999999999,1", "-j4 --jobserver-fds=900,901", "-n", "--"],
    "TMPDIR": ["relative", "/no/such/folder", "/dev/null"],
    "COLUMNS": ["-5", "100000000", "abc"],
    "LOOM_TRACE_DIR": ["/dev/null/x", "/proc/self"],
    "LOOM_SERVER": ["yes", "AUTO"],
    "LOOM_SERVER_IDLE": ["0", "soon", "99999999"],
    "XDG_RUNTIME_DIR": ["relative", "/no/such/folder"],
}


def hostile_inputs(work: Path, count: int, seed: int = 1, references: References | None = None) -> Figures:
    """`count` builds, each with random hostile things planted (cache entries,
    the counters, the state file and the no-op record) and a random bad
    environment value: no hang (a timeout), no traceback, no internal error;
    a usage error is one line and exit 2; otherwise the build's bytes are a
    clean build's (with `--package`: a package)."""
    rng = random.Random(seed)
    refs = references or References(work)
    figures = Figures()
    project = make_copy(work / "hostile", VARIANTS[0])
    out, cache = project / "out", work / "hostile-cache"
    env = loom_env(cache)
    want = refs[VARIANTS[0]]
    for i in range(count):
        r = subprocess.run(build_argv(project, out), env=env, capture_output=True, text=True, timeout=TIMEOUT)
        if r.returncode != 0:
            raise RuntimeError(f"the clean build failed: {r.stderr}")
        planted = []
        entries = [p for p in (cache / "v1").glob("*/*") if p.is_file()]
        for p in rng.sample(entries, min(len(entries), rng.randint(0, 3))):
            planted.append(f"entry:{_plant(rng, p)}")
        for name in rng.sample(["stats.json", "stats.lock"], rng.randint(0, 1)):
            planted.append(f"{name}:{_plant(rng, cache / name)}")
        for name in rng.sample([".loom-build.json", ".loom-build.noop"], rng.randint(0, 2)):
            planted.append(f"{name}:{_plant(rng, out / name)}")
        name = rng.choice(sorted(BAD_VALUES))
        value = rng.choice(BAD_VALUES[name])
        argv = build_argv(project, out, "--package") if name == "SOURCE_DATE_EPOCH" else build_argv(project, out)
        if rng.random() < 0.5:  # outputs gone too: they come from the hostile cache or are compiled
            shutil.rmtree(out / "amdgpu-gfx1100", ignore_errors=True)
        what = f"#{i} {name}={value!r} {planted}"
        figures.experiments += 1
        figures.faults += len(planted) + 1
        lost = []
        try:
            r = subprocess.run(argv, env=dict(env, **{name: value}), capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            lost.append(f"{what}: hung")
        else:
            err = r.stderr
            if "Traceback" in err or "internal" in err or r.returncode not in (0, 1, 2):
                lost.append(f"{what}: exit {r.returncode}: {err[-1500:]}")
            elif r.returncode == 2 and (err.count("\n") != 1 or name not in err):
                lost.append(f"{what}: a usage error that is not one line naming {name}: {err}")
            elif r.returncode == 0 and item_sets(out) != want:
                lost.append(f"{what}: the build's bytes are not a clean build's")
        for folder in (cache, out):  # what the test planted goes, whatever loom left of it
            for p in list(folder.rglob("*")) if folder.is_dir() else []:
                if p.is_symlink() or p.is_fifo() or (p.is_file() and p.stat().st_size > 256 << 20):
                    p.unlink()
        shutil.rmtree(cache / "stats.json", ignore_errors=True)
        shutil.rmtree(out / ".loom-build.json", ignore_errors=True)
        shutil.rmtree(out / ".loom-build.noop", ignore_errors=True)
        lost += [f"{what}: {f}" for f in settle(project, out, env, want)]
        figures.record(lost)
    return figures


# ---------------------------------------------------------------- all of them


def attack(rounds: int, seed: int, log=print) -> Figures:
    """Every experiment above, sized by `rounds`: the kill storm's rounds,
    the write faults at every opening, the full-disk sweep and strace."""
    total = Figures()
    with tempfile.TemporaryDirectory(prefix="loom-attack-") as folder:
        work = Path(folder)
        for sub in ("storm", "opens", "disk", "strace", "hostile"):
            (work / sub).mkdir()
        refs = References(work)
        steps = [
            ("concurrent builds under SIGKILL", lambda: kill_storm(work / "storm", rounds, seed=seed, references=refs)),
            ("ENOSPC at every opening for writing", lambda: write_faults(work / "opens", None, seed, refs)),
            ("a full disk (tmpfs)", lambda: full_disk(work / "disk", max(8, rounds // 2), refs)),
            ("strace: ENOSPC at the N-th write", lambda: strace_faults(work / "strace", max(10, rounds), seed,
                                                                       refs)),
            ("hostile cache, bookkeeping and environment", lambda: hostile_inputs(work / "hostile", 4 * rounds, seed,
                                                                                  refs)),
        ]
        for name, step in steps:
            start = time.monotonic()
            got = step()
            if got is None:
                log(f"{name}: skipped (not possible here)")
                continue
            log(f"{name}: {got.line()} ({time.monotonic() - start:.0f} s)")
            for finding in got.findings:
                log(f"  finding: {finding[:3000]}")
            total.add(got)
    return total

