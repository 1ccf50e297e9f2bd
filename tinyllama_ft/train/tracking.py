"""Weights & Biases logging as in the article (cell 5), without ever hanging on a login prompt.

The key comes from ``WANDB_API_KEY`` or Colab's secrets, never a parameter; without one, or when the server does
not answer a short probe (``probe_server``), the run logs offline and says why in one line.
Kept: ``wandb.init`` alone waits 90 s for an unreachable server (tests/test_tracking.py).
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

from ..config.finetune import DEFAULTS
from ..config.secrets import export_secrets
from ..machine.kernel import can_prompt
from ..machine.paths import expand_path

#: Seconds the server gets to answer the reachability probe before the run goes offline.
PROBE_TIMEOUT_S = 3.0
#: Seconds an online ``wandb.init`` may take before the run goes offline (W&B's own default is 90).
INIT_TIMEOUT_S = 30.0


@dataclass
class Tracking:
    """How this run logs.

    Attributes:
        report_to: ``"wandb"`` or ``"none"``.
        mode: W&B mode (``"online"``, ``"offline"``) or ``None`` without W&B.
        key_source: where the key came from: ``"environment"``, ``"colab-secrets"``, ``"prompt"``, or None.
        run_dir: the W&B run folder (offline runs sync from there), once started.
        offline_reason: why the run logs offline (no key, server unreachable, online init failed), or None.
    """

    report_to: str
    mode: str | None = None
    key_source: str | None = None
    run_dir: str | None = None
    offline_reason: str | None = None


def wandb_base_url() -> str:
    """The W&B server to talk to: ``WANDB_BASE_URL``, else wandb's own setting (``wandb login --host``
    or the installed wandb's default server)."""
    url = os.environ.get("WANDB_BASE_URL")
    if not url:
        from wandb.sdk import wandb_setup

        url = wandb_setup.singleton().settings.base_url
    return str(url).rstrip("/")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a redirect is an answer: do not follow it
        return None


def probe_server(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Whether an HTTP server answers at ``url`` within ``timeout`` seconds, name lookup included.

    Any HTTP status counts as an answer (the server is there); a refused or timed-out connection, a
    failed name lookup or TLS handshake does not. Proxies from the environment are used as W&B uses them.

    Args:
        url: the server's base URL (``wandb_base_url()``).
        timeout: seconds for the whole probe.

    Returns:
        None when the server answered, else why not (one short phrase).
    """
    result: dict[str, str | None] = {}
    opener = urllib.request.build_opener(_NoRedirect)

    def ask() -> None:
        try:
            opener.open(url + "/healthz", timeout=timeout).close()
            result["why"] = None
        except urllib.error.HTTPError:
            result["why"] = None  # 3xx/4xx/5xx: a server answered
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            # the socket's own timeout and the join below race on a loaded machine: one message for both
            timed_out = isinstance(reason, TimeoutError)
            result["why"] = f"no answer within {timeout:g} s" if timed_out else str(reason) or type(e).__name__

    worker = threading.Thread(target=ask, daemon=True, name="wandb-probe")
    worker.start()
    worker.join(timeout)
    if worker.is_alive() or "why" not in result:
        return f"no answer within {timeout:g} s"
    return result["why"]


def start_tracking(
    *,
    report_to: str = DEFAULTS.report_to,
    wandb_project: str = DEFAULTS.wandb_project,
    wandb_run_name: str = DEFAULTS.wandb_run_name,
    output_dir: str = DEFAULTS.output_dir,
    config: dict | None = None,
    prompt_allowed: bool | None = None,
    init_timeout: float = INIT_TIMEOUT_S,
) -> Tracking:
    """Set up W&B for the trainer (or nothing, with ``report_to="none"``) and start the run.

    Online needs a key (environment, Colab secret, or a prompt when a person can answer) and a server
    that answers within ``PROBE_TIMEOUT_S`` and starts the run within ``init_timeout``; otherwise the run
    logs offline under ``<output_dir>/wandb``. One printed line says how the run logs: online, with the run's
    page; offline, why and where (nothing with ``report_to="none"``).

    Args:
        report_to: ``"wandb"`` or ``"none"``.
        wandb_project, wandb_run_name: the W&B project and run name (the article's ``"tiny-llama"``,
            ``"tiny-llama-unsloth-sft"``).
        output_dir: the run's folder; W&B writes under ``<output_dir>/wandb``.
        config: the run configuration to record (no secrets: keys are never parameters).
        prompt_allowed: whether a missing key may be asked for; default ``machine.kernel.can_prompt()``.
        init_timeout: seconds an online ``wandb.init`` may take before going offline (W&B's default: 90).

    Returns:
        A ``Tracking`` saying how the run logs.

    Raises:
        ImportError: ``report_to="wandb"`` but wandb is not installed (the message says what to do).
        wandb.errors.Error: an offline or disabled ``wandb.init`` failed (an online one falls back instead).
    """
    if report_to == "none":
        return Tracking(report_to="none")
    try:
        import wandb
    except ImportError as e:
        raise ImportError("report_to='wandb' needs wandb: pip install wandb, or set report_to='none'") from e
    os.environ.setdefault("WANDB_WATCH", "all")  # the article's: log gradients and parameters
    os.environ.setdefault("WANDB_SILENT", "true")
    source = export_secrets(("WANDB_API_KEY",))["WANDB_API_KEY"]  # W&B's own variable; never printed
    mode = os.environ.get("WANDB_MODE") or "online"
    reason = "WANDB_MODE=offline" if mode == "offline" else None
    if mode == "online" and not source:
        if prompt_allowed if prompt_allowed is not None else can_prompt():
            source = "prompt"
        else:
            mode, reason = "offline", "no API key (WANDB_API_KEY or Colab secret) and no prompt possible"
    url = wandb_base_url()
    if mode == "online":
        unreachable = probe_server(url)
        if unreachable:
            mode, reason = "offline", f"W&B server {url} not reachable ({unreachable})"
        elif source == "prompt":
            wandb.login()  # the article's cell: asks for the key
    output_dir = expand_path(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    init = dict(project=wandb_project, name=wandb_run_name, dir=os.path.abspath(output_dir), config=config or {})
    try:
        run = wandb.init(mode=mode, settings=wandb.Settings(init_timeout=init_timeout, base_url=url), **init)
    except wandb.errors.Error as e:
        if mode != "online":
            raise
        detail = " ".join(str(e).replace(os.environ.get("WANDB_API_KEY") or "\0", "***").split())[:120]
        detail = "an HTML page, not the W&B API" if detail.startswith("<") else detail or "no message"
        mode, reason = "offline", f"online wandb.init to {url} failed ({type(e).__name__}: {detail})"
        run = wandb.init(mode="offline", **init)
    tracking = Tracking(
        report_to="wandb",
        mode=run.settings.mode,
        key_source=source,
        run_dir=run.dir,
        offline_reason=reason if run.settings.mode == "offline" else None,
    )
    if tracking.mode == "offline":
        folder = os.path.dirname(run.dir)
        print(f"W&B: logging offline to {folder}: {reason or 'offline mode'}; upload later with `wandb sync {folder}`")
    elif tracking.mode == "online":
        print(f"W&B: logging online to {getattr(run, 'url', None) or url} (project {wandb_project!r})")
    else:  # WANDB_MODE=disabled
        print(f"W&B: mode {tracking.mode!r}: nothing is logged")
    return tracking


def finish_tracking(tracking: Tracking) -> None:
    """Close the W&B run (the article's ``wandb.finish()``); nothing without W&B."""
    if tracking.report_to == "wandb":
        import wandb

        wandb.finish()
