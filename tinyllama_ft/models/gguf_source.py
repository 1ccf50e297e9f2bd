"""A GGUF file as a model source: converted once, through transformers, into a cached Hugging Face folder.

transformers dequantizes a GGUF file (``from_pretrained(folder, gguf_file=...)``) but leaves its quantization
config, a ``model_max_length`` of 1e30 and, for SmolLM2, pad == EOS; ``hf_folder_from_gguf`` fixes those and saves
bfloat16 into a cache folder keyed by the file's sha256. Kept: transformers' GGUF load alone cannot be saved or
trained as is (tests/test_demo_model.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..machine.checksums import sha256_of

#: Written last into a converted folder; its presence (with the right sha256) marks the folder complete.
MARKER = "tinyllama_ft_gguf_source.json"
#: Context the tokenizer is given when the GGUF file's config does not say (SmolLM2: 8,192).
DEFAULT_MODEL_MAX_LENGTH = 8192


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tinyllama_ft`` (``~/.cache/tinyllama_ft`` when unset): where converted models live."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tinyllama_ft"


def gguf_file_of(model_name: str | os.PathLike) -> Path | None:
    """The path of the GGUF file ``model_name`` names (a ``.gguf`` file, or a folder holding exactly one ``.gguf`` file
    and no ``config.json``), or ``None`` when it names something else (a Hub id, an HF folder). Raises ValueError: a
    folder without ``config.json`` holds several ``.gguf`` files (pass the file itself)."""
    path = Path(os.fspath(model_name)).expanduser()
    if path.suffix.lower() == ".gguf" and path.is_file():
        return path
    if path.is_dir() and not (path / "config.json").exists():
        files = sorted(path.glob("*.gguf"))
        if len(files) > 1:
            raise ValueError(
                f"model_name={str(model_name)!r} holds several GGUF files {[f.name for f in files]}: pass one file"
            )
        if files:
            return files[0]
    return None


def is_complete(folder: str | os.PathLike, sha256: str | None = None) -> bool:
    """True when ``folder`` holds a finished conversion (its marker written last; matching ``sha256`` if given)."""
    marker = Path(folder) / MARKER
    if not marker.is_file():
        return False
    if sha256 is None:
        return True
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("sha256") == sha256
    except (OSError, ValueError):
        return False


def load_gguf(gguf_file: str | os.PathLike, dtype: str = "float32"):
    """Load a GGUF file through transformers as a plain, saveable model and a tokenizer fit for training.

    Args:
        gguf_file: path to the ``.gguf`` file.
        dtype: dtype name the weights are dequantized to (``"float32"``, ``"bfloat16"``).

    Returns:
        ``(model, tokenizer)``: the GGUF quantization config removed (``save_pretrained`` works), the tokenizer's
        ``model_max_length`` the config's ``max_position_embeddings`` (else 8,192), a pad token that is not EOS
        (``pad_token.ensure_pad_token``).

    Raises:
        ImportError: the ``gguf`` package (a dependency) is missing: transformers' message.
        FileNotFoundError: no such file.
        ValueError / OSError: transformers cannot read the file (corrupt, or an architecture it lacks).
    """
    gguf_file = Path(gguf_file)
    if not gguf_file.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_file}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .pad_token import ensure_pad_token

    folder, name = str(gguf_file.parent), gguf_file.name
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if getattr(model, "hf_quantizer", None) is not None:  # transformers' GgufHfQuantizer
        model.hf_quantizer.remove_quantization_config(model)
    tokenizer.model_max_length = getattr(model.config, "max_position_embeddings", None) or DEFAULT_MODEL_MAX_LENGTH
    ensure_pad_token(tokenizer, model)
    return model, tokenizer


def hf_folder_from_gguf(gguf_file: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """Convert a GGUF file once into a Hugging Face folder in the cache, and return that folder.

    Args:
        gguf_file: path to the ``.gguf`` file.
        cache_dir: cache root; default ``default_cache_dir()`` (``~/.cache/tinyllama_ft``).

    Returns:
        Path of ``<cache>/models/<stem>-<sha256[:16]>``: ``config.json``, safetensors weights in bfloat16 (far finer
        than Q4_1's steps), the tokenizer files and a marker recording the source file and its sha256 (written last,
        atomically).

    Raises:
        As ``load_gguf``; OSError when the cache folder cannot be written.
    """
    gguf_file = Path(gguf_file).resolve()
    sha256 = sha256_of(gguf_file)
    target = Path(cache_dir or default_cache_dir()) / "models" / f"{gguf_file.stem}-{sha256[:16]}"
    if is_complete(target, sha256):
        return str(target)
    import torch

    model, tokenizer = load_gguf(gguf_file, dtype="float32")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.to(torch.bfloat16).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        marker = {"source": str(gguf_file), "sha256": sha256, "save_dtype": "bfloat16"}
        (tmp / MARKER).write_text(json.dumps(marker, indent=1), encoding="utf-8")
        if target.exists() and not is_complete(target, sha256):
            shutil.rmtree(target, ignore_errors=True)  # unreadable marker: never a finished conversion
        try:
            os.rename(tmp, target)
        except OSError:
            if not is_complete(target, sha256):  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)
