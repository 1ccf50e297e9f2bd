"""TRL's preference trainers (DPO, KTO, ORPO, SimPO) on rows the package tokenized (``data.preference_tokens``).

Each TRL trainer is subclassed only where it tokenizes: DPO's and KTO's ``_prepare_dataset`` take our id columns
(KTO's KL completions added as TRL adds them); experimental ORPO and CPO (SimPO: ``loss_type="simpo"``), which tokenize
in ``__init__``, get their columns built from ours (ORPO's loss is TRL's: its NLL term covers the prompt too, as
ORPO's authors' code). No packing, no Liger (TRL computes log-probabilities with its own LM head). The reference: TRL's frozen
``ref`` copy of a saved adapter the run starts from, else the base with adapters disabled (never a second base).
Each class gives ``trainers.training_plan`` its ``planned_sequences``: ``(sequences, tokens, rows)`` per epoch.
"""

from __future__ import annotations

import functools
import pkgutil
from typing import Any

from ..config.finetune import FinetuneConfig
from ..config.methods import METHODS
from ..data.preference_tokens import unpair
from ..models.lora import peft_wrapping
from .plan import RunPlan
from .trainers import (
    keep_adapter_dtype,
    require_peft,
    sdpa_evaluating,
    settle_reference,
    spelled_kwargs,
    trainer_config_kwargs,
)

#: The id columns each method's trainer reads (``preference_tokens.tokenize_preferences`` output).
PAIR_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids")
UNPAIRED_COLUMNS = ("prompt_ids", "completion_ids", "label")
#: Why DPO's and KTO's trainers are not evaluated before training (``loop.train_and_evaluate``): an evaluation pass
#: (the policy and the reference over every held-out pair) would only give the loss at a zero log-ratio.
STARTS_AT_REFERENCE = (
    "the policy starts as its reference, so the loss there is the one at a zero log-ratio (DPO's sigmoid loss: "
    "ln 2 = 0.6931; KTO's: 0.5); the held-out preference checks read the model before training"
)


def preference_config_kwargs(cfg: FinetuneConfig, plan: RunPlan, *, has_eval: bool) -> dict[str, Any]:
    """Keyword arguments for the installed TRL config of ``cfg.method``.

    Args:
        cfg: the run's configuration: ``beta``, the method's own fields (``methods.Method.trl_kwargs``: DPO's
            ``loss_type`` and ``loss_weights``, KTO's ``loss_type``, SimPO's ``simpo_gamma`` and ``cpo_alpha``) and
            the training fields ``trainers.trainer_config_kwargs`` reads (``max_seq_length`` is TRL's ``max_length``:
            prompt plus response, one sequence of a pair).
        plan: the run's ``RunPlan``; its Liger choice is not passed (TRL's DPO/KTO trainers compute
            log-probabilities with their own fused LM head, ORPO and CPO from the logits).
        has_eval: an eval set exists.

    Returns:
        A dict whose keys all exist in the signature of the method's config class (``Method.config``); empty ``loss_type`` / ``loss_weights``
        keep TRL's defaults.

    Raises:
        TypeError: as ``trainers.spelled_kwargs``.
    """
    m = METHODS[cfg.method]
    kwargs = trainer_config_kwargs(cfg, plan, has_eval=has_eval) | {"beta": cfg.beta} | m.trl_kwargs(cfg)
    return spelled_kwargs(kwargs, m.resolve("config"))


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
    """Our pair columns as ORPO's and CPO's (``tokenize_row``'s): prompt, and per response ids, attention mask,
    labels (-100 on the prompt)."""
    prompts = batch["prompt_ids"]
    out = {"prompt_input_ids": prompts, "prompt_attention_mask": [[1] * len(p) for p in prompts]}
    for kind in ("chosen", "rejected"):
        pairs = list(zip(prompts, batch[f"{kind}_ids"]))
        out[f"{kind}_input_ids"] = [p + a for p, a in pairs]
        out[f"{kind}_attention_mask"] = [[1] * (len(p) + len(a)) for p, a in pairs]
        out[f"{kind}_labels"] = [[-100] * len(p) + a for p, a in pairs]
    return out


class _StartsAtReference:
    """DPO's and KTO's trainers: the policy starts as its reference, which TRL computes with the adapter off."""

    evaluates_before_training = False  # loop.train_and_evaluate: the loss there is known
    evaluates_before_training_reason = STARTS_AT_REFERENCE

    def compute_loss(self, *args, **kwargs):
        with peft_wrapping():  # TRL's reference pass reads transformers' deprecated checkpointing alias
            return super().compute_loss(*args, **kwargs)


class _TokenizedInInit:
    """ORPO's and CPO's trainers, which tokenize in ``__init__``: our pair columns mapped to theirs first."""

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

    def planned_sequences(self):
        ds, kinds = self.train_dataset, ("chosen_input_ids", "rejected_input_ids")
        return 2 * len(ds), sum(len(ids) for k in kinds for ids in ds[k]), len(ds)


def _trl_trainer(config: str):
    """TRL's trainer class beside its config class (``"trl:DPOConfig"`` -> ``trl.DPOTrainer``), as TRL names them."""
    module, name = config.split(":")
    return pkgutil.resolve_name(f"{module}:{name.removesuffix('Config')}Trainer")


@functools.cache
def dpo_trainer(config: str):
    """TRL's ``DPOTrainer`` (``config``: ``"trl:DPOConfig"``) on ``PAIR_COLUMNS``."""

    class PackageDPOTrainer(_StartsAtReference, _trl_trainer(config)):
        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            _require(dataset, PAIR_COLUMNS, dataset_name)
            return dataset

        def planned_sequences(self):
            ds = self.train_dataset  # two sequences per pair: the prompt with each response
            tokens = sum(2 * len(p) + len(c) + len(r) for p, c, r in zip(*(ds[k] for k in PAIR_COLUMNS)))
            return 2 * len(ds), tokens, len(ds)

    return PackageDPOTrainer


@functools.cache
def kto_trainer(config: str):
    """TRL's ``KTOTrainer`` (``config``: ``"trl:KTOConfig"``) on ``UNPAIRED_COLUMNS``, or on ``PAIR_COLUMNS`` (unpaired
    here: ``preference_tokens.unpair``)."""

    class PackageKTOTrainer(_StartsAtReference, _trl_trainer(config)):
        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            if set(PAIR_COLUMNS) <= set(dataset.column_names):
                dataset = unpair(dataset)
            _require(dataset, UNPAIRED_COLUMNS, dataset_name)
            if self.calculate_KL:
                batch = args.per_device_train_batch_size
                dataset = dataset.map(_add_kl_completions, batched=True, batch_size=batch)
            return dataset

        def planned_sequences(self):
            # each completion, and its KL completion when KTO computes the KL term
            ds, kinds = self.train_dataset, ["completion_ids"] + (["KL_completion_ids"] if self.calculate_KL else [])
            tokens = sum(sum(len(p) for p in ds["prompt_ids"]) + sum(len(c) for c in ds[k]) for k in kinds)
            return len(kinds) * len(ds), tokens, len(ds)

    return PackageKTOTrainer


@functools.cache
def pairs_trainer(config: str):
    """TRL's trainer of ``config`` that tokenizes in ``__init__`` (experimental ORPO's; CPO's, SimPO's by its
    ``loss_type``) on ``PAIR_COLUMNS``, its loss as TRL computes it."""
    trl_trainer = _trl_trainer(config)
    return type(f"Package{trl_trainer.__name__}", (_TokenizedInInit, trl_trainer), {})


def build_preference_trainer(
    *,
    model,
    tokenizer,
    train_dataset,
    eval_dataset=None,
    cfg: FinetuneConfig,
    plan: RunPlan,
    from_adapter: bool | None = None,
    callbacks=None,
    progress: bool = True,
):
    """A TRL DPO, KTO, ORPO or CPO (SimPO) trainer (``cfg.method``'s ``Method.trainer``) for the package's LoRA model
    and tokenized rows.

    Args:
        model: the PEFT model (``lora.add_lora``, or ``adapters.load_adapter`` of a saved adapter to keep training).
        tokenizer: its tokenizer (``processing_class``).
        train_dataset, eval_dataset: ``preference_tokens.tokenize_preferences`` output: pairs
            (``PAIR_COLUMNS``; KTO unpairs them, ``preference_tokens.unpair``) or, for KTO, unpaired rows
            (``UNPAIRED_COLUMNS``); eval may be None.
        cfg, plan: as ``preference_config_kwargs``; ``plan.per_device_train_batch_size`` is the micro-batch of pairs
            (two sequences each) or of completions (KTO: with its KL completion).
        from_adapter: the model holds a saved adapter the run continues: the reference is TRL's frozen ``ref``
            copy of it (DPO, KTO). False (a fresh adapter): TRL's copy is removed and the reference is the base
            with adapters disabled. ORPO and SimPO have no reference. None: ``cfg.adapter_name_or_path`` is set.
        callbacks, progress: as ``trainers.build_trainer``.

    Returns:
        The trainer.

    Raises:
        ValueError: the model is not a PEFT model; a dataset lacks its columns.
    """
    from .progress import ProgressPrinter

    require_peft(model, "build_preference_trainer")
    m = METHODS[cfg.method]
    # the id columns only: the text columns kept beside them for the held-out checks are not TRL's
    train_dataset, eval_dataset = (
        ds.select_columns([c for c in ds.column_names if c in PAIR_COLUMNS + UNPAIRED_COLUMNS])
        if ds is not None
        else ds
        for ds in (train_dataset, eval_dataset)
    )
    args = m.resolve("config")(**preference_config_kwargs(cfg, plan, has_eval=eval_dataset is not None))
    callbacks = list(callbacks or []) + ([ProgressPrinter()] if progress else [])
    trainer = sdpa_evaluating(m.resolve("trainer")(m.config))(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        callbacks=callbacks,
        processing_class=tokenizer,
    )
    return keep_adapter_dtype(settle_reference(trainer, cfg, from_adapter=from_adapter, progress=progress), plan)
