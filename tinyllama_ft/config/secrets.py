"""Secrets: the W&B key and the Hub token come from the environment or Colab's secrets, and go to the
environment only; never printed or written by this package, and never a parameter: ``check_keys``, the one check of
parameter names (recipes, notebook parameters, flags), refuses them first.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Iterable

from .coercion import ConfigError, did_you_mean

#: Secrets this package reads: from the environment, else the Colab secret of the same name.
SECRET_ENV_VARS = ("WANDB_API_KEY", "HF_TOKEN")
#: Names that hold a secret (case-insensitive): ``token``, ``hf_token``, ``hub_token``, ``wandb_api_key``,
#: ``api_key``, ``*_secret``, ``password``...; tokenizer names such as ``eos_token`` are not secrets.
SECRET_NAME = re.compile(
    r"^(?:\w+_)?(?:hf|hub|huggingface|hugging_face_hub|wandb|access|auth|api|bearer|refresh)_?token$|^token$"
    r"|(?:^|_)(?:api_?key|secret|secret_key|password|passwd|credentials?)$|^wandb_?key$",
    re.IGNORECASE,
)


def colab_secret(name: str) -> str | None:
    """A Colab secret's value, or None outside Colab, when it is not set or access is not granted."""
    try:
        from google.colab import userdata  # only inside Colab
    except ImportError:
        return None
    try:
        return userdata.get(name)
    except Exception:  # SecretNotFoundError, NotebookAccessError: both mean "no key here"
        return None


def find_secret(
    name: str, env=os.environ, secret: Callable[[str], str | None] = colab_secret
) -> tuple[str | None, str | None]:
    """``(value, source)`` of the secret ``name`` (``"WANDB_API_KEY"``, ``"HF_TOKEN"``): from ``env`` (default
    ``os.environ``, source ``"environment"``), else from the Colab secret read by ``secret`` (default
    ``colab_secret``, source ``"colab-secrets"``); ``(None, None)`` when unset."""
    if env.get(name):
        return env[name], "environment"
    value = secret(name)
    if value:
        return value, "colab-secrets"
    return None, None


class SecretSources(dict):
    """``{name: source}`` of the secrets (``export_secrets``' result); printed, one line without the values:
    ``WANDB_API_KEY from the environment, HF_TOKEN not set``."""

    def __str__(self) -> str:
        where = {"environment": "from the environment", "colab-secrets": "from Colab's secrets", None: "not set"}
        return ", ".join(f"{name} {where.get(source, source)}" for name, source in self.items())


def export_secrets(
    names=SECRET_ENV_VARS, env=os.environ, secret: Callable[[str], str | None] = colab_secret
) -> SecretSources:
    """Copy secrets found only in Colab's secrets into ``env`` (default ``os.environ``), where W&B and
    ``huggingface_hub`` read them; values are never printed or returned.

    Args:
        names: the secret names (default ``SECRET_ENV_VARS``: ``WANDB_API_KEY``, ``HF_TOKEN``).
        env, secret: as ``find_secret``.

    Returns:
        ``SecretSources``: ``{name: source}``, source ``"environment"``, ``"colab-secrets"`` or None (not set
        anywhere); printed, one line naming each source.
    """
    sources = SecretSources()
    for name in names:
        value, sources[name] = find_secret(name, env, secret)
        if sources[name] == "colab-secrets":
            env[name] = value
    return sources


def check_keys(keys: Iterable[str], known: Iterable[str], where: str, help_command: str = "tinyllama-ft train") -> None:
    """The one check of parameter names (a recipe's keys, the notebook's parameters, a command's flags).

    A secret-looking key (``SECRET_NAME``) is refused first: a parameter is written into the executed notebook and the
    run's records, and a secret must not be.

    Args:
        keys: the names checked; their values are never read.
        known: the names allowed.
        where: what the names are (a recipe's path, "notebook parameters"), for the message.
        help_command: the command whose ``--help`` lists the names allowed.

    Raises:
        ConfigError: a key looks like a secret (the message names the key and where to put the secret instead, never
            the value), or keys are not among ``known`` (each named with its near miss).
    """
    keys, known = list(keys), list(known)
    found = sorted(k for k in keys if isinstance(k, str) and SECRET_NAME.search(k))
    if found:
        named = [env for word, env in (("wandb", "WANDB_API_KEY"), ("token", "HF_TOKEN")) if word in found[0].lower()]
        variable = (named or ["an environment variable"])[0]
        raise ConfigError(
            f"{where}: {found[0]!r} looks like a secret, and secrets are never parameters (they would be saved "
            f"in the notebook and the run's records); set {variable} in the environment or as a Colab secret "
            f"instead and remove {found[0]!r} (value not shown)"
        )
    names = "; ".join(f"{k!r}{did_you_mean(k, known)}" for k in keys if k not in known)
    what = "not a FinetuneConfig field" if help_command == "tinyllama-ft train" else "not a flag of this command"
    if names:
        raise ConfigError(f"{where}: unknown parameter {names}: {what} ({help_command} --help lists them all)")
