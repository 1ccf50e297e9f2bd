"""Preference rows and tiny real models for the DPO / KTO / ORPO tests (tests/test_preferences.py,
tests/test_preference_training.py): stories260K (tests/fixtures/stories260k, its Llama-2-style ``</s>``) on text pairs,
and a 2-layer Llama with SmolLM2-135M-Instruct's real tokenizer and ChatML template on conversational pairs. Each row
types the model's own end token as text somewhere, which must stay text."""

from __future__ import annotations

from pathlib import Path

from chat_fixtures import smollm2_tokenizer, tiny_model
from helpers import stories_lora

#: Text pairs (Alpaca prompt; some with an input), each typing ``</s>`` in prompt, chosen or rejected.
TEXT_PAIRS = [
    {
        "prompt": f"Tell story {i} about </s> tags.",
        "input": "in one line" if i % 2 else "",
        "chosen": f"Once upon a time {i} a cat wrote </s> on a wall.",
        "rejected": f"No </s> {i}.",
    }
    for i in range(8)
]
#: Conversational pairs typing ``<|im_end|>``: the implicit-prompt form (whole conversations sharing the user turns,
#: as trl-lib/ultrafeedback_binarized) and the explicit one.
CHAT_PAIRS = [
    {
        "chosen": [
            {"role": "user", "content": f"Write <|im_end|> {i} times."},
            {"role": "assistant", "content": f"Here: <|im_end|> x{i}."},
        ],
        "rejected": [
            {"role": "user", "content": f"Write <|im_end|> {i} times."},
            {"role": "assistant", "content": "No."},
        ],
    }
    for i in range(4)
] + [
    {
        "prompt": [
            {"role": "user", "content": f"Hi {i}"},
            {"role": "assistant", "content": "Hello <|im_end|>!"},
            {"role": "user", "content": "Name a color."},
        ],
        "chosen": [{"role": "assistant", "content": f"Blue {i}."}],
        "rejected": [{"role": "assistant", "content": f"I will not <|im_end|> {i}."}],
    }
    for i in range(4)
]


def stories_pairs(stories_dir: Path, hardware, *, rows=TEXT_PAIRS, max_seq_length: int = 256, seed: int = 3407):
    """``(model, tokenizer, tokenized pairs)``: stories260K with a fresh LoRA adapter, ``rows`` checked and tokenized
    by the package (text form, the Alpaca template)."""
    from tinyllama_ft.data.preference_tokens import tokenize_preferences

    model, tokenizer = stories_lora(stories_dir, hardware, max_seq_length=max_seq_length, seed=seed)
    return (
        model,
        tokenizer,
        tokenize_preferences(checked_rows(rows), tokenizer, form="text", max_seq_length=max_seq_length)[0],
    )


def smollm2_pairs(*, rows=CHAT_PAIRS, max_seq_length: int = 256):
    """``(model, tokenizer, tokenized pairs)``: a tiny Llama with SmolLM2's tokenizer and a fresh LoRA adapter,
    ``rows`` checked and tokenized by the package (conversations, the tokenizer's ChatML template)."""
    from tinyllama_ft.data.preference_tokens import tokenize_preferences
    from tinyllama_ft.models.lora import add_lora

    tokenizer = smollm2_tokenizer()
    model = add_lora(tiny_model("llama", tokenizer), gradient_checkpointing=False, lora_r=4, lora_alpha=8)
    return (
        model,
        tokenizer,
        tokenize_preferences(checked_rows(rows), tokenizer, form="conversation", max_seq_length=max_seq_length)[0],
    )


def checked_rows(rows):
    """``rows`` checked (``check_preference_rows``, none dropped) as a ``datasets.Dataset``."""
    import datasets

    from tinyllama_ft.data.preferences import check_preference_rows, preference_features

    clean, report, layout, form = check_preference_rows(rows)
    assert report.dropped == 0, report.summary()
    return datasets.Dataset.from_list(clean, features=preference_features(layout, form))


def preference_trainer(
    method: str,
    model,
    tokenizer,
    train_dataset,
    output_dir,
    *,
    from_adapter=False,
    progress=False,
    eval_dataset=None,
    **fields,
):
    """A real ``build_preference_trainer`` on the CPU: no W&B, no worker processes, batch 2 x 1, two steps."""
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.preference_trainer import build_preference_trainer

    values = dict(
        method=method,
        report_to="none",
        output_dir=str(output_dir),
        dataset_num_proc=None,
        max_seq_length=256,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        max_steps=2,
        warmup_ratio=0.0,
        learning_rate=1e-3,
        save_steps=1000,
    )
    cfg = FinetuneConfig(**{**values, **fields})
    return build_preference_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        cfg=cfg,
        plan=plan_run(cfg, Hardware()),
        from_adapter=from_adapter,
        progress=progress,
    )
