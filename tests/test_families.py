"""Model families on tiny randomly initialised models of each architecture, built here from a config, with
tokenizers carrying each family's special tokens and real chat template (see tests/chat_fixtures.py): LoRA
lands on the right modules (Phi-3's fused ones included), the pad token is never EOS, a template whose
end-of-turn token the generation config does not stop on is refused, one training step runs on real Alpaca
one-turn conversations + the multi-turn fixture, and generation stops on the family's stop tokens."""

import pytest

from chat_fixtures import cpu_trl_cannot_train, family_tokenizer, multiturn_rows, tiny_model
from helpers import alpaca_rows, sft_trainer
from tinyllama_ft.data.chat_masks import assistant_supervision, tokenize_conversations
from tinyllama_ft.data.conversations import check_conversations
from tinyllama_ft.config.finetune import LLAMA_TARGET_MODULES as LLAMA_TARGETS
from tinyllama_ft.models.families import PHI3_TARGETS, lora_target_modules, prepare_family, rope_limits
from tinyllama_ft.models.lora import add_lora

#: family fixture -> (family name, model_type, LoRA targets, end of turn, every stop token)
CASES = {
    "qwen2_5": ("qwen2.5", "qwen2", LLAMA_TARGETS, "<|im_end|>", ["<|im_end|>", "<|endoftext|>"]),
    "qwen3": ("qwen3", "qwen3", LLAMA_TARGETS, "<|im_end|>", ["<|im_end|>", "<|endoftext|>"]),
    "llama3_2": ("llama-3", "llama", LLAMA_TARGETS, "<|eot_id|>", ["<|eot_id|>"]),
    "phi3_5": ("phi-3", "phi3", PHI3_TARGETS, "<|end|>", ["<|end|>", "<|endoftext|>"]),
}


def conversations(alpaca_jsonl, n_alpaca=6):
    import datasets

    clean, _ = check_conversations(alpaca_rows(alpaca_jsonl, n_alpaca), dataset_format="alpaca")
    fixture, _ = check_conversations(multiturn_rows(), dataset_format="messages")
    return datasets.Dataset.from_list(clean + fixture)


@pytest.mark.parametrize("fixture", CASES)
def test_family_lora_pad_stop_and_one_training_step(fixture, alpaca_jsonl, tmp_path):
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    from tinyllama_ft.infer.chat_generation import chat_generate

    family, model_type, targets, eot, stops = CASES[fixture]
    tokenizer, spec = family_tokenizer(fixture)
    model = tiny_model(model_type, tokenizer, spec)
    setup = prepare_family(model, tokenizer, max_seq_length=512)
    assert (setup.family, setup.target_modules, setup.end_of_turn) == (family, targets, eot)
    assert setup.stop_token_ids[0] == tokenizer.convert_tokens_to_ids(eot)
    assert set(tokenizer.convert_tokens_to_ids(stops)) <= set(model.generation_config.eos_token_id)
    assert tokenizer.pad_token not in (tokenizer.eos_token, eot) and model.config.pad_token_id == tokenizer.pad_token_id
    assert setup.rope.max_position_embeddings == spec["config"]["max_position_embeddings"] and setup.rope.fits
    assert (
        setup.pad_token
        == {
            "qwen2_5": "<|vision_pad|>",
            "qwen3": "<|vision_pad|>",
            "llama3_2": "<|finetune_right_pad_id|>",
            "phi3_5": "<unk>",
        }[fixture]
    )
    if fixture == "llama3_2":
        assert setup.rope.rope_type == "llama3" and setup.pad_token == "<|finetune_right_pad_id|>"

    peft_model = add_lora(
        model, lora_r=4, lora_alpha=8, target_modules=setup.target_modules, gradient_checkpointing=False
    )
    adapted = {n.split(".")[-1] for n, m in peft_model.named_modules() if hasattr(m, "lora_A")}
    assert adapted == set(targets) and lora_target_modules(peft_model) == targets

    train, report = tokenize_conversations(conversations(alpaca_jsonl), tokenizer, max_seq_length=512)
    assert report.dropped == 0
    trainer = sft_trainer(
        peft_model,
        tokenizer,
        train,
        tmp_path,
        max_seq_length=512,
        max_steps=1,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        learning_rate=1e-3,
        logging_steps=1,
    )
    eot_id = tokenizer.convert_tokens_to_ids(eot)
    check = assistant_supervision(trainer, eot_id, batches=None)
    assert check["samples"] == len(train) and check["samples_ok"] == check["samples"]
    assert check["runs"] == sum(m["role"] == "assistant" for r in conversations(alpaca_jsonl)["messages"] for m in r)
    if not cpu_trl_cannot_train():  # TRL 1.15 on a CPU: batches checked above, the step needs a GPU
        trainer.train()
        assert torch.isfinite(torch.tensor(trainer.state.log_history[-1]["train_loss"]))

    class ForceAt(LogitsProcessor):  # emit token `token_id` as the 4th new token
        def __init__(self, start, token_id):
            self.start, self.token_id = start, token_id

        def __call__(self, input_ids, scores):
            if input_ids.shape[1] - self.start == 3:
                scores[:, :] = -float("inf")
                scores[:, self.token_id] = 0
            return scores

    prompt_len = len(
        tokenizer(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
            ),
            add_special_tokens=False,
        ).input_ids
    )
    for stop in stops:
        ids = chat_generate(
            peft_model,
            tokenizer,
            "Hi",
            max_new_tokens=10,
            return_ids=True,
            logits_processor=LogitsProcessorList([ForceAt(prompt_len, tokenizer.convert_tokens_to_ids(stop))]),
        )
        assert len(ids[0]) == 3, stop  # stopped at the forced stop token, which is cut off
    other = tokenizer.convert_tokens_to_ids("Hello") if "Hello" in tokenizer.get_vocab() else 100
    ids = chat_generate(
        peft_model,
        tokenizer,
        "Hi",
        max_new_tokens=10,
        return_ids=True,
        logits_processor=LogitsProcessorList([ForceAt(prompt_len, other)]),
    )
    assert len(ids[0]) >= 4 and ids[0][3] == other  # a forced non-stop token is kept and generation goes on


def test_template_eos_not_in_generation_config_is_refused():
    tokenizer, spec = family_tokenizer("qwen2_5")
    spec = {**spec, "generation_eos_tokens": ["<|endoftext|>"]}  # a Qwen base model's generation config
    model = tiny_model("qwen2", tokenizer, spec)
    with pytest.raises(ValueError, match=r"ends assistant turns with '<\|im_end\|>' .* stops on eos_token_id=\[\d+\]"):
        prepare_family(model, tokenizer)


def test_llama2_base_gets_zephyr_and_keeps_eos(tinyllama_tokenizer):
    import copy

    tokenizer = copy.deepcopy(tinyllama_tokenizer)
    model = tiny_model("llama", tokenizer)
    setup = prepare_family(model, tokenizer)
    assert (setup.family, setup.end_of_turn, setup.pad_token, setup.added_token_ids) == ("llama-2", "</s>", "<unk>", [])
    assert "<|assistant|>" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
    )


def test_rope_limits_flag_a_window_past_the_trained_positions(tinyllama_dir):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(tinyllama_dir))
    assert rope_limits(config, max_seq_length=2048).fits and not rope_limits(config, max_seq_length=4096).fits
    assert rope_limits(config, max_seq_length=4096).max_position_embeddings == 2048
