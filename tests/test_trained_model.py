"""Every helper that takes a model works on the model just trained, in the same process (issue 10 item 7),
on the CPU plan; the GPU plans run in tests/gpu/test_gpu_trained_model.py. Also: a model that trains
with flex attention scores and generates with SDPA, through every helper that runs it, and gets flex attention
back afterwards."""

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


def test_flex_attention_is_swapped_for_sdpa_outside_training_and_restored(stories_dir):
    from tinyllama_ft.infer.generation import generate
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.models.attention import attention_implementation, sdpa_outside_training
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model

    model, tokenizer = load_model(
        str(stories_dir),
        max_seq_length=256,
        dtype="float32",
        load_in_4bit=False,
        backend="transformers",
        hardware=Hardware(),
        attn_implementation="flex_attention",
    )
    model = add_lora(model, gradient_checkpointing=False)
    assert attention_implementation(model) == "flex_attention"
    with sdpa_outside_training(model) as used:
        assert used == "sdpa" and attention_implementation(model) == "sdpa"
        inner = model.get_base_model().model.layers[0].self_attn.config._attn_implementation
        assert inner == "sdpa"
    assert attention_implementation(model) == "flex_attention"
    with pytest.raises(RuntimeError, match="boom"), sdpa_outside_training(model):
        raise RuntimeError("boom")
    assert attention_implementation(model) == "flex_attention"
    answers = generate(model, tokenizer, QUESTIONS, max_new_tokens=12)
    assert len(answers) == 2 and attention_implementation(model) == "flex_attention"


def _flex_stories(stories_dir, lora=True):
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model

    model, tokenizer = load_model(
        str(stories_dir),
        max_seq_length=256,
        dtype="float32",
        load_in_4bit=False,
        backend="transformers",
        hardware=Hardware(),
        attn_implementation="flex_attention",
    )
    return (add_lora(model, gradient_checkpointing=False) if lora else model), tokenizer


HELPERS = [
    "generate",
    "stream_plain",
    "held_out_scores",
    "preference_scores",
    "greedy_answers",
    "chat_generate",
    "chat_stream",
    "tryout",
]


@pytest.mark.parametrize("helper", HELPERS)
def test_every_helper_that_runs_the_model_outside_training_runs_it_on_sdpa(helper, stories_dir, alpaca_jsonl):
    """Flex attention outside training failed on the GPU (inductor recompiling it for a no-grad call found no
    kernel; inference_attention.py): each package helper that calls the model must call it on SDPA, and leave
    the model on flex attention for the training after."""
    import copy

    from helpers import alpaca_rows
    from tinyllama_ft.models.attention import attention_implementation

    model, tokenizer = _flex_stories(stories_dir)
    seen = []
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hook = base.model.layers[0].self_attn.register_forward_pre_hook(
        lambda module, args: seen.append(module.config._attn_implementation)
    )
    rows = alpaca_rows(alpaca_jsonl, 3)
    if helper == "generate":
        from tinyllama_ft.infer.generation import generate

        generate(model, tokenizer, QUESTIONS, max_new_tokens=4)
    elif helper.startswith("stream_"):
        from tinyllama_ft.infer.generation import stream

        stream(model, tokenizer, QUESTIONS[:1], max_new_tokens=4, decode=helper.split("_")[1])
    elif helper == "held_out_scores":
        from tinyllama_ft.evaluate.held_out import held_out_scores
        from tinyllama_ft.data.formats import AlpacaFormat

        held_out_scores(model, tokenizer, rows, data_format=AlpacaFormat())
    elif helper == "preference_scores":
        from tinyllama_ft.evaluate.preference_checks import preference_scores

        ids = tokenizer(["Once upon a time", " there was", " a cat"], add_special_tokens=False)["input_ids"]
        preference_scores(model, tokenizer, [{"prompt_ids": ids[0], "chosen_ids": ids[1], "rejected_ids": ids[2]}])
    elif helper == "greedy_answers":
        from tinyllama_ft.evaluate.held_out import greedy_answers
        from tinyllama_ft.data.formats import AlpacaFormat

        greedy_answers(model, tokenizer, rows, max_new_tokens=4, data_format=AlpacaFormat())
    elif helper.startswith("chat_"):
        from tinyllama_ft.infer import chat_generation
        from tinyllama_ft.models.chat_templates import set_chat_template

        tokenizer = copy.deepcopy(tokenizer)
        set_chat_template(tokenizer, model, chat_template="zephyr")
        getattr(chat_generation, helper)(model, tokenizer, [[{"role": "user", "content": "Hi"}]], max_new_tokens=4)
    else:
        ipywidgets = pytest.importorskip("ipywidgets")
        from tinyllama_ft.infer.tryout import answer_into

        answer_into(ipywidgets.Output(), model, tokenizer, QUESTIONS[0], max_new_tokens=4)
    hook.remove()
    assert seen and set(seen) == {"sdpa"}, seen
    assert attention_implementation(model) == "flex_attention"
    assert base.model.layers[0].self_attn.config._attn_implementation == "flex_attention"


def test_the_trainer_evaluates_on_sdpa_with_the_eval_loss_flex_attention_gives(stories_dir, alpaca_jsonl, tmp_path):
    """The eval loop of a flex-attention run runs on SDPA (trainer.sdpa_evaluating) and leaves the model on flex
    attention for training; its eval_loss on packed eval rows equals flex attention's, so the documents of a
    packed row stay apart under SDPA."""
    from helpers import alpaca_rows, sft_trainer
    from trl import SFTTrainer

    from tinyllama_ft.models.attention import attention_implementation

    model, tokenizer = _flex_stories(stories_dir)
    rows = alpaca_rows(alpaca_jsonl, 48)
    import datasets

    trainer = sft_trainer(
        model,
        tokenizer,
        datasets.Dataset.from_list(rows[:32]),
        tmp_path,
        eval_dataset=datasets.Dataset.from_list(rows[32:]),
        max_steps=1,
        max_seq_length=256,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        per_device_eval_batch_size=2,
        gradient_checkpointing=False,
    )
    batch = next(iter(trainer.get_eval_dataloader()))
    assert batch["position_ids"][0].tolist().count(0) > 1  # one packed row holds several documents
    seen = []
    hook = (
        model.get_base_model()
        .model.layers[0]
        .self_attn.register_forward_pre_hook(
            lambda module, args: seen.append((module.training, module.config._attn_implementation))
        )
    )
    on_sdpa = trainer.evaluate()["eval_loss"]
    trainer.evaluation_loop = SFTTrainer.evaluation_loop.__get__(trainer)  # TRL's own loop, on flex attention
    on_flex = trainer.evaluate()["eval_loss"]
    del trainer.evaluation_loop
    hook.remove()
    assert on_sdpa == pytest.approx(on_flex, rel=1e-5, abs=1e-6)
    half = len(seen) // 2  # the first evaluation's calls, then TRL's loop's
    assert seen[:half] == [(False, "sdpa")] * half and seen[half:] == [(False, "flex_attention")] * half
    assert attention_implementation(model) == "flex_attention"  # (training it: flex backward runs on GPUs only)
