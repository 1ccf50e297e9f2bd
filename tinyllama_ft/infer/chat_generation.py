"""Answer with a chat model: prompts from its chat template, stopping on the template's stop tokens.

The prompt is the conversation rendered with ``add_generation_prompt=True`` (the assistant header, e.g.
``<|im_start|>assistant\\n``), tokenized as ``apply_chat_template`` tokenizes it (``add_special_tokens=False``:
the template writes its own BOS where it has one). Generation stops on any of ``chat_templates.stop_token_ids``
(the end-of-turn token, then EOS: Qwen's ``<|im_end|>`` and ``<|endoftext|>``, Llama-3's ``<|eot_id|>`` and
``<|end_of_text|>``); the answer is returned without the prompt, the stop token or any special-token text.
Both helpers render the prompts and hand them to the generation core (``core.py``): the same batching, decoder
choice (the CUDA-graph decoder for a merged Llama-class chat model on CUDA) and streaming as Alpaca answers.
"""

from __future__ import annotations

from typing import Sequence

from ..config.finetune import DEFAULTS
from ..models.chat_templates import chat_prompt
from ..models.chat_templates import stop_token_ids as template_stop_ids
from .core import decode_answers, generate_answers, stream_answers

#: How chat prompts are tokenized: as ``apply_chat_template`` does (the template writes its own BOS).
CHAT_ENCODING = {"add_special_tokens": False}


def _conversations(conversations) -> list:
    if isinstance(conversations, str):
        return [conversations]
    conversations = list(conversations)
    if conversations and isinstance(conversations[0], dict):  # one conversation given as its turns
        return [conversations]
    return conversations


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
    decode: str = "auto",
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
        decode: as ``core.generate_answers``.

    Returns:
        One answer per conversation: the text generated up to the first stop token, special tokens removed.

    Raises:
        ValueError: as ``core.generate_answers`` (the pad token is a stop token).
    """
    answers = generate_answers(
        model,
        tokenizer,
        [chat_prompt(tokenizer, c) for c in _conversations(conversations)],
        stop_token_ids=list(stop_token_ids or template_stop_ids(tokenizer, model)),
        encode_kwargs=CHAT_ENCODING,
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        temperature=temperature,
        top_p=top_p,
        logits_processor=logits_processor,
        decode=decode,
    )
    return [a.ids for a in answers] if return_ids else decode_answers(tokenizer, answers)


def chat_stream(
    model,
    tokenizer,
    conversations,
    *,
    max_new_tokens: int = DEFAULTS.max_new_tokens,
    stop_token_ids: Sequence[int] | None = None,
    decode: str = "auto",
) -> list[str]:
    """Print greedy answers as they are generated (``TextStreamer``), one conversation after another.

    Args:
        model, tokenizer, conversations, max_new_tokens, stop_token_ids, decode: as ``chat_generate``.

    Returns:
        The answers, as ``chat_generate`` returns them.
    """
    answers = stream_answers(
        model,
        tokenizer,
        [chat_prompt(tokenizer, c) for c in _conversations(conversations)],
        stop_token_ids=list(stop_token_ids or template_stop_ids(tokenizer, model)),
        encode_kwargs=CHAT_ENCODING,
        max_new_tokens=max_new_tokens,
        decode=decode,
    )
    return decode_answers(tokenizer, answers)
