"""Does a saved LoRA adapter fit a base model? Checked before PEFT loads it.

``adapter_fit_problems`` compares, without loading weights, the recorded base's config, the adapter's tokenizer
against the base's embeddings, and each saved tensor's shape against the base parameter PEFT loads it into.
``saved_embedding_rows`` gives the vocabulary an adapter with resized embeddings needs. Kept: PEFT loads a
misfitting adapter without a word, and it fails only at generation (tests/test_adapter_fit.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..machine.paths import expand_path

#: Config fields an adapter's base and the base it is loaded onto must share.
CONFIG_FIELDS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
)
#: PEFT's prefix of saved tensor names (``PeftModel`` wraps the base as ``base_model.model``).
_PREFIX = "base_model.model."
#: LoRA tensor suffix -> (which dimension of the tensor is the module's input/output size, and which size).
_LORA = {
    ".lora_A.weight": (1, "in"),
    ".lora_B.weight": (0, "out"),
    ".lora_embedding_A": (1, "in"),
    ".lora_embedding_B": (0, "out"),
}
#: Infixes PEFT's wrappers add to the names of the modules they wrap (``ModulesToSaveWrapper``, a LoRA layer).
_WRAPPER_INFIXES = ("modules_to_save", "original_module", "base_layer")


class AdapterMismatchError(ValueError):
    """The adapter was trained on another base model than the one it is being loaded onto."""


def _saved_tensors(adapter_dir: str) -> dict[str, list[int]]:
    """Shapes of the adapter's tensors by saved name (PEFT's prefix dropped), read from the header only."""
    from safetensors import safe_open

    with safe_open(os.path.join(adapter_dir, "adapter_model.safetensors"), framework="pt") as f:
        return {key.removeprefix(_PREFIX): f.get_slice(key).get_shape() for key in f.keys()}


def base_name(saved_name: str, modules: dict) -> str:
    """The name, in the plain base, of the parameter or module a saved adapter tensor is loaded into.

    PEFT's wrapper infixes (``lm_head.modules_to_save[.<adapter>].weight``, ``...original_module...``,
    ``...base_layer...``) are dropped where they follow a base module with no such child of its own.

    Args:
        saved_name: a tensor name of ``adapter_model.safetensors`` without PEFT's ``base_model.model.`` prefix.
        modules: the base's ``dict(named_modules())``, before any adapter wraps it.

    Returns:
        ``saved_name`` without the wrapper infixes (``"lm_head.weight"``).
    """
    parts, kept, i = saved_name.split("."), [], 0
    while i < len(parts):
        owner = modules.get(".".join(kept)) if kept else None
        if owner is not None and parts[i] in _WRAPPER_INFIXES and not hasattr(owner, parts[i]):
            i += 1
            if parts[i - 1] == "modules_to_save" and i < len(parts) - 1 and not hasattr(owner, parts[i]):
                i += 1  # the adapter's name (``modules_to_save.default.weight``)
            continue
        kept.append(parts[i])
        i += 1
    return ".".join(kept)


def _loaded_tensors(adapter_dir: str, base_model) -> dict[str, list[list[int]]]:
    """The distinct shapes saved for each base name (``base_name``) of the adapter's tensors, in file order."""
    modules = dict(base_model.named_modules())
    loaded: dict[str, list[list[int]]] = {}
    for name, shape in _saved_tensors(adapter_dir).items():
        shapes = loaded.setdefault(base_name(name, modules), [])
        if list(shape) not in shapes:
            shapes.append(list(shape))
    return loaded


def saved_embedding_rows(adapter_dir: str, base_model) -> int | None:
    """Rows of the input embedding matrix saved with the adapter (the vocabulary resized for a chat template's
    tokens, which the base must be resized to first), or None when it saved none.

    Args:
        adapter_dir: a PEFT LoRA folder (only ``adapter_model.safetensors``' header is read).
        base_model: the base (a transformers model) before the adapter is added.

    Raises:
        OSError: ``adapter_dir`` has no readable ``adapter_model.safetensors``.
    """
    names = {id(module): name for name, module in base_model.named_modules()}
    embeddings = names.get(id(base_model.get_input_embeddings()), "") + ".weight"
    shapes = _loaded_tensors(adapter_dir, base_model).get(embeddings)
    return shapes[0][0] if shapes else None


def _module_sizes(module) -> tuple[int | None, int | None]:
    """``(in, out)`` of a Linear (also bitsandbytes' 4-bit one) or an Embedding."""
    if hasattr(module, "in_features"):
        return module.in_features, module.out_features
    if hasattr(module, "num_embeddings"):
        return module.num_embeddings, module.embedding_dim
    return None, None


def _recorded_base_config(name: str | None) -> dict | None:
    """The adapter's base's config, if it is on this machine (never downloads)."""
    if not name:
        return None
    path = os.path.join(expand_path(name), "config.json")
    if os.path.isfile(path):
        return json.loads(Path(path).read_text(encoding="utf-8"))
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(name, local_files_only=True).to_dict()
    except (OSError, ValueError):
        return None


def adapter_fit_problems(adapter_dir: str, base_model, *, tokenizer=None) -> list[str]:
    """What keeps the adapter in ``adapter_dir`` from fitting ``base_model``; ``[]`` when it fits.

    Args:
        adapter_dir: a PEFT LoRA folder (``adapter_config.json`` + ``adapter_model.safetensors``).
        base_model: the loaded base (a transformers model, 4-bit or not), before the adapter is added.
        tokenizer: the tokenizer generation will use; default: the one saved in ``adapter_dir``, if any.

    Returns:
        One sentence per difference (``"vocab_size: 512 in the adapter's base, 32000 in this base"``...).
    """
    adapter_config = json.loads(Path(adapter_dir, "adapter_config.json").read_text(encoding="utf-8"))
    problems = []
    recorded = _recorded_base_config(adapter_config.get("base_model_name_or_path"))
    base_config = base_model.config.to_dict()
    resized = saved_embedding_rows(adapter_dir, base_model)
    other_type = None
    if recorded is not None:
        for field in CONFIG_FIELDS:
            then, now = recorded.get(field), base_config.get(field)
            if field == "vocab_size" and now == resized:  # the base resized for the adapter's added tokens
                continue
            if then is not None and now is not None and then != now:
                said = f"{field}: {then!r} in the adapter's base, {now!r} in this base"
                if field == "model_type":
                    other_type = said
                else:
                    problems.append(said)
    embeddings = base_model.get_input_embeddings().num_embeddings
    if tokenizer is None and os.path.isfile(os.path.join(adapter_dir, "tokenizer_config.json")):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(adapter_dir)
    if tokenizer is not None and len(tokenizer) > embeddings:
        problems.append(
            f"vocabulary: the adapter's tokenizer has {len(tokenizer)} tokens, this base embeds "
            f"{embeddings} (ids from {embeddings} on would fail with IndexError at generation)"
        )
    modules = dict(base_model.named_modules())
    missing, wrong = [], []
    for name, shapes in _loaded_tensors(adapter_dir, base_model).items():  # by what PEFT loads them into
        suffix = next((s for s in _LORA if name.endswith(s)), None)
        if suffix is None:  # a full tensor saved with the adapter (modules_to_save)
            try:
                have = list(base_model.get_parameter(name).shape)
            except AttributeError:
                missing.append(name)
                continue
            other = next((shape for shape in shapes if shape != have), None)
            if other is not None:
                wrong.append(f"{name}: {other} in the adapter, {have} in this base")
            continue
        module_name = name[: -len(suffix)]
        if module_name not in modules:
            missing.append(module_name)
            continue
        dim, side = _LORA[suffix]
        size = _module_sizes(modules[module_name])[0 if side == "in" else 1]
        other = next((shape for shape in shapes if size is not None and size != shape[dim]), None)
        if other is not None:
            wrong.append(f"{module_name}: the adapter's LoRA {side}put size is {other[dim]}, this base's is {size}")

    def first3(items, sep):
        return sep.join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")

    if missing:
        problems.append(
            f"target modules this base lacks: {first3(sorted(set(missing)), ', ')} "
            f"(the adapter's target_modules: {adapter_config.get('target_modules')})"
        )
    if wrong:
        problems.append("hidden sizes differ: " + first3(wrong, "; "))
    return [other_type] + problems if problems and other_type else problems


def check_adapter_fits(adapter_dir: str, base_model, *, base_name: str | None = None, tokenizer=None) -> None:
    """Raise, naming every difference, unless the adapter in ``adapter_dir`` fits ``base_model``.

    Args:
        adapter_dir, base_model, tokenizer: as ``adapter_fit_problems``.
        base_name: how the base was named (for the message), e.g. ``load_adapter``'s ``base_model``.

    Raises:
        AdapterMismatchError: (a ``ValueError``) the adapter was trained on another base.
    """
    problems = adapter_fit_problems(adapter_dir, base_model, tokenizer=tokenizer)
    if problems:
        with open(os.path.join(adapter_dir, "adapter_config.json"), encoding="utf-8") as f:
            trained_on = json.load(f).get("base_model_name_or_path")
        raise AdapterMismatchError(
            f"the adapter in {adapter_dir!r} (trained on {trained_on!r}) does not fit the base "
            f"{base_name or base_model.config.name_or_path!r}: "
            + "; ".join(problems)
            + ". Load it onto the base it was trained on (load_adapter's base_model, or leave it None)"
        )
