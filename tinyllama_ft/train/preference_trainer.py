"""TRL's preference trainers (DPO, KTO, ORPO) on rows the package tokenized (``data.preference_tokens``).

Each TRL trainer is subclassed only where it tokenizes: DPO's and KTO's ``_prepare_dataset`` take our id columns
(KTO's KL completions added as TRL adds them); experimental ORPO, which tokenizes in ``__init__``, gets its columns
built from ours (its loss is TRL's: the NLL term covers the prompt too, as ORPO's authors' code). No packing, no
Liger (TRL computes log-probabilities with its own LM head). The reference: TRL's frozen ``ref`` copy of a saved adapter
the run starts from, else the base with adapters disabled (never a second base).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..config.finetune import FinetuneConfig
from ..data.preference_tokens import unpair
from ..models.lora import peft_wrapping
from .plan import RunPlan
from .sft_trainer import quiet_progress, sdpa_evaluating, spelled_kwargs, trainer_config_kwargs

#: The id columns each method's trainer reads (``preference_tokens.tokenize_preferences`` output).
PAIR_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids")
UNPAIRED_COLUMNS = ("prompt_ids", "completion_ids", "label")
#: Each method's TRL config class: (module, name).
CONFIG_CLASSES = {
    "dpo": ("trl", "DPOConfig"),
    "kto": ("trl", "KTOConfig"),
    "orpo": ("trl.experimental.orpo", "ORPOConfig"),
}
#: The name TRL gives the frozen copy of a PEFT model's ``default`` adapter (its DPO and KTO trainers).
REF_ADAPTER = "ref"
#: Why DPO's and KTO's trainers are not evaluated before training (``loop.train_and_evaluate``): an evaluation pass
#: (the policy and the reference over every held-out pair) would only give the loss at a zero log-ratio.
STARTS_AT_REFERENCE = (
    "the policy starts as its reference, so the loss there is the one at a zero log-ratio (DPO's sigmoid loss: "
    "ln 2 = 0.6931; KTO's: 0.5); the held-out preference checks read the model before training"
)


def config_class(method: str):
    """The installed TRL config class of ``method`` ("dpo", "kto", "orpo"; ORPO from ``trl.experimental.orpo``). Raises
    ValueError: ``method`` is not a preference method."""
    if method not in CONFIG_CLASSES:
        raise ValueError(f"method={method!r} is not a preference method (dpo, kto, orpo)")
    module, name = CONFIG_CLASSES[method]
    return getattr(importlib.import_module(module), name)


def preference_config_kwargs(cfg: FinetuneConfig, plan: RunPlan, *, has_eval: bool, config_cls=None) -> dict[str, Any]:
    """Keyword arguments for the installed TRL config of ``cfg.method``.

    Args:
        cfg: the run's configuration: ``method``, ``beta``, ``loss_type``, ``loss_weights`` and the training fields
            ``sft_trainer.trainer_config_kwargs`` reads (``max_seq_length`` is TRL's ``max_length``: prompt plus
            response, one sequence of a pair).
        plan: the run's ``RunPlan``; its Liger choice is not passed (TRL's DPO/KTO trainers compute
            log-probabilities with their own fused LM head, ORPO from the logits).
        has_eval: an eval set exists.
        config_cls: the class whose signature decides the spelling; default ``config_class(cfg.method)``.

    Returns:
        A dict whose keys all exist in ``config_cls.__init__``'s signature. ``loss_type`` empty keeps TRL's
        default; ``loss_weights`` empty, TRL's equal weights.

    Raises:
        ValueError: ``cfg.method`` is "sft".
        TypeError: as ``sft_trainer.spelled_kwargs``.
    """
    config_cls = config_cls or config_class(cfg.method)
    kwargs = trainer_config_kwargs(cfg, plan, has_eval=has_eval)
    kwargs["beta"] = cfg.beta
    if cfg.method == "dpo" and cfg.loss_type:
        kwargs["loss_type"] = list(cfg.loss_type)
    if cfg.method == "dpo" and cfg.loss_weights:
        kwargs["loss_weights"] = list(cfg.loss_weights)
    if cfg.method == "kto" and cfg.loss_type:
        kwargs["loss_type"] = cfg.loss_type[0]
    if cfg.method == "orpo":  # its batches hold chosen_input_ids / rejected_input_ids, no input_ids to count
        kwargs["include_num_input_tokens_seen"] = "no"
    return spelled_kwargs(kwargs, config_cls)


def _require(dataset, columns: tuple[str, ...], name: str) -> None:
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{name} dataset: no {missing} column (columns: {dataset.column_names}): tokenize the rows with "
            "data.preference_tokens.tokenize_preferences"
        )


def _add_kl_completions(batch: dict[str, list]) -> dict[str, list]:
    """TRL's KL completions: within a micro-batch, row i's KL completion is row i-1's (the first takes the last)."""
    batch["KL_completion_ids"] = batch["completion_ids"][-1:] + batch["completion_ids"][:-1]
    return batch


def _orpo_columns(batch: dict[str, list]) -> dict[str, list]:
    """Our pair columns as ORPO's (``tokenize_row``'s): prompt, and per response ids, attention mask, labels
    (-100 on the prompt)."""
    prompts = batch["prompt_ids"]
    out = {"prompt_input_ids": prompts, "prompt_attention_mask": [[1] * len(p) for p in prompts]}
    for kind in ("chosen", "rejected"):
        pairs = list(zip(prompts, batch[f"{kind}_ids"]))
        out[f"{kind}_input_ids"] = [p + a for p, a in pairs]
        out[f"{kind}_attention_mask"] = [[1] * (len(p) + len(a)) for p, a in pairs]
        out[f"{kind}_labels"] = [[-100] * len(p) + a for p, a in pairs]
    return out


def preference_sequences(dataset) -> tuple[int, int]:
    """``(sequences, tokens)`` a preference trainer's prepared ``train_dataset`` feeds per epoch: DPO's two sequences
    per pair (the prompt with each response), KTO's completion (and its KL completion), ORPO's chosen and rejected
    sequences. Raises ValueError: the dataset holds none of those columns."""
    columns = dataset.column_names
    if "chosen_ids" in columns:  # DPO
        lengths = [2 * len(p) + len(c) + len(r) for p, c, r in zip(*(dataset[k] for k in PAIR_COLUMNS))]
        return 2 * len(dataset), sum(lengths)
    if "completion_ids" in columns:  # KTO, with its KL completions when it computes the KL term
        kinds = ["completion_ids"] + (["KL_completion_ids"] if "KL_completion_ids" in columns else [])
        prompts = [len(p) for p in dataset["prompt_ids"]]
        tokens = sum(sum(prompts) + sum(len(c) for c in dataset[k]) for k in kinds)
        return len(kinds) * len(dataset), tokens
    if "chosen_input_ids" in columns:  # ORPO
        kinds = ("chosen_input_ids", "rejected_input_ids")
        return 2 * len(dataset), sum(len(ids) for k in kinds for ids in dataset[k])
    raise ValueError(f"preference_sequences: no preference id columns in {columns}")


class _StartsAtReference:
    """DPO's and KTO's trainers: the policy starts as its reference, which TRL computes with the adapter off."""

    evaluates_before_training = False  # loop.train_and_evaluate: the loss there is known
    evaluates_before_training_reason = STARTS_AT_REFERENCE

    def compute_loss(self, *args, **kwargs):
        with peft_wrapping():  # TRL's reference pass reads transformers' deprecated checkpointing alias
            return super().compute_loss(*args, **kwargs)


def trainer_class(method: str):
    """The package's subclass of TRL's trainer for ``method``, taking rows tokenized by the package.

    Returns:
        A class taking TRL's arguments: DPO's ``train_dataset`` holds ``PAIR_COLUMNS``, KTO's ``UNPAIRED_COLUMNS``,
        ORPO's ``PAIR_COLUMNS`` (turned into ORPO's own columns before TRL's ``__init__`` maps them).

    Raises:
        ValueError: ``method`` is not a preference method.
    """
    if method == "dpo":
        from trl import DPOTrainer

        class PackageDPOTrainer(_StartsAtReference, DPOTrainer):
            def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
                _require(dataset, PAIR_COLUMNS, dataset_name)
                return dataset

        return PackageDPOTrainer
    if method == "kto":
        from trl import KTOTrainer

        class PackageKTOTrainer(_StartsAtReference, KTOTrainer):
            def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
                _require(dataset, UNPAIRED_COLUMNS, dataset_name)
                if self.calculate_KL:
                    batch = args.per_device_train_batch_size
                    dataset = dataset.map(_add_kl_completions, batched=True, batch_size=batch)
                return dataset

        return PackageKTOTrainer
    if method == "orpo":
        from trl.experimental.orpo import ORPOTrainer

        class PackageORPOTrainer(ORPOTrainer):
            def __init__(self, *args, train_dataset, eval_dataset=None, **kwargs):
                datasets = []
                for name, ds in (("train", train_dataset), ("eval", eval_dataset)):
                    if ds is not None:
                        _require(ds, PAIR_COLUMNS, name)
                        ds = ds.map(_orpo_columns, batched=True, remove_columns=ds.column_names)
                    datasets.append(ds)
                super().__init__(*args, train_dataset=datasets[0], eval_dataset=datasets[1], **kwargs)

            def tokenize_row(self, feature, model=None):
                return {}  # already tokenized: the row keeps the columns _orpo_columns made

        return PackageORPOTrainer
    raise ValueError(f"method={method!r} is not a preference method (dpo, kto, orpo)")


def build_preference_trainer(
    *,
    model,
    tokenizer,
    train_dataset,
    eval_dataset=None,
    cfg: FinetuneConfig,
    plan: RunPlan,
    from_adapter: bool = False,
    callbacks=None,
    progress: bool = True,
):
    """A TRL DPO, KTO or ORPO trainer (``cfg.method``) for the package's LoRA model and tokenized rows.

    Args:
        model: the PEFT model (``lora.add_lora``, or ``adapters.load_adapter`` of a saved adapter to keep training).
        tokenizer: its tokenizer (``processing_class``).
        train_dataset, eval_dataset: ``preference_tokens.tokenize_preferences`` output: pairs
            (``PAIR_COLUMNS``; KTO unpairs them, ``preference_tokens.unpair``) or, for KTO, unpaired rows
            (``UNPAIRED_COLUMNS``); eval may be None.
        cfg, plan: as ``preference_config_kwargs``; ``plan.per_device_train_batch_size`` is the micro-batch of pairs
            (DPO, ORPO: two sequences each) or of completions (KTO: with its KL completion).
        from_adapter: the model holds a saved adapter the run continues: the reference is TRL's frozen ``ref``
            copy of it (DPO, KTO). False (a fresh adapter): TRL's copy is removed and the reference is the base
            with adapters disabled. ORPO has no reference.
        callbacks, progress: as ``sft_trainer.build_trainer``.

    Returns:
        The trainer.

    Raises:
        ValueError: ``cfg.method`` is "sft"; the model is not a PEFT model; a dataset lacks its columns; KTO's KL
            term with a micro-batch of one (it pairs each prompt with another row's completion).
    """
    from peft import PeftModel

    from .progress import ProgressPrinter

    if cfg.method == "sft":
        raise ValueError("build_preference_trainer: method='sft' is sft_trainer.build_trainer's")
    if not isinstance(model, PeftModel):
        raise ValueError(
            f"build_preference_trainer: the model is a {type(model).__name__}, not a PEFT model: add an adapter "
            "(lora.add_lora) or load one (adapters.load_adapter); the reference is the base with it disabled"
        )
    # the id columns only: the text columns kept beside them for the held-out checks are not TRL's
    train_dataset, eval_dataset = (
        ds.select_columns([c for c in ds.column_names if c in PAIR_COLUMNS + UNPAIRED_COLUMNS])
        if ds is not None
        else ds
        for ds in (train_dataset, eval_dataset)
    )
    if cfg.method == "kto":
        if cfg.kto_kl_term and plan.per_device_train_batch_size < 2:
            raise ValueError(
                f"method='kto': the micro-batch is {plan.per_device_train_batch_size} completion; KTO's KL term "
                "pairs each prompt with another row's completion in it: use per_device_train_batch_size >= 2"
            )
        train_dataset, eval_dataset = (
            unpair(ds) if ds is not None and "chosen_ids" in ds.column_names else ds
            for ds in (train_dataset, eval_dataset)
        )
    args = config_class(cfg.method)(**preference_config_kwargs(cfg, plan, has_eval=eval_dataset is not None))
    callbacks = list(callbacks or []) + ([ProgressPrinter()] if progress else [])
    trainer = sdpa_evaluating(trainer_class(cfg.method))(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        callbacks=callbacks,
        processing_class=tokenizer,
    )
    return settle_reference(trainer, from_adapter=from_adapter, progress=progress)


def settle_reference(trainer, *, from_adapter: bool, progress: bool):
    """A just-built TRL trainer of a PEFT model, its reference settled: TRL's frozen ``ref`` copy of the adapter is
    kept when the run continues a saved adapter, removed for a fresh one (whose copy is the base: the reference is
    then the base with adapters disabled); with ``progress``, ``sft_trainer.quiet_progress``.

    Returns:
        The trainer.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    if not from_adapter and REF_ADAPTER in model.peft_config:
        model.delete_adapter(REF_ADAPTER)
    if progress:
        quiet_progress(trainer)
    return trainer


def reference_kind(trainer) -> str:
    """What the trainer's log-probability reference is, for the plan and the summary.

    Returns:
        ``"none (ORPO)"``, ``"frozen copy of the starting adapter ('ref')"``, ``"base with adapters disabled"`` or
        ``"separate reference model"``.
    """
    if not hasattr(trainer, "ref_model"):
        return "none (ORPO)"
    if trainer.ref_model is not None:
        return "separate reference model"
    model = trainer.accelerator.unwrap_model(trainer.model)
    if REF_ADAPTER in getattr(model, "peft_config", {}):
        return f"frozen copy of the starting adapter ({REF_ADAPTER!r})"
    return "base with adapters disabled"
