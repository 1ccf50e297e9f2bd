"""Block shapes for the package's Triton GEMV (``tinyllama_ft.infer.fast.triton_gemv.CONFIGS``) read from a sweep's JSON file:
benchmark-only (``decode_probe.py`` writes the file, ``decode_probe.py`` and ``generate_one.py`` read it back)."""

from __future__ import annotations

from tinyllama_ft.infer.fast.triton_gemv import CONFIGS


def use_configs(path: str) -> dict[tuple[int, int], tuple[int, int, int]]:
    """Add the block shapes in a JSON file (``{"N,K": [BLOCK_N, BLOCK_K, num_warps]}``, as
    benchmarks/decode_probe.py writes them) to ``CONFIGS``; returns what was added.

    Raises:
        OSError / ValueError: the file cannot be read or is not that JSON.
    """
    import json

    with open(path, encoding="utf-8") as f:
        added = {tuple(int(v) for v in key.split(",")): tuple(int(v) for v in cfg) for key, cfg in json.load(f).items()}
    CONFIGS.update(added)
    return added
