"""A pad token that is not EOS: a collator that masks pad ids must never mask the EOS the model learns to stop at.

Its own module so that every model source (``modeling.load_model``, ``gguf_source.load_gguf``) can set it
without importing the other.
"""

from __future__ import annotations


def ensure_pad_token(tokenizer, model=None) -> None:
    """Give the tokenizer a pad token that is not EOS (in place).

    ``<unk>`` when the tokenizer has one (what Unsloth picks on Llama); else a new ``<|pad|>`` token,
    with the model's embeddings resized to match when ``model`` is given. Padding on the right for
    training (generation pads on the left by itself).
    """
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
