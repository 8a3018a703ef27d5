"""No import cycle between edgekd's files, counting imports inside functions.

The import-linter contract (`.ci/imports`) checks the layers; this test checks the
finer grain: no two modules, even in one layer, import each other through any path.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Where each installed package's source lives (exporters/ and devices/ install under
# edgekd, see pyproject.toml).
PACKAGES = {"edgekd": "edgekd", "edgekd.exporters": "exporters", "edgekd.devices": "devices"}


def modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # every scope
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_import_graph_has_no_cycle_counting_function_level_imports():
    assert cycles(import_graph()) == []


def test_cycle_finder_finds_a_cycle_made_by_an_import_inside_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_import_graph_sees_imports_inside_functions():
    # quickstart imports the recipe runner only inside run_quickstart.
    assert "edgekd.recipe" in import_graph()["edgekd.quickstart"]


def test_nothing_but_the_entry_point_imports_the_cli():
    importers = {m for m, targets in import_graph().items() if "edgekd.cli" in targets}
    assert importers <= {"edgekd.__main__"}
