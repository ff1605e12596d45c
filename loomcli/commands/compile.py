"""`loom compile`: link, bind config, select templates, run passes, emit.

The front end (read, verify, link, bind) runs once however many targets are
asked for; each target is then one `CompileRequest` to the compile entry
point (`loomcli.service.compile`): the cache first, misses in this process (one
target) or in the warm worker pool (several), within make's jobserver.
Every output is planned before any work (`loomcli.service.outputs`),
computed before the first is written, and published with a rename, so a
failure leaves nothing behind.
"""

from __future__ import annotations

import os

import click

from loomcli.diagnostics import CompileError
from loomcli.driver import DiagnosticPrinter, config_option, diagnostics_option, jobserver_style_option
from loomcli.service.outputs import ALL_FORMATS, BESIDE, OutputRequest

POOL_MODULE_BYTES = 16384  # below this, several targets compile in this process, one after another


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("input_path", metavar="INPUT")
@click.option("-o", "output", multiple=True, metavar="OUT",
              help="Output path (.loombc, .loom, .hsaco, .spv, .ll, .s; '-' = stdout); repeat it for several "
                   "outputs of one target (.launch.loombc and .manifest.json name the side files).")
@click.option("--out-dir", metavar="DIR", help="Write DIR/<stem>.<family>-<selector>.<ext> for every --target.")
@click.option("--format", "fmt", type=click.Choice(ALL_FORMATS), help="Output format (default: from the suffix).")
@click.option("--target", "targets", multiple=True, metavar="T", help="Target profile, e.g. amdgpu:gfx1100.")
@click.option("--target-env", "target_env", metavar="ENV", help="glslc spelling: vulkan1.3 = spirv:vulkan1.3.")
@click.option("--root", "roots", multiple=True, metavar="@SYM", help="Roots (default: every exported kernel).")
@click.option("--library", "libraries", multiple=True, metavar="[KEY=]PATH", help="A library to link against.")
@config_option()
@click.option("--config-file", "config_files", multiple=True, type=click.Path(dir_okay=False),
              help="Bindings from .json, .toml or a .loom config module (later files win).")
@click.option("--pipeline", default="default", show_default=True, help="Pass pipeline text, `default` or `none`.")
@click.option("--require-resolved-config", is_flag=True, help="Every reachable config.get must be bound.")
@click.option("--emit-launch-config", "launch_path", metavar="PATH", is_flag=False, flag_value=BESIDE,
              help="Write the launch-config artifact (a folder with several targets; no PATH: beside the artifact).")
@click.option("--manifest", "manifest_path", metavar="PATH", is_flag=False, flag_value=BESIDE,
              help="Write the artifact manifest (a folder with several targets; no PATH: beside the artifact).")
@click.option("--stop-at", "stop_at", metavar="STAGE",
              help="Write the output of this stage of the target's back end (llir, asm, obj, ptx, spirv, ...; "
                   "`loom targets --stages` lists them).")
@click.option("--dump-stages", "dump_stages", metavar="DIR",
              help="Also write every stage's output on the way to DIR (<stem>.<stage>).")
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
def compile(input_path: str, output: tuple[str, ...], out_dir: str | None, fmt: str | None, targets: tuple[str, ...],
            target_env: str | None, roots: tuple[str, ...], libraries: tuple[str, ...],
            config_pairs: tuple[str, ...], config_files: tuple[str, ...], pipeline: str,
            require_resolved_config: bool, launch_path: str | None, manifest_path: str | None,
            stop_at: str | None, dump_stages: str | None, print_selections: bool, depfile_md: bool,
            depfile_path: str | None, depfile_target: str | None,
            jobs: int | None, no_cache: bool, trace_path: str | None, jobserver_style: str,
            diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Compile INPUT (and the libraries it needs) to a compiled module or target artifacts."""
    from loomcli.service.outputs import plan_outputs

    # Every output and every usage error before any work (loomcli.service.outputs).
    plan = plan_outputs(OutputRequest(
        input_path, outputs=output, out_dir=out_dir, format=fmt,
        targets=(*targets, *([f"spirv:{target_env}"] if target_env else [])),
        launch_config=launch_path, manifest=manifest_path, depfile_beside=depfile_md, depfile=depfile_path,
        depfile_target=depfile_target, stdout_is_terminal=click.get_text_stream("stdout").isatty(),
        stop_at=stop_at, dump_stages=dump_stages))
    from loomcli.bytecode import write_module
    from loomcli.cache import enabled
    from loomcli.emit import backend_for
    from loomcli.ir.core import FileLoc
    from loomcli.service.front import CompileOptions, front_end
    from loomcli.service.request import CompileRequest
    from loomcli.service.session import compile_session

    profiles = plan.profiles
    if (no_cache or not enabled()) and len(profiles) == 1:
        # No cache can answer: start the back end's worker (LLVM) now, it warms up while the front end runs.
        backend_for(profiles[0]).start_worker(plan.outputs[0].format)
    options = CompileOptions(input=input_path, libraries=libraries, roots=roots, config=config_pairs,
                             config_files=config_files, pipeline=pipeline,
                             require_resolved_config=require_resolved_config)
    front = front_end(*options.front_end_inputs())
    printer = DiagnosticPrinter(diagnostics_format)
    printer.emit(front.warnings)
    # The front end ran once; each target is one request to the compile entry point.
    module_bytes = write_module(front.module, keep_debug=True)
    linked_files = tuple((k, op.loc.file) for k, op in enumerate(front.module.ops) if isinstance(op.loc, FileLoc))
    requests = plan.requests(CompileRequest(module=module_bytes, roots=tuple(roots), linked=True, pipeline=pipeline,
                                            require_resolved_config=require_resolved_config,
                                            path=front.module.path, files=linked_files))

    def warn(message: str) -> None:
        click.echo(f"loom: warning: {message}", err=True)

    # Workers pay for their start (an interpreter, imports, LLVM): worth it
    # for several targets of a large module, not for a small one.
    parallel = len(requests) if len(requests) > 1 and len(module_bytes) >= POOL_MODULE_BYTES else 1
    stem = os.path.splitext(os.path.basename(input_path))[0]
    with compile_session(jobs, parallel, [p.name for p in profiles], no_cache=no_cache, warn=warn,
                         trace_path=trace_path, jobserver_style=jobserver_style) as session:
        if session.dry_run:
            return 0  # make -n: say nothing, write nothing
        futures = [session.service.submit(req, f"{stem} {req.target or 'module'}") for req in requests]
        outcomes = [f.result() for f in futures]
    for outcome in outcomes:
        if outcome.status == "error":
            outcome.raise_for_status()
    # Every target's errors, each said once: one the targets share (a config
    # left unresolved) is the same error, not one per target.
    failed = [d for o in outcomes if o.status == "failed" for d in o.diagnostics]
    if failed:
        raise CompileError(list({(d.file, d.line, d.column, d.code, d.message): d for d in failed}.values()))
    for planned, outcome in zip(plan.outputs, outcomes):
        printer.emit(list(outcome.diagnostics[len(front.warnings):]) if outcome.diagnostics else [])
        if print_selections:
            prefix = f"{planned.profile.name}: " if planned.profile is not None and len(profiles) > 1 else ""
            for line in outcome.selections:
                click.echo(prefix + line)
    from loomcli.files import write_outputs

    for folder in plan.folders:
        os.makedirs(folder, exist_ok=True)  # --out-dir (and side folders) are created as needed
    write_outputs(plan.writes(outcomes, front.files_read), inputs=front.files_read)  # all or nothing
    return 0
