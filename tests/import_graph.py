"""The import graph of a package's modules, read from its source (nothing is imported), and the
import circles inside each of its folders.

Every import counts: at the top of a module, inside a function, under ``if TYPE_CHECKING:``. A
function-level import still ties the two modules together (each needs the other to be whole),
and a type named both ways is a dependency both ways, so the issue that asked for no circles
(issue 29) counts them all. ``tests/unit/test_import_circles.py`` asserts on it; run as a script
(``python tests/import_graph.py [package folder]``) it prints the circles it finds.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Graph:
    """``modules``: dotted name -> its file (a package is named by its ``__init__.py``);
    ``folders``: dotted name -> the folder its file sits in, dotted (a package's ``__init__`` is in
    its own folder); ``edges``: dotted name -> the modules of the same tree it imports."""

    modules: dict[str, Path]
    folders: dict[str, str]
    edges: dict[str, set[str]]

    def all_folders(self) -> list[str]:
        """Every folder of the tree that holds a module, sorted (``cachedoctor``, ``cachedoctor.cli``, ...)."""
        return sorted(set(self.folders.values()))


def build(package_dir: Path) -> Graph:
    """The graph of the package at ``package_dir`` (its folder, named as Python imports it)."""
    root = package_dir.parent
    modules: dict[str, Path] = {}
    folders: dict[str, str] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
        folders[name] = ".".join(parts[:-1])
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    return Graph(modules, folders, edges)


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that the file at ``path`` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.level, node.module)
            for alias in node.names:
                # ``from pkg import mod`` imports the module ``pkg.mod``; ``from mod import name``, ``mod``
                target = next((t for t in (f"{base}.{alias.name}", base) if t in modules), None)
                if target is not None:
                    found.add(target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
    found.discard(name)
    return found


def _absolute(package: str, level: int, module: str | None) -> str:
    """The dotted name a (maybe relative) ``from`` import names."""
    if not level:
        return module or ""
    parts = package.split(".")
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def circles(graph: Graph, folder: str) -> list[list[str]]:
    """The import circles among the modules of ``folder`` (a dotted folder name such as
    ``cachedoctor.formats``): each strongly connected group of two modules or more, sorted, in
    sorted order. Imports of modules in other folders are not followed."""
    members = sorted(m for m, f in graph.folders.items() if f == folder)
    inside = set(members)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in members:  # Tarjan's algorithm, iterative: no recursion limit to meet
        if start in order:
            continue
        work = [(start, iter(sorted(graph.edges[start] & inside)))]
        order[start] = low[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, nexts = work[-1]
            step = next(nexts, None)
            if step is not None:
                if step not in order:
                    order[step] = low[step] = len(order)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.edges[step] & inside))))
                elif step in on_stack:
                    low[node] = min(low[node], order[step])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == order[node]:
                group: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def main(argv: list[str]) -> int:
    """Print each folder's circles (``folder: a, b, c``); exit 1 when there is one."""
    package_dir = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "cachedoctor"
    graph = build(package_dir.resolve())
    found = [(folder, group) for folder in graph.all_folders() for group in circles(graph, folder)]
    for folder, group in found:
        print(f"{folder}: {', '.join(group)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
