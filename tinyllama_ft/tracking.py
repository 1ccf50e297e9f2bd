"""Weights & Biases logging as in the article (cell 5), without ever hanging on a login prompt.

The article calls ``wandb.login()`` (which prompts for a key), sets ``WANDB_WATCH=all`` and
``WANDB_SILENT=true``, then ``wandb.init(project="tiny-llama", name="tiny-llama-unsloth-sft")``; the
trainer logs every step and ``wandb.finish()`` closes the run. Here the key comes from the environment
(``WANDB_API_KEY``) or Colab's secrets, never from a parameter; with no key and no terminal to type one
into (papermill, CI, a scheduled job) the run logs offline and says where, in one line.

With a key but no way to reach the W&B server, ``wandb.init`` would wait out its 90-second
``init_timeout``: ``start_tracking`` first asks the server for any HTTP answer within a few seconds
(``probe_server``) and bounds the online ``wandb.init`` itself (``init_timeout``); either failing, the run
logs offline and says why, in one line. ``read_offline_metrics`` reads the logged history back from an
offline run's ``.wandb`` file.

Secrets (the W&B key, the Hub token ``HF_TOKEN``) come from the environment or Colab's secrets and go
to the environment only: never a parameter (``refuse_secret_names``), never printed.
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from typing import Callable, Mapping

#: Secrets this package reads: from the environment, else the Colab secret of the same name.
SECRET_ENV_VARS = ("WANDB_API_KEY", "HF_TOKEN")
#: Names that hold a secret (case-insensitive): ``token``, ``hf_token``, ``hub_token``, ``wandb_api_key``,
#: ``api_key``, ``*_secret``, ``password``...; tokenizer names such as ``eos_token`` are not secrets.
SECRET_NAME = re.compile(
    r"^(?:\w+_)?(?:hf|hub|huggingface|hugging_face_hub|wandb|access|auth|api|bearer|refresh)_?token$|^token$"
    r"|(?:^|_)(?:api_?key|secret|secret_key|password|passwd|credentials?)$|^wandb_?key$",
    re.IGNORECASE,
)
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


def find_secret(name: str, env=None, secret: Callable[[str], str | None] = colab_secret) -> tuple[str | None, str | None]:
    """A secret from the environment variable ``name``, else from the Colab secret ``name``.

    Args:
        name: the variable and secret name, e.g. ``"WANDB_API_KEY"`` or ``"HF_TOKEN"``.
        env: the environment mapping; default ``os.environ``.
        secret: reads a Colab secret by name (``colab_secret``; injectable for tests).

    Returns:
        ``(value, source)``: source ``"environment"`` or ``"colab-secrets"``; ``(None, None)`` when unset.
    """
    env = os.environ if env is None else env
    if env.get(name):
        return env[name], "environment"
    value = secret(name)
    if value:
        return value, "colab-secrets"
    return None, None


def find_api_key(env=None, secret: Callable[[str], str | None] = colab_secret) -> tuple[str | None, str | None]:
    """``(key, source)`` for W&B: ``find_secret("WANDB_API_KEY", env, secret)``."""
    return find_secret("WANDB_API_KEY", env, secret)


def export_secrets(names=SECRET_ENV_VARS, env=None, secret: Callable[[str], str | None] = colab_secret) -> dict[str, str | None]:
    """Copy secrets found only in Colab's secrets into the environment, where W&B and the Hub read them.

    ``huggingface_hub`` reads ``HF_TOKEN`` and W&B reads ``WANDB_API_KEY`` from the environment by
    themselves. Values are never printed or returned.

    Args:
        names: the secret names (default ``SECRET_ENV_VARS``: ``WANDB_API_KEY``, ``HF_TOKEN``).
        env: the environment mapping to read and fill; default ``os.environ``.
        secret: reads a Colab secret by name.

    Returns:
        ``{name: source}``, source ``"environment"``, ``"colab-secrets"`` or None (not set anywhere).
    """
    env = os.environ if env is None else env
    sources = {}
    for name in names:
        value, sources[name] = find_secret(name, env, secret)
        if sources[name] == "colab-secrets":
            env[name] = value
    return sources


def refuse_secret_names(values: Mapping, where: str = "parameters") -> None:
    """Refuse a mapping (parameters, a notebook's globals) holding a secret-looking name.

    A parameter is written into the executed notebook and the run's records; a secret must not be.

    Args:
        values: the mapping whose keys are checked (``SECRET_NAME``); its values are never read.
        where: what the mapping is, for the message.

    Raises:
        ValueError: a key looks like a secret; the message names the key and where to put the secret
            instead, never the value.
    """
    found = sorted(k for k in values if isinstance(k, str) and SECRET_NAME.search(k))
    if found:
        variable = "WANDB_API_KEY" if "wandb" in found[0].lower() else "HF_TOKEN" if "token" in found[0].lower() \
            else "an environment variable"
        raise ValueError(
            f"{where}: {found[0]!r} looks like a secret, and secrets are never parameters (they would be saved "
            f"in the notebook and the run's records); set {variable} in the environment or as a Colab secret "
            f"instead and remove {found[0]!r} (value not shown)"
        )


def wandb_base_url(env=None) -> str:
    """The W&B server to talk to: ``WANDB_BASE_URL``, else wandb's own setting (``wandb login --host``
    or the installed wandb's default server)."""
    env = os.environ if env is None else env
    url = env.get("WANDB_BASE_URL")
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
            result["why"] = str(getattr(e, "reason", e)) or type(e).__name__

    worker = threading.Thread(target=ask, daemon=True, name="wandb-probe")
    worker.start()
    worker.join(timeout)
    if worker.is_alive() or "why" not in result:
        return f"no answer within {timeout:g} s"
    return result["why"]


def start_tracking(
    report_to: str = "wandb",
    project: str = "tiny-llama",
    run_name: str = "tiny-llama-unsloth-sft",
    output_dir: str = "outputs",
    config: dict | None = None,
    prompt_allowed: bool | None = None,
    probe_timeout: float = PROBE_TIMEOUT_S,
    init_timeout: float = INIT_TIMEOUT_S,
) -> Tracking:
    """Set up W&B for the trainer (or nothing, with ``report_to="none"``) and start the run.

    Online needs a key (environment, Colab secret, or a prompt when a person can answer) and a server
    that answers within ``probe_timeout`` and starts the run within ``init_timeout``; otherwise the run
    logs offline under ``<output_dir>/wandb`` and one printed line says why and where.

    Args:
        report_to: ``"wandb"`` or ``"none"``.
        project, run_name: the W&B project and run name (the article's ``"tiny-llama"``,
            ``"tiny-llama-unsloth-sft"``).
        output_dir: the run's folder; W&B writes under ``<output_dir>/wandb``.
        config: the run configuration to record (no secrets: keys are never parameters).
        prompt_allowed: whether a missing key may be asked for; default ``can_prompt()``.
        probe_timeout: seconds the W&B server (``WANDB_BASE_URL``) gets to answer before going offline.
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
        unreachable = probe_server(url, probe_timeout)
        if unreachable:
            mode, reason = "offline", f"W&B server {url} not reachable ({unreachable})"
        elif source == "prompt":
            wandb.login()  # the article's cell: asks for the key
    os.makedirs(output_dir, exist_ok=True)
    init = dict(project=project, name=run_name, dir=os.path.abspath(output_dir), config=config or {})
    try:
        run = wandb.init(mode=mode, settings=wandb.Settings(init_timeout=init_timeout, base_url=url), **init)
    except wandb.errors.Error as e:
        if mode != "online":
            raise
        detail = " ".join(str(e).replace(os.environ.get("WANDB_API_KEY") or "\0", "***").split())[:120]
        detail = "an HTML page, not the W&B API" if detail.startswith("<") else detail or "no message"
        mode, reason = "offline", f"online wandb.init to {url} failed ({type(e).__name__}: {detail})"
        run = wandb.init(mode="offline", **init)
    tracking = Tracking(report_to="wandb", mode=run.settings.mode, key_source=source, run_dir=run.dir,
                        offline_reason=reason if run.settings.mode == "offline" else None)
    if tracking.mode == "offline":
        folder = os.path.dirname(run.dir)
        print(f"W&B: logging offline to {folder}: {reason or 'offline mode'}; upload later with `wandb sync {folder}`")
    return tracking


def finish_tracking(tracking: Tracking) -> None:
    """Close the W&B run (the article's ``wandb.finish()``); nothing without W&B."""
    if tracking.report_to == "wandb":
        import wandb

        wandb.finish()


# W&B's run file (``run-<id>.wandb``): a 7-byte header (":W&B", magic 0xBEE1, version 0), then LevelDB
# log records (https://github.com/google/leveldb/blob/main/doc/log_format.md) in 32 KiB blocks, each
# record a serialized ``wandb_internal_pb2.Record``. The installed wandb (0.31) ships no Python reader
# of this file (its reader lives in the Go ``wandb-core``), so this is the format's documented reader.
_LOG_HEADER = struct.Struct("<4sHB")
_CHUNK_HEADER = struct.Struct("<IHB")  # crc32 of (type byte + data), length, type
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: str) -> list:
    """Every complete record of a W&B run file, in order.

    Args:
        path: a ``run-<id>.wandb`` file.

    Returns:
        ``wandb_internal_pb2.Record`` objects; a record still being written at the end is left out.

    Raises:
        ValueError: ``path`` is not a W&B run file, or a record's checksum is wrong (offset named).
    """
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    ident, magic, _ = _LOG_HEADER.unpack_from(data) if len(data) >= _LOG_HEADER.size else (b"", 0, 0)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"path={path!r} is not a W&B run file (no ':W&B' header)")
    records, pending, pos = [], None, _LOG_HEADER.size
    while pos + _CHUNK_HEADER.size <= len(data):
        if _BLOCK - pos % _BLOCK < _CHUNK_HEADER.size:  # block trailer: zero padding
            pos += _BLOCK - pos % _BLOCK
            continue
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        chunk = data[pos + _CHUNK_HEADER.size: pos + _CHUNK_HEADER.size + length]
        if kind == 0 or len(chunk) < length:  # preallocated zeros, or a record still being written
            break
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            raise ValueError(f"path={path!r}: bad checksum in the record at byte {pos}")
        pos += _CHUNK_HEADER.size + length
        if kind in (_FULL, _FIRST):
            pending = chunk
        elif pending is not None:
            pending += chunk
        if kind in (_FULL, _LAST) and pending is not None:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = None
    return records


def read_offline_metrics(run_dir: str, wait_s: float = 10.0) -> list[dict]:
    """The history rows (what ``wandb.log`` and the trainer logged) of a W&B run, read from its run file.

    Args:
        run_dir: the run folder (``offline-run-*``), its ``files`` folder (``Tracking.run_dir``), or
            the ``run-<id>.wandb`` file itself.
        wait_s: W&B's service process may still be writing after ``wandb.finish()``: wait up to this
            long for the run's exit record before reading what is there.

    Returns:
        One dict per logged step, ``{"train/loss": 3.2, "_step": 0, ...}``, values decoded from JSON;
        a logged nested dict comes back flattened with dots (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``), as
        W&B's own history has it.

    Raises:
        FileNotFoundError: no ``run-*.wandb`` file in ``run_dir``.
        ValueError: as ``wandb_records``.
    """
    if os.path.isfile(run_dir):
        path = run_dir
    else:
        folder = os.path.dirname(run_dir) if os.path.basename(os.path.normpath(run_dir)) == "files" else run_dir
        found = sorted(glob.glob(os.path.join(folder, "run-*.wandb")))
        if not found:
            raise FileNotFoundError(f"run_dir={run_dir!r} holds no run-*.wandb file: not a W&B run folder")
        path = found[-1]
    deadline = time.monotonic() + wait_s
    records = wandb_records(path)
    while not any(r.WhichOneof("record_type") == "exit" for r in records) and time.monotonic() < deadline:
        time.sleep(0.1)
        records = wandb_records(path)
    return [
        {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
        for r in records if r.WhichOneof("record_type") == "history"
    ]
