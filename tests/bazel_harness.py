"""What loom's Bazel tests share (tests/test_bazel*.py): Bazel by version, builds of the examples in
fresh workspace copies, execution logs, and a remote-execution grid.

Bazel 4.2.3 is the host's (Debian 12's bazel-bootstrap, scripts/install-system-deps.sh). Bazel 7.7.1
runs in the Debian sid chroot that scripts/setup-bazel.sh makes, entered through
scripts/bazel-chroot.sh with the test's folders, the checkout and the Python that runs loom bound at
their own paths: Bazel inside and outside the chroot runs the same loom, at the same path. The grid
(`Grid`): PostgreSQL and BuildGrid on the host, buildbox-casd and buildbox-worker (running actions
with buildbox-run-hosttools) in the chroot.

Its fixtures (`bazels`, `loom_under_test`, `grid`) are session-wide; tests/conftest.py loads them.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROOT = Path(os.environ.get("LOOM_BAZEL_CHROOT", "/var/lib/loom/bazel-sid"))
SETUP = ROOT / "scripts" / "setup-bazel.sh"
ENTER = ROOT / "scripts" / "bazel-chroot.sh"
ARCHIVE_UNREACHABLE = 3  # setup-bazel.sh's exit status when the Debian archive cannot be reached


def unavailable(reason: str) -> None:
    """Skips a test whose tools are missing here; in CI, where the project's scripts install them, fails."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@dataclass(frozen=True)
class Bazel:
    """One Bazel binary: the host's, or the chroot's entered with `binds` visible at their own paths."""

    version: str  # the Debian package's upstream version, e.g. "7.7.1"
    in_chroot: bool
    binds: tuple[str, ...] = ()

    @property
    def modern(self) -> bool:
        """Bazel 7: bzlmod on by default, `@bazel_tools//tools/build_defs/repo:local.bzl`, --enable_workspace."""
        return int(self.version.split(".")[0]) >= 7

    def command(self, argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str] | None]:
        """The command line and environment that run `argv` (starting with "bazel") in `cwd`."""
        if not self.in_chroot:
            return argv, {**os.environ, **env}
        enter = [str(ENTER), "--cwd", str(cwd)]
        for folder in self.binds:
            enter += ["--bind", folder]
        for name, value in sorted(env.items()):
            enter += ["--env", f"{name}={value}"]
        return [*enter, "--", *argv], None


def _debian_version(package: str, chroot: Path | None = None) -> str | None:
    """`7.7.1` for an installed `7.7.1+ds-8+b1`; None when the package is not installed."""
    command = ["dpkg-query", "-W", "-f=${Status} ${Version}", package]
    if chroot is not None:
        command[1:1] = [f"--admindir={chroot}/var/lib/dpkg"]
    proc = subprocess.run(command, capture_output=True, text=True)
    status, _, version = proc.stdout.rpartition(" ")
    if proc.returncode != 0 or not status.endswith("installed") or not version:
        return None
    return version.split(":")[-1].split("+")[0].split("-")[0]


def _chroot_binds(basetemp: Path) -> tuple[str, ...]:
    """The host folders the chroot's Bazel and worker must see: the tests' temporary folders (workspace
    copies, the loom wrapper, the grid's files), the checkout, and the Python running loom."""
    wanted = {Path(p).resolve() for p in (basetemp, ROOT, sys.prefix, sys.base_prefix)}
    wanted |= {Path(p).resolve() for p in sys.path if p and Path(p).is_dir() and not p.startswith("/usr/")}
    chosen: list[Path] = []
    for folder in sorted(wanted, key=lambda p: len(p.parts)):
        if folder != Path("/") and not any(folder.is_relative_to(c) for c in chosen):
            chosen.append(folder)
    return tuple(str(p) for p in chosen)


class Bazels:
    """The Bazel binaries of this machine, by version: `bazels["7.7.1"]` or a skip saying why not."""

    def __init__(self, basetemp: Path) -> None:
        self._basetemp = basetemp
        self._chroot: Bazel | None = None

    def __getitem__(self, version: str) -> Bazel:
        host = _debian_version("bazel-bootstrap") if shutil.which("bazel") else None
        if host == version:
            return Bazel(version, in_chroot=False)
        chroot = self._chroot_bazel()
        if chroot.version == version:
            return chroot
        unavailable(f"no Bazel {version} here: the host has {host or 'none'} (scripts/install-system-deps.sh), "
                    f"the chroot {chroot.version} (scripts/setup-bazel.sh)")
        raise AssertionError("unreachable")

    def chroot(self) -> Bazel:
        return self._chroot_bazel()

    def _chroot_bazel(self) -> Bazel:
        if self._chroot is None:
            ensure_chroot()
            version = _debian_version("bazel-bootstrap", CHROOT)
            assert version, f"{CHROOT} has no bazel-bootstrap"
            self._chroot = Bazel(version, in_chroot=True, binds=_chroot_binds(self._basetemp))
        return self._chroot


def ensure_chroot() -> None:
    """Makes the chroot with the project's script (a no-op once made); skips where the archive is out of reach."""
    if os.geteuid() != 0:
        unavailable("the Bazel 7 chroot needs root (debootstrap, chroot, mount namespaces)")
    proc = subprocess.run([str(SETUP)], capture_output=True, text=True, timeout=1800)
    if proc.returncode == ARCHIVE_UNREACHABLE:
        pytest.skip(f"the Debian archive cannot be reached, so no Bazel 7 chroot: {proc.stderr.strip()}")
    assert proc.returncode == 0, f"scripts/setup-bazel.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}"


@pytest.fixture(scope="session")
def bazels(tmp_path_factory: pytest.TempPathFactory) -> Bazels:
    return Bazels(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def loom_under_test(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LOOM_BIN for the rules: this checkout's loom run by this Python, at a path a chroot also sees."""
    wrapper = tmp_path_factory.mktemp("loom-under-test") / "loom"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH='{ROOT}' exec '{sys.executable}' -m loomcli \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


# Offline, test rules (a loom_test) cannot fetch Bazel's coverage tools: docs/bazel.md's stand-in.
OFFLINE_TESTS = ["--coverage_report_generator=@loom_rules//:no_coverage"]


class Workspace:
    """A fresh copy of `bazel/` whose examples one Bazel builds, with a private output root.

    `form` is "bzlmod" (MODULE.bazel) or "workspace" (WORKSPACE); on Bazel before 7 the examples'
    WORKSPACE loses its load of the Starlark local_repository, as docs/bazel.md says to do there.
    Use it as a context manager: the Bazel server is shut down at the end.
    """

    def __init__(self, bazel: Bazel, folder: Path, loom: Path, form: str = "workspace") -> None:
        assert form in ("bzlmod", "workspace"), form
        if form == "bzlmod" and not bazel.modern:
            pytest.fail(f"Bazel {bazel.version} has no bzlmod")
        shutil.copytree(ROOT / "bazel", folder / "bazel", ignore=shutil.ignore_patterns("bazel-*", "MODULE.bazel.lock"))
        self.bazel = bazel
        self.examples = folder / "bazel" / "examples"
        self.env = {"LOOM_BIN": str(loom)}
        if not bazel.modern:
            workspace = self.examples / "WORKSPACE"
            lines = workspace.read_text().splitlines(keepends=True)
            workspace.write_text("".join(line for line in lines if "build_defs/repo:local.bzl" not in line))
        self.startup = ["bazel", "--nohome_rc", f"--output_user_root={folder / 'bazel-root'}", "--max_idle_secs=600"]
        self.flags = ["--symlink_prefix=/", "--color=no", "--curses=no", *OFFLINE_TESTS]
        if bazel.modern:
            self.flags += ["--lockfile_mode=off"]
            self.flags += (["--enable_bzlmod", "--noenable_workspace"] if form == "bzlmod"
                           else ["--noenable_bzlmod", "--enable_workspace"])

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv, env = self.bazel.command([*self.startup, *args], self.examples, self.env)
        proc = subprocess.run(argv, cwd=self.examples, env=env, capture_output=True, text=True, timeout=900)
        if check:
            assert proc.returncode == 0, f"bazel {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
        return proc

    def build(self, log: Path, *extra: str, targets: tuple[str, ...] = ("//...",)) -> list[dict]:
        """Builds and returns the spawns Bazel ran or fetched (its execution log)."""
        self.run("build", *self.flags, f"--execution_log_json_file={log}", *extra, *targets)
        return read_execution_log(log)

    def info(self, key: str) -> Path:
        return Path(self.run("info", *self.flags, key).stdout.strip())

    def shutdown(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.run("shutdown", check=False)


def read_execution_log(path: Path) -> list[dict]:
    """Bazel (4 and 7) writes `--execution_log_json_file` as concatenated JSON objects, one per spawn."""
    text, decoder, spawns, at = path.read_text(), json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return spawns
        spawn, at = decoder.raw_decode(text, at)
        spawns.append(spawn)


def loom_spawns(spawns: list[dict]) -> list[dict]:
    return [s for s in spawns if s.get("mnemonic", "").startswith("Loom")]


# Bazel 7 downloads only top-level outputs of remote actions by default; the tests compare them all.
DOWNLOAD_ALL = "--remote_download_outputs=all"


def remote_cache_hit(spawn: dict) -> bool:
    """Whether the spawn's outputs came from the remote cache (Bazel 4 logs `remoteCacheHit`, Bazel 7
    `cacheHit`; false values are left out)."""
    return bool(spawn.get("remoteCacheHit", spawn.get("cacheHit", False)))


def action(spawn: dict) -> str:
    """An action's name in any Bazel's execution log: its mnemonic and its first declared output under
    bazel-bin, e.g. `LoomCompile kernels/saxpy.amdgpu-gfx1100.hsaco` (Bazel 7 logs no progress
    message, Bazel 4 no target label)."""
    first = min(o.rpartition("/bin/")[2] for o in spawn["listedOutputs"])
    return f"{spawn['mnemonic']} {first}"


def outputs(bin_dir: Path) -> dict[str, str]:
    """sha256 of every output of the examples, by path under bazel-bin."""
    files = [p for folder in ("kernels", "lib", "commands") for p in (bin_dir / folder).rglob("*")
             if p.is_file() and not p.name.endswith(".params")  # Bazel's command lines, not outputs
             and ".loom_test.sh" not in str(p)]  # a loom_test's script and runfiles name repositories
    files.append(bin_dir / "release-0.1.0.loompkg.tar.gz")
    return {str(p.relative_to(bin_dir)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(files)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, what: str, log: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    pytest.fail(f"{what} did not listen on 127.0.0.1:{port}:\n{log.read_text()[-3000:]}")


def bgd() -> str:
    return shutil.which("bgd") or str(Path(sys.executable).with_name("bgd"))


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, group: bool = False) -> None:
    """Ends a process this harness started (and, with `group`, the session it leads) and reaps it."""
    def send(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(process.pid, signum)
            else:
                process.send_signal(signum)

    if process.poll() is None:
        send(sig)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait()


CACHE_CONFIG = """\
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
storages:
  - !lru-storage &cas
    size: 256MB
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 4096
    allow-updates: true
    cache-failed-actions: false
instances:
  - name: ""
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
"""

# The execution service adds a scheduler, which BuildGrid keeps in PostgreSQL; its bots service is
# where buildbox-worker asks for work.
GRID_CONFIG = """\
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
connections:
  - !sql-connection &sql
    connection-string: {database}
storages:
  - !lru-storage &cas
    size: 512MB
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 4096
    allow-updates: true
    cache-failed-actions: false
schedulers:
  - !sql-scheduler &scheduler
    sql: *sql
    storage: *cas
    action-cache: *ac
instances:
  - name: ""
    services:
      - !action-cache
        cache: *ac
      - !execution
        scheduler: *scheduler
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
"""


@contextlib.contextmanager
def remote_cache(folder: Path) -> Iterator[str]:
    """`bgd server start` on 127.0.0.1 with an in-memory CAS, ActionCache and ByteStream (no execution).

    Yields its URL at once: the server comes up while the caller's first builds run (`wait_for_port`)."""
    port = free_port()
    config = folder / "bgd-cache.yml"
    config.write_text(CACHE_CONFIG.format(port=port))
    with open(folder / "bgd-cache.log", "wb") as log:
        server = subprocess.Popen([bgd(), "server", "start", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        stop(server)


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        unavailable("no PostgreSQL server here (scripts/install-system-deps.sh installs Debian's postgresql)")
    return Path(found[-1]).parent


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A private PostgreSQL cluster on 127.0.0.1 (trust auth, no fsync) with a database `bgd`; yields
    its SQLAlchemy URL. PostgreSQL refuses to run as root, so it runs as the `postgres` user in a
    folder of its own, removed at the end."""
    bindir = _postgres_bin()
    try:
        import psycopg2  # noqa: F401  BuildGrid's driver for postgresql+psycopg2://
    except ImportError:
        unavailable("no psycopg2 (pip install -e '.[test]' installs psycopg2-binary)")
    folder = Path(tempfile.mkdtemp(prefix="loom-grid-postgres-"))
    try:
        shutil.chown(folder, "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        data, port = folder / "data", free_port()
        subprocess.run([*as_postgres, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "bgd",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True, cwd=folder)
        with open(folder / "postgres.log", "wb") as log:
            server = subprocess.Popen([*as_postgres, str(bindir / "postgres"), "-D", str(data), "-k", str(folder),
                                       "-h", "127.0.0.1", "-p", str(port), "-c", "fsync=off",
                                       "-c", "full_page_writes=off"], stdout=log, stderr=subprocess.STDOUT,
                                      cwd=folder)
        try:
            wait_for_port(port, "PostgreSQL", folder / "postgres.log")
            deadline = time.monotonic() + 60
            while subprocess.run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "bgd", "bgd"],
                                 capture_output=True).returncode != 0:
                assert time.monotonic() < deadline, (folder / "postgres.log").read_text()[-3000:]
                time.sleep(0.5)
            yield f"postgresql+psycopg2://bgd@127.0.0.1:{port}/bgd"
        finally:
            stop(server, signal.SIGINT)  # a fast shutdown
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Grid:
    """A remote-execution service on 127.0.0.1: BuildGrid (execution, CAS, action cache) with its
    scheduler in PostgreSQL, and one buildbox worker in the chroot running actions with
    buildbox-run-hosttools, so an action finds there the loom that the client's wrapper names.
    buildbox-casd stages each action's inputs (through FUSE, in its mount namespace), so it runs in
    the worker's namespace."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.folder.glob("*.log")))


@contextlib.contextmanager
def start_grid(folder: Path, chroot: Bazel) -> Iterator[Grid]:
    """Starts PostgreSQL, BuildGrid and a worker in `chroot`'s namespace; stops them all at the end."""
    with postgres() as database:
        subprocess.run([bgd(), "migrate", "apply", database], check=True, capture_output=True)
        port = free_port()
        (folder / "bgd.yml").write_text(GRID_CONFIG.format(port=port, database=database))
        with open(folder / "bgd.log", "wb") as log:
            server = subprocess.Popen([bgd(), "server", "start", str(folder / "bgd.yml")], stdout=log,
                                      stderr=subprocess.STDOUT)
        worker = None
        try:
            wait_for_port(port, "BuildGrid", folder / "bgd.log")
            remote, socket_path = f"http://127.0.0.1:{port}", folder / "casd.sock"
            (folder / "casd-cache").mkdir()
            script = (
                f"buildbox-casd --cas-remote={remote} --bind=unix:{socket_path} {folder / 'casd-cache'}"
                f" >{folder / 'casd.log'} 2>&1 &\n"
                f"exec buildbox-worker --bots-remote={remote} --cas-remote=unix:{socket_path}"
                f" --buildbox-run=/usr/bin/buildbox-run-hosttools --concurrent-jobs=2 --request-timeout=60"
                f" loom-test-worker >{folder / 'worker.log'} 2>&1\n")
            argv, _ = chroot.command(["sh", "-c", script], folder, {})
            worker = subprocess.Popen(argv, start_new_session=True)  # casd and the worker: one process group
            yield Grid(f"grpc://127.0.0.1:{port}", folder)
        finally:
            if worker is not None:
                stop(worker, group=True)
            stop(server)


@pytest.fixture(scope="session")
def grid(tmp_path_factory: pytest.TempPathFactory, bazels: Bazels) -> Iterator[Grid]:
    """A running remote-execution grid, shared by the session's tests."""
    chroot = bazels.chroot()
    with start_grid(tmp_path_factory.mktemp("grid"), chroot) as running:
        yield running
