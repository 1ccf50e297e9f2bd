"""Attention kernel outside training: SDPA in place of flex attention while a model scores or generates.

The fast training plan (``plan.plan_run`` on a bf16 GPU) loads the model with flex attention, whose
document masks skip the blocks packed rows never see. transformers runs flex attention through a
``torch.compile``d kernel, compiled again for new query/key shapes: generation (a new key length every
step) then depends on inductor, which is where issue 10 saw ``stream`` on the just-trained model fail
(``NoValidChoicesError`` in inductor's kernel selection; on 2026-12-01, 3 training steps at 1,024 tokens,
plain ``generate`` under flex attention did not fail: tests/gpu/test_gpu_trained_model.py records it). The
same error came back on 2026-12-01 from a plain no-grad forward (logits of one 29-token prompt) of a 4-bit
PEFT TinyLlama just trained for 2 steps under flex attention (tests/gpu/test_gpu_export.py's fixture):
inductor recompiles flex attention with dynamic shapes for the new, inference-mode call and finds no
kernel. Scoring and generation have no packed rows, so SDPA (with the padding mask) computes the same
attention with no compiler involved: ``sdpa_outside_training`` switches the model to it for the call and
back afterwards (training goes on with flex attention). Every package helper that runs the model outside
the Trainer (``generation``, ``chat_generation``, ``evaluation``, ``tryout``) runs it inside this.
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
