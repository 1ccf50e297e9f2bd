"""GPU-aware install of the Unsloth stack (the article's cell 1, for today's releases).

Unsloth's ``colab`` extras pin old torch builds that would replace Colab's, so, as Unsloth's own notebooks do,
the stack is installed with ``pip install --no-deps`` on top of Colab's torch, pinned to a set seen working on
the GPU machine (``requirements-colab.txt``). Nothing here imports torch.
"""

from __future__ import annotations

import importlib.metadata
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from packaging.utils import canonicalize_name as normalize_name  # how pip keys distributions (re-exported)

from .hardware import Hardware, detect_hardware

#: The Unsloth stack for Colab and the GPU machine: unsloth with a transformers/trl/datasets set it
#: accepts (unsloth 2026.10.9 requires transformers<=5.17.0, trl<=1.15.0, datasets<5), installed with
#: ``--no-deps`` so the machine's torch stays. Keep in step with requirements-colab.txt (a test checks).
COLAB_PINS: tuple[str, ...] = (
    "unsloth==2026.10.9",
    "unsloth_zoo==2026.10.9",
    "transformers==5.17.0",
    "trl==1.15.0",
    "datasets==4.8.5",
    "bitsandbytes==0.50.2",
    "torchao==0.18.0",
    "cut_cross_entropy==25.1.1",
    "dill==0.4.0",
    "multiprocess==0.70.18",
    "tyro==1.0.17",
    "docstring_parser==0.18.0",
    "typeguard==4.6.1",
    "shtab==1.13.0",
    "msgspec==0.23.0",
    "hf_transfer==0.1.9",
    "liger-kernel==0.8.5",  # the fast recipe's fused kernels on bf16 GPUs (pure Python + Triton)
)

#: Unsloth's kernels need CUDA compute capability 7.0 (Volta) or newer.
MIN_UNSLOTH_CAPABILITY = (7, 0)


@dataclass
class InstallPlan:
    """What ``install`` will run, and why.

    Attributes:
        commands: argv lists, each one ``pip`` call, in order.
        notes: one line per decision (what was skipped and why), printed by ``install``.
    """

    commands: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def shell(self) -> list[str]:
        """The commands as shell lines, e.g. for a ``!`` cell or a log."""
        return [shlex.join(c) for c in self.commands]


def installed_versions(names: Sequence[str]) -> dict[str, str]:
    """Installed distribution versions for ``names`` by ``normalize_name`` (missing ones left out)."""
    found = {}
    for name in names:
        try:
            found[normalize_name(name)] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def plan_install(
    hardware: Hardware,
    installed: Mapping[str, str],
    with_wandb: bool = True,
    find_links: str | None = None,
    python: str = sys.executable,
) -> InstallPlan:
    """Decide the pip commands for this machine.

    Args:
        hardware: the machine's facts. installed: ``installed_versions``' result.
        with_wandb: also install ``wandb`` when it is missing (the article logs to W&B).
        find_links: a local folder of wheels: adds ``--no-index --find-links`` (offline machines).
        python: the interpreter whose pip runs.

    Returns:
        An ``InstallPlan``, empty when everything is in place. Without CUDA, or below capability 7.0, no Unsloth
        stack is planned (the transformers backend runs) and a note says so.
    """
    plan = InstallPlan()
    pip = [python, "-m", "pip", "install", "-q"]
    if find_links:
        pip += ["--no-index", "--find-links", find_links]
    if not hardware.cuda:
        plan.notes.append("no CUDA GPU: Unsloth is not installed; the transformers backend runs on the CPU")
    elif hardware.capability is not None and hardware.capability < MIN_UNSLOTH_CAPABILITY:
        plan.notes.append(
            f"GPU capability {hardware.capability} is below Unsloth's {MIN_UNSLOTH_CAPABILITY}: "
            "the transformers backend runs instead"
        )
    else:
        missing = [p for p in COLAB_PINS if installed.get(normalize_name(p.partition("==")[0])) != p.partition("==")[2]]
        if missing:
            plan.commands.append(pip + ["--no-deps", *missing])
            plan.notes.append(
                f"GPU capability {hardware.capability}: installing the pinned Unsloth stack "
                f"({len(missing)} of {len(COLAB_PINS)} packages missing or at another version)"
            )
        else:
            plan.notes.append("the pinned Unsloth stack is already installed")
    if with_wandb and "wandb" not in installed:
        plan.commands.append(pip + ["wandb"])
    return plan


_DONE: dict[tuple, InstallPlan] = {}


def install(
    run: bool | None = None,
    with_wandb: bool = True,
    find_links: str | None = None,
    hardware: Hardware | None = None,
    runner: Callable[[list[str]], None] | None = None,
) -> InstallPlan:
    """Plan and (by default on Colab only) run the GPU-aware install.

    Args:
        run: None runs the commands on Colab and only prints them elsewhere; True / False forces either.
        with_wandb, find_links: as ``plan_install``.
        hardware: injected machine facts; default ``detect_hardware()``.
        runner: runs one argv list; default ``subprocess.run(..., check=True)``.

    Returns:
        The plan that was run (or would be); a second call with the same arguments returns it at once.

    Raises:
        subprocess.CalledProcessError: a pip command failed (its output is above the error).
    """
    hardware = hardware or detect_hardware()
    key = (run, with_wandb, find_links, hardware)
    if key in _DONE:
        print("install: already done in this process")
        return _DONE[key]
    names = [p.partition("==")[0] for p in COLAB_PINS] + ["wandb"]
    plan = plan_install(hardware, installed_versions(names), with_wandb=with_wandb, find_links=find_links)
    for note in plan.notes:
        print(f"install: {note}")
    do_run = hardware.colab if run is None else run
    if not plan.commands:
        print("install: nothing to do")
    elif not do_run:
        print("install: not on Colab, so not running (pass run=True to run):")
        for line in plan.shell():
            print(f"  {line}")
    else:
        already = [m for m in ("transformers", "trl", "datasets", "unsloth") if m in sys.modules]
        if already:
            print(f"install: {already} already imported here: restart the runtime after this cell")
        runner = runner or (lambda argv: subprocess.run(argv, check=True))
        for argv in plan.commands:
            print(f"install: {shlex.join(argv)}")
            runner(argv)
    _DONE[key] = plan
    return plan
