"""Held-out preference checks: does the model give a pair's chosen response more probability than its rejected one.

On tokenized pairs (``data.preference_tokens.tokenize_preferences``): each response's summed log-probability given
the prompt (its end token included), scored by ``scoring.token_nlls`` as the other held-out checks are. Preference
accuracy counts ties as wrong; the margin is given summed and per token; the two log-probabilities are kept apart
because DPO can lower both while widening the margin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .scoring import token_nlls


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


def pair_nlls(model, tokenizer, pairs, *, batch_size: int = 4):
    """``(chosen, rejected)``: ``scoring.token_nlls`` of each pair's prompt + chosen and prompt + rejected, in row
    order, one model pass over both (what ``preference_scores`` reads; ``held_out.held_out_check`` reads the chosen
    ones for its response loss and stop probability too). A pair with an empty prompt or response gets None in both.

    Args:
        model, tokenizer: a causal LM (a PEFT model too) and its tokenizer, as ``scoring.token_nlls``.
        pairs: rows with ``prompt_ids``, ``chosen_ids``, ``rejected_ids``.
        batch_size: as ``scoring.token_nlls``.

    Returns:
        One float32 tensor per sequence: ``nll[t]`` = -log p(token t + 1 | the tokens before it), so the response's
        tokens are ``nll[len(prompt) - 1:]``.
    """
    rows = [dict(r) for r in pairs]
    keep = [i for i, r in enumerate(rows) if r["prompt_ids"] and r["chosen_ids"] and r["rejected_ids"]]
    ids = [list(rows[i]["prompt_ids"]) + list(rows[i][k]) for k in ("chosen_ids", "rejected_ids") for i in keep]
    chosen, rejected = [None] * len(rows), [None] * len(rows)
    for j, nll in token_nlls(model, tokenizer, ids, batch_size=batch_size):
        (chosen if j < len(keep) else rejected)[keep[j % len(keep)]] = nll
    return chosen, rejected


def preference_scores(model, tokenizer, pairs, *, batch_size: int = 4, nlls=None) -> PreferenceScores:
    """Preference accuracy, margins and log-probabilities of ``model`` on held-out pairs.

    Args:
        model, tokenizer: as ``pair_nlls``.
        pairs: rows with ``prompt_ids``, ``chosen_ids``, ``rejected_ids`` (a ``datasets.Dataset`` from
            ``preference_tokens.tokenize_preferences``, or a list of dicts).
        batch_size: as ``scoring.token_nlls`` (each pair is two rows).
        nlls: ``pair_nlls(model, tokenizer, pairs)`` computed already; None: computed here.

    Returns:
        ``PreferenceScores``.

    Raises:
        ValueError: no pairs, or every pair skipped.
    """
    rows = [dict(r) for r in pairs]
    if not rows:
        raise ValueError("preference_scores: no pairs")
    chosen_nlls, rejected_nlls = nlls or pair_nlls(model, tokenizer, rows, batch_size=batch_size)
    keep = [i for i, nll in enumerate(chosen_nlls) if nll is not None]
    if not keep:
        raise ValueError("preference_scores: every pair has an empty prompt or response")

    def logp(i, nll):
        return -nll[len(rows[i]["prompt_ids"]) - 1 :].sum().item()

    n = len(keep)
    logps = [(logp(i, chosen_nlls[i]), logp(i, rejected_nlls[i])) for i in keep]
    lengths = [(len(rows[i]["chosen_ids"]), len(rows[i]["rejected_ids"])) for i in keep]
    return PreferenceScores(
        pairs=n,
        accuracy=sum(c > r for c, r in logps) / n,
        margin=sum(c - r for c, r in logps) / n,
        margin_per_token=sum(c / n_c - r / n_r for (c, r), (n_c, n_r) in zip(logps, lengths)) / n,
        chosen_logp=sum(c for c, _ in logps) / n,
        rejected_logp=sum(r for _, r in logps) / n,
        skipped=sorted(set(range(len(rows))) - set(keep)),
    )
