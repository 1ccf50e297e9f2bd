"""How a run trains fast without changing what it computes: backend, attention, kernels, batch split.

``recipe="article"`` runs the article's cell values literally: Unsloth on a GPU (when installed), batch
2 x accumulation 4, gradient checkpointing on. ``recipe="fast"`` (the default) keeps the same math
(the same effective batch of ``per_device_train_batch_size * gradient_accumulation_steps`` sequences per
optimizer step, learning-rate schedule, optimizer, LoRA and 4-bit base weights) and changes only how
it is executed:

* bf16 GPU (compute capability >= 8.0): transformers + PEFT with flex attention (TRL's padding-free
  packing hands each packed row its own ``position_ids``; transformers turns them into a document mask,
  so rows do not attend to each other and fully masked blocks are skipped) and Liger's fused kernels
  (RMSNorm, RoPE, SwiGLU, and linear + cross-entropy without materialising the logits);
* fp16 GPU (a T4): Unsloth, whose kernels target that generation, as in the article;
* every GPU: the micro-batch is the largest that memory allows (accumulation shrinks to keep the
  effective batch; the trainer averages the loss over all tokens of the step, so the gradient is the
  same), and gradient checkpointing is off when the activations fit;
* CPU: transformers with SDPA (also document-masked from ``position_ids``), checkpointing off (it only
  costs time there), the configured split.

Measured on an H200 (TinyLlama-1.1B shape, 4-bit, seq 4096, effective batch 8; benchmarks/README.md):
the article's recipe 14.8k tokens/s; Unsloth at batch 8 without checkpointing 21k; this fast recipe
(transformers 4-bit + flex attention + Liger, batch 8, no checkpointing) 64k at 42 GiB.

The memory estimate (``estimate_peak_gib``) scales activation bytes per token with the model's layers
and widths, with coefficients measured on that machine; it is an estimate, with headroom.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .config import RECIPES
from .hardware import Hardware, is_importable
#: Fraction of the GPU memory budget the plan may fill (the rest: allocator fragmentation, eval, saving).
HEADROOM = 0.8
#: Activation elements kept per token per decoder layer, as multiples of (8 * hidden + 3 * intermediate)
#: without checkpointing or of hidden with it; measured on the H200 (TinyLlama shape, 4-bit, bf16, seq
#: 4096, batch 8): transformers + flex + Liger 41.9 GiB without checkpointing (package_default), 11.2 GiB
#: with it (benchmarks/levers.py); Unsloth 39.2 GiB without, 5.9 GiB with.
ACTIVATION_COEFFICIENTS = {
    ("transformers", False): 0.95,
    ("transformers", True): 2.8,
    ("unsloth", False): 0.9,
    ("unsloth", True): 1.1,
}
#: Logits bytes per token and vocabulary entry without a fused loss: fp32 logits and their gradient.
LOGIT_BYTES = 8


@dataclass
class SpeedPlan:
    """What a run will execute with, and why.

    Attributes:
        recipe: ``"fast"`` or ``"article"``.
        backend: ``"unsloth"`` or ``"transformers"``.
        attn_implementation: transformers' attention kernel (``"flex_attention"``, ``"sdpa"``), or None
            for the backend's own (Unsloth).
        use_liger_kernel: Liger's fused kernels through the trainer.
        per_device_train_batch_size: sequences per micro-batch.
        gradient_accumulation_steps: micro-batches per optimizer step.
        gradient_checkpointing: recompute activations in the backward pass.
        estimated_peak_gib: estimated peak CUDA memory in GiB (None on a CPU or without the model config).
        budget_gib: the GPU memory the plan was sized for, in GiB (None on a CPU).
        reasons: one line per decision, printed by ``summary``.
    """

    recipe: str
    backend: str
    attn_implementation: str | None
    use_liger_kernel: bool
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    gradient_checkpointing: bool
    estimated_peak_gib: float | None = None
    budget_gib: float | None = None
    reasons: list[str] = field(default_factory=list)

    def apply(self, cfg):
        """A copy of ``cfg`` (``FinetuneConfig``) with this plan's choices in its fields."""
        return dataclasses.replace(
            cfg, backend=self.backend, attn_implementation=self.attn_implementation,
            use_liger_kernel=self.use_liger_kernel, per_device_train_batch_size=self.per_device_train_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            gradient_checkpointing=self.gradient_checkpointing,
        )

    def summary(self) -> str:
        """A few lines for the notebook: the choices, then why."""
        head = (f"recipe {self.recipe!r}: backend {self.backend}, attention {self.attn_implementation or 'backend default'}, "
                f"liger {self.use_liger_kernel}, batch {self.per_device_train_batch_size} x accumulation "
                f"{self.gradient_accumulation_steps}, gradient checkpointing {self.gradient_checkpointing}")
        if self.estimated_peak_gib is not None:
            head += f", estimated peak {self.estimated_peak_gib:.1f} of {self.budget_gib:.1f} GiB"
        return "\n".join([head, *(f"  {r}" for r in self.reasons)])


def model_dims(model_config) -> dict[str, int]:
    """``{"layers", "hidden", "intermediate", "vocab", "kv_dim"}`` from a transformers config (or a dict).

    Raises:
        KeyError: the config lacks one of the standard decoder fields (``num_hidden_layers``,
            ``hidden_size``, ``intermediate_size``, ``vocab_size``).
    """
    get = model_config.get if isinstance(model_config, dict) else lambda k, d=None: getattr(model_config, k, d)
    hidden = int(get("hidden_size"))
    heads = int(get("num_attention_heads") or 1)
    kv_heads = int(get("num_key_value_heads") or heads)
    return {
        "layers": int(get("num_hidden_layers")),
        "hidden": hidden,
        "intermediate": int(get("intermediate_size")),
        "vocab": int(get("vocab_size")),
        "kv_dim": hidden * kv_heads // heads,
    }


def estimate_peak_gib(dims: dict[str, int], micro_batch: int, max_seq_length: int, gradient_checkpointing: bool,
                      backend: str, load_in_4bit: bool, fused_loss: bool, lora_r: int = 32) -> float:
    """Estimated peak CUDA memory of one training micro-step, in GiB.

    Args:
        dims: ``model_dims`` output.
        micro_batch: sequences per micro-batch; ``max_seq_length``: tokens per sequence.
        gradient_checkpointing: activations recomputed in backward (only layer inputs kept).
        backend: ``"transformers"`` or ``"unsloth"`` (their activation footprints differ).
        load_in_4bit: base weights in NF4 (half a byte per weight) instead of 16-bit.
        fused_loss: the loss is fused with the output layer (Liger, Unsloth): no full logits tensor.
        lora_r: adapter rank (adapter weights, gradients and Adam states in fp32).

    Returns:
        Weights + adapter/optimizer state + activations + logits, in GiB.
    """
    L, h, i, v, kv = dims["layers"], dims["hidden"], dims["intermediate"], dims["vocab"], dims["kv_dim"]
    layer_weights = L * (2 * h * h + 2 * h * kv + 3 * h * i)
    weights = layer_weights * (0.5 if load_in_4bit else 2) + 2 * v * h * 2
    lora = L * lora_r * (2 * (h + h) + 2 * (h + kv) + 3 * (h + i)) * 16  # fp32 weight, grad, two Adam moments
    tokens = micro_batch * max_seq_length
    coefficient = ACTIVATION_COEFFICIENTS[(backend, bool(gradient_checkpointing))]
    per_layer = coefficient * (h if gradient_checkpointing else 8 * h + 3 * i)
    activations = tokens * L * per_layer * 2
    if gradient_checkpointing:  # one layer's full activations while it is recomputed
        activations += tokens * ACTIVATION_COEFFICIENTS[(backend, False)] * (8 * h + 3 * i) * 2
    logits = 0 if fused_loss else tokens * v * LOGIT_BYTES
    return (weights + lora + activations + logits) / 2**30


def _splits(effective_batch: int) -> list[int]:
    """Micro-batch sizes dividing the effective batch, largest first."""
    return [m for m in range(effective_batch, 0, -1) if effective_batch % m == 0]


def plan_speed(cfg, hardware: Hardware, dtype_name: str, model_config=None, budget_gib: float | None = None,
               importable=is_importable) -> SpeedPlan:
    """Choose backend, attention, kernels, batch split and checkpointing for ``cfg.recipe``.

    Args:
        cfg: the run's ``FinetuneConfig``; its ``per_device_train_batch_size * gradient_accumulation_steps``
            is the effective batch that "fast" keeps.
        hardware: the machine (``detect_hardware()``).
        dtype_name: the run's compute dtype (``precision.resolve_dtype``).
        model_config: the base model's transformers config (or a dict); None = read it from
            ``cfg.model_name`` with ``AutoConfig`` (on failure the plan keeps the configured split).
        budget_gib: GPU memory to plan for, in GiB; None = free memory on device 0, within
            ``cfg.gpu_memory_cap_gib`` when set.
        importable: ``is_importable``-like probe (tests inject which optional packages exist).

    Returns:
        A ``SpeedPlan``; ``plan.apply(cfg)`` puts it into the configuration.

    Raises:
        ValueError: ``cfg.recipe`` is not one of ``RECIPES``.
    """
    if cfg.recipe not in RECIPES:
        raise ValueError(f"recipe={cfg.recipe!r}: choose one of {RECIPES}")
    from .modeling import choose_backend

    backend = choose_backend(cfg.backend, hardware, importable("unsloth"))
    split = (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps)
    if cfg.recipe == "article":
        return SpeedPlan("article", backend, cfg.attn_implementation, cfg.use_liger_kernel, *split,
                         cfg.gradient_checkpointing, reasons=["the article's cell values, as configured"])
    reasons: list[str] = []
    if not hardware.cuda:
        return SpeedPlan("fast", "transformers", cfg.attn_implementation or "sdpa", False, *split, False,
                         reasons=["CPU: SDPA (packed rows masked from each other), no checkpointing (it only costs time)"])
    bf16 = dtype_name == "bfloat16" and hardware.bf16_capable
    if cfg.backend == "auto":
        if bf16:
            backend = "transformers"
            reasons.append("bf16 GPU: transformers + PEFT with flex attention and fused kernels (3x Unsloth's "
                           "tokens/s at the same batch on the H200)")
        else:
            reasons.append(f"{dtype_name} GPU: Unsloth (its kernels target the T4 generation)" if backend == "unsloth"
                           else f"{dtype_name} GPU: transformers (unsloth is not installed)")
    attn = cfg.attn_implementation
    liger = False
    if backend == "transformers":
        attn = attn or ("flex_attention" if bf16 else "sdpa")
        liger = bf16 and importable("liger_kernel")
        if bf16 and not liger:
            reasons.append("liger-kernel not installed: the loss materialises the logits (pip install liger-kernel)")
    effective = split[0] * split[1]
    dims = None
    try:
        if model_config is None:
            model_config = read_model_config(cfg.model_name)
        if isinstance(model_config, dict):
            model_config = model_config.get("text_config") or model_config
        else:
            model_config = getattr(model_config, "text_config", None) or model_config
        dims = model_dims(model_config)
    except Exception as e:  # unreadable config: keep what was configured, say why
        reasons.append(f"model config unreadable ({type(e).__name__}): keeping batch {split[0]} x {split[1]} "
                       f"with gradient checkpointing")
        return SpeedPlan("fast", backend, attn, liger, *split, True, reasons=reasons)
    budget = budget_gib if budget_gib is not None else _gpu_budget_gib(cfg.gpu_memory_cap_gib)
    fused = liger or backend == "unsloth"
    candidates = ([(m, False) for m in _splits(effective)[:2]] + [(m, True) for m in _splits(effective)]
                  + [(m, False) for m in _splits(effective)[2:]])
    for micro, gc in candidates:
        peak = estimate_peak_gib(dims, micro, cfg.max_seq_length, gc, backend, cfg.load_in_4bit, fused, cfg.lora_r)
        if peak <= HEADROOM * budget:
            break
    else:
        micro, gc = 1, True
        peak = estimate_peak_gib(dims, micro, cfg.max_seq_length, gc, backend, cfg.load_in_4bit, fused, cfg.lora_r)
        reasons.append("even batch 1 with checkpointing may not fit: lower max_seq_length if it runs out of memory")
    reasons.append(f"batch {micro} x accumulation {effective // micro} = the configured {split[0]} x {split[1]}; "
                   f"checkpointing {'on' if gc else 'off'} (estimated {peak:.1f} GiB of {budget:.1f} GiB)")
    return SpeedPlan("fast", backend, attn, liger, micro, effective // micro, gc, round(peak, 2), round(budget, 2),
                     reasons)


def read_model_config(model_name: str) -> dict:
    """A model's ``config.json`` as a dict, from a local folder or the Hub, without importing transformers
    (Unsloth must be imported before transformers to patch it).

    Raises:
        OSError: no ``config.json`` in the folder and the Hub does not answer.
    """
    import json
    import os

    path = os.path.join(os.path.expanduser(model_name), "config.json")
    if not os.path.isfile(path):
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(model_name, "config.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _gpu_budget_gib(cap_gib: float) -> float:
    """Free memory on CUDA device 0 in GiB, at most ``cap_gib`` when that is set (> 0)."""
    import torch

    free, _ = torch.cuda.mem_get_info(0)
    free_gib = free / 2**30
    return min(free_gib, cap_gib) if cap_gib else free_gib
