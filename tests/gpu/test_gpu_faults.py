"""Faults that need a CUDA GPU (run on the GPU machine; skipped elsewhere).

    python3 -m pytest -q tests/gpu   # with the Unsloth stack installed (scripts/gpu_notebook_runs.sh)

* CUDA out-of-memory in training ends with a message naming the knobs to lower and keeps the last checkpoint;
* fp16 on a T4-like setup (capability 7.5 injected, 15 GiB cap) never meets a bf16 tensor;
* Unsloth's packed batches carry exactly one supervised EOS per sample;
(The compiled decoder's check is in test_gpu_decoding.py: it needs a process without Unsloth.)

The TinyLlama-shaped model (random weights) is built from tests/fixtures/tinyllama by
benchmarks/build_tinyllama_shaped.py; its path comes from ``TINYLLAMA_SHAPED`` (default /tmp/tinyllama-shaped).
"""

import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
try:
    import unsloth  # noqa: F401  before transformers, as in the notebook's Unsloth runs
except ImportError:
    pass

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers
from helpers import alpaca_rows, text_dataset  # noqa: E402
from tinyllama_ft.config.finetune import FinetuneConfig  # noqa: E402
from tinyllama_ft.machine.hardware import Hardware, detect_hardware  # noqa: E402

SHAPED = os.environ.get("TINYLLAMA_SHAPED", "/tmp/tinyllama-shaped")


@pytest.fixture(scope="module")
def shaped():
    if not os.path.isfile(os.path.join(SHAPED, "config.json")):
        pytest.fail(f"no TinyLlama-shaped model at {SHAPED}: run benchmarks/build_tinyllama_shaped.py")
    return SHAPED


def _trainer(model_dir, rows, cfg, hardware, plan=None):
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.trainers import build_trainer

    plan = plan or plan_run(cfg, hardware)
    model, tokenizer = load_model(
        model_dir,
        max_seq_length=cfg.max_seq_length,
        dtype=plan.dtype,
        load_in_4bit=plan.load_in_4bit,
        backend=plan.backend,
        hardware=hardware,
        attn_implementation=plan.attn_implementation,
    )
    model = add_lora(model, gradient_checkpointing=plan.gradient_checkpointing, backend=plan.backend)
    ds = text_dataset(rows, tokenizer)
    return build_trainer(
        model=model, tokenizer=tokenizer, train_dataset=ds, eval_dataset=None, cfg=cfg, plan=plan
    ), model


def test_out_of_memory_names_the_knobs_and_keeps_the_last_checkpoint(shaped, alpaca_jsonl, tmp_path):
    from tinyllama_ft.train.loop import train_and_evaluate

    hardware = detect_hardware()
    rows = alpaca_rows(alpaca_jsonl, 400)
    out = str(tmp_path / "run")
    small = FinetuneConfig(
        model_name=shaped,
        backend="transformers",
        max_seq_length=512,
        report_to="none",
        per_device_train_batch_size=1,
        gradient_accumulation_steps=1,
        max_steps=2,
        save_steps=2,
        gradient_checkpointing=False,
        output_dir=out,
        dataset_num_proc=None,
    )
    trainer, model = _trainer(shaped, rows, small, hardware)
    train_and_evaluate(trainer)
    checkpoint = os.path.join(out, "checkpoint-2")
    before = sorted(os.listdir(checkpoint))
    del trainer, model
    torch.cuda.empty_cache()
    # recipe="article" runs the split as configured; the fast recipe would size the micro-batch to the free memory
    # (plan.plan_run) and never run out
    huge = FinetuneConfig(
        model_name=shaped,
        backend="transformers",
        max_seq_length=4096,
        report_to="none",
        recipe="article",
        per_device_train_batch_size=256,
        gradient_accumulation_steps=1,
        max_steps=4,
        save_steps=2,
        gradient_checkpointing=False,
        output_dir=out,
        dataset_num_proc=None,
    )
    trainer, model = _trainer(shaped, rows * 8, huge, hardware)
    with pytest.raises(torch.OutOfMemoryError) as err:
        train_and_evaluate(trainer, resume=True)
    message = str(err.value)
    print(message)
    for knob in (
        "per_device_train_batch_size=256",
        "max_seq_length=4096",
        "gradient_checkpointing=False",
        "gradient_checkpointing=True",
        "resume=True",
        checkpoint,
    ):
        assert knob in message
    assert sorted(os.listdir(checkpoint)) == before
    del trainer, model
    torch.cuda.empty_cache()


def test_fp16_on_a_t4_like_gpu_never_meets_bf16(shaped, alpaca_jsonl, tmp_path):
    from tinyllama_ft.machine.hardware import cap_gpu_memory
    from tinyllama_ft.train.plan import plan_run

    real = detect_hardware()
    t4 = Hardware(cuda=True, capability=(7, 5), gpu_name="T4 stand-in", total_memory_gib=real.total_memory_gib)
    cfg = FinetuneConfig(
        model_name=shaped,
        max_seq_length=1024,
        report_to="none",
        max_steps=3,
        save_steps=100,
        output_dir=str(tmp_path / "t4"),
        dataset_num_proc=None,
        gpu_memory_cap_gib=15,
    )
    plan = plan_run(cfg, t4, budget_gib=15)
    assert plan.dtype == "float16"
    print(plan.summary())
    cap_gpu_memory(cfg.gpu_memory_cap_gib, real)
    torch.cuda.reset_peak_memory_stats()
    trainer, model = _trainer(shaped, alpaca_rows(alpaca_jsonl, 300), cfg, t4, plan)
    assert trainer.args.fp16 and not trainer.args.bf16
    seen = []

    def record(module, args, output):
        tensors = output if isinstance(output, (tuple, list)) else [getattr(output, "logits", output)]
        if any(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 for t in tensors):
            seen.append(type(module).__name__)

    hooks = [m.register_forward_hook(record) for m in model.modules()]
    trainer.train()
    for h in hooks:
        h.remove()
    bf16_tensors = [
        n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.dtype == torch.bfloat16
    ]
    assert not bf16_tensors, bf16_tensors[:5]
    assert not seen, sorted(set(seen))
    assert torch.cuda.max_memory_allocated() / 2**30 <= 15
    del trainer, model
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    torch.cuda.empty_cache()


def test_unsloth_packed_batches_supervise_one_eos_per_sample(shaped, alpaca_jsonl, tmp_path):
    from tinyllama_ft.data.eos_check import eos_supervision

    hardware = detect_hardware()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(shaped)
    rows = [
        r
        for r in alpaca_rows(alpaca_jsonl, 600)
        if len(tok(r["instruction"] + r["input"] + r["output"]).input_ids) < 900
    ][:200]
    cfg = FinetuneConfig(
        model_name=shaped,
        backend="unsloth",
        max_seq_length=1024,
        report_to="none",
        max_steps=1,
        output_dir=str(tmp_path / "eos"),
        dataset_num_proc=None,
    )
    trainer, _ = _trainer(shaped, rows, cfg, hardware)
    counts = eos_supervision(trainer, batches=3)
    print(counts)
    assert counts["samples"] > 10
    assert counts["samples"] == counts["eos_tokens"] == counts["eos_supervised"]
