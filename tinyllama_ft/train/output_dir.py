"""The output folder before a run trains: Google Drive on Colab, and never overwriting a run silently.

``ensure_drive`` mounts Drive when asked or when ``output_dir`` lies under ``/content/drive`` (a disconnect wipes
the local disk). ``prepare_output_dir`` takes the folder's run lock, records the run's identity and refuses to
mix runs: an earlier run's files need ``resume`` or ``overwrite_output_dir`` (which deletes exactly
``DELETED_BY_OVERWRITE`` and offline W&B runs), and a resume with another identity names the differing fields.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any, Callable

from ..config.finetune import FinetuneConfig, identity_fields
from ..machine.hardware import in_colab
from ..machine.lock import acquire_run_lock
from ..machine.paths import expand_path, write_json_atomically
from ..models.run_record import RUN_CONFIG, read_run_config
from .checkpoints import check_continuation, checkpoint_dirs, checkpoint_state, last_checkpoint

#: Where Colab mounts Google Drive (``google.colab.drive.mount``'s usual argument).
DRIVE_MOUNT_POINT = "/content/drive"
#: What the notebook writes in ``output_dir`` at the end of a run (``export``: the ``export_formats`` folder).
RUN_OUTPUTS = ("run_summary.json", "loss_curve.png", "export")


def _under(path: str, folder: str) -> bool:
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return os.path.commonpath([path, folder]) == folder


def ensure_drive(
    output_dir: str,
    *,
    mount_drive: bool = False,
    colab: bool | None = None,
    mount: Callable[[str], Any] | None = None,
    mount_point: str = DRIVE_MOUNT_POINT,
) -> bool:
    """Mount Google Drive when the run asks for it or writes to it.

    Args:
        output_dir: the run's output folder; one under ``mount_point`` needs Drive mounted.
        mount_drive: mount Drive even when ``output_dir`` is not on it (e.g. the dataset is there).
        colab: running in Colab; default ``hardware.in_colab()``.
        mount: the mount function; default ``google.colab.drive.mount``.
        mount_point: where Drive is (to be) mounted; mounted means ``<mount_point>/MyDrive`` exists.

    Returns:
        True when Drive is mounted at ``mount_point`` (already, or by this call); False when nothing
        needed mounting, or outside Colab with ``mount_drive=True`` (a one-line notice is printed).

    Raises:
        RuntimeError: ``output_dir`` is under ``mount_point``, nothing is mounted there and this is not
            Colab (the folder would be a plain local one).
    """
    output_dir = expand_path(output_dir)
    on_drive = _under(output_dir, mount_point)
    if not (mount_drive or on_drive):
        return False
    if os.path.isdir(os.path.join(mount_point, "MyDrive")):
        return True
    if not (in_colab() if colab is None else colab):
        if on_drive:
            raise RuntimeError(
                f"output_dir={output_dir!r} is on Google Drive's Colab mount point {mount_point}, but this is "
                f"not Colab and no Drive is mounted there: set output_dir to a folder on this machine"
            )
        print(
            f"mount_drive=True: not in Colab, no Drive to mount; output_dir={output_dir!r} stays on this machine's disk"
        )
        return False
    if mount is None:
        from google.colab import drive

        mount = drive.mount
    mount(mount_point)
    print(f"Google Drive mounted at {mount_point}")
    if not on_drive:
        print(
            f"output_dir={output_dir!r} is not on Drive: a disconnect loses its checkpoints "
            f"(e.g. output_dir={os.path.join(mount_point, 'MyDrive', os.path.basename(os.path.abspath(output_dir)))!r})"
        )
    return True


def run_identity(cfg: FinetuneConfig, *, data_fingerprint: str | None = None) -> dict[str, Any]:
    """What a resume must match: the fields marked ``identity=True``, JSON-ready; the effective batch instead of
    its micro-batch split (the fast recipe sizes that to the GPU; a run out of memory resumes with a smaller one).

    Args:
        cfg: the run's configuration.
        data_fingerprint: ``fingerprint.data_fingerprint`` of the training rows after filtering (a hash of
            their instruction/input/output, in order), recorded as ``"data_fingerprint"`` when given, so a
            resume on edited, replaced or reordered rows is refused (None: not recorded, so not compared).

    Returns:
        ``{field: value}`` for every identity field, plus ``"effective_batch_size"`` (and ``"data_fingerprint"``).
    """
    values = cfg.to_dict()
    identity = {name: values[name] for name in identity_fields()}
    identity["effective_batch_size"] = cfg.effective_batch_size
    if data_fingerprint is not None:
        identity["data_fingerprint"] = data_fingerprint
    return identity


def write_run_config(output_dir: str, identity: dict[str, Any]) -> str:
    """Write ``identity`` to ``<output_dir>/run_config.json`` atomically (a kill leaves the old file or the new).

    Returns:
        The file's path.
    """
    output_dir = expand_path(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    return write_json_atomically(os.path.join(output_dir, RUN_CONFIG), identity, sort_keys=True)


def identity_differences(recorded: dict[str, Any], identity: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields whose recorded value differs from the current one: ``{field: (recorded, now)}``.

    A field absent from either side (a record from an older or newer package) is not compared.
    """
    now = json.loads(json.dumps(identity))  # tuples -> lists, as recorded
    return {k: (recorded[k], now[k]) for k in sorted(recorded.keys() & now.keys()) if recorded[k] != now[k]}


#: What ``overwrite_output_dir=True`` deletes of an earlier run (the config field's docstring, docs/parameters.md, docs/troubleshooting.md and the
#: message it prints name the same).
DELETED_BY_OVERWRITE = (
    "checkpoint-* folders",
    "run_summary.json",
    "loss_curve.png",
    "export/ (every exported format)",
    "the adapter folder (adapter_dir, inside output_dir or not)",
    "offline W&B runs (wandb/offline-run-*)",
    "run_config.json",
)


def previous_run(cfg: FinetuneConfig) -> list[str]:
    """What belongs to an earlier run and would be lost or mixed by a new one.

    Returns:
        Paths of ``checkpoint-*`` folders (complete or not), run summary / loss curve, ``export/`` in
        ``cfg.output_dir``, and the adapter folder wherever ``adapter_dir`` puts it (a new run's save would
        replace it); ``[]`` for a new or empty folder.
    """
    found = checkpoint_dirs(cfg.output_dir)
    found += [p for p in (os.path.join(cfg.output_dir, n) for n in RUN_OUTPUTS) if os.path.exists(p)]
    adapter = cfg.resolved_adapter_dir
    if os.path.isfile(os.path.join(adapter, "adapter_config.json")):  # an empty folder made beforehand is new
        found.append(adapter)
    return found


def _shown(path: str, out: str) -> str:
    return os.path.relpath(path, out) if _under(path, out) else path


def check_folders(cfg: FinetuneConfig) -> None:
    """Refuse an ``output_dir`` or ``adapter_dir`` that is a file, and an ``adapter_dir`` holding files that are not
    an adapter (the adapter's save replaces the folder whole), before a lock or a model is touched.

    Raises:
        NotADirectoryError: a file stands there: names the field, the path and what to do.
        FileExistsError: ``adapter_dir`` holds files but no ``adapter_config.json``: names a few of them.
    """
    for name, path in (("output_dir", cfg.output_dir), ("adapter_dir", cfg.resolved_adapter_dir)):
        path = expand_path(path)
        if os.path.exists(path) and not os.path.isdir(path):
            raise NotADirectoryError(
                f"{name}={path!r} is a file, not a folder: choose another {name}, or move the file away"
            )
    adapter = expand_path(cfg.resolved_adapter_dir)
    if os.path.isdir(adapter) and not os.path.isfile(os.path.join(adapter, "adapter_config.json")):
        held = sorted(os.listdir(adapter))
        if held:
            raise FileExistsError(
                f"adapter_dir={adapter!r} holds files that are not an adapter ({', '.join(held[:3])}"
                f"{', ...' if len(held) > 3 else ''}): saving the adapter replaces the folder whole, so choose a new "
                f"or empty adapter_dir"
            )


def wandb_offline_runs(output_dir: str) -> list[str]:
    """W&B's offline run folders in ``<output_dir>/wandb`` (``offline-run-*``) and the links into them
    (``latest-run``, ``debug.log``): ``wandb sync`` would upload them, so an overwritten run's go with it. Online
    runs' folders (``run-*``) are on the server already and stay."""
    folder = os.path.join(output_dir, "wandb")
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if n.startswith("offline-run-"))
    links = [
        n
        for n in os.listdir(folder)
        if os.path.islink(os.path.join(folder, n))
        and os.path.relpath(os.path.join(folder, os.readlink(os.path.join(folder, n))), folder).split(os.sep)[0]
        in names
    ]
    return [os.path.join(folder, n) for n in names + sorted(links)]


def prepare_output_dir(cfg: FinetuneConfig, *, data_fingerprint: str | None = None) -> str:
    """Check ``cfg.output_dir`` against the run about to start, clear it if asked, record the run.

    Call it before training, once the rows are loaded. It first takes the folder's run lock (``lock.acquire_run_lock``),
    released if this raises, else held until ``lock.release_run_lock(cfg.output_dir)`` or the process's exit.

    Args:
        cfg: the run's configuration; reads ``output_dir``, ``resume``, ``overwrite_output_dir``,
            ``adapter_dir`` and the identity fields (``run_identity``).
        data_fingerprint: ``fingerprint.data_fingerprint`` of the training rows: recorded, and on resume
            compared with the recorded one (a run recorded without it is not compared).

    Returns:
        ``"new"`` (nothing of an earlier run there), ``"overwrite"`` (an earlier run was deleted) or
        ``"resume"`` (its checkpoints match this configuration). ``run_config.json`` is written whenever it returns.

    Raises:
        ValueError: ``resume=True`` and the recorded configuration differs (the message names the fields:
            ``data_fingerprint`` when the training rows changed); ``resume`` and ``overwrite_output_dir`` both True
            (``FinetuneConfig`` refuses it as ``cfg`` is copied with its paths expanded).
        FileExistsError: ``output_dir`` holds an earlier run (or ``adapter_dir``, inside ``output_dir`` or not,
            holds an adapter) and neither ``resume`` nor ``overwrite_output_dir`` is True; or ``resume=True`` but it
            holds a finished run without a checkpoint to resume from.
        NotADirectoryError: ``output_dir`` or ``adapter_dir`` is a file (``check_folders``).
        lock.RunLockedError: another live run holds ``output_dir``'s lock (names its host and process).
        checkpoints.DamagedCheckpointError: ``resume=True`` and every checkpoint holds a truncated or
            garbled file (the message names each file and why).
        checkpoints.RunFinished: ``resume=True`` and the newest checkpoint already reached ``max_steps``: nothing
            was written, the lock is released (the command line prints the message and exits 0).
        config.coercion.ConfigError: ``resume=True`` and ``max_steps`` is below the checkpoint's step
            (``checkpoints.check_continuation``).
    """
    paths = {"output_dir": expand_path(cfg.output_dir), "adapter_dir": expand_path(cfg.adapter_dir)}
    cfg = dataclasses.replace(cfg, **paths)  # "~/runs/x" is no folder named "~" (FinetuneConfig expands it too)
    check_folders(cfg)
    lock = acquire_run_lock(cfg.output_dir)
    try:
        out = cfg.output_dir
        identity = run_identity(cfg, data_fingerprint=data_fingerprint)
        earlier = previous_run(cfg)
        if not earlier:
            write_run_config(out, identity)
            return "new"
        names = ", ".join(_shown(p, out) for p in earlier)
        if cfg.overwrite_output_dir:
            deleted = earlier + wandb_offline_runs(out)
            for path in deleted:  # an unsynced W&B run of the deleted run would upload later
                (shutil.rmtree if os.path.isdir(path) and not os.path.islink(path) else os.remove)(path)
            write_run_config(out, identity)  # the old record replaced last: a kill before keeps it with its checkpoints
            print(
                f"overwrite_output_dir=True: deleted the earlier run in {out!r}: "
                f"{', '.join(_shown(p, out) for p in deleted)} (it deletes {', '.join(DELETED_BY_OVERWRITE)})"
            )
            return "overwrite"
        if not cfg.resume:
            raise FileExistsError(
                f"output_dir={out!r} holds an earlier run ({names}): pass resume=True to continue it, "
                f"overwrite_output_dir=True to delete it and start over, or choose another output_dir"
            )
        checkpoint = last_checkpoint(out, required=True)
        if checkpoint is None:
            raise FileExistsError(
                f"resume=True but output_dir={out!r} has no complete checkpoint to resume from, only ({names}): "
                f"pass overwrite_output_dir=True to delete it and start over, or choose another output_dir"
            )
        recorded = read_run_config(out)
        if recorded is None:
            print(
                f"resume: {out!r} has no {RUN_CONFIG}; cannot check that its checkpoints come from this configuration"
            )
        else:
            diff = identity_differences(recorded, identity)
            if diff:
                lines = "; ".join(f"{k}: {old!r} then, {new!r} now" for k, (old, new) in diff.items())
                if "data_fingerprint" in diff:
                    lines += " (the training rows changed since: the dataset's file was edited or replaced)"
                raise ValueError(
                    f"resume=True but the checkpoints in output_dir={out!r} were trained with different "
                    f"{', '.join(diff)} ({lines}): set them back to resume, or pass overwrite_output_dir=True "
                    f"(resume=False) to start over, or choose another output_dir"
                )
        done = checkpoint_state(checkpoint)
        planned = (  # by epochs: the checkpoint's own count of them, unless num_train_epochs changed (the loop checks)
            cfg.max_steps
            if cfg.max_steps > 0
            else done.max_steps
            if done.num_train_epochs == cfg.num_train_epochs
            else None
        )
        if planned is not None:
            check_continuation(done.global_step, planned, checkpoint)  # before anything is written
        write_run_config(out, identity)
        return "resume"
    except BaseException:
        if lock is not None:
            lock.release()
        raise
