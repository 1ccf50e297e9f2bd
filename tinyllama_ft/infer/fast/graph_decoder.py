"""Greedy decoding of a Llama model with fused projections, a static KV cache and a captured CUDA graph.

transformers' Llama math in fewer kernels (``llama_ops.py``; Triton matrix-vector products at batch 1), one decode
step captured as a CUDA graph and replayed for every token, no compiler needed. Batches are left-padded, each row
with its own RoPE positions. Throughput: docs/speed.md.
"""

from __future__ import annotations

import weakref
from typing import Callable, NamedTuple, Sequence

from .llama_ops import fused_weights, liger_ops, llama_model, rms_norm, rope, silu_mul, why_not_readable

#: SDPA kernels tried for the decode step, each captured and timed, the fastest kept (None: PyTorch's choice).
ATTENTION_BACKENDS = (None, "EFFICIENT_ATTENTION")
#: Replays timed per candidate.
ATTENTION_TRIAL_STEPS = 20  # < CACHE_BLOCK: the trial replays advance through the cache
#: Batch-1 projections ``fused_decoder_for`` builds with: "cublas" (``F.linear``), "triton" (``triton_gemv.gemv``,
#: faster on the H200: benchmarks/README.md) or "auto" (Triton on CUDA where it imports).
MATMUL = "auto"
MATMULS = ("auto", "cublas", "triton")
#: Cache lengths are rounded up to this many tokens, so requests of similar length share one decoder.
CACHE_BLOCK = 512
#: Each model's decoders, by batch size (``fused_decoder_for``); an entry goes with its model.
FUSED_DECODERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def fused_decoder_for(model, batch_size: int, tokens: int, sampling: Sampling | None = None) -> "FusedLlamaDecoder":
    """The model's ``FusedLlamaDecoder`` for ``batch_size`` rows holding at least ``tokens`` tokens, greedy or
    ``sampling`` (kept in ``FUSED_DECODERS`` per batch size; a longer request or another sampling makes a new one).

    Raises:
        ValueError: as ``FusedLlamaDecoder``.
    """
    kept = FUSED_DECODERS.setdefault(model, {})
    decoder = kept.get(batch_size)
    if decoder is None or decoder.L < tokens or decoder.sampling != sampling:
        kept.pop(batch_size, None)  # free the old cache and its graph first
        decoder = kept[batch_size] = FusedLlamaDecoder(
            model, -(-tokens // CACHE_BLOCK) * CACHE_BLOCK, batch_size, matmul=MATMUL, sampling=sampling
        )
    return decoder


class Sampling(NamedTuple):
    """Sampling instead of greedy picks, in transformers' order: logits / ``temperature`` (> 0), then the ``top_k``
    most likely tokens (0: all), then the smallest set holding ``top_p`` of the probability (1.0: all)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


def pick_tokens(logits, sampling: Sampling | None):
    """One token per row of ``logits`` ``(B, V)``: the argmax, or a draw under ``sampling``: transformers' own
    temperature / top-k / top-p warpers (no host sync in them), then an exponential race from torch's default
    generator (``argmax(p / E)``, ``E ~ Exp(1)``, draws from ``p`` with no host sync, so a CUDA graph can hold it).
    Returns ``(B, 1)`` token ids."""
    import torch
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    if sampling is None:
        return logits.argmax(-1, keepdim=True)
    scores = TemperatureLogitsWarper(sampling.temperature)(None, logits.float())
    if sampling.top_k:
        scores = TopKLogitsWarper(sampling.top_k)(None, scores)
    if sampling.top_p < 1.0:
        scores = TopPLogitsWarper(sampling.top_p)(None, scores)
    probs = scores.softmax(-1)
    return (probs / torch.empty_like(probs).exponential_()).argmax(-1, keepdim=True)


class FusedLlamaDecoder:
    """Greedy (or sampled) decoding for ``batch_size`` prompts with a cache of ``max_cache_len`` tokens.

    Args:
        model: a Llama causal LM (``why_not_readable`` is None: 16/32 bits, or 4/8 bits and PEFT LoRA adapters,
            read as a merged 16-bit copy; Unsloth's too), on its device.
        max_cache_len: prompt (padded) + answer tokens the cache holds.
        batch_size: prompts decoded together.
        graph: capture the step as a CUDA graph (None: on a CUDA device).
        kernels: "liger" (fused Triton kernels, CUDA only), "torch", or None (Liger where it imports).
        matmul: one of ``MATMULS``, for the batch-1 decode step's projections (prompts always use cuBLAS).
        sampling: draw each token (``pick_tokens``); None: greedy.

    Raises:
        ValueError: the model is not fusable, ``kernels="liger"`` where Liger is not available, or
            ``matmul`` is not one of ``MATMULS`` ("triton" off CUDA).
    """

    def __init__(
        self,
        model,
        max_cache_len: int,
        batch_size: int = 1,
        graph: bool | None = None,
        kernels: str | None = None,
        matmul: str = "auto",
        sampling: Sampling | None = None,
    ):
        import torch

        why = why_not_readable(model)
        if why is not None:
            raise ValueError(f"the fused decoder cannot run this model: {why}")
        llama = llama_model(model)  # a PEFT model's base: fused_weights merges its adapters into a copy
        c, inner = llama.config, llama.model
        embed = llama.get_input_embeddings().weight
        self.device, self.dtype = embed.device, embed.dtype
        self.B, self.L, self.sampling = batch_size, max_cache_len, sampling
        self.H, self.KV = c.num_attention_heads, c.num_key_value_heads
        self.D = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps = c.rms_norm_eps
        self.scale = self.D**-0.5  # transformers' Llama attention scaling
        cuda = self.device.type == "cuda"
        liger = liger_ops() if cuda and kernels in (None, "liger") else None
        if kernels == "liger" and liger is None:
            raise ValueError("kernels='liger' needs liger-kernel and a CUDA device")
        self.kernels = "liger" if liger else "torch"
        if matmul not in MATMULS or (matmul == "triton" and not cuda):
            raise ValueError(f"matmul={matmul!r}: choose one of {MATMULS} ('triton' needs a CUDA device)")
        if matmul == "auto":
            from ...machine.hardware import is_importable

            matmul = "triton" if cuda and is_importable("triton") else "cublas"
        self.matmul = matmul
        self.liger = liger
        weights = fused_weights(model)
        self.layers, self.embed, self.norm, self.lm_head = (weights[k] for k in ("layers", "embed", "norm", "lm_head"))
        with torch.no_grad():
            positions = torch.arange(max_cache_len, device=self.device)
            probe = torch.empty(1, dtype=self.dtype, device=self.device)
            cos, sin = inner.rotary_emb(probe, positions[None])  # transformers' own RoPE (scaling included)
            self.cos, self.sin = cos[0], sin[0]  # (L, D)
        shape = (batch_size, self.KV, max_cache_len, self.D)
        self.cache = [
            tuple(torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in "kv") for _ in self.layers
        ]
        self.columns = torch.arange(max_cache_len, device=self.device)
        # the step's inputs and outputs, fixed tensors (a CUDA graph reads and writes these addresses)
        self.token = torch.zeros(batch_size, 1, dtype=torch.long, device=self.device)
        self.slot = torch.zeros(1, dtype=torch.long, device=self.device)  # cache column of `token`
        self.rope_pos = torch.zeros(batch_size, dtype=torch.long, device=self.device)  # its position, per row
        self.first_key = torch.zeros(batch_size, 1, dtype=torch.long, device=self.device)  # padding per row
        self.answer = torch.zeros(batch_size, max_cache_len, dtype=torch.long, device=self.device)
        self.count = torch.zeros(1, dtype=torch.long, device=self.device)  # tokens in `answer`
        self.graph, self.backend, self.attention_ms = None, None, {}
        self.use_graph = cuda if graph is None else graph
        if self.use_graph and max_cache_len <= ATTENTION_TRIAL_STEPS + 2:
            raise ValueError(
                f"max_cache_len={max_cache_len}: a captured decoder needs more than "
                f"{ATTENTION_TRIAL_STEPS + 2} tokens of cache"
            )

    def _norm(self, x, w, residual=None):
        return rms_norm(x, w, self.eps, residual, self.liger)

    def _linear(self, h, w):
        """``h @ w.T`` for h ``(B, T, K)``: the Triton kernel for one row when ``matmul="triton"``."""
        import torch.nn.functional as F

        if self.matmul == "triton" and h.shape[0] * h.shape[1] == 1:
            from .triton_gemv import gemv

            return gemv(h.reshape(-1).contiguous(), w).view(1, 1, -1)
        return F.linear(h, w)

    def _forward(self, ids, slots, rope_pos, mask):
        """Logits of the last position: ids (B, T) written at cache columns ``slots`` (T,), RoPE positions
        ``rope_pos`` (B, T), boolean ``mask`` (B, 1, T, keys) over the first ``keys`` cache columns."""
        import torch.nn.functional as F

        B, T = ids.shape
        H, KV, D = self.H, self.KV, self.D
        keys = mask.shape[-1]
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos[rope_pos], self.sin[rope_pos]
        residual = None
        for (w_in, w_qkv, w_o, w_post, w_gu, w_down), (k_cache, v_cache) in zip(self.layers, self.cache):
            h, residual = self._norm(x, w_in, residual)
            qkv = self._linear(h, w_qkv).view(B, T, H + 2 * KV, D)
            q, k, v = (part.transpose(1, 2) for part in qkv.split([H, KV, KV], dim=2))
            q, k = rope(q, k, cos, sin, self.liger)
            k_cache.index_copy_(2, slots, k)
            v_cache.index_copy_(2, slots, v)
            if T == 1:  # the query heads sharing a key/value head are that head's rows: no copy of the cache
                out = F.scaled_dot_product_attention(
                    q.reshape(B, KV, H // KV, D), k_cache, v_cache, attn_mask=mask, scale=self.scale
                )
            else:
                groups = H // KV
                out = F.scaled_dot_product_attention(
                    q,
                    k_cache[:, :, :keys].repeat_interleave(groups, 1),
                    v_cache[:, :, :keys].repeat_interleave(groups, 1),
                    attn_mask=mask,
                    scale=self.scale,
                )
                out = out.transpose(1, 2)
            x = self._linear(out.reshape(B, T, H * D), w_o)
            h, residual = self._norm(x, w_post, residual)
            gate, up = self._linear(h, w_gu).chunk(2, dim=-1)
            x = self._linear(silu_mul(gate, up, self.liger), w_down)
        h, _ = self._norm(x[:, -1:].contiguous(), self.norm, residual[:, -1:].contiguous())
        return self._linear(h, self.lm_head)[:, -1]

    def _step(self):
        """One token for every row, reading and advancing the fixed buffers (the captured region)."""
        import torch

        valid = ((self.columns >= self.first_key) & (self.columns <= self.slot))[:, None, None, :]
        # an additive mask made once per step (SDPA would convert a boolean one in each of the layers)
        mask = torch.zeros(valid.shape, dtype=self.dtype, device=self.device).masked_fill_(~valid, float("-inf"))
        with self._attention_backend():
            logits = self._forward(self.token, self.slot, self.rope_pos[:, None], mask)
        next_token = pick_tokens(logits, self.sampling)
        self.answer.index_copy_(1, self.count, next_token)
        self.token.copy_(next_token)
        self.slot.add_(1)
        self.rope_pos.add_(1)
        self.count.add_(1)

    def _attention_backend(self):
        """SDPA's kernel choice for the step: ``self.backend`` (a ``SDPBackend`` name) or PyTorch's own."""
        import contextlib

        from torch.nn.attention import SDPBackend, sdpa_kernel

        return contextlib.nullcontext() if self.backend is None else sdpa_kernel([getattr(SDPBackend, self.backend)])

    def _capture_one(self):
        import torch

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # compiles Liger's kernels and creates the cuBLAS handles before the capture
                self._prime()
                self._step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        self._prime()
        with torch.cuda.graph(graph):
            self._step()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ATTENTION_TRIAL_STEPS):
            graph.replay()
        end.record()
        end.synchronize()
        return graph, start.elapsed_time(end) / ATTENTION_TRIAL_STEPS

    def _capture(self) -> None:
        """Capture the step per ``ATTENTION_BACKENDS`` kernel and keep the fastest (``attention_ms``: each one's)."""
        self.attention_ms = {}
        best = None
        for backend in ATTENTION_BACKENDS:
            self.backend = backend
            try:
                graph, ms = self._capture_one()
            except Exception as e:  # noqa: BLE001  a kernel that refuses these shapes: try the next
                self.attention_ms[str(backend)] = f"{type(e).__name__}"
                continue
            self.attention_ms[str(backend)] = round(ms, 4)
            if best is None or ms < best[1]:
                best = (graph, ms, backend)
        if best is None:
            raise RuntimeError(f"no attention kernel could be captured: {self.attention_ms}")
        self.graph, _, self.backend = best

    def _prime(self) -> None:
        """Valid buffers for trial steps: they advance from column 0 (the caches are zeroed before a prompt)."""
        for buffer in (self.token, self.slot, self.rope_pos, self.first_key, self.count):
            buffer.zero_()

    def decode(
        self,
        input_ids,
        attention_mask,
        max_new_tokens: int,
        stop_token_ids: Sequence[int] | None,
        on_tokens: Callable[[list[list[int]]], None] | None = None,
        every: int = 8,
        keep_stop: bool = False,
    ) -> list[list[int]]:
        """Answers to a left-padded batch, greedy or sampled (``sampling``).

        Args:
            input_ids: ``(B, n)`` prompt ids on the model's device, padded on the left.
            attention_mask: ``(B, n)`` 1 for prompt tokens, 0 for padding (None: no padding).
            max_new_tokens: most tokens per answer.
            stop_token_ids: a row stops at the first of these tokens (not returned); None or empty never stops.
            on_tokens: called with each chunk (one list of new ids per row) as it is ready.
            every: tokens per chunk (one host synchronisation each).
            keep_stop: end each stopped answer with its stop token (TRL's completions hold their EOS).

        Returns:
            One list of new token ids per row, without the stop token unless ``keep_stop``.

        Raises:
            ValueError: the batch is not ``batch_size`` rows, or prompt + answer exceeds the cache.
        """
        import torch

        B, n = input_ids.shape
        stops = set(stop_token_ids or ())
        if B != self.B:
            raise ValueError(f"input_ids has {B} rows; this decoder decodes {self.B}")
        if n + max_new_tokens > self.L:
            raise ValueError(
                f"prompt ({n} tokens) + max_new_tokens ({max_new_tokens}) exceeds the cache ({self.L} tokens)"
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        with torch.no_grad():
            if self.use_graph and self.graph is None:
                self._capture()
            pads = (attention_mask.shape[1] - attention_mask.long().sum(1)).to(self.device)
            columns = self.columns[:n]
            rope_pos = (columns[None] - pads[:, None]).clamp(min=0)
            # causal, padding ignored; a padding query sees itself (no empty softmax row)
            mask = (columns[None, :] <= columns[:, None])[None] & (
                (columns[None, None, :] >= pads[:, None, None]) | (columns[None, :] == columns[:, None])[None]
            )
            for k_cache, v_cache in self.cache:
                k_cache.zero_()
                v_cache.zero_()
            first = pick_tokens(self._forward(input_ids, columns, rope_pos, mask[:, None]), self.sampling)
            self.token.copy_(first)
            self.slot.fill_(n)
            self.rope_pos.copy_(n - pads)
            self.first_key.copy_(pads[:, None])
            self.answer[:, 0:1].copy_(first)
            self.count.fill_(1)
            answers: list[list[int]] = [[] for _ in range(B)]
            done = [False] * B
            sent = 0
            for k in range(1, max_new_tokens + 1):
                if k % every == 0 or k == max_new_tokens:
                    chunk = self.answer[:, sent:k].tolist()
                    sent = k
                    for row, ids in enumerate(chunk):
                        if done[row]:
                            chunk[row] = []
                        elif stops and stops.intersection(ids):
                            chunk[row] = ids[: min(ids.index(t) for t in stops.intersection(ids)) + keep_stop]
                            done[row] = True
                        answers[row] += chunk[row]
                    if on_tokens:
                        on_tokens(chunk)
                    if all(done):
                        break
                if k < max_new_tokens:
                    if self.graph is not None:
                        self.graph.replay()
                    else:
                        self._step()
        return answers
