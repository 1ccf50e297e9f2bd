"""Held-out preference checks: does the model give a pair's chosen response more probability than its rejected one.

On tokenized pairs (``data.preference_tokens.tokenize_preferences``): each response's summed log-probability given
the prompt (its end token included), scored by ``held_out.token_nlls`` as the other held-out checks are. Preference
accuracy counts ties as wrong; the margin is given summed and per token; the two log-probabilities are kept apart
because DPO can lower both while widening the margin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .held_out import token_nlls


@dataclass(frozen=True)
class PreferenceScores:
    """``preference_scores``' result (log-probabilities in nats).

    Attributes:
        pairs: pairs scored.
        accuracy: share of pairs whose chosen response has the higher summed log-probability (a tie is wrong).
        margin: mean over pairs of log p(chosen) - log p(rejected).
        margin_per_token: mean over pairs of log p(chosen) / its tokens - log p(rejected) / its tokens.
        chosen_logp, rejected_logp: mean summed log-probability of the chosen and of the rejected responses.
        skipped: 0-based indices of pairs not scored (an empty response: a truncated row with no token left).
    """

    pairs: int
    accuracy: float
    margin: float
    margin_per_token: float
    chosen_logp: float
    rejected_logp: float
    skipped: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return (
            f"preference accuracy {self.accuracy:.1%} of {self.pairs} pairs, margin {self.margin:+.3f} nats "
            f"({self.margin_per_token:+.4f} per token), log p(chosen) {self.chosen_logp:.2f}, "
            f"log p(rejected) {self.rejected_logp:.2f}"
        )


def response_logps(model, tokenizer, prompts, responses, *, batch_size: int = 4, max_batch_tokens: int = 4096):
    """Summed log-probability of each response after its prompt, under ``model``.

    Args:
        model, tokenizer: a causal LM (a PEFT model too) and its tokenizer, as ``held_out.token_nlls``.
        prompts, responses: token ids per row (``prompt_ids`` and ``chosen_ids`` / ``rejected_ids`` /
            ``completion_ids``); each prompt at least one token, each response at least one.
        batch_size, max_batch_tokens: as ``held_out.token_nlls``.

    Returns:
        One float per row: sum over the response's tokens of log p(token | prompt and the response before it).

    Raises:
        ValueError: a row with an empty prompt or response (naming its 0-based index).
    """
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        if not prompt or not response:
            raise ValueError(f"response_logps: row {i} has an empty {'prompt' if not prompt else 'response'}")
    ids = [list(p) + list(r) for p, r in zip(prompts, responses)]
    out = [0.0] * len(ids)
    for i, nll in token_nlls(model, tokenizer, ids, batch_size=batch_size, max_batch_tokens=max_batch_tokens):
        out[i] = (
            -nll[len(prompts[i]) - 1 :].sum().item()
        )  # nll[t] scores token t + 1: the response's from the prompt's last
    return out


def preference_scores(
    model, tokenizer, pairs, *, batch_size: int = 4, max_batch_tokens: int = 4096
) -> PreferenceScores:
    """Preference accuracy, margins and log-probabilities of ``model`` on held-out pairs.

    Args:
        model, tokenizer: as ``response_logps``.
        pairs: rows with ``prompt_ids``, ``chosen_ids``, ``rejected_ids`` (a ``datasets.Dataset`` from
            ``preference_tokens.tokenize_preferences``, or a list of dicts).
        batch_size, max_batch_tokens: as ``held_out.token_nlls`` (each pair is two rows).

    Returns:
        ``PreferenceScores``.

    Raises:
        ValueError: no pairs, or every pair skipped.
    """
    rows = [dict(r) for r in pairs]
    if not rows:
        raise ValueError("preference_scores: no pairs")
    keep = [i for i, r in enumerate(rows) if r["prompt_ids"] and r["chosen_ids"] and r["rejected_ids"]]
    if not keep:
        raise ValueError("preference_scores: every pair has an empty prompt or response")
    prompts = [rows[i]["prompt_ids"] for i in keep] * 2
    responses = [rows[i]["chosen_ids"] for i in keep] + [rows[i]["rejected_ids"] for i in keep]
    logps = response_logps(
        model, tokenizer, prompts, responses, batch_size=batch_size, max_batch_tokens=max_batch_tokens
    )
    n = len(keep)
    chosen, rejected = logps[:n], logps[n:]
    lengths = [len(r) for r in responses]
    return PreferenceScores(
        pairs=n,
        accuracy=sum(c > r for c, r in zip(chosen, rejected)) / n,
        margin=sum(c - r for c, r in zip(chosen, rejected)) / n,
        margin_per_token=sum(c / lengths[i] - r / lengths[n + i] for i, (c, r) in enumerate(zip(chosen, rejected))) / n,
        chosen_logp=sum(chosen) / n,
        rejected_logp=sum(rejected) / n,
        skipped=sorted(set(range(len(rows))) - set(keep)),
    )
