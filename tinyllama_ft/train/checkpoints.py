"""Checkpoint folders in ``output_dir``: which exist, which are complete and readable, which to resume from.

transformers' ``get_last_checkpoint`` returns the newest folder whatever its state, so ``last_checkpoint`` walks
back past any whose files a resume would fail on: ``trainer_state.json`` missing or cut short, JSON that does not
parse, safetensors that ``safe_open`` refuses, ``torch.save`` archives failing their CRC-32 (``torch.load`` reads
garbled bytes silently; tests/test_checkpoints.py). ``check_continuation`` decides what a resume may train.
"""

from __future__ import annotations

import json
import os
import re
import zipfile

from ..config.coercion import ConfigError
from ..machine.paths import expand_path

#: Files in a checkpoint that a resume reads as ``torch.save`` zip archives.
_TORCH_FILE = re.compile(
    r"^(optimizer\.pt|optimizer\.bin|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth|.*-optimizer\.pt)$"
)
#: JSON files a resume reads.
_JSON_FILES = ("trainer_state.json", "adapter_config.json", "config.json", "model.safetensors.index.json")


class DamagedCheckpointError(RuntimeError):
    """``resume=True`` and no checkpoint in ``output_dir`` is complete and readable."""


class RunFinished(Exception):
    """``resume=True`` and the newest checkpoint already holds every planned step: nothing to train, nothing written.

    Not an error: the command line prints the message and exits 0. Attributes: ``global_step`` (the checkpoint's),
    ``max_steps`` (the planned total), ``checkpoint`` (its folder).
    """

    def __init__(self, global_step: int, max_steps: int, checkpoint: str):
        self.global_step, self.max_steps, self.checkpoint = global_step, max_steps, checkpoint
        super().__init__(f"run already finished at step {global_step} (max_steps {max_steps}): nothing to train")


def checkpoint_state(checkpoint: str):
    """``checkpoint``'s ``trainer_state.json`` as transformers reads it on a resume (``TrainerState.load_from_json``):
    ``global_step``, ``max_steps`` (the total the run that wrote it planned, its epochs counted out when it ran by
    epochs), ``num_train_epochs``, ``num_input_tokens_seen``, ...."""
    from transformers import TrainerState

    return TrainerState.load_from_json(os.path.join(checkpoint, "trainer_state.json"))


def check_continuation(global_step: int, max_steps: int, checkpoint: str) -> None:
    """What a resume from ``checkpoint`` (its folder, for messages) at ``global_step`` (``checkpoint_state``) may
    train towards ``max_steps`` (the planned total, or the steps its epochs make), checked before anything loads:
    transformers would train one step more past either.

    Raises:
        RunFinished: ``max_steps == global_step``: nothing to train (the command line exits 0).
        ConfigError: ``max_steps < global_step``: names both numbers (the command line exits 2).
    """
    if max_steps == global_step:
        raise RunFinished(global_step, max_steps, checkpoint)
    if max_steps < global_step:
        raise ConfigError(
            f"resume=True: max_steps={max_steps} is below the step the run already reached, {global_step} "
            f"({checkpoint}): pass max_steps={global_step} or more to continue it (max_steps={global_step}: nothing "
            f"to train), or overwrite_output_dir=True to start over"
        )


def checkpoint_dirs(output_dir: str) -> list[str]:
    """Every ``checkpoint-N`` folder in ``output_dir`` (need not exist), complete or not, oldest step first
    (transformers' ``sort_checkpoints``, which its checkpoint rotation uses); ``[]`` when there is none. Only the
    names its resume reads (``checkpoint-<digits>``, as its ``get_last_checkpoint``): ``sort_checkpoints`` also takes
    ``checkpoint-10-old`` as step 10."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, sort_checkpoints

    output_dir = expand_path(output_dir)
    found = sort_checkpoints(output_dir) if os.path.isdir(output_dir) else []
    return [path for path in found if re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-\d+", os.path.basename(path))]


def _json_problem(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except UnicodeDecodeError as e:
        return f"is not UTF-8 text ({e.reason} at byte {e.start})"
    except ValueError as e:
        return f"is not valid JSON ({e}): cut short or garbled"
    if os.path.basename(path) == "trainer_state.json" and not (isinstance(value, dict) and "global_step" in value):
        return "has no global_step"
    return None


def _safetensors_problem(path: str) -> str | None:
    from safetensors import safe_open

    try:  # checks the header and that the tensors' byte ranges fill the file exactly; data bytes have no checksum
        with safe_open(path, framework="pt"):
            pass
    except Exception as e:  # noqa: BLE001 - the library's error for each kind of damage
        return f"cannot be read by safetensors ({type(e).__name__}: {e}): cut short or garbled"
    return None


def _torch_file_problem(path: str) -> str | None:
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except zipfile.BadZipFile as e:
        return f"is not a complete torch.save archive ({e}): cut short or garbled"
    except (OSError, EOFError, RuntimeError, ValueError) as e:  # a garbled local header or size
        return f"cannot be read as a torch.save archive ({type(e).__name__}: {e}): garbled"
    if bad is not None:
        return f"fails its CRC-32 check in record {bad!r}: garbled"
    return None


def checkpoint_problem(checkpoint: str) -> tuple[str, str] | None:
    """``(path, why)`` of the first damaged file a resume from the ``checkpoint-N`` folder ``checkpoint`` would read
    (``(".../optimizer.pt", "fails its CRC-32 check ...")``), or None when all are sound. A folder without
    ``trainer_state.json`` (transformers writes it last) is an interrupted save."""
    state = os.path.join(checkpoint, "trainer_state.json")
    if not os.path.isfile(state):
        return state, "is missing: the save was interrupted"
    for name in sorted(os.listdir(checkpoint)):
        path = os.path.join(checkpoint, name)
        if not os.path.isfile(path):
            continue
        if name in _JSON_FILES:
            why = _json_problem(path)
        elif name.endswith(".safetensors"):
            why = _safetensors_problem(path)
        elif _TORCH_FILE.match(name):
            why = _torch_file_problem(path)
        else:
            continue
        if why:
            return path, why
    return None


def last_checkpoint(output_dir: str, *, required: bool = False) -> str | None:
    """The newest ``checkpoint-N`` folder in ``output_dir`` whose files are all sound (``checkpoint_problem``; each one
    skipped is named with its file and why), or None: no checkpoint at all, or none sound and not ``required``. Raises
    DamagedCheckpointError: ``required`` and every checkpoint is damaged; names each one's bad file."""
    skipped = []
    for path in reversed(checkpoint_dirs(output_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        print(f"resume: skipping {path}: {problem[0]} {problem[1]}")
        skipped.append(f"{problem[0]} {problem[1]}")
    if required and skipped:
        raise DamagedCheckpointError(
            f"resume: no checkpoint in output_dir={output_dir!r} can be resumed: "
            + "; ".join(skipped)
            + ". Start over with overwrite_output_dir=True (resume=False), or restore the files from a copy"
        )
    return None
