"""`loom build [DIR]`: build a loom.toml project (TOOLCHAIN.md sections 4 and 9)."""

from __future__ import annotations

import os

import click

from loomcli.driver import DiagnosticPrinter, UsageError, diagnostics_option, jobserver_style_option


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("directory", metavar="[DIR]", default=".", required=False)
@click.option("-f", "toml_file", metavar="FILE", help="The project file (default: DIR/loom.toml).")
@click.option("-j", "--jobs", "jobs", type=int, metavar="N",
              help="At most N compile workers (default: LOOM_JOBS, else the usable CPUs; make's jobserver bounds it).")
@click.option("--target", "targets", multiple=True, metavar="T", help="Build for T instead of [build] targets.")
@click.option("--out-dir", metavar="DIR", help="Write outputs here instead of [build] out-dir.")
@click.option("--package", "package", is_flag=True, help="Also write dist/<name>-<version>.loompkg.tar.gz.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the compile cache.")
@click.option("--keep-going", is_flag=True, help="Report every failure instead of stopping at the first.")
@click.option("--progress", "progress_mode", type=click.Choice(["auto", "rich", "plain", "none"]), default="auto",
              show_default=True, help="Live display in a terminal, plain lines, or nothing.")
@click.option("--trace", "trace_path", metavar="FILE", help="Write a Chrome trace (JSON) of the compile tasks.")
@jobserver_style_option
@diagnostics_option
def build(directory: str, toml_file: str | None, jobs: int | None, targets: tuple[str, ...], out_dir: str | None,
          package: bool, no_cache: bool, keep_going: bool, progress_mode: str, trace_path: str | None,
          jobserver_style: str, diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Build every library, kernel set and command program of a project, for every target."""
    from loomcli import __version__
    from loomcli.build.engine import BuildOptions, run_build
    from loomcli.build.progress import choose, make_progress
    from loomcli.build.project import load_project

    if not os.path.isdir(directory):
        raise UsageError(f"{directory}: not a folder")
    from loomcli import settings

    # Read before the build, not after it: a bad value is a usage error, at once.
    mtime = settings.source_date_epoch() if package else None
    project = load_project(directory, toml_file, out_dir)
    printer = DiagnosticPrinter(diagnostics_format)
    progress = make_progress(choose(progress_mode, quiet), f"loom build {project.name} {project.version}")
    warned: set[str] = set()

    def warn(message: str) -> None:
        if message not in warned:
            warned.add(message)
            progress.message(f"loom: warning: {message}")

    options = BuildOptions(targets=targets, out_dir=out_dir, jobs=jobs, no_cache=no_cache, keep_going=keep_going,
                           trace=trace_path, jobserver_style=jobserver_style, werror=printer.warnings == "error")
    try:
        report = run_build(project, options, progress, printer.emit, warn)
    except BaseException as e:
        progress.close("interrupted" if isinstance(e, KeyboardInterrupt) else "failed")
        raise
    if report.dry_run:
        progress.close("dry run (make -n)")
        return 0
    headline = "built" if not report.failures else f"FAILED ({len(report.failures)})"
    progress.close(f"{headline} {project.name} {project.version}")
    if report.failures:
        return report.exit_code or 1
    if package:
        from loomcli.build.package import write_package

        path = write_package(os.path.join(project.root, "dist"), project.name, project.version, __version__,
                             report.targets, report.out_dir, report.outputs, mtime)
        if not quiet:
            from loomcli.frontend import display_path

            click.echo(f"loom: packaged {display_path(path)}")
    return 0
