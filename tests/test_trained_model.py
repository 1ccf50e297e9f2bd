"""Every helper that takes a model works on the model just trained, in the same process (issue 10 item 7),
on the CPU plan; the GPU plans run in tests/gpu/test_gpu_trained_model.py. Also: a model that trains
with flex attention generates with SDPA and gets flex attention back afterwards."""

import pytest

from trained_model_driver import QUESTIONS, run


def test_every_helper_works_on_the_just_trained_model_on_the_cpu_plan(stories_dir, alpaca_jsonl, tmp_path):
    record = run("cpu", str(stories_dir), str(alpaca_jsonl), str(tmp_path), steps=2, rows=80, max_seq_length=256)
    assert record["backend"] == "transformers"
    failed = {k: v for k, v in record["calls"].items() if v != "ok"}
    assert not failed, failed
    answers = record["answers"]
    assert answers["stream_auto"] == answers["stream_plain"] == answers["generate_batch"]  # fp32 greedy
    assert answers["merged_stream_auto"] == answers["merged_generate_batch"] == answers["adapter_generate_batch"]
    assert record["merged_type"] != "PeftModel" and record["adapter_type"].startswith("PeftModel")
    assert all(a.strip() for a in answers["generate_batch"])


def test_flex_attention_is_swapped_for_sdpa_while_generating_and_restored(stories_dir):
    from tinyllama_ft.generation import generate
    from tinyllama_ft.hardware import Hardware
    from tinyllama_ft.inference_attention import attention_implementation, sdpa_while_generating
    from tinyllama_ft.lora import add_lora
    from tinyllama_ft.modeling import load_model

    model, tokenizer = load_model(str(stories_dir), max_seq_length=256, dtype="float32", load_in_4bit=False,
                                  backend="transformers", hardware=Hardware(), attn_implementation="flex_attention")
    model = add_lora(model, gradient_checkpointing=False)
    assert attention_implementation(model) == "flex_attention"
    with sdpa_while_generating(model) as used:
        assert used == "sdpa" and attention_implementation(model) == "sdpa"
        inner = model.get_base_model().model.layers[0].self_attn.config._attn_implementation
        assert inner == "sdpa"
    assert attention_implementation(model) == "flex_attention"
    with pytest.raises(RuntimeError, match="boom"), sdpa_while_generating(model):
        raise RuntimeError("boom")
    assert attention_implementation(model) == "flex_attention"
    answers = generate(model, tokenizer, QUESTIONS, max_new_tokens=12)
    assert len(answers) == 2 and attention_implementation(model) == "flex_attention"
