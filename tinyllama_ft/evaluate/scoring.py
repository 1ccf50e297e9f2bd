"""The pieces every held-out check reads: per-token negative log-likelihoods in batches, and eval mode.

``held_out`` (losses, stopping), ``preference_checks`` (pair log-probabilities) and ``grpo_checks`` (scored greedy
answers) import them from here, so ``held_out`` can call the method-specific checks without a cycle.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

from ..models.attention import sdpa_outside_training


def token_nlls(model, tokenizer, ids: Sequence[Sequence[int]], *, batch_size: int = 4, max_batch_tokens: int = 4096):
    """Each row's per-token negative log-likelihood under ``model``, in batches, in eval mode.

    Args:
        model, tokenizer: a causal LM (a PEFT model too), on any device, and its tokenizer (its pad id pads;
            padding is masked out, never read).
        ids: token ids per row, each of at least 2 tokens.
        batch_size: most rows per forward pass.
        max_batch_tokens: most padded tokens per forward pass (rows x longest row; a longer row goes alone), which
            bounds the logits (tokens x vocab); log-probabilities are taken one row at a time in float32.

    Yields:
        ``(index, nll)`` in row order: ``nll`` a float32 CPU tensor of ``len(ids[index]) - 1`` values, ``nll[t]``
        = -log p(``ids[index][t + 1]`` | the tokens before it), in nats.
    """
    import torch
    from torch.nn.functional import cross_entropy
    from torch.nn.utils.rnn import pad_sequence

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0  # masked out: never read
    device = next(model.parameters()).device
    chunks: list[list[int]] = []
    for i in range(len(ids)):  # in order; a chunk grows while it fits batch_size rows and max_batch_tokens tokens
        last_chunk = chunks[-1] if chunks else None
        wide = max([len(ids[j]) for j in last_chunk or []] + [len(ids[i])])
        if last_chunk and len(last_chunk) < batch_size and (len(last_chunk) + 1) * wide <= max_batch_tokens:
            last_chunk.append(i)
        else:
            chunks.append([i])
    with eval_mode(model), torch.inference_mode():
        for chunk in chunks:
            input_ids = pad_sequence([torch.tensor(ids[i]) for i in chunk], batch_first=True, padding_value=pad_id)
            attention = pad_sequence([torch.ones(len(ids[i]), dtype=torch.long) for i in chunk], batch_first=True)
            logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
            for b, i in enumerate(chunk):  # one row's float32 log-probabilities at a time, on the model's device
                row = logits[b, : len(ids[i]) - 1].float()
                yield i, cross_entropy(row, input_ids[b, 1 : len(ids[i])].to(row.device), reduction="none").cpu()


@contextmanager
def eval_mode(model):
    """``model.eval()`` on SDPA attention inside the block (``inference_attention``), both restored after."""
    was_training = model.training
    model.eval()
    try:
        with sdpa_outside_training(model):
            yield model
    finally:
        model.train(was_training)
