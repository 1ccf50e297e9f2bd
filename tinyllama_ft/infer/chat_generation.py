"""Answer with a chat model: prompts from its chat template, stopping on the template's stop tokens.

The prompt is the conversation rendered with ``add_generation_prompt=True`` (the assistant header, e.g.
``<|im_start|>assistant\\n``), tokenized as ``apply_chat_template`` tokenizes it (``add_special_tokens=False``:
the template writes its own BOS where it has one). Generation stops on any of ``chat_templates.stop_token_ids``
(the end-of-turn token, then EOS: Qwen's ``<|im_end|>`` and ``<|endoftext|>``, Llama-3's ``<|eot_id|>`` and
``<|end_of_text|>``); the answer is returned without the prompt, the stop token or any special-token text.
"""

from __future__ import annotations

from typing import Sequence

from ..config.finetune import DEFAULTS
from ..models.attention import sdpa_outside_training
from ..models.chat_templates import chat_prompt
from ..models.chat_templates import stop_token_ids as template_stop_ids
from ..models.pad_token import encode_left_padded
from .generation import prepare_for_inference


def _conversations(conversations) -> list:
    if isinstance(conversations, str):
        return [conversations]
    conversations = list(conversations)
    if conversations and isinstance(conversations[0], dict):  # one conversation given as its turns
        return [conversations]
    return conversations


def _cut(ids: list[int], stops: Sequence[int]) -> list[int]:
    for j, token_id in enumerate(ids):
        if token_id in stops:
            return ids[:j]
    return ids


def chat_generate(
    model,
    tokenizer,
    conversations,
    *,
    max_new_tokens: int = DEFAULTS.max_new_tokens,
    stop_token_ids: Sequence[int] | None = None,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    logits_processor=None,
    return_ids: bool = False,
) -> list[str] | list[list[int]]:
    """Answer one or many conversations in one left-padded batch.

    Args:
        model, tokenizer: a chat model and its tokenizer (``chat_templates.set_chat_template`` done).
        conversations: a user message (str), one conversation (list of ``{"role", "content"}``), or a list of either.
        max_new_tokens: most tokens per answer (``DEFAULTS.max_new_tokens``: the article's 64).
        stop_token_ids: ids to stop on; default ``chat_templates.stop_token_ids(tokenizer, model)``.
        do_sample, temperature, top_p: sampling (greedy by default); temperature/top_p apply only when sampling.
        logits_processor: optional ``transformers.LogitsProcessorList``.
        return_ids: return each answer's token ids (up to, not including, the stop token) instead of text.

    Returns:
        One answer per conversation: the text generated up to the first stop token, special tokens removed.
    """
    import torch

    stops = list(stop_token_ids or template_stop_ids(tokenizer, model))
    prompts = [chat_prompt(tokenizer, c) for c in _conversations(conversations)]
    prepare_for_inference(model)
    batch = encode_left_padded(tokenizer, prompts, model=model, add_special_tokens=False)
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        eos_token_id=stops,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )
    if do_sample:
        kwargs.update(temperature=temperature, top_p=top_p)
    with torch.inference_mode(), sdpa_outside_training(model):
        out = model.generate(**batch, logits_processor=logits_processor, **kwargs)
    answers = [_cut(row.tolist(), stops) for row in out[:, batch["input_ids"].shape[1] :]]
    return answers if return_ids else [tokenizer.decode(a, skip_special_tokens=True) for a in answers]


def chat_stream(
    model,
    tokenizer,
    conversations,
    *,
    max_new_tokens: int = DEFAULTS.max_new_tokens,
    stop_token_ids: Sequence[int] | None = None,
) -> list[str]:
    """Print greedy answers as they are generated (``TextStreamer``), one conversation after another.

    Args:
        model, tokenizer, conversations, max_new_tokens, stop_token_ids: as ``chat_generate``.

    Returns:
        The answers, as ``chat_generate`` returns them.
    """
    import torch
    from transformers import TextStreamer

    stops = list(stop_token_ids or template_stop_ids(tokenizer, model))
    prepare_for_inference(model)
    answers = []
    for conversation in _conversations(conversations):
        prompt = chat_prompt(tokenizer, conversation)
        batch = tokenizer([prompt], return_tensors="pt", add_special_tokens=False).to(model.device)
        streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        with torch.inference_mode(), sdpa_outside_training(model):
            out = model.generate(
                **batch,
                streamer=streamer,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=stops,
                pad_token_id=tokenizer.pad_token_id,
                use_cache=True,
            )
        answers.append(
            tokenizer.decode(_cut(out[0, batch["input_ids"].shape[1] :].tolist(), stops), skip_special_tokens=True)
        )
    return answers
