"""Print the package's internal import graph (module -> the tinyllama_ft modules it imports, at the top or inside
functions), every import that goes up the package's layer order (exit status 1 when there is one) and every import
cycle (``tests/test_package.py`` holds the known ones: issue 41).

    python scripts/import_graph.py

The layers, lowest first, are ``LAYERS`` (``tinyllama_ft/__init__.py`` says what each holds): a module may
import from its own layer and the ones below it, never from one above. The modules at the package's top
(``pipeline``, ``formats``, ``cli``) form the last layer.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tinyllama_ft"
#: The subpackages from the bottom up; "top" = the modules directly in tinyllama_ft/.
LAYERS = ("machine", "config", "models", "data", "infer", "evaluate", "train", "export", "top")


def module_names() -> dict[str, Path]:
    """``{dotted name below tinyllama_ft: file}`` for every module (``__init__`` files as their package)."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts) or "__init__"] = path
    return names


def _resolve(me: str, is_package: bool, level: int, module: str | None) -> str:
    base = me.split(".") if me != "__init__" else []
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else []))


def import_graph() -> dict[str, set[str]]:
    """``{module: {imported package modules}}`` from every relative import and ``tinyllama_ft.x`` import."""
    names = module_names()
    graph: dict[str, set[str]] = {}
    for me, path in names.items():
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    target = _resolve(me, is_package, node.level, node.module)
                elif node.module and node.module.startswith("tinyllama_ft."):
                    target = node.module.removeprefix("tinyllama_ft.")
                else:
                    continue
                targets = [f"{target}.{a.name}".strip(".") for a in node.names] + [target]
            elif isinstance(node, ast.Import):
                targets = [
                    a.name.removeprefix("tinyllama_ft.") for a in node.names if a.name.startswith("tinyllama_ft.")
                ]
            for target in targets:
                if target in names:
                    edges.add(target)
                    break
        graph[me] = edges - {me}
    return graph


def layer_of(module: str) -> str:
    """The layer a dotted module name belongs to (its first part when that is a subpackage, else "top")."""
    first = module.split(".")[0]
    return first if first in LAYERS else "top"


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(module, imported)`` pairs where the imported module sits in a higher layer than the importer."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    return sorted((m, t) for m, edges in graph.items() for t in edges if rank[layer_of(t)] > rank[layer_of(m)])


def import_cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The modules that import each other, directly or through others: each set of two or more modules every one of
    which reaches every other (a strongly connected component), as a sorted tuple; the list sorted."""
    reach = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for target in graph.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        reach[start] = seen
    cycles = {tuple(sorted({m} | {n for n in reach[m] if m in reach.get(n, ())})) for m in graph}
    return sorted(c for c in cycles if len(c) > 1)


def main() -> int:
    graph = import_graph()
    for module, edges in sorted(graph.items(), key=lambda kv: (LAYERS.index(layer_of(kv[0])), kv[0])):
        print(f"{module:28s} -> {', '.join(sorted(edges)) or '-'}")
    up = upward_imports(graph)
    print("imports up the layer order", " < ".join(LAYERS) + ":", up or "none")
    print("import cycles:", [" <-> ".join(c) for c in import_cycles(graph)] or "none")
    return 1 if up else 0


if __name__ == "__main__":
    sys.exit(main())
