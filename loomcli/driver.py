"""Driver plumbing shared by commands: options, diagnostics output, exit codes.

Exit codes (TOOLCHAIN.md section 5): 0 success; 1 the input failed to
compile; 2 usage error; 3 environment or infrastructure failure. A traceback
is never the interface: internal errors print one line (LOOM_DEBUG=1 shows
the details).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from loomcli import settings
from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.errors import EXIT_COMPILE, EXIT_ENV, EXIT_OK, EXIT_USAGE, LoomError, UsageError, atomic_write

__all__ = ["EXIT_COMPILE", "EXIT_ENV", "EXIT_OK", "EXIT_USAGE", "LoomError", "UsageError", "atomic_write"]


# ctx.meta key: what this command line does with warning diagnostics ("show", "error", "none").
WARNINGS = "loom.warnings"


def diagnostics_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options every command shares: --diagnostics, -q, -v, -Werror, -w.
    The warning policy goes to the command's `DiagnosticPrinter`s through
    click's context, so no command spells it out."""

    @functools.wraps(f)
    def command(*args: Any, werror: bool, no_warnings: bool, **kwargs: Any) -> Any:
        click.get_current_context().meta[WARNINGS] = "error" if werror else "none" if no_warnings else "show"
        return f(*args, **kwargs)

    c: Callable[..., Any] = command
    c = click.option("--diagnostics", "diagnostics_format", type=click.Choice(["text", "json"]), default="text",
                     show_default=True, help="How diagnostics are printed (to stderr).")(c)
    c = click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")(c)
    c = click.option("-v", "--verbose", is_flag=True, help="Say what is being done.")(c)
    c = click.option("-Werror", "werror", is_flag=True, help="Make warnings errors (exit 1, nothing written).")(c)
    c = click.option("-w", "no_warnings", is_flag=True, help="Print no warnings.")(c)
    return c


def config_option(help: str = "Bind a config key (repeatable); -D KEY=VALUE as for clang and glslc.") -> Callable[
        [Callable[..., Any]], Callable[..., Any]]:
    """`-D/--config KEY=VALUE` (TOOLCHAIN.md section 14), the same on every command that binds config."""
    return click.option("-D", "--config", "config_pairs", multiple=True, metavar="KEY=VALUE", help=help)


def jobserver_style_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--jobserver-style, for the commands that start worker processes (TOOLCHAIN.md section 6)."""
    return click.option("--jobserver-style", "jobserver_style", type=click.Choice(["fifo", "pipe"]), default="fifo",
                        show_default=True, help="Without make's jobserver, parallel work serves one to the processes "
                        "loom starts: a FIFO, or inherited pipe descriptors for clients older than make 4.4.")(f)


class DiagnosticPrinter:
    """Prints diagnostics with their source lines; sources are read once, on demand."""

    def __init__(self, fmt: str = "text") -> None:
        self.fmt = fmt
        self.sources: dict[str, str | None] = {}
        ctx = click.get_current_context(silent=True)
        self.warnings = ctx.meta.get(WARNINGS, "show") if ctx is not None else "show"

    def remember(self, path: str, text: str) -> None:
        self.sources[path] = text

    def _source(self, path: str) -> str | None:
        if path not in self.sources:
            from loomcli.files import read_file

            try:
                data = read_file(path)  # never a FIFO or /dev/zero, never unbounded: shown lines are a courtesy
                self.sources[path] = None if data.startswith(b"LOOMBC") else data.decode("utf-8", "replace")
            except (OSError, LoomError):
                self.sources[path] = None
        return self.sources[path]

    def emit(self, diags: list[Diagnostic]) -> None:
        """Print `diags`; under -Werror a warning among them raises them all
        as errors instead (before the command writes anything), under -w
        warnings are dropped."""
        if self.warnings != "show" and any(d.severity == "warning" for d in diags):
            if self.warnings == "none":
                diags = [d for d in diags if d.severity != "warning"]
            else:
                raise CompileError([dataclasses.replace(d, severity="error") if d.severity == "warning" else d
                                    for d in diags])
        for d in diags:
            if self.fmt == "json":
                if d.line > 0 and not d.end_column:
                    self._end_position(d)
                click.echo(d.to_json(), err=True)
            else:
                click.echo(d.render(self._source(d.file)), err=True)

    def _end_position(self, d: Diagnostic) -> None:
        """A diagnostic carries its start; it ends where the token there ends."""
        source = self._source(d.file)
        lines = source.split("\n") if source is not None else []
        if d.line <= len(lines):
            from loomcli.text.lexer import token_end

            d.end_line, d.end_column = d.line, token_end(lines[d.line - 1].rstrip("\r"), d.column)


def diagnostics_format(args: list[str]) -> str:
    """The `--diagnostics` value of a command line (the last one wins), for
    diagnostics raised after the command returned control to the driver."""
    fmt = "text"
    for i, a in enumerate(args):
        if a == "--":
            break
        if a.startswith("--diagnostics="):
            fmt = a.split("=", 1)[1]
        elif a == "--diagnostics" and i + 1 < len(args):
            fmt = args[i + 1]
    return fmt if fmt in ("text", "json") else "text"


class _ClosedStdout:
    """Stands in for a standard output that was closed before loom started:
    writing to it is an environment error, not a crash."""

    def __getattr__(self, name: str) -> Any:  # write, buffer, fileno, ...
        raise LoomError("standard output is closed", EXIT_ENV)

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:  # called again at interpreter exit
        pass


def run_cli(group: click.Group, argv: list[str] | None) -> Any:
    debug = settings.debug()
    args = list(argv if argv is not None else sys.argv[1:])
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    try:
        rv = group.main(args=argv, prog_name="loom", standalone_mode=False, obj=args)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:  # usage errors: bad flags, missing arguments
        e.show()
        sys.exit(EXIT_USAGE)
    except click.exceptions.Abort:
        click.echo("loom: error: interrupted", err=True)
        sys.exit(130)
    except CompileError as e:
        DiagnosticPrinter(diagnostics_format(args)).emit(e.diagnostics)
        sys.exit(EXIT_COMPILE)
    except LoomError as e:
        click.echo(f"loom: error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("loom: error: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(EXIT_OK)
    except OSError as e:
        if getattr(e, "filename", None):
            click.echo(f"loom: error: {e.filename}: {e.strerror or e}", err=True)
        else:
            click.echo(f"loom: error: {e.strerror or e}", err=True)
        sys.exit(EXIT_ENV)
    except Exception as e:  # an internal error: one line, details on request
        if debug:
            raise
        click.echo(f"loom: error: internal: {type(e).__name__}: {e} (run with LOOM_DEBUG=1 for details)", err=True)
        sys.exit(EXIT_ENV)
    if isinstance(rv, int):
        sys.exit(rv)
    sys.exit(EXIT_OK)
