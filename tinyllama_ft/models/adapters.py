"""Save a trained LoRA adapter (article cell 8) and load it back (cell 9).

The folder is PEFT's format with the tokenizer beside it (``peft.AutoPeftModelForCausalLM`` loads it without this
package), written in a hidden sibling folder and moved into place once complete.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings

from ..config.coercion import ConfigError
from ..config.finetune import DEFAULTS
from ..config.locations import PathArgumentError, require_folder
from ..machine.hardware import detect_hardware, is_importable
from ..machine.paths import expand_path
from ..machine.temporaries import replace_folder
from .demo_model import check_model_source, resolve_model_name
from .loading import choose_backend, ensure_pad_token, load_model, rope_scaling_factor
from .lora import attach_adapter
from .precision import resolve_dtype, torch_dtype
from .run_record import RECORD_ATTRIBUTE, read_record, resolve_settings, write_record

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def save_adapter(model, tokenizer, adapter_dir: str, *, overwrite: bool = True, record: dict | None = None) -> str:
    """Write the adapter and tokenizer to ``adapter_dir`` atomically.

    Args:
        model: a ``peft`` model: its active adapter's weights are written as safetensors (a preference trainer's
            frozen ``ref`` copy is left out).
        tokenizer: saved beside the adapter.
        adapter_dir: destination folder (the article's ``"lora_model"``).
        overwrite: replace an existing adapter there (the old one is removed once the new one is complete).
        record: ``run_record.adapter_record(...)``, written as ``tinyllama_ft.json``: how later commands prompt and
            load it; its base, data set and method go into the model card, ``README.md`` (``model_card.adapter_card``).
            None writes none, and PEFT's card as PEFT writes it.

    Returns:
        The absolute path of the adapter folder.

    Raises:
        FileExistsError: ``adapter_dir`` exists and ``overwrite`` is False.
        RuntimeError: the save did not produce ``adapter_config.json`` and ``adapter_model.safetensors``
            (e.g. ``model`` has no adapter); nothing is left behind.
    """
    target = os.path.abspath(expand_path(adapter_dir))
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(f"adapter_dir={adapter_dir!r} exists; pass overwrite=True to replace it")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    from .model_card import adapter_card, card_facts

    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.saving-", dir=parent)
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp's 0700 would be the adapter's: the mode os.makedirs gives instead
    try:
        # the trained adapter only: a preference trainer's frozen reference copy (TRL's "ref") is not the run's
        extra = {"selected_adapters": [model.active_adapter]} if len(getattr(model, "peft_config", {})) > 1 else {}
        facts = card_facts(record) if record and "dataset" in record else None
        with adapter_card(staging, facts, name=os.path.basename(target)):
            model.save_pretrained(staging, safe_serialization=True, **extra)
        tokenizer.save_pretrained(staging)
        if record is not None:
            write_record(staging, record)
        missing = [f for f in ADAPTER_FILES if not os.path.isfile(os.path.join(staging, f))]
        if missing:
            raise RuntimeError(f"saving the adapter wrote no {missing}: is the model a LoRA (peft) model?")
        replace_folder(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def adapter_base(
    adapter_dir: str, base_model: str | None = None, *, adapter_flag: str = "adapter_dir", base_flag: str = "base_model"
) -> str:
    """The base an adapter loads onto, checked before anything loads: ``base_model`` when given, else the base
    recorded in its ``adapter_config.json`` (``peft.PeftConfig``'s ``base_model_name_or_path``; the one check of
    ``load_adapter``, ``export_adapter`` and the CLI).

    Args:
        adapter_dir: the adapter folder (must exist locally).
        base_model: a base to use instead of the recorded one (a local copy, another Hub id), or None.
        adapter_flag, base_flag: the arguments' names in messages (``"--adapter"``, ``"--base_model"``).

    Returns:
        The base's expanded local path or Hub id.

    Raises:
        locations.PathArgumentError: (a ConfigError) no such adapter folder, not a saved adapter (no
            ``adapter_config.json``, checked first: PEFT would look the folder name up on the Hub), or a local base
            that does not exist (a recorded one is named with the file it was read from, and ``base_flag``).
        locations.HubUnreachableError: the base is a Hub id that the Hub does not answer for and the cache lacks.
    """
    from peft import PeftConfig

    adapter_dir = require_folder(adapter_dir, adapter_flag, holding=ADAPTER_FILES[0], what="a saved adapter")
    recorded = PeftConfig.from_pretrained(adapter_dir).base_model_name_or_path
    if base_model:
        return check_model_source(base_model, base_flag)
    return check_model_source(recorded, base_flag, recorded_in=os.path.join(adapter_dir, ADAPTER_FILES[0]))


def load_adapter(
    adapter_dir: str,
    *,
    max_seq_length: int | None = None,
    dtype: str | None = None,
    load_in_4bit: bool | None = None,
    backend: str = DEFAULTS.backend,
    hardware=None,
    base_model: str | None = None,
    trust_remote_code: bool = DEFAULTS.trust_remote_code,
    merged: bool = False,
    trainable: bool = False,
):
    """Load base model + saved adapter for inference (the article's reload cell), or to keep training it.

    Args:
        adapter_dir: a folder written by ``save_adapter`` (or any PEFT LoRA folder).
        max_seq_length, dtype, load_in_4bit: as ``loading.load_model``; None: what the run recorded
            (``run_record.read_record``), else the base's trained positions (no RoPE scaling), the hardware's dtype
            and ``DEFAULTS.load_in_4bit``. Another ``max_seq_length`` than the recorded one is refused (RoPE scaling
            follows it); another ``dtype`` / ``load_in_4bit`` is used, said in one line.
        backend, hardware, trust_remote_code: as ``loading.load_model``.
        base_model: override the base recorded in the adapter (e.g. a local copy of it).
        merged: a plain 16-bit transformers model with the adapter merged in (``merge_and_unload`` on the base
            loaded as trained, dequantized): what the CUDA-graph decoder needs. False: base + adapter on top.
            Saved resized embeddings (a chat template's added tokens) resize the base first.
        trainable: the adapter's weights require gradients, to train it further (PEFT's ``is_trainable``; train
            mode); not with ``merged``. A whole run continues an adapter through ``lora.add_lora``.

    Returns:
        ``(model, tokenizer)``: the model in eval mode (train mode with ``trainable``) and the adapter's tokenizer.
        The model carries its record (``run_record.RECORD_ATTRIBUTE``), so ``generation.generate`` / ``stream`` (no
        ``data_format`` or ``template``) prompt in its format and ``chat_generation`` adds what the run added after
        each question (a GRPO run's layout line): ``formats.recorded_data_format``.

    Raises:
        locations.PathArgumentError / HubUnreachableError: as ``adapter_base``.
        FileNotFoundError: no ``adapter_model.safetensors`` (never a pickle); no tokenizer files beside saved resized
            embeddings (``adapter_tokenizer_source``).
        adapter_fit.AdapterMismatchError: (a ``ValueError``) the adapter does not fit the base: names each difference.
        coercion.ConfigError: (a ``ValueError``) ``max_seq_length`` contradicts the recorded one (names both).
        ValueError: ``trainable`` with ``merged`` (a merged model has no adapter left to train).
    """
    if trainable and merged:
        raise ValueError("load_adapter: trainable=True with merged=True: a merged model has no adapter to train")
    hardware = hardware or detect_hardware()
    adapter_dir, base_model = expand_path(adapter_dir), expand_path(base_model)
    base = adapter_base(adapter_dir, base_model)  # a missing folder or base, an unreachable Hub id: one line
    if not os.path.isfile(os.path.join(adapter_dir, ADAPTER_FILES[1])):
        raise FileNotFoundError(
            f"adapter_dir={adapter_dir!r} has no {ADAPTER_FILES[1]}: adapter weights are "
            f"loaded as safetensors only (re-save it with save_adapter)"
        )
    record = read_record(adapter_dir)
    settings = resolve_settings(
        record,
        {"max_seq_length": max_seq_length, "dtype": dtype, "load_in_4bit": load_in_4bit},
        defaults={"max_seq_length": None, "dtype": None, "load_in_4bit": DEFAULTS.load_in_4bit},
    )
    max_seq_length, dtype, load_in_4bit = settings["max_seq_length"], settings["dtype"], settings["load_in_4bit"]
    if max_seq_length is None:  # nothing recorded: the base's own positions, never a RoPE scaling nobody trained
        max_seq_length = base_positions(base, trust_remote_code=trust_remote_code)
    if merged and "unsloth" in sys.modules:  # Unsloth patched transformers' forwards for the whole process
        warnings.warn(
            "merged=True after Unsloth was used in this process: reloading base + adapter with "
            "Unsloth instead (restart the runtime and reload to get the merged 16-bit model)",
            stacklevel=2,
        )
        merged = False
    chosen = "transformers" if merged else choose_backend(backend, hardware, is_importable("unsloth"))
    if chosen == "unsloth" and saves_whole_modules(adapter_dir):
        warnings.warn(
            "this adapter trained whole modules (the embeddings of a chat template's added tokens), which "
            "Unsloth's loader does not resize for: loading it with transformers + PEFT",
            stacklevel=2,
        )
        chosen = "transformers"
    load = dict(
        max_seq_length=max_seq_length,
        dtype=dtype,
        load_in_4bit=load_in_4bit,
        hardware=hardware,
        trust_remote_code=trust_remote_code,
    )
    if chosen == "unsloth" and base_model is None and not trainable:
        # Unsloth reads the adapter's base itself (the article's cell 9 passes the adapter folder).
        model, tokenizer = load_model(adapter_dir, backend="unsloth", **load)
    else:
        from transformers import AutoTokenizer

        base_model_obj, _ = load_model(base, backend=chosen, **load)
        if merged and getattr(base_model_obj, "hf_quantizer", None) is not None:
            base_model_obj = base_model_obj.dequantize(dtype=torch_dtype(resolve_dtype(dtype, hardware)))
        model, rows = attach_adapter(base_model_obj, adapter_dir, base_name=base, trainable=trainable)
        if merged:
            model = model.merge_and_unload()
            if hasattr(model, "peft_config"):  # peft (0.21) leaves it on the merged model
                del model.peft_config
        tokenizer = AutoTokenizer.from_pretrained(
            adapter_tokenizer_source(adapter_dir, base, resized=bool(rows)), trust_remote_code=trust_remote_code
        )
        ensure_pad_token(tokenizer)
    model.train(trainable)
    setattr(model, RECORD_ATTRIBUTE, record)  # the answering helpers prompt as the run did
    return model, tokenizer


def saves_whole_modules(adapter_dir: str) -> bool:
    """The adapter saved whole modules beside its LoRA matrices (``PeftConfig.modules_to_save``: the embeddings and LM
    head of a chat template's added tokens). Raises ValueError: ``adapter_dir`` holds no readable
    ``adapter_config.json`` (PEFT's message)."""
    from peft import PeftConfig

    return bool(PeftConfig.from_pretrained(adapter_dir).modules_to_save)


#: Files of a saved tokenizer, any one of which ``AutoTokenizer`` reads a tokenizer from.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")


def adapter_tokenizer_source(adapter_dir: str, base: str, *, resized: bool = False) -> str:
    """Where the adapter's tokenizer is read from: ``adapter_dir`` (``save_adapter`` writes it there), else ``base``
    (the base model's folder or Hub id; said in one line). ``resized``: the adapter saved resized embeddings. Raises
    FileNotFoundError: no tokenizer file in ``adapter_dir`` and ``resized``: names the folder and what to copy."""
    if any(os.path.isfile(os.path.join(adapter_dir, name)) for name in TOKENIZER_FILES):
        return adapter_dir
    if resized:
        raise FileNotFoundError(
            f"adapter_dir={adapter_dir!r} has no tokenizer files ({', '.join(TOKENIZER_FILES)}), "
            f"and its embeddings were resized for added tokens that the base's tokenizer lacks: "
            f"copy the tokenizer files of the run that trained it into that folder"
        )
    print(f"adapter_dir={adapter_dir!r} has no tokenizer files: using the base's tokenizer ({base})")
    return base


def base_positions(base: str, *, trust_remote_code: bool = DEFAULTS.trust_remote_code) -> int:
    """The base model's ``max_position_embeddings`` (the ``max_seq_length`` without RoPE scaling), else
    ``DEFAULTS.max_seq_length``. Raises OSError: as ``transformers.AutoConfig.from_pretrained`` (no such folder, not
    cached offline)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(
        resolve_model_name(base, flag="base_model"), trust_remote_code=trust_remote_code
    )
    return getattr(config, "max_position_embeddings", None) or DEFAULTS.max_seq_length


def check_start_adapter(cfg, *, flag: str = "adapter_name_or_path") -> dict:
    """Check, before anything is loaded or written, the adapter a preference run continues
    (``cfg.adapter_name_or_path``): a saved adapter, with a ``max_seq_length`` of the same RoPE scaling (its data form
    and template: ``formats.check_continued``); a PEFT folder from elsewhere records nothing.

    Args:
        cfg: the run's ``FinetuneConfig`` (``adapter_name_or_path``, ``model_name``, ``max_seq_length``,
            ``trust_remote_code``).
        flag: the field's name in messages (``"--adapter_name_or_path"`` on the command line).

    Returns:
        The adapter's record (``{}`` when it has none).

    Raises:
        locations.PathArgumentError: (a ConfigError) no such folder, or it holds no ``adapter_config.json`` or no
            ``adapter_model.safetensors``.
        coercion.ConfigError: a contradiction with the record, naming the field, both values and the fix.
    """
    path = require_folder(cfg.adapter_name_or_path, flag, holding=ADAPTER_FILES[0], what="a saved adapter")
    if not os.path.isfile(os.path.join(path, ADAPTER_FILES[1])):
        raise PathArgumentError(f"{flag}: {path} has no {ADAPTER_FILES[1]} (adapter weights are read as safetensors)")
    record = read_record(path)
    if not record:
        return record
    where = f"{flag}={path!r} was trained with"
    trained = record.get("max_seq_length")
    if trained and trained != cfg.max_seq_length:
        positions = base_positions(cfg.model_name, trust_remote_code=cfg.trust_remote_code)
        if rope_scaling_factor(trained, positions) != rope_scaling_factor(cfg.max_seq_length, positions):
            raise ConfigError(
                f"{where} max_seq_length={trained} on a base of {positions} positions, and max_seq_length="
                f"{cfg.max_seq_length} scales RoPE otherwise (linear factor "
                f"{rope_scaling_factor(cfg.max_seq_length, positions)} instead of "
                f"{rope_scaling_factor(trained, positions)}): set max_seq_length={trained}"
            )
    return record
