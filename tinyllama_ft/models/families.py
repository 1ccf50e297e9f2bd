"""Small-model families: LoRA targets, end-of-turn and stop tokens, a pad token that is not EOS, RoPE limits.

``FAMILIES`` holds each family's published defaults (docs/internals.md); where it can, the loaded model decides
instead (its linear layers, its chat template's end-of-turn token). The pad is the first candidate that is neither
EOS nor a stop token (Qwen's published pad is a stop token).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.finetune import DEFAULTS, LLAMA_TARGET_MODULES

#: Phi-3's fused projections.
PHI3_TARGETS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


@dataclass(frozen=True)
class Family:
    """A model family's defaults (see the module table)."""

    name: str
    model_type: str
    end_of_turn: str
    pad_tokens: tuple[str, ...]
    base_template: str | None
    examples: str


#: Pad candidates of Qwen's vocabularies (its published pad, ``<|endoftext|>``, is a stop token).
QWEN_PADS = ("<|vision_pad|>", "<|fim_pad|>", "<|endoftext|>")
#: Pad candidates of Llama-3's and Phi-3's vocabularies.
LLAMA3_PADS = ("<|finetune_right_pad_id|>",)
PHI3_PADS = ("<unk>", "<|placeholder6|>")

FAMILIES = {
    f.name: f
    for f in (
        Family("llama-2", "llama", "</s>", ("<unk>",), "zephyr", "TinyLlama-1.1B, Llama-2"),
        Family("llama-3", "llama", "<|eot_id|>", LLAMA3_PADS, "llama-3", "Llama-3.2-1B/3B"),
        Family("smollm2", "llama", "<|im_end|>", ("<|endoftext|>",), "chatml", "SmolLM2-135M/360M/1.7B"),
        Family("qwen2.5", "qwen2", "<|im_end|>", QWEN_PADS, "chatml", "Qwen2.5-0.5B/1.5B/3B"),
        Family("qwen3", "qwen3", "<|im_end|>", QWEN_PADS, "chatml", "Qwen3-0.6B/1.7B/4B"),
        Family("phi-3", "phi3", "<|end|>", PHI3_PADS, None, "Phi-3-mini, Phi-3.5-mini"),
    )
}


def detect_family(model_config, tokenizer) -> Family:
    """The family of a model, from its ``config.model_type`` and (for ``llama``) its tokenizer's tokens. Raises
    ValueError: a model type outside ``FAMILIES``, naming the supported ones."""
    model_type = getattr(model_config, "model_type", None)
    if model_type in ("qwen2", "qwen3", "phi3"):  # one family each
        return next(f for f in FAMILIES.values() if f.model_type == model_type)
    if model_type == "llama":
        vocab = tokenizer.get_vocab()
        if "<|eot_id|>" in vocab or "<|begin_of_text|>" in vocab:
            return FAMILIES["llama-3"]
        if "<|im_end|>" in vocab:
            return FAMILIES["smollm2"]
        return FAMILIES["llama-2"]
    raise ValueError(
        f"model_type={model_type!r}: supported families are "
        + ", ".join(f"{f.name} ({f.examples})" for f in FAMILIES.values())
    )


def lora_target_modules(model) -> tuple[str, ...]:
    """The LoRA targets of a loaded model (plain, 4-bit, or PEFT-wrapped): the distinct last name parts of every
    ``torch.nn.Linear`` under ``layers.<i>.`` (LoRA's own left out), in the table's order, unknown names last. Raises
    ValueError: no linear layer sits in numbered decoder blocks (an architecture this does not know)."""
    import re

    import torch

    linear = [n.split(".") for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    # in numbered decoder blocks; peft's adapter layers (lora_*) left out, its wrapped layers (base_layer) named
    ours = [
        p for p in linear if re.search(r"\.layers\.\d+\.", ".".join(p)) and not any(s.startswith("lora_") for s in p)
    ]
    names = list(dict.fromkeys(p[-2] if p[-1] == "base_layer" else p[-1] for p in ours))
    if not names:
        raise ValueError(f"{type(model).__name__}: no linear layer inside numbered decoder blocks; pass target_modules")
    order = {n: i for i, n in enumerate(PHI3_TARGETS if "qkv_proj" in names else LLAMA_TARGET_MODULES)}
    return tuple(sorted(names, key=lambda n: order.get(n, len(order))))


def choose_pad_token(tokenizer, family: Family, *, avoid_ids=()) -> str:
    """Set (in place) and return a pad token that is neither EOS, ``family``'s end-of-turn token nor one of
    ``avoid_ids`` (the template's stop ids): the first of ``family.pad_tokens`` the vocabulary has, else ``<unk>``,
    else a new ``<|pad|>`` (the caller resizes the embeddings)."""
    avoid = {tokenizer.eos_token, family.end_of_turn, *tokenizer.convert_ids_to_tokens(list(avoid_ids))}
    vocab = tokenizer.get_vocab()
    for token in (*family.pad_tokens, tokenizer.unk_token):
        if token and token in vocab and token not in avoid:
            tokenizer.pad_token = token
            return token
    tokenizer.add_special_tokens({"pad_token": "<|pad|>"})
    return "<|pad|>"


@dataclass(frozen=True)
class RopeLimits:
    """The positions a model was trained for and how its RoPE is set."""

    max_position_embeddings: int | None
    rope_theta: float | None
    rope_type: str | None
    fits: bool


def rope_limits(model_config, *, max_seq_length: int = DEFAULTS.max_seq_length) -> RopeLimits:
    """Whether ``max_seq_length`` (tokens) fits the model's trained positions, and its RoPE base and scaling type
    (``"default"``, ``"llama3"``, ``"linear"``, ``"yarn"``... as the config's ``rope_parameters`` say). When it does
    not fit, ``loading.load_model`` scales RoPE linearly, which is only sound on ``"default"`` RoPE."""
    params = getattr(model_config, "rope_parameters", None) or getattr(model_config, "rope_scaling", None) or {}
    theta = params.get("rope_theta", getattr(model_config, "rope_theta", None))
    rope_type = params.get("rope_type", params.get("type", "default" if theta is not None else None))
    limit = getattr(model_config, "max_position_embeddings", None)
    return RopeLimits(limit, theta, rope_type, limit is None or max_seq_length <= limit)


@dataclass(frozen=True)
class FamilySetup:
    """What ``prepare_family`` decided for a loaded model."""

    family: str
    target_modules: tuple[str, ...]
    end_of_turn: str
    stop_token_ids: list[int]
    pad_token: str
    added_token_ids: list[int]
    rope: RopeLimits


def prepare_family(
    model, tokenizer, *, chat_template: str = DEFAULTS.chat_template, max_seq_length: int = DEFAULTS.max_seq_length
) -> FamilySetup:
    """Make a loaded model and tokenizer ready for chat fine-tuning, family by family (in place): the chat template,
    EOS / stop ids, a pad token that is not EOS, the generation-config check.

    Args:
        model, tokenizer: from ``loading.load_model`` (or ``from_pretrained``).
        chat_template: as ``chat_templates.set_chat_template`` (``DEFAULTS.chat_template``); ``"auto"`` falls back
            to the family's template (Zephyr for TinyLlama, ChatML for Qwen / SmolLM2) when the tokenizer has none.
        max_seq_length: tokens per sequence, checked against the RoPE limits (``DEFAULTS.max_seq_length``).

    Returns:
        A ``FamilySetup`` (``target_modules``: ``lora_target_modules``).

    Raises:
        ValueError: an unknown family with no template; as ``chat_templates.set_chat_template``.
    """
    from .chat_templates import set_chat_template

    family = detect_family(model.config, tokenizer)
    if chat_template == "auto" and not tokenizer.chat_template:
        if family.base_template is None:
            raise ValueError(
                f"{family.name}: the tokenizer has no chat template and the family has no default; pass chat_template"
            )
        chat_template = family.base_template
    choose_pad_token(tokenizer, family)
    fmt = set_chat_template(tokenizer, model, chat_template=chat_template)
    pad = choose_pad_token(tokenizer, family, avoid_ids=fmt.stop_token_ids)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return FamilySetup(
        family.name,
        lora_target_modules(model),
        fmt.end_of_turn,
        fmt.stop_token_ids,
        pad,
        fmt.added_token_ids,
        rope_limits(model.config, max_seq_length=max_seq_length),
    )
