"""GGUF files for llama.cpp, Ollama and LM Studio, written by llama.cpp's own converter.

``convert_hf_to_gguf.py`` writes what llama.cpp checks (pre-tokenizer, token types, ``add_bos``); it ships only in
the ``llama-cpp-python`` sdist, which ``llama_cpp_converter`` downloads once, checks against its pinned SHA-256 and
extracts into a cache. It runs as a subprocess with ``HF_HUB_OFFLINE=1``; ``q4_k_m`` needs llama.cpp's quantizer.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from ..machine.checksums import sha256_of
from ..machine.hardware import is_importable
from ..machine.sdist_download import download_sdist
from ..machine.temporaries import clean_stale, discard_temporary, make_temporary
from ..models.gguf_source import default_cache_dir

#: The llama-cpp-python release whose vendored llama.cpp converter we run (llama.cpp of 2026-10).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
#: SHA-256 of ``llama_cpp_python-0.3.36.tar.gz`` as PyPI serves it (checked before extraction).
LLAMA_CPP_PYTHON_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
#: Where PyPI keeps the pinned sdist (for downloading it by hand; the index names the same file).
LLAMA_CPP_PYTHON_URL = (
    "https://files.pythonhosted.org/packages/ec/e9/"
    "e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz"
)
#: The converter's files inside ``<sdist>/vendor/llama.cpp/`` (folders are taken whole).
CONVERTER_FILES = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion/", "gguf-py/gguf/", "LICENSE")
#: Converter ``--outtype`` per GGUF format name.
OUTTYPES = {"gguf_f16": "f16", "gguf_bf16": "bf16", "gguf_q8_0": "q8_0"}
QUANTIZER_MISSING = (
    "gguf_q4_k_m needs llama.cpp's quantizer, and neither is here: install the binding with "
    "`pip install llama-cpp-python` (it builds llama.cpp from source, ~40 min on 2 cores; prebuilt wheels: "
    "`pip install llama-cpp-python --extra-index-url https://abetlen.github.io/llama-cpp-python/whl/cpu`), or put "
    "llama.cpp's `llama-quantize` on PATH (e.g. `brew install llama.cpp`, or a release from "
    "github.com/ggml-org/llama.cpp). gguf_q8_0 needs neither."
)


def llama_cpp_converter(
    *,
    cache_dir: str | os.PathLike | None = None,
    sdist: str | os.PathLike | None = None,
    version: str = LLAMA_CPP_PYTHON_VERSION,
    sha256: str | None = LLAMA_CPP_PYTHON_SHA256,
    timeout_s: float = 600.0,
) -> Path:
    """The folder holding llama.cpp's converter scripts, fetched once and cached.

    Args:
        cache_dir: where converters are kept (default ``gguf_source.default_cache_dir()``); the converter lands in
            ``<cache_dir>/llama.cpp-converter-<version>/``.
        sdist: a local ``llama_cpp_python-<version>.tar.gz`` to extract instead of downloading (offline).
        version: llama-cpp-python release (default ``LLAMA_CPP_PYTHON_VERSION``).
        sha256: expected SHA-256 of the sdist; None skips the check (only for another ``version``).
        timeout_s: seconds allowed for the download (``sdist_download.download_sdist``: each source).

    Fetch folders left by a killed download are removed first, said in a line; the download prints its URL before
    and one ``gguf: llama.cpp's converter ready in ...`` line after.

    Returns:
        The converter folder (``convert_hf_to_gguf.py``, ``convert_lora_to_gguf.py``, ``conversion/``, ``gguf-py/``).

    Raises:
        RuntimeError: not cached and the download failed (each source's error, and how to get the file by hand);
            the sdist's checksum differs from ``sha256``; the sdist lacks the converter. Nothing is left in the cache.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / f"llama.cpp-converter-{version}"
    clean_stale(root, [(f".{target.name}.fetching-", "")], label="gguf", left_by="a killed converter download")
    if (target / "convert_hf_to_gguf.py").is_file():
        return target
    staging = make_temporary(root, f".{target.name}.fetching-")
    try:
        start = time.perf_counter()
        archive = (
            Path(sdist)
            if sdist is not None
            else download_sdist(
                staging,
                package="llama-cpp-python",
                version=version,
                timeout_s=timeout_s,
                sha256=sha256,
                what="llama.cpp's converter",
                size="~77 MB",
                label="gguf",
                manual_url=LLAMA_CPP_PYTHON_URL if version == LLAMA_CPP_PYTHON_VERSION else None,
            )
        )
        if sha256 is not None and (found := sha256_of(archive)) != sha256:
            raise RuntimeError(
                f"{archive} has SHA-256 {found}, not the pinned {sha256} of "
                f"llama-cpp-python=={version}: refusing to run it"
            )
        prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
        out = staging / "converter"
        with tarfile.open(archive, "r:gz") as tar:
            entries = (m for m in tar.getmembers() if (m.isfile() or m.isdir()) and m.name.startswith(prefix))
            members = [m for m in entries if m.name[len(prefix) :].startswith(CONVERTER_FILES)]
            for m in members:
                m.name = m.name[len(prefix) :]
            tar.extractall(out, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        if not (out / "convert_hf_to_gguf.py").is_file() or not (out / "gguf-py" / "gguf").is_dir():
            raise RuntimeError(f"{archive} holds no vendor/llama.cpp/convert_hf_to_gguf.py with gguf-py")
        try:
            os.replace(out, target)
        except OSError:  # another process finished the same fetch first: its copy is as good
            if not (target / "convert_hf_to_gguf.py").is_file():
                raise
        if sdist is None:
            print(
                f"gguf: llama.cpp's converter ready in {target} ({time.perf_counter() - start:.1f} s, SHA-256 "
                f"checked); later exports run offline",
                flush=True,
            )
    finally:
        discard_temporary(staging)
    return target


def _run(cmd: list, what: str, timeout_s: float, env: dict | None = None) -> float:
    """Run ``cmd`` and return its seconds. Raises RuntimeError: it failed (naming ``what``, with its stderr tail) or
    ran over ``timeout_s``."""
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"{what} ran over {timeout_s:.0f} s") from err
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def _run_converter(cmd: list[str], what: str, timeout_s: float) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("NO_LOCAL_GGUF", None)  # the converter must use its own gguf-py, not an older installed gguf
    return _run([sys.executable, *cmd], f"{what}: llama.cpp's converter", timeout_s, env)


@contextlib.contextmanager
def _written_atomically(target: str | os.PathLike):
    """Yield an empty ``.<name>.<host>-<pid>-<token>.partial`` beside ``target`` (after removing ones of killed
    runs), renamed to ``target`` when the block succeeds and removed in any case."""
    target = Path(target)
    clean_stale(target.parent, [(f".{target.name}.", ".partial")], label="gguf", left_by="a killed conversion")
    tmp = make_temporary(target.parent, f".{target.name}.", ".partial", create="file")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        discard_temporary(tmp)


def convert_to_gguf(
    *, model_dir: str | os.PathLike, target: str | os.PathLike, outtype: str, converter: Path, timeout_s: float = 3600.0
) -> float:
    """Convert a Hugging Face model folder to one GGUF file with ``convert_hf_to_gguf.py``.

    Args:
        model_dir: the merged model (safetensors, ``config.json``, tokenizer files, chat template).
        target: the ``.gguf`` path, written under a temporary name and renamed when complete (a failure leaves none).
        outtype: ``"f16"``, ``"bf16"``, ``"q8_0"`` (or another converter ``--outtype``).
        converter: ``llama_cpp_converter()``. timeout_s: seconds allowed.

    Returns:
        Seconds the conversion took.

    Raises:
        RuntimeError: the converter failed (its stderr tail in the message) or ran over ``timeout_s``.
    """
    with _written_atomically(target) as tmp:
        cmd = [str(converter / "convert_hf_to_gguf.py"), str(model_dir), "--outfile", str(tmp), "--outtype", outtype]
        return _run_converter(cmd, f"GGUF {outtype} of {model_dir}", timeout_s)


def convert_lora_to_gguf(
    *,
    adapter_dir: str | os.PathLike,
    base_dir: str | os.PathLike,
    target: str | os.PathLike,
    converter: Path,
    outtype: str = "f16",
    timeout_s: float = 3600.0,
) -> float:
    """The adapter alone as a GGUF LoRA (llama.cpp's ``--lora``, Ollama's ``ADAPTER``), with ``convert_lora_to_gguf.py``.

    Args:
        adapter_dir: the PEFT adapter folder.
        base_dir: a local folder with the base model's ``config.json`` and tokenizer (weights not read).
        target, converter, timeout_s: as ``convert_to_gguf``. outtype: ``"f16"``, ``"bf16"``, ``"f32"`` or ``"q8_0"``.

    Returns:
        Seconds the conversion took.

    Raises:
        RuntimeError: as ``convert_to_gguf`` (e.g. an architecture or LoRA target the converter lacks).
    """
    with _written_atomically(target) as tmp:
        args = ["--outfile", str(tmp), "--outtype", outtype, "--base", str(base_dir), str(adapter_dir)]
        return _run_converter(
            [str(converter / "convert_lora_to_gguf.py"), *args], f"GGUF LoRA of {adapter_dir}", timeout_s
        )


def find_quantizer() -> str | None:
    """Which llama.cpp quantizer is here: ``"llama_cpp"`` (the binding), ``"llama-quantize"`` (PATH) or None."""
    if is_importable("llama_cpp"):
        return "llama_cpp"
    return "llama-quantize" if shutil.which("llama-quantize") else None


def quantize_gguf(*, source: str | os.PathLike, target: str | os.PathLike, timeout_s: float = 3600.0) -> float:
    """Quantize a 16-bit GGUF to Q4_K_M with llama.cpp's quantizer (``find_quantizer``).

    Args:
        source: an f16/bf16 GGUF (``convert_to_gguf``). target: the Q4_K_M ``.gguf``, written atomically.
        timeout_s: seconds allowed for the ``llama-quantize`` binary.

    Returns:
        Seconds the quantization took.

    Raises:
        RuntimeError: no quantizer installed (``QUANTIZER_MISSING`` names what to install), or it failed.
    """
    which = find_quantizer()
    if which is None:
        raise RuntimeError(QUANTIZER_MISSING)
    start = time.perf_counter()
    with _written_atomically(target) as tmp:
        if which == "llama_cpp":
            import llama_cpp

            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
            status = llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
            if status != 0:
                raise RuntimeError(f"llama_model_quantize({source}) returned {status}")
        else:
            _run(["llama-quantize", str(source), str(tmp), "Q4_K_M"], "llama-quantize", timeout_s)
    return time.perf_counter() - start
