"""CPU training throughput: the notebook's offline run beside shared/tools/reference_recipe_cpu.py.

Both train LoRA r=32 on the real stories260K Llama with the real Alpaca rows, seq 512, batch 2 x 4,
lr 2e-4, the same steps. Runs them alternately ``--repeats`` times (each a fresh process: the notebook
under papermill through scripts/run_offline.sh, the reference as a script), prints the medians side by
side and writes ``benchmarks/results/<YYYY-MM-DD>-cpu.json``.

* notebook: ``tokens_per_s`` of its run_summary.json (non-padding tokens fed / seconds in
  ``trainer.train()``, its evaluations and checkpoints every 20 steps included);
* reference: its ``RESULT`` line (8 x 512 tokens per step over the steps after the second, no evaluation).

    python3 benchmarks/cpu_throughput.py [--steps 60] [--repeats 3]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
from tinyllama_ft.summary import library_versions  # noqa: E402 (imports neither torch nor transformers)


def notebook_run(steps: int, out: Path) -> dict:
    """One offline notebook run; its run_summary.json figures."""
    env = {**os.environ, "OUT": str(out)}
    subprocess.run(["bash", str(REPO / "scripts" / "run_offline.sh"), "-p", "max_steps", str(steps)], check=True,
                   env=env, stdout=subprocess.DEVNULL)
    with open(out / "outputs" / "run_summary.json", encoding="utf-8") as f:
        s = json.load(f)
    return {"tokens_per_s": s["tokens_per_s"], "train_runtime_s": s["train_runtime_s"],
            "eval_loss_before": s["eval_loss_before"], "eval_loss_after": s["eval_loss_after"]}


def reference_run(steps: int, shared: Path) -> dict:
    """One run of the reference script; its RESULT dict."""
    out = subprocess.run([str(REPO / ".venv" / "bin" / "python"), str(shared / "tools" / "reference_recipe_cpu.py"),
                          str(shared / "data"), str(steps)], check=True, capture_output=True, text=True,
                         cwd=tempfile.gettempdir())
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shared", type=Path, default=Path(os.environ.get("SHARED_DIR") or REPO.parent / "shared"))
    a = ap.parse_args()
    notebook, reference = [], []
    with tempfile.TemporaryDirectory(prefix="cpu-bench-") as tmp:
        for i in range(a.repeats):
            reference.append(reference_run(a.steps, a.shared))
            print(f"reference {i + 1}: {reference[-1]}", flush=True)
            notebook.append(notebook_run(a.steps, Path(tmp) / f"run{i}"))
            print(f"notebook {i + 1}: {notebook[-1]}", flush=True)
    nb = statistics.median(r["tokens_per_s"] for r in notebook)
    ref = statistics.median(r["tokens_per_s"] for r in reference)
    print(f"\n{a.steps} steps, median of {a.repeats}, {os.cpu_count()} CPUs\n")
    print("| run | tokens/s | seconds per 1k tokens | eval loss after |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| reference_recipe_cpu.py | {ref:,.0f} | {1000 / ref:.3f} | "
          f"{statistics.median(r['eval_loss_after'] for r in reference):.4f} |")
    print(f"| notebook (run_offline.sh) | {nb:,.0f} | {1000 / nb:.3f} | "
          f"{statistics.median(r['eval_loss_after'] for r in notebook):.4f} |")
    print(f"\nnotebook time per token / reference's: {ref / nb:.3f} (target <= 1.10)")
    record = {"date": datetime.date.today().isoformat(), "cpus": os.cpu_count(), "steps": a.steps,
              "versions": {k: v for k, v in library_versions().items() if k in ("torch", "transformers", "trl", "peft")},
              "reference": reference, "notebook": notebook, "median_tokens_per_s": {"reference": ref, "notebook": nb},
              "time_per_token_ratio": round(ref / nb, 3)}
    path = HERE / "results" / f"{record['date']}-cpu.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
