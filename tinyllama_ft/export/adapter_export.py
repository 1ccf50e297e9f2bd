"""Export a trained adapter where people run models: a merged 16-bit model, GGUF files, an Ollama Modelfile.

``export_adapter`` writes each format to ``<output_dir>/export/<format>/`` (docs/export.md), built in a staging
folder after a free-space check and moved into place when complete; the next export removes a killed one's leftovers.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import time
from pathlib import Path

from ..config.finetune import DEFAULTS, EXPORT_FORMATS
from ..machine.temporaries import clean_stale, discard_temporary, make_temporary, replace_folder, stale_temporaries
from .disk_space import DISK_MARGIN_BYTES, OUTTYPES_OR_Q4, check_free_space, estimate_bytes
from .ollama import write_modelfile

#: GGUF file names inside each format folder.
GGUF_NAMES = {
    "gguf_f16": "model-f16.gguf",
    "gguf_bf16": "model-bf16.gguf",
    "gguf_q8_0": "model-q8_0.gguf",
    "gguf_q4_k_m": "model-q4_k_m.gguf",
    "gguf_lora": "adapter-f16.gguf",
}


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """One exported format: its name, folder (``<output_dir>/export/<format>``), the files written there, their
    total size in bytes, and the seconds its conversion took (the shared merge not included)."""

    format: str
    path: str
    files: tuple[str, ...]
    bytes: int
    seconds: float


def _clean_stale_exports(root: Path) -> list[str]:
    """Undo (and print, and return) what killed exports left in ``root``: a dead process's staging or old folder
    removed, or renamed back where its format's folder is missing (killed between ``replace_folder``'s renames)."""
    lines = []
    for fmt in EXPORT_FORMATS:
        for old in stale_temporaries(root, f".{fmt}.old-")[0]:
            if not os.path.lexists(root / fmt):
                os.replace(old, root / fmt)
                lines.append(f"export: restored {root / fmt} from {old.name} (an export killed while replacing it)")
                print(lines[-1], flush=True)
    patterns = [(".staging-", "")] + [(f".{fmt}.old-", "") for fmt in EXPORT_FORMATS]
    return lines + clean_stale(root, patterns, label="export", left_by="a killed export")


#: Tokenizer files transformers 5 no longer saves and llama.cpp's converter needs (SentencePiece's merge scores).
TOKENIZER_SOURCES = ("tokenizer.model",)


def save_merged(
    *,
    model,
    tokenizer,
    target_dir: str | os.PathLike,
    chat_template: str,
    dtype: str | None = None,
    base_dir: str | None = None,
) -> Path:
    """Save a merged model as a plain transformers folder with the trained prompt format as chat template.

    Args:
        model: the merged model (``load_adapter(..., merged=True)``), cast in place to ``dtype`` when given.
        tokenizer: its tokenizer; its ``chat_template`` becomes ``chat_template``.
        target_dir: the folder to write (created; ``export_adapter`` stages it).
        chat_template: the adapter's format's ``exported_chat_template(tokenizer)`` (``formats.recorded_data_format``:
            an Alpaca adapter's prompt as Jinja, a chat adapter's own template, either adding the run's
            ``prompt_suffix``).
        dtype: ``"bfloat16"``, ``"float16"``, ``"float32"``, or None to keep the model's.
        base_dir: the base model's local folder, whose ``TOKENIZER_SOURCES`` are copied when the save lacks them.

    Returns:
        ``target_dir`` as a Path (safetensors, configs, tokenizer files, ``chat_template.jinja``).

    Raises:
        ValueError: a 4-bit model.
    """
    import torch

    if getattr(model, "hf_quantizer", None) is not None:
        raise ValueError(
            "save_merged takes a dequantized merged model (load_adapter(..., merged=True)), not a 4-bit one"
        )
    if dtype is not None:
        model.to(getattr(torch, dtype))
    tokenizer.chat_template = chat_template
    if tokenizer.eos_token_id is not None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    if tokenizer.pad_token_id is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    target = Path(target_dir)
    model.save_pretrained(str(target))  # creates the folder
    tokenizer.save_pretrained(str(target))
    for name in TOKENIZER_SOURCES:
        if base_dir and os.path.isfile(os.path.join(base_dir, name)) and not (target / name).exists():
            shutil.copyfile(os.path.join(base_dir, name), target / name)
    return target


def _local_base_dir(base: str, required: bool = True) -> str | None:
    """A local folder holding the base's config and tokenizer (the folder itself, or the Hub cache's copy); None
    when neither exists, or FileNotFoundError when ``required``."""
    if os.path.isdir(base):
        return base
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(base, allow_patterns=["*.json", "*.model", "*.txt"], local_files_only=True)
    except Exception as err:
        if not required:
            return None
        raise FileNotFoundError(
            f"gguf_lora needs the base model's config and tokenizer locally; {base!r} is neither "
            f"a folder nor in the Hugging Face cache (pass base_model=<local folder>)"
        ) from err


def check_export_tools(formats, *, whole_modules: bool = False) -> None:
    """Refuse, before anything is trained or loaded, an export this machine (or this adapter) cannot finish.

    Args:
        formats: export format names (``export_formats``).
        whole_modules: the adapter trains whole modules beside its LoRA matrices (``adapters.saves_whole_modules``).

    Raises:
        coercion.ConfigError: ``gguf_lora`` with ``whole_modules`` (a GGUF LoRA holds LoRA matrices only): names the
            formats that work.
        RuntimeError: ``gguf_q4_k_m`` without llama.cpp's quantizer (``gguf_export.QUANTIZER_MISSING``).
    """
    from ..config.coercion import ConfigError
    from . import gguf_export

    if "gguf_lora" in formats and whole_modules:
        raise ConfigError(
            "export_formats: gguf_lora holds LoRA matrices only, and this adapter also trains the "
            "embeddings and LM head (the chat template's added tokens): export gguf_f16, gguf_q8_0 or "
            "merged_16bit instead (the merged model carries them)"
        )

    if "gguf_q4_k_m" in formats and gguf_export.find_quantizer() is None:
        raise RuntimeError(gguf_export.QUANTIZER_MISSING)


def export_adapter(
    *,
    adapter_dir: str,
    formats,
    output_dir: str,
    template: str | None = None,
    base_model: str | None = None,
    max_seq_length: int | None = None,
    dtype: str | None = None,
    load_in_4bit: bool | None = None,
    merged_dtype: str = "auto",
    converter_dir: str | None = None,
    cache_dir: str | None = None,
    sdist: str | None = None,
    hardware=None,
    trust_remote_code: bool = DEFAULTS.trust_remote_code,
) -> dict[str, ExportResult]:
    """Export an adapter in each of ``formats`` to ``<output_dir>/export/<format>/``.

    Args:
        adapter_dir: a folder written by ``adapters.save_adapter`` (the notebook's ``<output_dir>/lora_model``).
        formats: names from ``config.EXPORT_FORMATS`` (``["merged_16bit", "gguf_q8_0"]``); empty: returns ``{}``.
        output_dir: the run's output folder.
        template: the Alpaca prompt template trained with; None: what the run recorded, else ``DEFAULTS.template``.
            A chat adapter keeps its own chat template in every format; a template given for it is refused.
        base_model: a local copy of the base (default: the adapter's recorded base).
        max_seq_length, load_in_4bit, dtype: how the base is loaded for the merge, as ``adapters.load_adapter``.
        merged_dtype: dtype of ``merged_16bit``'s safetensors: ``"auto"`` (the merge dtype when it is 16-bit, else
            bfloat16), ``"bfloat16"``, ``"float16"`` or ``"float32"``.
        converter_dir, cache_dir, sdist: llama.cpp's converter folder, or where/how to fetch it
            (``gguf_export.llama_cpp_converter``).
        hardware: injected machine facts (default ``detect_hardware()``).
        trust_remote_code: as ``loading.load_model`` (the config field's default: off).

    Returns:
        ``{format: ExportResult}`` in the order asked.

    Raises:
        ValueError: an unknown format name (before anything runs).
        coercion.ConfigError: (a ValueError) a ``template`` or ``max_seq_length`` that contradicts the record;
            as ``check_export_tools``.
        RuntimeError: as ``check_export_tools`` (checked first); no converter (offline, not cached); a failed
            conversion.
        OSError: ``errno.ENOSPC`` when the estimated size does not fit (nothing written); NotADirectoryError:
            ``output_dir`` is a file.
        FileNotFoundError, locations.PathArgumentError / HubUnreachableError: as ``adapters.load_adapter``
            (checked before anything loads).
    """
    from ..models.adapters import adapter_base, load_adapter, saves_whole_modules
    from . import gguf_export

    formats = list(dict.fromkeys(formats))
    unknown = [f for f in formats if f not in EXPORT_FORMATS]
    if unknown:
        raise ValueError(f"formats: {unknown} not among {list(EXPORT_FORMATS)}")
    if not formats:
        return {}
    base = adapter_base(adapter_dir, base_model)  # early: no such adapter, a base that moved, an unreachable Hub id
    check_export_tools(formats, whole_modules=saves_whole_modules(adapter_dir))
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise NotADirectoryError(f"output_dir={output_dir!r} is a file, not a folder: pass another --output_dir")
    from ..data.formats import recorded_data_format
    from ..models.run_record import read_record, resolve_settings

    record = read_record(adapter_dir)
    resolve_settings(record, {"max_seq_length": max_seq_length}, defaults={}, where="export")  # before loading
    prompted = recorded_data_format(record, template=template, where="export")  # its prompt in every format
    converter = Path(converter_dir) if converter_dir else None
    if converter is None and any(f.startswith("gguf_") for f in formats):
        converter = gguf_export.llama_cpp_converter(cache_dir=cache_dir, sdist=sdist)
    root = Path(output_dir) / "export"
    made = [p for p in (Path(output_dir), root) if not p.exists()]  # removed again if the export leaves them empty
    root.mkdir(parents=True, exist_ok=True)
    _clean_stale_exports(root)
    staging = make_temporary(root, ".staging-")  # .staging-<host>-<pid>-<token>: whose it is, if killed
    results: dict[str, ExportResult] = {}

    def done(fmt: str, folder: Path, seconds: float) -> None:
        target = root / fmt
        replace_folder(folder, target)
        files = tuple(sorted(str(p) for p in target.rglob("*") if p.is_file()))
        results[fmt] = ExportResult(fmt, str(target), files, sum(os.path.getsize(f) for f in files), seconds)

    try:
        merged_formats = [f for f in formats if f != "gguf_lora"]
        if merged_formats:
            model, tokenizer = load_adapter(
                adapter_dir,
                max_seq_length=max_seq_length,
                dtype=dtype,
                load_in_4bit=load_in_4bit,
                backend="transformers",
                hardware=hardware,
                base_model=base_model,
                trust_remote_code=trust_remote_code,
                merged=True,
            )
            if hasattr(model, "peft_config"):  # load_adapter fell back to base + adapter: Unsloth patched this process
                raise RuntimeError(
                    "export needs the merged 16-bit model, which cannot be built after Unsloth was used in this "
                    "process: the adapter is saved; export it from a fresh process (restart the runtime in a "
                    f"notebook), e.g. tinyllama-ft export --adapter {adapter_dir} "
                    + " ".join(f"--format {f}" for f in formats)
                )
            merge_dtype = str(model.dtype).replace("torch.", "")
            n_params = model.num_parameters()
            needed = estimate_bytes(n_params=n_params, formats=formats, staging_bytes_per_param=model.dtype.itemsize)
            check_free_space(path=str(root), needed_bytes=needed)
            base_dir = _local_base_dir(base, required=False)
            chat_template = prompted.exported_chat_template(tokenizer)
            save = functools.partial(
                save_merged, model=model, tokenizer=tokenizer, chat_template=chat_template, base_dir=base_dir
            )
            if any(f in OUTTYPES_OR_Q4 for f in formats):
                full = save(target_dir=staging / "merged-full")
            for fmt in merged_formats:
                start, folder = time.perf_counter(), staging / fmt
                if fmt == "merged_16bit":
                    auto = merge_dtype if merge_dtype in ("bfloat16", "float16") else "bfloat16"
                    save(target_dir=folder, dtype=auto if merged_dtype == "auto" else merged_dtype)
                else:
                    folder.mkdir()
                    gguf = folder / GGUF_NAMES[fmt]
                    q4, outtype = fmt == "gguf_q4_k_m", gguf_export.OUTTYPES.get(fmt, "f16")  # q4_k_m: from f16
                    f16 = staging / "q4_k_m-source-f16.gguf" if q4 else gguf
                    gguf_export.convert_to_gguf(model_dir=full, target=f16, outtype=outtype, converter=converter)
                    if q4:
                        gguf_export.quantize_gguf(source=f16, target=gguf)
                        f16.unlink()
                    body, stops = prompted.ollama_template(tokenizer)
                    write_modelfile(gguf_path=gguf, template=body, stops=stops)
                done(fmt, folder, time.perf_counter() - start)
        if "gguf_lora" in formats:
            start, folder = time.perf_counter(), staging / "gguf_lora"
            folder.mkdir()
            check_free_space(
                path=str(root),
                needed_bytes=2 * os.path.getsize(Path(adapter_dir) / "adapter_model.safetensors") + DISK_MARGIN_BYTES,
            )
            gguf_export.convert_lora_to_gguf(
                adapter_dir=adapter_dir,
                converter=converter,
                target=folder / GGUF_NAMES["gguf_lora"],
                base_dir=_local_base_dir(base),
            )
            done("gguf_lora", folder, time.perf_counter() - start)
    finally:
        discard_temporary(staging)
        for folder in reversed(made):  # a refused export (no disk space, a failed merge) leaves no empty folders
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    return {f: results[f] for f in formats}


def describe_exports(results: dict[str, ExportResult]) -> str:
    """One line per format of ``export_adapter``'s ``results``: name, size in MiB, seconds and folder (what the
    notebook and CLI print); ``"no export asked (export_formats is empty)"`` for none."""
    if not results:
        return "no export asked (export_formats is empty)"
    return "\n".join(
        f"{r.format:<13} {r.bytes / 2**20:9.2f} MiB {r.seconds:7.1f} s  {r.path}" for r in results.values()
    )
