#!/usr/bin/env python3
"""Figures of the code's shape, for before/after notes of a redesign.

    python3 bench/code_metrics.py [--json]

* op-name literals: string constants that spell a declared op, outside
  `ir/ops.py`; "in tables" are those that key a registration (an argument
  of a call or decorator, a key of the entries an `OpTable` is built from,
  or a subscript store), the rest stand in code;
* direct `.attrs` reads outside `loomcli/ir/`;
* import cycles: strongly connected groups of loomcli modules (imports at
  any depth), without and with the type-only ones;
* function-level imports;
* the longest functions;
* `Any` names and `type: ignore` comments;
* lines of `emit/llvm`.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "loomcli"
sys.path.insert(0, str(ROOT))


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def type_only_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return ids


def imported(module: str, path: Path, node: ast.AST, known: dict[str, Path]) -> list[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")[:len(package.split(".")) - node.level + 1]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        names = [f"{origin}.{a.name}" for a in node.names] + [origin]
    else:
        return []
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.append(name)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found, key=len, reverse=True)


def _imports_in_functions(node: ast.AST, inside: bool = False) -> int:
    """Import statements with a function around them, each counted once."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return int(inside)
    inside = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    return sum(_imports_in_functions(child, inside) for child in ast.iter_child_nodes(node))


def measure() -> dict[str, object]:
    from loomcli.ir.ops import OPS

    known = modules()
    graph: dict[str, set[str]] = {}
    typed_graph: dict[str, set[str]] = {}   # type-only imports too
    literals_code: Counter[str] = Counter()
    literals_tables = 0
    attrs_reads: Counter[str] = Counter()
    lengths: list[tuple[int, str]] = []
    any_names = 0
    ignores = 0
    for module, path in known.items():
        text = path.read_text()
        tree = ast.parse(text, str(path))
        ignores += text.count("type: ignore")
        skip = type_only_nodes(tree)
        rel = path.relative_to(ROOT).as_posix()
        keys: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and any(isinstance(p, ast.expr) for p in [node.func]):
                keys.update(id(a) for a in node.args if isinstance(a, ast.Constant))
                if ast.unparse(node.func).endswith("OpTable"):  # OpTable("what", {"op.name": ...})
                    keys.update(id(k) for a in node.args if isinstance(a, ast.Dict) for k in a.keys)
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                keys.add(id(node.slice))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.lineno} {node.name}"))
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets = imported(module, path, node, known)
                typed_graph.setdefault(module, set()).update(targets)
                if id(node) not in skip:
                    graph.setdefault(module, set()).update(targets)
            elif isinstance(node, ast.Attribute) and node.attr == "attrs" and not rel.startswith("loomcli/ir/"):
                attrs_reads[rel] += 1
            elif isinstance(node, ast.Name) and node.id == "Any":
                any_names += 1
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in OPS \
                    and rel != "loomcli/ir/ops.py":
                if id(node) in keys:
                    literals_tables += 1
                else:
                    literals_code[rel] += 1
    function_imports = sum(_imports_in_functions(ast.parse(p.read_text())) for p in known.values())
    llvm_lines = sum(len(p.read_text().splitlines()) for p in (PACKAGE / "emit" / "llvm").rglob("*.py"))
    groups = cycles(graph)
    typed_groups = cycles(typed_graph)
    lengths.sort(reverse=True)
    return {
        "op_name_literals_in_code": sum(literals_code.values()),
        "op_name_literals_in_code_files": len(literals_code),
        "op_name_literals_keying_tables": literals_tables,
        "op_name_literals_by_file": dict(literals_code.most_common()),
        "attrs_reads_outside_ir": sum(attrs_reads.values()),
        "attrs_reads_by_file": dict(attrs_reads.most_common()),
        "import_cycles": len(groups),
        "largest_import_cycle": groups[0] if groups else [],
        "import_cycles_with_type_only": len(typed_groups),
        "largest_import_cycle_with_type_only": typed_groups[0] if typed_groups else [],
        "function_level_imports": function_imports,
        "longest_functions": [f"{n} lines {name}" for n, name in lengths[:10]],
        "median_function_lines": lengths[len(lengths) // 2][0],
        "any_names": any_names,
        "type_ignores": ignores,
        "emit_llvm_lines": llvm_lines,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = measure()
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    for key, value in figures.items():
        if isinstance(value, dict):
            continue
        if isinstance(value, list):
            print(f"{key}:")
            for item in value:
                print(f"  {item}")
        else:
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
