"""Named chat templates on a base model without one (the real TinyLlama / Llama-2 tokenizer, a tiny random
Llama): the template's tokens are added and the embeddings resized, EOS and the generation config follow the
end-of-turn token, and the masks close every assistant turn on it (real Alpaca rows as one-turn turns)."""

import copy

import pytest

from chat_fixtures import multiturn_rows, tiny_model
from helpers import alpaca_rows
from tinyllama_ft.data.chat_masks import show_supervision, tokenize_conversation
from tinyllama_ft.models.chat_templates import NAMED_TEMPLATES, check_stop_tokens, set_chat_template, template_text
from tinyllama_ft.data.conversations import alpaca_to_messages


@pytest.mark.parametrize(
    "name,eot,added", [("chatml", "<|im_end|>", 2), ("llama-3", "<|eot_id|>", 3), ("zephyr", "</s>", 0)]
)
def test_named_template_on_a_llama2_base(name, eot, added, tinyllama_tokenizer, alpaca_jsonl):
    tokenizer = copy.deepcopy(tinyllama_tokenizer)
    assert not tokenizer.chat_template
    model = tiny_model("llama", tokenizer)
    rows_before = model.get_input_embeddings().weight.shape[0]
    with pytest.raises(ValueError, match="has no chat template"):
        set_chat_template(tokenizer, model, chat_template="auto")
    fmt = set_chat_template(tokenizer, model, chat_template=name)
    eot_id = tokenizer.convert_tokens_to_ids(eot)
    assert (fmt.name, fmt.end_of_turn, len(fmt.added_token_ids), fmt.stop_token_ids[0]) == (name, eot, added, eot_id)
    assert model.get_input_embeddings().weight.shape[0] == rows_before + added == len(tokenizer)
    assert tokenizer.eos_token == eot and eot_id in model.generation_config.eos_token_id
    assert check_stop_tokens(tokenizer, model) == eot_id and tokenizer.pad_token != eot
    for row in alpaca_rows(alpaca_jsonl, 20):
        messages = alpaca_to_messages(row["instruction"], row["input"], row["output"])
        enc = tokenize_conversation(tokenizer, messages)
        supervised = [i for i, m in zip(enc["input_ids"], enc["assistant_masks"]) if m]
        assert supervised[-1] == eot_id and supervised.count(eot_id) == 1
        assert tokenizer.decode(supervised[:-1]).strip() == row["output"].strip()
    multi = multiturn_rows()[8]["messages"]
    enc = tokenize_conversation(tokenizer, multi)
    assert sum(1 for i, m in zip(enc["input_ids"], enc["assistant_masks"]) if m and i == eot_id) == 2
    assert "[[It closes a turn: the text <|im_end|> marks where a message ends." in show_supervision(
        tokenizer, enc["input_ids"], enc["assistant_masks"]
    )


def test_named_template_sources():
    assert "<|start_header_id|>" in template_text("llama-3")  # the copy TRL's wheel ships
    assert set(NAMED_TEMPLATES) == {"chatml", "zephyr", "llama-3"}
    with pytest.raises(ValueError, match=r"chat_template='vicuna': not one of \['chatml', 'llama-3', 'zephyr'\]"):
        template_text("vicuna")


def test_an_alpaca_export_template_starts_with_bos_only_where_training_prompts_did(tinyllama_tokenizer):
    """The exported Alpaca template renders the training prompt's tokens exactly: TinyLlama's tokenizer adds BOS, so
    the template starts with it; SmolLM2's adds none (its ``bos_token`` is ``<|im_start|>``), so a template starting
    with ``bos_token`` would put a token before the prompt that its training never saw."""
    from chat_fixtures import smollm2_tokenizer
    from tinyllama_ft.data.formats import AlpacaFormat

    fmt = AlpacaFormat("alpaca")
    message = [{"role": "user", "content": "Name a colour."}]
    for tokenizer in (tinyllama_tokenizer, smollm2_tokenizer()):
        tokenizer = copy.copy(tokenizer)
        tokenizer.chat_template = fmt.exported_chat_template(tokenizer)
        rendered = tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
        prompt = fmt.prompt(tokenizer, "Name a colour.")
        adds = tokenizer(prompt)["input_ids"][0] == tokenizer.bos_token_id  # as the training rows were encoded
        assert rendered == (tokenizer.bos_token if adds else "") + prompt, tokenizer.name_or_path
    assert adds is False  # SmolLM2's, the last one: the case the template got wrong
