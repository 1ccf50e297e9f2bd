"""Load a causal LM and its tokenizer: Unsloth on a GPU, plain transformers (+ bitsandbytes) elsewhere.

``load_model`` takes the article's cell 2 arguments plus a ``backend`` and makes both backends agree on the dtype
(``precision.resolve_dtype``), RoPE scaling above the trained positions, and a pad token that is not EOS.
"""

from __future__ import annotations

import os
import warnings
import weakref

from ..config.coercion import ConfigError
from ..config.finetune import BACKENDS, DEFAULTS
from ..machine.hardware import Hardware, detect_hardware, is_importable
from .pad_token import ensure_pad_token
from .precision import resolve_dtype, torch_dtype

#: Which backend loaded each model (``load_model``), keyed weakly: a Hugging Face model carries no attribute of ours.
_LOADED_BY: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def loaded_backend(model) -> str | None:
    """``"unsloth"`` or ``"transformers"``: the backend ``load_model`` loaded ``model`` (or the base a PEFT model
    wraps) with; None for a model loaded elsewhere."""
    base = getattr(model, "get_base_model", None)
    for candidate in (model, base() if callable(base) else None):
        if candidate is not None and candidate in _LOADED_BY:
            return _LOADED_BY[candidate]
    return None


def choose_backend(backend: str, hardware: Hardware, unsloth_available: bool) -> str:
    """Resolve ``"auto"`` and check an explicit choice against the machine.

    Args:
        backend: ``"auto"``, ``"unsloth"`` or ``"transformers"``. hardware: the machine's facts.
        unsloth_available: ``unsloth`` is importable.

    Returns:
        For ``"auto"``: ``"unsloth"`` when CUDA (capability >= 7.0) and unsloth are both present, else
        ``"transformers"``; an explicit choice as is when it can run.

    Raises:
        coercion.ConfigError: (a ValueError) unknown backend, or ``"unsloth"`` without a CUDA GPU.
        ImportError: ``"unsloth"`` asked but not installed (the message names the install step).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend={backend!r} is not one of {BACKENDS}")
    cuda_ok = hardware.cuda and (hardware.capability is None or hardware.capability >= (7, 0))
    if backend == "auto":
        return "unsloth" if cuda_ok and unsloth_available else "transformers"
    if backend == "unsloth":
        if not cuda_ok:
            raise ConfigError("backend='unsloth' needs a CUDA GPU of capability >= 7.0; use backend='transformers'")
        if not unsloth_available:
            raise ImportError(
                "backend='unsloth' but unsloth is not installed: run tinyllama_ft.machine.install.install(run=True)"
            )
    return backend


def rope_scaling_factor(max_seq_length: int, max_position_embeddings: int | None) -> float | None:
    """Linear RoPE factor needed to reach ``max_seq_length`` tokens, or ``None`` when it fits."""
    if not max_position_embeddings or max_seq_length <= max_position_embeddings:
        return None
    return max_seq_length / max_position_embeddings


def apply_rope_scaling(config, max_seq_length: int) -> float | None:
    """Set linear RoPE scaling (keeping ``rope_theta``) on a transformers config when ``max_seq_length`` exceeds its
    positions; returns the factor applied, or None."""
    factor = rope_scaling_factor(max_seq_length, getattr(config, "max_position_embeddings", None))
    if factor is None:
        return None
    theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", getattr(config, "rope_theta", 10000.0))
    config.rope_parameters = {"rope_type": "linear", "factor": factor, "rope_theta": theta}
    return factor


def load_model(
    model_name: str,
    *,
    max_seq_length: int = DEFAULTS.max_seq_length,
    dtype: str | None = DEFAULTS.dtype,
    load_in_4bit: bool = DEFAULTS.load_in_4bit,
    backend: str = DEFAULTS.backend,
    hardware: Hardware | None = None,
    trust_remote_code: bool = DEFAULTS.trust_remote_code,
    attn_implementation: str | None = DEFAULTS.attn_implementation,
):
    """Load a causal LM and tokenizer for LoRA training.

    Args:
        model_name: Hub id (the article's ``"unsloth/tinyllama-bnb-4bit"``), a local Hugging Face folder, or a GGUF
            file (or a folder holding one), as ``demo_model.resolve_model_name``.
        max_seq_length: tokens per sequence; above the model's ``max_position_embeddings`` linear RoPE scaling is
            applied on either backend (and said once).
        dtype: ``None``/``"auto"`` or a dtype name, as ``precision.resolve_dtype``.
        load_in_4bit: NF4 4-bit base weights (bitsandbytes) on CUDA; on a CPU, said once, full precision.
        backend: ``"auto"``, ``"unsloth"`` or ``"transformers"`` (``choose_backend``).
        hardware: injected machine facts; default ``detect_hardware()``.
        trust_remote_code: run model code from the repository (off unless asked).
        attn_implementation: transformers' attention kernel on the transformers backend (None: ``"sdpa"``).

    Returns:
        ``(model, tokenizer)``.

    Raises:
        ValueError / ImportError: as ``choose_backend`` and ``resolve_dtype``; 4-bit on CUDA without bitsandbytes.
        OSError: the model cannot be found (not a folder, and the Hub does not answer).
    """
    from .demo_model import resolve_model_name  # ~ and $VARS expanded; a GGUF file or the demo model's id -> a folder

    hardware = hardware or detect_hardware()
    model_name = resolve_model_name(model_name)
    chosen = choose_backend(backend, hardware, is_importable("unsloth"))
    dtype_name = resolve_dtype(dtype, hardware)
    if load_in_4bit and not hardware.cuda:
        warnings.warn(
            "load_in_4bit=True needs a CUDA GPU (bitsandbytes): loading in full precision (float32) on the CPU",
            stacklevel=2,
        )
        load_in_4bit = False
    args = (model_name, max_seq_length, dtype_name, load_in_4bit, trust_remote_code)
    if chosen == "unsloth":
        model, tokenizer, factor = _load_unsloth(*args)
    else:
        model, tokenizer, factor = _load_transformers(*args, hardware, attn_implementation or "sdpa")
    if factor is not None:
        warnings.warn(
            f"max_seq_length={max_seq_length} exceeds the model's trained positions: "
            f"linear RoPE scaling x{factor:g} applied ({chosen} backend)",
            stacklevel=2,
        )
    ensure_pad_token(tokenizer, model)
    _LOADED_BY[model] = chosen
    return model, tokenizer


def import_unsloth_first(backend: str) -> None:
    """Import ``unsloth`` now when ``backend`` is "unsloth" and it is installed; nothing otherwise. Unsloth patches
    transformers, TRL and PEFT as they are imported, so it must come before them (it warns that its optimizations may
    not all apply when it comes after): ``plan.plan_run`` calls this before TRL's config check imports them."""
    if backend == "unsloth" and is_importable("unsloth"):
        import unsloth  # noqa: F401  (GPU extra)


def _load_unsloth(model_name, max_seq_length, dtype_name, load_in_4bit, trust_remote_code):
    from unsloth import FastLanguageModel  # GPU extra; imported only on this path, before transformers
    from transformers import AutoConfig

    config_source = model_name
    if os.path.isfile(os.path.join(model_name, "adapter_config.json")):
        from peft import PeftConfig  # an adapter folder: Unsloth loads its base itself

        config_source = PeftConfig.from_pretrained(model_name).base_model_name_or_path
    positions = AutoConfig.from_pretrained(config_source, trust_remote_code=trust_remote_code).max_position_embeddings
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=model_name,
        max_seq_length=max_seq_length,
        dtype=torch_dtype(dtype_name),
        load_in_4bit=load_in_4bit,
        trust_remote_code=trust_remote_code,
    )
    return model, tokenizer, rope_scaling_factor(max_seq_length, positions)


def _load_transformers(model_name, max_seq_length, dtype_name, load_in_4bit, trust_remote_code, hardware, attention):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(model_name, trust_remote_code=trust_remote_code)
    factor = apply_rope_scaling(config, max_seq_length)
    kwargs = {}
    if load_in_4bit:
        kwargs["quantization_config"] = bnb_4bit_config(dtype_name)
    if hardware.cuda:  # this process's GPU: under accelerate launch each process holds its own copy (DDP)
        from ..machine.distributed import local_process_index

        kwargs["device_map"] = {"": local_process_index()}
    model = AutoModelForCausalLM.from_pretrained(
        model_name,
        config=config,
        dtype=torch_dtype(dtype_name),
        attn_implementation=attention,
        trust_remote_code=trust_remote_code,
        use_safetensors=True,
        **kwargs,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_name, trust_remote_code=trust_remote_code)
    tokenizer.model_max_length = max_seq_length
    # rows past max_seq_length are measured, counted and dropped, truncated or split by the length report
    # (data/lengths.py): transformers' one-time "will result in indexing errors" warning about them is not ours to give
    getattr(tokenizer, "deprecation_warnings", {})["sequence-length-is-longer-than-the-specified-maximum"] = True
    return model, tokenizer, factor


def bnb_4bit_config(dtype_name: str):
    """transformers' ``BitsAndBytesConfig``: NF4 with double quantization, computing in ``dtype_name`` (QLoRA). Raises
    ImportError: bitsandbytes is not installed."""
    if not is_importable("bitsandbytes"):
        raise ImportError(
            "load_in_4bit=True on CUDA needs bitsandbytes: pip install bitsandbytes (or load_in_4bit=False)"
        )
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch_dtype(dtype_name),
    )
