"""A transformers Llama as the fused decoder (``graph_decoder.py``) reads it: which models qualify, their weights
with q/k/v and gate/up concatenated (a 4-bit or PEFT model's as a merged 16-bit copy), and a decoder layer's
pointwise parts: Liger's fused Triton kernels where installed (``liger`` arguments: ``liger_ops()``'s tuple), else
the same operations in torch, in transformers' Llama casting order.
"""

from __future__ import annotations

import weakref

#: Each model's fused weights (``fused_weights``); an entry goes with its model.
FUSED_WEIGHTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
#: Model types whose decoder layers are transformers' Llama layers (Llama, TinyLlama, SmolLM2, stories260K).
MODEL_TYPES = ("llama",)


def llama_model(model):
    """The transformers causal LM inside ``model``: a PEFT model's base (its LoRA layers in place), else ``model``."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def why_not_fusable(model) -> str | None:
    """None when answers (``infer.core``) decode ``model`` on the fused decoder: ``why_not_readable`` accepts it and
    it is not Unsloth's (Unsloth answers with its own inference path); else why not."""
    from ...models.loading import loaded_backend

    if loaded_backend(model) == "unsloth":
        return "an Unsloth model (Unsloth answers with its own inference path)"
    return why_not_readable(model)


def why_not_readable(model) -> str | None:
    """None when the fused decoder reproduces ``model`` from its weights alone (a Llama with transformers' layer
    layout, 16/32-bit or bitsandbytes 4/8-bit, plain or with LoRA adapters on its projections; Unsloth's too: the
    decoder never calls the patched forward, only the model's own RoPE module); else why not."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in MODEL_TYPES:
        return f"model type {getattr(config, 'model_type', None)!r} is not one of {MODEL_TYPES}"
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        return "the projections have biases"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act={config.hidden_act!r}"
    inner = getattr(llama_model(model), "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return "not a LlamaForCausalLM layout"
    peft_config = getattr(model, "peft_config", None) or {}
    if any(str(getattr(c, "peft_type", "LORA")).split(".")[-1] != "LORA" for c in peft_config.values()):
        return "a PEFT adapter other than LoRA"
    import torch

    for name, module in llama_model(model).named_modules():
        if hasattr(module, "lora_A"):
            if any(getattr(module, "use_dora", {}).values()) or any(getattr(module, "lora_bias", {}).values()):
                return f"{name}: DoRA or a LoRA bias"
            if getattr(module, "merged_adapters", None):
                return f"{name}: an adapter merged into the PEFT wrapper (merge_and_unload first)"
            if not name.endswith(PROJECTIONS):
                return f"{name}: LoRA on a module the decoder reads as is"
        elif name.endswith(("embed_tokens", "lm_head")) and type(module) not in (torch.nn.Embedding, torch.nn.Linear):
            return f"{name} is a {type(module).__name__}"
    return None


#: The projections ``fused_weights`` reads through ``projection_weight`` (dequantized, LoRA deltas added).
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def projection_weight(module, dtype):
    """A projection's weight as the model computes with it, (out, in) in ``dtype``: PEFT's
    ``dequantize_module_weight`` plus the active adapters' ``get_delta_weight`` (summed in float32); a plain
    layer's own tensor when it already has ``dtype``."""
    from peft.utils.integrations import dequantize_module_weight

    if not hasattr(module, "lora_A"):
        weight = dequantize_module_weight(module)
        return weight if weight.dtype == dtype else weight.to(dtype)
    weight = dequantize_module_weight(module.get_base_layer()).detach().float()
    if not module.disable_adapters:
        for adapter in module.active_adapters:
            if adapter in module.lora_A:
                weight = weight + module.get_delta_weight(adapter).float()
    return weight.to(dtype)


def fused_weights(model, refresh: bool = False) -> dict:
    """The weights of ``model`` (one ``why_not_readable`` accepts) as the fused decoder reads them, kept in
    ``FUSED_WEIGHTS`` (a snapshot: call ``core.forget(model)`` after changing its weights or adapters, or pass
    ``refresh``).

    Args:
        model: the model.
        refresh: recompute a kept snapshot's copies in place (the same tensors, so a captured CUDA graph reads the
            current weights): for a model whose adapter trains between answers (GRPO's rollouts).

    Returns:
        ``{"layers": [(input norm, q|k|v, o, post-attention norm, gate|up, down)] per layer, "embed", "norm",
        "lm_head"}``: concatenated (and a 4/8-bit or PEFT model's) projections are copies; the rest the model's own.
    """
    import torch

    kept = FUSED_WEIGHTS.get(model)
    if kept is not None and not refresh:
        return kept
    llama = llama_model(model)
    inner, dtype = llama.model, llama.get_input_embeddings().weight.dtype
    with torch.no_grad():
        layers = []
        for i, layer in enumerate(inner.layers):
            attn, mlp = layer.self_attn, layer.mlp
            q, k, v, o, gate, up, down = (
                projection_weight(m, dtype)
                for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
            )
            weights = (layer.input_layernorm.weight, torch.cat([q, k, v]), o, layer.post_attention_layernorm.weight)
            weights += (torch.cat([gate, up]), down)
            del q, k, v, gate, up
            if kept is not None:
                for old, new in zip(kept["layers"][i], weights):
                    if new is not old:
                        old.copy_(new)
                del weights
                continue
            layers.append(weights)
    if kept is not None:
        return kept
    kept = {
        "layers": layers,
        "embed": inner.embed_tokens.weight,
        "norm": inner.norm.weight,
        "lm_head": llama.get_output_embeddings().weight,
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
    """Rotary embedding of q ``(B, H, T, D)`` and k ``(B, KV, T, D)`` with cos/sin ``(B, T, D)``: transformers'
    Llama ``apply_rotary_pos_emb``, or Liger's, which rotates in place where q/k are contiguous in ``(B, T, heads, D)``."""
    if liger:
        return liger[2](q, k, cos, sin)[:2]
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return apply_rotary_pos_emb(q, k, cos, sin)


def silu_mul(gate, up, liger=None):
    """``silu(gate) * up`` (Llama's MLP before ``down_proj``)."""
    if liger:  # its kernel takes one row stride for both inputs: make them contiguous (free for one row)
        return liger[3](gate.contiguous(), up.contiguous())[2]
    import torch.nn.functional as F

    return F.silu(gate) * up
