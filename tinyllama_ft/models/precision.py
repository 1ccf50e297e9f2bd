"""One precision decision for the whole run (model weights, 4-bit compute dtype, trainer flags), made once from the
compute capability as the article's ``dtype=None`` and ``fp16 = not is_bf16_supported()`` make it.
"""

from __future__ import annotations

from ..config.coercion import ConfigError
from ..machine.hardware import Hardware

#: Each name ``resolve_dtype`` takes -> its canonical name (the torch attribute).
_ALIASES = {
    a: name
    for name, more in (("bfloat16", "bf16"), ("float16", "fp16 half"), ("float32", "fp32 float"))
    for a in (name, *more.split())
}


def resolve_dtype(dtype: str | None, hardware: Hardware) -> str:
    """Name of the torch dtype to compute in.

    Args:
        dtype: ``None`` or ``"auto"`` to decide from the hardware; else a dtype name
            (``"bfloat16"``/``"bf16"``, ``"float16"``/``"fp16"``, ``"float32"``/``"fp32"``).
        hardware: the machine's facts (``detect_hardware()``).

    Returns:
        ``"bfloat16"`` on CUDA capability >= 8.0, ``"float16"`` on older CUDA GPUs (a T4 is 7.5),
        ``"float32"`` on a CPU; or the requested dtype's canonical name.

    Raises:
        coercion.ConfigError: (a ValueError) unknown dtype name; ``"bfloat16"`` asked on a CUDA GPU below capability 8.0;
            ``"float16"`` asked on a CPU (CPU training in fp16 is not supported by the trainer).
    """
    if dtype is None or dtype == "auto":
        if not hardware.cuda:
            return "float32"
        return "bfloat16" if hardware.bf16_capable else "float16"
    name = _ALIASES.get(str(dtype).replace("torch.", ""))
    if name is None:
        raise ConfigError(f"dtype={dtype!r} is not one of None, 'auto', 'bfloat16', 'float16', 'float32'")
    if name == "bfloat16" and hardware.cuda and not hardware.bf16_capable:
        raise ConfigError(
            f"dtype='bfloat16' needs compute capability >= 8.0; this GPU ({hardware.gpu_name}) is "
            f"{hardware.capability}: use dtype=None (float16)"
        )
    if name == "float16" and not hardware.cuda:
        raise ConfigError("dtype='float16' needs a CUDA GPU; on a CPU use dtype=None (float32)")
    return name


def adapter_dtype(dtype_name: str, backend: str) -> str | None:
    """The dtype the trainable weights (LoRA, whole modules) keep through training, or None where the libraries' own
    choice stands.

    Args:
        dtype_name: the run's dtype (``resolve_dtype``). backend: ``"unsloth"`` or ``"transformers"``.

    Returns:
        ``"float32"`` on the transformers backend in float16 or float32: fp16 mixed precision's ``GradScaler``
        unscales float32 gradients only (bf16 ones raise ``_amp_foreach_non_finite_check_and_unscale_cuda not
        implemented for 'BFloat16'``), and TRL's trainers (1.15, 1.16) cast a 4-bit model's trainable weights to
        bfloat16 (the QLoRA paper's choice) whatever the run's precision; None in bfloat16 (TRL's bf16 on a 4-bit
        base, PEFT's float32 otherwise) and on Unsloth (its own).
    """
    return "float32" if backend == "transformers" and dtype_name in ("float16", "float32") else None


def torch_dtype(name: str):
    """The ``torch.dtype`` for a name returned by ``resolve_dtype`` (imports torch)."""
    import torch

    return getattr(torch, name)


def trainer_precision_flags(dtype_name: str, cpu_autocast_bf16: bool = False) -> dict[str, bool]:
    """The trainer's mixed-precision flags for the run's dtype: ``{"fp16": ..., "bf16": ...}``.

    Args:
        dtype_name: the run's dtype (``resolve_dtype``); fp32 sets neither.
        cpu_autocast_bf16: fp32 weights on a CPU that computes bf16 natively: bf16 autocast for the matmuls (TRL's
            ``SFTConfig`` default), weights and optimizer state staying fp32.
    """
    return {"fp16": dtype_name == "float16", "bf16": dtype_name == "bfloat16" or cpu_autocast_bf16}
