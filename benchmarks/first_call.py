"""What a fresh process pays once, before any steady speed: CUDA's start, cuBLAS's first matrix product, the first
call of each Liger kernel the training plan and the package's decoder use (Triton compiles them into an empty
cache), and flex attention's first compile with a block mask. Each is timed on its first and its second call, in a
process whose ``TRITON_CACHE_DIR`` and ``TORCHINDUCTOR_CACHE_DIR`` are new empty folders (a new Colab runtime).

    python3 benchmarks/first_call.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

for _var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ[_var] = tempfile.mkdtemp(prefix=_var.lower() + "-")

RESULTS: dict[str, dict] = {}


def timed(name: str, fn, repeats: int = 2) -> None:
    """Time ``fn()`` ``repeats`` times (CUDA synchronised) and record the first and the last call's seconds."""
    import torch

    seconds = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            fn()
        except Exception as err:  # noqa: BLE001  one kernel's failure is a finding, not the end of the profile
            RESULTS[name] = {"error": f"{type(err).__name__}: {err}"[:300]}
            print(f"{name:38s} failed: {RESULTS[name]['error']}", flush=True)
            return
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    RESULTS[name] = {"first_s": round(seconds[0], 3), "again_s": round(seconds[-1], 4)}
    print(f"{name:38s} first {seconds[0]:8.3f} s   again {seconds[-1]:8.4f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    start = time.perf_counter()
    import torch

    RESULTS["import torch"] = {"first_s": round(time.perf_counter() - start, 3)}
    print(f"{'import torch':38s} first {RESULTS['import torch']['first_s']:8.3f} s", flush=True)
    start = time.perf_counter()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    RESULTS["CUDA start"] = {"first_s": round(time.perf_counter() - start, 3)}
    print(f"{'CUDA start':38s} first {RESULTS['CUDA start']['first_s']:8.3f} s", flush=True)

    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    rows, hidden, inter, heads, dim = 8 * 2048, 2048, 5632, 32, 64
    x = torch.randn(rows, hidden, **bf16)
    w = torch.randn(hidden, hidden, **bf16)
    timed("bf16 matmul (cuBLAS)", lambda: x @ w)

    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.rope import LigerRopeFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    except ImportError as err:
        print("liger-kernel not importable:", err)
    else:
        xg = x.detach().requires_grad_()
        norm_w = torch.ones(hidden, **bf16, requires_grad=True)
        timed("Liger RMSNorm fwd+bwd", lambda: LigerRMSNormFunction.apply(xg, norm_w, 1e-5).sum().backward())
        gate = torch.randn(rows, inter, **bf16, requires_grad=True)
        up = torch.randn(rows, inter, **bf16, requires_grad=True)
        timed("Liger SwiGLU fwd+bwd", lambda: LigerSiLUMulFunction.apply(gate, up).sum().backward())
        q = torch.randn(8, heads, 2048, dim, **bf16, requires_grad=True)
        k = torch.randn(8, 4, 2048, dim, **bf16, requires_grad=True)
        cos = torch.randn(8, 2048, dim, **bf16)
        sin = torch.randn(8, 2048, dim, **bf16)

        def rope():
            qr, kr = LigerRopeFunction.apply(q.clone(), k.clone(), cos, sin)  # it rotates in place
            (qr.sum() + kr.sum()).backward()

        timed("Liger RoPE fwd+bwd", rope)
        lm_head = torch.randn(32000, hidden, **bf16, requires_grad=True)
        labels = torch.randint(0, 32000, (rows,), device="cuda")
        loss = LigerFusedLinearCrossEntropyLoss()
        timed("Liger fused linear CE fwd+bwd", lambda: loss(lm_head, xg, labels).backward())

    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    doc = torch.arange(2048, device="cuda") // 256  # eight packed rows of 256 tokens

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    compiled = torch.compile(flex_attention)
    qf = torch.randn(8, heads, 2048, dim, **bf16, requires_grad=True)
    kf = torch.randn(8, heads, 2048, dim, **bf16, requires_grad=True)
    vf = torch.randn(8, heads, 2048, dim, **bf16, requires_grad=True)

    def flex():
        block_mask = create_block_mask(mask_mod, None, None, 2048, 2048, device="cuda")
        compiled(qf, kf, vf, block_mask=block_mask).sum().backward()

    timed("flex attention compile fwd+bwd", flex)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(RESULTS, f, indent=1)


if __name__ == "__main__":
    main()
