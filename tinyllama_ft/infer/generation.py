"""Answer instructions with a (LoRA) model: batch generation and token-by-token streaming.

The article's cells 9-10: the Alpaca prompt with an empty response, ``generate(max_new_tokens=64,
use_cache=True)``, ``batch_decode``; then the same with a ``TextStreamer``. Generation stops at the
tokenizer's EOS (the token every training sample ends with); answers are returned without the prompt
and without special-token text. Prompts are tokenized as training rows are: special-token text typed by
the user (``</s>``, ``<|im_end|>``) stays text. On the Unsloth backend, Unsloth's fast inference mode is
switched on.

``stream`` answers one prompt at a time. With greedy decoding on a plain 16/32-bit Llama
(``load_adapter(..., merged=True)``, the notebook's reload default) on a CUDA GPU, both helpers decode
with fused projections, a static KV cache and a captured CUDA graph (``graph_decoder.py``; no compiler,
so it is the default for every request length); a non-Llama 16-bit model can still use the
inductor-compiled step (``compiled_decoder.py``, ~27 s to compile), which ``decode="auto"`` picks only for long
requests. A model that trains with flex attention generates with SDPA (``attention.py``).
"""

from __future__ import annotations

from typing import Sequence

from ..config.finetune import DEFAULTS
from ..data.alpaca_prompts import format_prompt
from ..data.tokenization import encode_prompts
from ..models.attention import sdpa_outside_training
from ..models.pad_token import encode_left_padded


def prepare_for_inference(model) -> None:
    """Eval mode, plus ``FastLanguageModel.for_inference`` on a model Unsloth loaded (``loading.loaded_backend``;
    in place)."""
    from ..models.loading import loaded_backend

    if loaded_backend(model) == "unsloth":
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


#: ``decode`` choices: "auto" (see ``decode_mode``), "plain" (always transformers' ``generate``), "graph"
#: (``graph_decoding.FusedLlamaDecoder``, forced), or one of ``decoding.MODES`` (stream's static decoder, forced).
DECODE_CHOICES = ("auto", "plain", "graph", "eager", "inductor")
#: What "auto" compiles on a CUDA GPU.
AUTO_DECODE_MODE = "inductor"
#: New tokens (answers x max_new_tokens) from which "auto" compiles: compilation took 27 s on the H200,
#: the time ``generate`` (35 tokens/s) needs for ~950 tokens, after which the compiled step (506/s) is ahead.
AUTO_COMPILE_MIN_TOKENS = 1000


def decode_mode(
    model, decode: str, do_sample: bool, repetition_penalty: float, logits_processor, new_tokens: int = 0
) -> str:
    """``"plain"``, ``"graph"`` or the static decoder's mode that ``stream``/``generate`` will use.

    "auto" on a CUDA GPU, where a static decoder applies: "graph" for a Llama model (no compilation, so
    for every request length, unless it failed on this model before); for other models the compiled
    decoder when it pays (``new_tokens`` = answers x ``max_new_tokens`` reaches
    ``AUTO_COMPILE_MIN_TOKENS``, or the model already holds one); otherwise ``generate``.

    Raises:
        ValueError: ``decode`` is not one of ``DECODE_CHOICES``, or a static mode is forced where it cannot
            apply (sampling, a repetition penalty, logits processors, a 4-bit, PEFT-wrapped or Unsloth model).
    """
    from .fast.compiled_decoder import can_decode_static
    from .fast.llama_ops import why_not_fusable

    if decode not in DECODE_CHOICES:
        raise ValueError(f"decode={decode!r}: choose one of {DECODE_CHOICES}")
    if decode == "plain":
        return "plain"
    why_not = (
        "do_sample=True"
        if do_sample
        else "repetition_penalty != 1"
        if repetition_penalty != 1.0
        else "logits_processor"
        if logits_processor
        else None
        if can_decode_static(model)
        else "the model is 4-bit, PEFT-wrapped or Unsloth's (reload with merged=True)"
    )
    if decode == "auto":
        from .fast.compiled_decoder import has_decoder

        if why_not is not None or model.device.type != "cuda":
            return "plain"
        if why_not_fusable(model) is None and not getattr(model, "_tinyllama_ft_graph_failed", None):
            return "graph"
        pays = new_tokens >= AUTO_COMPILE_MIN_TOKENS or has_decoder(model, AUTO_DECODE_MODE)
        return AUTO_DECODE_MODE if pays else "plain"
    if why_not is None and decode == "graph":
        why_not = why_not_fusable(model)
    if why_not is not None:
        raise ValueError(f"decode={decode!r} needs greedy decoding on a plain 16/32-bit model: {why_not}")
    return decode


def _fused_answers(model, batch, max_new_tokens, eos_token_id, forced: bool, on_tokens=None):
    """``FusedLlamaDecoder`` answers (new ids per row, EOS cut), or None after a failure when not ``forced``
    (the failure is said once and remembered on the model; the caller then uses ``generate``)."""
    import warnings

    from .fast.graph_decoder import fused_decoder_for

    ids, mask = batch["input_ids"], batch.get("attention_mask")
    try:
        decoder = fused_decoder_for(model, ids.shape[0], ids.shape[1] + max_new_tokens)
        return decoder.decode(ids, mask, max_new_tokens, eos_token_id, on_tokens=on_tokens)
    except Exception as e:  # noqa: BLE001  a kernel or graph capture that fails here: generate still works
        if forced:
            raise
        model._tinyllama_ft_graph_failed = f"{type(e).__name__}: {e}"
        warnings.warn(
            f"the CUDA-graph decoder failed on this model ({type(e).__name__}: {str(e)[:200]}); "
            "answering with transformers' generate",
            stacklevel=3,
        )
        return None


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
    *,
    inputs: str | Sequence[str] | None = None,
    max_new_tokens: int = DEFAULTS.max_new_tokens,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    template: str = DEFAULTS.template,
    logits_processor=None,
    decode: str = "auto",
    ignore_eos: bool = False,
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
        template: prompt template, as ``alpaca_prompts.format_prompt``.
        logits_processor: optional ``transformers.LogitsProcessorList``.
        decode: "auto" (the CUDA-graph decoder for the whole batch where ``decode_mode`` picks "graph",
            else transformers' ``generate``), "plain" or "graph" (forced); stream's static modes
            ("eager", "inductor") answer here with ``generate``.
        ignore_eos: generate exactly ``max_new_tokens`` tokens per answer (benchmarks).

    Returns:
        One answer string per instruction: the generated text up to (not including) EOS, special tokens
        removed; ``[]`` for no instructions (as ``stream``).

    Raises:
        ValueError: ``inputs`` does not match ``instructions`` in length; ``decode`` as ``decode_mode``.
    """
    import torch

    single = isinstance(instructions, str)
    instructions = [instructions] if single else list(instructions)
    inputs = _as_list(inputs, len(instructions), "inputs")
    if not instructions:  # as stream: nothing asked, nothing answered
        return []
    prompts = [format_prompt(i, x, "", template) for i, x in zip(instructions, inputs)]
    prepare_for_inference(model)
    batch = encode_left_padded(tokenizer, prompts, model=model, split_special_tokens=True)  # as encode_prompts
    if decode_mode(model, decode, do_sample, repetition_penalty, logits_processor) == "graph":
        answers = _fused_answers(
            model, batch, max_new_tokens, None if ignore_eos else tokenizer.eos_token_id, forced=decode == "graph"
        )
        if answers is not None:
            return tokenizer.batch_decode(answers, skip_special_tokens=True)
    kwargs = _generate_kwargs(tokenizer, max_new_tokens, do_sample, temperature, top_p, repetition_penalty)
    if ignore_eos:
        kwargs["min_new_tokens"] = max_new_tokens
    with torch.inference_mode(), sdpa_outside_training(model):
        out = model.generate(**batch, logits_processor=logits_processor, **kwargs)
    new_tokens = out[:, batch["input_ids"].shape[1] :]
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)


def stream(
    model,
    tokenizer,
    instructions: str | Sequence[str],
    *,
    inputs: str | Sequence[str] | None = None,
    max_new_tokens: int = DEFAULTS.max_new_tokens,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    template: str = DEFAULTS.template,
    logits_processor=None,
    decode: str = "auto",
    ignore_eos: bool = False,
    return_ids: bool = False,
) -> list[str] | list[list[int]]:
    """Print answers as they are generated (transformers ``TextStreamer``), one instruction after
    another, and return them.

    Args:
        model, tokenizer, instructions, inputs, max_new_tokens, do_sample, temperature, top_p,
            repetition_penalty, template, logits_processor: as ``generate``.
        decode: one of ``DECODE_CHOICES`` (``decode_mode``); "auto" uses the CUDA-graph decoder on a CUDA
            GPU where it applies (a merged 16/32-bit Llama, greedy), and ``generate`` otherwise.
        ignore_eos: generate exactly ``max_new_tokens`` tokens (benchmarks).
        return_ids: return each answer's new token ids instead of its text.

    Returns:
        One answer per instruction: its text (up to, not including, EOS; special tokens removed), or
        its token ids with ``return_ids``.

    Raises:
        ValueError: as ``generate`` and ``decode_mode``.
    """
    import torch
    from transformers import TextStreamer

    from .fast.compiled_decoder import decoder_for

    instructions = [instructions] if isinstance(instructions, str) else list(instructions)
    inputs = _as_list(inputs, len(instructions), "inputs")
    if not instructions:  # as generate
        return []
    prepare_for_inference(model)
    mode = decode_mode(
        model, decode, do_sample, repetition_penalty, logits_processor, new_tokens=len(instructions) * max_new_tokens
    )
    prompts = [format_prompt(instruction, context, "", template) for instruction, context in zip(instructions, inputs)]
    with sdpa_outside_training(model):  # the static decoders call the model's own attention too
        if mode in ("eager", "inductor"):  # one cache for the longest prompt: no recompilation between the answers
            longest = max(len(ids) for ids in encode_prompts(tokenizer, prompts).input_ids)
            decoder_for(model, longest + max_new_tokens, mode)
        answers = []
        for instruction, prompt in zip(instructions, prompts):
            print(f"### Instruction: {instruction}")
            batch = encode_prompts(tokenizer, [prompt], return_tensors="pt").to(model.device)
            n = batch["input_ids"].shape[1]
            ids = None
            if mode == "graph":
                streamer = TextStreamer(tokenizer, skip_special_tokens=True)
                found = _fused_answers(
                    model,
                    batch,
                    max_new_tokens,
                    None if ignore_eos else tokenizer.eos_token_id,
                    forced=decode == "graph",
                    on_tokens=lambda rows: streamer.put(torch.tensor(rows[0])),
                )
                streamer.end()
                ids = found[0] if found is not None else None
                mode = mode if found is not None else "plain"
            if mode in ("eager", "inductor"):
                streamer = TextStreamer(tokenizer, skip_special_tokens=True)
                decoder = decoder_for(model, n + max_new_tokens, mode)
                ids = decoder.decode(
                    batch["input_ids"],
                    max_new_tokens,
                    None if ignore_eos else tokenizer.eos_token_id,
                    on_tokens=lambda chunk: streamer.put(torch.tensor(chunk)),
                )
                streamer.end()
            elif ids is None:
                streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
                kwargs = _generate_kwargs(tokenizer, max_new_tokens, do_sample, temperature, top_p, repetition_penalty)
                if ignore_eos:
                    kwargs["min_new_tokens"] = max_new_tokens
                with torch.inference_mode():
                    out = model.generate(**batch, streamer=streamer, logits_processor=logits_processor, **kwargs)
                ids = out[0, n:].tolist()
                if tokenizer.eos_token_id in ids and not ignore_eos:
                    ids = ids[: ids.index(tokenizer.eos_token_id)]
            answers.append(ids if return_ids else tokenizer.decode(ids, skip_special_tokens=True))
    return answers


def as_samples(instructions: Sequence[str], answers: Sequence[str]) -> list[dict[str, str]]:
    """``[{"instruction": ..., "response": ...}]`` pairs, as ``run_summary.json`` records them.

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(instructions) != len(answers):
        raise ValueError(f"as_samples: {len(instructions)} instructions but {len(answers)} answers")
    return [{"instruction": i, "response": a} for i, a in zip(instructions, answers)]


def format_answers(instructions: Sequence[str], answers: Sequence[str]) -> str:
    """The answers under their instructions, Alpaca-style (``### Instruction: ...`` then the answer)."""
    return "\n".join(
        f"### Instruction: {s['instruction']}\n{s['response']}\n" for s in as_samples(instructions, answers)
    )
