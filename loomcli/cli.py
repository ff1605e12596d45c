"""The `loom` command line: a thin click shell over the Python API.

Subcommands are registered by module path and imported only when invoked,
so `loom --help` and `loom --version` stay fast and never import LLVM or rich.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from loomcli import __version__
from loomcli.errors import Interrupted

# name -> "module:function"; the module is imported only when the command runs.
COMMANDS: dict[str, str] = {
    "build": "loomcli.commands.build:build",
    "cache": "loomcli.commands.cache:cache",
    "compile": "loomcli.commands.compile:compile",
    "emit": "loomcli.commands.emit:emit",
    "fmt": "loomcli.commands.fmt:fmt",
    "frontier": "loomcli.commands.frontier:frontier",
    "launch-eval": "loomcli.commands.launch_eval:launch_eval",
    "link": "loomcli.commands.link:link",
    "opt": "loomcli.commands.opt:opt",
    "server": "loomcli.commands.server:server",
    "targets": "loomcli.commands.targets:targets",
    "test": "loomcli.commands.test:test",
    "worker": "loomcli.commands.worker:worker",
}

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        import importlib

        return getattr(importlib.import_module(module_name), attr)

    # click answers a KeyboardInterrupt with a blank line and Abort; loom's is
    # one line, `loom: error: interrupted` (exit 130), whenever it comes.
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise Interrupted() from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted() from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing short help would import every command; the summaries live here instead.
        rows = [(name, SUMMARIES.get(name, "")) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


SUMMARIES = {
    "build": "Build a loom.toml project: libraries, kernel sets, commands, every target; --package.",
    "cache": "Inspect or trim the compile cache (stats, clear, prune, path).",
    "compile": "Compile a module: link, bind config, select templates, run passes, emit.",
    "emit": "Emit a target artifact (.hsaco, .spv, .ll, .s) from a compiled module.",
    "fmt": "Check, rewrite or convert Loom text and bytecode.",
    "frontier": "Turn command programs into command bytes and independent kernel requests.",
    "launch-eval": "Evaluate a kernel's launch (workgroups, sizes, storage) for workload values.",
    "link": "Link modules against libraries into one module.",
    "opt": "Run a pass pipeline over a module and print the result.",
    "server": "The resident compile service: start, status, stop (LOOM_SERVER=auto|off).",
    "targets": "List the target profiles and their limits.",
    "test": "Run check cases on a Vulkan device and report per case and sample.",
    "worker": "Bazel's persistent worker (--persistent_worker); `loom worker @PARAMS` runs one command line.",
}


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    args = ctx.obj if isinstance(ctx.obj, list) else sys.argv[1:]
    as_json = "--json" in args
    from loomcli.service.version import llvm_release, llvmlite_version

    llvm, llvmlite = llvm_release(), llvmlite_version()
    if as_json:
        click.echo(json.dumps({"name": "loom", "version": __version__,
                               "python": ".".join(map(str, sys.version_info[:3])), "llvm": llvm,
                               "llvmlite": llvmlite}))
    elif llvm is None:
        click.echo(f"loom {__version__} (no usable llvmlite: no AMDGPU or NVPTX code generation)")
    else:
        click.echo(f"loom {__version__} (LLVM {llvm}, llvmlite {llvmlite})")
    ctx.exit(0)


def _print_cmake_dir(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    # LoomConfig.cmake ships inside the package (loomcli/cmake), so this works from any install.
    if not value or ctx.resilient_parsing:
        return
    import os

    click.echo(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cmake"))
    ctx.exit(0)


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the version and exit (add --json for machines).")
@click.option("--cmake-dir", is_flag=True, expose_value=False, is_eager=True, callback=_print_cmake_dir,
              help="Print the folder of LoomConfig.cmake (cmake -DLoom_DIR=\"$(loom --cmake-dir)\").")
@click.option("--json", "_json", is_flag=True, hidden=True)
def cli(_json: bool) -> None:
    """Loom: ahead-of-time compiler and packager for Loom GPU kernel programs."""


def main(argv: list[str] | None = None) -> Any:
    """Entry point: maps failures to the exit codes of TOOLCHAIN.md section 5."""
    from loomcli.driver import run_cli

    return run_cli(cli, argv)


if __name__ == "__main__":  # pragma: no cover
    main()
