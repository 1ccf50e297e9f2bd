"""TRL ``SFTTrainer`` with the article's arguments (cells 6-7), spelled for the installed TRL/transformers.

``sft_config_kwargs`` spells the arguments TRL 1.15 / transformers 5.17 and newer releases share, and reads the
installed signature for the one they name differently (``gradient_checkpointing`` / ``activation_checkpointing``).
Packing is TRL's ``"bfd"``; tokens are counted as non-padding input tokens. On flex attention a packed batch is
padded to ``per_device_train_batch_size * max_seq_length`` tokens, so its compiled kernel sees one shape.
"""

from __future__ import annotations

from typing import Any

from ..config.finetune import FinetuneConfig
from ..data.tokenization import prepare_training_rows
from .plan import RunPlan
from .trainers import keep_adapter_dtype, quiet_progress, sdpa_evaluating, spelled_kwargs, trainer_config_kwargs


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


def sft_trainer():
    """TRL's ``SFTTrainer`` (Unsloth's patched one where Unsloth was imported first) with ``planned_sequences``."""
    from trl import SFTTrainer

    class PackageSFTTrainer(SFTTrainer):
        def planned_sequences(self):
            ds = self.train_dataset  # tokenized and packed: a row is a sequence
            return len(ds), int(sum(len(ids) for ids in ds["input_ids"])), len(ds)

    return PackageSFTTrainer


def build_sft_trainer(
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
    """A TRL ``SFTTrainer`` for tokenized rows (``tokenization.tokenize_dataset`` output), ``sft_config_kwargs``
    showing which ``SFTConfig`` arguments cfg and plan become (``trainers.build_trainer`` builds each method's).

    Args:
        model: the LoRA model (``lora.add_lora``).
        tokenizer: its tokenizer (passed as ``processing_class``).
        train_dataset, eval_dataset: ``datasets.Dataset`` with ``input_ids`` + ``completion_mask``, or Alpaca
            columns (tokenized here, ``cfg.template``), or only ``"text"`` (TRL tokenizes it, special-token text
            parsed); eval may be None. Rows with no token to train on are dropped and counted
            (``tokenization.prepare_training_rows``).
        cfg, plan: as ``sft_config_kwargs``.
        callbacks, progress: as ``trainers.build_trainer``.

    Returns:
        The trainer; its ``train_dataset`` is already tokenized and packed.

    Raises:
        ValueError: no row of a dataset has a token to train on.
    """
    from trl import SFTConfig

    from .progress import ProgressPrinter

    train_dataset, eval_dataset = prepare_training_rows(
        train_dataset=train_dataset, eval_dataset=eval_dataset, tokenizer=tokenizer, cfg=cfg
    )
    callbacks = list(callbacks or []) + ([ProgressPrinter()] if progress else [])
    args = SFTConfig(**sft_config_kwargs(cfg, plan, has_eval=eval_dataset is not None))
    trainer = sdpa_evaluating(sft_trainer())(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        callbacks=callbacks,
        processing_class=tokenizer,
    )
    trainer.embedding_learning_rate = cfg.embedding_learning_rate
    if progress:
        quiet_progress(trainer)
    return keep_adapter_dtype(trainer, plan)
