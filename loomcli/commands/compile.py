"""`loom compile`: link, bind config, select templates, run the pass pipeline.

This is the front half of TOOLCHAIN.md section 4's `loom compile`: it writes
the compiled module (`.loombc`, or `.loom` text for inspection). Emission
of target artifacts (`.hsaco`, `.spv`, `.ll`) builds on the same call.
"""

from __future__ import annotations

import os

import click

from loomcli.driver import DiagnosticPrinter, UsageError, atomic_write, diagnostics_option

FORMATS = {".loombc": "loom-bytecode", ".loom": "loom-text"}


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("input_path", metavar="INPUT")
@click.option("-o", "output", required=True, metavar="OUT", help="Output path (.loombc, or .loom for text).")
@click.option("--format", "fmt", type=click.Choice(sorted(set(FORMATS.values()))), help="Output format.")
@click.option("--target", "targets", multiple=True, metavar="T", help="Target profile, e.g. amdgpu:gfx1100.")
@click.option("--target-env", "target_env", metavar="ENV", help="glslc spelling: vulkan1.3 = spirv:vulkan1.3.")
@click.option("--root", "roots", multiple=True, metavar="@SYM", help="Roots (default: every exported kernel).")
@click.option("--library", "libraries", multiple=True, metavar="[KEY=]PATH", help="A library to link against.")
@click.option("--config", "config_pairs", multiple=True, metavar="KEY=VALUE", help="Bind a config key.")
@click.option("--config-file", "config_files", multiple=True, type=click.Path(dir_okay=False),
              help="Bindings from .json, .toml or a .loom config module (later files win).")
@click.option("--pipeline", default="default", show_default=True, help="Pass pipeline text, `default` or `none`.")
@click.option("--require-resolved-config", is_flag=True, help="Every reachable config.get must be bound.")
@click.option("--print-selections", is_flag=True, help="Print every template selection decision.")
@click.option("-MD", "depfile_md", is_flag=True, help="Write a depfile beside the output (OUT.d).")
@click.option("-MF", "depfile_path", metavar="DEPFILE", help="Write the depfile here.")
@click.option("-MT", "depfile_target", metavar="TARGET", help="The depfile's target (default: the output).")
@diagnostics_option
def compile(input_path: str, output: str, fmt: str | None, targets: tuple[str, ...], target_env: str | None,
            roots: tuple[str, ...], libraries: tuple[str, ...], config_pairs: tuple[str, ...],
            config_files: tuple[str, ...], pipeline: str, require_resolved_config: bool, print_selections: bool,
            depfile_md: bool, depfile_path: str | None, depfile_target: str | None, diagnostics_format: str,
            quiet: bool, verbose: bool) -> int:
    """Compile INPUT and the libraries it needs into a compiled module."""
    from loomcli.pipeline import CompileOptions, compile_module, write_depfile
    from loomcli.targets.profiles import parse_target

    target_texts = list(targets) + ([f"spirv:{target_env}"] if target_env else [])
    if len(target_texts) > 1:
        raise UsageError("several --target values need --out-dir (target artifacts)")
    profile = parse_target(target_texts[0]) if target_texts else None
    suffix = os.path.splitext(output)[1]
    out_format = fmt or FORMATS.get(suffix)
    if out_format is None:
        raise UsageError(f"-o {output}: cannot tell the format from the suffix; pass --format")
    options = CompileOptions(input=input_path, libraries=libraries, roots=roots, config=config_pairs,
                             config_files=config_files, pipeline=pipeline, profile=profile,
                             require_resolved_config=require_resolved_config)
    compiled = compile_module(options)
    DiagnosticPrinter(diagnostics_format).emit(compiled.warnings)
    if print_selections:
        for d in compiled.decisions:
            click.echo(d.describe())
    if out_format == "loom-bytecode":
        from loomcli.bytecode import write_module

        if output == "-" and click.get_text_stream("stdout").isatty():
            raise UsageError("refusing to write bytecode to a terminal; use -o FILE")
        data = write_module(compiled.module, keep_debug=False)
    else:
        from loomcli.text.printer import print_module

        data = print_module(compiled.module).encode()
    atomic_write(output, data)
    if depfile_md or depfile_path:
        dep = depfile_path or os.path.splitext(output if output != "-" else "stdout")[0] + ".d"
        write_depfile(dep, depfile_target or output, compiled.files_read)
    return 0
