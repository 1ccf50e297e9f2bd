"""Print the package's internal import graph (module -> the tinyllama_ft modules it imports, at the top or inside
functions) and any cycle in it; exit status 1 when there is one.

    python scripts/import_graph.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tinyllama_ft"


def import_graph() -> dict[str, set[str]]:
    """``{module: {imported package modules}}`` from every ``from .x import`` / ``import tinyllama_ft.x``."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:
                    edges.add(node.module.split(".")[0])
                elif node.level == 1:
                    edges |= {a.name for a in node.names if a.name in modules}
                elif node.module and node.module.startswith("tinyllama_ft."):
                    edges.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                edges |= {a.name.split(".")[1] for a in node.names if a.name.startswith("tinyllama_ft.")}
        graph[path.stem] = edges & modules - {path.stem}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle found by depth-first search (each reported once, from its smallest module)."""
    found = []

    def walk(start, node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                found.append(path + [start])
            elif nxt not in path and nxt > start:
                walk(start, nxt, path + [nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def main() -> int:
    graph = import_graph()
    for module, edges in sorted(graph.items()):
        print(f"{module:12s} -> {', '.join(sorted(edges)) or '-'}")
    found = cycles(graph)
    print("cycles:", found or "none")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
