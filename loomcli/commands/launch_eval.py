"""`loom launch-eval`: evaluate one kernel's launch for workload values.

    loom launch-eval ARTIFACT @export WORKLOAD... [--json]
    loom launch-eval SOURCE.loom @kernel WORKLOAD... --target T [--config k=v]...

An artifact (`X.launch.loombc`) names kernels by entry name; a source is
compiled in memory for the target (its kernel named by symbol) and its
launch-config artifact built and evaluated the same way. `--` ends options,
so negative workload values can follow. Start-up stays small: the artifact
form loads the bytecode reader, the verifier and the evaluator only.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.driver import EXIT_COMPILE, DiagnosticPrinter, UsageError, config_option, diagnostics_option

if TYPE_CHECKING:
    from loomcli.launch.program import Launch


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("input_path", metavar="INPUT")
@click.argument("name", metavar="@NAME")
@click.argument("workload", nargs=-1, metavar="WORKLOAD...")
@click.option("--json", "as_json", is_flag=True, help="Print the launch as one JSON object.")
@click.option("--target", "target", metavar="T", help="Target profile for a source input, e.g. amdgpu:gfx1100.")
@click.option("--target-env", "target_env", metavar="ENV", help="glslc spelling: vulkan1.3 = spirv:vulkan1.3.")
@config_option("Bind a config key of a source input (-D KEY=VALUE; repeatable).")
@click.option("--config-file", "config_files", multiple=True, type=click.Path(dir_okay=False),
              help="Bindings from .json, .toml or a .loom config module (source).")
@click.option("--library", "libraries", multiple=True, metavar="[KEY=]PATH", help="A library to link (source).")
@diagnostics_option
def launch_eval(input_path: str, name: str, workload: tuple[str, ...], as_json: bool, target: str | None,
                target_env: str | None, config_pairs: tuple[str, ...], config_files: tuple[str, ...],
                libraries: tuple[str, ...], diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Evaluate the launch of @NAME in INPUT for the WORKLOAD values.

    \b
    INPUT is a launch-config artifact (X.launch.loombc; @NAME is the entry
    name) or a source (.loom/.loombc; @NAME is the kernel symbol, and
    --target is required). Put `--` before negative values.
    """
    from loomcli.frontend import display_path
    from loomcli.launch.program import is_launch_artifact

    if target and target_env:
        raise UsageError("--target and --target-env exclude each other")
    if target_env:
        target = f"spirv:{target_env}"
    from loomcli.files import read_input

    data = read_input(input_path)
    shown = "<stdin>" if input_path == "-" else display_path(input_path)
    printer = DiagnosticPrinter(diagnostics_format)
    try:
        if is_launch_artifact(data):
            if config_pairs or config_files or libraries:
                raise UsageError("--config, --config-file and --library apply to a source input; "
                                 "an artifact's config was bound when it was built")
            launch = _from_artifact(data, shown, name, workload, target)
        else:
            if target is None:
                raise UsageError(f"{shown} is a source; evaluating its launch needs --target")
            launch = _from_source(input_path, data, shown, name, workload, target, config_pairs, config_files,
                                  libraries, printer, quiet)
    except CompileError as e:
        printer.emit(e.diagnostics)
        return EXIT_COMPILE
    click.echo(json.dumps(launch.to_json()) if as_json else launch.text())
    return 0


def _from_artifact(data: bytes, shown: str, name: str, workload: tuple[str, ...], target: str | None) -> Launch:
    from loomcli.launch.program import LaunchProgram

    program = LaunchProgram.load(data, shown)
    fn = program.lookup(name)
    if target is not None:
        from loomcli.targets.profiles import parse_target

        wanted = parse_target(target)
        if wanted.name != fn.profile.name:
            raise UsageError(f"{shown}: `{fn.entry}` was built for {fn.profile.name}, not {wanted.name}")
    return program.invoke(fn, workload)


def _from_source(input_path: str, data: bytes, shown: str, name: str, workload: tuple[str, ...], target: str,
                 config_pairs: tuple[str, ...], config_files: tuple[str, ...], libraries: tuple[str, ...],
                 printer: DiagnosticPrinter, quiet: bool) -> Launch:
    from loomcli.emit.launch_config import launch_module
    from loomcli.frontend import is_bytecode, load_bytes
    from loomcli.ir.ops import KERNEL_DECL, KERNEL_DEF
    from loomcli.launch.program import COMMAND_LINE, LaunchProgram, entry_name
    from loomcli.service.front import CompileOptions, compile_module
    from loomcli.targets.profiles import parse_target

    profile = parse_target(target)
    symbol = name.removeprefix("@")
    if not is_bytecode(data):
        printer.remember(shown, data.decode("utf-8", "replace"))
    source = load_bytes(data, shown)
    found = source.symbols().get(symbol)
    if found is None or found.opdef not in (KERNEL_DEF, KERNEL_DECL):
        raise CompileError([Diagnostic.make("LAUNCH_CONFIG/001", COMMAND_LINE, (0, 0), name="@" + symbol)])
    compiled = compile_module(CompileOptions(input=input_path, libraries=libraries, roots=["@" + symbol],
                                             config=config_pairs, config_files=config_files, profile=profile,
                                             for_execution=True))
    if not quiet:
        printer.emit(compiled.warnings)
    module = launch_module(compiled.module, profile)
    kernel = module.symbols().get(symbol)
    if kernel is None or kernel.opdef is not KERNEL_DEF:
        raise CompileError([Diagnostic.make("LAUNCH_CONFIG/001", COMMAND_LINE, (0, 0), name="@" + symbol)])
    program = LaunchProgram(module, shown)
    return program.invoke(program.lookup(entry_name(kernel)), workload)
