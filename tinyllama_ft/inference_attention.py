"""Attention kernel for generation: SDPA in place of flex attention while a model generates.

The fast training plan (``plan.plan_run`` on a bf16 GPU) loads the model with flex attention, whose
document masks skip the blocks packed rows never see. transformers runs flex attention through a
``torch.compile``d kernel, compiled again for new query/key shapes: generation (a new key length every
step) then depends on inductor, which is where issue 10 saw ``stream`` on the just-trained model fail
(``NoValidChoicesError`` in inductor's kernel selection; on 2026-12-01, 3 training steps at 1,024 tokens,
plain ``generate`` under flex attention did not fail: tests/gpu/test_gpu_trained_model.py records it).
Generation has no packed rows, so SDPA computes the same attention with no compiler involved:
``sdpa_while_generating`` switches the model to it for the call and back afterwards (training goes on
with flex attention).
"""

from __future__ import annotations

from contextlib import contextmanager

#: Attention implementations that are swapped for SDPA while generating.
TRAINING_ONLY_ATTENTION = ("flex_attention",)


def attention_implementation(model) -> str | None:
    """The model's transformers attention implementation (a PEFT model answers for its base), or None."""
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None)


@contextmanager
def sdpa_while_generating(model):
    """Run the block with ``model`` on SDPA attention when it trains with flex attention; restore it after.

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
