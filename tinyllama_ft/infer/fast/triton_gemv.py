"""One-token projections (``x @ W.T`` for a single row) as a Triton kernel, a lever for the fused decoder.

At batch 1 each decode-step projection is a matrix-vector product; cuBLAS runs it as a GEMM plus a split-K
reduction (~2.4 TB/s of the H200's ~4.3). Here each program reads ``BLOCK_N`` weight rows along K in ``BLOCK_K``
columns and accumulates in float32: one kernel, no reduction pass (benchmarks/decode_probe.py times both).
"""

from __future__ import annotations

import functools

#: ``(BLOCK_N, BLOCK_K, num_warps)`` for shapes not in ``CONFIGS``.
DEFAULT_CONFIG = (4, 1024, 8)
#: ``(N, K) -> (BLOCK_N, BLOCK_K, num_warps)``: the fastest of 18 block shapes on the H200 for TinyLlama's q|k|v,
#: o, gate|up, down and lm_head (benchmarks/decode_probe.py).
CONFIGS: dict[tuple[int, int], tuple[int, int, int]] = {
    (2560, 2048): (4, 1024, 8),
    (2048, 2048): (4, 1024, 8),
    (11264, 2048): (16, 256, 4),
    (2048, 5632): (4, 1024, 8),
    (32000, 2048): (4, 512, 4),
}


@functools.cache
def _compiled():
    """The ``triton.jit`` kernel, defined on first use (Triton is imported only here)."""
    import triton
    import triton.language as tl

    @triton.jit
    def gemv_kernel(w_ptr, x_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < N
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            col_ok = cols < K
            w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=row_ok[:, None] & col_ok[None, :], other=0.0)
            x = tl.load(x_ptr + cols, mask=col_ok, other=0.0)
            acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
        tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=row_ok)

    return gemv_kernel


def gemv(x, weight, out=None, config: tuple[int, int, int] | None = None):
    """``weight @ x``: x ``(K,)``, weight ``(N, K)`` row-major (a ``nn.Linear`` weight), same dtype, on CUDA.

    Args:
        x, weight: the one row of activations and the projection's weight, both contiguous.
        out: optional ``(N,)`` output tensor (else a new one).
        config: ``(BLOCK_N, BLOCK_K, num_warps)``; None: ``CONFIGS[(N, K)]`` or ``DEFAULT_CONFIG``.

    Returns:
        ``(N,)`` tensor in ``x``'s dtype (float32 accumulation).

    Raises:
        ValueError: shapes that do not match, or tensors that are not contiguous.
    """
    import torch

    if x.dim() != 1 or weight.dim() != 2 or weight.shape[1] != x.shape[0]:
        raise ValueError(f"gemv: x {tuple(x.shape)} and weight {tuple(weight.shape)} do not make weight @ x")
    if not (x.is_contiguous() and weight.is_contiguous()):
        raise ValueError("gemv: x and weight must be contiguous")
    n, k = weight.shape
    block_n, block_k, warps = config or CONFIGS.get((n, k), DEFAULT_CONFIG)
    if out is None:
        out = torch.empty(n, dtype=x.dtype, device=x.device)
    _compiled()[(-(-n // block_n),)](weight, x, out, n, k, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps)
    return out
