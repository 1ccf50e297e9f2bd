"""The training methods, one record each (``METHODS``): every fact that differs by method is decided here.

A record names its TRL config, the package's trainer builder and its data format as dotted strings
(``pkgutil.resolve_name``, as TRL's scripts resolve theirs), so the config layer holds the table without importing
the layers above it. Other modules ask ``METHODS[cfg.method]``; a new method is one entry (docs/preference.md: SimPO).
"""

from __future__ import annotations

import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from .coercion import ConfigError
from .locations import GENERATED_DATASET

#: The fields only some methods read (``Method.reads``); set away from their default for another, they are refused.
GRPO_FIELDS = tuple(
    "num_generations max_completion_length temperature reward_funcs reward_weights scale_rewards "
    "mask_truncated_completions importance_sampling_level rollout_decoder prompt_column answer_column".split()
)
SIMPO_FIELDS = ("simpo_gamma", "cpo_alpha")


_NO_COUNT = {"include_num_input_tokens_seen": "no"}


@dataclass(frozen=True)
class Method:
    """One training method.

    Attributes:
        name: the ``method`` value.
        config: TRL's config class, ``"module:Class"``.
        build: the package's trainer builder, ``"module:function"`` (keyword arguments as ``trainers.build_trainer``).
        trainer: a function returning the trainer class it builds (TRL's, subclassed where it tokenizes; a preference
            method's takes ``config``).
        data_format: the data format's constructor from a ``FinetuneConfig``, ``"module:callable"``.
        trains_on: the rows it trains on, as printed: "instructions", "pairs", "rows" (KTO's labelled completions),
            "prompts".
        beta: ``beta``'s default (TRL's for the method; SimPO's from its paper); a method whose default is > 0 takes
            only ``beta`` > 0 (GRPO's 0 loads no reference).
        reference: it compares with a reference model when ``beta`` > 0 (DPO, KTO, GRPO).
        sequences_per_row: sequences of ``max_seq_length`` one row puts in a micro-batch (a pair: 2);
            ``kl_losses``: loss types under which each row also takes another row's completion (KTO's KL term):
            twice the sequences and a micro-batch of at least 2.
        liger: Liger's fused loss can serve (TRL computes the preference methods' log-probabilities itself);
            ``fused_head``: TRL's chunked LM head keeps the logits out of memory (DPO, KTO).
        reads: the fields only some methods read that this one reads (``GRPO_FIELDS``, ``SIMPO_FIELDS``,
            ``loss_type``, ``loss_weights``, ``adapter_name_or_path``).
        loss_types: the ``loss_type`` values it takes, TRL's default first; ``many_losses``: several, summed (DPO).
        long_rows, dataset_formats: the ``long_rows`` / ``dataset_format`` values it takes (and extra_datasets
            only where ``dataset_formats`` holds "sharegpt": conversations).
        summary: its block in ``run_summary.json`` ("preference", "grpo"; None: SFT's).
        generated: ``dataset`` names the package generates (nothing to find before the run).
        trl_kwargs: its own TRL config arguments from a ``FinetuneConfig`` (the shared ones: ``trainers.trainer_config_kwargs``).
        title: its name as written, where not the name in capitals ("SimPO"; ``shown``).
    """

    name: str
    config: str
    build: str
    trainer: str
    data_format: str
    trains_on: str
    beta: float = 0.1
    reference: bool = False
    sequences_per_row: int = 1
    kl_losses: tuple[str, ...] = ()
    liger: bool = False
    fused_head: bool = False
    reads: tuple[str, ...] = ("adapter_name_or_path",)
    loss_types: tuple[str, ...] = ()
    many_losses: bool = False
    long_rows: tuple[str, ...] = ("drop", "truncate")
    dataset_formats: tuple[str, ...] = ("alpaca", "messages", "auto")
    summary: str | None = "preference"
    generated: tuple[str, ...] = ()
    trl_kwargs: Callable[[Any], dict[str, Any]] = field(default=lambda cfg: {}, repr=False)
    title: str = ""

    @property
    def shown(self) -> str:
        """Its name as written in prose, cards and messages: ``title``, else the name in capitals ("DPO")."""
        return self.title or self.name.upper()

    def resolve(self, what: str):
        """The object ``self.<what>`` names (``"config"``, ``"build"``, ``"data_format"``), imported now."""
        return pkgutil.resolve_name(getattr(self, what))

    def kl_term(self, cfg) -> bool:
        """Each row also takes another row's completion in its micro-batch (KTO's KL term, its default loss)."""
        return (cfg.loss_type or self.loss_types[:1] or ("",))[0] in self.kl_losses

    def sequences(self, cfg) -> int:
        """Sequences of ``max_seq_length`` one row of ``cfg``'s run puts in a micro-batch."""
        return self.sequences_per_row * (2 if self.kl_term(cfg) else 1)

    def min_micro_batch(self, cfg) -> int:
        """The least ``per_device_train_batch_size`` (KTO's KL term pairs each prompt with another row's completion)."""
        return 2 if self.kl_term(cfg) else 1

    def reference_of(self, cfg) -> str | None:
        """What the run's log-probabilities are compared with: None for SFT, the continued adapter's frozen copy, the
        base with the adapter disabled, or none (ORPO, SimPO, GRPO's beta 0)."""
        if self.summary is None:
            return None
        if not self.reference or cfg.beta == 0:
            return f"none ({self.shown if not self.reference else 'beta 0'})"
        if cfg.adapter_name_or_path:
            return "frozen copy of the starting adapter ('ref')"
        return "base with adapters disabled"

    def check_trl_config(self, cfg) -> None:
        """Build TRL's config class from ``cfg`` (``TRAINING_ARGUMENTS``, ``self.trl_kwargs``, ``beta``) in a
        temporary folder, so TRL's and transformers' own checks (GRPO's whole groups per step, DPO's one weight per
        loss, the scheduler and optimizer names) run before any model loads (``plan.plan_run``). Its device set-up is
        skipped (``_Unplaced``): building a ``TrainingArguments`` would otherwise fix accelerate's process state
        before the run's own trainer does. Raises coercion.ConfigError: TRL's message, after the fields it reads."""
        import tempfile
        import warnings

        given = {n: getattr(cfg, n) for n in TRAINING_ARGUMENTS if getattr(cfg, n) is not None}
        kwargs = given | self.trl_kwargs(cfg) | ({"beta": cfg.beta} if self.summary else {})
        unplaced = type("Unplaced", (_Unplaced, self.resolve("config")), {})
        try:
            with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                unplaced(output_dir=tmp, report_to=[], use_cpu=True, **kwargs)  # no device, no bf16 check
        except ValueError as e:
            fields = ", ".join(f"{n}={getattr(cfg, n)!r}" for n in (*TRAINING_ARGUMENTS, *self.reads) if n in kwargs)
            raise ConfigError(f"FinetuneConfig: TRL's {self.config.split(':')[-1]} refuses {fields}: {e}") from None


#: ``FinetuneConfig`` fields every method's TRL config takes as they are (``check_trl_config``; None: TRL's default):
#: the configured batch split (one process) and the names ``TrainingArguments`` checks (scheduler, optimizer).
TRAINING_ARGUMENTS = ("per_device_train_batch_size", "gradient_accumulation_steps", "lr_scheduler_type", "optim")


class _Unplaced:
    """A ``TrainingArguments`` subclass's device set-up, skipped: one process, no device (``check_trl_config``)."""

    distributed_state = None

    @property
    def _setup_devices(self):
        import torch

        return torch.device("cpu")


_TRAIN = "tinyllama_ft.train."
#: TRL's DPO losses (``DPOConfig.loss_type``'s help: TRL 1.15 and 1.16 name the same; its config does not check them).
DPO_LOSS_TYPES = tuple(
    "sigmoid hinge ipo exo_pair nca_pair robust bco_pair sppo_hard aot aot_unpaired apo_zero apo_down discopop sft "
    "sigmoid_norm".split()
)


def _preference(name: str, config: str, trainer: str = "pairs_trainer", **record) -> Method:
    """A preference method's record: TRL's trainer of ``config`` on the package's pairs, subclassed by the
    ``preference_trainer`` function ``trainer`` (of ``config``; ``pairs_trainer``: ORPO's and CPO's)."""
    build = f"{_TRAIN}preference_trainer:build_preference_trainer"
    trainer = f"{_TRAIN}preference_trainer:{trainer}"
    fmt = "tinyllama_ft.data.preference_format:PreferenceFormat.from_config"
    return Method(name, config, build, trainer, fmt, **{"trains_on": "pairs", "sequences_per_row": 2, **record})


def _kwargs(*names: str, one_loss: bool = True) -> Callable[[Any], dict[str, Any]]:
    """TRL's arguments ``names`` from the config fields of the same names; an empty field keeps TRL's default
    (``one_loss``: a ``loss_type`` of one item passes the item)."""

    def kwargs(cfg) -> dict[str, Any]:
        values = {name: getattr(cfg, name) for name in names}
        single = {k: v[0] for k, v in values.items() if k == "loss_type" and len(v) == 1 and one_loss}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items() if v != ()} | single

    return kwargs


#: The methods by name (``FinetuneConfig.method``'s values, in this order).
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "sft",
            "trl:SFTConfig",
            f"{_TRAIN}sft_trainer:build_sft_trainer",
            f"{_TRAIN}sft_trainer:sft_trainer",
            "tinyllama_ft.data.formats:sft_format",
            "instructions",  # reads adapter_name_or_path: a second stage on a text adapter (docs/text.md)
            liger=True,
            long_rows=("drop", "truncate", "split"),
            dataset_formats=("alpaca", "text", "messages", "sharegpt", "auto"),
            summary=None,
        ),
        _preference(
            "dpo",
            "trl:DPOConfig",
            trainer="dpo_trainer",
            reference=True,
            fused_head=True,
            reads=("adapter_name_or_path", "loss_type", "loss_weights"),
            loss_types=DPO_LOSS_TYPES,
            many_losses=True,
            trl_kwargs=_kwargs("loss_type", "loss_weights", one_loss=False),
        ),
        # ORPO's and CPO's batches hold no input_ids for the trainer to count
        _preference("orpo", "trl.experimental.orpo:ORPOConfig", trl_kwargs=lambda cfg: _NO_COUNT),
        _preference(
            "kto",
            "trl:KTOConfig",
            trainer="kto_trainer",
            trains_on="rows",
            sequences_per_row=1,
            reference=True,
            fused_head=True,
            kl_losses=("kto",),
            reads=("adapter_name_or_path", "loss_type"),
            loss_types=("kto", "apo_zero_unpaired"),
            trl_kwargs=_kwargs("loss_type"),
        ),
        Method(
            "grpo",
            "trl:GRPOConfig",
            f"{_TRAIN}grpo_trainer:build_grpo_trainer",
            f"{_TRAIN}grpo_trainer:grpo_trainer_class",
            "tinyllama_ft.data.grpo_format:GrpoFormat.from_config",
            "prompts",
            beta=0.0,
            reference=True,
            reads=("adapter_name_or_path", "loss_type", *GRPO_FIELDS),
            loss_types=("dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
            long_rows=("drop",),
            summary="grpo",
            generated=(GENERATED_DATASET,),
            trl_kwargs=_kwargs(
                *"num_generations max_completion_length temperature scale_rewards importance_sampling_level".split(),
                *("mask_truncated_completions", "reward_weights", "loss_type"),
            ),
        ),
        _preference(
            "simpo",
            "trl.experimental.cpo:CPOConfig",
            beta=2.0,
            title="SimPO",
            reads=("adapter_name_or_path", *SIMPO_FIELDS),
            trl_kwargs=lambda cfg: {**_NO_COUNT, "loss_type": "simpo"} | _kwargs(*SIMPO_FIELDS)(cfg),
        ),
    )
}
#: Every field some method reads and another does not.
METHOD_FIELDS = tuple(dict.fromkeys(f for m in METHODS.values() for f in m.reads))
#: Every method's ``loss_type`` values (``FinetuneConfig.loss_type``'s items).
LOSS_TYPES = tuple(dict.fromkeys(t for m in METHODS.values() for t in m.loss_types))
