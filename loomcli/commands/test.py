"""`loom test`: run the `check.case`s of Loom files on a Vulkan device, the
cpu device or the reference interpreter (LANGUAGE.md 17.32: `--device auto`
takes Vulkan if usable, else the interpreter; the cpu device, which runs
the LLVM lowering natively, is chosen by name).

On Vulkan, each file's launched kernels are compiled and emitted to SPIR-V
once, for `--target` or else the highest `spirv:vulkan1.x` the device runs;
on the cpu device for `--target` or else `cpu:x86-64` (docs/cpu.md); on the
interpreter they are compiled for the reference profile, or for `--target`
(whose index/offset widths it then traps, 17.27). Every case
then runs sample by sample (LANGUAGE.md 13). Output, on stdout, one line per
sample and a summary that counts cases (a case passes iff all its samples do):

    PASS @saxpy_case [n=1]
    FAIL @saxpy_case [n=128]
    0 passed, 1 failed

Failures print their diagnostics (CHECK/001 ...) on stderr. `--bench` then
times the samples `check.benchmark`s select:

    BENCH @saxpy_big [n=1009] @saxpy: median 10.4 us (min 9.8 us, 48 runs)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from loomcli.driver import EXIT_COMPILE, DiagnosticPrinter, UsageError, config_option, diagnostics_option

if TYPE_CHECKING:
    from loomcli.check.session import Linking
    from loomcli.diagnostics import Diagnostic


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, metavar="FILE... | [DIR]")
@click.option("--library", "libraries", multiple=True, metavar="[KEY=]PATH",
              help="A library each FILE's declarations resolve to (repeatable).")
@config_option()
@click.option("--config-file", "config_files", multiple=True, type=click.Path(dir_okay=False),
              help="Bindings from .json, .toml or a .loom config module (later files win).")
@click.option("--case", "cases", multiple=True, metavar="@C", help="Run only this case (repeatable).")
@click.option("--device", type=click.Choice(["auto", "vulkan", "cpu", "interpreter"]), default="auto",
              show_default=True,
              help="Where kernels run: a Vulkan device, this machine's CPU (natively), or the reference interpreter.")
@click.option("--target", metavar="T",
              help="Target profile (Vulkan default: the highest spirv:vulkan1.x the device runs; "
                   "cpu: cpu:x86-64; interpreter default: the reference profile).")
@click.option("--bench", is_flag=False, flag_value="", default=None, metavar="[@B]",
              help="After the checks, time the samples of every check.benchmark (or only @B).")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, metavar="N",
              help="Interpreter: operations one launch may run before EXEC/003 (default 20000000).")
@diagnostics_option
def test(files: tuple[str, ...], libraries: tuple[str, ...], config_pairs: tuple[str, ...],
         config_files: tuple[str, ...], cases: tuple[str, ...], device: str, target: str | None, bench: str | None,
         max_steps: int | None, diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Run the check cases of each FILE and report per case and sample.

    With no FILE, or one folder DIR: run the [[test]] sets of DIR/loom.toml
    (default: the current folder), each on its devices.
    """
    # `--bench FILE` means `--bench` (all benchmarks) followed by a file.
    if bench is not None and bench and not bench.startswith("@"):
        files = (bench, *files)
        bench = ""
    from loomcli.check.session import Linking

    printer = DiagnosticPrinter(diagnostics_format)
    options = _Options(cases, target, bench, max_steps, quiet, verbose, printer)
    linking = Linking(libraries, config_pairs, config_files)
    if not files or (len(files) == 1 and os.path.isdir(files[0])):
        totals = _run_project(files[0] if files else ".", linking, options)
    else:
        totals = _run(files, device, linking, options)
    passed, failed, errors = totals
    if not quiet:
        errors_text = f", {errors} file{'s' if errors != 1 else ''} did not compile" if errors else ""
        click.echo(f"{passed} passed, {failed} failed{errors_text}")
    return EXIT_COMPILE if failed or errors else 0


@dataclass(frozen=True)
class _Options:
    cases: tuple[str, ...]
    target: str | None
    bench: str | None
    max_steps: int | None
    quiet: bool
    verbose: bool
    printer: DiagnosticPrinter


def _run(files: tuple[str, ...], device: str, linking: Linking, o: _Options) -> tuple[int, int, int]:
    """Test `files` on `device`: (cases passed, cases failed, files that did not compile)."""
    from loomcli.check.session import Session, interpreter_profile, open_device, vulkan_profile
    from loomcli.check.vulkan import VulkanRunner

    runner = None if device == "interpreter" else open_device(device, o.target)
    try:
        if runner is None:
            profile = interpreter_profile(o.target)
            if o.verbose:
                click.echo(f"loom test: reference interpreter, profile {profile.name}", err=True)
        elif isinstance(runner, VulkanRunner):
            profile = vulkan_profile(o.target, runner)
            if o.verbose:
                click.echo(f"loom test: {runner.info.describe()}, target {profile.name}", err=True)
        else:   # the cpu device, for the cpu profile open_device checked
            profile = runner.profile
            if o.verbose:
                click.echo(f"loom test: {runner.describe()}", err=True)
        session = Session(runner, profile, _ClickReporter(o.printer), o.quiet, o.max_steps, linking)
        session.run(files, [c.removeprefix("@") for c in o.cases],
                    None if o.bench is None else o.bench.removeprefix("@"))
    finally:
        if runner is not None:
            runner.close()
    return session.passed, session.failed, session.errors


def _run_project(folder: str, given: Linking, o: _Options) -> tuple[int, int, int]:
    """`loom test DIR`: every [[test]] set of DIR/loom.toml on each of its
    devices; the command line's libraries and bindings come on top."""
    from loomcli.build.project import library_closure, load_project
    from loomcli.check.session import Linking

    project = load_project(folder)
    if not project.tests:
        raise UsageError(f"{project.file}: no [[test]] sets to run (or name the files: loom test FILE...)")
    libraries_by_name = {lib.name: lib for lib in project.libraries}
    kernels_by_name = {k.name: k for k in project.kernels}
    totals = [0, 0, 0]
    for t in project.tests:
        # A named [[kernels]] set brings its sources and its libraries; a
        # [[library]] brings the libraries it uses.
        kernel_sets = [kernels_by_name[n] for n in t.libraries if n in kernels_by_name]
        used = {n for n in t.libraries if n in libraries_by_name} | {n for k in kernel_sets for n in k.libraries}
        srcs = [src for k in kernel_sets for src in k.srcs]
        srcs += [src for n in library_closure(project, tuple(sorted(used))) for src in libraries_by_name[n].srcs]
        libraries = tuple(dict.fromkeys(_shown(project.path(src)) for src in srcs if src not in t.srcs))
        files = tuple(_shown(project.path(src)) for src in t.srcs)
        linking = Linking(libraries + given.libraries, given.config, given.config_files,
                          {**project.config, **t.config}, project.file, {**project.config_lines, **t.config_lines})
        for device in t.devices:
            if not o.quiet:
                click.echo(f"loom test: [[test]] {t.name!r} on {device}", err=True)
            for i, n in enumerate(_run(files, device, linking, o)):
                totals[i] += n
    return totals[0], totals[1], totals[2]


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel.replace(os.sep, "/")


class _ClickReporter:
    def __init__(self, printer: DiagnosticPrinter) -> None:
        self.printer = printer

    def line(self, text: str) -> None:
        click.echo(text)

    def diagnostics(self, diags: list[Diagnostic]) -> None:
        click.get_text_stream("stdout").flush()
        self.printer.emit(diags)
