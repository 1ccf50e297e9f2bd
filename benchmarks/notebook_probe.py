"""Timing hooks for ``notebook_runs.py``, loaded in the kernel of a benchmarked notebook by two cells that the
benchmark adds to its copy of the notebook (never to the notebook itself): ``install()`` in a cell right after the
install cell, ``dump(globals(), path)`` in a cell after the last one.

What they record, with ``time.time()`` stamps: the trainer's events (train begin / end, each optimizer step's
begin and end, the end taken after ``torch.cuda.synchronize()``, logs, evaluations, saves) with the non-padding
tokens seen so far and dynamo's compile counters; every generation batch (``infer.core._decode_batch``: the
decoder, rows, prompt length, budget, new tokens, seconds) under the helper that asked for it (the held-out
check and its parts, the side-by-side table, ``generate``, ``stream``); and at the end torch's compilation metrics
(one row per dynamo compile: function, seconds, the recompile reason). Imports nothing heavy until called.
"""

from __future__ import annotations

import functools
import importlib
import json
import time

STATE: dict = {"events": [], "decode": [], "calls": [], "stack": [], "counts": {}}

#: (module, function, label): the helpers whose calls are timed; generation batches inside one carry its label.
TIMED = (
    ("tinyllama_ft.evaluate.held_out", "held_out_check", "held_out_check"),
    ("tinyllama_ft.evaluate.held_out", "held_out_scores", "scores"),
    ("tinyllama_ft.evaluate.held_out", "stopping_count", "stopping"),
    ("tinyllama_ft.evaluate.side_by_side", "compare_answers", "side_by_side"),
    ("tinyllama_ft.infer.generation", "generate", "generate"),
    ("tinyllama_ft.infer.generation", "stream", "stream"),
    ("tinyllama_ft.train.loop", "train_and_evaluate", "train_and_evaluate"),
)


def _timed(fn, label: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        n = STATE["counts"][label] = STATE["counts"].get(label, -1) + 1
        STATE["stack"].append(f"{label}#{n}")
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            STATE["stack"].pop()
            STATE["calls"].append(
                {"label": label, "n": n, "start": start, "s": time.time() - start, "inside": "/".join(STATE["stack"])}
            )

    return wrapper


def _dynamo_stats() -> dict:
    try:
        from torch._dynamo.utils import counters

        return {k: int(v) for k, v in counters["stats"].items()}
    except Exception:  # noqa: BLE001  torch without dynamo: nothing to count
        return {}


def _event(name: str, state, logs=None, sync: bool = False) -> None:
    if sync:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    record = {"e": name, "t": time.time(), "step": state.global_step, "tokens": int(state.num_input_tokens_seen or 0)}
    if logs:
        record["logs"] = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
    if name == "step_end":
        record["dynamo"] = _dynamo_stats()
    STATE["events"].append(record)


def _patch_progress() -> None:
    """Record the trainer's events through the package's own callback (``progress.ProgressPrinter``)."""
    progress = importlib.import_module("tinyllama_ft.train.progress").ProgressPrinter
    if getattr(progress, "_bench_events", False):
        return
    on_train_begin, on_log = progress.on_train_begin, progress.on_log

    def train_begin(self, args, state, control, **kwargs):
        _event("train_begin", state)
        return on_train_begin(self, args, state, control, **kwargs)

    def log(self, args, state, control, logs=None, **kwargs):
        _event("log", state, logs)
        return on_log(self, args, state, control, logs=logs, **kwargs)

    progress.on_train_begin, progress.on_log = train_begin, log
    progress.on_step_begin = lambda self, args, state, control, **kw: _event("step_begin", state)
    progress.on_step_end = lambda self, args, state, control, **kw: _event("step_end", state, sync=True)
    progress.on_evaluate = lambda self, args, state, control, **kw: _event("evaluate", state)
    progress.on_save = lambda self, args, state, control, **kw: _event("save", state)
    progress.on_train_end = lambda self, args, state, control, **kw: _event("train_end", state, sync=True)
    progress._bench_events = True


def install() -> None:
    """Wrap the timed helpers, the generation core's batch function and (once a trainer is built) the package's
    progress callback."""
    for module, name, label in TIMED:
        mod = importlib.import_module(module)
        setattr(mod, name, _timed(getattr(mod, name), label))

    core = importlib.import_module("tinyllama_ft.infer.core")
    decode_batch = core._decode_batch

    def timed_decode_batch(model, tokenizer, batch, mode, stops, opts, streamer=None):
        start = time.time()
        answers = decode_batch(model, tokenizer, batch, mode, stops, opts, streamer=streamer)
        rows, prompt = batch["input_ids"].shape
        STATE["decode"].append(
            {
                "inside": "/".join(STATE["stack"]),
                "mode": mode,
                "graph_failed": model in core.GRAPH_FAILED,
                "rows": int(rows),
                "prompt_tokens": int(prompt),
                "max_new_tokens": opts.max_new_tokens,
                "new_tokens": sum(a.new_tokens for a in answers),
                "stopped": sum(a.stopped for a in answers),
                "streamed": streamer is not None,
                "start": start,
                "s": time.time() - start,
            }
        )
        return answers

    core._decode_batch = timed_decode_batch

    trainer_module = importlib.import_module("tinyllama_ft.train.trainers")
    build_trainer = trainer_module.build_trainer

    @functools.wraps(build_trainer)
    def build_trainer_with_events(*args, **kwargs):
        _patch_progress()  # here, not at install: it imports transformers, which Unsloth wants imported after it
        return build_trainer(*args, **kwargs)

    trainer_module.build_trainer = build_trainer_with_events
    STATE["installed"] = time.time()


def _compile_metrics() -> dict:
    import torch._dynamo.utils as du

    fields = (
        "compile_id",
        "co_name",
        "co_filename",
        "co_firstlineno",
        "start_time",
        "entire_frame_compile_time_s",
        "backend_compile_time_s",
        "inductor_compile_time_s",
        "fail_type",
        "fail_reason",
        "recompile_reason",
        "dynamo_time_before_restart_s",
        "graph_op_count",
        "cache_size",
        "accumulated_cache_size",
    )
    rows = []
    for m in du.get_compilation_metrics():
        row = {f: getattr(m, f, None) for f in fields}
        rows.append({k: (v if isinstance(v, (int, float, str, type(None))) else str(v)) for k, v in row.items()})
    out = {"metrics": rows, "counters": {k: {str(a): int(b) for a, b in v.items()} for k, v in du.counters.items()}}
    try:
        out["compile_times"] = du.compile_times(repr="str", aggregate=True)
    except Exception as e:  # noqa: BLE001  the signature moved between torch releases
        out["compile_times"] = f"unavailable: {type(e).__name__}: {e}"
    return out


def _check(check) -> dict | None:
    if check is None:
        return None
    return {
        "scores": check.scores.as_dict(),
        "stopped": check.stopping.stopped,
        "total": check.stopping.total,
        "new_tokens": list(check.stopping.new_tokens),
    }


def dump(ns: dict, path: str) -> None:
    """Write what ``install`` recorded, with the notebook's results, plan, checks and compile metrics, to ``path``."""
    out: dict = {k: STATE[k] for k in ("events", "decode", "calls")}
    out["installed"] = STATE.get("installed")
    parts = {
        "results": lambda: ns["results"],
        "plan": lambda: ns["plan"].to_dict(),
        "before": lambda: _check(ns.get("before")),
        "after": lambda: _check(ns.get("after")),
        "side_by_side": lambda: [
            {"base_stopped": r["base_stopped"], "tuned_stopped": r["tuned_stopped"]} for r in ns["side_by_side"]
        ],
        "reloaded_decoder": lambda: importlib.import_module("tinyllama_ft.infer.core").decode_mode(
            ns["model"], "auto", False, 1.0, None
        ),
        "compile": _compile_metrics,
        "gpu": lambda: __import__("torch").cuda.get_device_name(0),
        "versions": lambda: importlib.import_module("tinyllama_ft.train.summary").library_versions(
            ("torch", "triton", "transformers", "trl", "peft", "accelerate", "datasets", "unsloth", "liger_kernel")
        ),
    }
    for key, get in parts.items():
        try:
            out[key] = get()
        except Exception as e:  # noqa: BLE001  one missing part must not lose the others
            out[key] = {"unavailable": f"{type(e).__name__}: {e}"}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, default=str)
