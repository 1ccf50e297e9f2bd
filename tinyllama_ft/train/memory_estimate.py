"""The GPU memory estimate behind the fast recipe's micro-batch choice (``plan.plan_run``).

Kept: no library sizes a LoRA micro-batch's activations from a model config (accelerate's estimate covers
weights only). ``estimate_peak_gib`` scales activation bytes per token with the model's layers and widths, with
coefficients measured on an H200 (docs/speed.md), and adds headroom. ``fused_rollout_gib`` sizes what GRPO's fused
rollouts add (the merged 16-bit copy, a 4-bit base kept dequantized, the decoder's cache, the sampling scores).
"""

from __future__ import annotations

from ..config.finetune import DEFAULTS, FinetuneConfig

#: Fraction of the GPU memory budget the plan may fill (the rest: allocator fragmentation, eval, saving).
HEADROOM = 0.8
#: Activation elements kept per token per decoder layer, as multiples of (8 * hidden + 3 * intermediate)
#: without checkpointing or of hidden with it; fitted to benchmarks/levers.py's H200 peaks (benchmarks/README.md).
ACTIVATION_COEFFICIENTS = {
    ("transformers", False): 0.95,
    ("transformers", True): 2.8,
    ("unsloth", False): 0.9,
    ("unsloth", True): 1.1,
}
#: Logits bytes per token and vocabulary entry without a fused loss: fp32 logits and their gradient.
LOGIT_BYTES = 8


def model_dims(model_config) -> dict[str, int | None]:
    """``{"layers", "hidden", "intermediate", "vocab", "kv_dim", "positions", "tied"}`` from a transformers config (or a
    dict; a multimodal one's ``text_config``); ``positions`` (``max_position_embeddings``) may be None.

    Raises:
        KeyError: the config lacks one of the standard decoder fields (``num_hidden_layers``,
            ``hidden_size``, ``intermediate_size``, ``vocab_size``).
    """
    get = model_config.get if isinstance(model_config, dict) else lambda k, d=None: getattr(model_config, k, d)
    if get("text_config"):
        return model_dims(get("text_config"))
    hidden = int(get("hidden_size"))
    heads = int(get("num_attention_heads") or 1)
    kv_heads = int(get("num_key_value_heads") or heads)
    return {
        "layers": int(get("num_hidden_layers")),
        "hidden": hidden,
        "intermediate": int(get("intermediate_size")),
        "vocab": int(get("vocab_size")),
        "kv_dim": hidden * kv_heads // heads,
        "positions": get("max_position_embeddings"),
        "tied": bool(get("tie_word_embeddings")),
    }


def projection_parameters(dims: dict[str, int]) -> int:
    """Parameters of every decoder projection (q, k, v, o, gate, up, down) of all layers, from ``model_dims``."""
    h, kv, i = dims["hidden"], dims["kv_dim"], dims["intermediate"]
    return dims["layers"] * (2 * h * h + 2 * h * kv + 3 * h * i)


def estimate_peak_gib(
    dims: dict[str, int],
    *,
    micro_batch: int,
    max_seq_length: int,
    gradient_checkpointing: bool,
    backend: str,
    load_in_4bit: bool,
    fused_loss: bool,
    lora_r: int = DEFAULTS.lora_r,
    whole_modules: int = 0,
) -> float:
    """Estimated peak CUDA memory of one training micro-step, in GiB.

    Args:
        dims: ``model_dims`` output.
        micro_batch: sequences per micro-batch; ``max_seq_length``: tokens per sequence.
        gradient_checkpointing: activations recomputed in backward (only layer inputs kept).
        backend: ``"transformers"`` or ``"unsloth"`` (their activation footprints differ).
        load_in_4bit: base weights in NF4 (half a byte per weight) instead of 16-bit.
        fused_loss: the loss is fused with the output layer (Liger, Unsloth): no full logits tensor.
        lora_r: adapter rank (adapter weights, gradients and Adam states in fp32).
        whole_modules: vocabulary x hidden matrices trained in full (embed_tokens / lm_head in ``target_modules``,
            ``lora.WHOLE_MODULES``; 1 for a tied pair): each a trainable fp32 copy with its gradient and Adam moments.

    Returns:
        Weights + adapter/optimizer state + activations + logits, in GiB.
    """
    L, h, i, v, kv = dims["layers"], dims["hidden"], dims["intermediate"], dims["vocab"], dims["kv_dim"]
    layer_weights = projection_parameters(dims)
    weights = layer_weights * (0.5 if load_in_4bit else 2) + 2 * v * h * 2
    lora = L * lora_r * (2 * (h + h) + 2 * (h + kv) + 3 * (h + i)) * 16  # fp32 weight, grad, two Adam moments
    lora += whole_modules * v * h * 16  # modules_to_save: the same four fp32 tensors per parameter
    tokens = micro_batch * max_seq_length
    coefficient = ACTIVATION_COEFFICIENTS[(backend, bool(gradient_checkpointing))]
    per_layer = coefficient * (h if gradient_checkpointing else 8 * h + 3 * i)
    activations = tokens * L * per_layer * 2
    if gradient_checkpointing:  # one layer's full activations while it is recomputed
        activations += tokens * ACTIVATION_COEFFICIENTS[(backend, False)] * (8 * h + 3 * i) * 2
    logits = 0 if fused_loss else tokens * v * LOGIT_BYTES
    return (weights + lora + activations + logits) / 2**30


def splits(effective_batch: int) -> list[int]:
    """Micro-batch sizes dividing the effective batch, largest first."""
    return [m for m in range(effective_batch, 0, -1) if effective_batch % m == 0]


def read_model_config(model_name: str) -> dict:
    """A model's ``config.json`` as a dict, from a local folder or the Hub, without importing transformers
    (Unsloth must be imported before transformers to patch it).

    Raises:
        OSError: no ``config.json`` in the folder; ``locations.check_source``'s errors (a missing path, a Hub id
            that the Hub does not answer for and the cache lacks: one request, no retries).
    """
    import json
    import os

    from ..config.locations import check_source
    from ..machine.paths import is_local_path

    name = check_source(model_name, "model_name")
    path = os.path.join(name, "config.json")
    if not is_local_path(name):
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(name, "config.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def gpu_budget_gib(cap_gib: float) -> float:
    """Free memory on this process's CUDA device in GiB, at most ``cap_gib`` when that is set (> 0).

    The device is 0 alone, ``LOCAL_RANK`` under ``accelerate launch`` (``distributed.local_process_index``).
    """
    import torch

    from ..machine.distributed import local_process_index

    free, _ = torch.cuda.mem_get_info(local_process_index())
    free_gib = free / 2**30
    return min(free_gib, cap_gib) if cap_gib else free_gib


def merged_copy_gib(dims: dict[str, int]) -> float:
    """GiB of the 16-bit copy of every decoder projection (q, k, v, o, gate, up, down) the held-out checks decode
    with on a CUDA GPU (``infer.fast.llama_ops.fused_weights``), from ``model_dims``'s fields."""
    return projection_parameters(dims) * 2 / 2**30


def fused_rollout_gib(
    cfg: FinetuneConfig, dims: dict[str, int], completions: int, dtype: str, load_in_4bit: bool = False
) -> dict[str, float]:
    """GiB GRPO's fused rollouts (``train.grpo_rollout``) hold on the GPU for the whole run: ``copy``, the merged
    16-bit projections (``merged_copy_gib``); ``base``, a 4-bit base's projections dequantized once and kept beside it
    (as much again; 0 for a 16-bit base, which the copy reads in place), so each step only adds the adapter
    (``llama_ops.fused_weights`` ``keep_base``); ``cache``, the decoder's key/value cache for the ``completions``
    sampled in one call (TRL's generation batch: one optimizer step's per process), each up to ``max_seq_length``
    tokens (prompts are cut to leave ``max_completion_length``) rounded up to ``graph_decoder.CACHE_BLOCK``, in
    ``dtype``; ``logits``, the sampling step's float32 scores (three ``completions x vocab`` tensors)."""
    from ..infer.fast.graph_decoder import CACHE_BLOCK

    tokens = -(-cfg.max_seq_length // CACHE_BLOCK) * CACHE_BLOCK
    width = 4 if dtype == "float32" else 2
    cache = dims["layers"] * 2 * completions * tokens * dims["kv_dim"] * width
    logits = 3 * completions * dims["vocab"] * 4
    copy = merged_copy_gib(dims)
    return {"copy": copy, "base": copy if load_in_4bit else 0.0, "cache": cache / 2**30, "logits": logits / 2**30}
