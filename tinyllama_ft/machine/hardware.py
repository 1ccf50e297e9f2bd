"""What machine we are on: Colab or not, CUDA or not, which compute capability, which GPU.

Every decision elsewhere takes a ``Hardware`` value, so tests inject a T4, an A100 or a CPU; ``detect_hardware`` is
the only probe of the real machine (torch is imported only when installed).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    """Facts about the current machine.

    Attributes:
        cuda: a CUDA device is usable by torch.
        capability: CUDA compute capability ``(major, minor)`` of device 0, e.g. ``(7, 5)`` for a T4,
            ``(8, 0)`` for an A100, ``(9, 0)`` for an H100/H200; ``None`` without CUDA.
        gpu_name: device 0's name, or ``None``.
        total_memory_gib: device 0's memory in GiB, or ``None``.
        colab: running inside Google Colab.
        cpu_bf16: the CPU computes bf16 natively (AVX512-BF16 or AMX): CPU training runs its matmuls in
            bf16 under autocast, as TRL's default does, instead of emulating them.
        cuda_bf16: torch's ``torch.cuda.is_bf16_supported(including_emulation=False)`` on device 0 (None
            when not probed: injected facts decide from ``capability``).
    """

    cuda: bool = False
    capability: tuple[int, int] | None = None
    gpu_name: str | None = None
    total_memory_gib: float | None = None
    colab: bool = False
    cpu_bf16: bool = False
    cuda_bf16: bool | None = None

    @property
    def bf16_capable(self) -> bool:
        """True when the GPU has hardware bf16 units: ``cuda_bf16`` (a T4 only emulates it), else capability >= 8.0."""
        if not self.cuda:
            return False
        if self.cuda_bf16 is not None:
            return self.cuda_bf16
        return self.capability is not None and self.capability >= (8, 0)

    def __str__(self) -> str:
        """One line a person reads, e.g. ``machine: Tesla T4 (CUDA capability 7.5, 14.74 GiB, no bf16), Colab`` or
        ``machine: CPU, no CUDA GPU (bf16 computed natively)``."""
        if self.cuda:
            facts = [f"CUDA capability {'.'.join(map(str, self.capability))}" if self.capability else None]
            facts += [f"{self.total_memory_gib} GiB" if self.total_memory_gib is not None else None]
            facts += ["bf16" if self.bf16_capable else "no bf16"]
            where = f"{self.gpu_name or 'CUDA GPU'} ({', '.join(f for f in facts if f)})"
        else:
            where = f"CPU, no CUDA GPU ({'bf16 computed natively' if self.cpu_bf16 else 'no native bf16'})"
        return f"machine: {where}{', Colab' if self.colab else ''}"


def in_colab() -> bool:
    """True inside Google Colab: its ``google.colab`` module is importable and ``COLAB_*`` variables are set."""
    has_env = any(k.startswith("COLAB_") for k in os.environ)
    return has_env and ("google.colab" in sys.modules or is_importable("google.colab"))


def detect_hardware() -> Hardware:
    """Probe this machine. Without torch installed, reports no CUDA (the install step runs first)."""
    colab = in_colab()
    if importlib.util.find_spec("torch") is None:
        return Hardware(colab=colab)
    import torch

    if not torch.cuda.is_available():  # AVX512-BF16 or AMX: torch's own probes (False where this torch lacks them)
        names = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return Hardware(colab=colab, cpu_bf16=any(getattr(torch.cpu, n, lambda: False)() for n in names))
    props = torch.cuda.get_device_properties(0)
    return Hardware(
        cuda=True,
        capability=tuple(torch.cuda.get_device_capability(0)),
        gpu_name=props.name,
        total_memory_gib=round(props.total_memory / 2**30, 2),
        colab=colab,
        cuda_bf16=bool(torch.cuda.is_bf16_supported(including_emulation=False)),
    )


def is_importable(module: str) -> bool:
    """True when ``module`` can be imported here (found on the path), without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def cap_gpu_memory(cap_gib: float, hardware: Hardware | None = None) -> float | None:
    """Limit this process's CUDA memory to ``cap_gib`` GiB (a T4 stand-in on a bigger GPU) with
    ``torch.cuda.set_per_process_memory_fraction`` on its device (``LOCAL_RANK``).

    Returns:
        The fraction applied, or None when ``cap_gib`` is 0 or there is no CUDA device.

    Raises:
        ValueError: ``cap_gib`` is negative or above the device's memory.
    """
    if cap_gib < 0:
        raise ValueError(f"gpu_memory_cap_gib={cap_gib} must be >= 0 (0 = no cap)")
    hardware = hardware or detect_hardware()
    if not cap_gib or not hardware.cuda:
        return None
    if cap_gib > hardware.total_memory_gib:
        raise ValueError(f"gpu_memory_cap_gib={cap_gib} exceeds the GPU's {hardware.total_memory_gib} GiB")
    import torch

    from .distributed import local_process_index

    fraction = cap_gib / hardware.total_memory_gib
    torch.cuda.set_per_process_memory_fraction(fraction, local_process_index())
    print(f"GPU memory capped at {cap_gib} GiB ({fraction:.3f} of {hardware.total_memory_gib} GiB)")
    return fraction
