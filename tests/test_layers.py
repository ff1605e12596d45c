"""The layering of docs/architecture.md, checked on every import.

Each module's imports are read with `ast`, at any depth (function-level
imports included), and every `loomcli` import must point down the stack:
to the module's own package or to a package listed before it in `LAYERS`.
Imports under `if TYPE_CHECKING:` never run; they are held to the same rule,
without exception.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "loomcli"

# Bottom to top; a package may import only itself and the ones before it.
# Every entry is a package or a top-level module: the folder tree is the
# layer diagram, no package spans two layers.
LAYERS = (
    "errors",       # LoomError, UsageError, exit codes, atomic_write
    "settings",     # every environment value loom reads, validated
    "files",        # reading inputs (size limit, stdin), publishing outputs all or nothing
    "diagnostics",  # Diagnostic, CompileError, the catalogue of codes
    "cache",        # the content-addressed artifact cache
    "runtime",      # isolated workers, the fork server, the pool, the jobserver, the task contract
    "ir",           # core, types, attrs, the op table and its format directives, verifier, builder
    "text",         # lexer, parser, printer, the op format directives compiled (directives)
    "bytecode",     # reader, writer
    "semantics",    # folding, evaluation, launch-config interpretation
    "targets",      # profiles, records, the device ABI, the TARGET checks
    "frontend",     # load a .loom or .loombc file, verified
    "launch",       # read and evaluate launch-config artifacts (loom launch-eval)
    "passes",       # the pass registry, pipelines, every Loom-to-Loom pass
    "link",         # link index, linker, gathering config bindings
    "pipeline",     # link + bind + specialize + passes as plain calls
    "emit",         # instruction selection per family, artifacts, launch-config building
    "service",      # the compile service: request, outcome, cache key, the front end, the session
    "check",        # loom test: cases, Vulkan, the reference interpreter, sessions
    "frontier",     # command programs -> command bytes and kernel requests (compiled through the service)
    "build",        # loom build: projects, the build engine, packages, the progress display
    "api",          # the embedding API (docs/api.md): sources, compilers, results, the pool, the frontier
    "driver",       # click glue: options, diagnostics printing, exit codes
    "commands",     # one module per command
    "cli",          # the lazy command registry
    "entry",        # the executable's entry point: the no-op build check, else cli
    "__main__",
)
RANK = {name: i for i, name in enumerate(LAYERS)}

# Only the command line may reach click, rich and the driver (and the build
# progress display rich, lazily).
CLI_ONLY = {"click", "rich"}
CLI_PACKAGES = {"cli", "driver", "commands", "__main__"}
RICH_ALLOWED = {"loomcli.build.progress"}


@dataclass(frozen=True)
class Import:
    module: str       # the importing module, e.g. loomcli.passes.cse
    target: str       # the imported module, e.g. loomcli.ir.core
    line: int
    type_only: bool

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str:
    """The `LAYERS` entry `module` belongs to ("" for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports_of(path: Path, root: Path = ROOT) -> list[Import]:
    """Every import in `path`, resolved to absolute module names."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # `from loomcli.x import y` may name the submodule loomcli.x.y.
            targets = [origin] if node.module else [f"{origin}.{a.name}" for a in node.names]
        else:
            continue
        found += [Import(module, t, node.lineno, id(node) in type_only) for t in targets]
    return found


def all_imports() -> list[Import]:
    return [i for path in sorted(PACKAGE.rglob("*.py")) for i in imports_of(path)]


def wrong_way(imports: list[Import]) -> list[Import]:
    bad = []
    for i in imports:
        if not i.target.startswith("loomcli."):
            continue
        src, dst = layer(i.module), layer(i.target)
        if src == dst:
            continue
        if RANK.get(dst, len(LAYERS)) > RANK[src]:
            bad.append(i)
    return bad


def test_module_layers() -> None:
    assert [layer(m) for m in ("loomcli.service.compile", "loomcli.runtime.pool", "loomcli.ir.core", "loomcli")] == [
        "service", "runtime", "ir", ""]


def test_the_tree_is_the_layer_diagram() -> None:
    """A layer is a top-level package or module, never part of one."""
    assert all("." not in name for name in LAYERS)


def test_a_worker_warms_every_stage() -> None:
    """`warm()` imports the stages a compile runs, derived from the tree: the
    layers from the IR up to emission, in this order."""
    from loomcli.service.compile import STAGES

    assert LAYERS[RANK["ir"]:RANK["emit"] + 1] == STAGES


def test_the_architecture_doc_lists_the_layers_in_order() -> None:
    """docs/architecture.md's layer table is `LAYERS`, row for row (but `__main__`)."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    rows = [line.split("|")[1].strip().strip("`") for line in doc.splitlines()
            if line.startswith("| `") and line.count("|") == 4]
    assert rows == [name for name in LAYERS if name != "__main__"]


def test_every_package_has_a_layer() -> None:
    packages = {layer(module_name(p)) for p in PACKAGE.rglob("*.py")} - {""}
    assert packages <= set(LAYERS), f"add {sorted(packages - set(LAYERS))} to LAYERS and docs/architecture.md"


def test_imports_point_down() -> None:
    bad = wrong_way(all_imports())
    assert not bad, "wrong-way imports (see docs/architecture.md):\n" + "\n".join(map(str, bad))


def test_only_the_command_line_imports_click_rich_or_the_driver() -> None:
    bad = [i for i in all_imports()
           if layer(i.module) not in CLI_PACKAGES
           and (i.target.split(".")[0] in CLI_ONLY or i.target.startswith("loomcli.driver"))
           and not (i.module in RICH_ALLOWED and i.target.split(".")[0] == "rich")]
    assert not bad, "\n".join(map(str, bad))


def test_the_checker_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    """The rule cannot pass by not looking: a nested, a relative and a
    type-only upward import are all found."""
    fake = tmp_path / "loomcli" / "ir" / "fake.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from typing import TYPE_CHECKING\n"
                    "def f():\n    from loomcli.passes import cse\n"
                    "from ..emit import artifacts\n"
                    "if TYPE_CHECKING:\n    from loomcli.text.printer import Printer\n")
    assert sorted(str(i) for i in wrong_way(imports_of(fake, tmp_path))) == [
        "loomcli.ir.fake:3 imports loomcli.passes",
        "loomcli.ir.fake:4 imports loomcli.emit",
        "loomcli.ir.fake:6 imports loomcli.text.printer",
    ]


@pytest.mark.parametrize("forbidden", ["loomcli.passes", "loomcli.emit", "llvmlite"])
def test_semantics_and_launch_stay_light(forbidden: str) -> None:
    """launch-eval's modules (semantics, launch, targets) reach no pass, emitter or LLVM, even lazily."""
    light = {"semantics", "launch", "targets"}
    bad = [i for i in all_imports() if layer(i.module) in light and i.target.startswith(forbidden)]
    assert not bad, "\n".join(map(str, bad))
