"""Does every training sample end in exactly one supervised EOS? Checked on the batches the trainer collates.

A model that never sees a supervised EOS never learns to stop; a tokenizer that appends its own EOS, a
collator that masks the pad id when pad == EOS, or truncation can each lose or double it silently.
Kept: TRL has no such check (tests/test_eos.py: a pad-masking collator, a doubled EOS).
"""

from __future__ import annotations

import itertools


def eos_supervision(trainer, batches: int | None = 1, split: str = "train") -> dict[str, int]:
    """Check, on the collated batches the trainer really sees, that every sample ends in one supervised EOS.

    A sample is a packed row between ``position_ids`` resets to 0 (padding-free "bfd"/"bfd_split" batches),
    or one row of a padded batch, its padding left out (``attention_mask`` 0; trailing pad ids at
    ``position_ids`` 0), so a pad token equal to EOS is never counted. An EOS is supervised when ``labels``
    holds the EOS id at its position, not -100 (a collator masking every pad id when pad == EOS).

    Args:
        trainer: from ``build_trainer``.
        batches: how many batches to inspect; None: all of them (one epoch).
        split: ``"train"`` (``get_train_dataloader``) or ``"eval"`` (``get_eval_dataloader``).

    Returns:
        Counts over the inspected samples: ``"samples"``; ``"samples_ok"`` (exactly one EOS, at the sample's
        last position, supervised); ``"samples_without_eos"`` (e.g. a row truncated to ``max_seq_length``
        tokens, or a "bfd_split" piece before the last); ``"samples_with_several_eos"`` (e.g. a tokenizer that
        appends its own EOS to text already ending in one); ``"eos_not_last"`` (samples holding an EOS whose
        last token is not EOS); ``"eos_tokens"`` (EOS ids inside samples); ``"eos_supervised"`` and
        ``"eos_masked"`` (those whose label is the EOS id, and those whose label is -100).
        All is well when ``samples_ok == samples``.

    Raises:
        ValueError: ``split`` is not "train"/"eval", there is no eval set, or the trainer packs with
            ``packing_strategy="wrapped"`` (rows are concatenated and cut at window edges: no per-row samples).
    """
    eos = trainer.processing_class.eos_token_id
    keys = (
        "samples",
        "samples_ok",
        "samples_without_eos",
        "samples_with_several_eos",
        "eos_not_last",
        "eos_tokens",
        "eos_supervised",
        "eos_masked",
    )
    counts = dict.fromkeys(keys, 0)
    for ids, labels in collated_samples(trainer, split, batches, what="eos_supervision"):
        at = (ids == eos).nonzero().flatten().tolist()
        supervised = sum(int(labels[j]) == eos for j in at)
        last = bool(at) and at[-1] == len(ids) - 1
        counts["samples"] += 1
        counts["samples_ok"] += len(at) == 1 and last and supervised == 1
        counts["samples_without_eos"] += not at
        counts["samples_with_several_eos"] += len(at) > 1
        counts["eos_not_last"] += bool(at) and not last
        counts["eos_tokens"] += len(at)
        counts["eos_supervised"] += supervised
        counts["eos_masked"] += len(at) - supervised
    return {k: int(v) for k, v in counts.items()}


def collated_samples(trainer, split: str, batches: int | None, *, what: str):
    """``(input_ids, labels)`` of each sample (``eos_supervision`` says what one is) in the first ``batches`` collated
    batches (None: one epoch) of a TRL trainer's ``split`` ("train" or "eval"); ``what`` names the calling check in
    messages. Raises ValueError: as ``require_row_samples`` (before any batch is read)."""
    require_row_samples(trainer, split, what=what)
    pad = trainer.processing_class.pad_token_id
    loader = trainer.get_train_dataloader() if split == "train" else trainer.get_eval_dataloader()
    for batch in itertools.islice(loader, batches):  # None: every batch
        yield from _samples(batch, pad)


def _samples(batch, pad_id):
    """``(input_ids, labels)`` of each sample in a collated batch, padding excluded (see ``eos_supervision``)."""
    ids, labels = batch["input_ids"], batch["labels"]
    positions, mask = batch.get("position_ids"), batch.get("attention_mask")
    for r in range(ids.shape[0]):
        if mask is not None:  # padded batch: the row's real tokens (right or left padding)
            valid = mask[r].nonzero().flatten()
            lo, hi = (int(valid[0]), int(valid[-1]) + 1) if len(valid) else (0, 0)
        else:  # padding-free: only a pad_to_multiple_of tail, pad ids each at position 0
            lo, hi = 0, ids.shape[1]
            while hi > 1 and int(positions[r, hi - 1]) == 0 and int(ids[r, hi - 1]) == pad_id:
                hi -= 1
        starts = [lo]
        if positions is not None:
            starts += [int(j) for j in (positions[r, lo + 1 : hi] == 0).nonzero().flatten() + lo + 1]
        for s, e in zip(starts, starts[1:] + [hi]):
            if e > s:
                yield ids[r, s:e], labels[r, s:e]


def require_row_samples(trainer, split: str, *, what: str) -> None:
    """Check that a TRL trainer's collated batches of ``split`` can be cut into rows (``_samples``) for the
    supervision check ``what`` (named in the message).

    Raises:
        ValueError: ``split`` is not "train"/"eval", or "eval" without an eval set; or the split is packed with
            ``packing_strategy="wrapped"`` (rows are concatenated and cut at window edges: no per-row samples).
    """
    if split not in ("train", "eval") or split == "eval" and trainer.eval_dataset is None:
        raise ValueError(f"{what}: split={split!r} must be 'train', or 'eval' with an eval set")
    args = trainer.args
    packing = args.packing if split == "train" or getattr(args, "eval_packing", None) is None else args.eval_packing
    if packing and getattr(args, "packing_strategy", "bfd") == "wrapped":
        raise ValueError(
            f"{what}: packing_strategy='wrapped' concatenates rows and cuts them at window edges, so a "
            "batch has no per-row samples to check; use 'bfd' or 'bfd_split'"
        )


def eos_first_batch(trainer) -> dict[str, int] | None:
    """``eos_supervision``'s counts on the first training batch of ``trainer`` (``sft_trainer.build_trainer``), or
    None when it packs with ``packing_strategy="wrapped"`` (rows cut at window edges: no samples to tell apart)."""
    args = trainer.args
    if getattr(args, "packing", False) and getattr(args, "packing_strategy", "bfd") == "wrapped":
        return None
    return eos_supervision(trainer)


def describe_eos(counts: dict[str, int] | None) -> str:
    """One line for the notebook about ``eos_first_batch``'s counts."""
    if counts is None:
        return "first batch: not checked (packing_strategy='wrapped' has no per-row samples)"
    return (
        f"first batch: {counts['samples']} samples, {counts['samples_ok']} ending in exactly one supervised EOS "
        f"(without EOS: {counts['samples_without_eos']}, several EOS: {counts['samples_with_several_eos']}, "
        f"EOS masked: {counts['eos_masked']})"
    )
