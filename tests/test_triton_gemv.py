"""The Triton matrix-vector kernel (the decoder's ``matmul="triton"`` lever) against float64, in Triton's
interpreter on a CPU (skipped where Triton is not installed; on the GPU machine it runs compiled)."""

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
pytest.importorskip("triton")

from tinyllama_ft.infer.fast.triton_gemv import gemv  # noqa: E402


@pytest.mark.parametrize("n,k,config", [(40, 64, (8, 32, 4)), (37, 100, (8, 64, 4)), (512, 64, (16, 32, 4))])
def test_gemv_matches_float64_with_ragged_edges(n, k, config):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(n)
    w, x = torch.randn(n, k, device=device), torch.randn(k, device=device)
    out = torch.full((n,), float("nan"), device=device)  # every row must be written
    gemv(x, w, out=out, config=config)
    ref = w.double() @ x.double()
    assert torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref) < 1e-6


def test_gemv_refuses_shapes_that_do_not_multiply():
    with pytest.raises(ValueError, match="do not make"):
        gemv(torch.zeros(3), torch.zeros(4, 5))
    with pytest.raises(ValueError, match="contiguous"):
        gemv(torch.zeros(4), torch.zeros(4, 8)[:, ::2])
