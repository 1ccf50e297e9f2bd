"""The trainable weights keep the plan's dtype (plan.adapter_dtype): TRL's trainers cast a 4-bit model's adapter to
bfloat16 (the QLoRA paper's choice) whatever the run's precision, and fp16's GradScaler cannot unscale bf16 gradients
(the T4 plan on the transformers backend failed at its first optimizer step). Real stories260K model, real TRL
trainer; bitsandbytes' 4-bit needs CUDA, so the model carries the flag TRL reads (``is_loaded_in_4bit``)."""

import dataclasses

import pytest
import torch

from helpers import alpaca_rows, sft_trainer, text_dataset
from tinyllama_ft.machine.hardware import Hardware


@pytest.fixture()
def flagged_4bit(stories_dir):
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.models.lora import add_lora

    model, tokenizer = load_model(
        str(stories_dir), max_seq_length=256, load_in_4bit=False, backend="transformers", hardware=Hardware()
    )
    model.is_loaded_in_4bit = True  # what TRL's trainers read before their QLoRA cast
    return add_lora(model, gradient_checkpointing=False, backend="transformers"), tokenizer


def _trainable_dtypes(model):
    return {p.dtype for p in model.parameters() if p.requires_grad}


def test_the_trainer_casts_back_what_trl_cast_to_bfloat16(flagged_4bit, alpaca_jsonl, tmp_path, monkeypatch):
    from tinyllama_ft.train import trainers

    model, tokenizer = flagged_4bit
    rows = text_dataset(alpaca_rows(alpaca_jsonl, 4), tokenizer)
    planned = []
    real_keep = trainers.keep_adapter_dtype

    def keep_nothing(trainer, plan):  # the premise: without the cast back, TRL leaves bf16 weights
        planned.append(plan.adapter_dtype)
        return real_keep(trainer, dataclasses.replace(plan, adapter_dtype=None))

    from tinyllama_ft.train import sft_trainer as sft_module

    monkeypatch.setattr(sft_module, "keep_adapter_dtype", keep_nothing)
    sft_trainer(model, tokenizer, rows, tmp_path / "a", max_seq_length=256, max_steps=1)
    assert planned == ["float32"] and _trainable_dtypes(model) == {torch.bfloat16}
    monkeypatch.undo()
    trainer = sft_trainer(model, tokenizer, rows, tmp_path / "b", max_seq_length=256, max_steps=1)
    assert _trainable_dtypes(trainer.model) == {torch.float32}
