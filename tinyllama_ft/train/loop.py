"""Train and evaluate (the article's cell 7), with the numbers a run reports, and what to do when CUDA runs out.

Which checkpoint a resume starts from (complete, undamaged) is ``checkpoints.last_checkpoint``'s decision; what it
may train after it, ``checkpoints.check_continuation``'s. A resume towards another ``max_steps`` than the checkpoint's
run planned follows the new total's schedule (``ContinueSchedule``; docs/parameters.md).
"""

from __future__ import annotations

import resource
import time
from typing import Any

from transformers import TrainerCallback

from ..models.attention import eager_block_masks
from ..models.lora import peft_wrapping
from .checkpoints import check_continuation, checkpoint_state, last_checkpoint


class ContinueSchedule(TrainerCallback):
    """On a resume, before the first step: refuse to train past a finished run, and put the learning rate on the
    schedule of this run's total.

    transformers loads the checkpoint's scheduler and optimizer state after building the scheduler for the new
    ``max_steps``, so the rate is the old total's (a 4-step linear run resumed to 8 steps trained step 5 at 0.0). The
    next step's rate ``base_lr * lr_lambda(step)`` (``LambdaLR``: every schedule but ``reduce_lr_on_plateau``) is set
    here on the optimizer and as the scheduler's last rate; with an unchanged total it is the checkpoint's.

    Args:
        checkpoint: the checkpoint resumed from.
        planned_before: the total the checkpoint's run planned (``checkpoints.checkpoint_state``).
    """

    def __init__(self, checkpoint: str, planned_before: int):
        self.checkpoint, self.planned_before = checkpoint, planned_before

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        check_continuation(state.global_step, state.max_steps, self.checkpoint)  # a run by epochs: counted now
        scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)  # accelerate's wrapper holds the torch one
        lambdas = getattr(scheduler, "lr_lambdas", None)
        if lambdas is not None and optimizer is not None:
            groups = optimizer.param_groups
            for group, base, fn in zip(groups, scheduler.base_lrs, lambdas):
                group["lr"] = base * fn(scheduler.last_epoch)
            scheduler._last_lr = [group["lr"] for group in groups]
        if self.planned_before != state.max_steps and state.is_world_process_zero:  # said once under a launch
            print(
                f"continuing steps {state.global_step + 1}-{state.max_steps} on the {state.max_steps}-step schedule "
                f"(the checkpoint's run planned {self.planned_before} steps; docs/parameters.md, max_steps)",
                flush=True,
            )


def train_and_evaluate(trainer, *, resume: bool = False) -> dict[str, Any]:
    """Evaluate, train, evaluate again; measure tokens, time and peak GPU memory.

    Under DDP (``args.world_size`` > 1) the first evaluation runs inside ``train()`` (``eval_on_start``; the comment
    in the code says why); ``eval_loss_before`` and the timings mean the same either way.

    Args:
        trainer: from ``build_trainer``.
        resume: continue from the newest checkpoint in ``args.output_dir`` when there is one.

    Returns:
        ``{"eval_loss_before", "eval_loss_after"`` (None without an eval set; ``eval_loss_before`` also None on a
        resume, and for a trainer whose ``evaluates_before_training`` is False: a preference trainer whose policy
        starts as its reference, ``preference_trainer``), ``"train_runtime_s"``
        (seconds in ``train.``), ``"eval_in_train_s"`` (seconds of it spent in the evaluations every
        ``eval_steps``), ``"train_tokens"`` (non-padding tokens fed in this run: all processes'
        under DDP, the trainer gathers them), ``"tokens_per_s"``
        (train_tokens over the training time, evaluations excluded, checkpoint saves included),
        ``"peak_memory_gib"`` (``torch.cuda.max_memory_allocated``; None on CPU),
        ``"peak_reserved_gib"``, ``"peak_host_rss_gib"`` (this process's peak resident memory), ``"global_step"``, ``"resumed_from"``, ``"train_loss"``,
        ``"log_history"`` (the trainer's per-step logs)}``.

    Raises:
        checkpoints.DamagedCheckpointError: ``resume`` and every checkpoint holds a truncated or garbled
            file (a damaged newest one is skipped with a message, falling back to the one before).
        checkpoints.RunFinished, config.coercion.ConfigError: ``resume`` and the checkpoint already reached the
            planned steps, or more (``checkpoints.check_continuation``; before any step is trained).
    """
    import torch

    has_eval = trainer.eval_dataset is not None
    eager_block_masks(trainer.model)  # flex attention's masks: not compiled (models/attention.py)
    checkpoint = last_checkpoint(trainer.args.output_dir, required=True) if resume else None
    if resume and checkpoint is None:
        print(f"resume: no checkpoint in {trainer.args.output_dir}; starting from step 0")
    # Several processes: evaluate() before train() marks the model as prepared by accelerate (evaluation mode,
    # no DDP wrapper), so train() then skips the DDP wrap (transformers 5.24, accelerate 1.15): no gradient
    # all-reduce, the processes drift apart while each logs a plausible loss. The eval before training then
    # runs inside train(), on the wrapped model (eval_on_start), and only when training starts from step 0.
    # A trainer whose policy starts as its own reference (DPO, KTO) would spend a pass on a known loss: none then
    before = has_eval and checkpoint is None and getattr(trainer, "evaluates_before_training", True)
    if has_eval and checkpoint is None and not before:
        print(f"before training  eval_loss not evaluated: {trainer.evaluates_before_training_reason}")
    eval_on_start = trainer.args.world_size > 1 and before
    if eval_on_start:
        trainer.args.eval_on_start = True
    eval_before = trainer.evaluate()["eval_loss"] if before and not eval_on_start else None
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    # a resumed run reloads the checkpoint's counter: count only the tokens fed in this process
    state = checkpoint_state(checkpoint) if checkpoint else trainer.state
    tokens_before, first_step = int(state.num_input_tokens_seen), state.global_step
    continuing = ContinueSchedule(checkpoint, state.max_steps) if checkpoint else None
    if continuing:
        trainer.add_callback(continuing)
    start = time.perf_counter()
    try:
        with peft_wrapping():  # TRL's GRPO rollouts read transformers' deprecated checkpointing alias
            output = trainer.train(resume_from_checkpoint=checkpoint)
    except torch.OutOfMemoryError as e:
        raise torch.OutOfMemoryError(out_of_memory_advice(trainer)) from e
    finally:
        if continuing:
            trainer.remove_callback(continuing)
    runtime = time.perf_counter() - start
    # evaluations every eval_steps in this process (a resumed state also holds the earlier process's)
    evals = [h for h in trainer.state.log_history if "eval_loss" in h]
    eval_in_train = sum(h.get("eval_runtime", 0.0) for h in evals if h.get("step", 0) > first_step)
    if eval_on_start:  # logged at step 0, inside train()'s time
        eval_before = evals[0]["eval_loss"]
        eval_in_train += evals[0].get("eval_runtime", 0.0)
    tokens = int(trainer.state.num_input_tokens_seen - tokens_before)
    # the trainer evaluated at the last step already (eval_steps divides it): the same weights, so its loss is the
    # one after training (evaluating again would print that line twice and spend the time twice)
    last = evals[-1] if evals and evals[-1].get("step") == trainer.state.global_step > first_step else None
    eval_after = (last or trainer.evaluate())["eval_loss"] if has_eval else None
    cuda = torch.cuda.is_available()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "eval_loss_before": eval_before,
        "eval_loss_after": eval_after,
        "train_runtime_s": round(runtime, 2),
        "eval_in_train_s": round(eval_in_train, 2),
        "train_tokens": tokens,
        "tokens_per_s": round(tokens / (runtime - eval_in_train), 1) if runtime > eval_in_train else None,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if cuda else None,
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 3) if cuda else None,
        "peak_host_rss_gib": round(rss_kib / 2**20, 3),
        "global_step": trainer.state.global_step,
        "resumed_from": checkpoint,
        "train_loss": output.training_loss,
        "log_history": list(trainer.state.log_history),
    }


def out_of_memory_advice(trainer) -> str:
    """What to say when CUDA runs out of memory in training: the step, the knobs to lower, the last checkpoint.

    Frees the cached CUDA memory first (the failed step's tensors are gone once the exception is handled).
    """
    from accelerate.utils import release_memory

    release_memory()  # garbage collection + emptying the CUDA cache
    args = trainer.args
    checkpointing = bool(
        getattr(args, "gradient_checkpointing", False) or getattr(args, "activation_checkpointing", False)
    )
    kept = last_checkpoint(args.output_dir)
    grpo = hasattr(args, "num_generations")  # GRPO's config has no max_length: its step holds sampled completions
    size = (
        f"num_generations={args.num_generations}, max_completion_length={args.max_completion_length}"
        if grpo
        else f"max_seq_length={args.max_length}"
    )
    return (
        f"CUDA ran out of memory at step {trainer.state.global_step + 1} with per_device_train_batch_size="
        f"{args.per_device_train_batch_size} (x gradient_accumulation_steps={args.gradient_accumulation_steps}), "
        f"{size} and gradient_checkpointing={checkpointing}. Lower per_device_train_batch_size (raise "
        f"gradient_accumulation_steps to keep the effective batch), lower "
        f"{'max_completion_length or num_generations' if grpo else 'max_seq_length'}, or set "
        f"gradient_checkpointing=True; recipe='fast' sizes these to the free memory. "
        + (
            f"The last checkpoint is kept: {kept}; run again with resume=True to continue from it (in a notebook, "
            f"restart the runtime first: the failed step may still hold GPU memory)."
            if kept
            else "No checkpoint was written yet."
        )
    )
