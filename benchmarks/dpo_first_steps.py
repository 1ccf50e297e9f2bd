"""Where a fresh process's first DPO steps go (issue 44 target 2): `tinyllama-ft train` with TRL's DPOTrainer timed
per micro-batch, in this process, from its first import.

Each micro-batch's row: its seconds (CUDA synchronized), the seconds torch compiled in it (dynamo's compilation
metrics), the seconds of the reference's pass (TRL's ``use_adapter`` context: the base with the adapter off), the
padded shape and the non-padding tokens (padding to the longest sequence of the micro-batch). Beside them: the seconds
to import, to build the trainer, and ``run_summary.json``'s whole ``train()`` figures. The JSON is written when the
run ends (one key per ``--name``; an earlier file's other keys are kept).

Usage (repo root, the GPU machine's site on PYTHONPATH):
    python3 benchmarks/dpo_first_steps.py --name dpo_h200 --out /tmp/out/dpo_first_steps.json -- \
        --method dpo --model_name /tmp/tinyllama-shaped --dataset data/alpaca_pairs/pairs.jsonl ... (train's flags)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

T0 = time.perf_counter()


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _compile_seconds() -> float:
    from torch._dynamo import utils

    metrics = getattr(utils, "compilation_time_metrics", {}) or {}
    return float(sum(sum(v) for v in metrics.values()))


def _graphs() -> int:
    from torch._dynamo import utils

    return int(utils.counters["stats"].get("unique_graphs", 0))


def instrument(rows: list[dict], phases: dict, after_train=None) -> None:
    """Wrap TRL's DPOTrainer (``training_step``, ``__init__``) and its ``use_adapter`` with timers; ``after_train()``
    runs when ``train()`` returns (the JSON then holds the steps, whatever stops the process later)."""
    from trl.trainer import dpo_trainer

    current: dict = {}
    use_adapter = dpo_trainer.use_adapter

    @contextlib.contextmanager
    def timed_use_adapter(*args, **kwargs):
        _sync()
        start = time.perf_counter()
        with use_adapter(*args, **kwargs):
            yield
        _sync()
        current["ref_s"] = current.get("ref_s", 0.0) + time.perf_counter() - start

    dpo_trainer.use_adapter = timed_use_adapter
    cls = dpo_trainer.DPOTrainer
    training_step, init = cls.training_step, cls.__init__

    def timed_training_step(self, model, inputs, *args, **kwargs):
        ids, mask = inputs.get("input_ids"), inputs.get("attention_mask")
        _sync()
        current.clear()
        compiled, graphs, start = _compile_seconds(), _graphs(), time.perf_counter()
        if not rows:
            phases["before_first_step_s"] = round(start - T0, 3)
            phases["train_to_first_step_s"] = round(start - phases.get("train_start", start), 3)
        out = training_step(self, model, inputs, *args, **kwargs)
        _sync()
        rows.append(
            {
                "micro": len(rows) + 1,
                "s": round(time.perf_counter() - start, 4),
                "compile_s": round(_compile_seconds() - compiled, 4),
                "new_graphs": _graphs() - graphs,
                "ref_s": round(current["ref_s"], 4) if "ref_s" in current else None,
                "shape": list(ids.shape) if ids is not None else None,
                "tokens": int(mask.sum()) if mask is not None else None,
            }
        )
        r = rows[-1]
        print(
            f"[dpo_first_steps] micro {r['micro']}: {r['s']:.2f} s, compile {r['compile_s']:.2f} s, "
            f"ref {r['ref_s']} s, shape {r['shape']}, tokens {r['tokens']}",
            flush=True,
        )
        return out

    def timed_init(self, *args, **kwargs):
        start = time.perf_counter()
        init(self, *args, **kwargs)
        phases["trainer_init_s"] = round(time.perf_counter() - start, 3)

    train = cls.train

    def timed_train(self, *args, **kwargs):
        phases["train_start"] = time.perf_counter()
        try:
            return train(self, *args, **kwargs)
        finally:
            _sync()
            phases["train_s"] = round(time.perf_counter() - phases.pop("train_start"), 3)
            if after_train is not None:
                after_train()

    cls.training_step, cls.__init__, cls.train = timed_training_step, timed_init, timed_train


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--pad-to-multiple-of",
        type=int,
        default=None,
        help="set TRL's DPOConfig.pad_to_multiple_of (a trial: the package does not set it)",
    )
    ap.add_argument("train_args", nargs=argparse.REMAINDER, help="after --: `tinyllama-ft train`'s flags")
    a = ap.parse_args(argv)
    train_args = [x for x in a.train_args if x != "--"]
    rows: list[dict] = []
    phases: dict = {}
    import torch  # noqa: F401  (timed as the import phase)
    import trl  # noqa: F401

    from tinyllama_ft.cli import run

    phases["imports_s"] = round(time.perf_counter() - T0, 3)
    out_dir = train_args[train_args.index("--output_dir") + 1] if "--output_dir" in train_args else None
    instrument(rows, phases, after_train=lambda: save(a, train_args, rows, phases, out_dir, rc=None))
    if a.pad_to_multiple_of:
        from trl import DPOConfig

        post_init = DPOConfig.__post_init__

        def padded_post_init(self):
            self.pad_to_multiple_of = a.pad_to_multiple_of
            post_init(self)

        DPOConfig.__post_init__ = padded_post_init
    rc = 0
    try:
        run(["train", *train_args])
    except SystemExit as e:  # the command line's exit
        rc = int(e.code or 0)
    phases["process_s"] = round(time.perf_counter() - T0, 3)
    result = save(a, train_args, rows, phases, out_dir, rc=rc)
    print(f"[dpo_first_steps] {a.name}: {json.dumps({**phases, 'padding_fraction': result['padding_fraction']})}")
    print(f"[dpo_first_steps] summary: {json.dumps(result['summary'])[:800]}")
    return rc


def save(a, train_args: list[str], rows: list[dict], phases: dict, out_dir: str | None, rc: int | None) -> dict:
    """Write this run's row into ``a.out`` (other names' rows kept); ``rc`` None: written when ``train()`` returned,
    before the checks after it (``summary`` then empty: ``run_summary.json`` comes at the end)."""
    phases["compile_total_s"] = round(_compile_seconds(), 3)
    phases["steps_s"] = round(sum(r["s"] for r in rows), 3)
    summary = {}
    if out_dir and rc is not None:
        with contextlib.suppress(OSError, ValueError):
            summary = json.load(open(f"{out_dir}/run_summary.json", encoding="utf-8"))
    keep = ("backend", "dtype", "tokens_per_s", "train_runtime_s", "peak_memory_gib", "peak_reserved_gib", "plan")
    tokens = sum(r["tokens"] or 0 for r in rows)
    padded = sum(r["shape"][0] * r["shape"][1] for r in rows if r["shape"])
    result = {
        "rc": rc,
        "train_args": train_args,
        "pad_to_multiple_of": a.pad_to_multiple_of,
        "phases": dict(phases),
        "padding_fraction": round(1 - tokens / padded, 4) if padded else None,
        "micro_batches": rows,
        "summary": {k: summary.get(k) for k in keep if k in summary},
    }
    if rc is None and "train_s" in phases:  # train()'s tokens/s from the micro-batches' non-padding tokens
        result["summary"]["tokens_per_s_from_steps"] = round(tokens / phases["train_s"], 1)
    try:
        all_rows = json.load(open(a.out, encoding="utf-8"))
    except (OSError, ValueError):
        all_rows = {}
    all_rows[a.name] = result
    json.dump(all_rows, open(a.out, "w", encoding="utf-8"), indent=1)
    return result


if __name__ == "__main__":
    sys.exit(main())
