"""`loom compile`: link, bind config, select templates, run passes, emit.

The front end (read, verify, link, bind) runs once however many targets are
asked for; each target is then one `CompileRequest` to the compile entry
point (`loomcli.service.compile`): the cache first, misses in this process (one
target) or in the warm worker pool (several), within make's jobserver.
Every output is computed before the first is written, and each is published
with a rename, so a failure leaves nothing behind.
"""

from __future__ import annotations

import os

import click

from loomcli.driver import DiagnosticPrinter, UsageError, diagnostics_option, jobserver_style_option
from loomcli.emit import FORMATS as ARTIFACT_FORMATS

MODULE_FORMATS = {".loombc": "loom-bytecode", ".loom": "loom-text"}
ALL_FORMATS = ("loom-bytecode", "loom-text", *ARTIFACT_FORMATS)
EXTENSIONS = {"loom-bytecode": ".loombc", "loom-text": ".loom", **ARTIFACT_FORMATS}
BINARY = {"loom-bytecode", "amdgpu-hsaco", "spirv-binary", "nvptx-cubin"}
POOL_MODULE_BYTES = 16384  # below this, several targets compile in this process, one after another


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("input_path", metavar="INPUT")
@click.option("-o", "output", metavar="OUT", help="Output path (.loombc, .loom, .hsaco, .spv, .ll, .s; '-' = stdout).")
@click.option("--out-dir", metavar="DIR", help="Write DIR/<stem>.<family>-<selector>.<ext> for every --target.")
@click.option("--format", "fmt", type=click.Choice(ALL_FORMATS), help="Output format (default: from the suffix).")
@click.option("--target", "targets", multiple=True, metavar="T", help="Target profile, e.g. amdgpu:gfx1100.")
@click.option("--target-env", "target_env", metavar="ENV", help="glslc spelling: vulkan1.3 = spirv:vulkan1.3.")
@click.option("--root", "roots", multiple=True, metavar="@SYM", help="Roots (default: every exported kernel).")
@click.option("--library", "libraries", multiple=True, metavar="[KEY=]PATH", help="A library to link against.")
@click.option("--config", "config_pairs", multiple=True, metavar="KEY=VALUE", help="Bind a config key.")
@click.option("--config-file", "config_files", multiple=True, type=click.Path(dir_okay=False),
              help="Bindings from .json, .toml or a .loom config module (later files win).")
@click.option("--pipeline", default="default", show_default=True, help="Pass pipeline text, `default` or `none`.")
@click.option("--require-resolved-config", is_flag=True, help="Every reachable config.get must be bound.")
@click.option("--emit-launch-config", "launch_path", metavar="PATH",
              help="Write the launch-config artifact (a folder with several targets).")
@click.option("--manifest", "manifest_path", metavar="PATH",
              help="Write the artifact manifest (a folder with several targets).")
@click.option("--print-selections", is_flag=True, help="Print every template selection decision.")
@click.option("-MD", "depfile_md", is_flag=True, help="Write a depfile beside each output (OUT with .d).")
@click.option("-MF", "depfile_path", metavar="DEPFILE", help="Write the depfile here (one output only).")
@click.option("-MT", "depfile_target", metavar="TARGET", help="The depfile's target (default: the output).")
@click.option("-j", "--jobs", "jobs", type=int, metavar="N", help="At most N targets at once (default: LOOM_JOBS, "
              "else the usable CPUs; under make, its jobserver bounds it).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the compile cache.")
@click.option("--trace", "trace_path", metavar="FILE", help="Write a Chrome trace (JSON) of the compile tasks.")
@jobserver_style_option
@diagnostics_option
def compile(input_path: str, output: str | None, out_dir: str | None, fmt: str | None, targets: tuple[str, ...],
            target_env: str | None, roots: tuple[str, ...], libraries: tuple[str, ...],
            config_pairs: tuple[str, ...], config_files: tuple[str, ...], pipeline: str,
            require_resolved_config: bool, launch_path: str | None, manifest_path: str | None,
            print_selections: bool, depfile_md: bool, depfile_path: str | None, depfile_target: str | None,
            jobs: int | None, no_cache: bool, trace_path: str | None, jobserver_style: str,
            diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Compile INPUT (and the libraries it needs) to a compiled module or target artifacts."""
    from loomcli.emit.artifacts import format_for
    from loomcli.service.front import CompileOptions, front_end
    from loomcli.targets.profiles import parse_target

    profiles = [parse_target(t) for t in targets] + ([parse_target(f"spirv:{target_env}")] if target_env else [])
    if output is not None and out_dir is not None:
        raise UsageError("-o and --out-dir exclude each other")
    if output is None and out_dir is None:
        raise UsageError("missing -o OUT or --out-dir DIR")
    if len(profiles) > 1 and out_dir is None:
        raise UsageError("several --target values need --out-dir")
    if out_dir is not None and not profiles:
        raise UsageError("--out-dir needs at least one --target")
    if depfile_path and len(profiles) > 1:
        raise UsageError("-MF names one depfile; with several targets use -MD")
    out_format = None
    if output is not None:
        out_format = format_for(output, fmt) or MODULE_FORMATS.get(os.path.splitext(output)[1])
        if out_format is None:
            raise UsageError(f"-o {output}: cannot tell the format from the suffix; pass --format")
        if out_format not in MODULE_FORMATS.values() and not profiles:
            raise UsageError(f"emitting {out_format} needs --target")
        if output == "-" and out_format in BINARY and click.get_text_stream("stdout").isatty():
            raise UsageError("refusing to write binary output to a terminal; use -o FILE")
    from loomcli.bytecode import write_module
    from loomcli.cache import enabled
    from loomcli.emit import backend_for
    from loomcli.service.request import CompileRequest
    from loomcli.service.session import compile_session

    if (no_cache or not enabled()) and len(profiles) == 1:
        # No cache can answer: start the back end's worker (LLVM) now, it warms up while the front end runs.
        backend = backend_for(profiles[0])
        backend.start_worker(out_format or fmt or backend.native_format)

    options = CompileOptions(input=input_path, libraries=libraries, roots=roots, config=config_pairs,
                             config_files=config_files, pipeline=pipeline,
                             require_resolved_config=require_resolved_config)
    front = front_end(*options.front_end_inputs())
    printer = DiagnosticPrinter(diagnostics_format)
    printer.emit(front.warnings)
    # The front end ran once; each target is one request to the compile entry point.
    module_bytes = write_module(front.module, keep_debug=True)
    linked_files = tuple((k, op.loc.file) for k, op in enumerate(front.module.ops) if hasattr(op.loc, "file"))
    stem = os.path.splitext(os.path.basename(input_path))[0]
    plans: list[tuple[object, str, str | None, str | None, CompileRequest]] = []
    depfiles: list[tuple[str, str]] = []
    for profile in profiles or [None]:
        tag = f"{profile.family}-{profile.selector}" if profile is not None else ""
        if out_dir is not None:
            assert profile is not None
            kind = fmt or backend_for(profile).native_format
            path = os.path.join(out_dir, f"{stem}.{tag}{EXTENSIONS[kind]}")
        else:
            assert output is not None and out_format is not None
            kind = out_format
            path = output
        launch_file = _side_path(launch_path, out_dir, stem, tag, ".launch.loombc")
        manifest_file = _side_path(manifest_path, out_dir, stem, tag, ".manifest.json")
        if launch_file is not None and profile is None:
            raise UsageError("--emit-launch-config needs --target")
        if manifest_file is not None and kind in MODULE_FORMATS.values():
            raise UsageError("--manifest describes a target artifact (.hsaco, .spv, .ptx, .cubin, .ll, .s)")
        request = CompileRequest(module=module_bytes, target=profile.name if profile is not None else "",
                                 format=kind, roots=tuple(roots), linked=True, pipeline=pipeline,
                                 require_resolved_config=require_resolved_config,
                                 launch_config=launch_file is not None, manifest=manifest_file is not None,
                                 artifact_name=os.path.basename(path),
                                 launch_config_name=os.path.basename(launch_file) if launch_file else "",
                                 path=front.module.path, files=linked_files)
        plans.append((profile, path, launch_file, manifest_file, request))
        if depfile_md or depfile_path:
            dep = depfile_path if depfile_path else os.path.splitext(path if path != "-" else "stdout")[0] + ".d"
            depfiles.append((dep, depfile_target or path))

    def warn(message: str) -> None:
        click.echo(f"loom: warning: {message}", err=True)

    targets_named = [p.name for p in profiles]
    # Workers pay for their start (an interpreter, imports, LLVM): worth it
    # for several targets of a large module, not for a small one.
    parallel = len(plans) if len(plans) > 1 and len(module_bytes) >= POOL_MODULE_BYTES else 1
    with compile_session(jobs, parallel, targets_named, no_cache=no_cache, warn=warn,
                         trace_path=trace_path, jobserver_style=jobserver_style) as session:
        if session.dry_run:
            return 0  # make -n: say nothing, write nothing
        futures = [session.service.submit(req, f"{stem} {req.target or 'module'}") for *_, req in plans]
        outcomes = [f.result() for f in futures]
    writes: list[tuple[str, bytes]] = []
    for (profile, path, launch_file, manifest_file, _), outcome in zip(plans, outcomes):
        outcome.raise_for_status()
        printer.emit(list(outcome.diagnostics[len(front.warnings):]) if outcome.diagnostics else [])
        if print_selections:
            prefix = f"{profile.name}: " if profile is not None and len(profiles) > 1 else ""
            for line in outcome.selections:
                click.echo(prefix + line)
        writes.append((path, outcome.artifact))
        if launch_file is not None:
            writes.append((launch_file, outcome.launch_config))
        if manifest_file is not None:
            writes.append((manifest_file, outcome.manifest))
    for folder in {os.path.dirname(path) for path, _ in writes if path != "-"} - {""}:
        if out_dir is not None or folder in (launch_path, manifest_path):
            os.makedirs(folder, exist_ok=True)  # --out-dir (and side folders) are created as needed
    from loomcli.files import write_outputs
    from loomcli.service.outputs import depfile

    writes += [(dep, depfile(target, front.files_read)) for dep, target in depfiles]
    write_outputs(writes, inputs=front.files_read)  # all or nothing
    return 0


def _side_path(option: str | None, out_dir: str | None, stem: str, tag: str, suffix: str) -> str | None:
    """--emit-launch-config / --manifest: a file, or with --out-dir a folder of per-target files."""
    if option is None:
        return None
    if out_dir is not None:
        return os.path.join(option, f"{stem}.{tag}{suffix}")
    return option
