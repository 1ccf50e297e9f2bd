"""GRPO's held-out checks: greedy answers to prompts the run did not train on, scored as the rewards score them.

On ``grpo_prompts`` rows (prompt and reference answer), each prompt tokenized and ended as TRL's rollouts are (text
with the tokenizer's special tokens or the chat template; TRL's stop ids), answered greedily in batches by the
generation core: accuracy (``answers.extract_number`` equals the reference), format compliance
(``answers.follows_layout``), each reward function's mean, the mean completion length, how many answers ended.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from ..data.answers import extract_number, follows_layout, reference_number
from ..infer.core import check_batch_size, decode_answers, generate_answers
from ..models.chat_templates import chat_prompt
from .scoring import eval_mode


@dataclass(frozen=True)
class GrpoScores:
    """``grpo_scores``' result.

    Attributes:
        prompts: prompts answered.
        accuracy: share of answers whose number equals the reference (prompts whose reference holds no number left
            out of the share).
        format_compliance: share of answers whose last line is ``#### <number>``.
        rewards: each reward function's name -> its mean over the answers it scored (None: it scored none).
        completion_length: mean tokens per answer, the stop token included (as TRL counts them).
        stopped: answers that ended with a stop token within ``max_new_tokens``.
        answers: the answers' text, in order.
        new_tokens, ended: per answer, in order: the tokens it used (the stop token included) and whether it ended.
    """

    prompts: int
    accuracy: float
    format_compliance: float
    rewards: dict[str, float | None]
    completion_length: float
    stopped: int
    answers: list[str] = field(default_factory=list)
    new_tokens: list[int] = field(default_factory=list)
    ended: list[bool] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        each = ", ".join(f"{n} {'-' if v is None else f'{v:.3f}'}" for n, v in self.rewards.items())
        return (
            f"accuracy {self.accuracy:.1%}, format {self.format_compliance:.1%} of {self.prompts} held-out prompts; "
            f"rewards: {each or 'none'}; mean length {self.completion_length:.1f} tokens, {self.stopped} ended"
        )


def rollout_stop_ids(tokenizer, model) -> list[int]:
    """The ids a TRL GRPO rollout ends on: the tokenizer's EOS, then the model's generation-config EOS ids, once each."""
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    config_eos = [] if config_eos is None else [config_eos] if isinstance(config_eos, int) else list(config_eos)
    return [i for i in dict.fromkeys([tokenizer.eos_token_id, *config_eos]) if i is not None]


def grpo_scores(
    model,
    tokenizer,
    rows: Sequence[dict] | Any,
    *,
    reward_funcs: Sequence[Callable] = (),
    max_new_tokens: int,
    batch_size: int | None = None,
    decode: str = "auto",
) -> GrpoScores:
    """Greedy answers to held-out prompts, scored (a ``GrpoScores``).

    Args:
        model, tokenizer: the policy (a PEFT model too) and its tokenizer (its chat template set for chat prompts);
            the model's train/eval mode is restored afterwards.
        rows: ``grpo_prompts.grpo_prompts`` rows (a ``datasets.Dataset`` or dicts): ``prompt`` (text or messages,
            all one form), ``answer`` and any other columns, which reach the rewards by name as in training.
        reward_funcs: resolved reward functions (``train.rewards.resolve_rewards``), each called once on all the
            answers as TRL calls it (``trainer_state`` None; ``log_extra`` / ``log_metric`` take and drop).
        max_new_tokens: the answer budget: the run's ``max_completion_length``.
        batch_size: prompts per batch; None: ``core.check_batch_size``.
        decode: as ``core.generate_answers``.

    Raises:
        ValueError: no rows; a reward returning the wrong number of values (naming it); as ``core.generate_answers``.
    """
    from trl.trainer.utils import get_callable_name  # the name TRL logs a reward under

    rows = [dict(r) for r in rows]
    if not rows:
        raise ValueError("grpo_scores: no held-out rows")
    prompts = [r["prompt"] for r in rows]
    chat = not isinstance(prompts[0], str)
    with eval_mode(model):
        answers = generate_answers(
            model,
            tokenizer,
            [chat_prompt(tokenizer, p) for p in prompts] if chat else prompts,
            stop_token_ids=rollout_stop_ids(tokenizer, model),
            encode_kwargs={"add_special_tokens": False} if chat else {},
            max_new_tokens=max_new_tokens,
            batch_size=batch_size or check_batch_size(model),
            decode=decode,
            for_inference=False,
        )
    texts = decode_answers(tokenizer, answers)
    stop = tokenizer.eos_token_id
    completion_ids = [a.ids + [stop] * a.stopped for a in answers]
    completions = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    rewards = {}
    for func in reward_funcs:
        values = func(
            prompts=prompts,
            completions=completions,
            completion_ids=completion_ids,
            trainer_state=None,
            log_extra=lambda *a, **k: None,
            log_metric=lambda *a, **k: None,
            **columns,
        )
        if len(values) != len(rows):
            raise ValueError(
                f"grpo_scores: reward {get_callable_name(func)!r} returned {len(values)} values for {len(rows)}"
            )
        scored = [v for v in values if v is not None]
        rewards[get_callable_name(func)] = sum(scored) / len(scored) if scored else None
    references = [reference_number(r.get("answer")) for r in rows]
    judged = [(extract_number(t), ref) for t, ref in zip(texts, references) if ref is not None]
    return GrpoScores(
        prompts=len(rows),
        accuracy=sum(got == ref for got, ref in judged) / len(judged) if judged else 0.0,
        format_compliance=sum(map(follows_layout, texts)) / len(texts),
        rewards=rewards,
        completion_length=sum(a.new_tokens for a in answers) / len(answers),
        stopped=sum(a.stopped for a in answers),
        answers=texts,
        new_tokens=[a.new_tokens for a in answers],
        ended=[a.stopped for a in answers],
    )
