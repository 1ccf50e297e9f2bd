"""Attach LoRA adapters: the article's cell 3, on either backend, with the same result.

Article values (the defaults here, from ``config.DEFAULTS``): ``r=32``, ``lora_alpha=32``, ``lora_dropout=0``, ``bias="none"``, the
seven Llama projections, ``use_gradient_checkpointing=True``, ``random_state=3407``, ``use_rslora=False``,
``loftq_config=None``. Either backend writes the same ``adapter_config.json`` fields and trains the same
parameters (TinyLlama-1.1B shape: 25,231,360).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Iterator, Sequence

from ..config.finetune import DEFAULTS

#: transformers >= 5.2x renamed ``is_gradient_checkpointing`` to ``is_activation_checkpointing`` and warns on every
#: read of the old name; peft (0.21.2, the newest) reads the old name each time it wraps a model.
CHECKPOINTING_ALIAS_WARNING = r"`is_gradient_checkpointing` is deprecated"


@contextlib.contextmanager
def peft_wrapping() -> Iterator[None]:
    """Around peft's ``get_peft_model`` / ``PeftModel.from_pretrained``: the one read of transformers' deprecated
    ``is_gradient_checkpointing`` that peft makes there does not print transformers' FutureWarning on every model
    load. Our own code calls the current API (``activation_checkpointing_enable``, ``add_lora``); the value peft gets
    is the same (the old property returns ``is_activation_checkpointing``), so nothing else changes. TRL's DPO and KTO
    trainers read it at each reference pass (``train.preference_trainer`` wraps their loss in this too). Any other
    warning passes through."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=CHECKPOINTING_ALIAS_WARNING, category=FutureWarning)
        yield


def lora_config(
    *,
    lora_r: int = DEFAULTS.lora_r,
    lora_alpha: int = DEFAULTS.lora_alpha,
    lora_dropout: float = DEFAULTS.lora_dropout,
    lora_bias: str = DEFAULTS.lora_bias,
    target_modules: Sequence[str] = DEFAULTS.target_modules,
    use_rslora: bool = DEFAULTS.use_rslora,
    modules_to_save: Sequence[str] = (),
    tied: bool = False,
):
    """The ``peft.LoraConfig`` for a causal LM with the given knobs (LoftQ off).

    ``modules_to_save``: modules trained in full beside the adapter and saved with it (``embedding_modules``);
    ``tied``: they are the model's tied input embeddings and LM head, kept tied (peft's ``ensure_weight_tying``,
    where the installed peft has it).
    """
    import inspect

    from peft import LoraConfig

    extra = {"modules_to_save": list(modules_to_save)} if modules_to_save else {}
    if modules_to_save and tied and "ensure_weight_tying" in inspect.signature(LoraConfig).parameters:
        extra["ensure_weight_tying"] = True
    return LoraConfig(
        r=lora_r,
        lora_alpha=lora_alpha,
        lora_dropout=lora_dropout,
        bias=lora_bias,
        target_modules=list(target_modules),
        use_rslora=use_rslora,
        task_type="CAUSAL_LM",
        **extra,
    )


def embedding_modules(model) -> tuple[list[str], bool]:
    """``([input embedding name, LM head name], tied)``: the modules a chat template's added tokens need trained.

    A chat template that adds tokens to a base model (``chat_templates.set_chat_template``) gives them new,
    untrained rows in both matrices: the model can neither read ``<|im_start|>`` nor predict ``<|im_end|>``
    (so it never stops). Both train in full beside the adapter, as Unsloth's notebooks do for new tokens: TRL's
    fused LM head (TRL >= 1.16) reads ``lm_head.weight`` directly, so peft's row-wise ``trainable_token_indices``
    would leave the head's rows untrained (and fails there on an untied head). ``tied``: the model ties its LM
    head to its input embeddings (``tie_word_embeddings``: stories260K, SmolLM2; TinyLlama does not).
    """
    names = {id(module): name.rsplit(".", 1)[-1] for name, module in model.named_modules()}
    inputs, outputs = model.get_input_embeddings(), model.get_output_embeddings()
    return [names[id(inputs)], names[id(outputs)]], outputs.weight is inputs.weight


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
    train_embeddings: bool = False,
    adapter_name_or_path: str = DEFAULTS.adapter_name_or_path,
):
    """Wrap ``model`` (from ``loading.load_model``) in LoRA adapters: a fresh one, or a saved one to keep training.

    Args:
        model: the base model (``loading.load_model``).
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
        train_embeddings: also train the input embeddings and the LM head in full (``embedding_modules``),
            saved with the adapter: for the tokens a chat template added (``ChatFormat.added_token_ids``).
            For TinyLlama-1.1B that is 2 x 32,002 x 2,048 = 131M more trainable parameters.
        adapter_name_or_path: a saved adapter folder (an earlier run's ``adapter_dir``, any PEFT LoRA folder for
            this base) to keep training instead of a fresh adapter (a preference run continuing an SFT run): its
            own rank, scaling, target modules and saved whole modules apply (the arguments above that shape an
            adapter are not read; said in one line), loaded by ``adapters.attach_adapter``. "" (the default): a
            fresh adapter.

    Returns:
        The ``peft`` model, with only the adapter weights (and the embeddings, with ``train_embeddings`` or when
        the saved adapter holds them) trainable.

    Raises:
        ValueError: none of ``target_modules`` exists in the model (from peft); ``train_embeddings`` with the
            Unsloth backend (not done there: use the transformers backend); ``adapter_name_or_path`` with the
            Unsloth backend (``plan.plan_run`` picks transformers for it).
        adapter_fit.AdapterMismatchError: the saved adapter does not fit ``model``.
    """
    backend = backend or ("unsloth" if "unsloth" in sys.modules else "transformers")
    if adapter_name_or_path and backend == "unsloth":
        raise ValueError(
            f"adapter_name_or_path={adapter_name_or_path!r}: a saved adapter is continued on the transformers "
            "backend (PEFT), not Unsloth's: set backend='transformers' (the plan picks it with backend='auto')"
        )
    if train_embeddings and backend == "unsloth":
        raise ValueError(
            "train_embeddings (the chat template added tokens, whose new embedding rows must train) is "
            "not done on the Unsloth backend: set backend='transformers', or use a model with its own "
            "chat template (chat_template='auto')"
        )
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
        if adapter_name_or_path:
            from .adapters import attach_adapter

            print(
                f"continuing the adapter in {adapter_name_or_path} (its own rank, scaling and target modules; "
                "lora_r, lora_alpha, lora_dropout, lora_bias, target_modules, use_rslora are not read)"
            )
            return attach_adapter(model, adapter_name_or_path, trainable=True)[0]
        torch.manual_seed(seed)
        modules, tied = embedding_modules(model) if train_embeddings else ((), False)
        config = lora_config(
            lora_r=lora_r,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            lora_bias=lora_bias,
            target_modules=target_modules,
            use_rslora=use_rslora,
            modules_to_save=modules,
            tied=tied,
        )
        with peft_wrapping():
            peft_model = get_peft_model(model, config)
    return peft_model


def trainable_parameters(model) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts (4-bit weights counted as unpacked, as peft does)."""
    return model.get_nb_trainable_parameters()
