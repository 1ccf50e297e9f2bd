"""Free disk space before an export writes: the size each format takes, estimated from the parameter count."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

#: Bytes per parameter written by each format (Q8_0: 34 bytes per 32 weights; Q4_K_M: ~4.85 bits per weight).
BYTES_PER_PARAM = {
    "merged_16bit": 2.0,
    "gguf_f16": 2.0,
    "gguf_bf16": 2.0,
    "gguf_q8_0": 34 / 32,
    "gguf_q4_k_m": 4.85 / 8,
}
#: Head room on top of the estimate: tokenizer files, GGUF metadata, file-system slack (bytes).
DISK_MARGIN_BYTES = 64 * 2**20
#: Formats that read the full-precision merged copy through llama.cpp's converter.
OUTTYPES_OR_Q4 = ("gguf_f16", "gguf_bf16", "gguf_q8_0", "gguf_q4_k_m")


def check_free_space(*, path: str, needed_bytes: int) -> int:
    """Raise before writing when the file system holding ``path`` has less than ``needed_bytes`` free.

    Returns:
        The free bytes found.

    Raises:
        OSError: ``errno.ENOSPC``, naming the GiB needed and free.
    """
    probe = Path(path)
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed_bytes:
        raise OSError(
            errno.ENOSPC,
            f"export needs ~{needed_bytes / 2**30:.2f} GiB at {path} and only "
            f"{free / 2**30:.2f} GiB are free: free space or choose fewer formats",
        )
    return free


def estimate_bytes(*, n_params: int, formats, staging_bytes_per_param: float) -> int:
    """Bytes an export writes, staging copies included.

    Args:
        n_params: parameters of the merged model.
        formats: the format names asked.
        staging_bytes_per_param: bytes per parameter of the full-precision merged copy the GGUF converter
            reads (4 for fp32, 2 for 16-bit); counted once when any GGUF format is asked, plus a 16-bit
            intermediate for ``gguf_q4_k_m``.

    Returns:
        The estimate in bytes, ``DISK_MARGIN_BYTES`` included.
    """
    per_param = sum(BYTES_PER_PARAM.get(f, 0.0) for f in formats)
    if any(f in OUTTYPES_OR_Q4 for f in formats):
        per_param += staging_bytes_per_param
    if "gguf_q4_k_m" in formats:
        per_param += 2.0
    return int(n_params * per_param) + DISK_MARGIN_BYTES
