"""Training throughput on one GPU: the article's recipe, plain transformers + PEFT 4-bit, and this package.

Runs each configuration in a fresh Python process (its output streamed here), reads the ``RESULT``
line it prints (benchmarks/common.py), prints a side-by-side table and writes
``benchmarks/results/<YYYY-MM-DD>-train.json``. A configuration that fails shows as failed, with the
last lines of its stderr; the others still run.

    python3 benchmarks/train_throughput.py --model /tmp/tinyllama-shaped \\
        --data .device-data/alpaca/alpaca_cleaned_5k.jsonl [--steps 15] [--only article_recipe,package_default]

``package_ddp2`` is the package's default path on 2 GPUs (``accelerate launch`` with the shipped
``tinyllama_ft/recipes/accelerate/multi_gpu.yaml``, ``--num_processes 2``) at the same global batch: its
tokens/s count both GPUs' tokens, its peak GiB is the larger of the two, ``peak_gib_per_gpu`` lists both.
Compare it with ``package_default`` (``--only package_default,package_ddp2``); ``--dry-run`` prints the
commands and each configuration's plan without training (works on a CPU). ``package_default`` trains on the response
+ EOS tokens (the package's default loss), the recipe on every token: ``package_whole_text`` (``_t4``), run only when
named in ``--only``, is the package with the article's loss, whose first loss is the recipe's to within kernels.
"""

import argparse
import os
import tempfile
from pathlib import Path

from runner import chosen_names, run_configuration, write_results

HERE = Path(__file__).resolve().parent
#: accelerate's launch configuration shipped with the package (one process per GPU, DDP).
MULTI_GPU_YAML = HERE.parent / "tinyllama_ft" / "recipes" / "accelerate" / "multi_gpu.yaml"
#: name -> processes, for the configurations launched on several GPUs.
PROCESSES = {"package_ddp2": 2}
#: name -> (script, extra arguments), in the order they run. A name ending in "_t4" runs the T4 stand-in
#: (fp16, 15 GiB cap) and is compared with the recipe's stand-in run; every other one with the recipe's.
CONFIGURATIONS = {
    "article_recipe": ("article_recipe.py", []),
    "hf_peft_4bit": ("hf_peft_4bit.py", []),
    "package_default": ("package_default.py", []),
    "article_recipe_t4": ("article_recipe.py", ["--t4"]),
    "package_default_t4": ("package_default.py", ["--t4"]),
    "package_ddp2": ("package_default.py", []),
    "package_whole_text": ("package_default.py", ["--whole-text-loss"]),
    "package_whole_text_t4": ("package_default.py", ["--whole-text-loss", "--t4"]),
}
#: Run only when named in --only: the package with the article's whole-text loss (completion_only_loss=False), whose
#: first loss is the recipe's quantity (package_default's counts the response + EOS tokens only).
LOSS_CHECKS = ("package_whole_text", "package_whole_text_t4")


def launcher(name: str) -> list[str]:
    """Interpreter arguments before the script: accelerate's launcher for the multi-GPU configurations."""
    if name not in PROCESSES:
        return []
    return [
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(MULTI_GPU_YAML),
        "--num_processes",
        str(PROCESSES[name]),
    ]


def recipe_of(name: str) -> str:
    """The configuration ``name`` is compared with: the article's recipe on the same (stand-in) GPU."""
    return "article_recipe_t4" if name.endswith("_t4") else "article_recipe"


PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "unsloth", "bitsandbytes")


def table(rows: list[dict]) -> str:
    """Markdown table: name | batch | tokens/s | peak GiB | loss first (and its difference from the recipe's)
    | loss last | ratio (tokens/s / recipe's)."""

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = [
        "| name | batch | tokens/s | peak GiB | loss first | vs recipe | loss last | ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['name']} | | failed | | | | | |")
        else:
            delta = r.get("loss_first_vs_recipe")
            gpus = f" x {r['processes']} GPUs" if r.get("processes", 1) > 1 else ""
            cells = [
                f"{r.get('bs')} x {r.get('ga')}{gpus}",
                num(r["tokens_per_s"], ",.0f"),
                num(r["peak_gib"], ".2f"),
                num(r["loss_first"], ".4f"),
                "-" if delta is None else f"{delta:+.2%}",
                num(r["loss_last"], ".4f"),
                num(r["ratio_to_recipe"], ".3f"),
            ]
            lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    shared = Path(os.environ.get("SHARED_DIR") or HERE.parents[1] / "shared")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model",
        default="/tmp/tinyllama-shaped",
        help="TinyLlama-shaped model folder (benchmarks/build_tinyllama_shaped.py writes it)",
    )
    ap.add_argument(
        "--shared", type=Path, default=shared, help="the shared/ folder (default: $SHARED_DIR or ../shared)"
    )
    ap.add_argument("--data", help="Alpaca rows, .jsonl (default: the .jsonl under SHARED/data/alpaca)")
    ap.add_argument("--steps", type=int, default=15, help="optimizer steps per configuration (the first 3 untimed)")
    ap.add_argument("--seq", type=int, default=4096, help="tokens per packed sequence")
    ap.add_argument("--only", help=f"comma-separated names among {', '.join(CONFIGURATIONS)}")
    ap.add_argument("--dry-run", action="store_true", help="print each command and its plan; train nothing")
    a = ap.parse_args()

    names = chosen_names(ap, a.only, CONFIGURATIONS, [n for n in CONFIGURATIONS if n not in LOSS_CHECKS])
    data = a.data or next(iter(sorted((a.shared / "data" / "alpaca").glob("*.jsonl"))), None)
    if data is None or not Path(data).is_file():
        ap.error(f"no data file: {data or a.shared / 'data/alpaca/*.jsonl'} (pass --data)")
    if not (Path(a.model) / "config.json").is_file():
        ap.error(
            f"no model at {a.model}: build it with python3 benchmarks/build_tinyllama_shaped.py "
            f"--src SHARED/data/tinyllama --out {a.model}"
        )

    argv = [
        "--model",
        str(Path(a.model).resolve()),
        "--data",
        str(Path(data).resolve()),
        "--steps",
        str(a.steps),
        "--seq",
        str(a.seq),
    ]
    workdir = Path(tempfile.gettempdir()) / "tinyllama-ft-bench"  # Unsloth's compile cache lands here, not in the repo
    workdir.mkdir(exist_ok=True)
    if a.dry_run:
        for n in names:
            print(dry_run(n, CONFIGURATIONS[n][0], argv + CONFIGURATIONS[n][1]))
        return
    rows = [
        run_configuration(n, CONFIGURATIONS[n][0], argv + CONFIGURATIONS[n][1], str(workdir), launcher=launcher(n))
        for n in names
    ]

    done = {r["name"]: r for r in rows if "failed" not in r}
    for r in rows:
        recipe = done.get(recipe_of(r["name"]))
        ok = recipe is not None and "failed" not in r
        r["ratio_to_recipe"] = round(r["tokens_per_s"] / recipe["tokens_per_s"], 3) if ok else None
        r["loss_first_vs_recipe"] = (
            round(r["loss_first"] / recipe["loss_first"] - 1, 5)
            if ok and r.get("loss_first") and recipe.get("loss_first")
            else None
        )
    first_timed = min(3, a.steps - 2) + 2  # common.WARMUP: the window opens at the end of step WARMUP + 1
    print(
        f"\n{a.steps} steps, seq {a.seq}: tokens/s = non-padding tokens over steps {first_timed}..{a.steps}; "
        "peak GiB = max allocated\n"
    )
    print(table(rows))
    for r in rows:
        if "failed" in r:
            print(f"\n{r['name']} failed, {r['failed']}")

    keys = (
        "name",
        "tokens_per_s",
        "peak_gib",
        "loss_first",
        "loss_last",
        "ratio_to_recipe",
        "loss_first_vs_recipe",
        "bs",
        "ga",
        "processes",
        "peak_gib_per_gpu",
    )
    write_results(
        "train",
        PACKAGES,
        steps=a.steps,
        seq=a.seq,
        configurations=[{k: r.get(k) for k in keys} | ({"failed": r["failed"]} if "failed" in r else {}) for r in rows],
    )


def dry_run(name: str, script: str, argv: list[str]) -> str:
    """The command a configuration runs and, for the package's scripts, the plan each process would make on an
    H200 (``plan_run`` with the launch's world size): checks the multi-GPU configuration without GPUs."""
    import shlex
    import sys

    command = shlex.join([sys.executable, *launcher(name), str(HERE / script), *argv])
    if not script.startswith("package_"):
        return f"{name}: {command}"
    sys.path.insert(0, str(HERE.parent))
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.train.plan import plan_run

    seq = int(argv[argv.index("--seq") + 1])
    cfg = FinetuneConfig(model_name=argv[argv.index("--model") + 1], max_seq_length=seq, report_to="none")
    h200 = Hardware(cuda=True, capability=(9, 0), gpu_name="NVIDIA H200", total_memory_gib=139.8)
    plan = plan_run(cfg, h200, budget_gib=139.0, world_size=PROCESSES.get(name, 1))
    return f"{name}: {command}\n{plan.summary()}"


if __name__ == "__main__":
    main()
