"""TRL's ``GRPOTrainer`` from the package's configuration, on its LoRA model and prompt rows (``data.grpo_prompts``).

The GRPO fields give the group, completion length, temperature, beta and loss; the rest is every trainer's
(``trainers.trainer_config_kwargs``). Each optimizer step's completions must hold whole groups (TRL's config checks it,
at plan time: ``methods.Method.check_trl_config``). With beta > 0 the
reference is TRL's frozen copy of a saved adapter the run continues, else the base with adapters disabled. TRL logs
each reward's mean per step (``rewards/<name>/mean``): ``RewardProgress`` prints them, ``reward_history`` collects them.
The trainer is TRL's, subclassed only to log ``zero_std_groups`` from the rewards TRL computes (``zero_std_share``).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Sequence

from ..config.finetune import FinetuneConfig
from ..config.methods import METHODS
from .plan import RunPlan
from .progress import ProgressPrinter
from .grpo_rollout import ForgetFusedCopies, fused_rollout, why_not_fused
from .rewards import resolve_rewards
from .trainers import keep_adapter_dtype, require_peft, settle_reference, spelled_kwargs, trainer_config_kwargs

#: What TRL's GRPO logs per step besides the loss, read for the step line and ``reward_history``.
REWARD = "reward"
ZERO_STD = "frac_reward_zero_std"
LENGTH = "completions/mean_length"
#: The share of groups whose summed rewards are all equal within ``EQUAL_REWARDS_RTOL`` (``zero_std_share``), logged
#: beside TRL's ``frac_reward_zero_std``, which tests the float32 spread for 0 and misses equal sums of weighted rewards.
ZERO_STD_GROUPS = "zero_std_groups"
#: A group's summed rewards are "all the same" when their standard deviation is at most this times max(1, |mean|).
EQUAL_REWARDS_RTOL = 1e-6


def zero_std_share(rewards_per_func, reward_weights, num_generations: int) -> float:
    """The share of groups whose completions all scored the same: summed rewards whose (population) standard deviation
    is at most ``EQUAL_REWARDS_RTOL`` x max(1, |their mean|). Such a group has no advantage to learn from.

    Args:
        rewards_per_func: a tensor ``(completions, rewards)``, NaN where a reward returned None (TRL's
            ``_calculate_rewards``: every process's completions, whole groups of ``num_generations`` in order).
        reward_weights: a tensor ``(rewards,)`` (TRL's ``reward_weights``).
        num_generations: the group size.

    Returns:
        A share in [0, 1]; a group no reward scored counts as equal (nothing to learn); 0.0 for no completions.

    Raises:
        ValueError: the completions are not whole groups.
    """
    import torch

    if rewards_per_func.shape[0] % num_generations:
        raise ValueError(f"{rewards_per_func.shape[0]} completions are not whole groups of {num_generations}")
    if rewards_per_func.shape[0] == 0:
        return 0.0
    values = rewards_per_func.double()
    summed = (values * reward_weights.to(values.device, torch.float64)).nansum(dim=1)
    summed[torch.isnan(values).all(dim=1)] = torch.nan  # unscored by every reward: out of its group, as TRL does
    groups = summed.view(-1, num_generations)
    mean = torch.nanmean(groups, dim=1, keepdim=True)
    std = torch.nanmean((groups - mean) ** 2, dim=1).sqrt()
    scale = mean.squeeze(1).abs().clamp(min=1.0)
    equal = torch.isnan(std) | (std <= EQUAL_REWARDS_RTOL * scale)
    return equal.double().mean().item()


@functools.cache
def grpo_trainer_class():
    """TRL's ``GRPOTrainer`` with ``zero_std_groups`` added to each training log: ``zero_std_share`` of the rewards
    its ``_calculate_rewards`` returns (gathered from every process), averaged over the logging window as TRL averages
    its own metrics. Nothing of TRL's is replaced: both methods call TRL's."""
    from trl import GRPOTrainer

    class GroupedRewardsGRPOTrainer(GRPOTrainer):
        def _calculate_rewards(self, *args, **kwargs):
            rewards_per_func = super()._calculate_rewards(*args, **kwargs)
            if self.model.training:
                pending = self.__dict__.setdefault("_zero_std_groups", [])
                pending.append(zero_std_share(rewards_per_func, self.reward_weights, self.num_generations))
            return rewards_per_func

        def log(self, logs, *args, **kwargs):
            pending = self.__dict__.get("_zero_std_groups")
            if pending and "loss" in logs:
                logs = {**logs, ZERO_STD_GROUPS: sum(pending) / len(pending)}
                pending.clear()
            return super().log(logs, *args, **kwargs)

        def planned_sequences(self):
            """``(completions, tokens, completions)`` sampled per epoch: ``num_generations`` per prompt, each its
            prompt (TRL's tokenization, ``grpo_prompts.prompt_token_ids``) plus at most ``max_completion_length``
            tokens: the most it can feed (completions end early); steps count completions."""
            from ..data.grpo_prompts import prompt_token_ids

            args, tokenizer = self.args, self.processing_class
            prompts = [len(prompt_token_ids(tokenizer, p)) for p in self.train_dataset["prompt"]]
            tokens = args.num_generations * (sum(prompts) + len(prompts) * args.max_completion_length)
            return args.num_generations * len(prompts), tokens, args.num_generations * len(prompts)

    return GroupedRewardsGRPOTrainer


def grpo_config_kwargs(cfg: FinetuneConfig, plan: RunPlan) -> dict[str, Any]:
    """Keyword arguments for the installed ``trl.GRPOConfig`` (whose signature decides the spelling),
    every key in its signature. No evaluation (``grpo_checks`` scores held-out prompts) and no token count of the
    trainer's own (it reads ``input_ids`` GRPO's batches lack; TRL counts prompt and completion tokens).

    Args:
        cfg: the run's configuration: ``num_generations``, ``max_completion_length``, ``temperature``, ``beta``,
            ``reward_weights`` (empty: TRL's 1 each), ``scale_rewards``, ``mask_truncated_completions``,
            ``loss_type`` (empty: TRL's "dapo") and the fields ``trainer_config_kwargs`` reads, but not
            ``max_seq_length`` (``grpo_prompts.drop_long_prompts`` bounds the prompts).
        plan: the run's ``RunPlan``: ``per_device_train_batch_size`` completions per micro-batch, precision, device,
            checkpointing.

    Raises:
        TypeError: as ``trainers.spelled_kwargs``.
    """
    kwargs = trainer_config_kwargs(cfg, plan, has_eval=False)
    for name in ("max_length", "dataset_num_proc"):  # SFT's and the preference trainers': GRPO tokenizes per step
        kwargs.pop(name)
    kwargs |= {"beta": cfg.beta, "include_num_input_tokens_seen": "no"} | METHODS["grpo"].trl_kwargs(cfg)
    return spelled_kwargs(kwargs, METHODS["grpo"].resolve("config"))


def build_grpo_trainer(
    *,
    model,
    tokenizer,
    train_dataset,
    eval_dataset=None,
    cfg: FinetuneConfig,
    plan: RunPlan,
    reward_funcs: Sequence[str | Callable] | None = None,
    from_adapter: bool | None = None,
    callbacks=None,
    progress: bool = True,
):
    """A TRL ``GRPOTrainer`` for the package's LoRA model, prompt rows and reward functions.

    Args:
        model: the PEFT model (``lora.add_lora``, or ``adapters.load_adapter`` of a saved adapter to keep training).
        tokenizer: its tokenizer (``processing_class``; for chat prompts, its chat template set, as
            ``families.prepare_family`` sets it).
        train_dataset: ``grpo_prompts.grpo_prompts`` output: ``prompt`` (text or messages) and ``answer``; every
            column reaches the rewards by name. ``eval_dataset``: unused (``grpo_checks`` score held-out answers).
        cfg, plan: as ``grpo_config_kwargs``; ``cfg.method`` is "grpo"; ``cfg.rollout_decoder`` picks TRL's
            ``generate`` or ``grpo_rollout.fused_rollout`` (``why_not_fused``).
        reward_funcs: built-in names, ``module:function`` strings or callables (``rewards.resolve_rewards``); None:
            ``cfg.reward_funcs``. Resolve them before loading the model, so a bad one stops the run first.
        from_adapter: the model holds a saved adapter the run continues: with ``beta`` > 0 the reference is TRL's
            frozen ``ref`` copy of it. False: TRL's copy is removed and the reference is the base with adapters
            disabled. No reference at all with ``beta`` 0 (TRL's default). None: ``cfg.adapter_name_or_path`` is set.
        callbacks: extra ``transformers.TrainerCallback`` objects.
        progress: add ``RewardProgress`` (a line per logging step; ``sft_trainer.quiet_progress``).

    Returns:
        The trainer (``grpo_trainer_class``: TRL's, logging ``zero_std_groups`` too).

    Raises:
        ValueError: the model is not a PEFT model; the dataset has no ``prompt`` column; a step holds part of a
            group (TRL's ``GRPOConfig``); as ``grpo_rollout.why_not_fused``.
        rewards.RewardError: as ``rewards.resolve_rewards``.
    """
    require_peft(model, "build_grpo_trainer")
    if "prompt" not in train_dataset.column_names:
        raise ValueError(
            f"build_grpo_trainer: the dataset has no 'prompt' column (columns: {train_dataset.column_names}): build it "
            "with data.grpo_prompts.grpo_prompts"
        )
    rewards = resolve_rewards(
        cfg.reward_funcs if reward_funcs is None else reward_funcs, max_completion_length=cfg.max_completion_length
    )
    args = METHODS["grpo"].resolve("config")(**grpo_config_kwargs(cfg, plan))
    why_not = why_not_fused(cfg.rollout_decoder, model, args, plan)
    callbacks = list(callbacks or []) + ([RewardProgress()] if progress else [])
    with warnings.catch_warnings():  # TRL calls rollout_func experimental; this package pins how it calls it
        warnings.filterwarnings("ignore", "You are using 'rollout_func'", UserWarning)
        trainer = grpo_trainer_class()(
            model=model,
            reward_funcs=rewards,
            args=args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            callbacks=callbacks + ([] if why_not else [ForgetFusedCopies()]),
            **(
                {} if why_not else {"rollout_func": functools.partial(fused_rollout, keep_base=plan.rollouts_keep_base)}
            ),
        )
    if progress:
        print(f"  rollouts: {'the fused decoder (train.grpo_rollout)' if not why_not else f'generate ({why_not})'}")
    return keep_adapter_dtype(settle_reference(trainer, cfg, from_adapter=from_adapter, progress=progress), plan)


def logged_reward_names(log_history: Sequence[dict]) -> list[str]:
    """The reward names in TRL's log entries (``rewards/<name>/mean``), in their first appearance's order."""
    keys = (k for entry in log_history for k in entry if k.startswith("rewards/") and k.endswith("/mean"))
    return list(dict.fromkeys(k[len("rewards/") : -len("/mean")] for k in keys))


def reward_history(log_history: Sequence[dict], names: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per logged training step of ``log_history`` (``trainer.state.log_history``), in order: ``step``,
    ``reward`` (the mean summed reward), ``rewards`` (each of ``names`` -> its mean; None where TRL logged none),
    ``zero_std_groups`` (the share of groups whose completions all scored the same, ``zero_std_share``),
    ``frac_reward_zero_std`` (TRL's: float32 spread exactly 0) and ``completion_length`` (mean tokens)."""
    return [
        {
            "step": entry.get("step"),
            REWARD: entry.get(REWARD),
            "rewards": {name: entry.get(f"rewards/{name}/mean") for name in names},
            ZERO_STD_GROUPS: entry.get(ZERO_STD_GROUPS),
            ZERO_STD: entry.get(ZERO_STD),
            "completion_length": entry.get(LENGTH),
        }
        for entry in log_history
        if REWARD in entry and "loss" in entry
    ]


def _number(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


class RewardProgress(ProgressPrinter):
    """Prints ``step N/M  loss X  reward R (name a, name b)  zero-std groups Z  length L  lr Y  tokens/s T`` at every
    logging step: the mean summed reward, each reward's mean, the share of groups with no reward variance
    (``zero_std_groups``), the mean completion length, and prompt + completion tokens per second (TRL's count) since
    the previous line."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" not in logs or REWARD not in logs:
            return
        names = logged_reward_names([logs])
        each = ", ".join(f"{n} {_number(logs[f'rewards/{n}/mean'], '.3f')}" for n in names)
        print(
            f"step {state.global_step}/{state.max_steps}  loss {logs['loss']:.4f}  reward "
            f"{_number(logs[REWARD], '.3f')} ({each})  zero-std groups {_number(logs.get(ZERO_STD_GROUPS), '.0%')}  length "
            f"{_number(logs.get(LENGTH), '.1f')}  lr {logs.get('learning_rate', 0.0):.3g}  tokens/s "
            f"{self.tokens_per_second(state):,.0f}",
            flush=True,
        )
