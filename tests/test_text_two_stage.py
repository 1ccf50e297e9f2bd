"""Continued pretraining, then instructions on top, through the command line's function (``pipeline.run_training``):
a tiny random Llama with SmolLM2-135M-Instruct's real tokenizer trains on 16 of the shipped Python-reference documents
(dataset_format 'text', the forgetting check on real Alpaca rows), its adapter records the text form and completes raw
text; an Alpaca SFT run continues that adapter (adapter_name_or_path) and records Alpaca."""

import json
import shutil
from pathlib import Path

import pytest

from chat_fixtures import cpu_trl_cannot_train, smollm2_tokenizer, tiny_model

CORPUS = Path(__file__).resolve().parents[1] / "data" / "python_reference" / "topics"


def _run(folder: Path, **values):
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.pipeline import run_training

    common = dict(
        max_seq_length=128,
        load_in_4bit=False,
        backend="transformers",
        lora_r=4,
        lora_alpha=8,
        learning_rate=1e-3,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        per_device_eval_batch_size=4,
        max_steps=2,
        test_size=0.2,
        gradient_checkpointing=False,
        eval_steps=1000,
        save_steps=1000,
        report_to="none",
        dataset_num_proc=None,
        max_new_tokens=8,
        prompts=["The assert statement"],
    )
    return run_training(FinetuneConfig(**{**common, **values}))


@pytest.mark.skipif(cpu_trl_cannot_train(), reason="TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
def test_text_then_alpaca_on_the_text_adapter(alpaca_jsonl, tmp_path, capsys):
    from tinyllama_ft.data.formats import TextFormat, recorded_data_format
    from tinyllama_ft.models.run_record import read_record

    tokenizer = smollm2_tokenizer()
    model_dir = tmp_path / "tiny-model"
    tiny_model("llama", tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    docs = tmp_path / "docs"
    docs.mkdir()
    for path in sorted(CORPUS.glob("*.txt"))[:16]:
        shutil.copy(path, docs / path.name)
    alpaca = tmp_path / "alpaca_40.jsonl"
    with open(alpaca_jsonl, encoding="utf-8") as f:
        alpaca.write_text("".join(next(f) for _ in range(40)), encoding="utf-8")

    text = _run(
        tmp_path,
        model_name=str(model_dir),
        dataset=str(docs),
        dataset_format="text",
        forgetting_dataset=str(alpaca),
        output_dir=str(tmp_path / "text_run"),
    )
    said = capsys.readouterr().out
    assert "text: 16 documents" in said and "split into windows (none cut)" in said
    before, after = text["heldout_before"], text["heldout_after"]
    assert before["rows"] == after["rows"] > 0 and after["response_perplexity"] > 1  # held-out documents' windows
    forgot = text["forgetting"]["after"]  # 20% of the 40 rows; those over 128 tokens skipped and counted
    assert set(text["forgetting"]) == {"before", "after"} and forgot["rows"] + len(forgot["skipped"]) == 8
    record = read_record(text["adapter_dir"])
    assert record["dataset_format"] == "text"
    fmt = recorded_data_format(record)
    assert isinstance(fmt, TextFormat) and fmt.prompt(tokenizer, "The assert statement") == "The assert statement"
    assert text["samples"][0]["instruction"] == "The assert statement"

    alpaca_run = _run(
        tmp_path,
        model_name=str(model_dir),
        dataset=str(alpaca),
        adapter_name_or_path=text["adapter_dir"],
        output_dir=str(tmp_path / "alpaca_run"),
    )
    said = capsys.readouterr().out
    assert f"continuing the adapter in {text['adapter_dir']}" in said
    assert read_record(alpaca_run["adapter_dir"])["dataset_format"] == "alpaca"
    config = json.loads((Path(alpaca_run["adapter_dir"]) / "adapter_config.json").read_text())
    assert config["r"] == 4
