"""Attach LoRA adapters: the article's cell 3, on either backend, with the same result.

Article values (the defaults here, from ``config.DEFAULTS``): ``r=32``, ``lora_alpha=32``, ``lora_dropout=0``, ``bias="none"``, the
seven Llama projections, ``use_gradient_checkpointing=True``, ``random_state=3407``, ``use_rslora=False``,
``loftq_config=None``. Either backend writes the same ``adapter_config.json`` fields and trains the same
parameters (TinyLlama-1.1B shape: 25,231,360).
"""

from __future__ import annotations

import sys
from typing import Sequence

from .config import DEFAULTS


def lora_config(
    *,
    lora_r: int = DEFAULTS.lora_r,
    lora_alpha: int = DEFAULTS.lora_alpha,
    lora_dropout: float = DEFAULTS.lora_dropout,
    lora_bias: str = DEFAULTS.lora_bias,
    target_modules: Sequence[str] = DEFAULTS.target_modules,
    use_rslora: bool = DEFAULTS.use_rslora,
):
    """The ``peft.LoraConfig`` for a causal LM with the given knobs (LoftQ off)."""
    from peft import LoraConfig

    return LoraConfig(
        r=lora_r,
        lora_alpha=lora_alpha,
        lora_dropout=lora_dropout,
        bias=lora_bias,
        target_modules=list(target_modules),
        use_rslora=use_rslora,
        task_type="CAUSAL_LM",
    )


def add_lora(
    model,
    *,
    lora_r: int = DEFAULTS.lora_r,
    lora_alpha: int = DEFAULTS.lora_alpha,
    lora_dropout: float = DEFAULTS.lora_dropout,
    lora_bias: str = DEFAULTS.lora_bias,
    target_modules: Sequence[str] = DEFAULTS.target_modules,
    use_rslora: bool = DEFAULTS.use_rslora,
    gradient_checkpointing: bool = DEFAULTS.gradient_checkpointing,
    seed: int = DEFAULTS.seed,
    backend: str | None = None,
):
    """Wrap ``model`` (from ``modeling.load_model``) in LoRA adapters.

    Args:
        model: the base model (``modeling.load_model``).
        lora_r: adapter rank (article: 32).
        lora_alpha: scaling numerator; the update is scaled by ``lora_alpha / lora_r`` (or
            ``/ sqrt(lora_r)`` with rsLoRA).
        lora_dropout: dropout on the adapter input (article: 0).
        lora_bias: ``"none"``, ``"all"`` or ``"lora_only"`` (article: ``"none"``).
        target_modules: module names to adapt (article: the seven projections).
        use_rslora: rank-stabilized scaling (article: off).
        gradient_checkpointing: recompute activations in backward (article: on; pass ``plan.gradient_checkpointing``).
        seed: seed for the adapter init (the article's ``random_state=3407``).
        backend: ``"unsloth"`` or ``"transformers"`` (pass ``plan.backend``); None: ``"unsloth"`` when
            Unsloth has been imported in this process (it patched the model classes), else ``"transformers"``.

    Returns:
        The ``peft`` model, with only the adapter weights trainable.

    Raises:
        ValueError: none of ``target_modules`` exists in the model (from peft).
    """
    backend = backend or ("unsloth" if "unsloth" in sys.modules else "transformers")
    if backend == "unsloth":
        from unsloth import FastLanguageModel  # GPU extra

        peft_model = FastLanguageModel.get_peft_model(
            model,
            r=lora_r,
            target_modules=list(target_modules),
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            bias=lora_bias,
            use_gradient_checkpointing=gradient_checkpointing,
            random_state=seed,
            use_rslora=use_rslora,
            loftq_config=None,
        )
    else:
        import torch
        from peft import get_peft_model

        # A 4-bit base gets no fp32 upcast of its norms, embeddings and lm_head (peft's
        # prepare_model_for_kbit_training does one): the article's Unsloth path keeps them in the compute
        # dtype too, and an fp32 lm_head doubles the cost of the logits. get_peft_model freezes the base.
        if gradient_checkpointing:
            # transformers 5.2x renamed it activation_checkpointing_enable; use whichever exists
            if hasattr(model, "activation_checkpointing_enable"):
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        torch.manual_seed(seed)
        peft_model = get_peft_model(
            model, lora_config(lora_r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, lora_bias=lora_bias,
                               target_modules=target_modules, use_rslora=use_rslora)
        )
    return peft_model


def trainable_parameters(model) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts (4-bit weights counted as unpacked, as peft does)."""
    return model.get_nb_trainable_parameters()
