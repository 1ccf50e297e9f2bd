"""Loss on assistant turns only: conversations tokenized into ``input_ids`` + ``assistant_masks``.

Kept over TRL's ``assistant_only_loss``, which needs ``{% generation %}`` markers that SmolLM2's, Zephyr's and
Llama-2's templates lack (tests/test_chat_masks.py). The masks come from the template as shipped, rendered turn by
turn (``chat_templates.render_turns``); a row it cannot split is a counted ``"template mismatch"``. Special-token
text typed in a turn stays text, and a token straddling the turn boundary is supervised
(``tokenization.token_supervision``; docs/internals.md says why).
"""

from __future__ import annotations

from typing import get_args

from ..config.finetune import DEFAULTS
from ..config.packing import ConversationLongRows
from ..models.chat_templates import TemplateMismatch, end_of_turn_token, render_turns, special_tokens
from .instructions import DataReport
from .tokenization import token_supervision

#: ``long_rows`` choices for conversations: drop a conversation longer than ``max_seq_length`` (counted), or keep
#: its start; ``"split"`` (the Alpaca path's) is refused: a conversation cut over windows loses its turns' context.
LONG_ROWS: tuple[str, ...] = get_args(ConversationLongRows)


def _text_ids(tokenizer, text: str) -> list[int]:
    """``text`` tokenized with special-token text kept as text, without a prefix the tokenizer adds at the start."""
    probe = "a"
    enc = tokenizer(probe + text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
    ids = [i for i, (s, _) in zip(enc["input_ids"], enc["offset_mapping"]) if s >= len(probe)]
    if tokenizer.decode(ids) == text:
        return ids
    return tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def tokenize_conversation(tokenizer, messages, *, end_of_turn: str | None = None) -> dict[str, list[int]]:
    """One conversation as ``{"input_ids", "assistant_masks"}`` (1 = supervised), untruncated.

    Args:
        tokenizer: a fast tokenizer with a chat template (``chat_templates.set_chat_template``).
        messages: normalised turns (``conversations.check_conversations``).
        end_of_turn: the template's end-of-turn token (default: read from the template).

    Returns:
        ``input_ids`` equal to ``apply_chat_template(messages, tokenize=True)`` for content without special-token
        text; ``assistant_masks`` of the same length (1 where a token holds a supervised character: a token
        straddling an assistant header and its answer included).

    Raises:
        TemplateMismatch: as ``render_turns``.
    """
    pieces = render_turns(tokenizer, messages, end_of_turn=end_of_turn)
    text = "".join(p[0] for p in pieces)
    supervised = b"".join((b"\1" if sup else b"\0") * len(piece) for piece, sup, _ in pieces)
    content = b"".join((b"\1" if own else b"\0") * len(piece) for piece, _, own in pieces)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)  # cut later
    special_ids = set(tokenizer.convert_tokens_to_ids(special_tokens(tokenizer)))
    ids, mask = [], []
    token_mask = token_supervision(enc["offset_mapping"], supervised)
    for token_id, (s, e), m in zip(enc["input_ids"], enc["offset_mapping"], token_mask):
        as_text = token_id in special_ids and e > s and all(content[s:e])  # parsed out of a turn's text: keep it text
        spliced = _text_ids(tokenizer, text[s:e]) if as_text else [token_id]
        ids += spliced
        mask += [m] * len(spliced)
    return {"input_ids": ids, "assistant_masks": mask}


def tokenize_conversations(
    dataset,
    tokenizer,
    *,
    max_seq_length: int = DEFAULTS.max_seq_length,
    long_rows: str = DEFAULTS.long_rows,
    assistant_only_loss: bool = DEFAULTS.assistant_only_loss,
    strict: bool = DEFAULTS.strict,
):
    """Tokenize a ``messages`` dataset for assistant-only loss; drop (and count) rows that cannot train.

    Args:
        dataset: a ``datasets.Dataset`` with a ``messages`` column (``conversations.load_conversations``).
        tokenizer: as ``tokenize_conversation``.
        max_seq_length: tokens per training sequence (the trainer's ``max_length``); default
            ``DEFAULTS.max_seq_length``.
        long_rows: ``"drop"`` (``DEFAULTS.long_rows``) a row longer than ``max_seq_length`` (kind ``"too long"``),
            or ``"truncate"`` it to its first ``max_seq_length`` tokens (a row then left with no supervised token
            is dropped as ``"no supervised token"``).
        assistant_only_loss: True (``DEFAULTS.assistant_only_loss``): the masks of ``tokenize_conversation``;
            False: every token supervised (mask of ones), the template's markup and user turns included.
        strict: raise on the first dropped row instead (``DEFAULTS.strict``).

    Returns:
        ``(tokenized, report)``: a ``datasets.Dataset`` with ``input_ids``, ``assistant_masks`` and the row's
        ``messages`` (for the held-out checks; the trainer drops it, ``tokenization.prepare_training_rows``; rows
        in order, dropped ones left out), and a ``data.DataReport`` (kinds ``"template mismatch"``, ``"too long"``,
        ``"no supervised token"``), already printed.

    Raises:
        ValueError: unknown ``long_rows``; every row dropped ("no row has a supervised assistant token"); with
            ``strict``, the first dropped row, naming its 0-based index.
    """
    import datasets

    if long_rows not in LONG_ROWS:
        raise ValueError(
            f"long_rows={long_rows!r} is not one of {LONG_ROWS} for conversations (a conversation split "
            "over windows loses its turns' context)"
        )
    eot = end_of_turn_token(tokenizer)

    def check(row):
        try:
            enc = tokenize_conversation(tokenizer, row["messages"], end_of_turn=eot)
        except TemplateMismatch as e:
            return ("messages", str(e), "template mismatch"), None
        if not assistant_only_loss:
            enc["assistant_masks"] = [1] * len(enc["input_ids"])
        n = len(enc["input_ids"])
        if n > max_seq_length and long_rows == "drop":
            return ("messages", f"is {n} tokens, longer than max_seq_length={max_seq_length}", "too long"), None
        enc = {k: v[:max_seq_length] for k, v in enc.items()}
        if not any(enc["assistant_masks"]):
            why = f"has no supervised assistant token in its first {max_seq_length} tokens"
            return ("messages", why, "no supervised token"), None
        return None, {**enc, "messages": [{"role": m["role"], "content": m["content"]} for m in row["messages"]]}

    report = DataReport(source=f"conversations (tokenized, max_seq_length={max_seq_length})")
    kept = report.keep_each(dataset, check, strict=strict)
    print(report.summary())
    if not kept:
        raise ValueError(
            f"conversations: no row has a supervised assistant token (all {report.total} dropped): "
            f"nothing to train on\n{report.summary()}"
        )
    features = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "assistant_masks": datasets.Sequence(datasets.Value("int8")),
            "messages": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
        }
    )
    return datasets.Dataset.from_list(kept, features=features), report


def assistant_supervision(
    trainer, end_of_turn_id: int, *, batches: int | None = 1, split: str = "train"
) -> dict[str, int]:
    """Check the collated batches the trainer really sees (samples cut as ``eos_check.eos_supervision`` cuts them):
    supervised tokens come in runs (maximal stretches of labels != -100), each closed by a supervised end-of-turn.

    Args:
        trainer: a TRL ``SFTTrainer`` built on ``tokenize_conversations`` output.
        end_of_turn_id: the template's end-of-turn id (``chat_templates.check_stop_tokens``).
        batches: how many batches to read; None: one epoch.
        split: ``"train"`` or ``"eval"``.

    Returns:
        Counts: ``"samples"``, ``"samples_ok"`` (at least one run and every run ends in the end-of-turn id),
        ``"samples_unsupervised"`` (no supervised token), ``"runs"``, ``"runs_ending_in_eot"``,
        ``"supervised_tokens"``, ``"masked_tokens"``, ``"eot_supervised"``, ``"eot_masked"`` (end-of-turn ids of
        system/user turns). All is well when ``samples_ok == samples``.

    Raises:
        ValueError: as ``eos_check.require_row_samples``: a bad ``split``, or ``packing_strategy="wrapped"``.
    """
    from .eos_check import collated_samples

    keys = (
        "samples",
        "samples_ok",
        "samples_unsupervised",
        "runs",
        "runs_ending_in_eot",
        "supervised_tokens",
        "masked_tokens",
        "eot_supervised",
        "eot_masked",
    )
    counts = dict.fromkeys(keys, 0)
    for ids, labels in collated_samples(trainer, split, batches, what="assistant_supervision"):
        ids, labels = ids.tolist(), labels.tolist()
        sup = [label != -100 for label in labels]
        ends = [j for j in range(len(sup)) if sup[j] and (j + 1 == len(sup) or not sup[j + 1])]
        good_ends = sum(ids[j] == end_of_turn_id for j in ends)
        counts["samples"] += 1
        counts["samples_ok"] += bool(ends) and good_ends == len(ends)
        counts["samples_unsupervised"] += not ends
        counts["runs"] += len(ends)
        counts["runs_ending_in_eot"] += good_ends
        counts["supervised_tokens"] += sum(sup)
        counts["masked_tokens"] += len(sup) - sum(sup)
        counts["eot_supervised"] += sum(t == end_of_turn_id and s for t, s in zip(ids, sup))
        counts["eot_masked"] += sum(t == end_of_turn_id and not s for t, s in zip(ids, sup))
    return {k: int(v) for k, v in counts.items()}


def show_supervision(tokenizer, input_ids, assistant_masks) -> str:
    """One tokenized row as text with the supervised tokens in ``[[...]]`` (for a person to read).

    Args:
        tokenizer: the row's tokenizer. input_ids, assistant_masks: one row (lists or ``labels``-style masks).

    Returns:
        The decoded row, special tokens shown, each supervised stretch wrapped in ``[[`` ``]]``; each stretch is
        decoded whole (a SentencePiece tokenizer decoding one token at a time drops the spaces between words).
    """
    import itertools

    runs = itertools.groupby(zip(input_ids, assistant_masks), key=lambda pair: bool(pair[1]))
    texts = ((supervised, tokenizer.decode([token_id for token_id, _ in run])) for supervised, run in runs)
    return "".join(f"[[{text}]]" if supervised else text for supervised, text in texts)


def describe_supervision(counts: dict[str, int], *, end_of_turn: str) -> str:
    """One line on ``assistant_supervision``'s counts, for the notebook.

    Args:
        counts: ``assistant_supervision`` output.
        end_of_turn: the end-of-turn token's text (``families.FamilySetup.end_of_turn``), for the message.

    Returns:
        ``"N of N samples: ... closed by <eot>"`` when every sample is well supervised, else a line beginning
        ``"WARNING"`` that says how many samples are not (no supervised token, or a supervised stretch that
        does not end in the end-of-turn token: a template or mask mismatch, or a sample cut by truncation).
    """
    n, ok = counts["samples"], counts["samples_ok"]
    line = (
        f"{ok} of {n} samples: {counts['runs']} supervised stretches ({counts['supervised_tokens']} tokens), "
        f"{counts['runs_ending_in_eot']} closed by {end_of_turn}; {counts['masked_tokens']} tokens at label -100 "
        f"({counts['eot_masked']} {end_of_turn} of system/user turns among them)"
    )
    if ok == n and n:
        return line
    return (
        f"WARNING: {n - ok} of {n} samples are not supervised on assistant turns closed by {end_of_turn} "
        f"({counts['samples_unsupervised']} with no supervised token): {line}"
    )
