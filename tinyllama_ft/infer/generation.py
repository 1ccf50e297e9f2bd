"""Answer instructions with a (LoRA) model: batch generation and token-by-token streaming (article cells 9-10).

The run's prompt format (Alpaca with an empty response, or a chat template) and its stop tokens; answers come back
without prompt or special-token text. The generation core (``core.py``) batches, stops, decodes and streams.
"""

from __future__ import annotations

from typing import Sequence

from ..data.formats import AlpacaFormat, recorded_data_format
from ..models.run_record import RECORD_ATTRIBUTE
from .core import decode_answers, generate_answers, stream_answers


def one_per_instruction(value, n: int, name: str) -> list[str]:
    """``value`` as ``n`` strings: None gives ``n`` empty strings, one string is repeated, a list is kept. Raises
    ValueError: a list whose length is not ``n`` (naming ``name``)."""
    if value is None:
        return [""] * n
    if isinstance(value, str):
        return [value] * n
    value = list(value)
    if len(value) != n:
        raise ValueError(f"{name} has {len(value)} items for {n} instructions")
    return value


def model_format(model, template: str | None = None):
    """The format ``model`` is prompted in: a ``template`` given, an ``AlpacaFormat`` of it; else the format its
    record says (``adapters.load_adapter``'s model: ``formats.recorded_data_format``), for any other model
    ``AlpacaFormat(DEFAULTS.template)``. Either adds the text the record's run added after each question."""
    recorded = recorded_data_format(getattr(model, RECORD_ATTRIBUTE, None) or {})
    if template is None:
        return recorded
    fmt = AlpacaFormat(template)
    fmt.prompt_suffix = recorded.prompt_suffix
    return fmt


def answer_with(core_fn, model, tokenizer, instructions, inputs, template, data_format, **options):
    """The answers of ``core_fn`` (``core.generate_answers`` or ``core.stream_answers``, given ``**options``) to the
    instructions' prompts in ``data_format`` (None: ``model_format(model, template)``), with its stop ids and
    tokenization.

    Args:
        model, tokenizer, instructions, inputs, template, data_format: as ``generate``.

    Returns:
        One ``core.Answer`` per instruction.

    Raises:
        ValueError: ``inputs`` does not match ``instructions``, or is given for a format without an input.
    """
    fmt = data_format or model_format(model, template)
    instructions = [instructions] if isinstance(instructions, str) else list(instructions)
    if inputs is None:
        prompts = [fmt.prompt(tokenizer, i) for i in instructions]
    elif not fmt.takes_input:
        raise ValueError(f"inputs= fills the Alpaca prompt's input; {fmt!r} has none: leave it out")
    else:
        inputs = one_per_instruction(inputs, len(instructions), "inputs")
        prompts = [fmt.prompt(tokenizer, i, x) for i, x in zip(instructions, inputs)]
    stops, encode = fmt.stop_token_ids(tokenizer), fmt.encode_kwargs
    return core_fn(model, tokenizer, prompts, stop_token_ids=stops, encode_kwargs=encode, **options)


def generate(
    model,
    tokenizer,
    instructions: str | Sequence[str],
    *,
    inputs: str | Sequence[str] | None = None,
    template: str | None = None,
    data_format=None,
    **options,
) -> list[str]:
    """Answer one or many instructions in one batch.

    Args:
        model, tokenizer: from ``load_model`` + ``add_lora``, or ``adapters.load_adapter``.
        instructions: one instruction or a list.
        inputs: matching context strings (one for all, or one each); ``None`` = empty input.
        template: an Alpaca prompt template (``alpaca_prompts.format_prompt``); None: the model's own format
            (``model_format``: a ``load_adapter`` model's recorded one, else ``DEFAULTS.template``).
        data_format: the run's format object (``formats.data_format(cfg)``): a conversation format renders each
            instruction as a user message through the chat template and stops at its end-of-turn token; None:
            ``model_format(model, template)``, each instruction with the text its run added after a question.
        **options: ``core.GenerationOptions`` fields (``max_new_tokens``: the article's 64, ``do_sample``,
            ``temperature``, ``top_p``, ``repetition_penalty``, ``logits_processor``, ``decode``, ``ignore_eos``).

    Returns:
        One answer string per instruction: the generated text up to (not including) the stop token (EOS),
        special tokens removed; ``[]`` for no instructions (as ``stream``).

    Raises:
        ValueError: ``inputs`` does not match ``instructions`` in length; ``decode`` as ``core.decode_mode``; a
            prompt's tokens plus ``max_new_tokens`` exceed the model's positions (``core.check_positions``).
        TypeError: an unknown option.
    """
    answers = answer_with(generate_answers, model, tokenizer, instructions, inputs, template, data_format, **options)
    return decode_answers(tokenizer, answers)


def stream(
    model,
    tokenizer,
    instructions: str | Sequence[str],
    *,
    inputs: str | Sequence[str] | None = None,
    template: str | None = None,
    data_format=None,
    return_ids: bool = False,
    **options,
) -> list[str] | list[list[int]]:
    """Print answers as they are generated (``core.text_streamer``), one instruction after another; return them.

    Args:
        model, tokenizer, instructions, inputs, template, data_format, **options: as ``generate``.
        return_ids: return each answer's new token ids instead of its text.

    Returns:
        One answer per instruction: its text (up to, not including, EOS; special tokens removed), or
        its token ids with ``return_ids``.

    Raises:
        ValueError, TypeError: as ``generate``.
    """
    instructions = [instructions] if isinstance(instructions, str) else list(instructions)
    titles = [f"### Instruction: {i}" for i in instructions]
    answers = answer_with(
        stream_answers, model, tokenizer, instructions, inputs, template, data_format, titles=titles, **options
    )
    return [a.ids for a in answers] if return_ids else decode_answers(tokenizer, answers)


def as_samples(instructions: Sequence[str], answers: Sequence[str]) -> list[dict[str, str]]:
    """``[{"instruction": ..., "response": ...}]`` pairs, as ``run_summary.json`` records them. Raises ValueError: the
    two lists differ in length."""
    if len(instructions) != len(answers):
        raise ValueError(f"as_samples: {len(instructions)} instructions but {len(answers)} answers")
    return [{"instruction": i, "response": a} for i, a in zip(instructions, answers)]
