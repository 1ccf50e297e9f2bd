"""Answer with a chat model: prompts from its chat template (``add_generation_prompt=True``, tokenized as
``apply_chat_template`` does), stopping on ``chat_templates.stop_token_ids``; answers come back without prompt, stop
token or special-token text. The generation core (``core.py``) batches, decodes and streams.
"""

from __future__ import annotations

from typing import Sequence

from ..models.chat_templates import chat_prompt
from ..models.chat_templates import stop_token_ids as template_stop_ids
from ..models.run_record import with_suffix
from .core import decode_answers, generate_answers, stream_answers
from .generation import model_format

#: How chat prompts are tokenized: as ``apply_chat_template`` does (the template writes its own BOS).
CHAT_ENCODING = {"add_special_tokens": False}


def _conversations(conversations) -> list:
    if isinstance(conversations, str):
        return [conversations]
    conversations = list(conversations)
    if conversations and isinstance(conversations[0], dict):  # one conversation given as its turns
        return [conversations]
    return conversations


def _chat_answers(core_fn, model, tokenizer, conversations, stop_token_ids, **options):
    suffix = model_format(model).prompt_suffix  # a load_adapter model: as its run asked
    prompts = [chat_prompt(tokenizer, with_suffix(c, suffix)) for c in _conversations(conversations)]
    stops = list(stop_token_ids or template_stop_ids(tokenizer, model))
    return core_fn(model, tokenizer, prompts, stop_token_ids=stops, encode_kwargs=CHAT_ENCODING, **options)


def chat_generate(
    model, tokenizer, conversations, *, stop_token_ids: Sequence[int] | None = None, return_ids: bool = False, **options
) -> list[str] | list[list[int]]:
    """Answer one or many conversations in one left-padded batch.

    Args:
        model, tokenizer: a chat model and its tokenizer (``chat_templates.set_chat_template`` done).
        conversations: a user message (str), one conversation (list of ``{"role", "content"}``), or a list of either.
        stop_token_ids: ids to stop on; default ``chat_templates.stop_token_ids(tokenizer, model)``.
        return_ids: return each answer's token ids (up to, not including, the stop token) instead of text.
        **options: ``core.GenerationOptions`` fields (``max_new_tokens``: ``DEFAULTS.max_new_tokens``, the article's
            64; greedy unless ``do_sample``; ``decode``, ...).

    Returns:
        One answer per conversation: the text generated up to the first stop token, special tokens removed.

    Raises:
        ValueError, TypeError: as ``core.generate_answers`` (a conversation longer than the model's positions; an
            unknown option).
    """
    answers = _chat_answers(generate_answers, model, tokenizer, conversations, stop_token_ids, **options)
    return [a.ids for a in answers] if return_ids else decode_answers(tokenizer, answers)


def chat_stream(
    model, tokenizer, conversations, *, stop_token_ids: Sequence[int] | None = None, **options
) -> list[str]:
    """Print answers as they are generated (``TextStreamer``), one conversation after another, and return their text;
    the arguments, answers and errors as ``chat_generate``'s."""
    return decode_answers(
        tokenizer, _chat_answers(stream_answers, model, tokenizer, conversations, stop_token_ids, **options)
    )
