"""Held-out checks of a (LoRA) model, for either data format: losses, perplexity, stop probability, stopping count.

On rows the model did not train on: the response loss (supervised tokens), the full-text loss, the probability
of the stop token where the reference ends (``eos_probability``), and how many greedy answers stop within
``max_new_tokens``. Rows are tokenized as training rows and prompted as generation prompts them; everything runs
in batches under ``torch.inference_mode``, restoring the model's train/eval mode (docs/internals.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Sequence

from ..config.finetune import DEFAULTS
from ..data.formats import AlpacaFormat
from ..infer.core import Answer, check_batch_size, generate_answers, model_positions
from .scoring import eval_mode, token_nlls

#: Held-out instructions with short reference answers in the notebook's stopping count.
STOP_ROWS = 20

#: ``max_new_tokens`` of the stopping count: twice the article's 64, room for a short answer to end.
STOP_MAX_NEW_TOKENS = 128
#: A "short reference answer": at most this many tokens (so an answer like it fits ``STOP_MAX_NEW_TOKENS``).
SHORT_ANSWER_TOKENS = 64


@dataclass(frozen=True)
class HeldOutScores:
    """``held_out_scores``' result.

    Attributes:
        rows: rows scored (rows longer than ``max_seq_length`` are skipped and counted in ``skipped``).
        response_loss: mean NLL (nats/token) over the supervised tokens (response + EOS; assistant turns).
        full_text_loss: mean NLL over every token but each row's first.
        eos_probability: mean over rows of p(last supervised token | what precedes it), teacher forced: EOS
            after an Alpaca response, the end-of-turn token after a conversation's last assistant turn.
        response_tokens, full_text_tokens: tokens averaged over.
        skipped: 0-based indices of rows not scored (too long).
    """

    rows: int
    response_loss: float
    full_text_loss: float
    eos_probability: float
    response_tokens: int
    full_text_tokens: int
    skipped: list[int] = field(default_factory=list)

    @property
    def response_perplexity(self) -> float:
        return math.exp(self.response_loss)

    @property
    def full_text_perplexity(self) -> float:
        return math.exp(self.full_text_loss)

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "response_perplexity": self.response_perplexity,
            "full_text_perplexity": self.full_text_perplexity,
        }

    def __str__(self) -> str:
        return (
            f"response loss {self.response_loss:.4f} (perplexity {self.response_perplexity:.2f}), full-text loss "
            f"{self.full_text_loss:.4f}, stop-token probability at answer end {self.eos_probability:.3f} "
            f"({self.rows} rows)"
        )


def held_out_scores(
    model,
    tokenizer,
    rows: Sequence[dict],
    *,
    data_format,
    batch_size: int = 4,
    max_seq_length: int | None = None,
    nlls: Sequence | None = None,
) -> HeldOutScores:
    """Response loss, full-text loss and teacher-forced stop probability on held-out rows.

    Args:
        model, tokenizer: as ``token_nlls`` (a fast tokenizer).
        rows: the format's held-out rows (``data_format.held_out_rows``): Alpaca dicts with ``instruction``, ``output`` and
            optionally ``input``, or ``{"messages": [...]}``.
        data_format: the run's ``formats.AlpacaFormat`` or prepared ``formats.ConversationFormat``
            (``formats.data_format(cfg)``); required, so a chat run is never scored as Alpaca.
        max_seq_length: rows longer than this many tokens are skipped (their EOS would be cut); None: all.
        batch_size: as ``token_nlls``.
        nlls: each row's ``token_nlls`` of ``data_format.score_ids``' ids, in row order, computed already (a
            preference run's chosen responses, which ``preference_checks`` scores too): the model is not run again.

    Returns:
        ``HeldOutScores``.

    Raises:
        ValueError: no rows, a row without instruction/output (naming it), or every row skipped.
    """
    import torch

    if not rows:
        raise ValueError("held_out_scores: no rows")
    ids, masks = data_format.score_ids(tokenizer, rows)
    keep = [i for i, x in enumerate(ids) if max_seq_length is None or len(x) <= max_seq_length]
    skipped = sorted(set(range(len(ids))) - set(keep))
    if not keep:
        raise ValueError(f"held_out_scores: every row is longer than max_seq_length={max_seq_length}")
    resp_nll = full_nll = eos_p = 0.0
    resp_n = full_n = 0
    scored = (
        token_nlls(model, tokenizer, [ids[i] for i in keep], batch_size=batch_size)
        if nlls is None
        else ((i, nlls[row]) for i, row in enumerate(keep))
    )
    for i, nll in scored:
        row = keep[i]
        response = torch.tensor(masks[row][1:], dtype=torch.bool)
        full_nll += nll.sum().item()
        full_n += len(nll)
        resp_nll += nll[response].sum().item()
        resp_n += int(response.sum())
        last = max(j for j, m in enumerate(masks[row]) if m)  # last supervised token
        eos_p += math.exp(-nll[last - 1].item())  # p(last supervised token), read one position before it
    return HeldOutScores(
        rows=len(keep),
        response_loss=resp_nll / max(resp_n, 1),
        full_text_loss=full_nll / max(full_n, 1),
        eos_probability=eos_p / len(keep),
        response_tokens=resp_n,
        full_text_tokens=full_n,
        skipped=skipped,
    )


def short_rows(
    rows: Sequence[dict], tokenizer, *, data_format, n: int, max_tokens: int = SHORT_ANSWER_TOKENS
) -> list[dict]:
    """Up to ``n`` rows (the first, in order) whose reference answer is at most ``max_tokens`` tokens.

    Args:
        rows: held-out rows of ``data_format`` (Alpaca: the reference is ``output``).
        tokenizer: counts the reference's tokens (no special tokens added, special-token text kept as text).
        data_format: as ``held_out_scores``.
        n: rows wanted.
        max_tokens: most tokens of a short answer (``SHORT_ANSWER_TOKENS``).
    """

    def short(row) -> bool:
        ids = tokenizer(data_format.reference(row), add_special_tokens=False, split_special_tokens=True)["input_ids"]
        return len(ids) <= max_tokens

    return list(islice(filter(short, rows), n))


def short_answer_rows(
    rows: Sequence[dict], tokenizer, *, data_format, n: int = 20, max_tokens: int = SHORT_ANSWER_TOKENS
) -> list[dict]:
    """``short_rows``, requiring ``n`` of them (a ValueError with fewer)."""
    picked = short_rows(rows, tokenizer, data_format=data_format, n=n, max_tokens=max_tokens)
    if len(picked) < n:
        raise ValueError(f"only {len(picked)} of {len(rows)} rows have an output of <= {max_tokens} tokens; {n} asked")
    return picked


@dataclass(frozen=True)
class StoppingReport:
    """``stopping_count``'s result: ``stopped`` of ``total`` greedy answers ended with a stop token (Alpaca: EOS;
    conversations: the end of turn) within ``max_new_tokens``; per row, in order: the ``answers``' text (special
    tokens removed), the ``new_tokens`` each used (the stop token included) and whether it ``ended``."""

    stopped: int
    total: int
    max_new_tokens: int
    answers: list[str]
    new_tokens: list[int]
    ended: list[bool]

    def __str__(self) -> str:
        return f"{self.stopped}/{self.total} answers ended with a stop token within {self.max_new_tokens} new tokens"


def greedy_answers(
    model,
    tokenizer,
    rows: Sequence[dict],
    *,
    data_format,
    max_new_tokens: int = STOP_MAX_NEW_TOKENS,
    batch_size: int | None = None,
    decode: str = "auto",
) -> list[Answer]:
    """Greedy answers to each held-out row's prompt, through the generation core (``core.generate_answers``).

    Args:
        model, tokenizer, rows, data_format: as ``held_out_scores`` (the format gives the prompt, its tokenization and
            the stop ids); the model's train/eval mode is restored afterwards.
        max_new_tokens: budget per answer (``STOP_MAX_NEW_TOKENS``).
        batch_size: prompts per batch (left-padded, ``core.generate_answers``); None: ``core.check_batch_size``
            (16 on a CUDA GPU, 4 on a CPU).
        decode: ``core.DECODE_CHOICES``; "auto" (the checks' choice) or "plain" / "graph" forced (benchmarks).

    Returns:
        One ``core.Answer`` per row: new ids up to the first stop token, and whether it came.
    """
    with eval_mode(model):
        return generate_answers(
            model,
            tokenizer,
            [data_format.row_prompt(tokenizer, r) for r in rows],
            stop_token_ids=data_format.stop_token_ids(tokenizer),
            encode_kwargs=data_format.encode_kwargs,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size or check_batch_size(model),
            decode=decode,
            for_inference=False,  # mid-run: eval_mode switches and restores; Unsloth's inference mode stays off
        )


def stopping_count(
    model,
    tokenizer,
    rows: Sequence[dict],
    *,
    data_format,
    max_new_tokens: int = STOP_MAX_NEW_TOKENS,
    batch_size: int | None = None,
) -> StoppingReport:
    """How many ``greedy_answers`` (same arguments) to the rows' prompts end with a stop token within
    ``max_new_tokens``, as a ``StoppingReport`` (``short_answer_rows`` picks rows with short reference answers)."""
    new = greedy_answers(
        model, tokenizer, rows, max_new_tokens=max_new_tokens, data_format=data_format, batch_size=batch_size
    )
    return StoppingReport(
        stopped=sum(a.stopped for a in new),
        total=len(rows),
        max_new_tokens=max_new_tokens,
        answers=[tokenizer.decode(a.ids, skip_special_tokens=True) for a in new],
        new_tokens=[a.new_tokens for a in new],
        ended=[a.stopped for a in new],
    )


def rows_within_positions(
    model, tokenizer, rows: Sequence[dict], *, data_format, max_new_tokens: int, what: str = "held-out answers"
) -> list[dict]:
    """The rows whose generation prompt plus ``max_new_tokens`` fit the model's positions (``core.model_positions``),
    in order; the others are left out with one printed line naming how many, the budget and the positions (the
    generation core refuses them: ``core.check_positions``).

    Args:
        model, tokenizer, rows, data_format: as ``greedy_answers``.
        max_new_tokens: the answers' budget.
        what: what the rows are for, in the printed line.
    """
    positions = model_positions(model)
    if positions is None:
        return list(rows)

    def tokens(row) -> int:  # the prompt's, tokenized as generation tokenizes it
        return len(tokenizer(data_format.row_prompt(tokenizer, row), **data_format.encode_kwargs)["input_ids"])

    kept = [r for r in rows if tokens(r) + max_new_tokens <= positions]
    if len(kept) < len(rows):
        print(
            f"{what}: {len(rows) - len(kept)} of {len(rows)} held-out rows left out: their prompt plus "
            f"{max_new_tokens} new tokens exceeds the model's {positions} positions"
        )
    return kept


@dataclass(frozen=True)
class HeldOutCheck:
    """``held_out_check``'s result: the scores and the stopping count of one model state, on preference pairs
    their ``preference_checks.PreferenceScores``, and on GRPO prompts their ``grpo_checks.GrpoScores`` (with no
    ``scores``: a prompt row has no response to score)."""

    scores: HeldOutScores | None
    stopping: StoppingReport
    preference: object | None = None
    grpo: object | None = None
    #: A text run's forgetting check: ``held_out_scores`` of ``data_format.forgetting_rows`` (Alpaca rows).
    forgetting: HeldOutScores | None = None

    def __str__(self) -> str:
        parts = [str(p) for p in (self.grpo, self.scores, self.stopping, self.preference) if p is not None]
        if self.forgetting is not None:
            parts.append(f"forgetting check (held-out Alpaca rows): {self.forgetting}")
        return "; ".join(parts)


def held_out_check(
    model,
    tokenizer,
    rows: Sequence[dict],
    *,
    data_format,
    stop_rows: int = STOP_ROWS,
    max_seq_length: int | None = DEFAULTS.max_seq_length,
    max_new_tokens: int = STOP_MAX_NEW_TOKENS,
) -> HeldOutCheck | None:
    """The run's held-out check of one model state: ``held_out_scores`` and a ``stopping_count``.

    Args:
        model, tokenizer: as ``held_out_scores`` (before training, the LoRA model is the base: its adapter is 0).
        rows: held-out rows (``data_format.held_out_rows``); [] skips the check (one printed line) and returns None,
            which the caller does not print.
        stop_rows: prompts in the stopping count, the first rows whose reference answer has at most
            ``SHORT_ANSWER_TOKENS`` tokens (fewer when fewer are short; default ``STOP_ROWS`` = 20), among those whose
            prompt and ``max_new_tokens`` fit the model's positions (``rows_within_positions``).
        data_format, max_seq_length: as ``held_out_scores`` (default ``FinetuneConfig``'s ``max_seq_length``).
        max_new_tokens: as ``greedy_answers``.

    Prints one line before it starts (what it scores, on how many rows and prompts): the greedy answers can take
    minutes on a CPU.

    Returns:
        ``HeldOutCheck``, or None without rows; its ``forgetting`` holds ``held_out_scores`` of
        ``data_format.forgetting_rows`` (Alpaca rows, a text run's forgetting check) when there are some. On pairs (``data_format.pairs``: a preference run's), its
        ``preference`` holds ``preference_checks.preference_scores`` of the rows (accuracy, margins, log-probabilities);
        the scores and the stopping count read each pair's prompt and chosen response. On GRPO prompts
        (``data_format.rollouts``), its ``grpo`` holds ``grpo_checks.grpo_scores`` of greedy answers to every row (at
        most ``max_completion_length`` tokens, scored by the trainer's rewards), ``scores`` is None (no reference
        response to score) and the stopping count is of those answers.

    Raises:
        ValueError: as ``held_out_scores`` (every row longer than ``max_seq_length``, a row without fields).
        RuntimeError: GRPO prompts before ``data_format.check_first_batch(trainer)`` kept the trainer's rewards.
    """
    if not rows:
        print("held-out check skipped: no held-out rows (test_size=0, or a single row: nothing to hold out)")
        return None
    if data_format.rollouts:  # GRPO: greedy answers to every held-out prompt, scored; their stops are the count
        return _grpo_check(model, tokenizer, rows, data_format=data_format)
    fitting = rows_within_positions(
        model, tokenizer, rows, max_new_tokens=max_new_tokens, data_format=data_format, what="stopping count"
    )
    short = short_rows(fitting, tokenizer, n=stop_rows, data_format=data_format)
    scored = "preference scores and losses" if data_format.pairs else "losses"
    print(
        f"held-out check: {scored} on {len(rows)} rows, then greedy answers to {len(short)} short-answer prompts "
        f"({max_new_tokens} new tokens at most)...",
        flush=True,  # said before the minutes it can take, also where stdout is a pipe
    )
    preference, chosen = None, None
    if data_format.pairs:  # prompt + chosen: the rows held_out_scores reads, scored once for both
        from . import preference_checks as checks

        nlls = checks.pair_nlls(model, tokenizer, rows)
        preference, chosen = checks.preference_scores(model, tokenizer, rows, nlls=nlls), nlls[0]
    scores = held_out_scores(
        model, tokenizer, rows, data_format=data_format, max_seq_length=max_seq_length, nlls=chosen
    )
    stopping = stopping_count(model, tokenizer, short, max_new_tokens=max_new_tokens, data_format=data_format)
    forgetting = None
    if data_format.forgetting_rows:  # a text run: what the domain cost the instructions
        forgetting = held_out_scores(
            model, tokenizer, data_format.forgetting_rows, data_format=AlpacaFormat(), max_seq_length=max_seq_length
        )
    return HeldOutCheck(scores, stopping, preference, forgetting=forgetting)


def _grpo_check(model, tokenizer, rows: Sequence[dict], *, data_format) -> HeldOutCheck:
    """``held_out_check`` on GRPO prompts: ``grpo_scores`` with the trainer's rewards and completion length."""
    from .grpo_checks import grpo_scores

    if data_format.reward_funcs is None:
        raise RuntimeError("call fmt.check_first_batch(trainer) first: the held-out checks score with its rewards")
    budget = data_format.first_batch["max_completion_length"]
    fitting = rows_within_positions(model, tokenizer, rows, max_new_tokens=budget, data_format=data_format)
    print(
        f"held-out check: greedy answers to {len(fitting)} prompts ({budget} new tokens at most), scored...", flush=True
    )
    scores = grpo_scores(model, tokenizer, fitting, reward_funcs=data_format.reward_funcs, max_new_tokens=budget)
    stopping = StoppingReport(scores.stopped, scores.prompts, budget, scores.answers, scores.new_tokens, scores.ended)
    return HeldOutCheck(None, stopping, grpo=scores)


def heldout_summary(
    before: HeldOutCheck | None, after: HeldOutCheck | None, side_by_side: list[dict] | None = None
) -> dict:
    """The run summary's held-out fields (``summary.build_run_summary(heldout=...)``).

    Returns:
        ``{"heldout_before", "heldout_after"}`` (``HeldOutScores.as_dict``, or None), ``"stopped_before"``,
        ``"stopped_after"``, ``"stop_total"``, ``"stop_max_new_tokens"`` and ``"side_by_side"``
        (``side_by_side.compare_answers`` rows, or []); on preference pairs also ``"preference": {"before",
        "after"}`` (``PreferenceScores.as_dict``), on GRPO prompts ``"grpo": {"before", "after"}``
        (``GrpoScores.as_dict``; ``heldout_*`` None: no losses); a text run with ``forgetting_dataset``:
        ``"forgetting": {"before", "after"}`` (``HeldOutScores.as_dict`` of the Alpaca rows).
    """
    blocks = {}  # the scores only some runs have: a block where a check holds them
    for name in ("preference", "grpo", "forgetting"):
        found = {k: getattr(c, name) for k, c in (("before", before), ("after", after)) if c is not None}
        if any(v is not None for v in found.values()):
            blocks[name] = {k: v.as_dict() for k, v in found.items() if v is not None}
    return blocks | {
        "heldout_before": before.scores.as_dict() if before and before.scores else None,
        "heldout_after": after.scores.as_dict() if after and after.scores else None,
        "stopped_before": before.stopping.stopped if before else None,
        "stopped_after": after.stopping.stopped if after else None,
        "stop_total": (after or before).stopping.total if (after or before) else None,
        "stop_max_new_tokens": (after or before).stopping.max_new_tokens if (after or before) else None,
        "side_by_side": list(side_by_side or []),
    }
