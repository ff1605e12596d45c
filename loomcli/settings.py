"""Every environment value loom reads, each validated here, where it is read.

The environment is input like any file: a value that cannot mean anything
is a one-line usage error naming the variable (exit 2), and a value that is
only too large is clamped to a documented bound. docs/build.md lists them
all (a test keeps that list, `VARIABLES` and the names read in loomcli in
step). The resident server's three (`LOOM_SERVER`, `LOOM_SERVER_IDLE`,
`XDG_RUNTIME_DIR`) are read and checked by `loomcli.runtime.served`, whose
client runs before anything else is imported. Each reader takes the
mapping to read (default `os.environ`), so callers and tests can pass their
own; nothing here caches a value, since a build changes `MAKEFLAGS` for the
processes it starts.

This module imports only `os` (`re` and `loomcli.errors` when needed): the
`loom` executable's first steps (the no-op check, the fork server's
prestart) may use it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# name -> what it does (documented in docs/build.md under the same names).
VARIABLES = {
    "LOOM_CACHE": "0/false/no/off turns the compile cache off; 1/true/yes/on (or unset) leaves it on",
    "LOOM_CACHE_DIR": "the cache folder (relative: from the working folder)",
    "LOOM_CACHE_MAX_SIZE": "the cache's size bound (500M, 2G, ...; default 2G)",
    "LOOM_JOBS": "the worker bound when -j is not given (1 to 4096; larger is clamped)",
    "LOOM_DEBUG": "anything but empty or 0 shows the details of an internal error",
    "LOOM_TRACE_DIR": "a folder where every build and compile writes its trace",
    "SOURCE_DATE_EPOCH": "the mtime of every package entry (0 to 2^32-1; default 0)",
    "MAKEFLAGS": "make's jobserver and dry-run flag",
    "XDG_CACHE_HOME": "the cache's parent folder when LOOM_CACHE_DIR is unset (absolute only)",
    "HOME": "the cache's grandparent folder (~/.cache/loom) when neither is set",
    "TMPDIR": "where a worker's stderr file and the resident server's folder live (an absolute folder, else /tmp)",
    "XDG_RUNTIME_DIR": "the resident server's folder's parent (absolute only; else TMPDIR)",
    "LOOM_BUILD_TOOL": "set by the CMake package where CMake cannot mark commands for make's jobserver",
    "LOOM_SERVER": "auto/off: whether loom starts or uses a resident server (unset: use a running one)",
    "LOOM_SERVER_IDLE": "seconds a resident server waits without a command before it exits (1 to 604800)",
    "LOOM_SERVER_ORIGIN": "set by loom for the resident server it starts: its starter's Python environment",
    "CC": "the C compiler `loom server client` builds the native client with (default cc, gcc or clang)",
    "PTXAS": "the ptxas that builds cubins",
    "PATH": "where ptxas is looked for when PTXAS is unset and no nvidia-cuda-nvcc package is installed",
    "NO_COLOR": "no colour in the live build display",
    "COLUMNS": "the live display's width (clamped to 20..1000)",
    "CI": "plain progress lines instead of the live display",
    "TERM": "`dumb`: plain progress lines",
}

_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


def _usage(message: str) -> Exception:
    from loomcli.errors import UsageError

    return UsageError(message)


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _shown(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:60] + "...")


def flag(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """A yes/no variable: unset or empty is `default`."""
    text = _env(environ).get(name, "").strip().lower()
    if not text:
        return default
    if text in _OFF:
        return False
    if text in _ON:
        return True
    raise _usage(f"{name}={_shown(text)}: expected one of {', '.join(_ON + _OFF)}")


def cache_enabled(environ: Mapping[str, str] | None = None) -> bool:
    return flag("LOOM_CACHE", True, environ)


def debug(environ: Mapping[str, str] | None = None) -> bool:
    """LOOM_DEBUG: any value but empty or `0` (never an error: it is read while reporting one)."""
    return _env(environ).get("LOOM_DEBUG", "").strip() not in ("", "0")


def _absolute(value: str | None) -> str | None:
    return value if value and os.path.isabs(value) else None


def cache_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """The cache folder: `LOOM_CACHE_DIR` (a relative one from the working
    folder), else `$XDG_CACHE_HOME/loom`, else `~/.cache/loom`. A relative
    `XDG_CACHE_HOME` is ignored, as the XDG specification says; a `HOME`
    that is not absolute gives way to the password database. None: no
    folder can be named (the cache is then off, with one warning)."""
    env = _env(environ)
    explicit = env.get("LOOM_CACHE_DIR", "")
    if explicit:
        return os.path.abspath(explicit)
    base = _absolute(env.get("XDG_CACHE_HOME"))
    if base is None:
        home = _absolute(env.get("HOME")) or _password_home()
        if home is None:
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "loom")


def _password_home() -> str | None:
    try:
        import pwd

        return _absolute(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError, OSError):
        return None


def parse_size(text: str) -> int:
    """`500M`, `2G`, `1.5GiB`, `4096` -> bytes (ValueError otherwise)."""
    import re

    m = re.match(r"^\s*(\d{1,15}(?:\.\d{1,15})?)\s*([kmgt]?)(?:i?b)?\s*$", text, re.IGNORECASE)
    if m is None:
        raise ValueError(f"not a size: {_shown(text)} (write e.g. 500M or 2G)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


DEFAULT_CACHE_MAX_SIZE = 2 << 30


def cache_max_size(environ: Mapping[str, str] | None = None) -> int:
    text = _env(environ).get("LOOM_CACHE_MAX_SIZE", "")
    if not text.strip():
        return DEFAULT_CACHE_MAX_SIZE
    try:
        return parse_size(text)
    except ValueError as e:
        raise _usage(f"LOOM_CACHE_MAX_SIZE: {e}") from None


# A larger worker count is clamped: no machine runs more workers usefully,
# and `-j 10**11` once asked the jobserver for a 100 GB write.
MAX_JOBS = 4096


def jobs(environ: Mapping[str, str] | None = None) -> int | None:
    """LOOM_JOBS: a whole number from 1 (clamped to MAX_JOBS); None when unset or empty."""
    text = _env(environ).get("LOOM_JOBS", "").strip()
    if not text:
        return None
    if not text.isdigit() or len(text) > 12:
        raise _usage(f"LOOM_JOBS={_shown(text)} is not a number")
    n = int(text)
    if n < 1:
        raise _usage(f"LOOM_JOBS={text}: the job count must be at least 1")
    return min(n, MAX_JOBS)


def trace_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """LOOM_TRACE_DIR, or None when unset or empty."""
    return _env(environ).get("LOOM_TRACE_DIR") or None


# The gzip header keeps a package's mtime in 32 bits.
MAX_SOURCE_DATE_EPOCH = (1 << 32) - 1


def source_date_epoch(environ: Mapping[str, str] | None = None) -> int:
    """SOURCE_DATE_EPOCH (reproducible-builds.org): decimal seconds since
    1970, 0 to 2^32-1; unset or empty is 0. Anything else (`abc`, `1e9`,
    `-1`, a larger number) is a usage error, as the specification asks of a
    malformed value, never a silent 0."""
    text = _env(environ).get("SOURCE_DATE_EPOCH", "").strip()
    if not text:
        return 0
    if not text.isascii() or not text.isdigit() or len(text) > 10 or int(text) > MAX_SOURCE_DATE_EPOCH:
        raise _usage(f"SOURCE_DATE_EPOCH={_shown(text)}: expected a whole number of seconds "
                         f"from 0 to {MAX_SOURCE_DATE_EPOCH}")
    return int(text)


def makeflags(environ: Mapping[str, str] | None = None) -> str | None:
    """MAKEFLAGS as make passed it (`loomcli.runtime.spawn.parse_makeflags` reads it; what
    it names is checked when opened: `loomcli.runtime.jobserver`)."""
    return _env(environ).get("MAKEFLAGS")


def ptxas(environ: Mapping[str, str] | None = None) -> str | None:
    """PTXAS, or None when unset or empty (`loomcli.emit.nvptx.ptxas` checks it is an executable)."""
    return _env(environ).get("PTXAS") or None


def plain_terminal(environ: Mapping[str, str] | None = None) -> bool:
    """Whether progress must be plain lines even in a terminal: CI set (not
    empty), or TERM=dumb."""
    env = _env(environ)
    return bool(env.get("CI")) or env.get("TERM") == "dumb"


def tmpdir(environ: Mapping[str, str] | None = None) -> str:
    """TMPDIR when it names an absolute folder, else /tmp."""
    value = _absolute(_env(environ).get("TMPDIR"))
    return value if value is not None and os.path.isdir(value) else "/tmp"


MIN_COLUMNS, MAX_COLUMNS = 20, 1000


def columns(environ: Mapping[str, str] | None = None) -> int | None:
    """COLUMNS for the live display, clamped to MIN_COLUMNS..MAX_COLUMNS; None
    when unset or not a number (the terminal's own width is used)."""
    text = _env(environ).get("COLUMNS", "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        return None
    return max(MIN_COLUMNS, min(MAX_COLUMNS, int(text)))


def no_color(environ: Mapping[str, str] | None = None) -> bool:
    """NO_COLOR (no-color.org): set and not empty."""
    return bool(_env(environ).get("NO_COLOR"))
