"""The no-op check of `loom build`: from stat data alone, before click, the
project parser or the engine are imported, decide that the build would do
nothing, and say so as the build would.

A build that ends with every item of its selection built writes
`out-dir/.loom-build.noop` (after the state file). It records what the
build's decision depended on:

- the selection: the project file and folder, the out-dir (and whether
  `--out-dir` named it), the `--target` values;
- the stat stamps (`loomcli.service.fingerprint.stat_stamp`: size, mtime,
  ctime, inode) of the project file, of every source and library file the
  keys hashed, of every folder a `srcs` glob listed, of loom's own code
  files and folders and of llvmlite's `_version.py`, each taken before the
  file was read and only once old enough to be trusted;
- the size and mtime of the state file and of every output, as the build
  would trust them.

If all of it is unchanged, the full build would compute the same keys and
find every item up to date (the state file is the one it wrote, the outputs
the ones it recorded), so the check prints the same summary and exits 0.
Anything else, and any option the check does not know (`--package`,
`--trace`, `--help`, ...), falls through to the full command, which is
always right: the check may only ever say "nothing to do" when the build
would have done nothing. The record is decoded as untrusted input: any
malformed token means no answer, never an error.

Format: NUL-separated UTF-8 tokens (paths with `surrogateescape`), a
header (ending with the path of the llvmlite `_version.py` the keys read,
which must be the one this interpreter would import), then records `s PATH SIZE MTIME CTIME INODE` (a stamp) and
`o PATH SIZE MTIME` (an output or the state file).
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing, collections.abc and dataclasses cost more to import than the whole check
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

NOOP_FILE = ".loom-build.noop"
MAGIC = "loom-noop-1"
MAX_RECORD_BYTES = 64 << 20  # far above any real project's; a larger file is not read
# A project file is a few kilobytes; a larger one is refused before it is
# read (here: not answered; `loomcli.build.project` says why).
MAX_PROJECT_FILE_BYTES = 4 << 20

_CHOICES = {"--progress": ("auto", "rich", "plain", "none"), "--jobserver-style": ("fifo", "pipe"),
            "--diagnostics": ("text", "json")}
_VALUED = {"-f", "-j", "--jobs", "--target", "--out-dir", *_CHOICES}
_FLAGS = {"--no-cache", "--keep-going", "-q", "--quiet", "-v", "--verbose"}


class Selection:
    """What a `loom build` command line selects, as the record keeps it."""

    def __init__(self, project_file: str, root: str, out_dir: str, out_dir_given: bool,
                 targets: tuple[str, ...]) -> None:
        self.project_file = project_file    # absolute
        self.root = root                    # absolute
        self.out_dir = out_dir              # absolute
        self.out_dir_given = out_dir_given  # --out-dir named it (else the project file did)
        self.targets = targets              # the --target values, as given


class Summary:
    """What the build's last line says of a no-op."""

    def __init__(self, name: str, version: str, items: int, targets: int) -> None:
        self.name = name
        self.version = version
        self.items = items
        self.targets = targets


def encode(selection: Selection, summary: Summary, loom_version: str, llvm_file: str,
           stamps: Iterable[tuple[str, Sequence[int]]], outputs: Iterable[tuple[str, int, int]]) -> bytes:
    """The record's bytes: the same inputs give the same bytes. `llvm_file`
    is the llvmlite `_version.py` the keys read (its stamp is among `stamps`)."""
    tokens = [MAGIC, loom_version, selection.project_file, selection.root, os.path.realpath(selection.root),
              selection.out_dir, os.path.realpath(selection.out_dir), "1" if selection.out_dir_given else "0",
              str(len(selection.targets)), *selection.targets,
              summary.name, summary.version, str(summary.items), str(summary.targets), llvm_file]
    for path, stamp in stamps:
        tokens += ["s", path, *map(str, stamp)]
    for path, size, mtime in outputs:
        tokens += ["o", path, str(size), str(mtime)]
    return "\0".join(tokens).encode("utf-8", "surrogateescape")


def check(args: Sequence[str]) -> int | None:
    """`loom build ARGS` when the record shows it would do nothing: print
    what it would print and return its exit code (0). None: run the build."""
    start = time.monotonic()
    parsed = _parse(args)
    if parsed is None or sys.stdout is None:
        return None
    directory, options, targets = parsed
    try:
        summary = _verify(directory, options, targets)
    except (OSError, ValueError, IndexError, UnicodeError):
        return None
    if summary is None:
        return None
    if not ("-q" in options or "--quiet" in options or options.get("--progress") == "none"):
        from loomcli.build.progress import summary_line

        # Plain and rich progress end on this line; a no-op has nothing else to show.
        line = summary_line(summary.items, summary.targets, {"up-to-date": summary.items}, time.monotonic() - start)
        try:
            print(f"loom: built {summary.name} {summary.version}: {line}", flush=True)
        except OSError:  # a closed pipe: the full command reports it as it does
            return None
    return 0


def _parse(args: Sequence[str]) -> tuple[str, dict[str, str], tuple[str, ...]] | None:
    """(DIR, option -> value, --target values) of the command lines the check
    understands; None for anything else (the full command parses those)."""
    directory: str | None = None
    options: dict[str, str] = {}
    targets: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in _FLAGS:
            options[arg] = ""
            continue
        name, value = arg, None
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
        elif arg[:2] in ("-f", "-j") and len(arg) > 2:
            name, value = arg[:2], arg[2:]
        if name in _VALUED:
            if value is None:
                if i == len(args):
                    return None
                value = args[i]
                i += 1
            if name in _CHOICES and value not in _CHOICES[name]:
                return None
            if name in ("-j", "--jobs"):
                try:
                    int(value)
                except ValueError:
                    return None
            if name == "--target":
                targets.append(value)
            else:
                options[name] = value
            continue
        if arg.startswith("-") or directory is not None:
            return None  # --package, --trace, --help, an unknown option, a second DIR
        directory = arg
    return (directory if directory is not None else "."), options, tuple(targets)


def _verify(directory: str, options: dict[str, str], targets: tuple[str, ...]) -> Summary | None:
    if not os.path.isdir(directory):
        return None
    file = options.get("-f")
    path = file if file is not None else os.path.join(directory, "loom.toml")
    root = os.path.abspath(os.path.dirname(path) if file is not None else directory)
    given = options.get("--out-dir")
    if given is not None:
        out_dir = os.path.abspath(given)
    else:
        text = _read_regular(path, MAX_PROJECT_FILE_BYTES)
        if text is None:
            return None
        out_dir = os.path.join(root, *_out_dir_of(text.decode("utf-8", "replace")).split("/"))
    data = _read_regular(os.path.join(out_dir, NOOP_FILE), MAX_RECORD_BYTES)
    if data is None:
        return None
    tokens = data.decode("utf-8", "surrogateescape").split("\0")
    from loomcli import __version__

    n = int(tokens[8])
    header = [MAGIC, __version__, os.path.abspath(path), root, os.path.realpath(root),
              out_dir, os.path.realpath(out_dir), "1" if given is not None else "0", str(len(targets)), *targets]
    if tokens[:9 + n] != header:
        return None
    name, version, items, target_count, llvm_file = tokens[9 + n:14 + n]
    if llvm_file != _llvm_version_file():  # another llvmlite would be imported now
        return None
    i = 14 + n
    while i < len(tokens):
        kind, file_path = tokens[i], tokens[i + 1]
        st = os.stat(file_path)
        if kind == "s":
            if [str(st.st_size), str(st.st_mtime_ns), str(st.st_ctime_ns), str(st.st_ino)] != tokens[i + 2:i + 6]:
                return None
            i += 6
        elif kind == "o":
            if [str(st.st_size), str(st.st_mtime_ns)] != tokens[i + 2:i + 4]:
                return None
            i += 4
        else:
            return None
    return Summary(name, version, int(items), int(target_count))


def _read_regular(path: str, limit: int) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes, else None: a
    FIFO is opened without waiting for a writer and never read, `/dev/zero`
    and a huge file are not read (the full command says what is wrong)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def _llvm_version_file() -> str | None:
    """The `_version.py` of the llvmlite this interpreter would import (what
    `loomcli.service.fingerprint.llvm_version` reads), without importing it."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("llvmlite")
    if spec is None or spec.origin is None:
        return None
    return os.path.join(os.path.dirname(spec.origin), "_version.py")


def _out_dir_of(text: str) -> str:
    """`[build] out-dir` of a simply written project file, else the default.
    A wrong answer costs nothing but speed: the record names the out-dir the
    full parser found and the project file's stamp, and both must match."""
    table = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            table = line.split("#", 1)[0].strip()
            continue
        key, eq, value = line.partition("=")
        if table == "[build]" and eq and key.strip() in ("out-dir", '"out-dir"'):
            value = value.split("#", 1)[0].strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" and "\\" not in value:
                return value[1:-1]
    return "build/loom"
