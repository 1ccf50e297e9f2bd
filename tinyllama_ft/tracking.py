"""Weights & Biases logging as in the article (cell 5), without ever hanging on a login prompt.

The article calls ``wandb.login()`` (which prompts for a key), sets ``WANDB_WATCH=all`` and
``WANDB_SILENT=true``, then ``wandb.init(project="tiny-llama", name="tiny-llama-unsloth-sft")``; the
trainer logs every step and ``wandb.finish()`` closes the run. Here the key comes from the environment
(``WANDB_API_KEY``) or Colab's secrets, never from a parameter; with no key and no terminal to type one
into (papermill, CI, a scheduled job) the run logs offline and says where, in one line.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable


@dataclass
class Tracking:
    """How this run logs.

    Attributes:
        report_to: ``"wandb"`` or ``"none"``.
        mode: W&B mode (``"online"``, ``"offline"``) or ``None`` without W&B.
        key_source: where the key came from: ``"environment"``, ``"colab-secrets"``, ``"prompt"``, or None.
        run_dir: the W&B run folder (offline runs sync from there), once started.
    """

    report_to: str
    mode: str | None = None
    key_source: str | None = None
    run_dir: str | None = None


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


def can_prompt() -> bool:
    """True when a person can answer a prompt: stdin is a terminal, or a notebook front end that
    allows input (Colab, Jupyter), but not papermill (its kernels run with stdin disabled)."""
    if sys.stdin is not None and sys.stdin.isatty():
        return True
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    return bool(kernel is not None and getattr(kernel, "_allow_stdin", False))


def find_api_key(env=None, secret: Callable[[str], str | None] = colab_secret) -> tuple[str | None, str | None]:
    """``(key, source)`` for W&B: ``WANDB_API_KEY`` from the environment, else from Colab secrets."""
    env = os.environ if env is None else env
    if env.get("WANDB_API_KEY"):
        return env["WANDB_API_KEY"], "environment"
    key = secret("WANDB_API_KEY")
    if key:
        return key, "colab-secrets"
    return None, None


def start_tracking(
    report_to: str = "wandb",
    project: str = "tiny-llama",
    run_name: str = "tiny-llama-unsloth-sft",
    output_dir: str = "outputs",
    config: dict | None = None,
    prompt_allowed: bool | None = None,
) -> Tracking:
    """Set up W&B for the trainer (or nothing, with ``report_to="none"``) and start the run.

    Args:
        report_to: ``"wandb"`` or ``"none"``.
        project, run_name: the W&B project and run name (the article's ``"tiny-llama"``,
            ``"tiny-llama-unsloth-sft"``).
        output_dir: the run's folder; W&B writes under ``<output_dir>/wandb``.
        config: the run configuration to record (no secrets: keys are never parameters).
        prompt_allowed: whether a missing key may be asked for; default ``can_prompt()``.

    Returns:
        A ``Tracking`` saying how the run logs.

    Raises:
        ImportError: ``report_to="wandb"`` but wandb is not installed (the message says what to do).
    """
    if report_to == "none":
        return Tracking(report_to="none")
    try:
        import wandb
    except ImportError as e:
        raise ImportError("report_to='wandb' needs wandb: pip install wandb, or set report_to='none'") from e
    os.environ.setdefault("WANDB_WATCH", "all")  # the article's: log gradients and parameters
    os.environ.setdefault("WANDB_SILENT", "true")
    key, source = find_api_key()
    if key and source == "colab-secrets":
        os.environ["WANDB_API_KEY"] = key  # W&B's own variable; never written to a file by us
    mode = os.environ.get("WANDB_MODE")
    if not key and mode != "offline":
        if prompt_allowed if prompt_allowed is not None else can_prompt():
            wandb.login()  # the article's cell: asks for the key
            source = "prompt"
        else:
            mode = "offline"
    os.makedirs(output_dir, exist_ok=True)
    run = wandb.init(project=project, name=run_name, dir=os.path.abspath(output_dir), config=config or {},
                     mode=mode or "online")
    tracking = Tracking(report_to="wandb", mode=run.settings.mode, key_source=source, run_dir=run.dir)
    if tracking.mode == "offline":
        folder = os.path.dirname(run.dir)
        print(f"W&B: no API key (WANDB_API_KEY or Colab secret) and no prompt possible: logging offline to "
              f"{folder}; upload later with `wandb sync {folder}`")
    return tracking


def finish_tracking(tracking: Tracking) -> None:
    """Close the W&B run (the article's ``wandb.finish()``); nothing without W&B."""
    if tracking.report_to == "wandb":
        import wandb

        wandb.finish()
