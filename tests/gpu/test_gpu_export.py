"""The 4-bit -> 16-bit merge path of the export (needs a CUDA GPU with bitsandbytes; skipped elsewhere).

    python3 benchmarks/build_tinyllama_shaped.py --src ../shared/data/tinyllama --out /tmp/tinyllama-shaped
    python3 -m pytest -q -s tests/gpu/test_gpu_export.py   # in its own process, as test_gpu_decoding.py

Not in one pytest process with test_gpu_faults.py: that file imports Unsloth, which patches transformers' Llama
code for the whole process, and the export then refuses to build the merged model (it says so).

An adapter trained for 2 steps on a 4-bit (NF4) TinyLlama-shaped base (random weights, TinyLlama's config and
tokenizer; benchmarks/build_tinyllama_shaped.py, path from ``TINYLLAMA_SHAPED``, default /tmp/tinyllama-shaped) is
exported as ``merged_16bit``: the base is dequantized to bf16 and the LoRA update added there (never merged into
4-bit, never from another checkpoint). The folder must load with plain ``AutoModelForCausalLM`` as a 16-bit model
(no ``quantization_config``), hold the dequantized base + the LoRA update, and give the adapter model's logits
within bf16 tolerance.
"""

import json
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("bitsandbytes")
if "unsloth" in sys.modules:
    pytest.fail("run tests/gpu/test_gpu_export.py in its own process: Unsloth is already imported here", pytrace=False)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers
from helpers import alpaca_rows, text_dataset  # noqa: E402
from tinyllama_ft.config import FinetuneConfig  # noqa: E402
from tinyllama_ft.hardware import detect_hardware  # noqa: E402

SHAPED = os.environ.get("TINYLLAMA_SHAPED", "/tmp/tinyllama-shaped")
PROBE = "Below is an instruction that describes a task.\n\n### Instruction:\nName a color.\n\n### Response:\n"


@pytest.fixture(scope="module")
def adapter_4bit(alpaca_jsonl, tmp_path_factory):
    from tinyllama_ft.adapters import save_adapter
    from tinyllama_ft.inference_attention import sdpa_outside_training
    from tinyllama_ft.lora import add_lora
    from tinyllama_ft.modeling import load_model
    from tinyllama_ft.plan import plan_run
    from tinyllama_ft.trainer import build_trainer

    if not os.path.isfile(os.path.join(SHAPED, "config.json")):
        pytest.fail(f"no TinyLlama-shaped model at {SHAPED}: run benchmarks/build_tinyllama_shaped.py")
    hardware = detect_hardware()
    out = tmp_path_factory.mktemp("run4bit")
    cfg = FinetuneConfig(model_name=SHAPED, backend="transformers", max_seq_length=512, report_to="none", max_steps=2,
                         learning_rate=1e-3, output_dir=str(out), dataset_num_proc=None, gradient_checkpointing=False,
                         load_in_4bit=True)
    plan = plan_run(cfg, hardware)
    assert plan.load_in_4bit and plan.backend == "transformers"
    model, tokenizer = load_model(SHAPED, max_seq_length=cfg.max_seq_length, dtype=plan.dtype, load_in_4bit=True,
                                  backend=plan.backend, hardware=hardware, attn_implementation=plan.attn_implementation)
    assert getattr(model, "hf_quantizer", None) is not None  # NF4 weights: the merge must dequantize first
    model = add_lora(model, gradient_checkpointing=plan.gradient_checkpointing, backend=plan.backend)
    build_trainer(model=model, tokenizer=tokenizer, train_dataset=text_dataset(alpaca_rows(alpaca_jsonl, 64), tokenizer),
                  cfg=cfg, plan=plan).train()
    adapter = save_adapter(model.eval(), tokenizer, str(out / "lora_model"))
    # on SDPA, as the package's scoring runs it: a no-grad call under flex attention failed to compile here
    # (NoValidChoicesError, 2026-12-01; inference_attention.py)
    with torch.no_grad(), sdpa_outside_training(model):
        logits = model(**tokenizer([PROBE], return_tensors="pt").to(model.device)).logits.float().cpu()
    return out, adapter, logits


def test_merged_16bit_from_a_4bit_base_is_a_plain_16bit_model(adapter_4bit):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinyllama_ft.export import export_adapter

    out, adapter, adapter_logits = adapter_4bit
    result = export_adapter(adapter_dir=adapter, formats=["merged_16bit"], output_dir=str(out), load_in_4bit=True,
                            max_seq_length=512, hardware=detect_hardware())["merged_16bit"]
    with open(os.path.join(result.path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert "quantization_config" not in config
    print(f"merged_16bit: {result.bytes / 2**30:.2f} GiB in {result.seconds:.1f} s")
    assert 1.9 < result.bytes / 2**30 < 2.5  # 1.1B parameters x 2 bytes, not 4-bit (~0.7 GiB)
    merged = AutoModelForCausalLM.from_pretrained(result.path, device_map="cuda").eval()
    assert merged.dtype in (torch.bfloat16, torch.float16) and getattr(merged, "hf_quantizer", None) is None
    tokenizer = AutoTokenizer.from_pretrained(result.path)
    with torch.no_grad():
        logits = merged(**tokenizer([PROBE], return_tensors="pt").to("cuda")).logits.float().cpu()
    diff = (logits - adapter_logits).abs()
    print(f"merged vs 4-bit base + adapter: max |diff| {diff.max():.4f}, mean {diff.mean():.5f}, "
          f"argmax agreement {(logits.argmax(-1) == adapter_logits.argmax(-1)).float().mean():.3f}")
    torch.testing.assert_close(logits, adapter_logits, atol=5e-2, rtol=5e-2)  # bf16 tolerance
