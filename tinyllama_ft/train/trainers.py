"""What every trainer of the package shares, and ``build_trainer``, which builds each method's from its record.

``build_trainer`` resolves ``methods.METHODS[cfg.method].build`` (``sft_trainer``, ``preference_trainer``,
``grpo_trainer``), so no trainer module builds another's. The shared part: the ``TrainingArguments`` every method
takes (``trainer_config_kwargs``) spelled for the installed TRL (``spelled_kwargs``), the progress lines, SDPA
evaluation, the reference settled, and ``training_plan`` (each package trainer's ``planned_sequences``).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

from ..config.finetune import FinetuneConfig
from ..config.methods import METHODS
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


def build_trainer(*, cfg: FinetuneConfig, **kwargs):
    """The trainer of ``cfg.method``, built by its record's builder (``methods.Method.build``): TRL's ``SFTTrainer``
    (``sft_trainer.build_sft_trainer``), a preference trainer (``preference_trainer.build_preference_trainer``) or
    GRPO's (``grpo_trainer.build_grpo_trainer``: prompt rows, ``eval_dataset`` unused: ``grpo_checks`` score
    held-out answers). ``model_card.SettledCard`` is always among the callbacks (TRL's card in ``output_dir`` names
    the base's Hub id, the data set and the method); a saved adapter (``cfg.adapter_name_or_path``) is continued.

    Args:
        cfg: the run's configuration.
        kwargs: the builder's: ``model``, ``tokenizer``, ``train_dataset``, ``eval_dataset`` (may be None), ``plan``,
            ``callbacks`` (extra ``transformers.TrainerCallback`` objects), ``progress`` (a line per logging step;
            outside an interactive notebook instead of transformers' bar: ``quiet_progress``).

    Returns:
        The trainer; its ``train_dataset`` already tokenized (SFT: packed).

    Raises:
        As the builder's (ValueError: no row of a dataset has a token to train on; rows of another form).
    """
    kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), SettledCard(card_facts(cfg.to_dict()))]
    return METHODS[cfg.method].resolve("build")(cfg=cfg, **kwargs)


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
        embedding_learning_rate = None  # set by build_sft_trainer: the whole modules' own rate (whole_module_groups)

        def create_optimizer(self, *args, **kwargs):
            fresh = self.optimizer is None
            optimizer = super().create_optimizer(*args, **kwargs)
            if fresh and self.embedding_learning_rate is not None:
                whole_module_groups(optimizer, self.model, self.embedding_learning_rate)
            return optimizer

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


def keep_adapter_dtype(trainer, plan: RunPlan):
    """``trainer`` (just built by TRL) with its model's trainable weights cast back to ``plan.adapter_dtype`` where
    TRL changed them (its QLoRA cast of a 4-bit model's adapter to bfloat16, which fp16's GradScaler refuses at the
    first optimizer step); nothing when ``plan.adapter_dtype`` is None. Before any step: the optimizer is not built.

    Returns:
        The trainer.
    """
    if plan.adapter_dtype:
        import torch

        dtype = getattr(torch, plan.adapter_dtype)
        for param in trainer.model.parameters():
            if param.requires_grad and param.dtype != dtype and param.dtype.is_floating_point:
                param.data = param.data.to(dtype)
    return trainer


#: The name TRL gives the frozen copy of a PEFT model's ``default`` adapter (its DPO, KTO and GRPO trainers).
REF_ADAPTER = "ref"


def settle_reference(trainer, cfg: FinetuneConfig, *, from_adapter: bool | None, progress: bool):
    """A just-built TRL trainer of a PEFT model, its reference settled: TRL's frozen ``ref`` copy of the adapter is
    kept when the run continues a saved adapter (``from_adapter``; None: ``cfg.adapter_name_or_path`` is set), removed
    for a fresh one (whose copy is the base: the reference is then the base with adapters disabled); with
    ``progress``, ``quiet_progress``.

    Returns:
        The trainer.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    continued = bool(cfg.adapter_name_or_path) if from_adapter is None else from_adapter
    if not continued and REF_ADAPTER in model.peft_config:
        model.delete_adapter(REF_ADAPTER)
    if progress:
        quiet_progress(trainer)
    return trainer


def require_peft(model, who: str) -> None:
    """Raise ValueError unless ``model`` is a PEFT model (``who``: the builder, for the message)."""
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        raise ValueError(
            f"{who}: the model is a {type(model).__name__}, not a PEFT model: add an adapter (lora.add_lora) or load "
            "one (adapters.load_adapter)"
        )


def whole_module_groups(optimizer, model, learning_rate: float) -> int:
    """Move the trainable parameters of the modules PEFT trains in full (``modules_to_save``: embed_tokens /
    lm_head) out of ``optimizer``'s groups into groups of their own at ``learning_rate`` (each keeping its group's
    other settings, weight decay included), before any step; returns how many parameters moved."""
    whole = {id(p) for n, p in model.named_parameters() if p.requires_grad and "modules_to_save" in n}
    moved = []
    for group in list(optimizer.param_groups):
        mine = [p for p in group["params"] if id(p) in whole]
        if mine:
            group["params"] = [p for p in group["params"] if id(p) not in whole]
            moved.append({**group, "params": mine, "lr": learning_rate, "initial_lr": learning_rate})
    for group in moved:
        optimizer.add_param_group(group)
    optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
    return sum(len(g["params"]) for g in moved)


def training_plan(trainer) -> dict[str, int]:
    """Optimizer steps and tokens the trainer (one the package built: its ``planned_sequences``) will run, before it
    runs.

    Returns:
        ``{"sequences": packed training sequences per epoch (a preference trainer's: two per pair, a KTO
        completion with its KL completion; GRPO's: ``num_generations`` completions per prompt), "tokens_per_epoch":
        tokens in them (GRPO: each completion at its ``max_completion_length``, the most it can be), "steps_per_epoch": optimizer steps
        per epoch, "planned_steps": steps the run will take, "planned_tokens": tokens it will feed (at most)}``.
    """
    args = trainer.args
    sequences, tokens, items = trainer.planned_sequences()
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(1, args.world_size)
    steps_per_epoch = max(1, math.ceil(items / per_step))
    planned = args.max_steps if args.max_steps > 0 else math.ceil(steps_per_epoch * args.num_train_epochs)
    planned_tokens = min(tokens * math.ceil(planned / steps_per_epoch), round(tokens * planned / steps_per_epoch))
    return {
        "sequences": sequences,
        "tokens_per_epoch": tokens,
        "steps_per_epoch": steps_per_epoch,
        "planned_steps": planned,
        "planned_tokens": int(planned_tokens),
    }
