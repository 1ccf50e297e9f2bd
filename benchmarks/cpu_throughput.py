"""CPU training throughput: the notebook's offline run beside shared/tools/reference_recipe_cpu.py.

Both train LoRA r=32 on the real stories260K Llama with the real Alpaca rows, seq 512, batch 2 x 4,
lr 2e-4, the same steps, on the same rows (``-p long_rows truncate``: the reference truncates rows over
512 tokens, as TRL does; the notebook drops them by default), with bf16 autocast where the CPU computes
bf16 natively (TRL's default, which the reference gets; the package does the same with ``dtype=None``). Runs them alternately ``--repeats`` times (each a fresh process: the notebook
under papermill through scripts/run_offline.sh, the reference as a script), prints the medians side by
side and writes ``benchmarks/results/<YYYY-MM-DD>-cpu.json``.

* notebook: ``tokens_per_s`` of its run_summary.json (non-padding tokens fed / seconds in
  ``train.()`` less its evaluations every 20 steps; its checkpoint saves included);
* reference: its ``RESULT`` line (8 x 512 tokens per step over the steps after the second, no evaluation;
  the windows it feeds hold ~3,918 real tokens a step, so per real token it is ~4% slower than it reads).

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
from tinyllama_ft.train.summary import library_versions  # noqa: E402 (imports neither torch nor transformers)


def notebook_run(steps: int, out: Path, extra: list[str]) -> dict:
    """One offline notebook run (``extra``: more papermill arguments); its run_summary.json figures."""
    env = {**os.environ, "OUT": str(out)}
    subprocess.run(
        ["bash", str(REPO / "scripts" / "run_offline.sh"), "-p", "max_steps", str(steps), *extra],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    with open(out / "outputs" / "run_summary.json", encoding="utf-8") as f:
        s = json.load(f)
    return {
        "tokens_per_s": s["tokens_per_s"],
        "train_runtime_s": s["train_runtime_s"],
        "eval_in_train_s": s["eval_in_train_s"],
        "train_tokens": s["train_tokens"],
        "s_per_step": round((s["train_runtime_s"] - s["eval_in_train_s"]) / s["global_step"], 4),
        "eval_loss_before": s["eval_loss_before"],
        "eval_loss_after": s["eval_loss_after"],
    }


def reference_run(steps: int, shared: Path) -> dict:
    """One run of the reference script; its RESULT dict."""
    out = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "python"),
            str(shared / "tools" / "reference_recipe_cpu.py"),
            str(shared / "data"),
            str(steps),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    line = next(s for s in out.stdout.splitlines() if s.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def reference_tokens_per_step(steps: int, shared: Path) -> float:
    """Tokens the reference really feeds per step (reference_cpu_tokens.py rebuilds its dataloader)."""
    out = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "python"),
            str(HERE / "reference_cpu_tokens.py"),
            str(shared / "data"),
            str(steps),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    line = next(s for s in out.stdout.splitlines() if s.startswith("TOKENS "))
    return json.loads(line[len("TOKENS ") :])["tokens_per_step"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--notebook-args",
        default="-p long_rows truncate",
        help="more papermill arguments; the default trains on the reference's rows (it truncates "
        "rows over 512 tokens, the notebook drops them by default)",
    )
    ap.add_argument("--shared", type=Path, default=Path(os.environ.get("SHARED_DIR") or REPO.parent / "shared"))
    a = ap.parse_args()
    notebook, reference = [], []
    with tempfile.TemporaryDirectory(prefix="cpu-bench-") as tmp:
        for i in range(a.repeats):
            reference.append(reference_run(a.steps, a.shared))
            print(f"reference {i + 1}: {reference[-1]}", flush=True)
            notebook.append(notebook_run(a.steps, Path(tmp) / f"run{i}", a.notebook_args.split()))
            print(f"notebook {i + 1}: {notebook[-1]}", flush=True)
    nb = statistics.median(r["tokens_per_s"] for r in notebook)
    ref_nominal = statistics.median(r["tokens_per_s"] for r in reference)
    real_per_step = reference_tokens_per_step(a.steps, a.shared)
    ref = ref_nominal * real_per_step / (8 * 512)  # its count is 8 x 512 a step; this is what it feeds
    print(f"\n{a.steps} steps, median of {a.repeats}, {os.cpu_count()} CPUs\n")
    ref_step = statistics.median(r["train_wall_s"] / r["steps"] for r in reference)
    nb_step = statistics.median(r["s_per_step"] for r in notebook)
    print("| run | tokens/s | seconds per 1k tokens | seconds per step | eval loss after |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(
        f"| reference_recipe_cpu.py ({ref_nominal:,.0f} as it counts) | {ref:,.0f} | {1000 / ref:.3f} | {ref_step:.3f} | "
        f"{statistics.median(r['eval_loss_after'] for r in reference):.4f} |"
    )
    print(
        f"| notebook (run_offline.sh {a.notebook_args}) | {nb:,.0f} | {1000 / nb:.3f} | {nb_step:.3f} | "
        f"{statistics.median(r['eval_loss_after'] for r in notebook):.4f} |"
    )
    print(
        f"\nnotebook time per token / reference's: {ref / nb:.3f} (target <= 1.10); per optimizer step: "
        f"{nb_step / ref_step:.3f}. Tokens = tokens fed (the reference's {real_per_step:,.0f} a step, not the "
        f"8 x 512 its RESULT line counts)."
    )
    record = {
        "date": datetime.date.today().isoformat(),
        "cpus": os.cpu_count(),
        "steps": a.steps,
        "versions": {k: v for k, v in library_versions().items() if k in ("torch", "transformers", "trl", "peft")},
        "reference": reference,
        "notebook": notebook,
        "median_tokens_per_s": {"reference": round(ref, 1), "reference_as_it_counts": ref_nominal, "notebook": nb},
        "reference_tokens_per_step": real_per_step,
        "time_per_token_ratio": round(ref / nb, 3),
        "time_per_step_ratio": round(nb_step / ref_step, 3),
        "notebook_args": a.notebook_args,
    }
    path = HERE / "results" / f"{record['date']}-cpu.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
