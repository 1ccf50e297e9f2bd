"""The one generation core: every answer the package generates goes through ``generate_answers`` or ``stream_answers``.

Callers render their prompts and name their stop tokens; the core batches (left padding), stops each answer at its
first stop token, picks the decoder (``decode_mode``: ``fast/``'s CUDA-graph decoder, else transformers'
``generate``), streams, and refuses a prompt longer than the model's positions. Per-model decoder state is kept in
``weakref`` tables, never on the model; ``forget(model)`` drops it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..config.coercion import ConfigError
from ..config.finetune import DEFAULTS
from ..models.attention import sdpa_outside_training
from ..models.pad_token import encode_left_padded

#: ``decode`` choices: "auto" (``decode_mode``), "plain" (transformers' ``generate``), "graph"
#: (``graph_decoder.FusedLlamaDecoder``) or "static" (``generate`` with transformers' compiled static KV cache).
DECODE_CHOICES = ("auto", "plain", "graph", "static")
#: New tokens (answers x max_new_tokens) from which "auto" compiles ("static"): only a long request pays for the
#: compilation (benchmarks/README.md).
AUTO_COMPILE_MIN_TOKENS = 1000

#: Why the CUDA-graph decoder failed on a model (``"TypeError: ..."``), so "auto" does not try it again.
GRAPH_FAILED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Answer:
    """One generated answer.

    Attributes:
        ids: the new token ids, up to (not including) the first stop token.
        stopped: True when a stop token came within ``max_new_tokens``.
    """

    ids: list[int]
    stopped: bool

    @property
    def new_tokens(self) -> int:
        """Tokens generated, the stop token included when it came."""
        return len(self.ids) + int(self.stopped)


@dataclass(frozen=True, kw_only=True)
class GenerationOptions:
    """How answers are generated: the keyword arguments every generation helper takes (``**options``).

    Attributes:
        max_new_tokens: most tokens generated per answer (``DEFAULTS.max_new_tokens``: the article's 64).
        do_sample: sample instead of greedy decoding; ``temperature`` and ``top_p`` apply only then.
        temperature: softmax temperature (> 0) when sampling.
        top_p: nucleus-sampling mass in (0, 1] when sampling.
        repetition_penalty: >= 1.0 discourages repeats (1.0 = off).
        logits_processor: optional ``transformers.LogitsProcessorList``.
        decode: one of ``DECODE_CHOICES`` (``decode_mode``).
        ignore_eos: generate exactly ``max_new_tokens`` tokens per answer (benchmarks).
    """

    max_new_tokens: int = DEFAULTS.max_new_tokens
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    logits_processor: Any = None
    decode: str = "auto"
    ignore_eos: bool = False

    def generate_kwargs(self) -> dict:
        """``model.generate`` arguments for these options (the stop and pad ids apart)."""
        kwargs = dict(
            max_new_tokens=self.max_new_tokens,
            do_sample=self.do_sample,
            repetition_penalty=self.repetition_penalty,
            use_cache=True,
        )
        if self.do_sample:
            kwargs.update(temperature=self.temperature, top_p=self.top_p)
        if self.ignore_eos:
            kwargs["min_new_tokens"] = self.max_new_tokens
        return kwargs


def prepare_for_inference(model) -> None:
    """Eval mode (in place), plus ``FastLanguageModel.for_inference`` on a model Unsloth loaded."""
    from ..models.loading import loaded_backend

    if loaded_backend(model) == "unsloth":
        from unsloth import FastLanguageModel  # GPU extra

        FastLanguageModel.for_inference(model)
    model.eval()


def forget(model) -> None:
    """Drop what the fast decoders keep for ``model`` (fused weights, decoders, a recorded failure): call it after
    changing the model's weights in place."""
    GRAPH_FAILED.pop(model, None)
    _drop_copies(model)


def _drop_copies(model) -> None:
    """Drop the fast decoders' state for ``model`` (weights, caches, graphs), keeping a recorded failure."""
    from .fast.graph_decoder import FUSED_DECODERS
    from .fast.llama_ops import FUSED_WEIGHTS

    for table in (FUSED_DECODERS, FUSED_WEIGHTS):
        table.pop(model, None)


def decode_mode(
    model, decode: str, do_sample: bool, repetition_penalty: float, logits_processor, new_tokens: int = 0
) -> str:
    """``"plain"``, ``"graph"`` or ``"static"``: the decoder the core will use.

    "auto", greedy, on a CUDA GPU: "graph" where ``llama_ops.why_not_fusable`` accepts the model and it did not fail
    on it before (``GRAPH_FAILED``); else "static" for a plain 16-bit model when ``new_tokens`` (answers x
    ``max_new_tokens``) reaches ``AUTO_COMPILE_MIN_TOKENS``; otherwise "plain".

    Raises:
        ValueError: ``decode`` is not one of ``DECODE_CHOICES``, or "graph" / "static" is forced where it cannot
            apply (sampling, a repetition penalty, logits processors, a model it cannot read).
    """
    from .fast.llama_ops import why_not_fusable

    if decode not in DECODE_CHOICES:
        raise ValueError(f"decode={decode!r}: choose one of {DECODE_CHOICES}")
    if decode == "plain":
        return "plain"
    causes = (("do_sample=True", do_sample), ("repetition_penalty != 1", repetition_penalty != 1.0))
    why_not = next((why for why, applies in (*causes, ("logits_processor", logits_processor)) if applies), None)
    if decode == "auto":
        if why_not is not None or model.device.type != "cuda":
            return "plain"
        if why_not_fusable(model) is None and model not in GRAPH_FAILED:
            return "graph"
        return "static" if new_tokens >= AUTO_COMPILE_MIN_TOKENS and plain_16bit(model) else "plain"
    if why_not is None and decode == "graph":
        why_not = why_not_fusable(model)
    if why_not is None and decode == "static" and not plain_16bit(model):
        why_not = "the model is 4-bit, PEFT-wrapped or Unsloth's (reload with merged=True)"
    if why_not is not None:
        raise ValueError(f"decode={decode!r} needs greedy decoding on a plain 16/32-bit model: {why_not}")
    return decode


def check_batch_size(model) -> int:
    """Prompts per batch for the held-out checks: 16 on a CUDA GPU (the graph decoder answers a batch in about the
    time of one prompt, benchmarks/README.md), 4 elsewhere (a CPU batch runs until its longest answer ends)."""
    return 16 if model.device.type == "cuda" else 4


def plain_16bit(model) -> bool:
    """True for a plain transformers causal LM in 16/32-bit: not PEFT-wrapped, quantized, or Unsloth's."""
    from transformers import PreTrainedModel

    from ..models.loading import loaded_backend

    plain = isinstance(model, PreTrainedModel) and getattr(model, "hf_quantizer", None) is None
    return plain and loaded_backend(model) != "unsloth" and not getattr(model, "peft_config", None)


def _cut(ids: list[int], stops: Sequence[int]) -> Answer:
    at = next((j for j, token_id in enumerate(ids) if token_id in stops), None)
    return Answer(ids, False) if at is None else Answer(ids[:at], True)


def _fused(model, batch, max_new_tokens, stops, forced: bool, on_tokens=None) -> list[list[int]] | None:
    """``FusedLlamaDecoder`` answers, or None after a failure when not ``forced`` (said once and kept in
    ``GRAPH_FAILED``; the caller then uses ``generate``)."""
    import warnings

    from .fast.graph_decoder import fused_decoder_for

    ids, mask = batch["input_ids"], batch.get("attention_mask")
    try:
        decoder = fused_decoder_for(model, ids.shape[0], ids.shape[1] + max_new_tokens)
        return decoder.decode(ids, mask, max_new_tokens, stops, on_tokens=on_tokens)
    except Exception as e:  # noqa: BLE001  a kernel or graph capture that fails here: generate still works
        if forced:
            raise
        GRAPH_FAILED[model] = f"{type(e).__name__}: {e}"
        _drop_copies(model)  # its cache and graphs, and the fused weight copy, are not used again
        warnings.warn(
            f"the CUDA-graph decoder failed on this model ({type(e).__name__}: {str(e)[:200]}); "
            "answering with transformers' generate",
            stacklevel=3,
        )
        return None


def _decode_batch(model, tokenizer, batch, mode: str, stops: list[int], opts: GenerationOptions, streamer=None):
    """Answers to one tokenized batch with the decoder ``mode`` (a streamer: one row only)."""
    import torch

    n = batch["input_ids"].shape[1]
    cut_at = [] if opts.ignore_eos else stops
    forced, budget = opts.decode == mode, opts.max_new_tokens
    if streamer is not None:  # the graph decoder hands a streamer only the new tokens (generate: below)
        streamer.skip_prompt = False
    if mode == "graph":
        on_tokens = None if streamer is None else (lambda chunk: streamer.put(torch.tensor(chunk[0])))
        found = _fused(model, batch, budget, cut_at, forced, on_tokens=on_tokens)
        if found is not None:
            if streamer is not None:
                streamer.end()
            return [Answer(ids, len(ids) < budget and bool(cut_at)) for ids in found]
    kwargs = dict(opts.generate_kwargs(), eos_token_id=stops, pad_token_id=tokenizer.pad_token_id)
    if mode == "static":
        kwargs["cache_implementation"] = "static"
    if streamer is not None:
        streamer.skip_prompt = True  # generate hands the streamer the prompt first (also after a graph failure)
        kwargs["streamer"] = streamer
    with torch.inference_mode():
        out = model.generate(**batch, logits_processor=opts.logits_processor, **kwargs)
    return [_cut(row, cut_at) for row in out[:, n:].tolist()]


class PromptTooLongError(ConfigError):
    """A prompt's tokens plus ``max_new_tokens`` exceed the model's positions (``check_positions``): a
    ``ValueError``, and a usage error for the command line (exit status 2)."""


def model_positions(model) -> int | None:
    """Token positions ``model`` knows: its (text) config's ``max_position_embeddings`` times the factor of a linear
    RoPE scaling (``loading.apply_rope_scaling``); None when the config names no positions."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    positions = getattr(config, "max_position_embeddings", None)
    if not positions:
        return None
    scaling = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if scaling.get("rope_type", scaling.get("type")) == "linear":
        return int(round(positions * float(scaling.get("factor", 1.0))))
    return int(positions)


def check_positions(model, batches, max_new_tokens: int) -> None:
    """Refuse prompts that, with ``max_new_tokens`` new tokens, need more positions than ``model_positions``
    (transformers would only warn, then compute past the positions the model was trained on).

    Args:
        model: the model that will answer. max_new_tokens: the answer budget per prompt.
        batches: the tokenized prompts, in order; each ``attention_mask`` row (B, T) counts one prompt's tokens.

    Raises:
        PromptTooLongError: (a ``ValueError``) the first prompt too long: its index, its tokens, ``max_new_tokens``
            and the model's positions.
    """
    positions = model_positions(model)
    counts = [n for batch in batches for n in batch["attention_mask"].sum(dim=1).tolist()]
    for index, tokens in enumerate(counts if positions else []):
        if tokens + max_new_tokens > positions:
            raise PromptTooLongError(
                f"prompt {index} has {tokens} tokens and max_new_tokens={max_new_tokens}: {tokens + max_new_tokens} "
                f"positions, more than the model's {positions} (max_position_embeddings, or the run's "
                f"max_seq_length where RoPE was scaled): shorten the prompt or lower max_new_tokens"
            )


def _answer(
    model, tokenizer, prompts, stop_ids, encode, options, size, for_inference=True, streamers=None, titles=None
):
    """The answers to ``prompts`` in batches of ``size`` (one streamer each when given). The graph decoder reads a
    PEFT or 4/8-bit model through a merged copy that may go stale: made afresh (a GRPO run stopped by Ctrl-C or an
    error leaves its rollouts' copy, a step behind) and dropped at the end, so training keeps its memory."""
    opts, prompts = GenerationOptions(**options), list(prompts)
    if titles is not None and len(titles) != len(prompts):
        raise ValueError(f"titles has {len(titles)} items for {len(prompts)} prompts")
    if not prompts:
        return []
    stops = [int(i) for i in stop_ids if i is not None]
    if not stops:
        raise ValueError("stop_token_ids is empty: name the tokens that end an answer")
    if for_inference:
        prepare_for_inference(model)
    new_tokens = len(prompts) * opts.max_new_tokens if streamers else 0
    mode = decode_mode(model, opts.decode, opts.do_sample, opts.repetition_penalty, opts.logits_processor, new_tokens)
    transient, answers = mode == "graph" and not plain_16bit(model), []
    if transient:
        _drop_copies(model)
    try:
        with sdpa_outside_training(model):  # the graph decoder calls the model's own attention too
            batches = [
                encode_left_padded(tokenizer, prompts[at : at + size], model=model, **(encode or {}))
                for at in range(0, len(prompts), size)
            ]
            check_positions(model, batches, opts.max_new_tokens)  # every prompt before any is answered
            for j, batch in enumerate(batches):
                if titles is not None:
                    print(titles[j])
                streamer = streamers(tokenizer) if streamers else None
                answers += _decode_batch(model, tokenizer, batch, mode, stops, opts, streamer=streamer)
                if mode == "graph" and model in GRAPH_FAILED:  # said once: the other batches use generate
                    mode = "plain"
    finally:
        if transient:
            _drop_copies(model)
    return answers


def generate_answers(
    model,
    tokenizer,
    prompts: Sequence[str],
    *,
    stop_token_ids: Sequence[int],
    encode_kwargs: dict | None = None,
    batch_size: int | None = None,
    for_inference: bool = True,
    **options,
) -> list[Answer]:
    """Answer rendered prompts in left-padded batches (``pad_token.encode_left_padded``: the pad is never EOS).

    Args:
        model, tokenizer: a causal LM (PEFT-wrapped, merged or plain) and its tokenizer.
        prompts: N rendered prompt strings (an Alpaca prompt with an empty response, a chat generation prompt).
        stop_token_ids: the ids that end an answer (Alpaca: EOS; chat: the end-of-turn token, then EOS).
        encode_kwargs: tokenizer-call arguments for the prompts, as training tokenized them
            (``split_special_tokens=True`` for Alpaca prompts, ``add_special_tokens=False`` for a chat template's).
        batch_size: prompts per batch; None: all in one.
        for_inference: switch the model to inference first (``prepare_for_inference``); False leaves it as the
            caller set it (the held-out checks, inside ``scoring.eval_mode``).
        **options: ``GenerationOptions`` fields.

    Returns:
        One ``Answer`` per prompt, in order; ``[]`` for no prompts.

    Raises:
        TypeError: an option that is not a ``GenerationOptions`` field.
        ValueError: empty ``stop_token_ids``; ``decode`` as ``decode_mode``; a prompt's tokens plus
            ``max_new_tokens`` exceed the model's positions (``check_positions``: nothing is generated).
    """
    size = batch_size or max(1, len(prompts))
    return _answer(model, tokenizer, prompts, stop_token_ids, encode_kwargs, options, size, for_inference)


def text_streamer(tokenizer):
    """The default streamer of ``stream_answers``: transformers' ``TextStreamer`` printing to stdout, special tokens
    removed; in a kernel no person watches (papermill) one whole line at a time, since ``papermill --log-output``
    writes each of ``TextStreamer``'s flushes (a word) as a log line."""
    from transformers import TextStreamer

    from ..machine.kernel import in_interactive_kernel, jupyter_kernel

    class LineStreamer(TextStreamer):
        def on_finalized_text(self, text: str, stream_end: bool = False):
            self.pending = getattr(self, "pending", "") + text
            if stream_end or "\n" in self.pending:
                lines, self.pending = (self.pending, "") if stream_end else self.pending.rsplit("\n", 1)
                print(lines, flush=True)

    streamer = LineStreamer if jupyter_kernel() is not None and not in_interactive_kernel() else TextStreamer
    return streamer(tokenizer, skip_special_tokens=True)


def stream_answers(
    model,
    tokenizer,
    prompts: Sequence[str],
    *,
    stop_token_ids: Sequence[int],
    encode_kwargs: dict | None = None,
    titles: Sequence[str] | None = None,
    make_streamer: Callable | None = None,
    **options,
) -> list[Answer]:
    """Answer rendered prompts one after another, streaming each answer's text as it is generated.

    Args:
        model, tokenizer, prompts, stop_token_ids, encode_kwargs, **options: as ``generate_answers``; "auto"
            decoding compiles (non-Llama models on CUDA) when answers x ``max_new_tokens`` reaches
            ``AUTO_COMPILE_MIN_TOKENS``.
        titles: a line printed before each answer (``"### Instruction: ..."``); None prints none.
        make_streamer: ``f(tokenizer)`` -> a transformers streamer (``put`` / ``end``); default ``text_streamer``.

    Returns:
        One ``Answer`` per prompt, in order.

    Raises:
        TypeError, ValueError: as ``generate_answers``; ``titles`` does not match ``prompts`` in length.
    """
    streamers = make_streamer or text_streamer
    return _answer(model, tokenizer, prompts, stop_token_ids, encode_kwargs, options, 1, True, streamers, titles)


def decode_answers(tokenizer, answers: Sequence[Answer]) -> list[str]:
    """The answers' text, special tokens removed."""
    return [tokenizer.decode(a.ids, skip_special_tokens=True) for a in answers]
