"""Every helper that takes a model works on the model just trained, in the same process, on each GPU plan
(issue 10 item 7): the bf16 fast plan (transformers 4-bit + PEFT, flex attention, Liger) and the T4
stand-in (fp16, Unsloth). Each plan runs ``tests/trained_model_driver.py`` in its own process (Unsloth
patches transformers for the whole process); the CPU plan is ``tests/test_trained_model.py``. The bf16 fast plan
also evaluates a held-out set before, between (every step) and after its flex-attention training steps: the
Trainer's own eval loop runs on SDPA (``sft_trainer.sdpa_evaluating``) and must give finite losses.

    TINYLLAMA_SHAPED=/tmp/tinyllama-shaped python3 -m pytest -q tests/gpu/test_gpu_trained_model.py
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

SHAPED = os.environ.get("TINYLLAMA_SHAPED", "/tmp/tinyllama-shaped")
DRIVER = Path(__file__).resolve().parents[1] / "trained_model_driver.py"


@pytest.mark.parametrize("plan", ["bf16_fast", "t4_unsloth"])
def test_every_helper_works_on_the_just_trained_model(plan, alpaca_jsonl, tmp_path):
    if not os.path.isfile(os.path.join(SHAPED, "config.json")):
        pytest.fail(f"no TinyLlama-shaped model at {SHAPED}: run benchmarks/build_tinyllama_shaped.py")
    if plan == "t4_unsloth":
        pytest.importorskip("unsloth")
    result = tmp_path / "result.json"
    argv = [
        sys.executable,
        str(DRIVER),
        "--plan",
        plan,
        "--model",
        SHAPED,
        "--data",
        str(alpaca_jsonl),
        "--out",
        str(tmp_path),
        "--result",
        str(result),
        "--max-seq-length",
        "1024",
        "--steps",
        os.environ.get("TRAINED_MODEL_STEPS", "3"),
    ]
    if plan == "bf16_fast" and os.environ.get("TRAINED_MODEL_REPRO", "1") == "1":
        argv.append("--repro")
    if plan == "bf16_fast":  # the Trainer's eval loop between flex-attention training steps (trainer.sdpa_evaluating)
        argv += ["--eval-rows", "24"]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(DRIVER.parents[1]), os.environ.get("PYTHONPATH", "")])},
    )
    print(done.stdout[-6000:])
    assert done.returncode == 0, done.stderr[-4000:]
    record = json.loads(result.read_text(encoding="utf-8"))
    print(json.dumps({k: record[k] for k in record if k != "answers"}, indent=1, default=str))
    failed = {k: v for k, v in record["calls"].items() if v != "ok" and not k.startswith("repro_")}
    assert not failed, failed
    if plan == "bf16_fast":
        assert record["attn_implementation"] == "flex_attention"
        assert record["use_liger_kernel"], "the fast plan left Liger off: install liger-kernel (requirements-colab.txt)"
        assert record["attention_before"] == record["attention_after"] == "flex_attention"
        losses = [record["train"]["eval_loss_before"], record["train"]["eval_loss_after"]]
        assert all(isinstance(x, float) and math.isfinite(x) for x in losses), losses
        assert record["merged_type"] == "LlamaForCausalLM" and record["merged_graph_failed"] is None
    else:
        assert record["backend"] == "unsloth" and record["dtype"] == "float16"
        assert record["loaded_backend"] == "unsloth" and record["for_inference_calls"] > 0  # Unsloth's inference mode
    assert all(len(a) == 2 for k, a in record["answers"].items() if k.endswith("generate_batch"))
