"""Training rows tokenized by us: ``input_ids`` + ``completion_mask``, with text from the data kept as text.

Kept over TRL's tokenization of a ``text`` column, which turns special-token text in a row (``</s>``,
``<|im_end|>``) into real control ids (tests/test_tokenization.py). A row is segments ``(text, supervised)``
tokenized once with ``split_special_tokens=True``, the template's EOS appended as an id; a token is supervised
when one of its characters lies in a supervised segment (``token_supervision``, the turn-boundary rule shared
with ``chat_masks``; docs/internals.md says why). ``drop_unsupervised`` counts rows that truncation leaves with no
label, which TRL would drop silently.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Sequence

from ..config.finetune import DEFAULTS
from .alpaca_prompts import format_prompt

#: Rows per tokenizer call in ``tokenize_dataset``'s ``datasets.map`` batches.
BATCH_SIZE = 1000
#: A segment of a training row: ``(text, supervised)``.
Segment = tuple[str, bool]


def alpaca_segments(instruction: str, input: str, output: str, *, template: str = DEFAULTS.template) -> list[Segment]:
    """An Alpaca row (``input`` may be ``""`` or None) as ``[(prompt, False), (output, True)]``: joined, they are
    ``alpaca_prompts.format_prompt(instruction, input, output, template)``. Raises ValueError: unknown ``template``."""
    prompt = format_prompt(instruction, input or "", "", template)
    return [(prompt, False), (output, True)]


def _eos_id(tokenizer) -> int:
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos_token: training rows need one so generation stops")
    return tokenizer.eos_token_id


def token_supervision(offsets: Sequence[tuple[int, int]], supervised: Sequence[int] | bytes) -> list[int]:
    """The turn-boundary rule of the Alpaca and chat paths: a token is supervised when its span holds a
    supervised character (a token straddling a prompt/answer boundary is).

    Args:
        offsets: each token's ``(start, end)`` character span in the tokenized text, end exclusive
            (``return_offsets_mapping``); a zero-width span ``(s, s)`` (a prefix such as SentencePiece's ``▁``)
            counts as the character at ``s``, one at the text's end as none.
        supervised: one value per character of the text, truthy where the character is supervised (a list of
            0/1, a ``bytes`` / ``bytearray``).

    Returns:
        One 0/1 per token, in order.

    Raises:
        ValueError: a span that starts or ends outside the text.
    """
    n = len(supervised)
    cum = list(accumulate((1 if c else 0 for c in supervised), initial=0))  # supervised characters before i
    outside = next(((s, e) for s, e in offsets if not 0 <= s <= e <= n), None)
    if outside is not None:
        raise ValueError(f"token span ({outside[0]}, {outside[1]}) lies outside the text of {n} characters")
    return [int(cum[max(e, min(s + 1, n))] > cum[s]) for s, e in offsets]


def tokenize_segments(rows: Sequence[Sequence[Segment]], tokenizer) -> tuple[list[list[int]], list[list[int]]]:
    """Tokenize rows of segments in one batched call; special-token text in the segments stays text.

    Args:
        rows: each row a list of ``(text, supervised)`` segments, in order.
        tokenizer: a fast (``tokenizers``-backed) tokenizer: offsets give the mask.

    Returns:
        ``(input_ids, completion_mask)``: one list of ids and one of 0/1 per row, of equal lengths, each row ending in
        ``tokenizer.eos_token_id`` (the template's EOS, supervised when the row's last segment is; an EOS the
        tokenizer's own post-processor appends is replaced by it, never doubled); 1 marks a
        token holding supervised text (``token_supervision``: a token straddling the prompt/response boundary
        included) and the appended EOS, 0 the rest (BOS and other tokens the tokenizer adds included).

    Raises:
        ValueError: a slow tokenizer (no offsets), or no ``eos_token``.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer: the response mask needs its offsets")
    eos = _eos_id(tokenizer)
    texts = ["".join(text for text, _ in segments) for segments in rows]
    enc = tokenizer(
        texts,
        split_special_tokens=True,
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
        return_attention_mask=False,
    )
    all_ids, all_masks = [], []
    for segments, text, ids, offsets, added in zip(
        rows, texts, enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"]
    ):
        chars = b"".join((b"\1" if supervised else b"\0") * len(seg_text) for seg_text, supervised in segments)
        ids, offsets, added = list(ids), list(offsets), list(added)
        if ids and added[-1] and ids[-1] == eos:  # the tokenizer's own EOS: ours replaces it
            ids, offsets, added = ids[:-1], offsets[:-1], added[:-1]
        mask = [0 if special else m for m, special in zip(token_supervision(offsets, chars), added)]
        ids.append(eos)
        mask.append(int(bool(segments) and segments[-1][1]))
        all_ids.append(ids)
        all_masks.append(mask)
    return all_ids, all_masks


def tokenize_dataset(dataset, tokenizer, *, template: str = DEFAULTS.template):
    """Add ``input_ids`` and ``completion_mask`` (``tokenize_segments``) to an Alpaca dataset, ``BATCH_SIZE`` rows
    per tokenizer call; a ``text`` column is removed.

    Args:
        dataset: ``datasets.Dataset`` with the Alpaca columns ``instruction``, ``input``, ``output``
            (``instructions.load_instruction_data`` output); a missing input column, or a None input, counts as empty.
        tokenizer: the run's (fast) tokenizer.
        template: as ``alpaca_prompts.format_prompt`` (default ``FinetuneConfig.template``).

    Returns:
        The dataset with the two columns added; every other column kept, in the same row order.

    Raises:
        ValueError: a missing instruction or output column (naming it); no ``eos_token`` (before any batch); unknown
            ``template`` (at the first batch).
    """
    for column in ("instruction", "output"):
        if column not in dataset.column_names:
            raise ValueError(f"tokenize_dataset: no {column!r} column (columns: {dataset.column_names})")
    _eos_id(tokenizer)

    def tokenize_func(batch: dict[str, list]) -> dict[str, list]:
        inputs = batch.get("input") or [""] * len(batch["instruction"])
        rows = [
            alpaca_segments(ins, inp, out, template=template)
            for ins, inp, out in zip(batch["instruction"], inputs, batch["output"])
        ]
        ids, masks = tokenize_segments(rows, tokenizer)
        return {"input_ids": ids, "completion_mask": masks}

    drop = [c for c in ("text", "input_ids", "completion_mask") if c in dataset.column_names]
    return dataset.map(tokenize_func, batched=True, batch_size=BATCH_SIZE, remove_columns=drop or None)


def training_rows(dataset, tokenizer, *, template: str = DEFAULTS.template):
    """The rows the trainer gets: already tokenized ones as they are, Alpaca ones tokenized here.

    Args:
        dataset: a ``datasets.Dataset`` with ``input_ids`` (``tokenize_dataset`` output), or the Alpaca
            columns ``instruction``/``output`` (and ``input``), or only a ``text`` column.
        tokenizer: the run's tokenizer.
        template: as ``alpaca_prompts.format_prompt`` (used only for Alpaca columns).

    Returns:
        ``dataset`` itself when it holds ``input_ids`` or has only ``text`` (TRL tokenizes that text as it is,
        special-token text parsed: build rows with ``tokenize_dataset`` to avoid it); else
        ``tokenize_dataset(dataset, tokenizer, template=template)``.
    """
    if "input_ids" in dataset.column_names or not {"instruction", "output"} <= set(dataset.column_names):
        return dataset
    return tokenize_dataset(dataset, tokenizer, template=template)


def without_rows(dataset, indices: Sequence[int]):
    """``dataset`` (a ``datasets.Dataset``) without the rows at the 0-based ``indices``, in order; the same object
    when there are none."""
    gone = set(indices)
    return dataset.select([i for i in range(len(dataset)) if i not in gone]) if gone else dataset


def drop_unsupervised(
    dataset, *, max_seq_length: int | None, completion_only_loss: bool, split: bool = False, name: str = "train"
):
    """Remove the rows whose loss would see no token, count them and say so.

    Args:
        dataset: tokenized rows (``input_ids`` + ``completion_mask``).
        max_seq_length: the trainer's window: TRL keeps a row's first ``max_seq_length`` tokens ("bfd",
            no packing); None: no cut.
        completion_only_loss: only ``completion_mask`` 1 tokens are supervised.
        split: "bfd_split" or "wrapped" packing, which keep every token (the window does not cut).
        name: the dataset's name in messages ("train", "eval").

    Returns:
        ``(dataset, dropped)``: the rows kept (order kept) and the 0-based indices removed.

    Raises:
        ValueError: every row would be dropped (naming the dataset, ``max_seq_length`` and
            ``completion_only_loss``), so a run never trains on nothing.
    """
    masks = dataset["completion_mask"]
    # the tokens the loss sees within the window: mask-1 ones, or every one but the first (it has no predecessor)
    seen = [m if split or max_seq_length is None else m[:max_seq_length] for m in masks]
    dropped = [i for i, m in enumerate(seen) if (sum(m) if completion_only_loss else len(m) - 1) <= 0]
    if not dropped:
        return dataset, []
    if len(dropped) == len(masks):
        raise ValueError(
            f"{name} dataset: none of its {len(masks)} rows has a token to train on within "
            f"max_seq_length={max_seq_length} with completion_only_loss={completion_only_loss} (the "
            "prompt fills the window, or no response token is left): raise max_seq_length, or apply "
            "lengths.apply_long_rows first"
        )
    print(
        f"{name} dataset: {len(dropped)} of {len(masks)} rows dropped, no token to train on within "
        f"max_seq_length={max_seq_length} (rows from 0: {', '.join(map(str, dropped[:5]))}"
        f"{', ...' if len(dropped) > 5 else ''})"
    )
    return without_rows(dataset, dropped), dropped


def prepare_training_rows(*, train_dataset, eval_dataset, tokenizer, cfg):
    """``(train_dataset, eval_dataset)`` tokenized (``training_rows``) without the rows that have nothing to train on
    (``drop_unsupervised``); a text-only dataset comes back as it is, eval may be None.

    Args:
        cfg: the run's ``FinetuneConfig`` (``template``, ``max_seq_length``, ``packing``, ``packing_strategy``,
            ``completion_only_loss``).

    Raises:
        ValueError: as ``drop_unsupervised``.
    """
    only = cfg.completion_only_loss
    out = []
    for name, ds in (("train", train_dataset), ("eval", eval_dataset)):
        if ds is not None:
            if "input_ids" in ds.column_names and "messages" in ds.column_names:  # tokenized conversations
                ds = ds.remove_columns("messages")  # kept for the held-out checks, not a training column
            ds = training_rows(ds, tokenizer, template=cfg.template)
            if "completion_mask" in ds.column_names:
                split = cfg.packing and cfg.packing_strategy in ("bfd_split", "wrapped")  # no token cut
                ds, _ = drop_unsupervised(
                    ds, max_seq_length=cfg.max_seq_length, completion_only_loss=only, split=split, name=name
                )
        out.append(ds)
    return out[0], out[1]
