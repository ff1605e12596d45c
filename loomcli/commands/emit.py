"""`loom emit`: a compiled module to a target artifact."""

from __future__ import annotations

import os

import click

from loomcli.driver import UsageError, diagnostics_option
from loomcli.emit import FORMATS
from loomcli.service.outputs import BINARY, STDOUT

FORMAT_CHOICES = tuple(FORMATS)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("compiled_path", metavar="COMPILED.loombc")
@click.option("--format", "fmt", type=click.Choice(FORMAT_CHOICES),
              help="Artifact format (default: from -o; for -o -, the target's own).")
@click.option("-o", "output", required=True, metavar="OUT", help="Output path ('-' = stdout).")
@click.option("--target", "target", metavar="T", help="Needed for a target-independent module; else must match.")
@click.option("--emit-launch-config", "launch_path", metavar="PATH", help="Write the launch-config artifact.")
@click.option("--manifest", "manifest_path", metavar="PATH", help="Write the artifact manifest.")
@diagnostics_option
def emit(compiled_path: str, fmt: str | None, output: str, target: str | None, launch_path: str | None,
         manifest_path: str | None, diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Emit a target artifact from a compiled module (`loom compile -o X.loombc`)."""
    from loomcli.emit.artifacts import Emission, format_for, manifest
    from loomcli.frontend import load_module
    from loomcli.pipeline import compiled_target
    from loomcli.targets.profiles import parse_target

    kind = format_for(output, fmt)
    if kind is None and output != STDOUT:
        raise UsageError(f"-o {output}: cannot tell the format from the suffix; pass --format")
    module = load_module(compiled_path)
    recorded = compiled_target(module)
    if recorded is None and target is None:
        raise UsageError(f"{compiled_path} is target-independent; name one with --target")
    profile = parse_target(target or recorded)  # type: ignore[arg-type]
    if recorded is not None and profile.name != parse_target(recorded).name:
        raise UsageError(f"{compiled_path} was compiled for {recorded}, not {profile.name}")
    if output == STDOUT:
        from loomcli.emit import backend_for

        kind = kind or backend_for(profile).native_format  # `-o -` with a target, as `loom compile` does
        if kind in BINARY and click.get_text_stream("stdout").isatty():
            raise UsageError("refusing to write binary output to a terminal; use -o FILE")
    assert kind is not None  # a named output without one was refused above
    if recorded is None:
        # A target-independent module still needs final selection and the pipeline for this target.
        from loomcli.passes.bind import ConfigBindings
        from loomcli.passes.pipeline import parse_pipeline
        from loomcli.pipeline import FrontEnd, specialize

        module = specialize(FrontEnd(module, ConfigBindings({}), parse_pipeline("default"), [], []), profile,
                            for_execution=True).module
    emission = Emission(module, profile)  # TARGET checks once, for both outputs
    artifact = emission.artifact(kind)
    writes = [(output, artifact.data)]
    if launch_path:
        writes.append((launch_path, emission.launch_config()))
    if manifest_path:
        writes.append((manifest_path, manifest(artifact, os.path.basename(output),
                                               os.path.basename(launch_path) if launch_path else None)))
    from loomcli.files import write_outputs

    write_outputs(writes, inputs=[compiled_path])  # all or nothing
    return 0
