"""Where a fresh process spends its imports: ``python -X importtime`` over the modules a notebook's cells import,
run twice in new processes (the first reads the files from disk, the second from the page cache), summed by
top-level package, with the slowest single modules (self time) beside, and for each heavy import (``--chains``) the
chain of modules that first imported it (read from the nesting ``-X importtime`` prints). ``--notebook`` runs a
notebook's code cells instead (papermill's way: ``-p`` values after the parameters cell) up to the first cell holding
``--until``, and adds each cell's seconds and the packages it imported first: what the calls import, not the modules.

    python3 benchmarks/import_profile.py [--modules a,b,...] [--chains bitsandbytes,sympy,...] [--json out.json]
    python3 benchmarks/import_profile.py --notebook notebooks/finetune_chat.py --until 'load_model(' -p max_steps 2
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import subprocess
import sys
import time

#: What the notebooks' cells import, in the order they first do (the benchmark's probe cell imports the same).
NOTEBOOK_MODULES = (
    "tinyllama_ft.config.sources",
    "tinyllama_ft.train.plan",
    "tinyllama_ft.models.loading",
    "tinyllama_ft.models.lora",
    "tinyllama_ft.data.instructions",
    "tinyllama_ft.train.trainers",
    "tinyllama_ft.evaluate.held_out",
    "tinyllama_ft.train.loop",
    "tinyllama_ft.evaluate.side_by_side",
    "tinyllama_ft.infer.generation",
)
#: Imports a notebook may not need (issue 44), whose first importer ``--chains`` traces.
HEAVY = (
    "bitsandbytes",
    "sympy",
    "sklearn",
    "pandas",
    "scipy",
    "torch._dynamo",
    "torchao",
    "kernels",
    "wandb",
    "peft",
    "trl",
    "datasets",
)
#: The child of ``--notebook``: runs the code cells in order (``-p`` values after the parameters cell) to the first
#: holding UNTIL, printing one JSON line a cell (seconds, the top-level packages it imported first) on stdout.
CELLS = """
import json, sys, time, jupytext
path, until, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
namespace, seen = {"__name__": "__main__"}, {m.split(".")[0] for m in sys.modules}
for i, cell in enumerate(c for c in jupytext.read(path).cells if c.cell_type == "code"):
    start = time.perf_counter()
    exec(compile(cell.source, f"<cell {i}>", "exec"), namespace)
    if "parameters" in cell.metadata.get("tags", []):
        namespace.update(params)
    new = sorted({m.split(".")[0] for m in sys.modules} - seen)
    seen.update(new)
    line = next((s for s in cell.source.splitlines() if s and not s.startswith(("#", "from ", "import "))), "")
    print(json.dumps({"cell": i, "s": round(time.perf_counter() - start, 2), "first_line": line[:60],
                      "new_packages": [m for m in new if not m.startswith("_")]}), flush=True)
    if until in cell.source:
        break
"""


def first_importers(entries: list[tuple[int, str, float]], target: str) -> list[str]:
    """``target`` and the modules that imported it, innermost first (``"name (cumulative s)"``), from ``-X importtime``
    rows ``(depth, name, cumulative s)`` in printed order (a module's line follows its imports' lines, one level
    deeper); [] when it was not imported."""
    parent: dict[int, int] = {}
    pending: list[int] = []
    for i, (depth, _, _) in enumerate(entries):
        while pending and entries[pending[-1]][0] > depth:
            j = pending.pop()
            if entries[j][0] == depth + 1:
                parent[j] = i
        pending.append(i)
    hit = next((i for i, e in enumerate(entries) if e[1] == target), None)
    chain = []
    while hit is not None:
        chain.append(f"{entries[hit][1]} ({entries[hit][2]:.2f} s)")
        hit = parent.get(hit)
    return chain


def profile(modules: list[str], chains: tuple[str, ...] = HEAVY, cells: list[str] | None = None) -> dict:
    """One new process importing ``modules`` (or running ``CELLS`` with ``cells``, its arguments) under ``-X
    importtime``: wall seconds, per-package self seconds, the slowest modules (self seconds), each of ``chains``'
    first importers (``first_importers``) and with ``cells`` each cell's line (``CELLS``)."""
    code = "import " + ", ".join(modules)
    start = time.perf_counter()
    argv = ["-c", CELLS, *cells] if cells else ["-c", code]
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"run failed:\n{proc.stderr[-3000:]}")
    per_package: collections.Counter = collections.Counter()
    rows, entries = [], []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = line[len("import time:") :].split("|")
        depth = (len(name) - len(name.lstrip())) // 2  # " name", then two more spaces a level
        name = name.strip()
        per_package[name.split(".")[0]] += int(self_us) / 1e6
        rows.append((int(self_us) / 1e6, int(cum_us) / 1e6, name))
        entries.append((depth, name, int(cum_us) / 1e6))
    rows.sort(reverse=True)
    return {
        "wall_s": round(wall, 2),
        "packages_s": {k: round(v, 2) for k, v in per_package.most_common(15)},
        "slowest_modules": [{"module": n, "self_s": round(s, 3), "cumulative_s": round(c, 3)} for s, c, n in rows[:20]],
        "first_importers": {t: first_importers(entries, t) for t in chains},
        "cells": [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"cell"')],
    }


def literal(value: str):
    """A ``-p`` value as papermill reads one: a Python literal where it parses, else the string."""
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", default=",".join(NOTEBOOK_MODULES))
    ap.add_argument("--chains", default=",".join(HEAVY), help="imports whose first importers to print")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--notebook", help="a notebook (.py or .ipynb) whose code cells to run instead of --modules")
    ap.add_argument("--until", default="load_model(", help="--notebook: stop after the first cell holding this")
    ap.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"), help="--notebook: a value")
    args = ap.parse_args()
    modules = args.modules.split(",")
    cells = [args.notebook, args.until, json.dumps({k: literal(v) for k, v in args.p})] if args.notebook else None
    result = {}
    for run in ("first", "second"):
        result[run] = figures = profile(modules, tuple(c for c in args.chains.split(",") if c), cells)
        print(f"== {run} process: {figures['wall_s']} s wall")
        for cell in figures["cells"]:
            print(
                f"   cell {cell['cell']:2d} {cell['s']:7.2f} s  {cell['first_line']!r}: "
                + " ".join(cell["new_packages"])
            )
        print("   by package (self s): " + ", ".join(f"{k} {v}" for k, v in figures["packages_s"].items()))
        for row in figures["slowest_modules"][:12]:
            print(f"   {row['self_s']:7.3f} self  {row['cumulative_s']:7.3f} cum  {row['module']}")
    for target, chain in result["second"]["first_importers"].items():
        print(f"   {target}: " + (" <- ".join(chain) if chain else "not imported"))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
