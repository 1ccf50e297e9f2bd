"""Where a fresh process spends its imports: ``python -X importtime`` over the modules a notebook's cells import,
run twice in new processes (the first reads the files from disk, the second from the page cache), summed by
top-level package, with the slowest single modules (self time) beside, and for each heavy import (``--chains``) the
chain of modules that first imported it (read from the nesting ``-X importtime`` prints).

    python3 benchmarks/import_profile.py [--modules a,b,...] [--chains bitsandbytes,sympy,...] [--json out.json]
"""

from __future__ import annotations

import argparse
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
HEAVY = ("bitsandbytes", "sympy", "sklearn", "pandas", "torch._dynamo", "torchao", "peft", "trl", "datasets")


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


def profile(modules: list[str], chains: tuple[str, ...] = HEAVY) -> dict:
    """One new process importing ``modules`` under ``-X importtime``: wall seconds, per-package self seconds, the
    slowest modules (self seconds) and each of ``chains``' first importers (``first_importers``)."""
    code = "import " + ", ".join(modules)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"import failed:\n{proc.stderr[-3000:]}")
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
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", default=",".join(NOTEBOOK_MODULES))
    ap.add_argument("--chains", default=",".join(HEAVY), help="imports whose first importers to print")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    modules = args.modules.split(",")
    result = {}
    for run in ("first", "second"):
        result[run] = figures = profile(modules, tuple(c for c in args.chains.split(",") if c))
        print(f"== {run} process: {figures['wall_s']} s wall")
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
