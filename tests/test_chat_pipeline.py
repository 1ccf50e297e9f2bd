"""The chat run through the command line's function (``pipeline.run_training``, the one run for every
``dataset_format``, given ``formats.ConversationFormat``): a tiny random Llama with SmolLM2-135M-Instruct's real
tokenizer and ChatML template, saved as a model folder, on the hand-written multi-turn fixture set plus real
Alpaca rows as one-turn conversations. Every step runs: rows, family setup, masks, training, save, merged reload,
generation through the template, the held-out checks before and after, the side-by-side answers, the memory cap,
the run summary. (export_formats in a chat run, read back from the files: tests/test_console_script.py.)"""

import json

import pytest

from chat_fixtures import cpu_trl_cannot_train, tiny_chat_run


@pytest.mark.skipif(cpu_trl_cannot_train(), reason="TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
def test_run_training_takes_the_chat_path_for_conversations(alpaca_jsonl, tmp_path, monkeypatch):
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.machine import hardware
    from tinyllama_ft.pipeline import run_training

    capped = []
    real_cap = hardware.cap_gpu_memory
    monkeypatch.setattr(hardware, "cap_gpu_memory", lambda gib, hw=None: capped.append(gib) or real_cap(gib, hw))

    cfg = FinetuneConfig(
        **tiny_chat_run(alpaca_jsonl, tmp_path),
        output_dir=str(tmp_path / "out"),
        gpu_memory_cap_gib=12.0,  # a CPU has no GPU to cap: the run applies it, the helper says there is none
    )
    summary = run_training(cfg)
    assert capped == [12.0]
    written = json.loads((tmp_path / "out" / "run_summary.json").read_text(encoding="utf-8"))
    assert written["chat"] == summary["chat"]
    chat = summary["chat"]
    assert (chat["family"], chat["end_of_turn"], chat["pad_token"]) == ("smollm2", "<|im_end|>", "<|endoftext|>")
    assert chat["rows_tokenized"] == 52 and chat["rows_kept"] + sum(chat["rows_dropped"].values()) == 52
    assert chat["supervision"]["samples"] == chat["supervision"]["samples_ok"] > 0
    assert summary["data"]["rows_read"] == 52 and summary["global_step"] == 2
    assert [s["instruction"] for s in summary["samples"]] == ["Hi", "Name a color."]
    assert (tmp_path / "out" / "lora_model" / "adapter_config.json").is_file()
    assert (tmp_path / "out" / "loss_curve.png").is_file()
    # the held-out checks run for conversations too: scores before and after, the stopping count, the answers
    before, after = written["heldout_before"], written["heldout_after"]
    assert before["rows"] == after["rows"] > 0 and before["response_tokens"] == after["response_tokens"] > 0
    assert 0 <= before["eos_probability"] <= 1 and before["response_loss"] != after["response_loss"]
    assert written["stop_total"] is not None and written["stopped_after"] <= written["stop_total"]
    assert 0 < len(written["side_by_side"]) <= 4
    assert all(row["instruction"] and row["reference"] for row in written["side_by_side"])
