"""Held-out scores, stopping count and the side-by-side table on real models (stories260K; SmolLM2 is slow)."""

from __future__ import annotations

import math

import pytest

from helpers import alpaca_rows, stories_lora
from tinyllama_ft.data.formats import AlpacaFormat
from tinyllama_ft.evaluate import held_out as evaluation
from tinyllama_ft.evaluate.side_by_side import answers_html, answers_table, compare_answers, show_answers

#: The format every helper here is told explicitly: none falls back to Alpaca.
ALPACA = AlpacaFormat()


@pytest.fixture(scope="session")
def stories_peft(stories_dir, cpu):
    return stories_lora(stories_dir, cpu, max_seq_length=512)


@pytest.fixture(scope="session")
def rows(alpaca_jsonl):
    return alpaca_rows(alpaca_jsonl, 12)


def _reference(model, tokenizer, row):
    """The same three numbers from transformers' own loss (labels) on one row, as training computes it."""
    import torch

    from tinyllama_ft.data.tokenization import alpaca_segments, tokenize_segments

    ids, mask = tokenize_segments([alpaca_segments(row["instruction"], row["input"], row["output"])], tokenizer)
    input_ids = torch.tensor(ids)
    labels = input_ids.masked_fill(torch.tensor(mask) == 0, -100)
    with torch.no_grad():
        full = model(input_ids=input_ids, labels=input_ids)
        resp = model(input_ids=input_ids, labels=labels)
    p_eos = torch.softmax(full.logits[0, -2].float(), -1)[tokenizer.eos_token_id].item()
    return resp.loss.item(), full.loss.item(), p_eos


@pytest.mark.parametrize(
    "helper",
    [
        evaluation.held_out_scores,
        evaluation.greedy_answers,
        evaluation.stopping_count,
        evaluation.held_out_check,
        evaluation.rows_within_positions,
        compare_answers,
    ],
)
def test_every_evaluation_helper_requires_the_data_format(helper, stories_peft, rows):
    """Before, a helper called without data_format scored a chat run as Alpaca without a word."""
    model, tokenizer = stories_peft
    with pytest.raises(TypeError, match="data_format"):
        helper(model, tokenizer, rows[:1], max_new_tokens=4) if helper is evaluation.rows_within_positions else helper(
            model, tokenizer, rows[:1]
        )
    with pytest.raises(TypeError, match="data_format"):
        evaluation.short_answer_rows(rows, tokenizer, n=1)


def test_scores_match_transformers_loss_and_do_not_depend_on_batching(stories_peft, rows):
    model, tokenizer = stories_peft
    one = [evaluation.held_out_scores(model, tokenizer, [r], data_format=ALPACA) for r in rows[:3]]
    for row, got in zip(rows[:3], one):
        resp, full, p_eos = _reference(model, tokenizer, row)
        assert got.response_loss == pytest.approx(resp, rel=1e-4)
        assert got.full_text_loss == pytest.approx(full, rel=1e-4)
        assert got.eos_probability == pytest.approx(p_eos, rel=1e-3, abs=1e-7)
    batched = evaluation.held_out_scores(model, tokenizer, rows[:3], batch_size=3, data_format=ALPACA)
    singles = evaluation.held_out_scores(model, tokenizer, rows[:3], batch_size=1, data_format=ALPACA)
    assert batched.response_loss == pytest.approx(singles.response_loss, rel=1e-4)
    assert batched.eos_probability == pytest.approx(singles.eos_probability, rel=1e-3)
    assert batched.response_perplexity == pytest.approx(math.exp(batched.response_loss))
    model.train()
    evaluation.held_out_scores(model, tokenizer, rows[:1], data_format=ALPACA)
    assert model.training  # the caller's mode is restored
    model.eval()


def test_long_rows_are_skipped_and_bad_rows_named(stories_peft, rows):
    model, tokenizer = stories_peft
    scores = evaluation.held_out_scores(model, tokenizer, rows, max_seq_length=200, data_format=ALPACA)
    assert scores.rows + len(scores.skipped) == len(rows) and scores.skipped
    with pytest.raises(ValueError, match="every row"):
        evaluation.held_out_scores(model, tokenizer, rows[:2], max_seq_length=5, data_format=ALPACA)
    with pytest.raises(ValueError, match="instruction/output"):
        evaluation.held_out_scores(model, tokenizer, [{"instruction": "x"}], data_format=ALPACA)


def test_stopping_count_counts_eos_endings(stories_peft, rows):
    model, tokenizer = stories_peft
    report = evaluation.stopping_count(model, tokenizer, rows[:3], max_new_tokens=6, batch_size=2, data_format=ALPACA)
    ids = evaluation.greedy_answers(model, tokenizer, rows[:3], max_new_tokens=6, batch_size=3, data_format=ALPACA)
    assert report.total == 3 and report.new_tokens == [len(a.ids) + a.stopped for a in ids]
    assert report.ended == [a.stopped for a in ids]
    assert all(tokenizer.eos_token_id not in a.ids and (a.stopped or len(a.ids) == 6) for a in ids)
    assert all(n <= 6 for n in report.new_tokens) and str(report).startswith(f"{report.stopped}/3")


def test_short_answer_rows(rows, stories_tokenizer):
    lengths = [len(stories_tokenizer(r["output"], add_special_tokens=False).input_ids) for r in rows]
    limit = sorted(lengths)[2]
    short = evaluation.short_answer_rows(rows, stories_tokenizer, n=3, max_tokens=limit, data_format=ALPACA)
    assert short == [r for r, n in zip(rows, lengths) if n <= limit][:3]
    with pytest.raises(ValueError, match="asked"):
        evaluation.short_answer_rows(rows, stories_tokenizer, n=50, data_format=ALPACA)


def test_compare_answers_uses_the_disabled_adapter(stories_peft, rows):
    import torch

    model, tokenizer = stories_peft
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    saved = [p.detach().clone() for p in lora_b]
    try:
        with torch.no_grad():  # a non-zero adapter, so tuned answers can differ from the base's
            for p in lora_b:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
        table = compare_answers(model, tokenizer, rows[:2], max_new_tokens=12, data_format=ALPACA)
        with model.disable_adapter():
            base = evaluation.greedy_answers(model, tokenizer, rows[:2], max_new_tokens=12, data_format=ALPACA)
        tuned = evaluation.greedy_answers(model, tokenizer, rows[:2], max_new_tokens=12, data_format=ALPACA)
    finally:
        with torch.no_grad():
            for p, s in zip(lora_b, saved):
                p.copy_(s)
    assert [r["base"] for r in table] == [tokenizer.decode(a.ids, skip_special_tokens=True).strip() for a in base]
    assert [r["tuned"] for r in table] == [tokenizer.decode(a.ids, skip_special_tokens=True).strip() for a in tuned]
    assert base != tuned
    text = answers_table(table)
    assert text.splitlines()[0] == "| instruction | base | tuned |" and len(text.splitlines()) == 4
    assert "<table>" in answers_html(table) and rows[0]["instruction"][:10] in text
    with pytest.raises(TypeError, match="merge"):
        compare_answers(model.get_base_model(), tokenizer, rows[:1], data_format=ALPACA)


def test_the_notebooks_held_out_check_and_its_summary_fields(stories_peft, rows, stories_tokenizer, capsys):
    import datasets

    model, tokenizer = stories_peft
    split = datasets.Dataset.from_list(rows[:6])
    held = ALPACA.held_out_rows(split)
    assert held == [{k: r[k] for k in ("instruction", "input", "output")} for r in rows[:6]]
    assert ALPACA.held_out_rows(None) == []
    assert evaluation.held_out_check(model, tokenizer, [], data_format=ALPACA) is None
    assert "held-out check skipped" in capsys.readouterr().out
    # no held-out rows (test_size=0, or one row): one line says so, and no empty table follows
    assert compare_answers(model, tokenizer, [], data_format=ALPACA) == []
    show_answers([])
    assert capsys.readouterr().out == "side-by-side answers skipped: no held-out rows\n"
    lengths = sorted(len(stories_tokenizer(r["output"], add_special_tokens=False).input_ids) for r in held)
    check = evaluation.held_out_check(model, tokenizer, held, max_seq_length=512, max_new_tokens=4, data_format=ALPACA)
    short = [
        r
        for r in held
        if len(stories_tokenizer(r["output"], add_special_tokens=False).input_ids) <= evaluation.SHORT_ANSWER_TOKENS
    ]
    assert check.stopping.total == len(short) == sum(n <= evaluation.SHORT_ANSWER_TOKENS for n in lengths)
    # exact: the check runs held_out_scores itself, with the same batches through the same kernels
    assert check.scores == evaluation.held_out_scores(model, tokenizer, held, max_seq_length=512, data_format=ALPACA)
    assert str(check).startswith("response loss ") and "answers ended with a stop token within 4 new tokens" in str(
        check
    )
    fields = evaluation.heldout_summary(check, check, [{"instruction": "x"}])
    assert fields["heldout_before"] == check.scores.as_dict() and fields["stop_total"] == len(short)
    assert fields["stopped_after"] == check.stopping.stopped and fields["side_by_side"] == [{"instruction": "x"}]
    assert evaluation.heldout_summary(None, None)["heldout_after"] is None
