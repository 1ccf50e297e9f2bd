"""Push an adapter, a merged model or a GGUF export to the Hugging Face Hub (private by default), through
``huggingface_hub.HfApi``.

The token comes from ``HF_TOKEN`` in the environment or the Colab secret of that name (``secrets.find_secret``),
never from a parameter. Offline, or when the Hub does not answer, ``push_to_hub`` fails within seconds, before
anything is uploaded.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

#: What a folder must hold to be pushed: one of these marks an adapter, a merged model or a GGUF export.
KINDS = {"adapter": "adapter_model.safetensors", "merged": "config.json", "gguf": ".gguf"}


def folder_kind(folder: str | os.PathLike) -> str:
    """``"adapter"``, ``"gguf"`` or ``"merged"``: what ``folder`` holds. Raises FileNotFoundError: ``folder`` is missing
    or holds none of them."""
    folder = Path(folder)
    names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    if KINDS["adapter"] in names:
        return "adapter"
    if any(n.endswith(KINDS["gguf"]) for n in names):
        return "gguf"
    if KINDS["merged"] in names and any(n.endswith(".safetensors") for n in names):
        return "merged"
    raise FileNotFoundError(
        f"folder={str(folder)!r} holds no adapter (adapter_model.safetensors), merged model "
        f"(config.json + *.safetensors) or GGUF file: nothing to push"
    )


def upload_files(folder: str | os.PathLike) -> list[str]:
    """The files ``push_to_hub`` uploads: the regular, non-hidden files at the top of ``folder``, sorted (never
    staging leftovers or sub-folders). Raises FileNotFoundError as ``folder_kind``."""
    folder_kind(folder)
    return sorted(p.name for p in Path(folder).iterdir() if p.is_file() and not p.name.startswith("."))


def check_hub_reachable(*, timeout_s: float = 5.0) -> None:
    """Fail fast when the Hub's endpoint does not answer a TCP connection within ``timeout_s`` seconds. Raises
    ConnectionError: no answer (the message names the endpoint and ``HF_HUB_OFFLINE``)."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except OSError as err:
        raise ConnectionError(
            f"the Hugging Face Hub at {constants.ENDPOINT} does not answer within {timeout_s:g} s "
            f"({err}): push from a machine with internet access"
        ) from err


def push_to_hub(
    *,
    folder: str | os.PathLike,
    repo_id: str,
    private: bool = True,
    commit_message: str | None = None,
    timeout_s: float = 5.0,
) -> str:
    """Create (if needed) the model repository ``repo_id`` and upload ``upload_files(folder)`` to it.

    Args:
        folder: an adapter folder (``save_adapter``), or ``<output_dir>/export/<format>``.
        repo_id: ``"user/name"`` or ``"org/name"`` (``huggingface_hub.utils.validate_repo_id``).
        private: create the repository private (an existing repository keeps its visibility).
        commit_message: default ``"Upload <kind> with tinyllama-ft"``. timeout_s: seconds the Hub gets to answer.

    Returns:
        The repository's URL.

    Raises:
        ValueError: ``repo_id`` is not a valid ``owner/name``.
        FileNotFoundError: as ``folder_kind``.
        RuntimeError: ``HF_HUB_OFFLINE`` is set, or no ``HF_TOKEN`` in the environment or Colab secrets.
        ConnectionError: the Hub does not answer (``check_hub_reachable``).
    """
    from huggingface_hub import HfApi
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from ..config.secrets import find_secret
    from ..config.locations import hub_offline

    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise ValueError(f"repo_id={repo_id!r} is not a Hub repository id: {err}") from err
    if "/" not in repo_id:
        raise ValueError(f"repo_id={repo_id!r}: give 'owner/name' (your user or organization, then the model name)")
    kind = folder_kind(folder)
    files = upload_files(folder)
    if hub_offline():
        raise RuntimeError(
            "HF_HUB_OFFLINE is set: the Hub is off for this process; unset it (or push from a machine "
            "with internet access) to upload"
        )
    token, _ = find_secret("HF_TOKEN")
    if not token:
        raise RuntimeError(
            "no Hugging Face token: set HF_TOKEN in the environment or as a Colab secret (a write "
            "token from huggingface.co/settings/tokens); tokens are never parameters"
        )
    check_hub_reachable(timeout_s=timeout_s)
    api = HfApi(token=token)
    url = api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(
        folder_path=str(folder),
        repo_id=repo_id,
        repo_type="model",
        allow_patterns=files,
        commit_message=commit_message or f"Upload {kind} with tinyllama-ft",
    )
    return str(url)
