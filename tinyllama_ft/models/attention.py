"""Attention kernel outside training: SDPA in place of flex attention while a model scores or generates.

Flex attention's compiled kernel recompiles for new shapes and failed on the just-trained model
(tests/gpu/test_gpu_export.py); scoring and generation have no packed rows, so ``sdpa_outside_training`` uses SDPA
for the call. ``eager_block_masks`` has transformers build flex attention's block masks without ``torch.compile``
(compiling them took 38-240 s: docs/speed.md).
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
    """Run the block with ``model`` (a transformers or PEFT model; anything else is left alone) on SDPA attention
    when it trains with flex attention, restored after; yields the implementation in use. Outside training only:
    SDPA does not separate packed rows."""
    before = attention_implementation(model)
    if before not in TRAINING_ONLY_ATTENTION or not hasattr(model, "set_attn_implementation"):
        yield before
        return
    model.set_attn_implementation("sdpa")
    try:
        yield "sdpa"
    finally:
        model.set_attn_implementation(before)


def flex_block_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function=None,
    attention_mask=None,
    device="cpu",
    **kwargs,
):
    """transformers' ``masking_utils.flex_attention_mask`` (same arguments, same mask) built with
    ``create_block_mask(..., _compile=False)``: a transient (batch, 1, q_length, kv_length) boolean grid (8 x 2,048 x
    2,048: 32 MiB), then the 128 x 128 blocks (tests/test_attention.py checks it on packed rows).

    Args:
        batch_size, q_length, kv_length (int): the mask's shape; q_offset, kv_offset (int): the first query and
            key positions; mask_function: transformers' mask callable ``(b, h, q, kv) -> bool`` (default: causal);
        attention_mask (torch.Tensor | None): (batch, kv) padding mask, 1 for tokens; device: where to build it.

    Returns:
        torch.nn.attention.flex_attention.BlockMask.
    """
    from torch.nn.attention.flex_attention import create_block_mask
    from transformers import masking_utils as mu

    mask_function = mask_function or mu.causal_mask_function
    if attention_mask is not None and not bool(attention_mask.all()):
        padding = mu.prepare_padding_mask(attention_mask, kv_length, kv_offset)
        mask_function = mu.and_masks(mask_function, mu.padding_mask_function(padding))
    mask_function = mu.add_offsets_to_mask_function(mask_function, q_offset, kv_offset)
    return create_block_mask(mask_function, batch_size, None, q_length, kv_length, device=device, _compile=False)


def eager_block_masks(model) -> bool:
    """When ``model`` (transformers or PEFT) trains with flex attention, register ``flex_block_mask`` as
    transformers' builder of its block masks (for this process) and return True; else False."""
    if attention_implementation(model) != "flex_attention":
        return False
    from transformers.masking_utils import AttentionMaskInterface

    AttentionMaskInterface.register("flex_attention", flex_block_mask)
    return True
