"""A transformers Llama as the fused decoder (``graph_decoder.py``) reads it: which models qualify, their
weights with q/k/v and gate/up concatenated, and the pointwise parts of a decoder layer: Liger's fused
Triton kernels where installed (one kernel each, in transformers' Llama casting order), or the same
operations in plain torch (CPU, or no Liger).

``liger`` arguments are ``liger_ops()``'s tuple, or None for the torch operations.
"""

from __future__ import annotations

import weakref

#: Each model's fused weights (``fused_weights``); an entry goes with its model.
FUSED_WEIGHTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
#: Model types whose decoder layers are transformers' Llama layers (Llama, TinyLlama, SmolLM2, stories260K).
MODEL_TYPES = ("llama",)


def why_not_fusable(model) -> str | None:
    """None when ``model`` is a plain 16/32-bit transformers Llama the fused decoder reproduces; else why not."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in MODEL_TYPES:
        return f"model type {getattr(config, 'model_type', None)!r} is not one of {MODEL_TYPES}"
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        return "the projections have biases"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act={config.hidden_act!r}"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return "not a LlamaForCausalLM layout"
    return None


def fused_weights(model) -> dict:
    """The model's weights as the fused decoder reads them, made once and kept in ``FUSED_WEIGHTS`` (a snapshot:
    after changing the model's weights, call ``core.forget(model)``).

    Returns:
        ``{"layers": [(input norm, q|k|v, o, post-attention norm, gate|up, down)] per layer, "embed", "norm",
        "lm_head"}``: the concatenated projections are copies, the other tensors the model's own.
    """
    import torch

    kept = FUSED_WEIGHTS.get(model)
    if kept is not None:
        return kept
    inner = model.model
    with torch.no_grad():
        layers = [
            (
                layer.input_layernorm.weight,
                torch.cat(
                    [layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight, layer.self_attn.v_proj.weight]
                ),
                layer.self_attn.o_proj.weight,
                layer.post_attention_layernorm.weight,
                torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
                layer.mlp.down_proj.weight,
            )
            for layer in inner.layers
        ]
    kept = {
        "layers": layers,
        "embed": inner.embed_tokens.weight,
        "norm": inner.norm.weight,
        "lm_head": model.get_output_embeddings().weight,
    }
    FUSED_WEIGHTS[model] = kept
    return kept


def liger_ops():
    """``(rms_norm_forward, fused_add_rms_norm_forward, rope_forward, swiglu_forward)`` from Liger's ``ops``,
    or None where liger-kernel is not installed or its functions moved (then the torch operations run)."""
    try:
        from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward
        from liger_kernel.ops.rms_norm import rms_norm_forward
        from liger_kernel.ops.rope import rope_forward
        from liger_kernel.ops.swiglu import swiglu_forward
    except Exception:  # noqa: BLE001  not installed, or an incompatible version
        return None
    return rms_norm_forward, fused_add_rms_norm_forward, rope_forward, swiglu_forward


def rms_norm(x, weight, eps: float, residual=None, liger=None):
    """``(RMSNorm(x + residual) * weight, x + residual)``; without ``residual``, ``(RMSNorm(x) * weight, x)``.

    transformers' ``LlamaRMSNorm`` order: the mean square and scaling in float32, the result cast back to
    ``x``'s dtype before the weight multiplies it (Liger's ``casting_mode="llama"``).
    """
    if residual is not None:
        if liger:
            return tuple(liger[1](x, residual, weight, eps, 0.0, "llama")[:2])
        x = x + residual
    if liger:
        return liger[0](x, weight, eps, 0.0, "llama", None)[0], x
    h = x.float()
    h = h * (h.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
    return weight * h.to(x.dtype), x


def rope(q, k, cos, sin, liger=None):
    """Rotary embedding of q ``(B, H, T, D)`` and k ``(B, KV, T, D)`` with cos/sin ``(B, T, D)`` (transformers'
    ``rotate_half`` layout). Liger rotates in place where q/k are contiguous in ``(B, T, heads, D)``."""
    import torch

    if liger:
        return liger[2](q, k, cos, sin)[:2]
    cos, sin = cos[:, None], sin[:, None]

    def rotate(x):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    return rotate(q), rotate(k)


def silu_mul(gate, up, liger=None):
    """``silu(gate) * up`` (Llama's MLP before ``down_proj``)."""
    if liger:  # its kernel takes one row stride for both inputs: make them contiguous (free for one row)
        return liger[3](gate.contiguous(), up.contiguous())[2]
    import torch.nn.functional as F

    return F.silu(gate) * up
