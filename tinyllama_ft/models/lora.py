"""Attach LoRA adapters: the article's cell 3 (its values are ``config.DEFAULTS``), on either backend, or a saved
adapter (``attach_adapter``: continuing one, and ``adapters.load_adapter``).

Either backend writes the same ``adapter_config.json`` fields and trains the same parameters (TinyLlama-1.1B:
25,231,360).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Iterator, Sequence

from ..config.coercion import ConfigError
from ..config.finetune import DEFAULTS

#: transformers' warning on a read of ``is_gradient_checkpointing`` (renamed ``is_activation_checkpointing``), which
#: peft (0.21.2, the newest) makes each time it wraps a model.
CHECKPOINTING_ALIAS_WARNING = r"`is_gradient_checkpointing` is deprecated"


@contextlib.contextmanager
def peft_wrapping() -> Iterator[None]:
    """Around peft's ``get_peft_model`` / ``PeftModel.from_pretrained``: silences only transformers' FutureWarning
    on peft's read of the deprecated alias (the value is the same)."""
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
    """The ``peft.LoraConfig`` for a causal LM with the given knobs (LoftQ off); ``modules_to_save`` train in full
    and are kept tied when ``tied`` (peft's ``ensure_weight_tying``, where the installed peft has it)."""
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


#: ``target_modules`` names trained in full (PEFT's ``modules_to_save``), not given LoRA: a new vocabulary, language or
#: domain moves the input embeddings and the LM head (Unsloth's continued-pretraining notebooks).
WHOLE_MODULES = ("embed_tokens", "lm_head")


def embedding_modules(model) -> tuple[list[str], bool]:
    """``([input embedding name, LM head name], tied)``: the modules a chat template's added tokens need trained in
    full (their rows are new in both), as Unsloth's notebooks do; peft's row-wise ``trainable_token_indices`` would
    leave the head's rows untrained under TRL's fused LM head. ``tied``: ``tie_word_embeddings`` (SmolLM2)."""
    names = {id(module): name.rsplit(".", 1)[-1] for name, module in model.named_modules()}
    inputs, outputs = model.get_input_embeddings(), model.get_output_embeddings()
    return [names[id(inputs)], names[id(outputs)]], outputs.weight is inputs.weight


def check_target_modules(model, target_modules: Sequence[str]) -> None:
    """Refuse (a ``ConfigError``, exit status 2 on the command line) a ``target_modules`` name that no module of
    ``model`` has, as peft matches a name in a list: the module's full name, or its last dotted parts. peft itself
    refuses only when no name matches, so a misspelt one beside a right one (``q_proj,v_prj``) would adapt less than
    asked without a word. The message lists the model's LoRA targets (``families.lora_target_modules``)."""
    from .families import lora_target_modules

    names = [name for name, _ in model.named_modules()]
    missing = [t for t in target_modules if not any(n == t or n.endswith(f".{t}") for n in names)]
    if not missing:
        return
    try:
        have = f"its projections are {', '.join(lora_target_modules(model))}"
    except ValueError as e:
        have = str(e)
    raise ConfigError(
        f"target_modules={list(target_modules)!r}: {', '.join(map(repr, missing))} is no module of "
        f"{type(model).__name__} ({have}): set target_modules (--target_modules on the command line) to those to adapt"
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
    train_embeddings: bool = False,
    adapter_name_or_path: str = DEFAULTS.adapter_name_or_path,
):
    """Wrap ``model`` (from ``loading.load_model``) in LoRA adapters: a fresh one, or a saved one to keep training.

    Args:
        model: the base model (``loading.load_model``).
        lora_r: adapter rank. lora_alpha: the update is scaled by ``lora_alpha / lora_r`` (``/ sqrt(lora_r)`` with
            ``use_rslora``). lora_dropout: dropout on the adapter input. lora_bias: ``"none"``, ``"all"`` or
            ``"lora_only"``. target_modules: module names to adapt; ``WHOLE_MODULES`` among them (``embed_tokens``,
            ``lm_head``) train in full instead (``modules_to_save``; on a tied model both, as one). (Defaults: the
            article's, ``config.DEFAULTS``.)
        gradient_checkpointing: recompute activations in backward (pass ``plan.gradient_checkpointing``).
        seed: seed for the adapter init (the article's ``random_state=3407``).
        backend: ``"unsloth"`` or ``"transformers"`` (pass ``plan.backend``); None: ``"unsloth"`` when Unsloth has
            been imported in this process, else ``"transformers"``.
        train_embeddings: also train the input embeddings and LM head in full (``embedding_modules``), for the
            tokens a chat template added (TinyLlama-1.1B: 131M more trainable parameters).
        adapter_name_or_path: a saved adapter folder (an earlier run's ``adapter_dir``, any PEFT LoRA folder for
            this base) to keep training instead of a fresh adapter: its own rank, scaling, target modules and saved
            whole modules apply (the shaping arguments above are not read; said in one line). "": a fresh adapter.

    Returns:
        The ``peft`` model, with only the adapter weights (and the embeddings, with ``train_embeddings`` or when
        the saved adapter holds them) trainable.

    Raises:
        ConfigError: (a ValueError) a fresh adapter's ``target_modules`` names a module the model lacks
            (``check_target_modules``).
        ValueError: ``train_embeddings`` with the
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
    if not adapter_name_or_path:
        check_target_modules(model, target_modules)
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

        # no prepare_model_for_kbit_training: its fp32 upcast of norms and lm_head is not the article's (Unsloth's)
        if gradient_checkpointing:  # renamed activation_checkpointing_enable after transformers 5.17
            if hasattr(model, "activation_checkpointing_enable"):
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        if adapter_name_or_path:
            print(
                f"continuing the adapter in {adapter_name_or_path} (its own rank, scaling and target modules; "
                "lora_r, lora_alpha, lora_dropout, lora_bias, target_modules, use_rslora are not read)"
            )
            return attach_adapter(model, adapter_name_or_path, trainable=True)[0]
        torch.manual_seed(seed)
        whole = [t for t in target_modules if t in WHOLE_MODULES]
        modules, tied = embedding_modules(model) if train_embeddings or whole else ((), False)
        if whole and not (train_embeddings or tied):  # tied: both train as one (ensure_weight_tying)
            modules = whole
        config = lora_config(
            lora_r=lora_r,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            lora_bias=lora_bias,
            target_modules=[t for t in target_modules if t not in WHOLE_MODULES],
            use_rslora=use_rslora,
            modules_to_save=modules,
            tied=tied,
        )
        with peft_wrapping():
            peft_model = get_peft_model(model, config)
    return peft_model


def attach_adapter(base_model, adapter_dir: str, *, base_name: str | None = None, trainable: bool = False):
    """A saved adapter on a loaded base (``peft.PeftModel.from_pretrained``), for ``adapters.load_adapter`` and
    ``add_lora(adapter_name_or_path=...)``.

    Args:
        base_model: a transformers model (``loading.load_model``), not yet a PEFT model.
        adapter_dir: a PEFT LoRA folder (``adapter_config.json``, ``adapter_model.safetensors``).
        base_name: the base's name for messages (default: the model's ``name_or_path``).
        trainable: the adapter's weights (and any whole module it saved) require gradients.

    Returns:
        ``(peft_model, rows)``: ``rows`` is the embedding rows the adapter saved (a chat template's added tokens:
        the base was resized to them first; ``adapter_fit.saved_embedding_rows``), or None.

    Raises:
        adapter_fit.AdapterMismatchError: (a ``ValueError``) the adapter does not fit the base, naming each
            difference.
    """
    from peft import PeftModel

    from .adapter_fit import check_adapter_fits, saved_embedding_rows

    rows = saved_embedding_rows(adapter_dir, base_model)
    if rows and rows > base_model.get_input_embeddings().num_embeddings:  # a chat template's added tokens
        base_model.resize_token_embeddings(rows, mean_resizing=False)  # the adapter's rows replace them
    base_name = base_name or getattr(base_model, "name_or_path", None)
    check_adapter_fits(adapter_dir, base_model, base_name=base_name)  # another base fails only at generation
    with peft_wrapping():  # peft reads transformers' deprecated checkpointing alias (peft_wrapping)
        model = PeftModel.from_pretrained(base_model, adapter_dir, is_trainable=trainable)
    return model, rows


def trainable_parameters(model) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts (4-bit weights counted as unpacked, as peft does)."""
    return model.get_nb_trainable_parameters()
