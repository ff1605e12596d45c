"""`loom frontier`: command programs -> portable command bytes and kernel requests.

A thin shell over `loomcli.frontier`: build the product (publishing requests
to the compiler when `--compile` is given), print one summary line per root,
and write every output into `--out-dir` only once all of them exist.
`--print X.loomcmd` prints a command file's tree instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from loomcli.driver import DiagnosticPrinter, UsageError, config_option, diagnostics_option, jobserver_style_option

if TYPE_CHECKING:
    from loomcli.frontier import CommandProduct, FrontierOptions
    from loomcli.frontier.compiling import CompiledProduct
    from loomcli.targets.profiles import Profile


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("input_path", metavar="COMMAND.loom", required=False)
@click.option("--library", "libraries", multiple=True, metavar="[KEY=]PATH", help="A library to link against.")
@click.option("--root", "roots", multiple=True, metavar="@PROGRAM",
              help="A root command program (default: every public command.program.def, in source order).")
@config_option()
@click.option("--config-file", "config_files", multiple=True, type=click.Path(dir_okay=False),
              help="Bindings from .json, .toml or a .loom config module (later files win).")
@click.option("--spec", "specs", multiple=True, metavar="@PROG.ARG=V",
              help="Bind a root program's specialization argument.")
@click.option("--target", metavar="T", help="Target profile, e.g. amdgpu:gfx1100.")
@click.option("--out-dir", metavar="DIR", help="Where the manifest, program-N.loomcmd and kernel-N files go.")
@click.option("--no-requests", is_flag=True, help="Write the command bytes and manifest, no kernel requests.")
@click.option("--compile", "compile_requests", is_flag=True,
              help="Also compile every request (cache first, misses through the worker pool).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), metavar="N",
              help="Compile workers for --compile (default: LOOM_JOBS, else the usable CPUs).")
@click.option("--print", "print_path", metavar="X.loomcmd", help="Print a command file's tree and exit.")
@jobserver_style_option
@diagnostics_option
def frontier(input_path: str | None, libraries: tuple[str, ...], roots: tuple[str, ...],
             config_pairs: tuple[str, ...], config_files: tuple[str, ...], specs: tuple[str, ...],
             target: str | None, out_dir: str | None, no_requests: bool, compile_requests: bool,
             jobs: int | None, print_path: str | None, jobserver_style: str, diagnostics_format: str, quiet: bool,
             verbose: bool) -> int:
    """Build the command-program product of COMMAND.loom: command bytes, requirements, kernel requests."""
    if print_path is not None:
        if input_path is not None:
            raise UsageError("--print takes a .loomcmd file, not COMMAND.loom")
        return _print(print_path)
    if input_path is None:
        raise UsageError("missing COMMAND.loom (or --print X.loomcmd)")
    if out_dir is None:
        raise UsageError("missing --out-dir DIR")
    if no_requests and compile_requests:
        raise UsageError("--no-requests and --compile exclude each other")
    if jobs is not None and not compile_requests:
        raise UsageError("-j needs --compile")
    from loomcli.frontier import FrontierOptions, build_command_product
    from loomcli.frontier.outputs import product_files, publish
    from loomcli.targets.profiles import parse_target

    profile = parse_target(target) if target else None
    options = FrontierOptions(input=input_path, libraries=libraries, roots=roots, config=config_pairs,
                              config_files=config_files, spec=specs, profile=profile)
    printer = DiagnosticPrinter(diagnostics_format)
    if compile_requests:
        if profile is None:
            raise UsageError("--compile needs --target")
        product, compiled = _compile(options, profile, jobs, printer, jobserver_style)
        files = product_files(product, compiled=compiled.files, bindings=compiled.bindings)
    else:
        product = build_command_product(options)
        printer.emit(list(product.warnings))
        files = product_files(product, requests=not no_requests)
    publish(out_dir, files)
    if not quiet:
        for program in product.programs:
            click.echo(product.summary(program))
    return 0


def _compile(options: FrontierOptions, profile: Profile, jobs: int | None, printer: DiagnosticPrinter,
             jobserver_style: str = "fifo") -> tuple[CommandProduct, CompiledProduct]:
    """Build the product while its requests compile (cache first, misses through the pool)."""
    from loomcli.diagnostics import CompileError
    from loomcli.frontier import build_command_product
    from loomcli.frontier.compiling import RequestCompiler
    from loomcli.runtime.pool import resolve_jobs
    from loomcli.service.session import compile_session

    def warn(message: str) -> None:
        click.echo(f"loom: warning: {message}", err=True)

    with compile_session(jobs, resolve_jobs(jobs), [profile.name], warn=warn,
                         jobserver_style=jobserver_style) as session:
        compiler = RequestCompiler(session.service, profile)
        try:
            product = build_command_product(options, compiler)
        except CompileError:
            compiler.discard()  # publication was provisional: children finish (and are cached), nothing binds
            raise
        printer.emit(list(product.warnings))
        compiled = compiler.finish(product)
    printer.emit(compiled.warnings)
    return product, compiled

def _print(path: str) -> int:
    from loomcli.files import read_input
    from loomcli.frontier.loomcmd import print_command, read_command

    data = read_input(path)
    click.echo(print_command(read_command(data, path)), nl=False)
    return 0
