"""`loom test`: run the `check.case`s of Loom files on a Vulkan device or the
reference interpreter (LANGUAGE.md 17.32: `--device auto` takes Vulkan if
usable, else the interpreter).

On Vulkan, each file's launched kernels are compiled and emitted to SPIR-V
once, for `--target` or else the highest `spirv:vulkan1.x` the device runs;
on the interpreter they are compiled for the reference profile, or for
`--target` (whose index/offset widths it then traps, 17.27). Every case
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

from typing import TYPE_CHECKING

import click

from loomcli.driver import EXIT_COMPILE, DiagnosticPrinter, UsageError, diagnostics_option

if TYPE_CHECKING:
    from loomcli.diagnostics import Diagnostic


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, metavar="FILE...")
@click.option("--library", "libraries", multiple=True, metavar="[KEY=]PATH",
              help="A library each FILE's declarations resolve to (repeatable).")
@click.option("-D", "--config", "config_pairs", multiple=True, metavar="KEY=VALUE", help="Bind a config key.")
@click.option("--config-file", "config_files", multiple=True, type=click.Path(dir_okay=False),
              help="Bindings from .json, .toml or a .loom config module (later files win).")
@click.option("--case", "cases", multiple=True, metavar="@C", help="Run only this case (repeatable).")
@click.option("--device", type=click.Choice(["auto", "vulkan", "interpreter"]), default="auto", show_default=True,
              help="Where kernels run: a Vulkan device, or the reference interpreter.")
@click.option("--target", metavar="T",
              help="Target profile (Vulkan default: the highest spirv:vulkan1.x the device runs; "
                   "interpreter default: the reference profile).")
@click.option("--bench", is_flag=False, flag_value="", default=None, metavar="[@B]",
              help="After the checks, time the samples of every check.benchmark (or only @B).")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, metavar="N",
              help="Interpreter: operations one launch may run before EXEC/003 (default 20000000).")
@diagnostics_option
def test(files: tuple[str, ...], libraries: tuple[str, ...], config_pairs: tuple[str, ...],
         config_files: tuple[str, ...], cases: tuple[str, ...], device: str, target: str | None, bench: str | None,
         max_steps: int | None, diagnostics_format: str, quiet: bool, verbose: bool) -> int:
    """Run the check cases of each FILE and report per case and sample."""
    # `--bench FILE` means `--bench` (all benchmarks) followed by a file.
    if bench is not None and bench and not bench.startswith("@"):
        files = (bench, *files)
        bench = ""
    if not files:
        raise UsageError("loom test needs at least one FILE")
    from loomcli.check.session import Linking, Session, interpreter_profile, open_device, vulkan_profile

    runner = None if device == "interpreter" else open_device(device)
    try:
        if runner is None:
            profile = interpreter_profile(target)
            if verbose:
                click.echo(f"loom test: reference interpreter, profile {profile.name}", err=True)
        else:
            profile = vulkan_profile(target, runner)
            if verbose:
                click.echo(f"loom test: {runner.info.describe()}, target {profile.name}", err=True)
        session = Session(runner, profile, _ClickReporter(DiagnosticPrinter(diagnostics_format)), quiet, max_steps,
                          Linking(libraries, config_pairs, config_files))
        session.run(files, [c.removeprefix("@") for c in cases],
                    None if bench is None else bench.removeprefix("@"))
    finally:
        if runner is not None:
            runner.close()
    if not quiet:
        n = session.errors
        errors = f", {n} file{'s' if n != 1 else ''} did not compile" if n else ""
        click.echo(f"{session.passed} passed, {session.failed} failed{errors}")
    return EXIT_COMPILE if session.failed or session.errors else 0


class _ClickReporter:
    def __init__(self, printer: DiagnosticPrinter) -> None:
        self.printer = printer

    def line(self, text: str) -> None:
        click.echo(text)

    def diagnostics(self, diags: list[Diagnostic]) -> None:
        click.get_text_stream("stdout").flush()
        self.printer.emit(diags)
