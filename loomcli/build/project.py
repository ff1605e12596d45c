"""`loom.toml`: read, validated key by key, paths kept inside the project
(TOOLCHAIN.md section 9).

Every problem is a `LoomError` (exit 1) whose message starts with
`loom.toml:LINE:` and names the key, e.g.
`loom.toml:14: [[kernels]] "elementwise": key `srcs`: "../x.loom" leaves the project folder`.
Unknown keys and wrong types are errors; paths that are absolute, use
`..`, or resolve (through symlinks) outside the project folder are rejected.
"""

from __future__ import annotations

import glob
import os
import re
import stat
import time
import tomllib
from dataclasses import dataclass, field
from typing import Any

from loomcli.build.noop import MAX_PROJECT_FILE_BYTES
from loomcli.errors import LoomError
from loomcli.files import finite_float
from loomcli.service.fingerprint import stat_stamp

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Library:
    name: str
    srcs: tuple[str, ...]        # project-relative, `/`-separated, sorted, expanded
    libraries: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelSet:
    name: str
    srcs: tuple[str, ...]
    libraries: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommandSet:
    name: str
    srcs: tuple[str, ...]
    libraries: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()


@dataclass(frozen=True)
class TestSet:
    """A `[[test]]` set (TOOLCHAIN.md 13): `loom test DIR` runs the check
    cases of `srcs`, linked with the sources of `libraries` (names of
    [[library]] and [[kernels]] sets), bound with `config` over [config],
    on each of `devices`."""

    name: str
    srcs: tuple[str, ...]
    libraries: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    devices: tuple[str, ...] = ("auto",)
    config_lines: dict[str, int] = field(default_factory=dict)  # key -> its line in loom.toml


TEST_DEVICES = ("auto", "vulkan", "cpu", "interpreter")


@dataclass(frozen=True)
class Project:
    root: str                    # the project folder (absolute)
    file: str                    # loom.toml as shown in messages
    name: str
    version: str
    targets: tuple[str, ...]
    out_dir: str                 # project-relative
    pipeline: str
    config: dict[str, Any] = field(default_factory=dict)
    libraries: tuple[Library, ...] = ()
    kernels: tuple[KernelSet, ...] = ()
    commands: tuple[CommandSet, ...] = ()
    tests: tuple[TestSet, ...] = ()
    package_format: str = "tar.gz"
    config_lines: dict[str, int] = field(default_factory=dict)  # [config] key -> its line in loom.toml
    # What a no-op check (loomcli.build.noop) must find unchanged for this
    # reading to still hold: the project file's path and stat stamp, and the
    # stamps of the folders the `srcs` globs listed, taken before reading.
    # A stamp is None when it was too recent to be trusted.
    file_path: str = ""
    file_stamp: list[int] | None = None
    folder_stamps: tuple[tuple[str, list[int] | None], ...] = ()

    def path(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def library(self, name: str) -> Library:
        return next(lib for lib in self.libraries if lib.name == name)


# The schema: section -> key -> (type description, check).
_TOP = {"project", "build", "config", "library", "kernels", "command", "package", "test"}
_KEYS = {
    "project": {"name", "version", "description"},
    "build": {"targets", "out-dir", "pipeline"},
    "package": {"format"},
    "library": {"name", "srcs", "libraries"},
    "kernels": {"name", "srcs", "libraries", "roots"},
    "command": {"name", "srcs", "libraries", "roots"},
    "test": {"name", "srcs", "libraries", "config", "devices"},
}


class _Locator:
    """Finds the line of a key for messages: tomllib gives no positions.
    Section headers are indexed once, so a project of many tables costs one
    pass over the text, not one per lookup."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*(?:\"([^\"]*)\"|([^\]\s]+))\s*\]")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        # (table, index or None) -> (start, end) line range, 0-based, end exclusive
        self.sections: dict[tuple[str, int | None], tuple[int, int]] = {}
        counts: dict[str, int] = {}
        open_section: tuple[str, int | None] | None = None
        for i, line in enumerate(self.lines):
            m = self._HEADER.match(line)
            if m is None:
                continue
            if open_section is not None:
                self.sections[open_section] = (self.sections[open_section][0], i)
                open_section = None
            name = m.group(2) if m.group(2) is not None else m.group(3)
            if m.group(1) == "[[":
                index = counts.get(name, -1) + 1
                counts[name] = index
                open_section = (name, index)
            else:
                open_section = (name, None)
            self.sections.setdefault(open_section, (i, len(self.lines)))
        if open_section is not None:
            self.sections[open_section] = (self.sections[open_section][0], len(self.lines))

    def line(self, table: str | None, index: int | None = None, key: str | None = None) -> int:
        if table is None:
            start = 0
        else:
            start = self.sections.get((table, index), (-1, -1))[0]
            if start < 0:
                return 1
        if key is None:
            return start + 1
        return self.find(table, index, key) or start + 1

    def find(self, table: str | None, index: int | None, key: str) -> int | None:
        """The line of `key = ...` in that table, None if it is not there."""
        start, end = (0, len(self.lines)) if table is None else self.sections.get((table, index), (-1, -1))
        pattern = re.compile(rf'^\s*(?:"{re.escape(key)}"|{re.escape(key)})\s*=')
        for i in range(max(start, 0), end):
            if pattern.match(self.lines[i]):
                return i + 1
        return None


def _config_lines(at: _Locator, config: dict[str, Any], table: str, index: int | None) -> dict[str, int]:
    """The line of each [config] key (dotted, as bound) in loom.toml, so that a
    CONFIG diagnostic about its value points there: `"a.b" = v` in the table,
    `b = v` under `[table.a]`, or the `a = {...}` that holds it; else the table's header."""
    lines = {}
    for key in _dotted_keys(config):
        parts = key.split(".")
        found = at.find(table, index, key)
        for cut in range(1, len(parts)):  # [table.a] b = v, [table.a.b] c = v ...
            if found is None and index is None:
                found = at.find(f"{table}.{'.'.join(parts[:cut])}", None, ".".join(parts[cut:]))
        for cut in range(len(parts) - 1, 0, -1):  # a = { b = v } in the table
            if found is None:
                found = at.find(table, index, ".".join(parts[:cut]))
        lines[key] = found or at.line(table, index)
    return lines


def _test_config_lines(at: _Locator, config: dict[str, Any], index: int) -> dict[str, int]:
    """A [[test]] set's `config = {...}` is one line (TOML inline tables are): every key is there."""
    line = at.line("test", index, "config")
    return dict.fromkeys(_dotted_keys(config), line)


def _dotted_keys(config: dict[str, Any]) -> list[str]:
    """The keys a config table binds (`a.b` for `a = {b = 1}`), as the linker
    flattens them; here, without importing it, as a no-op build must stay light."""
    keys, stack = [], [("", config)]
    while stack:
        prefix, table = stack.pop()
        for k, v in reversed(list(table.items())):
            if isinstance(v, dict):
                stack.append((f"{prefix}{k}.", v))
            else:
                keys.append(f"{prefix}{k}")
    return keys


class _Reader:
    def __init__(self, root: str, file: str, text: str) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self.real_folders: dict[str, str] = {}   # folder -> its realpath (see real_folder)
        self.file = file
        self.at = _Locator(text)
        self.now_ns = time.time_ns()
        self.folder_stamps: dict[str, list[int] | None] = {}  # absolute folder -> stat stamp
        self.outputs: tuple[str, ...] = ()  # real paths of the folders loom writes (out-dir, dist/)

    def is_output(self, real: str) -> bool:
        """Whether a real path is in a folder the build writes: its own
        outputs are never its sources."""
        return any(real == out or real.startswith(out + os.sep) for out in self.outputs)

    def fail(self, line: int, where: str, message: str) -> LoomError:
        return LoomError(f"{self.file}:{line}: {where}: {message}", 1)

    def table(self, doc: dict[str, Any], name: str) -> dict[str, Any]:
        value = doc.get(name, {})
        if not isinstance(value, dict):
            raise self.fail(self.at.line(None, None, name), f"`{name}`", "expected a table")
        self.known(value, name, None, _KEYS.get(name))
        return value

    def known(self, table: dict[str, Any], name: str, index: int | None, keys: set[str] | None) -> None:
        if keys is None:
            return
        for key in table:
            if key not in keys:
                where = f"[[{name}]] #{index + 1}" if index is not None else f"[{name}]"
                raise self.fail(self.at.line(name, index, key), where,
                                f"unknown key `{key}` (known: {', '.join(sorted(keys))})")

    def string(self, table: dict[str, Any], key: str, where: tuple[str, int | None, str], default: str | None = None,
               pattern: re.Pattern[str] | None = None) -> str:
        name, index, shown = where
        if key not in table:
            if default is None:
                raise self.fail(self.at.line(name, index), shown, f"missing key `{key}`")
            return default
        value = table[key]
        if not isinstance(value, str) or not value:
            raise self.fail(self.at.line(name, index, key), shown, f"key `{key}`: expected a non-empty string")
        if pattern is not None and not pattern.match(value):
            raise self.fail(self.at.line(name, index, key), shown,
                            f"key `{key}`: {value!r} is not a valid name (letters, digits, `_`, `-`, `.`)")
        return value

    def strings(self, table: dict[str, Any], key: str, where: tuple[str, int | None, str],
                required: bool = False) -> tuple[str, ...]:
        name, index, shown = where
        if key not in table:
            if required:
                raise self.fail(self.at.line(name, index), shown, f"missing key `{key}`")
            return ()
        value = table[key]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(self.at.line(name, index, key), shown, f"key `{key}`: expected a list of strings")
        if required and not value:
            raise self.fail(self.at.line(name, index, key), shown, f"key `{key}`: the list is empty")
        return tuple(value)

    def inside(self, rel: str, line: int, shown: str, key: str) -> str:
        """A project-relative path, refused when it could leave the project."""
        parts = rel.replace("\\", "/").split("/")
        if os.path.isabs(rel) or rel.startswith("/") or ".." in parts or (len(rel) > 1 and rel[1] == ":"):
            raise self.fail(line, shown, f"key `{key}`: {rel!r} leaves the project folder")
        return "/".join(p for p in parts if p not in ("", "."))

    def contained(self, path: str, line: int, shown: str, key: str, rel: str) -> None:
        real = os.path.realpath(path)
        if real != self.real_root and not real.startswith(self.real_root + os.sep):
            raise self.fail(line, shown, f"key `{key}`: {rel!r} leads outside the project folder (through a symlink)")

    def sources(self, patterns: tuple[str, ...], name: str, index: int, shown: str) -> tuple[str, ...]:
        line = self.at.line(name, index, "srcs")
        found: dict[str, None] = {}
        prefix = os.path.join(self.root, "")
        for pattern in patterns:
            rel = self.inside(pattern, line, shown, "srcs")
            self.stamp_listed_folders(rel)
            matches = sorted(glob.glob(os.path.join(self.root, *rel.split("/")), recursive=True))
            files = [m for m in matches if self.regular_file_inside(m, line, shown, pattern)]
            matches = [m for m in files if not self.is_output(self.real_file(m))]
            if not matches:
                if files:
                    raise self.fail(line, shown, f"key `srcs`: {pattern!r} matches only the build's own outputs "
                                    f"(under the out-dir or dist/), which are never sources")
                raise self.fail(line, shown, f"key `srcs`: {pattern!r} matches no file")
            for m in matches:
                found.setdefault(m[len(prefix):].replace(os.sep, "/"), None)
        return tuple(found)

    def stamp_listed_folders(self, rel: str) -> None:
        """Stamp every folder whose listing the glob of `rel` may read, before
        it is read: a file added to or removed from one changes its stamp.
        `dir/*.loom` lists `dir`; a pattern with a wildcard in a folder part
        or `**` may list any folder below its literal prefix (hidden ones
        too when a wildcard part starts with `.`)."""
        parts = rel.split("/")
        first = next((i for i, p in enumerate(parts) if glob.has_magic(p)), None)
        if first is None:
            return  # a literal path lists no folder
        top = os.path.join(self.root, *parts[:first])
        if first == len(parts) - 1 and "**" not in parts[first]:
            self.stamp_folder(top)
            return
        hidden = any(p.startswith(".") for p in parts[first:])
        seen: set[tuple[int, int]] = set()

        def unlisted(e: OSError) -> None:  # glob skips a folder it cannot list; it may list it next time
            self.folder_stamps[str(e.filename)] = None

        for folder, dirs, _ in os.walk(top, onerror=unlisted, followlinks=True):
            try:
                st = os.stat(folder)
            except OSError:
                self.folder_stamps[folder] = None
                continue
            if (st.st_dev, st.st_ino) in seen:  # a symlink cycle: listed once
                dirs[:] = []
                continue
            seen.add((st.st_dev, st.st_ino))
            self.folder_stamps[folder] = stat_stamp(st, self.now_ns)
            if not hidden:
                dirs[:] = [d for d in dirs if not d.startswith(".")]
            # The build's outputs change at every build and are never sources:
            # not listed, so a rebuild with no source change stays a no-op.
            dirs[:] = [d for d in dirs if not self.is_output(self.real_folder(os.path.join(folder, d)))]
        if top not in self.folder_stamps:  # missing: glob lists nothing, and neither may the next build
            self.stamp_folder(top)

    def stamp_folder(self, folder: str) -> None:
        try:
            self.folder_stamps[folder] = stat_stamp(os.stat(folder), self.now_ns)
        except OSError:
            self.folder_stamps[folder] = None

    def regular_file_inside(self, path: str, line: int, shown: str, pattern: str) -> bool:
        """Whether a glob match is a file (symlinks followed), refusing one that
        resolves outside the project. Folders are resolved once each and a file
        only when it is itself a symlink: a project of many sources in few
        folders costs one lstat per file, not one per path component."""
        try:
            st = os.lstat(path)
        except OSError:
            return False
        link = stat.S_ISLNK(st.st_mode)
        if not (os.path.isfile(path) if link else stat.S_ISREG(st.st_mode)):
            return False
        real = self.real_folder(os.path.dirname(path))
        if real != self.real_root and not real.startswith(self.real_root + os.sep):
            raise self.fail(line, shown,
                            f"key `srcs`: {pattern!r} leads outside the project folder (through a symlink)")
        if link:
            self.contained(path, line, shown, "srcs", pattern)
        return True

    def real_file(self, path: str) -> str:
        """The real path of a file under the project (cheap: see `real_folder`)."""
        if os.path.islink(path):
            return os.path.realpath(path)
        return os.path.join(self.real_folder(os.path.dirname(path)), os.path.basename(path))

    def real_folder(self, folder: str) -> str:
        """`os.path.realpath` of a folder at or under the project root, built
        from its parent's (one lstat per folder instead of one per path
        component of every file)."""
        real = self.real_folders.get(folder)
        if real is None:
            parent = os.path.dirname(folder)
            if (folder == self.root or parent == folder or not folder.startswith(self.root)
                    or stat.S_ISLNK(os.lstat(folder).st_mode)):
                real = os.path.realpath(folder)
            else:
                real = os.path.join(self.real_folder(parent), os.path.basename(folder))
            self.real_folders[folder] = real
        return real


def _check_output_names(r: _Reader, sections: dict[str, list[Any]]) -> None:
    """Every set's outputs in a target folder (a kernel set's code object, for
    any family, launch config and manifest; a command's folder) must be
    distinct, also on a file system that ignores case: `name = "blas.hsaco"`
    for a [[command]] made every build fail on writing `blas.hsaco`."""
    from loomcli.emit import BACKENDS

    suffixes = sorted({b.suffix for b in BACKENDS.values()} | {".launch.loombc", ".manifest.json"})
    owners: dict[str, tuple[str, str, str]] = {}  # casefolded output -> (kind, set name, output)
    for kind, what in (("kernels", "output"), ("command", "output folder")):
        for i, n, *_ in sections[kind]:
            outputs = [n + suffix for suffix in suffixes] if kind == "kernels" else [n]
            for output in outputs:
                other = owners.setdefault(output.casefold(), (kind, n, output))
                if other[:2] != (kind, n):
                    case = "" if other[2] == output else " on a file system that ignores case"
                    raise r.fail(r.at.line(kind, i, "name"), f"[[{kind}]] {n!r}",
                                 f"key `name`: its {what} `{output}` is also the output `{other[2]}` of "
                                 f"[[{other[0]}]] {other[1]!r}{case}")


def _check_config_values(r: _Reader, config: dict[str, Any], table: tuple[str, int | None] = ("config", None),
                         shown: str = "[config]") -> None:
    """[config] holds Loom literals; a TOML date or time is none, and the
    table travels to compile workers as JSON, where one was an exception in
    every worker thread. Refused here, naming the key."""
    import datetime

    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{key}.{k}" if key else k, v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((key, v) for v in value)
        elif isinstance(value, (datetime.date, datetime.time)):
            raise r.fail(r.at.line(*table, key.rsplit(".", 1)[-1]), shown,
                         f"key `{key}`: a TOML date or time is no Loom literal")


def load_project(folder: str, file: str | None = None, out_dir_option: str | None = None) -> Project:
    """Read and validate `folder/loom.toml` (or `file`). `out_dir_option` is the
    build's `--out-dir`, when given: no `srcs` glob matches in it (nor in the
    project's out-dir or `dist/`)."""
    path = file if file is not None else os.path.join(folder, "loom.toml")
    root = os.path.abspath(os.path.dirname(path) if file is not None else folder)
    shown = _shown(path)
    now_ns = time.time_ns()
    try:
        file_stamp, data = _read_project_file(path, shown, now_ns)
    except FileNotFoundError:
        raise LoomError(f"{shown}: no such file (a project needs a loom.toml)", 2) from None
    text = data.decode("utf-8", "replace")
    try:
        doc = tomllib.loads(text, parse_float=finite_float)
    except ValueError as e:  # TOMLDecodeError, an integer past Python's digit limit, or finite_float's refusal
        m = re.search(r"line (\d+)", str(e))
        raise LoomError(f"{shown}:{m.group(1) if m else 1}: invalid TOML: {e}", 1) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise LoomError(f"{shown}: invalid TOML: nested too deeply", 1) from None
    r = _Reader(root, shown, text)
    for key in doc:
        if key not in _TOP:
            raise r.fail(r.at.line(key) if isinstance(doc[key], dict) else r.at.line(None, None, key), "loom.toml",
                         f"unknown key `{key}` (known: {', '.join(sorted(_TOP))})")
    project = r.table(doc, "project")
    build = r.table(doc, "build")
    package = r.table(doc, "package")
    config = doc.get("config", {})
    if not isinstance(config, dict):
        raise r.fail(r.at.line(None, None, "config"), "`config`", "expected a table")
    _check_config_values(r, config)
    name = r.string(project, "name", ("project", None, "[project]"), pattern=_NAME)
    version = r.string(project, "version", ("project", None, "[project]"), pattern=_NAME)
    targets = r.strings(build, "targets", ("build", None, "[build]"))
    if "targets" in build and not targets:
        raise r.fail(r.at.line("build", None, "targets"), "[build]", "key `targets`: the list is empty")
    for t in targets:
        _check_target(r, t)
    out_dir = r.inside(r.string(build, "out-dir", ("build", None, "[build]"), default="build/loom"),
                       r.at.line("build", None, "out-dir"), "[build]", "out-dir")
    if not out_dir:
        raise r.fail(r.at.line("build", None, "out-dir"), "[build]", "key `out-dir`: must name a folder")
    r.contained(os.path.join(root, *out_dir.split("/")), r.at.line("build", None, "out-dir"), "[build]", "out-dir",
                out_dir)
    r.outputs = tuple(os.path.realpath(p) for p in (
        os.path.join(root, *out_dir.split("/")), os.path.join(root, "dist"),
        *([os.path.abspath(out_dir_option)] if out_dir_option is not None else [])))
    pipeline = r.string(build, "pipeline", ("build", None, "[build]"), default="default")
    fmt = r.string(package, "format", ("package", None, "[package]"), default="tar.gz")
    if fmt != "tar.gz":
        raise r.fail(r.at.line("package", None, "format"), "[package]", f"key `format`: {fmt!r} is not supported "
                     f"(only \"tar.gz\")")

    sections: dict[str, list[Any]] = {"library": [], "kernels": [], "command": []}
    names: dict[str, set[str]] = {k: set() for k in sections}
    for kind in sections:
        entries = doc.get(kind, [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise r.fail(r.at.line(None, None, kind), f"`{kind}`", f"expected [[{kind}]] tables")
        for i, entry in enumerate(entries):
            r.known(entry, kind, i, _KEYS[kind])
            where = (kind, i, f"[[{kind}]] #{i + 1}")
            n = r.string(entry, "name", where, pattern=_NAME)
            shown_entry = f"[[{kind}]] {n!r}"
            if n in names[kind]:
                raise r.fail(r.at.line(kind, i, "name"), shown_entry, f"a second [[{kind}]] named {n!r}")
            names[kind].add(n)
            srcs = r.sources(r.strings(entry, "srcs", (kind, i, shown_entry), required=True), kind, i, shown_entry)
            libs = r.strings(entry, "libraries", (kind, i, shown_entry))
            roots = r.strings(entry, "roots", (kind, i, shown_entry)) if kind != "library" else ()
            for root_name in roots:
                if not root_name.startswith("@") or len(root_name) < 2:
                    raise r.fail(r.at.line(kind, i, "roots"), shown_entry,
                                 f"key `roots`: {root_name!r} is not a symbol (write \"@name\")")
            sections[kind].append((i, n, srcs, libs, roots))
    _check_output_names(r, sections)
    libs_known = names["library"]
    for kind, entries in sections.items():
        for i, n, _, libs, _ in entries:
            for lib in libs:
                if lib not in libs_known:
                    raise r.fail(r.at.line(kind, i, "libraries"), f"[[{kind}]] {n!r}",
                                 f"key `libraries`: no [[library]] named {lib!r}")
                if kind == "library" and lib == n:
                    raise r.fail(r.at.line(kind, i, "libraries"), f"[[{kind}]] {n!r}",
                                 "key `libraries`: a library cannot use itself")
    tests = _test_sets(r, doc, names)
    return Project(
        root=root, file=shown, name=name, version=version, targets=tuple(targets), out_dir=out_dir,
        pipeline=pipeline, config=dict(config), config_lines=_config_lines(r.at, config, "config", None),
        libraries=tuple(Library(n, s, tuple(sorted(set(ls)))) for _, n, s, ls, _ in sections["library"]),
        kernels=tuple(KernelSet(n, s, tuple(sorted(set(ls))), ro) for _, n, s, ls, ro in sections["kernels"]),
        commands=tuple(CommandSet(n, s, tuple(sorted(set(ls))), ro) for _, n, s, ls, ro in sections["command"]),
        tests=tests,
        package_format=fmt, file_path=os.path.abspath(path), file_stamp=file_stamp,
        folder_stamps=tuple(sorted(r.folder_stamps.items())))


def _test_sets(r: _Reader, doc: dict[str, Any], names: dict[str, set[str]]) -> tuple[TestSet, ...]:
    entries = doc.get("test", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise r.fail(r.at.line(None, None, "test"), "`test`", "expected [[test]] tables")
    seen: set[str] = set()
    sets = []
    for i, entry in enumerate(entries):
        r.known(entry, "test", i, _KEYS["test"])
        n = r.string(entry, "name", ("test", i, f"[[test]] #{i + 1}"), pattern=_NAME)
        shown = f"[[test]] {n!r}"
        where = ("test", i, shown)
        if n in seen:
            raise r.fail(r.at.line("test", i, "name"), shown, f"a second [[test]] named {n!r}")
        seen.add(n)
        srcs = r.sources(r.strings(entry, "srcs", where, required=True), "test", i, shown)
        libs = r.strings(entry, "libraries", where)
        for lib in libs:
            if lib not in names["library"] and lib not in names["kernels"]:
                raise r.fail(r.at.line("test", i, "libraries"), shown,
                             f"key `libraries`: no [[library]] or [[kernels]] named {lib!r}")
        config = entry.get("config", {})
        if not isinstance(config, dict):
            raise r.fail(r.at.line("test", i, "config"), shown, "key `config`: expected a table")
        _check_config_values(r, config, ("test", i), shown)
        devices = r.strings(entry, "devices", where) or ("auto",)
        for d in devices:
            if d not in TEST_DEVICES:
                raise r.fail(r.at.line("test", i, "devices"), shown,
                             f"key `devices`: {d!r} is not a device ({', '.join(TEST_DEVICES)})")
        sets.append(TestSet(n, srcs, tuple(dict.fromkeys(libs)), dict(config), tuple(dict.fromkeys(devices)),
                            _test_config_lines(r.at, config, i)))
    return tuple(sets)


def _read_project_file(path: str, shown: str, now_ns: int) -> tuple[list[int] | None, bytes]:
    """(its stat stamp, its bytes): a regular file of at most
    MAX_PROJECT_FILE_BYTES, checked before reading (`-f /dev/zero`, a FIFO)."""
    st = os.stat(path)
    _check_project_file(st, shown)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        _check_project_file(st, shown)
        data = f.read(MAX_PROJECT_FILE_BYTES + 1)
    if len(data) > MAX_PROJECT_FILE_BYTES:
        _check_project_file(None, shown)
    return stat_stamp(st, now_ns), data


def _check_project_file(st: os.stat_result | None, shown: str) -> None:
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise LoomError(f"{shown}: is a folder, not a project file", 2)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise LoomError(f"{shown}: not a regular file", 2)
    if st is None or st.st_size > MAX_PROJECT_FILE_BYTES:
        raise LoomError(f"{shown}: larger than the {MAX_PROJECT_FILE_BYTES >> 20} MiB limit of a project file", 1)


def _shown(path: str) -> str:
    """A path as messages show it: relative to the working folder when under it."""
    rel = os.path.relpath(path)
    return (os.path.abspath(path) if rel.startswith("..") else rel).replace(os.sep, "/")


def _check_target(r: _Reader, text: str) -> None:
    from loomcli.errors import UsageError
    from loomcli.targets.profiles import parse_target

    try:
        parse_target(text)
    except UsageError as e:
        raise r.fail(r.at.line("build", None, "targets"), "[build]", f"key `targets`: {e}") from None


def library_closure(project: Project, names: tuple[str, ...]) -> tuple[str, ...]:
    """The libraries `names` use, directly or through other libraries, sorted."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(project.library(n).libraries)
    return tuple(sorted(seen))
