"""Slow: SmolLM2-135M-Instruct trained a few LoRA steps on the demo rows with the demo's default loss.

What the demo promises, checked on the real model: the held-out response loss drops, and the model does
not get worse at stopping (teacher-forced EOS probability at the end of held-out responses >= the base's).
Two torch threads at most, so CI's two cores are not oversubscribed.
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import REPO

STEPS = 10
HELD_OUT = 40


@pytest.fixture
def two_threads():
    import torch

    before = torch.get_num_threads()
    # the caller's thread count (scripts/test.sh: 1 per worker, two workers on 2 cores), else 2
    torch.set_num_threads(min(int(os.environ.get("OMP_NUM_THREADS", "2")), os.cpu_count() or 1))
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_a_few_completion_only_steps_help_and_keep_stopping(two_threads, tmp_path, cpu):
    import datasets

    from helpers import sft_trainer
    from tinyllama_ft.models.demo_model import demo_model_path
    from tinyllama_ft.evaluate.held_out import held_out_scores
    from tinyllama_ft.data.formats import AlpacaFormat
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model

    with open(REPO / "data" / "alpaca_demo" / "alpaca_demo.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    train, held = rows[:900], rows[-HELD_OUT:]
    model, tokenizer = load_model(
        demo_model_path(), max_seq_length=256, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    model = add_lora(model, gradient_checkpointing=False)
    with model.disable_adapter():
        base = held_out_scores(model, tokenizer, held, max_seq_length=256, data_format=AlpacaFormat())
    trainer = sft_trainer(
        model,
        tokenizer,
        datasets.Dataset.from_list(train),
        tmp_path,
        max_seq_length=256,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        max_steps=STEPS,
        learning_rate=2e-4,
        gradient_checkpointing=False,
        save_steps=10**6,
        load_in_4bit=False,
        completion_only_loss=True,
    )
    trainer.train()
    tuned = held_out_scores(model, tokenizer, held, max_seq_length=256, data_format=AlpacaFormat())
    assert tuned.response_loss < base.response_loss, (base, tuned)
    assert tuned.eos_probability >= base.eos_probability, (base, tuned)
