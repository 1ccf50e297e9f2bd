"""The 4-bit -> 16-bit merge path of the export (needs a CUDA GPU with bitsandbytes; skipped elsewhere).

    python3 benchmarks/build_tinyllama_shaped.py --src tests/fixtures/tinyllama --out /tmp/tinyllama-shaped
    python3 -m pytest -q -s tests/gpu/test_gpu_export.py   # in its own process, as test_gpu_decoding.py

Not in one pytest process with test_gpu_faults.py: that file imports Unsloth, which patches transformers' Llama
code for the whole process, and the export then refuses to build the merged model (it says so).

An adapter trained for 3 steps on a 4-bit (NF4) TinyLlama-shaped base (random weights, TinyLlama's config and
tokenizer; benchmarks/build_tinyllama_shaped.py, path from ``TINYLLAMA_SHAPED``, default /tmp/tinyllama-shaped) is
exported as ``merged_16bit``: the base is dequantized to bf16 and the LoRA update added there (never merged into
4-bit, never from another checkpoint). The folder must load with plain ``AutoModelForCausalLM`` as a 16-bit model
(no ``quantization_config``) and hold the dequantized base + the LoRA update, checked two ways:

* weights: each adapted projection equals ``W + (lora_alpha / lora_r) * B @ A`` computed in fp32 from the trained
  model's own NF4 weights (``bitsandbytes.functional.dequantize_4bit``) and LoRA matrices, rounded once to bf16
  (at least 99% of the values exactly, none more than two bf16 steps away);
* logits: against the exact model (those fp32 weights, run in fp32), the merged bf16 model is as close as the
  trained 4-bit + adapter model itself is (what "within bf16 tolerance" means here: both carry bf16 rounding; a
  fixed atol is meaningless on a random-weight model, whose logits drift by bf16 noise alone), and closer than the
  base without the adapter (the update is in it).

The learning rate (1e-2, no warmup) is high on purpose: the LoRA update must be large against bf16's rounding of
the weights, or the checks could not tell a merged update from a dropped one.
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
from tinyllama_ft.config.finetune import FinetuneConfig  # noqa: E402
from tinyllama_ft.machine.hardware import detect_hardware  # noqa: E402

SHAPED = os.environ.get("TINYLLAMA_SHAPED", "/tmp/tinyllama-shaped")
PROBES = [
    "Below is an instruction that describes a task.\n\n### Instruction:\nName a color.\n\n### Response:\n",
    "Below is an instruction that describes a task.\n\n### Instruction:\nGive three tips for staying healthy."
    "\n\n### Response:\n1. Eat a balanced diet",
]
PEFT_PREFIX = "base_model.model."


def _logits(model, tokenizer) -> "torch.Tensor":
    """Next-token logits at every prompt position of PROBES (one row each, no padding), fp32 on the CPU, [tokens, vocab]."""
    rows = []
    with torch.no_grad():
        for text in PROBES:
            batch = tokenizer([text], return_tensors="pt").to(model.device)
            rows.append(model(**batch).logits[0].float().cpu())
    return torch.cat(rows)


@pytest.fixture(scope="module")
def trained_4bit(alpaca_jsonl, tmp_path_factory):
    """Train, save; return the folder, the adapter, the exact fp32 weights of every adapted projection
    (``{name: W + scale * B @ A}`` on the GPU), the trained model's logits and the base's (adapter disabled)."""
    import bitsandbytes.functional as bnbf

    from tinyllama_ft.models.adapters import save_adapter
    from tinyllama_ft.models.attention import sdpa_outside_training
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.trainers import build_trainer

    if not os.path.isfile(os.path.join(SHAPED, "config.json")):
        pytest.fail(f"no TinyLlama-shaped model at {SHAPED}: run benchmarks/build_tinyllama_shaped.py")
    hardware = detect_hardware()
    out = tmp_path_factory.mktemp("run4bit")
    cfg = FinetuneConfig(
        model_name=SHAPED,
        backend="transformers",
        max_seq_length=512,
        report_to="none",
        max_steps=3,
        learning_rate=1e-2,
        warmup_ratio=0.0,
        output_dir=str(out),
        dataset_num_proc=None,
        gradient_checkpointing=False,
        load_in_4bit=True,
    )
    plan = plan_run(cfg, hardware)
    assert plan.load_in_4bit and plan.backend == "transformers"
    model, tokenizer = load_model(
        SHAPED,
        max_seq_length=cfg.max_seq_length,
        dtype=plan.dtype,
        load_in_4bit=True,
        backend=plan.backend,
        hardware=hardware,
        attn_implementation=plan.attn_implementation,
    )
    assert getattr(model, "hf_quantizer", None) is not None  # NF4 weights: the merge must dequantize first
    model = add_lora(model, gradient_checkpointing=plan.gradient_checkpointing, backend=plan.backend)
    build_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=text_dataset(alpaca_rows(alpaca_jsonl, 64), tokenizer),
        cfg=cfg,
        plan=plan,
    ).train()
    adapter = save_adapter(model.eval(), tokenizer, str(out / "lora_model"))
    exact = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if not (hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {})):
                continue
            weight = module.base_layer.weight
            base = bnbf.dequantize_4bit(weight.data, weight.quant_state).float()  # what the 4-bit forward multiplies by
            a, b = module.lora_A["default"].weight.float(), module.lora_B["default"].weight.float()
            exact[name.removeprefix(PEFT_PREFIX)] = (base, base + module.scaling["default"] * (b @ a))
    assert len(exact) == 7 * model.config.num_hidden_layers, sorted(exact)[:8]
    # on SDPA, as the package's scoring runs it: a no-grad call under flex attention failed to compile here
    # (NoValidChoicesError, 2026-12-01; inference_attention.py)
    with sdpa_outside_training(model):
        adapter_logits = _logits(model, tokenizer)
        with model.disable_adapter():
            base_logits = _logits(model, tokenizer)
    del model
    torch.cuda.empty_cache()
    return out, adapter, exact, adapter_logits, base_logits


def test_merged_16bit_from_a_4bit_base_is_the_dequantized_base_plus_the_update(trained_4bit):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinyllama_ft.export.adapter_export import export_adapter

    out, adapter, exact, adapter_logits, base_logits = trained_4bit
    result = export_adapter(
        adapter_dir=adapter,
        formats=["merged_16bit"],
        output_dir=str(out),
        load_in_4bit=True,
        max_seq_length=512,
        hardware=detect_hardware(),
    )["merged_16bit"]
    with open(os.path.join(result.path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert "quantization_config" not in config
    print(f"\nmerged_16bit: {result.bytes / 2**30:.2f} GiB in {result.seconds:.1f} s")
    assert 1.9 < result.bytes / 2**30 < 2.5  # 1.1B parameters x 2 bytes, not 4-bit (~0.7 GiB)
    merged = AutoModelForCausalLM.from_pretrained(result.path, device_map="cuda", attn_implementation="sdpa").eval()
    assert merged.dtype in (torch.bfloat16, torch.float16) and getattr(merged, "hf_quantizer", None) is None
    modules = dict(merged.named_modules())

    # weights: the merged projection is bf16(W + scale * B @ A): the exact sum rounded once
    err = upd = moved = equal = count = 0.0
    worst = 0.0
    for name, (base, target) in exact.items():
        stored = modules[name].weight
        got = stored.float()
        step = target.abs() * 2.0**-7 + 2.0**-126  # >= one bf16 ulp of the exact value
        worst = max(worst, ((got - target).abs() / step).max().item())
        err += (got - target).abs().sum().item()
        upd += (target - base).abs().sum().item()
        moved += (got != base).sum().item()
        equal += (stored == target.to(stored.dtype)).sum().item()
        count += got.numel()
    print(
        f"weights ({len(exact)} projections, {count:,.0f} values): mean |merged - exact| {err / count:.3g} vs mean "
        f"|update| {upd / count:.3g}; {moved / count:.1%} moved from the base; {equal / count:.2%} equal to the exact "
        f"sum rounded to {stored.dtype}; worst |merged - exact| {worst:.2f} x |exact| / 2^7 (one bf16 step or more)"
    )
    assert worst <= 2.0, "a merged weight is more than two bf16 steps from the dequantized base + the LoRA update"
    assert equal >= 0.99 * count, "the merge is not the exact sum rounded once (seen: 100.00% on the H200, 2026-12-02)"
    assert err < 0.1 * upd, "the merged weights do not carry the LoRA update"

    # logits: against the exact model in fp32, merged bf16 is as close as the trained 4-bit + adapter model itself
    tokenizer = AutoTokenizer.from_pretrained(result.path)
    merged_logits = _logits(merged, tokenizer)
    del merged, modules
    torch.cuda.empty_cache()
    reference = AutoModelForCausalLM.from_pretrained(
        result.path, device_map="cuda", dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    ref_modules = dict(reference.named_modules())
    with torch.no_grad():
        for name, (_, target) in exact.items():
            ref_modules[name].weight.copy_(target)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        exact_logits = _logits(reference, tokenizer)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32

    def gap(logits):
        d = (logits - exact_logits).abs()
        agree = (logits.argmax(-1) == exact_logits.argmax(-1)).float().mean().item()
        return d.mean().item(), d.max().item(), agree

    figures = {
        "merged bf16": gap(merged_logits),
        "4-bit + adapter": gap(adapter_logits),
        "4-bit base, adapter off": gap(base_logits),
    }
    print(f"logits vs the exact fp32 model ({exact_logits.shape[0]} positions, std {exact_logits.std():.3f}):")
    for label, (mean, worst_logit, agree) in figures.items():
        print(f"  {label:24s} mean |diff| {mean:.4f}  max {worst_logit:.4f}  argmax agreement {agree:.3f}")
    merged_gap, adapter_gap, base_gap = (figures[k][0] for k in figures)
    assert merged_gap <= 2 * adapter_gap, "the merged model is further from exact than bf16 rounding explains"
    assert merged_gap < base_gap, "the merged model's logits do not carry the LoRA update"
