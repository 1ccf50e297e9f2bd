"""Conversation rows: messages / ShareGPT layouts normalised, bad rows dropped and counted or named (strict).
Multi-turn rows are the hand-written fixture set (tests/fixtures/conversations, no real multi-turn set is
offline); one-turn rows are the real Alpaca-cleaned rows."""

import json
import re
from pathlib import Path

import pytest

from conftest import ALPACA_ROWS

from tinyllama_ft.data.conversations import alpaca_to_messages, check_conversations, load_conversations

FIXTURES = Path(__file__).parent / "fixtures" / "conversations"
MULTITURN = FIXTURES / "multiturn_fixture.jsonl"
SHAREGPT = FIXTURES / "multiturn_fixture_sharegpt.json"


def fixture_rows():
    with open(MULTITURN, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_messages_and_sharegpt_layouts_give_the_same_conversations():
    messages, report = load_conversations(str(MULTITURN))
    sharegpt, report2 = load_conversations(str(SHAREGPT))
    assert report.kept == report2.kept == 12 and report.dropped == report2.dropped == 0
    assert messages["messages"] == sharegpt["messages"] == [r["messages"] for r in fixture_rows()]
    assert (
        sum(m["role"] == "assistant" for r in messages["messages"] for m in r) == 26
    )  # 10 rows of 2 exchanges, 2 of 3


def test_alpaca_rows_become_one_turn_conversations(alpaca_jsonl):
    ds, report = load_conversations(str(alpaca_jsonl), dataset_format="auto")
    assert report.total == ALPACA_ROWS and len(ds) == report.kept
    with open(alpaca_jsonl, encoding="utf-8") as f:
        first = json.loads(f.readline())
    assert ds[0]["messages"] == alpaca_to_messages(first["instruction"], first["input"], first["output"])
    with_input = next(r for r in ds.select(range(50)) if "\n\n" in r["messages"][0]["content"])
    assert [m["role"] for m in with_input["messages"]] == ["user", "assistant"]


BAD = [
    (
        {"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]},
        "messages[0].role",
        "unknown role",
    ),
    (
        {"messages": [{"role": "user", "content": "  "}, {"role": "assistant", "content": "y"}]},
        "messages[0].content",
        "empty turn",
    ),
    (
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": 3}]},
        "messages[1].content",
        "wrong type",
    ),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant"}]}, "messages[1].content", "missing"),
    ({"messages": [{"role": "user", "content": "x"}, "hello"]}, "messages[1]", "wrong type"),
    ({"messages": "user: hi"}, "messages", "wrong type"),
    ({"messages": []}, "messages", "empty turn"),
    ({"messages": [{"role": "user", "content": "x"}]}, "messages", "no assistant turn"),
    ({"messages": [{"role": "system", "content": "s"}]}, "messages", "no assistant turn"),
    (
        {"messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]},
        "messages[0]",
        "out of order",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "user", "content": "y"},
                {"role": "assistant", "content": "z"},
            ]
        },
        "messages[1]",
        "out of order",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "system", "content": "s"},
                {"role": "assistant", "content": "z"},
            ]
        },
        "messages[1]",
        "out of order",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y"},
                {"role": "user", "content": "z"},
            ]
        },
        "messages[2]",
        "out of order",
    ),
    ({"text": "no turns"}, "messages", "missing"),
    ("a string row", "<row>", "not an object"),
]


@pytest.mark.parametrize("row,field,kind", BAD, ids=[b[2] + ":" + b[1] for b in BAD])
def test_bad_rows_are_dropped_and_counted_or_named_in_strict_mode(row, field, kind):
    good = fixture_rows()[:2]
    clean, report = check_conversations(good + [row], dataset_format="messages", source="f.jsonl")
    assert len(clean) == 2 and report.dropped == 1
    assert (report.bad[0].index, report.bad[0].field, report.bad[0].kind) == (2, field, kind)
    with pytest.raises(ValueError, match=re.escape(f"f.jsonl: row 2: field '{field}'")):
        check_conversations(good + [row], dataset_format="messages", source="f.jsonl", strict=True)


def test_sharegpt_unknown_role_and_duplicates(tmp_path):
    rows = json.loads(SHAREGPT.read_text(encoding="utf-8"))
    rows.append({"conversations": [{"from": "human", "value": "x"}, {"from": "function_call", "value": "{}"}]})
    rows.append(rows[0])
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    ds, report = load_conversations(str(path))
    assert len(ds) == 12 and report.by_reason == {"unknown role": 1, "duplicate": 1}
    assert str(report.bad[0]) == (
        "row 12: field 'conversations[1].from' is 'function_call', not one of "
        "['assistant', 'gpt', 'human', 'system', 'user']"
    )
    assert "duplicates row 0" in report.bad[1].reason


def test_unparseable_line_and_all_bad_source(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(MULTITURN.read_text(encoding="utf-8") + '{"messages": [\n', encoding="utf-8")
    ds, report = load_conversations(str(path))
    assert len(ds) == 12 and report.by_reason == {"unparseable": 1}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "only a question"}]}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no usable rows"):
        load_conversations(str(bad))


def test_parquet_source_and_unknown_format(tmp_path):
    import datasets

    path = tmp_path / "c.parquet"
    datasets.Dataset.from_list(fixture_rows()).to_parquet(str(path))
    ds, report = load_conversations(str(path), dataset_format="messages")
    assert report.kept == 12 and ds[8]["messages"][1]["content"].count("<|im_end|>") == 1  # special text kept as text
    with pytest.raises(ValueError, match="dataset_format='chatml' is not one of"):
        check_conversations(fixture_rows(), dataset_format="chatml")
    with pytest.raises(ValueError, match="expected 'messages', 'conversations'"):
        check_conversations([{"question": "q"}])


def test_several_sources_concatenate_in_order_with_one_report(tmp_path, alpaca_jsonl):
    from tinyllama_ft.data.conversations import load_conversation_sources

    bad = tmp_path / "mixed.jsonl"
    bad.write_text(
        MULTITURN.read_text(encoding="utf-8").splitlines()[0]
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "x"}]})
        + "\n",
        encoding="utf-8",
    )
    ds, report = load_conversation_sources([str(MULTITURN), str(bad)], dataset_format="auto")
    assert len(ds) == 13 and report.total == 14 and report.kept == 13
    assert report.by_reason == {"no assistant turn": 1} and report.bad[0].index == 1
    assert f"(in {bad})" in report.bad[0].reason and report.source == f"{MULTITURN} + {bad}"
    # 'duplicate' is per source: the first fixture row again in another file is kept
    assert ds["messages"][12] == ds["messages"][0] == fixture_rows()[0]["messages"]
    with pytest.raises(ValueError, match="no source given"):
        load_conversation_sources([])


def test_config_fields_for_conversations():
    from tinyllama_ft.models.chat_templates import NAMED_TEMPLATES
    import typing

    from tinyllama_ft.config.finetune import ConfigError, FinetuneConfig, NamedChatTemplate

    assert set(typing.get_args(NamedChatTemplate)) == set(NAMED_TEMPLATES)
    cfg = FinetuneConfig(
        dataset_format="sharegpt",
        chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}",
        extra_datasets="a.jsonl,b.jsonl",
        assistant_only_loss="false",
    )
    assert cfg.extra_datasets == ("a.jsonl", "b.jsonl") and cfg.assistant_only_loss is False
    with pytest.raises(ConfigError, match="chat_template='vicuna' is not allowed"):
        FinetuneConfig(chat_template="vicuna")
    with pytest.raises(ConfigError, match="dataset_format='chatml' is not allowed"):
        FinetuneConfig(dataset_format="chatml")
