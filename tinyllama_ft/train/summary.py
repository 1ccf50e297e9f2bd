"""``run_summary.json``: one file that says what a run did, on what, with which libraries."""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import asdict
from typing import Any

from ..config.methods import METHODS
from ..machine.install import installed_versions, normalize_name
from ..machine.paths import expand_path, write_json_atomically

#: Distributions whose versions a summary records (missing ones are recorded as None).
LIBRARIES = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "datasets",
    "unsloth",
    "unsloth_zoo",
    "bitsandbytes",
    "wandb",
    "tinyllama-ft",
)


def format_loss(value: float | None) -> str:
    """A loss as printed (4 decimals; ``run_summary.json`` keeps the full float), or ``"None"`` without one."""
    return "None" if value is None else f"{value:.4f}"


def format_eval_loss(results: dict) -> str:
    """``"eval_loss 1.6995 -> 1.5574"`` from ``loop.train_and_evaluate``'s figures (or a run summary); ``"eval_loss
    0.5120 after training"`` when there is no loss before it (a DPO or KTO trainer starts at a known loss); ``"no
    eval_loss"`` without either."""
    before, after = results.get("eval_loss_before"), results.get("eval_loss_after")
    if before is None and after is None:  # no held-out split, or GRPO (its checks score answers: grpo_checks)
        return "no eval_loss"
    if before is None:
        return f"eval_loss {format_loss(after)} after training"
    return f"eval_loss {format_loss(before)} -> {format_loss(after)}"


def format_preference(preference: dict | None) -> str:
    """A preference run's held-out accuracy, as the command line's done line shows it:
    ``", preference accuracy 48.0% -> 71.0% of 50 pairs"``; "" without preference scores (an SFT run, KTO's
    unpaired rows, no held-out split)."""
    before, after = ((preference or {}).get(k) for k in ("before", "after"))
    if not before or not after:
        return ""
    return f", preference accuracy {before['accuracy']:.1%} -> {after['accuracy']:.1%} of {after['pairs']} pairs"


def format_grpo(grpo: dict | None) -> str:
    """A GRPO run's figures, as the command line's done line shows them: the summed reward at the first and last
    logged steps, then the held-out accuracy and format compliance before and after: ``"reward 0.250 -> 1.125 (steps
    1 -> 60), accuracy 16.0% -> 21.0%, format 11.0% -> 64.0% of 100 held-out prompts"``; each part left out without
    its figures; "" without a ``grpo`` block."""
    if not grpo:
        return ""
    parts, history = [], [h for h in grpo.get("reward_history", []) if h.get("reward") is not None]
    if history:
        first, last = history[0], history[-1]
        parts.append(f"reward {first['reward']:.3f} -> {last['reward']:.3f} (steps {first['step']} -> {last['step']})")
    before, after = grpo.get("before"), grpo.get("after")
    if before and after:
        parts.append(
            f"accuracy {before['accuracy']:.1%} -> {after['accuracy']:.1%}, format {before['format_compliance']:.1%} "
            f"-> {after['format_compliance']:.1%} of {after['prompts']} held-out prompts"
        )
    return ", ".join(parts)


def format_outcome(summary: dict) -> str:
    """The figures of ``tinyllama-ft train``'s done line, from a run summary: a GRPO run's ``format_grpo`` ("no
    rewards logged" without figures), else ``format_eval_loss`` with ``format_preference`` after it."""
    block = METHODS[summary["config"]["method"]].summary
    if block == "grpo":
        return format_grpo(summary[block]) or "no rewards logged"
    return format_eval_loss(summary) + format_preference(summary.get("preference"))


def format_results(results: dict) -> str:
    """``loop.train_and_evaluate``'s figures on one line, as printed: losses with 4 decimals, tokens/s an integer,
    seconds with 1 decimal, peak GPU memory in GiB with 2 (``run_summary.json`` keeps the full values)."""
    rate, peak = results.get("tokens_per_s"), results.get("peak_memory_gib")
    return (
        f"{format_eval_loss(results)}, "
        f"{results.get('train_tokens', 0):,} tokens in {results.get('train_runtime_s', 0.0):.1f} s"
        + (f", {rate:,.0f} tokens/s" if rate is not None else "")
        + (f", peak GPU memory {peak:.2f} GiB" if peak is not None else "")
    )


def library_versions(names=LIBRARIES) -> dict[str, str | None]:
    """Installed version of each distribution in ``names``, or None when it is not installed."""
    found = installed_versions(names)
    return {"python": platform.python_version(), **{name: found.get(normalize_name(name)) for name in names}}


def git_commit() -> str | None:
    """The commit checked out at this package's folder, or None outside git."""
    path = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def cpu_name() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``; ``platform.processor()`` elsewhere), or None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def run_numerics(plan, hardware) -> dict[str, Any]:
    """How the run computed, recorded as ``run_summary.json``'s ``"numerics"``: what decides its figures on another
    machine.

    Args:
        plan: the run's ``plan.RunPlan`` (``dtype``, ``cpu_autocast_bf16``, ``device``).
        hardware: ``Hardware`` of the machine (``cpu_bf16``: the CPU computes bf16 natively).

    Returns:
        ``device``, ``dtype`` (the weights' and the computation's), ``autocast`` (the trainer's mixed-precision dtype,
        ``precision.trainer_precision_flags``: ``"bfloat16"``, ``"float16"`` or None), ``torch_threads``
        (``torch.get_num_threads()`` now), ``torch_version``, ``cpu`` (its model name) and ``cpu_bf16``.
    """
    import torch

    from ..models.precision import trainer_precision_flags

    flags = trainer_precision_flags(plan.dtype, plan.cpu_autocast_bf16)
    return {
        "device": plan.device,
        "dtype": plan.dtype,
        "autocast": "bfloat16" if flags["bf16"] else "float16" if flags["fp16"] else None,
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "cpu": cpu_name(),
        "cpu_bf16": hardware.cpu_bf16,
    }


def build_run_summary(
    *,
    cfg,
    plan,
    hardware,
    results: dict,
    work: dict | None = None,
    data_report=None,
    trainable: tuple[int, int] | None = None,
    adapter_dir: str | None = None,
    samples: list[dict] | None = None,
    length_report=None,
    eos: dict | None = None,
    heldout: dict | None = None,
    chat: dict | None = None,
    preference: dict | None = None,
    grpo: dict | None = None,
    chunks=None,
) -> dict[str, Any]:
    """The fields of ``run_summary.json``.

    Args:
        cfg: the run's ``FinetuneConfig`` (recorded whole under ``"config"``).
        plan: the run's ``plan.RunPlan`` (backend, dtype, 4-bit, RoPE factor; recorded whole under
            ``"execution"``, and how it computed under ``"numerics"``: ``run_numerics``).
        hardware: ``Hardware`` of the machine (``"gpu"``: its name, or None on a CPU).
        results: ``loop.train_and_evaluate`` output (eval losses, runtime in s, tokens, tokens/s,
            peak GiB).
        work: ``sft_trainer.training_plan`` output (planned steps and tokens; recorded under ``"plan"``).
        data_report: ``data.DataReport`` of the rows read.
        trainable: ``(trainable, total)`` parameter counts.
        adapter_dir: where the adapter was saved.
        samples: ``[{"instruction", "response"}]`` generated after reloading.
        length_report: ``lengths.LengthReport`` of the rows against ``max_seq_length`` (after
            ``apply_long_rows``): recorded under ``"lengths"`` (counts in rows and tokens).
        eos: ``eos_check.eos_first_batch`` counts, recorded as ``plan["eos_first_batch"]``.
        heldout: ``held_out.heldout_summary`` output (held-out scores and stopping counts before/after
            training, the side-by-side answers), recorded at the top level.
        chat: a conversation run's ``formats.ConversationFormat.summary_fields()["chat"]`` (family, stop ids,
            tokenized-row counts, first-batch supervision), recorded under ``"chat"``; None for Alpaca runs.
        preference: a preference run's ``PreferenceFormat.summary_fields()["preference"]`` (method, rows, adapter
            continued, first-batch supervision), recorded under ``"preference"`` with the run's ``beta``,
            ``loss_type``, the plan's ``reference``, the held-out ``"before"`` / ``"after"`` scores ``heldout``
            holds and ``"implicit_reward_accuracy"`` (TRL's ``eval_rewards/accuracies`` at the last evaluation: the
            share of held-out pairs whose implicit reward prefers the chosen response; None without it, as KTO).
        grpo: a GRPO run's ``GrpoFormat.summary_fields()["grpo"]`` (the prompts' form, prompts dropped, what each step
            samples), recorded under ``"grpo"`` with ``num_generations``, ``max_completion_length``, ``temperature``,
            ``beta``, ``loss_type``, the plan's ``reference``, the held-out ``"before"`` / ``"after"`` scores
            ``heldout`` holds (accuracy, format compliance, each reward's mean, mean completion length) and
            ``"reward_history"`` (``grpo_trainer.reward_history``: per logged step, each reward's mean, the summed
            reward, the share of groups with zero reward variance, the mean completion length).
        chunks: a text run's ``text_documents.ChunkReport`` (documents, tokens with their EOS, documents longer than
            ``max_seq_length``, the windows they split into), recorded under ``"chunks"``; None for other runs.

    Returns:
        A JSON-ready dict: ``eval_loss_before``, ``eval_loss_after``, ``train_runtime_s``, ``train_tokens``,
        ``tokens_per_s``, ``peak_memory_gib``, ``adapter_dir``, ``backend``, ``dtype``, ``gpu`` and the rest.
    """
    summary: dict[str, Any] = dict(results)
    summary.update(
        adapter_dir=adapter_dir,
        backend=plan.backend,
        dtype=plan.dtype,
        load_in_4bit=plan.load_in_4bit,
        rope_scaling_factor=plan.rope_scaling_factor,
        gpu=hardware.gpu_name,
        gpu_capability=list(hardware.capability) if hardware.capability else None,
        trainable_parameters=trainable[0] if trainable else None,
        total_parameters=trainable[1] if trainable else None,
        plan={**(work or {}), "eos_first_batch": eos},
        execution=plan.to_dict(),
        numerics=run_numerics(plan, hardware),
        data={
            "source": data_report.source,
            "rows_read": data_report.total,
            "rows_kept": data_report.kept,
            "rows_dropped": data_report.dropped,
        }
        if data_report is not None
        else None,
        samples=samples or [],
        lengths=length_report.to_dict() if length_report is not None else None,
        config=cfg.to_dict(),
    )
    summary.update(heldout or {})
    trained = {"beta": cfg.beta, "loss_type": list(cfg.loss_type), "reference": plan.reference}
    if chat is not None:
        summary["chat"] = chat
    if chunks is not None:
        summary["chunks"] = asdict(chunks)
    if preference is not None:
        evals = [h for h in results.get("log_history", []) if "eval_rewards/accuracies" in h]
        summary["preference"] = {
            **preference,
            **trained,
            **summary.get("preference", {}),
            "implicit_reward_accuracy": evals[-1]["eval_rewards/accuracies"] if evals else None,
        }
    if grpo is not None:
        from .grpo_trainer import logged_reward_names, reward_history

        history = results.get("log_history", [])
        summary["grpo"] = {
            **grpo,
            "num_generations": cfg.num_generations,
            "max_completion_length": cfg.max_completion_length,
            "temperature": cfg.temperature,
            **trained,
            **summary.get("grpo", {}),
            "reward_history": reward_history(history, logged_reward_names(history)),
        }
    return summary


def write_run_summary(path: str, **fields: Any) -> str:
    """Write ``fields`` plus ``library_versions`` and ``git_commit`` as JSON to ``path`` atomically.

    Returns:
        ``path``.
    """
    path = expand_path(path)
    summary = dict(fields)
    summary.setdefault("versions", library_versions())
    summary.setdefault("git_commit", git_commit())
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return write_json_atomically(path, summary, ensure_ascii=False, default=str)
