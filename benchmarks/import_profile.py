"""Where a fresh process spends its imports: ``python -X importtime`` over the modules a notebook's cells import,
run twice in new processes (the first reads the files from disk, the second from the page cache), summed by
top-level package, with the slowest single modules (self time) beside.

    python3 benchmarks/import_profile.py [--modules a,b,...] [--json out.json]
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
    "tinyllama_ft.train.sft_trainer",
    "tinyllama_ft.evaluate.held_out",
    "tinyllama_ft.train.loop",
    "tinyllama_ft.evaluate.side_by_side",
    "tinyllama_ft.infer.generation",
)


def profile(modules: list[str]) -> dict:
    """One new process importing ``modules`` under ``-X importtime``: wall seconds, per-package self seconds, and
    the slowest modules (self seconds)."""
    code = "import " + ", ".join(modules)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"import failed:\n{proc.stderr[-3000:]}")
    per_package: collections.Counter = collections.Counter()
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = (part.strip() for part in line[len("import time:") :].split("|"))
        per_package[name.strip().split(".")[0]] += int(self_us) / 1e6
        rows.append((int(self_us) / 1e6, int(cum_us) / 1e6, name.strip()))
    rows.sort(reverse=True)
    return {
        "wall_s": round(wall, 2),
        "packages_s": {k: round(v, 2) for k, v in per_package.most_common(15)},
        "slowest_modules": [{"module": n, "self_s": round(s, 3), "cumulative_s": round(c, 3)} for s, c, n in rows[:20]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", default=",".join(NOTEBOOK_MODULES))
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    modules = args.modules.split(",")
    result = {}
    for run in ("first", "second"):
        result[run] = figures = profile(modules)
        print(f"== {run} process: {figures['wall_s']} s wall")
        print("   by package (self s): " + ", ".join(f"{k} {v}" for k, v in figures["packages_s"].items()))
        for row in figures["slowest_modules"][:12]:
            print(f"   {row['self_s']:7.3f} self  {row['cumulative_s']:7.3f} cum  {row['module']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
