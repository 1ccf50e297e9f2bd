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


def base_weight(module, dtype):
    """The 16-bit weight under a projection's adapters, (out, in) in ``dtype``: PEFT's ``dequantize_module_weight``
    of its base layer (a new tensor for a bitsandbytes 4/8-bit base; the layer's own tensor when it already has
    ``dtype``)."""
    from peft.utils.integrations import dequantize_module_weight

    layer = module.get_base_layer() if hasattr(module, "lora_A") else module
    return dequantize_module_weight(layer).detach().to(dtype)


def lora_factors(module, dtype) -> list:
    """``[(left, right, scaling)]`` per active adapter of a PEFT LoRA layer, ``left @ right`` being its
    ``get_delta_weight`` before ``scaling`` (``B @ A``; transposed for ``fan_in_fan_out``), cast to ``dtype``; empty for
    a plain layer or with the adapters disabled."""
    if not hasattr(module, "lora_A") or module.disable_adapters:
        return []
    factors = []
    for adapter in module.active_adapters:
        if adapter in module.lora_A:
            a = module.lora_A[adapter].weight.detach().to(dtype)
            b = module.lora_B[adapter].weight.detach().to(dtype)
            factors.append(
                (a.T, b.T, module.scaling[adapter]) if module.fan_in_fan_out else (b, a, module.scaling[adapter])
            )
    return factors


def projection_weight(module, dtype, out=None, base=None):
    """A projection's weight as the model computes with it, (out, in) in ``dtype``: its base weight plus each active
    adapter's ``scaling * B @ A``, written by ``torch.addmm`` (one rounding to ``dtype``, the adapter's factors cast
    to ``dtype`` first, as PEFT's own merge casts its delta; no full-size float32 temporaries).

    Args:
        module: a projection: a PEFT LoRA layer (over a 16-bit or bitsandbytes 4/8-bit base) or a plain layer.
        dtype: the result's dtype.
        out: the tensor to write, (out, in) in ``dtype`` and contiguous (a row block of a fused tensor); None: a new
            one (a plain layer's own tensor when it already has ``dtype``).
        base: ``base_weight(module, dtype)`` kept from an earlier call (no dequantization); None: computed here.

    Returns:
        ``out``, or the new tensor.
    """
    import torch

    if base is None:
        base = base_weight(module, dtype)
    factors = lora_factors(module, dtype)
    if not factors:
        return base if out is None else out.copy_(base)
    (left, right, scaling), *more = factors
    out = torch.addmm(base, left, right, alpha=scaling, out=out)  # out=None: a new tensor
    for left, right, scaling in more:
        out.addmm_(left, right, alpha=scaling)
    return out


def fused_weights(model, refresh: bool = False, keep_base: bool = False) -> dict:
    """The weights of ``model`` (one ``why_not_readable`` accepts) as the fused decoder reads them, kept in
    ``FUSED_WEIGHTS`` (a snapshot: call ``core.forget(model)`` after changing its weights or adapters, or pass
    ``refresh``).

    Args:
        model: the model.
        refresh: write a kept snapshot's adapter projections again, in place (the same tensors, so a captured CUDA
            graph reads the current weights): for a model whose adapter trains between answers (GRPO's rollouts).
        keep_base: keep each 4/8-bit projection's dequantized 16-bit base beside the snapshot (as much memory again as
            those projections' copies), so a refresh only adds the adapters' ``B @ A`` to it; False: a refresh
            dequantizes the base again. A 16-bit base is the model's own tensor, read in place either way.

    Returns:
        ``{"layers": [(input norm, q|k|v, o, post-attention norm, gate|up, down)] per layer, "embed", "norm",
        "lm_head", "parts"}``: concatenated (and a 4/8-bit or PEFT model's) projections are copies; the rest the
        model's own; ``parts``: ``{"module", "out", "base"}`` per adapter projection, what a refresh writes.
    """
    import torch

    kept = FUSED_WEIGHTS.get(model)
    if kept is not None and not refresh:
        return kept
    with torch.no_grad():
        if kept is None:
            kept = FUSED_WEIGHTS[model] = _fused_layout(model, keep_base)
            return kept
        for part in kept["parts"]:
            if keep_base and part["base"] is None:
                part["base"] = base_weight(part["module"], part["out"].dtype)
            projection_weight(part["module"], part["out"].dtype, out=part["out"], base=part["base"])
    return kept


def _fused_layout(model, keep_base: bool) -> dict:
    """``fused_weights``'s snapshot made: the fused tensors allocated and written, each adapter projection recorded."""
    import torch

    llama = llama_model(model)
    inner, embed = llama.model, llama.get_input_embeddings().weight
    layers, parts = [], []
    for layer in inner.layers:
        attn, mlp = layer.self_attn, layer.mlp
        fused = []
        for group in (
            (attn.q_proj, attn.k_proj, attn.v_proj),
            (attn.o_proj,),
            (mlp.gate_proj, mlp.up_proj),
            (mlp.down_proj,),
        ):
            if len(group) == 1 and not hasattr(group[0], "lora_A"):
                fused.append(projection_weight(group[0], embed.dtype))  # the layer's own tensor, or a 16-bit copy
                continue
            rows = [m.out_features for m in group]
            out = torch.empty(sum(rows), group[0].in_features, dtype=embed.dtype, device=embed.device)
            for module, block in zip(group, out.split(rows)):
                base = base_weight(module, embed.dtype)
                own = base.data_ptr() == module.weight.data_ptr()  # a 16-bit base: no copy to keep
                projection_weight(module, embed.dtype, out=block, base=base)
                if hasattr(module, "lora_A"):
                    parts.append({"module": module, "out": block, "base": base if keep_base or own else None})
                del base
            fused.append(out)
        layers.append(
            (layer.input_layernorm.weight, fused[0], fused[1], layer.post_attention_layernorm.weight, *fused[2:])
        )
    return {
        "layers": layers,
        "embed": inner.embed_tokens.weight,
        "norm": inner.norm.weight,
        "lm_head": llama.get_output_embeddings().weight,
        "parts": parts,
    }


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
