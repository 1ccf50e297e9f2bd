"""Where a model or data argument points, checked before anything loads: a local path that exists, or a Hub id
that the Hub answers for or its cache holds.

Every reader of a model or data argument calls ``check_source``, so one rule (``paths.is_local_path``) decides
local path or Hub id, and a wrong one ends in one line naming the argument after at most one bounded Hub request
(``hub_answers``), not transformers' retries and "Repo id must be in the form" message.
Kept: transformers names neither the argument nor the id of a wrong path or a silent Hub (tests/test_locations.py).
"""

from __future__ import annotations

import os
from functools import lru_cache

from ..machine.paths import expand_path, is_local_path
from .coercion import ConfigError

#: Seconds the Hub gets to answer the one metadata request before it is deemed unreachable.
HUB_TIMEOUT_S = 5.0
#: The ``dataset`` value of a GRPO run that names the arithmetic problems the package generates (``data.arithmetic``):
#: neither a path nor a Hub id; nothing is read.
GENERATED_DATASET = "arithmetic"


class PathArgumentError(ConfigError, FileNotFoundError):
    """A path argument names nothing usable (no such file or folder; a folder that is not a saved adapter): a usage
    error (``ConfigError``: the command line exits 2) and a ``FileNotFoundError``."""


class HubUnreachableError(ConnectionError):
    """A Hub id that the Hub does not answer for and that is not in the local cache (an ``OSError``: exit status 1)."""


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` is set to a true value now (huggingface_hub reads it once, at its import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


@lru_cache(maxsize=None)
def hub_answers(repo_id: str, repo_type: str = "model", timeout_s: float = HUB_TIMEOUT_S) -> bool:
    """Whether the Hub answers for ``repo_id``: one ``HfApi.repo_info`` request, no retries, asked once per process.

    Any HTTP answer counts (a 404 for a mistyped id, a 401 for a gated one: the loader then names the id); a
    refused or timed-out connection, or huggingface_hub's offline mode (``HF_HUB_OFFLINE``), does not.

    Args:
        repo_id: a Hub id (``namespace/name``).
        repo_type: ``"model"`` or ``"dataset"``.
        timeout_s: seconds to wait for the answer.

    Returns:
        True when the Hub answered, False otherwise.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    try:
        HfApi().repo_info(repo_id, repo_type=repo_type, timeout=timeout_s)
    except HfHubHTTPError:
        return True  # the Hub answered (no such repo, gated, rate-limited)
    except Exception:  # noqa: BLE001 - refused, timed out, DNS, offline mode (OfflineModeIsEnabled): no answer
        return False
    return True


def in_hub_cache(repo_id: str, repo_type: str = "model") -> bool:
    """Whether the local caches hold ``repo_id``: huggingface_hub's cache (a model's ``config.json``, any snapshot of
    a dataset), or for a dataset the ``datasets`` library's prepared copy (``<namespace>___<name>``)."""
    from huggingface_hub import snapshot_download, try_to_load_from_cache

    if repo_type == "model":
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    try:
        snapshot_download(repo_id, repo_type=repo_type, local_files_only=True)
        return True
    except Exception:  # noqa: BLE001 - not cached (or a partial cache): look for datasets' own copy
        from datasets import config as datasets_config

        return os.path.isdir(os.path.join(datasets_config.HF_DATASETS_CACHE, repo_id.replace("/", "___")))


def check_source(
    value: str | os.PathLike, flag: str, *, repo_type: str = "model", recorded_in: str | None = None
) -> str:
    """A model or data argument, checked: an existing local path, or a Hub id the Hub answers for or the cache holds.

    Args:
        value: the argument (``~`` and ``$VARS`` are expanded); local or Hub id by ``paths.is_local_path``.
        flag: how the caller names the argument in messages (``"--model_name"`` on the command line,
            ``"model_name"`` in a notebook).
        repo_type: ``"model"`` or ``"dataset"``, for a Hub id.
        recorded_in: the file the value was read from when the person did not give it (an adapter's
            ``adapter_config.json`` for its base): the message names it and says to pass ``flag`` instead.

    Returns:
        The expanded local path, or the Hub id unchanged.

    Raises:
        PathArgumentError: (a ``ConfigError`` and a ``FileNotFoundError``) a local path that does not exist
            (``"--model_name: no such file or folder: /path"``), or a value that is neither a path nor a valid Hub id.
        HubUnreachableError: (a ``ConnectionError``) a Hub id the Hub does not answer for and the local cache lacks,
            within ``HUB_TIMEOUT_S``; the message names the id.
    """
    text = expand_path(value)
    where = f" (not given: the value recorded in {recorded_in})" if recorded_in else ""
    fix = f"; pass {flag} with where it is now" if recorded_in else ""
    if is_local_path(text):
        if not os.path.exists(text):
            raise PathArgumentError(f"{flag}{where}: no such file or folder: {text}{fix}")
        return text
    from huggingface_hub import constants
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError as err:
        raise PathArgumentError(
            f"{flag}{where}: no such file or folder, and not a Hub id: {text!r} ({err}){fix}"
        ) from None
    if hub_answers(text, repo_type) or in_hub_cache(text, repo_type):
        return text
    offline = constants.HF_HUB_OFFLINE or hub_offline()
    why = "HF_HUB_OFFLINE is set" if offline else f"the Hub ({constants.ENDPOINT}) does not answer"
    local = "a local folder or .gguf file" if repo_type == "model" else "a local .jsonl/.json/.csv/.parquet file"
    also = f", or pass {flag} with a local copy" if recorded_in else ""
    raise HubUnreachableError(
        f"{flag}{where}: {text}: {why} and the {repo_type} is not in the local cache: pass {local}{also}"
    )


def require_folder(value: str | os.PathLike, flag: str, *, holding: str, what: str) -> str:
    """A folder argument that must exist locally (an adapter: never a Hub id), holding the file ``holding``.

    Returns:
        The expanded path.

    Raises:
        PathArgumentError: no such file or folder (``"--adapter: no such file or folder: PATH"``), or it holds no
            ``holding`` (``"--adapter: PATH has no adapter_config.json: not a saved adapter"``).
    """
    text = expand_path(value)
    if not os.path.exists(text):
        raise PathArgumentError(f"{flag}: no such file or folder: {text}")
    if not os.path.isfile(os.path.join(text, holding)):
        raise PathArgumentError(f"{flag}: {text} has no {holding}: not {what}")
    return text
