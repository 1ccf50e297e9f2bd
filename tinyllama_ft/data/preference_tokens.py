"""Preference rows tokenized by the package, for TRL's preference trainers (``train.preference_trainer``).

A response is tokenized after its prompt as an SFT row is (``tokenization.tokenize_segments`` for text,
``chat_masks.tokenize_conversation`` for turns): special-token text stays text and each response ends in exactly
one end-of-sequence (or end-of-turn) id. The columns are TRL's: ``prompt_ids`` / ``chosen_ids`` / ``rejected_ids``
(pairs) or ``prompt_ids`` / ``completion_ids`` / ``label`` (KTO). Rows too long for the window follow ``long_rows``.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Sequence

from ..config.finetune import DEFAULTS
from ..models.chat_templates import TemplateMismatch, end_of_turn_token
from .chat_masks import LONG_ROWS, tokenize_conversation  # a pair's prompt and responses belong in one window too
from .instructions import DataReport
from .tokenization import BATCH_SIZE, alpaca_segments, tokenize_segments


def response_span(mask: Sequence[int]) -> tuple[int, int]:
    """``(start, end)`` of the last run of supervised tokens in ``mask`` (one 0/1 per token: a ``completion_mask`` or
    ``assistant_masks``): the response and its end token, end exclusive; a template's newline after it is not. Raises
    ValueError: no token is supervised."""
    end = next((j + 1 for j in reversed(range(len(mask))) if mask[j]), 0)
    if not end:
        raise ValueError("no supervised token: the row has no response")
    return next((j + 1 for j in reversed(range(end)) if not mask[j]), 0), end


def _encode(rows: list[dict[str, Any]], responses: tuple[str, ...], tokenizer, *, form: str, template: str):
    """Per row, per response column: ``(ids, mask)`` of prompt + response, or a ``TemplateMismatch``."""
    if form == "text":
        out = []
        for start in range(0, len(rows), BATCH_SIZE):  # one tokenizer call per BATCH_SIZE rows
            segments = [
                alpaca_segments(row["prompt"], row["input"], row[column], template=template)
                for row in rows[start : start + BATCH_SIZE]
                for column in responses
            ]
            flat = list(zip(*tokenize_segments(segments, tokenizer)))
            out += [flat[i : i + len(responses)] for i in range(0, len(flat), len(responses))]
        return out
    eot = end_of_turn_token(tokenizer)

    def encode(messages):
        try:
            enc = tokenize_conversation(tokenizer, messages, end_of_turn=eot)
        except TemplateMismatch as e:
            return e
        return enc["input_ids"], enc["assistant_masks"]

    return [[encode(row["prompt"] + row[column]) for column in responses] for row in rows]


def tokenize_preferences(
    dataset,
    tokenizer,
    *,
    form: str,
    template: str = DEFAULTS.template,
    max_seq_length: int = DEFAULTS.max_seq_length,
    long_rows: str = DEFAULTS.long_rows,
    strict: bool = DEFAULTS.strict,
    name: str = "preferences",
):
    """Tokenize checked preference rows (``preferences.load_preference_data``) into TRL's id columns.

    The prompt is the tokens before the response's supervised run (``response_span``); for a pair, the tokens
    ``prompt + chosen`` and ``prompt + rejected`` share (a token merging across the boundary belongs to the
    response, supervised as in SFT). Each response keeps exactly one end id: the tokenizer's EOS (text, the
    Alpaca template) or the chat template's end-of-turn token (conversations, the tokenizer's template).

    Args:
        dataset: a ``datasets.Dataset`` of clean rows: ``prompt`` (+ ``input``) and ``chosen`` / ``rejected``, or
            ``completion`` / ``label``.
        tokenizer: the run's fast tokenizer (with its chat template set for conversations).
        form: ``"text"`` or ``"conversation"`` (as ``load_preference_data`` returns it).
        template: text form: the Alpaca template (``DEFAULTS.template``).
        max_seq_length: tokens of prompt + longest response a row may hold (``DEFAULTS.max_seq_length``).
        long_rows: ``"drop"`` a longer row (kind ``"too long"``), or ``"truncate"`` its responses to the window (their
            end id lost, so no end-of-sequence supervision); a prompt that leaves no room for one response token is
            dropped either way (kind ``"no room for a response"``).
        strict: raise on the first dropped row instead (``DEFAULTS.strict``).
        name: what the rows are, for messages.

    Returns:
        ``(tokenized, report)``: a ``datasets.Dataset`` with ``prompt_ids`` and ``chosen_ids`` / ``rejected_ids``
        (pairs) or ``completion_ids`` / ``label`` (unpaired), rows in order, dropped ones left out; and a printed
        ``DataReport`` (kinds above and ``"template mismatch"``).

    Raises:
        ValueError: ``long_rows`` not in ``LONG_ROWS``; every row dropped; with ``strict``, the first dropped row
            (its 0-based index and field).
    """
    import datasets

    if long_rows not in LONG_ROWS:
        raise ValueError(
            f"long_rows={long_rows!r} is not one of {LONG_ROWS} for preference rows (a pair's prompt and "
            "responses belong in one window)"
        )
    paired = "chosen" in dataset.column_names
    responses = ("chosen", "rejected") if paired else ("completion",)
    rows = list(dataset)
    encodings = {id(row): e for row, e in zip(rows, _encode(rows, responses, tokenizer, form=form, template=template))}

    def check(row):
        encoded = encodings[id(row)]
        failed = next(((c, e) for c, e in zip(responses, encoded) if isinstance(e, Exception)), None)
        if failed is not None:
            return (failed[0], str(failed[1]), "template mismatch"), None
        spans = [response_span(mask) for _, mask in encoded]
        prompt_len = min(start for start, _ in spans)
        if paired:
            prompt_len = min(prompt_len, len(os.path.commonprefix([encoded[0][0], encoded[1][0]])))
        answers = [ids[prompt_len:end] for (ids, _), (_, end) in zip(encoded, spans)]
        longest = prompt_len + max(len(a) for a in answers)
        if prompt_len >= max_seq_length:
            why = f"is {prompt_len} tokens: no room for a response within max_seq_length={max_seq_length}"
            return ("prompt", why, "no room for a response"), None
        if longest > max_seq_length and long_rows == "drop":
            why = f"is {longest} tokens with its prompt, longer than max_seq_length={max_seq_length}"
            return (responses[0] if len(answers) == 1 else "<row>", why, "too long"), None
        room = max_seq_length - prompt_len
        item = {"prompt_ids": encoded[0][0][:prompt_len], **{f"{c}_ids": a[:room] for c, a in zip(responses, answers)}}
        return None, item if paired else {**item, "label": row["label"]}

    report = DataReport(source=f"{name} (tokenized, max_seq_length={max_seq_length})")
    kept = report.keep_each(rows, check, strict=strict)
    print(report.summary())
    if not kept:
        raise ValueError(f"{name}: every row dropped (all {report.total}): nothing to train on\n{report.summary()}")
    ids = datasets.Sequence(datasets.Value("int32"))
    columns = {"prompt_ids": ids, **{f"{c}_ids": ids for c in responses}}
    if not paired:
        columns["label"] = datasets.Value("bool")
    return datasets.Dataset.from_list(kept, features=datasets.Features(columns)), report


def unpair(dataset):
    """``tokenize_preferences``' pairs as KTO's unpaired rows (``prompt_ids``, ``completion_ids``, ``label``; twice the
    rows): ``trl.unpair_preference_dataset`` one pair per batch, so each pair's chosen (label True) is followed by
    its rejected (False) completion and each micro-batch of two or more holds both kinds (TRL's default batches put
    a thousand chosen completions before their rejected ones)."""
    import datasets
    from trl import unpair_preference_dataset

    ids = datasets.Sequence(datasets.Value("int32"))
    unpaired = datasets.Features({"completion": ids, "label": datasets.Value("bool"), "prompt_ids": ids})
    pairs = dataset.select_columns(["prompt_ids", "chosen_ids", "rejected_ids"])
    pairs = pairs.rename_columns({"chosen_ids": "chosen", "rejected_ids": "rejected"})
    rows = unpair_preference_dataset(pairs, batch_size=1, features=unpaired)
    return rows.rename_column("completion", "completion_ids").select_columns(["prompt_ids", "completion_ids", "label"])


def _batch_sequences(batch):
    """``(ids, mask)`` per response sequence of a collated DPO, KTO (not its KL rows) or ORPO batch, unpadded."""
    for prefix in ("", "chosen_", "rejected_"):
        if f"{prefix}input_ids" not in batch:
            continue
        masks = (batch[f"{prefix}labels"] != -100).long() if prefix else batch["completion_mask"]
        for ids, attention, mask in zip(batch[f"{prefix}input_ids"], batch[f"{prefix}attention_mask"], masks):
            keep = attention.bool()
            yield ids[keep].tolist(), mask[keep].tolist()


def pair_supervision(trainer, end_id: int, *, batches: int = 1) -> dict[str, int]:
    """Do the responses of the batches a preference trainer collates end in exactly one supervised end id, with the
    prompt never supervised? Checked on what the trainer really feeds (``get_train_dataloader``).

    Args:
        trainer: a DPO, KTO or ORPO trainer (``train.preference_trainer.build_preference_trainer``).
        end_id: the id each response ends in: the tokenizer's EOS (text) or the end-of-turn id (conversations).
        batches: how many batches to read.

    Returns:
        Counts: ``"sequences"`` (responses with their prompts: two per pair, one per KTO completion);
        ``"sequences_ok"`` (one supervised run, at the end, whose last token is the only ``end_id`` in it);
        ``"without_end"`` (a response truncated to the window: no end id); ``"several_end"`` (more than one end id
        in the response); ``"prompt_supervised"`` (a supervised token before the response's run).
    """
    counts = dict.fromkeys(("sequences", "sequences_ok", "without_end", "several_end", "prompt_supervised"), 0)
    for batch in itertools.islice(trainer.get_train_dataloader(), batches):
        for ids, mask in _batch_sequences(batch):
            counts["sequences"] += 1
            if not any(mask):
                counts["without_end"] += 1
                continue
            start, end = response_span(mask)
            response = ids[start:end]
            ends = response.count(end_id)
            prompt_supervised = any(mask[:start]) or end != len(ids)
            counts["prompt_supervised"] += prompt_supervised
            counts["without_end"] += ends == 0
            counts["several_end"] += ends > 1
            counts["sequences_ok"] += ends == 1 and response[-1] == end_id and not prompt_supervised
    return counts


def describe_pair_supervision(counts: dict[str, int], *, end_token: str) -> str:
    """One line on ``pair_supervision``'s counts, for the notebook (``end_token``: the end id's text)."""
    line = (
        f"first batch: {counts['sequences_ok']} of {counts['sequences']} responses end in one supervised {end_token}, "
        f"prompts unsupervised"
    )
    problems = {k: counts[k] for k in ("without_end", "several_end", "prompt_supervised") if counts[k]}
    if problems:
        line += "; " + ", ".join(f"{k.replace('_', ' ')}: {n}" for k, n in problems.items())
        if "without_end" in problems:
            line += " (a response cut by long_rows='truncate' has no end token)"
    return line
