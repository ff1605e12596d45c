"""`loom fmt`: canonical formatting, checking and text/bytecode conversion."""

from __future__ import annotations

import os
import sys

import click

from loomcli.diagnostics import CompileError
from loomcli.driver import EXIT_COMPILE, DiagnosticPrinter, UsageError, atomic_write, diagnostics_option
from loomcli.files import read_input, write_outputs
from loomcli.frontend import display_path, is_bytecode, load_bytes


def _first_difference(a: str, b: str) -> int:
    for n, (x, y) in enumerate(zip(a.split("\n"), b.split("\n")), 1):
        if x != y:
            return n
    return min(a.count("\n"), b.count("\n")) + 1


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--check", is_flag=True, help="Exit 1 if a file is not canonical (one line per file).")
@click.option("--in-place", "-i", "in_place", is_flag=True, help="Rewrite non-canonical files (never invalid ones).")
@click.option("--to", "to", type=click.Choice(["text", "bc"]), help="Convert one input to text or bytecode.")
@click.option("-o", "output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Output path for --to ('-' = stdout).")
@diagnostics_option
def fmt(files: tuple[str, ...], check: bool, in_place: bool, to: str | None, output: str | None,
        diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Format Loom files canonically (LANGUAGE.md section 4).

    \b
    loom fmt FILE                 print the canonical text of FILE
    loom fmt FILE... --check      exit 1 when a file is not canonical
    loom fmt FILE... --in-place   rewrite files canonically
    loom fmt IN --to text|bc -o OUT   convert between text and bytecode
    """
    modes = sum(map(bool, (check, in_place, to)))
    if modes > 1:
        raise UsageError("--check, --in-place and --to exclude each other")
    if (to is None) != (output is None):
        raise UsageError("--to and -o go together")
    if (to or not (check or in_place)) and len(files) != 1:
        raise UsageError("this form of `loom fmt` takes exactly one file")
    printer = DiagnosticPrinter(diagnostics_format)
    status = 0
    for path in files:
        if path == "-" and in_place:
            raise UsageError("--in-place needs files, not standard input")
        data = read_input(path)
        shown = "<stdin>" if path == "-" else display_path(path)
        if not is_bytecode(data):
            printer.remember(shown, data.decode("utf-8", "replace"))
        try:
            module = load_bytes(data, shown)
        except CompileError as e:
            printer.emit(e.diagnostics)
            status = EXIT_COMPILE
            continue
        from loomcli.text.printer import print_module

        if to is not None:
            if to == "bc":
                from loomcli.bytecode import write_module

                out = write_module(module)
                if output == "-" and sys.stdout.isatty():
                    raise UsageError("refusing to write bytecode to a terminal; use -o FILE")
            else:
                out = print_module(module).encode()
            write_outputs([(output, out)], inputs=[path])  # type: ignore[list-item]
            continue
        text = print_module(module)
        if check:
            if is_bytecode(data):
                from loomcli.bytecode import write_module

                canonical = write_module(module) == data
            else:
                canonical = text.encode() == data
            if not canonical:
                if is_bytecode(data):
                    where = ""
                else:
                    line = _first_difference(data.decode("utf-8", "replace"), text)
                    where = f" (first difference at line {line})"
                click.echo(f"{shown}: not canonical{where}", err=True)
                status = EXIT_COMPILE
        elif in_place:
            if is_bytecode(data):
                raise UsageError(f"{shown}: --in-place formats text; use --to to convert bytecode")
            if text.encode() != data:
                atomic_write(path, text.encode(), os.stat(path).st_mode & 0o7777)
                if verbose:
                    click.echo(f"formatted {shown}", err=True)
        else:
            sys.stdout.write(text)
    return status
