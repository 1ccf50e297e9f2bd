"""Several processes, one run: what ``accelerate launch`` / ``torchrun`` tell each process, in one place.

``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` are read without starting anything (a plain process is world size 1,
main, device 0). Kept over accelerate's ``main_process_first``, which does not pass the main process's failure on
(tests/test_distributed.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import Iterator, Mapping


def world_size(env: Mapping[str, str] = os.environ) -> int:
    """Processes training together (``WORLD_SIZE``, set by ``accelerate launch`` / ``torchrun``); 1 when unset. Raises
    ValueError: ``WORLD_SIZE`` is set but not a positive integer."""
    value = env.get("WORLD_SIZE", "").strip() or "1"
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"WORLD_SIZE={value!r} in the environment is not a positive integer")
    return int(value)


def local_process_index(env: Mapping[str, str] = os.environ) -> int:
    """This process's index on its machine (``LOCAL_RANK``): the CUDA device it trains on; 0 when unset."""
    return int(env.get("LOCAL_RANK", "").strip() or 0)


def is_main_process(env: Mapping[str, str] = os.environ) -> bool:
    """True unless this is a non-main process of a multi-process launch: ``RANK``, else ``LOCAL_RANK``, else
    accelerate's ``PartialState`` when something set it up (never initialised here)."""
    for name in ("RANK", "LOCAL_RANK"):
        if env.get(name, "").strip():
            return int(env[name]) == 0
    if "accelerate" in sys.modules:
        from accelerate.state import PartialState

        if PartialState._shared_state:
            return PartialState().is_main_process
    return True


class MainProcessError(RuntimeError):
    """In a non-main process: the step the main process runs first failed there (its error is in the message)."""


@contextlib.contextmanager
def main_process_first(what: str) -> Iterator[bool]:
    """Run the block on the main process first, then on the others; yields ``is_main_process()`` (True without a
    launch). Under a launch it sets up accelerate's ``PartialState`` (gloo on a CPU, NCCL on GPUs, transformers'
    1800 s ``ddp_timeout``), which the Trainer reuses.

    Args:
        what: the step, for the others' error message (``"preparing output_dir"``).

    Raises:
        MainProcessError: in a non-main process, when the block raised on the main process (none waits forever).
    """
    if world_size() == 1:
        yield True
        return
    from accelerate.utils import broadcast_object_list

    state = _state()
    if not state.is_main_process:
        (failure,) = broadcast_object_list([None], from_process=0)  # waits for the main process's outcome
        if failure is not None:
            raise MainProcessError(f"{what} failed on the main process: {failure}")
        yield False
        return
    try:
        yield True
    except BaseException as e:
        broadcast_object_list([f"{type(e).__name__}: {e}"], from_process=0)
        raise
    broadcast_object_list([None], from_process=0)


def same_on_all_processes(value, *, what: str):
    """Check that every launched process computed the same ``value`` (a plan sized to each GPU's free memory could
    differ, and DDP would hang); returns it, at once without a launch.

    Args:
        value: picklable and comparable with ``==`` (the plan's batch split). what: what it is, for the message.

    Raises:
        ValueError: on every process, when the values differ; names each process's.
    """
    if world_size() == 1:
        return value
    from accelerate.utils import gather_object

    _state()
    values = gather_object([value])
    if any(v != values[0] for v in values):
        raise ValueError(
            f"{what} differs between the launched processes ("
            + ", ".join(f"process {i}: {v!r}" for i, v in enumerate(values))
            + ")"
        )
    return value


def _state():
    import datetime

    import torch
    from accelerate import PartialState

    # without cpu=True, a torchrun launch on a machine without CUDA is not seen as distributed (no barrier);
    # the timeout is transformers' ddp_timeout default (the Trainer reuses this process group)
    state = PartialState(cpu=not torch.cuda.is_available(), timeout=datetime.timedelta(seconds=1800))
    atexit.unregister(end_process_group)  # registered once, however often the state is asked for
    atexit.register(end_process_group)
    return state


def end_process_group() -> None:
    """Destroy the launch's process group, if one is up (at exit, once ``_state`` set one up): a process exiting
    with its gloo group up aborts (SIGABRT) and the launcher reports a failure; neither accelerate nor the Trainer
    destroys it."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
