"""Greedy decoding of one answer with a static KV cache and a compiled one-token step.

A ``transformers.StaticCache`` gives the step fixed shapes, so ``torch.compile`` compiles it once, as
transformers' documentation does for static-cache decoding; tokens reach the caller once per chunk of steps.
Greedy only (``infer/core.py`` decides); decoders are kept in ``DECODERS`` by model. Throughput: docs/speed.md.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Callable, Sequence

#: Modes: "eager" (static cache, no compilation) and "inductor" (torch.compile with CUDA graphs).
MODES = ("eager", "inductor")
#: Cache lengths are rounded up to this many tokens, so answers of similar length share one compiled step.
CACHE_BLOCK = 512
#: Each model's decoders, by mode (``decoder_for``); an entry goes with its model (a decoder holds the model
#: weakly, so the table never keeps a model alive).
DECODERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class StaticDecoder:
    """A static KV cache of ``max_cache_len`` tokens and the model's one-token greedy step.

    Args:
        model: a transformers causal LM (not 4-bit: bitsandbytes layers do not compile), on its device.
        max_cache_len: prompt + answer tokens the cache holds.
        mode: one of ``MODES``.

    Raises:
        ValueError: unknown ``mode``.
    """

    def __init__(self, model, max_cache_len: int, mode: str = "inductor"):
        import torch
        from transformers import StaticCache

        if mode not in MODES:
            raise ValueError(f"mode={mode!r}: choose one of {MODES}")
        self._model, self.mode, self.max_cache_len = weakref.ref(model), mode, max_cache_len
        self.cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
        self.positions = torch.arange(max_cache_len, device=model.device)
        # transformers 5.2x renamed the forward's past_key_values to cache; use whichever it takes
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        if mode == "inductor":
            self.step = torch.compile(self._step, mode="reduce-overhead", fullgraph=True)
        else:
            self.step = self._step

    @property
    def model(self):
        """The model decoded (held weakly: ``DECODERS`` must not keep it alive)."""
        return self._model()

    def _step(self, token, position):
        logits = self.model(
            token, cache_position=position, position_ids=position[None], use_cache=True, **{self.cache_arg: self.cache}
        ).logits
        return logits[:, -1].argmax(-1, keepdim=True)

    def decode(
        self,
        input_ids,
        max_new_tokens: int,
        stop_token_ids: Sequence[int] | None,
        on_tokens: Callable[[list[int]], None] | None = None,
        every: int = 8,
    ) -> list[int]:
        """Greedy answer to one prompt.

        Args:
            input_ids: ``(1, n)`` prompt token ids on the model's device.
            max_new_tokens: most tokens generated.
            stop_token_ids: stop at the first of these tokens (not returned); None or empty never stops early.
            on_tokens: called with each chunk of new token ids as it is ready (streaming).
            every: tokens per chunk (one host synchronisation each).

        Returns:
            The new token ids, without the EOS.

        Raises:
            ValueError: the prompt is not one row, or prompt + ``max_new_tokens`` exceeds the cache.
        """
        import torch

        n = input_ids.shape[1]
        stops = set(stop_token_ids or ())
        if input_ids.shape[0] != 1:
            raise ValueError(f"input_ids has {input_ids.shape[0]} rows: the static decoder answers one prompt")
        if n + max_new_tokens > self.max_cache_len:
            raise ValueError(
                f"prompt ({n} tokens) + max_new_tokens ({max_new_tokens}) exceeds the cache "
                f"({self.max_cache_len} tokens)"
            )
        self.cache.reset()
        answer: list[int] = []
        with torch.no_grad():
            logits = self.model(
                input_ids, cache_position=self.positions[:n], use_cache=True, **{self.cache_arg: self.cache}
            ).logits
            token = logits[:, -1].argmax(-1, keepdim=True)
            pending = [token]
            for k in range(max_new_tokens):
                if len(pending) == every or k == max_new_tokens - 1:
                    chunk = torch.cat(pending, dim=1)[0].tolist()
                    pending = []
                    if stops.intersection(chunk):
                        chunk = chunk[: min(chunk.index(t) for t in stops.intersection(chunk))]
                        answer += chunk
                        if on_tokens and chunk:
                            on_tokens(chunk)
                        break
                    answer += chunk
                    if on_tokens:
                        on_tokens(chunk)
                if k < max_new_tokens - 1:
                    token = self.step(token, self.positions[n + k : n + k + 1]).clone()
                    pending.append(token)
        return answer[:max_new_tokens]


def has_decoder(model, mode: str) -> bool:
    """True when ``model`` already holds a ``StaticDecoder`` for ``mode`` (its compilation is paid)."""
    return mode in DECODERS.get(model, {})


def decoder_for(model, tokens: int, mode: str) -> StaticDecoder:
    """The model's ``StaticDecoder`` for ``mode`` holding at least ``tokens`` tokens (made once, then reused).

    A longer request than the kept decoder holds makes a new one (and compiles again).
    """
    kept = DECODERS.setdefault(model, {})
    decoder = kept.get(mode)
    if decoder is None or decoder.max_cache_len < tokens:
        length = -(-tokens // CACHE_BLOCK) * CACHE_BLOCK
        decoder = kept[mode] = StaticDecoder(model, length, mode)
    return decoder


def can_decode_static(model) -> bool:
    """True for a plain transformers causal LM in 16/32-bit: not PEFT-wrapped (merge the adapter first),
    not bitsandbytes-quantized, not an Unsloth model (Unsloth has its own inference path)."""
    from transformers import PreTrainedModel

    from ...models.loading import loaded_backend

    if loaded_backend(model) == "unsloth":
        return False
    if not isinstance(model, PreTrainedModel) or getattr(model, "hf_quantizer", None) is not None:
        return False
    return not getattr(model, "peft_config", None)
