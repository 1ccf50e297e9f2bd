"""Alpaca templates, EOS once, and the batched map function, on real rows and the real tokenizer."""

import json
from itertools import islice

import datasets
import pytest

from tinyllama_ft.data.alpaca_prompts import add_eos, format_prompt, make_formatting_func, training_text

WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n"
    "\n"
    "### Instruction:\n"
    "Translate to French.\n"
    "\n"
    "### Input:\n"
    "Good morning\n"
    "\n"
    "### Response:\n"
    "Bonjour"
)

WITHOUT_INPUT = (  # the article's template keeps the Input block, empty
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n"
    "\n"
    "### Instruction:\n"
    "Name a colour.\n"
    "\n"
    "### Input:\n"
    "\n"
    "\n"
    "### Response:\n"
    "Blue"
)

NO_INPUT_VARIANT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n"
    "\n"
    "### Instruction:\n"
    "Name a colour.\n"
    "\n"
    "### Response:\n"
    "Blue"
)


def test_template_with_input():
    assert format_prompt("Translate to French.", "Good morning", "Bonjour") == WITH_INPUT


def test_template_without_input_keeps_input_block():
    assert format_prompt("Name a colour.", "", "Blue") == WITHOUT_INPUT


def test_no_input_variant():
    assert format_prompt("Name a colour.", "", "Blue", template="alpaca_no_input") == NO_INPUT_VARIANT
    # with an input, the no-input template falls back to the full one
    assert format_prompt("Translate to French.", "Good morning", "Bonjour", template="alpaca_no_input") == WITH_INPUT


def test_unknown_template_raises():
    with pytest.raises(ValueError, match="chatml"):
        format_prompt("x", template="chatml")


def test_eos_appended_exactly_once():
    assert add_eos("abc", "</s>") == "abc</s>"
    assert add_eos("abc</s>", "</s>") == "abc</s>"
    assert training_text("Name a colour.", "", "Blue", "</s>") == WITHOUT_INPUT + "</s>"


def test_missing_eos_token_raises():
    with pytest.raises(ValueError, match="eos_token"):
        make_formatting_func(None)


def test_generation_prompt_ends_with_response_marker():
    prompt = format_prompt("What is the capital of France?")
    assert prompt.endswith("### Response:\n")
    assert prompt.count("### Response:") == 1


@pytest.fixture(scope="module")
def real_rows(alpaca_jsonl):
    with open(alpaca_jsonl, encoding="utf-8") as f:
        return [json.loads(line) for line in islice(f, 50)]


def test_batched_map_on_real_rows(real_rows):
    ds = datasets.Dataset.from_list(real_rows)
    out = ds.map(make_formatting_func("</s>"), batched=True, batch_size=16)
    assert len(out) == 50
    for row in out:
        assert row["text"] == format_prompt(row["instruction"], row["input"], row["output"]) + "</s>"
        assert row["text"].count("</s>") == 1


def test_other_column_names_and_missing_input(real_rows):
    ds = datasets.Dataset.from_list([{"q": r["instruction"], "a": r["output"]} for r in real_rows[:8]])
    f = make_formatting_func(
        "</s>", template="alpaca_no_input", instruction_column="q", output_column="a", text_column="prompt"
    )
    out = ds.map(f, batched=True)
    assert out[0]["prompt"] == training_text(
        real_rows[0]["instruction"], "", real_rows[0]["output"], "</s>", template="alpaca_no_input"
    )
    assert "### Input:" not in out[0]["prompt"]


def test_none_input_counts_as_empty():
    f = make_formatting_func("</s>")
    batch = {"instruction": ["Name a colour."], "input": [None], "output": ["Blue"]}
    assert f(batch) == {"text": [WITHOUT_INPUT + "</s>"]}


def test_tokenized_training_text_ends_with_one_eos(tinyllama_tokenizer, real_rows):
    tok = tinyllama_tokenizer
    assert tok.eos_token_id == 2
    row = real_rows[1]
    ids = tok(training_text(row["instruction"], row["input"], row["output"], tok.eos_token))["input_ids"]
    assert ids[-1] == 2
    assert ids.count(2) == 1


def test_non_ascii_round_trip(tinyllama_tokenizer):
    tok = tinyllama_tokenizer
    text = training_text("नमस्ते दुनिया का अनुवाद करें", "你好，世界", "Hello, world 🌍🦙 café", tok.eos_token)
    ids = tok(text)["input_ids"]
    assert ids.count(tok.eos_token_id) == 1 and tok.unk_token_id not in ids
    assert tok.decode(ids, skip_special_tokens=True) == text.removesuffix(tok.eos_token)
