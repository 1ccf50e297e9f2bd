"""Attention kernel outside training: SDPA in place of flex attention while a model scores or generates.

Flex attention runs through a ``torch.compile``d kernel that inductor recompiles for new shapes, and failed
(``NoValidChoicesError``) on the just-trained model (tests/gpu/test_gpu_export.py). Scoring and generation have
no packed rows, so ``sdpa_outside_training`` switches the model to SDPA for the call and back afterwards.
``eager_block_masks`` has transformers build flex attention's block masks without ``torch.compile`` (compiling
the mask builder took 38-240 s of a fresh process's first two steps: docs/speed.md).
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
    """transformers' ``masking_utils.flex_attention_mask`` (same arguments, same mask) built eagerly.

    transformers calls ``create_block_mask(..., _compile=True)``: in a fresh process that compiled for 38 s
    (Alpaca rows) to 240 s (conversations) on the H200, once with static and once with dynamic shapes. Eagerly,
    torch evaluates ``mask_function`` over the whole (batch, 1, q_length, kv_length) grid, a transient
    ``batch_size * q_length * kv_length`` booleans (8 x 2,048 x 2,048: 32 MiB) and an index tensor of the same
    shape, then keeps the (batch, 1, q_length / 128, kv_length / 128) blocks (tests/test_attention.py checks it
    against the document-causal mask of packed rows).

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
    """Have transformers build flex attention's block masks with ``flex_block_mask`` (in this process, for every
    model on flex attention: the masks are the same, only not compiled), when ``model`` trains with it.

    Args:
        model: a transformers model or a PEFT model around one.

    Returns:
        True when ``model`` uses flex attention (the mask builder is then registered), else False.
    """
    if attention_implementation(model) != "flex_attention":
        return False
    from transformers.masking_utils import AttentionMaskInterface

    AttentionMaskInterface.register("flex_attention", flex_block_mask)
    return True
