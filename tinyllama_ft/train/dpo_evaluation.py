"""DPO's evaluation figures from per-pair summed log-probabilities, without another pass over the held-out pairs.

TRL's ``DPOTrainer`` evaluates by running the policy and the reference over every held-out pair. The package's
held-out checks score the same pairs (the same ids, each response's tokens and its end id): the policy's scores after
training are the after-check's, and the reference's are the before-check's (the policy starts as its reference).
``dpo_batch_metrics`` turns them into TRL's figures, batch by batch as TRL's evaluation loop averages them
(tests/test_dpo_evaluation.py compares them with TRL's own ``evaluate``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Sequence

import torch.nn.functional as F

#: DPO losses whose per-pair value is a function of the summed log-probabilities and the responses' lengths (TRL's
#: formulas, ``DPOTrainer._compute_loss``), each from one batch (``dpo_batch_metrics``: the policy's ``c``, its
#: log-ratios to the reference ``chosen``, ``rejected`` and their difference ``delta``, the lengths ``n_c``, ``n_r``,
#: ``beta`` and ``label_smoothing`` as ``ls``); the others keep TRL's evaluation pass.
LOSSES = {
    "sigmoid": lambda b: -F.logsigmoid(b.beta * b.delta),
    "hinge": lambda b: (1 - b.beta * b.delta).relu(),
    "ipo": lambda b: (b.chosen / b.n_c.clamp(min=1.0) - b.rejected / b.n_r.clamp(min=1.0) - 1 / (2 * b.beta)) ** 2,
    "robust": lambda b: (
        (b.ls * F.logsigmoid(-b.beta * b.delta) - (1 - b.ls) * F.logsigmoid(b.beta * b.delta)) / (1 - 2 * b.ls)
    ),
    "bco_pair": lambda b: -F.logsigmoid(b.beta * b.chosen) - F.logsigmoid(-b.beta * b.rejected),
    "nca_pair": lambda b: (
        -F.logsigmoid(b.beta * b.chosen)
        - 0.5 * F.logsigmoid(-b.beta * b.chosen)
        - 0.5 * F.logsigmoid(-b.beta * b.rejected)
    ),
    "sppo_hard": lambda b: (b.chosen - 0.5 / b.beta) ** 2 + (b.rejected + 0.5 / b.beta) ** 2,
    "apo_zero": lambda b: 1 - (b.beta * b.chosen).sigmoid() + (b.beta * b.rejected).sigmoid(),
    "apo_down": lambda b: (b.beta * b.chosen).sigmoid() + 1 - (b.beta * b.delta).sigmoid(),
    "sft": lambda b: (-b.c.sum() / b.n_c.sum()).expand(len(b.c)),  # the chosen responses' mean token NLL
    "sigmoid_norm": lambda b: (
        -F.logsigmoid(b.beta * (b.chosen / b.n_c.clamp(min=1.0) - b.rejected / b.n_r.clamp(min=1.0)))
    ),
}
DERIVED_LOSS_TYPES = tuple(LOSSES)


def derived_evaluation_refusal(trainer) -> str | None:
    """Why ``trainer`` (a TRL ``DPOTrainer``) must keep TRL's evaluation pass, or None when the figures can be derived.

    Derived: the standard (reverse-KL) DPO, losses in ``DERIVED_LOSS_TYPES``, one process, the reference TRL computes
    on the fly (no precomputed or separate reference model), no WPO weighting, no LD-DPO length weighting, no MoE
    auxiliary loss, sequences never truncated by TRL's collator (the package's rows fit ``max_length``).
    """
    args = trainer.args
    checks = (
        (args.world_size > 1, "several processes (each evaluates its shard)"),
        (trainer.f_divergence_type != "reverse_kl", f"f_divergence_type={trainer.f_divergence_type!r}"),
        (trainer.ld_alpha is not None, "ld_alpha weights the responses' tails"),
        (trainer.use_weighting, "use_weighting (WPO) reads every token's distribution"),
        (getattr(trainer, "aux_loss_enabled", False), "the MoE auxiliary loss"),
        (trainer.precompute_ref_logps or trainer.ref_model is not None, "a precomputed or separate reference"),
    )
    found = [why for refused, why in checks if refused]
    found += [f"loss_type {t!r}" for t in trainer.loss_types if t not in DERIVED_LOSS_TYPES]
    return "; ".join(found) or None


def dpo_batch_metrics(
    policy: Sequence[Sequence[float]],
    reference: Sequence[Sequence[float]],
    lengths: Sequence[Sequence[int]],
    *,
    beta: float,
    loss_types: Sequence[str],
    loss_weights: Sequence[float] | None = None,
    label_smoothing: float = 0.0,
) -> tuple[float, dict[str, float]]:
    """One evaluation batch's DPO loss and TRL's metrics, as ``DPOTrainer._compute_loss`` computes them (float32).

    Args:
        policy, reference: per pair ``(log p(chosen), log p(rejected))`` in nats, each summed over the response's
            tokens and its end id, under the policy and under the reference.
        lengths: per pair ``(chosen tokens, rejected tokens)`` (the responses, end id included).
        beta, loss_types, loss_weights, label_smoothing: TRL's (``DPOConfig``); ``loss_weights`` None: 1 each.

    Returns:
        ``(loss, metrics)``: the batch's loss (the weighted sum of each loss type's mean) and TRL's per-batch metric
        values, keyed as TRL logs them: ``rewards/chosen``, ``rewards/rejected`` (means of beta * (log pi - log
        pi_ref)), ``rewards/accuracies`` (share of pairs whose chosen reward is strictly higher: a tie is wrong),
        ``rewards/margins``, ``logps/chosen``, ``logps/rejected``.

    Raises:
        ValueError: a loss type outside ``DERIVED_LOSS_TYPES``; no pairs.
    """
    import torch

    if not len(policy):
        raise ValueError("dpo_batch_metrics: no pairs")
    c, r = torch.tensor(policy, dtype=torch.float32).unbind(-1)
    rc, rr = torch.tensor(reference, dtype=torch.float32).unbind(-1)
    n_c, n_r = torch.tensor(lengths, dtype=torch.float32).unbind(-1)
    chosen, rejected = c - rc, r - rr
    batch = SimpleNamespace(c=c, chosen=chosen, rejected=rejected, delta=chosen - rejected, n_c=n_c, n_r=n_r)
    batch.beta, batch.ls = beta, label_smoothing
    loss = torch.zeros((), dtype=torch.float32)
    for loss_type, weight in zip(loss_types, loss_weights or [1.0] * len(loss_types), strict=True):
        if loss_type not in LOSSES:
            raise ValueError(f"loss_type {loss_type!r} is not derived here (DERIVED_LOSS_TYPES)")
        loss = loss + LOSSES[loss_type](batch).mean() * weight
    chosen_rewards, rejected_rewards = beta * chosen, beta * rejected
    return loss.item(), {
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
        "logps/chosen": c.mean().item(),
        "logps/rejected": r.mean().item(),
    }


def _scores(trainer, pairs):
    """``(preference_checks.preference_scores, pair_nlls)`` of ``trainer``'s model on ``pairs`` (scores None: a pair
    with an empty response)."""
    from ..evaluate.preference_checks import pair_nlls, preference_scores

    model, tokenizer = trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class
    nlls = pair_nlls(model, tokenizer, pairs)
    scores = preference_scores(model, tokenizer, pairs, nlls=nlls)
    return (None if scores.skipped else scores), nlls


def _pair_ids(pairs) -> list:
    return [tuple(tuple(r[k]) for k in ("prompt_ids", "chosen_ids", "rejected_ids")) for r in pairs]


def _reference_scores(trainer, pairs):
    """The reference's scores of ``pairs``: ``trainer.reference_scores`` when they are the trainer's eval pairs, else
    scored under TRL's reference (the ``ref`` adapter, or adapters disabled)."""
    from trl.trainer.utils import use_adapter

    given, eval_pairs = trainer.reference_scores, trainer.eval_dataset
    if given is not None and not isinstance(eval_pairs, dict) and _pair_ids(pairs) == _pair_ids(eval_pairs):
        return given
    model = trainer.accelerator.unwrap_model(trainer.model)
    with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
        return _scores(trainer, pairs)[0]


def derived_evaluation(trainer, dataloader, metric_key_prefix: str = "eval"):
    """TRL's DPO evaluation of ``dataloader``'s pairs, derived from summed log-probabilities (``dpo_batch_metrics``):
    the policy's (one pass, its ``pair_nlls`` kept as ``trainer.policy_nlls`` for the held-out check after training)
    and the reference's (``_reference_scores``), in the batches the evaluation loop would read, each batch's metrics added to
    the trainer's as TRL adds them (``DPOTrainer.log`` averages them over the batches).

    Args:
        trainer: a TRL ``DPOTrainer`` for which ``derived_evaluation_refusal`` is None.
        dataloader: the evaluation loop's (``get_eval_dataloader``): its dataset and batch sampler are read.
        metric_key_prefix: as ``Trainer.evaluation_loop``.

    Returns:
        A ``transformers.trainer_utils.EvalLoopOutput`` with ``{prefix}_loss`` (the batches' losses averaged over the
        pairs, as transformers averages them: each batch weighs its number of pairs), or None when a pair has an
        empty response (TRL's pass then evaluates).
    """
    import numpy as np
    from transformers.trainer_utils import EvalLoopOutput

    pairs = dataloader.dataset
    trainer.model.eval()  # as the evaluation loop: TRL's log() reads the mode to prefix the metrics
    reference = _reference_scores(trainer, pairs)
    policy, trainer.policy_nlls = _scores(trainer, pairs) if reference is not None else (None, None)
    if policy is None:
        return None
    metrics, losses = trainer._metrics["eval"], []
    for batch in dataloader.batch_sampler:
        loss, values = dpo_batch_metrics(
            [policy.logps[i] for i in batch],
            [reference.logps[i] for i in batch],
            [policy.lengths[i] for i in batch],
            beta=trainer.beta,
            loss_types=trainer.loss_types,
            loss_weights=trainer.loss_weights,
            label_smoothing=trainer.label_smoothing,
        )
        losses += [loss] * len(batch)  # transformers repeats each batch's loss per pair (the last batch: its pairs)
        for key, value in values.items():
            metrics[key].append(value)
    metrics["num_tokens"] = [trainer._total_train_tokens]
    mean = np.array(losses, dtype=np.float32).mean().item()
    return EvalLoopOutput(None, None, {f"{metric_key_prefix}_loss": mean}, len(pairs))
