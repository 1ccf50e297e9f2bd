"""TRL ``SFTTrainer`` with the article's arguments (cells 6-7), spelled for the installed TRL/transformers.

``sft_config_kwargs`` spells the arguments TRL 1.15 / transformers 5.17 and newer releases share, and reads the
installed signature for the one they name differently (``gradient_checkpointing`` / ``activation_checkpointing``).
Packing is TRL's ``"bfd"``; tokens are counted as non-padding input tokens. On flex attention a packed batch is
padded to ``per_device_train_batch_size * max_seq_length`` tokens, so its compiled kernel sees one shape.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

from ..config.finetune import FinetuneConfig
from ..data.tokenization import prepare_training_rows
from ..machine.kernel import in_interactive_kernel
from ..machine.paths import expand_path
from ..models.attention import sdpa_outside_training
from ..models.model_card import SettledCard, card_facts
from ..models.precision import trainer_precision_flags
from .plan import RunPlan

#: Arguments renamed between the allowed releases (transformers 5.17 and the newest): our name -> spellings, newest
#: first.
RENAMED_ARGUMENTS = {
    "gradient_checkpointing": ("activation_checkpointing", "gradient_checkpointing"),  # transformers 5.2x
    "gradient_checkpointing_kwargs": ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"),
}


def _accepts(cls, name: str) -> bool:
    return name in inspect.signature(cls.__init__).parameters


def trainer_config_kwargs(cfg: FinetuneConfig, plan: RunPlan, *, has_eval: bool) -> dict[str, Any]:
    """The arguments every trainer of the package takes (``cfg``, ``plan``, ``has_eval`` as ``sft_config_kwargs``), in
    our spelling: ``transformers.TrainingArguments`` fields plus TRL's ``max_length`` and ``dataset_num_proc``
    (``spelled_kwargs`` spells them for the installed class)."""
    kwargs: dict[str, Any] = dict(
        output_dir=expand_path(cfg.output_dir),  # cfg expands it; a field set after construction is not
        per_device_train_batch_size=plan.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=plan.gradient_accumulation_steps,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        lr_scheduler_type=cfg.lr_scheduler_type,
        optim=plan.optim,
        seed=cfg.seed,
        logging_steps=cfg.logging_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        report_to=[] if cfg.report_to == "none" else [cfg.report_to],
        run_name=cfg.wandb_run_name,
        gradient_checkpointing=plan.gradient_checkpointing,
        dataset_num_proc=cfg.dataset_num_proc,
        max_length=cfg.max_seq_length,
        warmup_steps=cfg.warmup_ratio,  # transformers 5: warmup_steps below 1 is a fraction of the total steps
        include_num_input_tokens_seen="non_padding",
        eval_strategy="steps" if has_eval else "no",
        **trainer_precision_flags(plan.dtype, cpu_autocast_bf16=plan.cpu_autocast_bf16),
    )
    if plan.world_size > 1:  # DDP: one loss over the tokens of all processes; every LoRA weight gets a gradient
        kwargs.update(average_tokens_across_devices=True, ddp_find_unused_parameters=False)
    if plan.device == "cpu":  # transformers accepts bf16 autocast on a CPU only when told it trains there
        kwargs["use_cpu"] = True
    if plan.gradient_checkpointing:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if has_eval:
        kwargs["eval_steps"] = cfg.eval_steps
    return kwargs


def spelled_kwargs(kwargs: dict[str, Any], config_cls) -> dict[str, Any]:
    """A new dict of ``kwargs`` (our names -> values) with each of ``RENAMED_ARGUMENTS`` spelled as the installed TRL
    config class ``config_cls`` (``SFTConfig``, ``DPOConfig``, ...) spells it: every key in its signature. Raises
    TypeError: the installed class has no spelling for one of the arguments (too old a TRL)."""
    kwargs = dict(kwargs)
    for name, spellings in RENAMED_ARGUMENTS.items():
        if name in kwargs:
            kwargs[next((s for s in spellings if _accepts(config_cls, s)), name)] = kwargs.pop(name)
    unknown = [k for k in kwargs if not _accepts(config_cls, k)]
    if unknown:
        raise TypeError(f"the installed {config_cls.__name__} takes none of {unknown}: upgrade trl/transformers")
    return kwargs


def sft_config_kwargs(cfg: FinetuneConfig, plan: RunPlan, *, has_eval: bool, config_cls=None) -> dict[str, Any]:
    """Keyword arguments for the installed ``trl.SFTConfig``: what to train from ``cfg``, how from ``plan``.

    Args:
        cfg: the run's configuration (the article's values by default): schedule, optimizer settings,
            packing, steps, saving, logging.
        plan: the run's ``RunPlan``: micro-batch split, checkpointing, optimizer name, Liger, the
            mixed-precision flags (``plan.dtype``, ``plan.cpu_autocast_bf16``), the device and the number
            of processes (``world_size`` > 1: the loss averaged over all processes' tokens).
        has_eval: an eval set exists (evaluation every ``eval_steps`` steps, else none).
        config_cls: the class whose signature decides the spelling; default ``trl.SFTConfig``.

    Returns:
        A dict whose keys all exist in ``config_cls.__init__``'s signature.

    Raises:
        TypeError: the installed class has no spelling for one of the arguments (too old a TRL).
    """
    if config_cls is None:
        from trl import SFTConfig as config_cls
    kwargs = trainer_config_kwargs(cfg, plan, has_eval=has_eval)
    kwargs.update(
        dataset_text_field="text",
        completion_only_loss=cfg.completion_only_loss,  # explicit: None enables it only for prompt/completion columns
        packing=cfg.packing,
    )
    if plan.use_liger_kernel:  # TRL applies Liger to the model and skips the logits-based metrics
        kwargs["use_liger_kernel"] = True
    if cfg.packing:
        kwargs["packing_strategy"] = cfg.packing_strategy
        if cfg.packing_strategy != "wrapped" and plan.attn_implementation == "flex_attention":
            # every padding-free batch the same length: flex attention's kernel compiles once (docs/speed.md)
            kwargs["pad_to_multiple_of"] = plan.per_device_train_batch_size * cfg.max_seq_length
    return spelled_kwargs(kwargs, config_cls)


def build_trainer(
    *,
    model,
    tokenizer,
    train_dataset,
    eval_dataset=None,
    cfg: FinetuneConfig,
    plan: RunPlan,
    callbacks=None,
    progress: bool = True,
):
    """A TRL ``SFTTrainer`` for tokenized rows (``tokenization.tokenize_dataset`` output); for dpo, orpo or kto
    ``preference_trainer.build_preference_trainer``'s on pairs, for grpo ``grpo_trainer.build_grpo_trainer``'s on
    prompt rows (``eval_dataset`` unused). ``sft_config_kwargs`` shows which ``SFTConfig`` arguments cfg and plan become.

    Args:
        model: the LoRA model (``lora.add_lora``).
        tokenizer: its tokenizer (passed as ``processing_class``).
        train_dataset, eval_dataset: ``datasets.Dataset`` with ``input_ids`` + ``completion_mask``, or Alpaca
            columns (tokenized here, ``cfg.template``), or only ``"text"`` (TRL tokenizes it, special-token text
            parsed); eval may be None. Rows with no token to train on are dropped and counted
            (``tokenization.prepare_training_rows``). A preference method: ``preference_tokens.tokenize_preferences``
            output (the reference is a frozen copy of the adapter when ``cfg.adapter_name_or_path`` is set).
        cfg, plan: as ``sft_config_kwargs``.
        callbacks: extra ``transformers.TrainerCallback`` objects (``model_card.SettledCard`` is always added: TRL's
            card in ``output_dir`` names the base's Hub id, the data set and the method).
        progress: add ``progress.ProgressPrinter`` (a line per logging step and per evaluation); outside an
            interactive notebook it replaces transformers' progress bar and printed log dicts (``quiet_progress``).

    Returns:
        The trainer; its ``train_dataset`` is already tokenized and packed.

    Raises:
        ValueError: no row of a dataset has a token to train on.
    """
    callbacks = [*(callbacks or []), SettledCard(card_facts(cfg.to_dict()))]
    if cfg.method != "sft":  # GRPO: prompt rows, no eval_dataset (grpo_checks score held-out answers); else: pairs
        from .grpo_trainer import build_grpo_trainer
        from .preference_trainer import build_preference_trainer

        grpo = cfg.method == "grpo"
        return (build_grpo_trainer if grpo else build_preference_trainer)(
            model=model,
            tokenizer=tokenizer,
            train_dataset=train_dataset,
            cfg=cfg,
            plan=plan,
            from_adapter=bool(cfg.adapter_name_or_path),
            callbacks=callbacks,
            progress=progress,
            **({} if grpo else {"eval_dataset": eval_dataset}),
        )
    from trl import SFTConfig, SFTTrainer

    from .progress import ProgressPrinter

    train_dataset, eval_dataset = prepare_training_rows(
        train_dataset=train_dataset, eval_dataset=eval_dataset, tokenizer=tokenizer, cfg=cfg
    )
    callbacks = list(callbacks or []) + ([ProgressPrinter()] if progress else [])
    args = SFTConfig(**sft_config_kwargs(cfg, plan, has_eval=eval_dataset is not None))
    trainer = sdpa_evaluating(SFTTrainer)(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        callbacks=callbacks,
        processing_class=tokenizer,
    )
    if progress:
        quiet_progress(trainer)
    return trainer


def quiet_progress(trainer) -> None:
    """Leave ``progress.ProgressPrinter``'s lines the only progress outside an interactive notebook: transformers'
    bar and log dicts would interleave with them there; an interactive notebook keeps its live table."""
    if in_interactive_kernel():
        return
    from transformers.trainer import DEFAULT_PROGRESS_CALLBACK  # ProgressCallback, or in a kernel the table's
    from transformers.trainer_callback import PrinterCallback

    for kind in (DEFAULT_PROGRESS_CALLBACK, PrinterCallback):
        trainer.remove_callback(kind)


def sdpa_evaluating(trainer_cls):
    """``trainer_cls`` (TRL's ``SFTTrainer``, Unsloth's patched one too) evaluating on SDPA attention, unpadded:
    inductor's no-grad recompile of flex attention found no GPU kernel (``attention.py``). Packed eval rows stay
    apart through their ``position_ids`` (tests/test_trained_model.py compares the two eval losses)."""

    class Trainer(trainer_cls):
        def evaluation_loop(self, *args, **kwargs):
            with sdpa_outside_training(self.model):
                return super().evaluation_loop(*args, **kwargs)

        def get_eval_dataloader(self, *args, **kwargs):
            # flex attention's one padded training length (``pad_to_multiple_of``) buys nothing on SDPA: unpadded
            collator = self.data_collator
            if getattr(collator, "pad_to_multiple_of", None) and dataclasses.is_dataclass(collator):
                self.data_collator = dataclasses.replace(collator, pad_to_multiple_of=None)
            try:
                return super().get_eval_dataloader(*args, **kwargs)
            finally:
                self.data_collator = collator

    Trainer.__name__ = Trainer.__qualname__ = trainer_cls.__name__
    return Trainer


def training_plan(trainer) -> dict[str, int]:
    """Optimizer steps and tokens the trainer will run, before it runs.

    Returns:
        ``{"sequences": packed training sequences per epoch (a preference trainer's: two per pair, a KTO
        completion with its KL completion; GRPO's: ``num_generations`` completions per prompt), "tokens_per_epoch":
        tokens in them (GRPO: each completion at its ``max_completion_length``, the most it can be), "steps_per_epoch": optimizer steps
        per epoch, "planned_steps": steps the run will take, "planned_tokens": tokens it will feed (at most)}``.
    """
    args = trainer.args
    ds = trainer.train_dataset
    if "input_ids" in ds.column_names:
        sequences, tokens = len(ds), int(sum(len(ids) for ids in ds["input_ids"]))
    elif hasattr(trainer, "reward_funcs"):  # GRPO: prompt rows, the completions sampled in training
        from .grpo_trainer import grpo_sequences

        sequences, tokens = grpo_sequences(trainer)
        ds = range(sequences)  # steps count completions: num_generations per prompt
    else:
        from .preference_trainer import preference_sequences

        sequences, tokens = preference_sequences(ds)
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(1, args.world_size)
    steps_per_epoch = max(1, math.ceil(len(ds) / per_step))
    planned = args.max_steps if args.max_steps > 0 else math.ceil(steps_per_epoch * args.num_train_epochs)
    planned_tokens = min(tokens * math.ceil(planned / steps_per_epoch), round(tokens * planned / steps_per_epoch))
    return {
        "sequences": sequences,
        "tokens_per_epoch": tokens,
        "steps_per_epoch": steps_per_epoch,
        "planned_steps": planned,
        "planned_tokens": int(planned_tokens),
    }
