"""A pad token that is not EOS: a collator that masks pad ids must never mask the EOS the model learns to stop at.

Its own module so that every model source (``loading.load_model``, ``gguf_source.load_gguf``) can set it
without importing the other, and every generation loop pads its batches with it (``encode_left_padded``).
"""

from __future__ import annotations


def ensure_pad_token(tokenizer, model=None) -> None:
    """Give the tokenizer a pad token that is not EOS (in place): ``<unk>`` when it has one (Unsloth's choice on
    Llama), else a new ``<|pad|>``, the model's embeddings resized and its configs' ``pad_token_id`` set when given."""
    eos = tokenizer.eos_token
    if tokenizer.pad_token is not None and tokenizer.pad_token != eos:
        return
    if tokenizer.unk_token is not None and tokenizer.unk_token != eos:
        tokenizer.pad_token = tokenizer.unk_token
    else:
        tokenizer.add_special_tokens({"pad_token": "<|pad|>"})
        if model is not None:
            model.resize_token_embeddings(len(tokenizer))
    if model is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.pad_token_id = tokenizer.pad_token_id


def encode_left_padded(tokenizer, texts, *, model, **kwargs):
    """Tokenize generation prompts as one batch padded on the left (every answer starts right after its prompt) with
    a pad that is never EOS (``ensure_pad_token``); the tokenizer's own ``padding_side`` stays.

    Args:
        tokenizer: the run's tokenizer. texts: the N rendered prompts.
        model: the model the batch is for: its device, and its embeddings when a pad token must be added.
        **kwargs: for the tokenizer call (``split_special_tokens=True`` for Alpaca prompts, ``add_special_tokens=False``
            for a chat template's rendering).

    Returns:
        A ``BatchEncoding`` of ``input_ids`` and ``attention_mask``, (N, longest prompt) each, on the model's device.
    """
    if tokenizer.pad_token is None or tokenizer.pad_token == tokenizer.eos_token:
        ensure_pad_token(tokenizer, model)
    batch = tokenizer(list(texts), return_tensors="pt", padding=True, padding_side="left", **kwargs)
    return batch.to(next(model.parameters()).device)
