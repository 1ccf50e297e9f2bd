"""Answer instructions with a (LoRA) model: batch generation and token-by-token streaming.

The article's cells 9-10: the Alpaca prompt with an empty response, ``generate(max_new_tokens=64,
use_cache=True)``, ``batch_decode``; then the same with a ``TextStreamer``. Generation stops at the
tokenizer's EOS (the token every training sample ends with); answers are returned without the prompt
and without special-token text. On the Unsloth backend, Unsloth's fast inference mode is switched on.
"""

from __future__ import annotations

from typing import Sequence

from .prompts import format_prompt


def prepare_for_inference(model) -> None:
    """Eval mode, plus ``FastLanguageModel.for_inference`` on the Unsloth backend (in place)."""
    info = getattr(model, "tinyllama_ft", None)
    if info is not None and info.backend == "unsloth":
        from unsloth import FastLanguageModel  # GPU extra

        FastLanguageModel.for_inference(model)
    model.eval()


def _as_list(value, n: int, name: str) -> list[str]:
    if value is None:
        return [""] * n
    if isinstance(value, str):
        return [value] * n
    value = list(value)
    if len(value) != n:
        raise ValueError(f"{name} has {len(value)} items for {n} instructions")
    return value


def _generate_kwargs(tokenizer, max_new_tokens, do_sample, temperature, top_p, repetition_penalty) -> dict:
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        repetition_penalty=repetition_penalty,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )
    if do_sample:
        kwargs.update(temperature=temperature, top_p=top_p)
    return kwargs


def generate(
    model,
    tokenizer,
    instructions: str | Sequence[str],
    inputs: str | Sequence[str] | None = None,
    max_new_tokens: int = 64,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    template: str = "alpaca",
    logits_processor=None,
) -> list[str]:
    """Answer one or many instructions in one batch.

    Args:
        model, tokenizer: from ``load_model`` + ``add_lora``, or ``adapters.load_adapter``.
        instructions: one instruction or a list.
        inputs: matching context strings (one for all, or one each); ``None`` = empty input.
        max_new_tokens: most tokens generated per answer (the article's 64).
        do_sample: sample instead of greedy decoding; ``temperature`` and ``top_p`` apply only then.
        temperature: softmax temperature (> 0) when sampling.
        top_p: nucleus-sampling mass in (0, 1] when sampling.
        repetition_penalty: >= 1.0 discourages repeats (1.0 = off).
        template: prompt template, as ``prompts.format_prompt``.
        logits_processor: optional ``transformers.LogitsProcessorList``.

    Returns:
        One answer string per instruction: the generated text up to (not including) EOS, special tokens
        removed.

    Raises:
        ValueError: ``inputs`` does not match ``instructions`` in length.
    """
    import torch

    single = isinstance(instructions, str)
    instructions = [instructions] if single else list(instructions)
    inputs = _as_list(inputs, len(instructions), "inputs")
    prompts = [format_prompt(i, x, "", template) for i, x in zip(instructions, inputs)]
    prepare_for_inference(model)
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # decoder-only batches pad on the left so answers start aligned
    try:
        batch = tokenizer(prompts, return_tensors="pt", padding=True).to(model.device)
    finally:
        tokenizer.padding_side = side
    with torch.inference_mode():
        out = model.generate(
            **batch,
            logits_processor=logits_processor,
            **_generate_kwargs(tokenizer, max_new_tokens, do_sample, temperature, top_p, repetition_penalty),
        )
    new_tokens = out[:, batch["input_ids"].shape[1]:]
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)


def stream(
    model,
    tokenizer,
    instructions: str | Sequence[str],
    inputs: str | Sequence[str] | None = None,
    max_new_tokens: int = 64,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    template: str = "alpaca",
    logits_processor=None,
) -> list[str]:
    """Print answers token by token as they are generated (transformers ``TextStreamer``), one
    instruction after another, and return them.

    Arguments, return value and errors as ``generate``; each answer is printed under its instruction.
    """
    import torch
    from transformers import TextStreamer

    instructions = [instructions] if isinstance(instructions, str) else list(instructions)
    inputs = _as_list(inputs, len(instructions), "inputs")
    prepare_for_inference(model)
    answers = []
    for instruction, context in zip(instructions, inputs):
        print(f"### Instruction: {instruction}")
        prompt = format_prompt(instruction, context, "", template)
        batch = tokenizer([prompt], return_tensors="pt").to(model.device)
        streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        with torch.inference_mode():
            out = model.generate(
                **batch,
                streamer=streamer,
                logits_processor=logits_processor,
                **_generate_kwargs(tokenizer, max_new_tokens, do_sample, temperature, top_p, repetition_penalty),
            )
        answers.append(tokenizer.decode(out[0, batch["input_ids"].shape[1]:], skip_special_tokens=True))
    return answers
