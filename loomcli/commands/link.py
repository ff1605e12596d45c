"""`loom link`: combine modules and libraries into one module."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from loomcli.driver import DiagnosticPrinter, UsageError, config_option, diagnostics_option

if TYPE_CHECKING:
    from loomcli.ir.core import Module


def output_bytes(module: Module, output: str) -> bytes:
    """The bytes of `module` for an output path: bytecode for `.loombc`, else text."""
    if output.endswith(".loombc"):
        from loomcli.bytecode import write_module

        return write_module(module)
    if output == "-" or output.endswith(".loom"):
        from loomcli.text.printer import print_module

        return print_module(module).encode()
    raise UsageError(f"-o {output}: expected a .loom or .loombc output")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, required=True)
@click.option("--library", "libraries", multiple=True, metavar="[KEY=]PATH",
              help="A library: only what the inputs reach is linked in.")
@click.option("--root", "roots", multiple=True, metavar="@SYM", help="Keep this symbol and what it reaches.")
@click.option("--mode", type=click.Choice(["auto", "merge", "link"]), default="auto", show_default=True,
              help="merge: keep every input symbol; link: keep the closure of the roots; auto: link iff roots.")
@click.option("--include-exports", is_flag=True, help="Treat every exported kernel of the inputs as a root.")
@click.option("--allow-unresolved", is_flag=True, help="Keep declarations that no input defines.")
@click.option("--require-resolved-config", is_flag=True, help="Every reachable config.get must be bound.")
@config_option()
@click.option("--config-file", "config_files", multiple=True, type=click.Path(dir_okay=False),
              help="Bindings from .json, .toml or a .loom config module (later files win).")
@click.option("--strip-checks", is_flag=True, help="Drop check cases and benchmarks from the output.")
@click.option("-o", "output", required=False, metavar="OUT", help="Output .loom or .loombc ('-' = text to stdout).")
@click.option("--list-symbols", is_flag=True, help="Print the output's symbols, one per line.")
@click.option("--print-plan", is_flag=True, help="Print what the linker decided, one step per line.")
@diagnostics_option
def link(inputs: tuple[str, ...], libraries: tuple[str, ...], roots: tuple[str, ...], mode: str,
         include_exports: bool, allow_unresolved: bool, require_resolved_config: bool,
         config_pairs: tuple[str, ...], config_files: tuple[str, ...], strip_checks: bool, output: str | None,
         list_symbols: bool, print_plan: bool, diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Link INPUTs (`PATH` or `KEY=PATH`) against libraries into one module.

    Declarations resolve only to public definitions of the explicit inputs
    and libraries; nothing is searched on disk.
    """
    from loomcli.pipeline import LinkOptions, link_and_bind

    if output is None and not (list_symbols or print_plan):
        raise UsageError("missing -o OUT (or --list-symbols / --print-plan)")
    options = LinkOptions(inputs=inputs, libraries=libraries, roots=roots, mode=mode,
                          include_exports=include_exports, allow_unresolved=allow_unresolved,
                          require_resolved_config=require_resolved_config, config=config_pairs,
                          config_files=config_files, strip_checks=strip_checks)
    linked = link_and_bind(options, output or "<linked>")
    DiagnosticPrinter(diagnostics_format).emit(linked.warnings)
    if print_plan:
        click.echo("\n".join(linked.plan))
    if list_symbols:
        from loomcli.link.linker import symbol_listing

        click.echo("\n".join(symbol_listing(linked.result)))
    if output is not None:
        from loomcli.files import write_outputs

        write_outputs([(output, output_bytes(linked.module, output))], inputs=linked.files_read)
    return 0
