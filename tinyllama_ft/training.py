"""TRL ``SFTTrainer`` with the article's arguments (cells 6-7), spelled for the installed TRL/transformers.

The article's ``TrainingArguments`` + ``SFTTrainer(tokenizer=..., dataset_text_field=..., max_seq_length=...,
packing=True)`` moved since 2024: TRL's ``SFTConfig`` now carries the data arguments, ``max_seq_length``
became ``max_length``, ``tokenizer`` became ``processing_class``, transformers 5 renamed
``evaluation_strategy`` to ``eval_strategy`` and folded ``warmup_ratio`` into ``warmup_steps`` (a float
below 1 is a ratio). ``sft_config_kwargs`` reads the installed signature and uses whichever name it
has, so the same code runs on TRL 1.15 / transformers 5.17 (what Unsloth accepts) and on newer releases.

Packing: TRL's ``"bfd"`` strategy (best-fit decreasing) places whole rows into ``max_seq_length`` windows
without padding, each row with its own ``position_ids`` starting at 0; a row longer than the window
is truncated (``"bfd_split"`` splits it instead). Tokens are counted as the non-padding tokens fed to
the model (transformers' ``include_num_input_tokens_seen="non_padding"``).
"""

from __future__ import annotations

import inspect
import math
import os
import resource
import time
from typing import Any

from .checkpoints import last_checkpoint
from .config import FinetuneConfig
from .hardware import Hardware
from .paths import expand_path
from .precision import trainer_precision_flags


#: Arguments whose name changed across TRL / transformers releases: our name -> spellings, newest first.
RENAMED_ARGUMENTS = {
    "max_length": ("max_length", "max_seq_length"),  # TRL 0.20
    "eval_strategy": ("eval_strategy", "evaluation_strategy"),  # transformers 4.46
    "gradient_checkpointing": ("activation_checkpointing", "gradient_checkpointing"),  # transformers 5.2x
    "gradient_checkpointing_kwargs": ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"),
}


def _accepts(cls, name: str) -> bool:
    return name in inspect.signature(cls.__init__).parameters


def sft_config_kwargs(cfg: FinetuneConfig, hardware: Hardware, dtype_name: str, has_eval: bool, config_cls=None) -> dict[str, Any]:
    """Keyword arguments for the installed ``trl.SFTConfig``, from the run's configuration.

    Args:
        cfg: the run's configuration (the article's values by default).
        hardware: the machine (``adamw_8bit`` needs CUDA: a CPU gets ``adamw_torch``).
        dtype_name: the run's dtype (``precision.resolve_dtype``): sets ``fp16``/``bf16``.
        has_eval: an eval set exists (evaluation every ``eval_steps`` steps, else none).
        config_cls: the class whose signature decides the spelling; default ``trl.SFTConfig``.

    Returns:
        A dict whose keys all exist in ``config_cls.__init__``'s signature.

    Raises:
        TypeError: the installed class has no spelling for one of the arguments (too old a TRL).
    """
    if config_cls is None:
        from trl import SFTConfig as config_cls
    optim = cfg.optim or ("adamw_8bit" if hardware.cuda else "adamw_torch")
    kwargs: dict[str, Any] = dict(
        output_dir=expand_path(cfg.output_dir),
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        lr_scheduler_type=cfg.lr_scheduler_type,
        optim=optim,
        seed=cfg.seed,
        logging_steps=cfg.logging_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        report_to=[] if cfg.report_to == "none" else [cfg.report_to],
        run_name=cfg.wandb_run_name,
        gradient_checkpointing=cfg.gradient_checkpointing,
        dataset_text_field="text",
        packing=cfg.packing,
        dataset_num_proc=cfg.dataset_num_proc,
        include_num_input_tokens_seen="non_padding",
        **trainer_precision_flags(dtype_name, cpu_autocast_bf16=(
            not hardware.cuda and hardware.cpu_bf16 and cfg.dtype is None and dtype_name == "float32")),
    )
    if not hardware.cuda:  # transformers accepts bf16 autocast on a CPU only when told it trains there
        kwargs["use_cpu"] = True
    if cfg.use_liger_kernel:  # TRL applies Liger to the model and skips the logits-based metrics
        kwargs["use_liger_kernel"] = True
    if cfg.gradient_checkpointing:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if cfg.packing:
        kwargs["packing_strategy"] = cfg.packing_strategy
    kwargs["eval_strategy"] = "steps" if has_eval else "no"
    if has_eval:
        kwargs["eval_steps"] = cfg.eval_steps
    kwargs["max_length"] = cfg.max_seq_length
    for name, spellings in RENAMED_ARGUMENTS.items():
        if name not in kwargs:
            continue
        accepted = next((s for s in spellings if _accepts(config_cls, s)), name)
        kwargs[accepted] = kwargs.pop(name)
    if _accepts(config_cls, "warmup_ratio"):
        kwargs["warmup_ratio"] = cfg.warmup_ratio
    else:  # transformers 5 folded it in: warmup_steps below 1 is a fraction of the total steps
        kwargs["warmup_steps"] = cfg.warmup_ratio
    unknown = [k for k in kwargs if not _accepts(config_cls, k)]
    if unknown:
        raise TypeError(f"the installed {config_cls.__name__} takes none of {unknown}: upgrade trl/transformers")
    return kwargs


def build_trainer(model, tokenizer, train_dataset, eval_dataset, cfg: FinetuneConfig, hardware: Hardware, dtype_name: str, callbacks=None):
    """A TRL ``SFTTrainer`` for a ``"text"`` dataset (``prompts.make_formatting_func`` output).

    Args:
        model: the LoRA model (``lora.add_lora``).
        tokenizer: its tokenizer (passed as ``processing_class``, or ``tokenizer`` on old TRL).
        train_dataset, eval_dataset: ``datasets.Dataset`` with a ``"text"`` column; eval may be None.
        cfg, hardware, dtype_name: as ``sft_config_kwargs``.
        callbacks: extra ``transformers.TrainerCallback`` objects.

    Returns:
        The trainer; its ``train_dataset`` is already tokenized and packed.
    """
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(**sft_config_kwargs(cfg, hardware, dtype_name, eval_dataset is not None))
    tok_arg = "processing_class" if _accepts(SFTTrainer, "processing_class") else "tokenizer"
    return SFTTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        callbacks=callbacks,
        **{tok_arg: tokenizer},
    )


def training_plan(trainer) -> dict[str, int]:
    """Optimizer steps and tokens the trainer will run, before it runs.

    Returns:
        ``{"sequences": packed training sequences per epoch, "tokens_per_epoch": tokens in them,
        "steps_per_epoch": optimizer steps per epoch, "planned_steps": steps the run will take,
        "planned_tokens": tokens it will feed (at most)}``.
    """
    args = trainer.args
    ds = trainer.train_dataset
    sequences = len(ds)
    tokens = int(sum(len(ids) for ids in ds["input_ids"]))
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(1, args.world_size)
    steps_per_epoch = max(1, math.ceil(sequences / per_step))
    planned = args.max_steps if args.max_steps > 0 else math.ceil(steps_per_epoch * args.num_train_epochs)
    planned_tokens = min(tokens * math.ceil(planned / steps_per_epoch), round(tokens * planned / steps_per_epoch))
    return {
        "sequences": sequences,
        "tokens_per_epoch": tokens,
        "steps_per_epoch": steps_per_epoch,
        "planned_steps": planned,
        "planned_tokens": int(planned_tokens),
    }


def eos_supervision(trainer, batches: int | None = 1, split: str = "train") -> dict[str, int]:
    """Check, on the collated batches the trainer really sees, that every sample ends in one supervised EOS.

    A sample is a packed row between ``position_ids`` resets to 0 (padding-free "bfd"/"bfd_split" batches),
    or one row of a padded batch (no packing), its padding (``attention_mask`` 0; trailing pad ids at
    ``position_ids`` 0 when a padding-free batch is padded to a multiple) left out. So a pad token equal to
    EOS is never counted as an EOS. An EOS is supervised when ``labels`` holds the EOS id at its position
    (not -100, as a collator that masks every pad id would leave it when pad == EOS).

    Args:
        trainer: from ``build_trainer``.
        batches: how many batches to inspect; None: all of them (one epoch).
        split: ``"train"`` (``get_train_dataloader``) or ``"eval"`` (``get_eval_dataloader``).

    Returns:
        Counts over the inspected samples: ``"samples"``; ``"samples_ok"`` (exactly one EOS, at the sample's
        last position, supervised); ``"samples_without_eos"`` (e.g. a row truncated to ``max_seq_length``
        tokens, or a "bfd_split" piece before the last); ``"samples_with_several_eos"`` (e.g. a tokenizer that
        appends its own EOS to text already ending in one); ``"eos_not_last"`` (samples holding an EOS whose
        last token is not EOS); ``"eos_tokens"`` (EOS ids inside samples); ``"eos_supervised"`` and
        ``"eos_masked"`` (those whose label is the EOS id, and those whose label is -100).
        All is well when ``samples_ok == samples``.

    Raises:
        ValueError: ``split`` is not "train"/"eval", there is no eval set, or the trainer packs with
            ``packing_strategy="wrapped"`` (rows are concatenated and cut at window edges: no per-row samples).
    """
    args = trainer.args
    packing = args.packing if split == "train" or getattr(args, "eval_packing", None) is None else args.eval_packing
    if packing and getattr(args, "packing_strategy", "bfd") == "wrapped":
        raise ValueError("eos_supervision: packing_strategy='wrapped' concatenates rows and cuts them at window "
                         "edges, so a batch has no per-row samples to check; use 'bfd' or 'bfd_split'")
    if split not in ("train", "eval") or split == "eval" and trainer.eval_dataset is None:
        raise ValueError(f"eos_supervision: split={split!r} must be 'train', or 'eval' with an eval set")
    tokenizer = trainer.processing_class
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    keys = ("samples", "samples_ok", "samples_without_eos", "samples_with_several_eos", "eos_not_last",
            "eos_tokens", "eos_supervised", "eos_masked")
    counts = dict.fromkeys(keys, 0)
    loader = trainer.get_train_dataloader() if split == "train" else trainer.get_eval_dataloader()
    for i, batch in enumerate(loader):
        if batches is not None and i >= batches:
            break
        for ids, labels in _samples(batch, pad):
            at = (ids == eos).nonzero().flatten().tolist()
            supervised = sum(int(labels[j]) == eos for j in at)
            last = bool(at) and at[-1] == len(ids) - 1
            counts["samples"] += 1
            counts["samples_ok"] += len(at) == 1 and last and supervised == 1
            counts["samples_without_eos"] += not at
            counts["samples_with_several_eos"] += len(at) > 1
            counts["eos_not_last"] += bool(at) and not last
            counts["eos_tokens"] += len(at)
            counts["eos_supervised"] += supervised
            counts["eos_masked"] += len(at) - supervised
    return {k: int(v) for k, v in counts.items()}


def _samples(batch, pad_id):
    """``(input_ids, labels)`` of each sample in a collated batch, padding excluded (see ``eos_supervision``)."""
    ids, labels = batch["input_ids"], batch["labels"]
    positions, mask = batch.get("position_ids"), batch.get("attention_mask")
    for r in range(ids.shape[0]):
        if mask is not None:  # padded batch: the row's real tokens (right or left padding)
            valid = mask[r].nonzero().flatten()
            lo, hi = (int(valid[0]), int(valid[-1]) + 1) if len(valid) else (0, 0)
        else:  # padding-free: only a pad_to_multiple_of tail, pad ids each at position 0
            lo, hi = 0, ids.shape[1]
            while hi > 1 and int(positions[r, hi - 1]) == 0 and int(ids[r, hi - 1]) == pad_id:
                hi -= 1
        starts = [lo]
        if positions is not None:
            starts += [int(j) for j in (positions[r, lo + 1:hi] == 0).nonzero().flatten() + lo + 1]
        for s, e in zip(starts, starts[1:] + [hi]):
            if e > s:
                yield ids[r, s:e], labels[r, s:e]


def train_and_evaluate(trainer, resume: bool = False) -> dict[str, Any]:
    """Evaluate, train, evaluate again; measure tokens, time and peak GPU memory.

    Args:
        trainer: from ``build_trainer``.
        resume: continue from the newest checkpoint in ``args.output_dir`` when there is one.

    Returns:
        ``{"eval_loss_before", "eval_loss_after"`` (None without an eval set), ``"train_runtime_s"``
        (seconds in ``trainer.train``), ``"eval_in_train_s"`` (seconds of it spent in the evaluations every
        ``eval_steps``), ``"train_tokens"`` (non-padding tokens fed in this process), ``"tokens_per_s"``
        (train_tokens over the training time, evaluations excluded, checkpoint saves included),
        ``"peak_memory_gib"`` (``torch.cuda.max_memory_allocated``; None on CPU),
        ``"peak_reserved_gib"``, ``"peak_host_rss_gib"`` (this process's peak resident memory), ``"global_step"``, ``"resumed_from"``, ``"train_loss"``,
        ``"log_history"`` (the trainer's per-step logs)}``.

    Raises:
        checkpoints.DamagedCheckpointError: ``resume`` and every checkpoint holds a truncated or garbled
            file (a damaged newest one is skipped with a message, falling back to the one before).
    """
    import torch

    has_eval = trainer.eval_dataset is not None
    checkpoint = last_checkpoint(trainer.args.output_dir, required=True) if resume else None
    if resume and checkpoint is None:
        print(f"resume: no checkpoint in {trainer.args.output_dir}; starting from step 0")
    eval_before = trainer.evaluate()["eval_loss"] if has_eval and checkpoint is None else None
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    # a resumed run reloads the checkpoint's counter: count only the tokens fed in this process
    tokens_before = _tokens_in_checkpoint(checkpoint) if checkpoint else trainer.state.num_input_tokens_seen
    first_step = _checkpoint_state(checkpoint).global_step if checkpoint else trainer.state.global_step
    start = time.perf_counter()
    try:
        output = trainer.train(resume_from_checkpoint=checkpoint)
    except torch.OutOfMemoryError as e:
        raise torch.OutOfMemoryError(out_of_memory_advice(trainer)) from e
    runtime = time.perf_counter() - start
    # evaluations every eval_steps in this process (a resumed state also holds the earlier process's)
    eval_in_train = sum(h.get("eval_runtime", 0.0) for h in trainer.state.log_history if h.get("step", 0) > first_step)
    tokens = int(trainer.state.num_input_tokens_seen - tokens_before)
    eval_after = trainer.evaluate()["eval_loss"] if has_eval else None
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
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()
    args = trainer.args
    checkpointing = bool(getattr(args, "gradient_checkpointing", False) or getattr(args, "activation_checkpointing", False))
    kept = last_checkpoint(args.output_dir)
    return (
        f"CUDA ran out of memory at step {trainer.state.global_step + 1} with per_device_train_batch_size="
        f"{args.per_device_train_batch_size} (x gradient_accumulation_steps={args.gradient_accumulation_steps}), "
        f"max_seq_length={trainer.args.max_length if hasattr(args, 'max_length') else args.max_seq_length} and "
        f"gradient_checkpointing={checkpointing}. Lower per_device_train_batch_size (raise "
        f"gradient_accumulation_steps to keep the effective batch), lower max_seq_length, or set "
        f"gradient_checkpointing=True; recipe='fast' sizes these to the free memory. "
        + (f"The last checkpoint is kept: {kept}; run again with resume=True to continue from it (in a notebook, "
           f"restart the runtime first: the failed step may still hold GPU memory)."
           if kept else "No checkpoint was written yet.")
    )


def _checkpoint_state(checkpoint: str):
    from transformers import TrainerState

    return TrainerState.load_from_json(os.path.join(checkpoint, "trainer_state.json"))


def _tokens_in_checkpoint(checkpoint: str) -> int:
    return int(_checkpoint_state(checkpoint).num_input_tokens_seen)
