"""Attention kernel outside training: SDPA in place of flex attention while a model scores or generates.

Flex attention runs through a ``torch.compile``d kernel that inductor recompiles for new shapes, and failed
(``NoValidChoicesError``) on the just-trained model (tests/gpu/test_gpu_export.py). Scoring and generation have
no packed rows, so ``sdpa_outside_training`` switches the model to SDPA for the call and back afterwards.
"""

from __future__ import annotations

from contextlib import contextmanager

#: Attention implementations that are swapped for SDPA outside training.
TRAINING_ONLY_ATTENTION = ("flex_attention",)


def attention_implementation(model) -> str | None:
    """The model's transformers attention implementation (a PEFT model answers for its base), or None."""
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None)


@contextmanager
def sdpa_outside_training(model):
    """Run the block with ``model`` on SDPA attention when it trains with flex attention; restore it after.

    For model calls outside training only (scoring, generation): SDPA does not separate packed rows.

    Args:
        model: a transformers model or a PEFT model around one (anything else is left alone).

    Yields:
        The attention implementation in use during the block.
    """
    before = attention_implementation(model)
    if before not in TRAINING_ONLY_ATTENTION or not hasattr(model, "set_attn_implementation"):
        yield before
        return
    model.set_attn_implementation("sdpa")
    try:
        yield "sdpa"
    finally:
        model.set_attn_implementation(before)
