"""Generation: stops at EOS without EOS text, batches several instructions, streams what it returns."""

import pytest

from helpers import stories_lora
from tinyllama_ft.generation import generate, stream
from tinyllama_ft.prompts import format_prompt


class ForceEosAt:
    """A logits processor that makes EOS the only choice at new-token step ``k`` (0-based)."""

    def __init__(self, prompt_length: int, k: int, eos_id: int):
        self.at, self.eos = prompt_length + k, eos_id

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] == self.at:
            scores[:] = float("-inf")
            scores[:, self.eos] = 0.0
        return scores


@pytest.fixture(scope="module")
def model_and_tokenizer(stories_dir):
    from tinyllama_ft.hardware import Hardware

    return stories_lora(stories_dir, Hardware())


@pytest.mark.parametrize("k", [0, 5])
def test_output_ends_at_forced_eos_and_holds_no_eos_text(model_and_tokenizer, k):
    from transformers import LogitsProcessorList

    model, tokenizer = model_and_tokenizer
    instruction = "Tell me a story about a cat."
    prompt_length = len(tokenizer(format_prompt(instruction)).input_ids)
    free = generate(model, tokenizer, instruction, max_new_tokens=20)[0]
    forced = generate(model, tokenizer, instruction, max_new_tokens=20,
                      logits_processor=LogitsProcessorList([ForceEosAt(prompt_length, k, tokenizer.eos_token_id)]))[0]
    assert tokenizer.eos_token not in forced
    expected = tokenizer.decode(tokenizer(free, add_special_tokens=False).input_ids[:k]) if k else ""
    assert forced == expected and len(free) > len(forced)


def test_many_instructions_in_one_batch_match_one_at_a_time(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    questions = ["What is the capital of France?", "Write a haiku about the sea, please, in detail."]
    together = generate(model, tokenizer, questions, max_new_tokens=16)
    alone = [generate(model, tokenizer, q, max_new_tokens=16)[0] for q in questions]
    assert together == alone
    assert tokenizer.padding_side == "right"  # restored after left-padded generation


def test_stream_prints_as_it_goes_and_returns_the_same_answer(model_and_tokenizer, capsys):
    model, tokenizer = model_and_tokenizer
    streamed = stream(model, tokenizer, ["What is the capital of France?"], max_new_tokens=16)
    printed = capsys.readouterr().out
    assert streamed == generate(model, tokenizer, "What is the capital of France?", max_new_tokens=16)
    assert streamed[0].strip() and streamed[0].strip() in printed


def test_sampling_knobs_are_used(model_and_tokenizer):
    import torch

    model, tokenizer = model_and_tokenizer
    torch.manual_seed(0)
    a = generate(model, tokenizer, "Tell me a story.", max_new_tokens=24, do_sample=True, temperature=1.5, top_p=0.95)
    torch.manual_seed(1)
    b = generate(model, tokenizer, "Tell me a story.", max_new_tokens=24, do_sample=True, temperature=1.5, top_p=0.95,
                 repetition_penalty=1.3)
    assert a != b


def test_inputs_must_match_instructions(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match="inputs has 1 items for 2 instructions"):
        generate(model, tokenizer, ["a", "b"], inputs=["x"])
