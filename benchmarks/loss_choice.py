"""Which loss should the demo train with: the whole text (the article's) or the response + EOS only?

On SmolLM2-135M-Instruct (``demo_model.demo_model_path()``) and the demo rows (``data/alpaca_demo``: rows
0-899 train, 900-999 held out), the same LoRA run twice from the same base and seed, differing only in
``completion_only_loss`` (TRL's name): False = loss on every token (the article's), True = loss on the
response tokens and the EOS after them. Base and tuned are prompted with the same Alpaca template.
Reported for base, tuned-full and tuned-completion (``tinyllama_ft.evaluate.held_out``):

* held-out response loss (nats/token over response + EOS) and full-text loss;
* mean EOS probability at the end of held-out responses, teacher forced (the main check);
* stopping count: of 20 held-out instructions with short reference answers (<= 64 tokens), how many greedy
  answers end with EOS within 128 new tokens.

CPU, threads fixed (``--threads``: OMP and torch), no W&B. Prints a table and writes
``benchmarks/results/<date>-loss-choice.json``. Usage (repository root)::

    python benchmarks/loss_choice.py [--steps 30] [--batch 4] [--max-seq-length 256] [--lr 2e-4] [--threads 2]

or the three side by side, one thread each, then one table (how the 2026-12-01 figures were made, on 2
cores shared with other jobs: ~12 min)::

    for v in base tuned_full_text tuned_completion_only; do
      python benchmarks/loss_choice.py --steps 20 --held-out 60 --threads 1 --variants $v --out /tmp/$v.json &
    done; wait
    python benchmarks/loss_choice.py --combine /tmp/base.json /tmp/tuned_full_text.json /tmp/tuned_completion_only.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO_ROWS = REPO / "data" / "alpaca_demo" / "alpaca_demo.jsonl"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=4, help="sequences per optimizer step (no accumulation)")
    p.add_argument("--max-seq-length", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--train-rows", type=int, default=900)
    p.add_argument("--stop-rows", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--rows", default=str(DEMO_ROWS))
    p.add_argument("--held-out", type=int, default=100, help="held-out rows scored (after the train rows)")
    p.add_argument(
        "--variants",
        default="base,tuned_full_text,tuned_completion_only",
        help="which to run here (one per process runs them side by side on separate cores)",
    )
    p.add_argument("--combine", nargs="+", default=None, help="merge these JSON files into one table and --out")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/<date>-loss-choice.json)")
    return p.parse_args(argv)


def measure(model, tokenizer, held, short, args) -> dict:
    from tinyllama_ft.evaluate.held_out import held_out_scores, stopping_count
    from tinyllama_ft.data.formats import AlpacaFormat

    t = time.perf_counter()
    scores = held_out_scores(
        model, tokenizer, held, batch_size=4, max_seq_length=args.max_seq_length, data_format=AlpacaFormat()
    )
    stop = stopping_count(
        model, tokenizer, short, max_new_tokens=args.max_new_tokens, batch_size=4, data_format=AlpacaFormat()
    )
    return {
        **scores.as_dict(),
        "stopped": stop.stopped,
        "stop_total": stop.total,
        "answers": stop.answers,
        "ended": stop.ended,
        "new_tokens": stop.new_tokens,
        "eval_s": round(time.perf_counter() - t, 1),
    }


def train(folder, rows, completion_only_loss: bool, hardware, args) -> tuple:
    import datasets

    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.trainers import build_trainer

    out = tempfile.mkdtemp(prefix="loss_choice_")
    cfg = FinetuneConfig(
        model_name=folder,
        report_to="none",
        output_dir=out,
        dataset_num_proc=None,
        max_seq_length=args.max_seq_length,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=1,
        max_steps=args.steps,
        learning_rate=args.lr,
        gradient_checkpointing=False,
        save_steps=10**6,
        logging_steps=5,
        load_in_4bit=False,
        backend="transformers",
        completion_only_loss=completion_only_loss,
    )
    plan = plan_run(cfg, hardware)
    model, tokenizer = load_model(
        folder,
        max_seq_length=args.max_seq_length,
        dtype=plan.dtype,
        load_in_4bit=False,
        backend="transformers",
        hardware=hardware,
    )
    model = add_lora(model, gradient_checkpointing=False, seed=cfg.seed)
    dataset = datasets.Dataset.from_list(rows)
    trainer = build_trainer(model=model, tokenizer=tokenizer, train_dataset=dataset, cfg=cfg, plan=plan, progress=False)
    t, cpu = time.perf_counter(), time.process_time()
    result = trainer.train()
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return (
        model,
        tokenizer,
        {
            "train_s": round(seconds, 1),
            "s_per_step": round(seconds / args.steps, 2),
            "cpu_s_per_step": round(cpu / args.steps, 2),  # all threads; load-independent
            "train_loss": round(result.training_loss, 4),
            "logged_losses": losses,
            "tokens_seen": int(getattr(trainer.state, "num_input_tokens_seen", 0) or 0),
        },
    )


def combine(paths, args) -> dict:
    """One record from the JSON files of side-by-side processes (their ``results`` merged, walls kept)."""
    records = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    record = {
        **records[0],
        "results": {},
        "wall_s": max(r["wall_s"] for r in records),
        "parts": {str(p): r["args"]["variants"] for p, r in zip(paths, records)},
    }
    for r in records:
        record["results"].update(r["results"])
    order = ["base", "tuned_full_text", "tuned_completion_only"]
    record["results"] = {k: record["results"][k] for k in order if k in record["results"]}
    return write(record, args)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.combine:
        return combine(args.combine, args)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, str(REPO))
    import torch

    torch.set_num_threads(args.threads)
    from tinyllama_ft.models.demo_model import demo_model_path
    from tinyllama_ft.evaluate.held_out import short_answer_rows
    from tinyllama_ft.data.formats import AlpacaFormat
    from tinyllama_ft.machine.hardware import detect_hardware
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.train.summary import library_versions

    with open(args.rows, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    train_rows, held = rows[: args.train_rows], rows[args.train_rows :][: args.held_out]
    variants = args.variants.split(",")
    hardware = detect_hardware()
    start = time.perf_counter()
    folder = demo_model_path()
    model, tokenizer = load_model(
        folder,
        max_seq_length=args.max_seq_length,
        dtype=None,
        load_in_4bit=False,
        backend="transformers",
        hardware=hardware,
    )
    short = short_answer_rows(rows[args.train_rows :], tokenizer, n=args.stop_rows, data_format=AlpacaFormat())
    results = {}
    if "base" in variants:
        results["base"] = measure(model, tokenizer, held, short, args)
        print(
            f"base: {results['base']['response_loss']:.4f} {results['base']['eos_probability']:.3f} "
            f"{results['base']['stopped']}/{results['base']['stop_total']}",
            flush=True,
        )
    del model
    for name, only in (("tuned_full_text", False), ("tuned_completion_only", True)):
        if name not in variants:
            continue
        model, tokenizer, info = train(folder, train_rows, only, hardware, args)
        results[name] = {**info, **measure(model, tokenizer, held, short, args)}
        r = results[name]
        print(
            f"{name}: {r['response_loss']:.4f} {r['eos_probability']:.3f} {r['stopped']}/{r['stop_total']} "
            f"({r['s_per_step']} s/step)",
            flush=True,
        )
        del model
    record = {
        "what": "loss choice on SmolLM2-135M-Instruct: full-text vs completion-only LoRA, same steps and prompt",
        "date": datetime.date.today().isoformat(),
        "model": folder,
        "rows": str(args.rows),
        "train_rows": len(train_rows),
        "held_out_rows": len(held),
        "stop_rows": [r["instruction"] for r in short],
        "args": vars(args),
        "threads": torch.get_num_threads(),
        "cpu_bf16_autocast": bool(hardware.cpu_bf16),
        "versions": library_versions(),
        "wall_s": round(time.perf_counter() - start, 1),
        "results": results,
    }
    return write(record, args)


def write(record: dict, args) -> dict:
    """Print the table of ``record["results"]`` and write the record as JSON (atomically)."""
    results = record["results"]
    print()
    print(
        "| model | held-out response loss | full-text loss | mean EOS prob. at response end | "
        f"stopped (of {args.stop_rows}, <= {args.max_new_tokens} new tokens) | s/step |"
    )
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['response_loss']:.4f} | {r['full_text_loss']:.4f} | {r['eos_probability']:.3f} | "
            f"{r['stopped']}/{r['stop_total']} | {r.get('s_per_step', '-')} |"
        )
    out = Path(args.out or REPO / "benchmarks" / "results" / f"{record['date']}-loss-choice.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, out)
    print(f"wrote {out}")
    return record


if __name__ == "__main__":
    main()
