"""`loom opt`: run a pass pipeline over one module and print the result (debugging)."""

from __future__ import annotations

import sys

import click

from loomcli.diagnostics import CompileError
from loomcli.driver import EXIT_COMPILE, DiagnosticPrinter, UsageError, diagnostics_option
from loomcli.files import read_input, write_outputs
from loomcli.frontend import display_path, is_bytecode, load_bytes


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("input_path", metavar="INPUT", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--pipeline", "pipeline_text", default="default", show_default=True, metavar="P",
              help="Pass pipeline: `canonicalize,cse,dce`, `canonicalize{max-iterations=4}`, `default` or `none`.")
@click.option("-o", "output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write here instead of stdout ('.loombc' writes bytecode).")
@click.option("--list-passes", is_flag=True, help="List the passes, their options and the default pipeline.")
@diagnostics_option
def opt(input_path: str | None, pipeline_text: str, output: str | None, list_passes: bool,
        diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Run a pass pipeline over INPUT and print the module it leaves.

    \b
    loom opt k.loom --pipeline canonicalize,cse,dce
    loom opt k.loom --pipeline 'unroll{max-trip-count=4},canonicalize' -o out.loom
    loom opt --list-passes
    """
    from loomcli.passes.pipeline import check_module, describe_passes, parse_pipeline
    from loomcli.passes.registry import PassContext

    if list_passes:
        if input_path is not None:
            raise UsageError("--list-passes takes no input")
        click.echo("\n".join(describe_passes()))
        return 0
    if input_path is None:
        raise UsageError("missing INPUT (or give --list-passes)")
    pipeline = parse_pipeline(pipeline_text)
    data = read_input(input_path)
    shown = "<stdin>" if input_path == "-" else display_path(input_path)
    printer = DiagnosticPrinter(diagnostics_format)
    if not is_bytecode(data):
        printer.remember(shown, data.decode("utf-8", "replace"))
    try:
        module = load_bytes(data, shown)
    except CompileError as e:
        printer.emit(e.diagnostics)
        return EXIT_COMPILE
    if verbose:
        click.echo(f"loom opt: running {pipeline}", err=True)
    pipeline.run(module, PassContext(verify_each=True))
    check_module(module, "the pipeline", source_level=not pipeline.legalizes)
    if output is not None and output.endswith(".loombc"):
        from loomcli.bytecode import write_module

        write_outputs([(output, write_module(module))], inputs=[input_path])
        return 0
    from loomcli.text.printer import print_module

    text = print_module(module)
    if output is None or output == "-":
        sys.stdout.write(text)
    else:
        write_outputs([(output, text.encode())], inputs=[input_path])
    return 0
