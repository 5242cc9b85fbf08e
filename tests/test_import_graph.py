"""The project's modules import one another without a circle, and no module of ``bridge/`` grows
past 500 lines.

The import graph is read from the sources with :mod:`ast` (imports inside functions too: a late
import still ties two modules together), over ``core/``, ``bridge/`` and ``crs_bridge/`` as they
are installed (``crs_bridge.core``, ``crs_bridge.bridge``, ``crs_bridge``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Installed package name -> its folder in the repository.
PACKAGES = {"crs_bridge.core": ROOT / "core", "crs_bridge.bridge": ROOT / "bridge", "crs_bridge": ROOT / "crs_bridge"}
MAX_BRIDGE_LINES = 500


def project_modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the project (packages as their
    ``__init__``)."""
    modules = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.glob("*.py")):
            modules[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return modules


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that ``module`` (the file ``path``) imports."""
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            # ``from package import name``: the submodule if there is one, else the package.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in modules and name != module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {module: imported(module, path, modules) for module, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_relative_and_late_imports():
    graph = import_graph()
    assert "crs_bridge.bridge.models" in graph["crs_bridge.bridge.registry"]  # from . import models
    assert "crs_bridge.core" in graph["crs_bridge.bridge.wire"]  # from ..core import ...
    assert "crs_bridge.bridge.openrpc" in graph["crs_bridge.bridge.stateless"]  # imported in a function


def test_no_module_imports_itself_through_others():
    assert circles(import_graph()) == []


def test_no_module_of_bridge_is_over_500_lines():
    sizes = {
        path.name: len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGES["crs_bridge.bridge"].glob("*.py")
    }
    assert {name: lines for name, lines in sizes.items() if lines > MAX_BRIDGE_LINES} == {}
