"""Rows longer than max_seq_length: counted before training, and each policy's effect on the trainer's real
packed (or truncated) train_dataset. Real TinyLlama / stories260K tokenizers, real Alpaca rows, real trainers."""

import time
from collections import Counter

import pytest

from conftest import ALPACA_ROWS

from helpers import alpaca_rows, sft_trainer, stories_lora, text_dataset
from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.data.instructions import check_rows
from tinyllama_ft.machine.hardware import Hardware
from tinyllama_ft.config.packing import resolve_packing_strategy
from tinyllama_ft.data.lengths import apply_long_rows, length_report
from tinyllama_ft.data.alpaca_prompts import format_prompt

WINDOW = 256  # tokens: small enough that many real rows overflow it, on both tokenizers


def direct(tokenizer, rows):
    """The oracle: one plain tokenizer call per row, full text and prompt alone (as the trainer would see)."""
    full = [
        tokenizer(format_prompt(r["instruction"], r["input"], r["output"]) + tokenizer.eos_token)["input_ids"]
        for r in rows
    ]
    prompt = [len(tokenizer(format_prompt(r["instruction"], r["input"], ""))["input_ids"]) for r in rows]
    return full, prompt


@pytest.fixture(scope="module")
def all_rows(alpaca_jsonl):
    return alpaca_rows(alpaca_jsonl, ALPACA_ROWS)


@pytest.fixture(scope="module")
def tinyllama_case(tinyllama_tokenizer, all_rows):
    return text_dataset(all_rows, tinyllama_tokenizer), *direct(tinyllama_tokenizer, all_rows)


def test_counts_equal_a_direct_per_row_tokenization_of_every_row(tinyllama_tokenizer, tinyllama_case):
    ds, full, prompt = tinyllama_case
    start = time.perf_counter()
    report = length_report(ds, tinyllama_tokenizer, max_seq_length=WINDOW, packing=True, packing_strategy="bfd")
    seconds = time.perf_counter() - start
    print(f"length_report: {len(ds)} rows in {seconds:.2f} s")
    assert len(ds) == ALPACA_ROWS and seconds < 20  # batched: about 1 s on two shared cores
    bos, eos = tinyllama_tokenizer.bos_token_id, tinyllama_tokenizer.eos_token_id
    assert all(ids[0] == bos and ids[-1] == eos for ids in full)
    assert report.lengths == [len(ids) for ids in full]  # BOS and the one EOS counted, nothing truncated
    assert report.long == [i for i, ids in enumerate(full) if len(ids) > WINDOW]
    assert report.prompt_overflow == [i for i, n in enumerate(prompt) if n >= WINDOW]
    assert report.longest == max(map(len, full)) and report.rows == ALPACA_ROWS
    assert len(report.long) > 400 and 0 < len(report.prompt_overflow) < 30  # real long rows of both kinds (484, 13)
    # a row exactly max_seq_length tokens long fits: it is not counted
    at = next(i for i, ids in enumerate(full) if len(ids) >= 40)
    exact = length_report(ds.select([at]), tinyllama_tokenizer, max_seq_length=len(full[at]), packing=True)
    assert exact.long == [] and length_report(
        ds.select([at]), tinyllama_tokenizer, max_seq_length=len(full[at]) - 1, packing=True
    ).long == [0]


def test_prompt_only_overflow_starts_exactly_where_the_prompt_fills_the_window(tinyllama_tokenizer, all_rows):
    import datasets

    tok = tinyllama_tokenizer
    row = all_rows[5]  # a real row with a long input
    prompt_ids = tok(format_prompt(row["instruction"], row["input"], ""))["input_ids"]
    full_ids = tok(format_prompt(row["instruction"], row["input"], row["output"]) + tok.eos_token)["input_ids"]
    p = len(prompt_ids)
    assert full_ids[:p] == prompt_ids and len(full_ids) > p + 1  # the response starts at token p
    ds = text_dataset([row], tok)
    assert length_report(ds, tok, max_seq_length=p, packing=True).prompt_overflow == [
        0
    ]  # window = prompt: no response token fits
    assert (
        length_report(ds, tok, max_seq_length=p + 1, packing=True).prompt_overflow == []
    )  # the first response token fits
    assert length_report(ds, tok, max_seq_length=p + 1, packing=True).long == [0]
    # a text without EOS is measured with the EOS TRL appends to it
    bare = datasets.Dataset.from_dict({"text": [ds[0]["text"].removesuffix(tok.eos_token)]})
    assert length_report(bare, tok, max_seq_length=4096, packing=True).lengths == [len(full_ids)]


@pytest.mark.parametrize(
    "packing, strategy, says",
    [
        (True, "bfd", "'bfd' packing truncates each to its first 256 tokens: the rest, EOS included, is discarded"),
        (True, "bfd_split", "'bfd_split' packing splits each into pieces of at most 256 tokens"),
        (True, "wrapped", "'wrapped' packing cuts each at 256-token window edges"),
        (False, "bfd", "without packing TRL truncates each to its first 256 tokens"),
    ],
)
def test_summary_says_counts_longest_first_rows_and_what_the_strategy_does(
    tinyllama_tokenizer, tinyllama_case, packing, strategy, says
):
    ds, full, _ = tinyllama_case
    report = length_report(
        ds.select(range(100)), tinyllama_tokenizer, max_seq_length=WINDOW, packing=packing, packing_strategy=strategy
    )
    long = [i for i, ids in enumerate(full[:100]) if len(ids) > WINDOW]
    line = report.summary()
    assert "\n" not in line and says in line
    assert f"100 rows, longest {max(len(ids) for ids in full[:100])}; {len(long)} longer" in line
    assert f"(rows from 0: {', '.join(map(str, long[:5]))}, ...)" in line
    assert report.packing_strategy == (strategy if packing else None)


def test_messages_name_the_source_row_when_bad_rows_were_dropped(tinyllama_tokenizer, all_rows):
    raw = all_rows[:40]
    raw = raw[:1] + [{"instruction": "x", "input": "", "output": ""}] + raw[1:]  # source row 1: empty output
    clean, data_report = check_rows(raw)
    assert data_report.dropped == 1
    ds = text_dataset(clean, tinyllama_tokenizer)
    report = length_report(ds, tinyllama_tokenizer, max_seq_length=WINDOW, packing=True, data_report=data_report)
    full, _ = direct(tinyllama_tokenizer, raw)
    source_long = [i for i, ids in enumerate(full) if i != 1 and len(ids) > WINDOW]
    assert [report.source_index(i) for i in report.long] == source_long
    assert f"source rows from 0: {', '.join(map(str, source_long[:5]))}" in report.summary()
    with pytest.raises(ValueError, match="data_report kept 40 rows but the dataset has 39"):
        length_report(
            ds.select(range(39)), tinyllama_tokenizer, max_seq_length=WINDOW, packing=True, data_report=data_report
        )


@pytest.mark.parametrize("policy", ["drop", "truncate"])
def test_every_row_too_long_is_an_error_not_a_zero_step_run(tinyllama_tokenizer, tinyllama_case, policy):
    ds = tinyllama_case[0].select(range(200))
    report = length_report(
        ds, tinyllama_tokenizer, max_seq_length=16, packing=True
    )  # the template alone is longer than 16 tokens
    assert len(report.long) == len(report.prompt_overflow) == 200
    message = rf"long_rows='{policy}' leaves no rows: all 200 are longer than max_seq_length=16"
    with pytest.raises(ValueError, match=message):
        apply_long_rows(ds, report, policy=policy)


def test_policy_must_fit_the_packing(tinyllama_tokenizer, tinyllama_case):
    assert FinetuneConfig(long_rows="split").packing_strategy == "bfd_split"
    assert FinetuneConfig().long_rows == "drop"
    for fields, match in [
        (dict(long_rows="cut"), r"FinetuneConfig\.long_rows='cut' is not allowed"),
        (dict(long_rows="split", packing=False), r"long_rows='split' needs FinetuneConfig\.packing=True"),
        (dict(long_rows="split", packing_strategy="wrapped"), r"not 'wrapped'"),
        (dict(long_rows="truncate", packing_strategy="bfd_split"), r"contradicts FinetuneConfig\.packing_strategy="),
    ]:
        with pytest.raises(ValueError, match=match):
            FinetuneConfig(**fields)
    assert resolve_packing_strategy("truncate", False, "bfd_split") == "bfd_split"  # ignored without packing
    ds = tinyllama_case[0].select(range(20))
    with pytest.raises(ValueError, match="long_rows='split' needs packing_strategy='bfd_split'"):
        apply_long_rows(
            ds,
            length_report(ds, tinyllama_tokenizer, max_seq_length=WINDOW, packing=True, packing_strategy="bfd"),
            policy="split",
        )
    with pytest.raises(ValueError, match="the dataset has 19 rows but the report measured 20"):
        apply_long_rows(
            ds.select(range(19)),
            length_report(ds, tinyllama_tokenizer, max_seq_length=WINDOW, packing=True),
            policy="drop",
        )


# --- each policy on the trainer's real train_dataset (stories260K, window 256 tokens) ---------------------------


@pytest.fixture(scope="module")
def stories_case(stories_tokenizer, all_rows):
    """Real rows in file order: 16 that fit, 10 too long, 3 whose prompt alone fills the window."""
    full, prompt = direct(stories_tokenizer, all_rows[:400])
    fit = [i for i, ids in enumerate(full) if len(ids) <= WINDOW][:16]
    long = [i for i, ids in enumerate(full) if len(ids) > WINDOW and prompt[i] < WINDOW][:10]
    over = [i for i, n in enumerate(prompt) if n >= WINDOW][:3]
    picked = sorted(fit + long + over)
    assert len(picked) == 29
    ds = text_dataset([all_rows[i] for i in picked], stories_tokenizer)
    return ds, [full[i] for i in picked], [picked.index(i) for i in long], [picked.index(i) for i in over]


def segments(packed):
    """Every sample of a "bfd"/"bfd_split" packed dataset, as a tuple of token ids."""
    out = []
    for ids, lengths in zip(packed["input_ids"], packed["seq_lengths"]):
        start = 0
        for n in lengths:
            out.append(tuple(ids[start : start + n]))
            start += n
    return out


def prepared(stories_dir, stories_case, tmp_path, policy, **fields):
    ds, full, long, over = stories_case
    model, tokenizer = stories_lora(stories_dir, Hardware())
    cfg = FinetuneConfig(max_seq_length=WINDOW, long_rows=policy, **fields)
    report = length_report(
        ds, tokenizer, max_seq_length=WINDOW, packing=cfg.packing, packing_strategy=cfg.packing_strategy
    )
    assert report.long == sorted(long + over) and report.prompt_overflow == over  # what the oracle says
    kept, report = apply_long_rows(ds, report, policy=policy)
    trainer = sft_trainer(model, tokenizer, kept, tmp_path, max_seq_length=WINDOW, long_rows=policy, **fields)
    kept_ids = [full[i] for i in range(len(full)) if i not in set(report.dropped)]
    return trainer, report, kept_ids


def test_drop_leaves_no_truncated_row_in_the_packed_sequences(stories_dir, stories_case, tmp_path):
    trainer, report, kept_ids = prepared(stories_dir, stories_case, tmp_path, "drop")
    eos = trainer.processing_class.eos_token_id
    assert report.dropped == report.long and len(kept_ids) == 16
    assert "long_rows='drop': 13 dropped, 16 rows left" in report.summary()
    packed = segments(trainer.train_dataset)
    assert Counter(packed) == Counter(map(tuple, kept_ids))  # every sample is a whole row, each row once
    assert all(s[-1] == eos for s in packed) and all(len(ids) <= WINDOW for ids in trainer.train_dataset["input_ids"])


def test_truncate_cuts_exactly_the_rows_the_report_predicted(stories_dir, stories_case, tmp_path):
    _, full, long, over = stories_case
    trainer, report, kept_ids = prepared(stories_dir, stories_case, tmp_path, "truncate")
    eos = trainer.processing_class.eos_token_id
    assert report.dropped == over and report.kept_long == long
    packed = segments(trainer.train_dataset)
    assert Counter(packed) == Counter(tuple(ids[:WINDOW]) for ids in kept_ids)
    cut = [s for s in packed if s[-1] != eos]
    assert Counter(cut) == Counter(tuple(full[i][:WINDOW]) for i in report.kept_long)  # exactly the predicted rows
    assert sum(map(len, packed)) == sum(map(len, kept_ids)) - report.tokens_over
    line = report.summary()
    assert f"{len(over)} of them with the prompt alone >= {WINDOW} tokens" in line
    assert f"rows {', '.join(map(str, over))}; always dropped" in line
    assert f"{len(long)} long rows kept ({report.tokens_over} tokens past the window): 'bfd' packing truncates" in line


def test_truncate_without_packing_cuts_exactly_the_predicted_rows(stories_dir, stories_case, tmp_path):
    _, full, long, over = stories_case
    trainer, report, kept_ids = prepared(stories_dir, stories_case, tmp_path, "truncate", packing=False)
    eos = trainer.processing_class.eos_token_id
    rows = [tuple(ids) for ids in trainer.train_dataset["input_ids"]]
    assert Counter(rows) == Counter(tuple(ids[:WINDOW]) for ids in kept_ids)
    assert Counter(r for r in rows if r[-1] != eos) == Counter(tuple(full[i][:WINDOW]) for i in long)
    assert "without packing TRL truncates each to its first 256 tokens" in report.summary()


def test_split_keeps_every_token_of_the_long_rows(stories_dir, stories_case, tmp_path):
    _, full, long, over = stories_case
    trainer, report, kept_ids = prepared(stories_dir, stories_case, tmp_path, "split")
    assert trainer.args.packing_strategy == "bfd_split" and report.dropped == over
    packed = segments(trainer.train_dataset)
    assert sum(map(len, packed)) == sum(map(len, kept_ids))  # the token total is preserved
    pieces = [tuple(ids[k : k + WINDOW]) for ids in kept_ids for k in range(0, len(ids), WINDOW)]
    assert Counter(packed) == Counter(pieces)
    assert len(packed) == len(kept_ids) + sum(-(-len(full[i]) // WINDOW) - 1 for i in long)
    # each later piece restarts at position 0 without the prompt, and its first token is not a label
    bos, continued = trainer.processing_class.bos_token_id, 0
    for batch in trainer.get_train_dataloader():
        starts = batch["position_ids"] == 0
        assert bool((batch["labels"][starts] == -100).all())
        continued += int((batch["input_ids"][starts] != bos).sum())
    assert continued == len(packed) - len(kept_ids)


def test_wrapped_keeps_every_token_and_cuts_at_window_edges(stories_dir, stories_case, tmp_path):
    trainer, report, kept_ids = prepared(stories_dir, stories_case, tmp_path, "truncate", packing_strategy="wrapped")
    windows = trainer.train_dataset["input_ids"]
    assert sum(map(len, windows)) == sum(map(len, kept_ids))
    assert [len(w) for w in windows[:-1]] == [WINDOW] * (len(windows) - 1)  # cut at every edge, long rows or not
    assert [t for w in windows for t in w] == [t for ids in kept_ids for t in ids]
    assert "also cuts shorter rows at window edges" in report.summary()


def test_run_summary_records_the_length_report(tinyllama_tokenizer, tinyllama_case):
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.summary import build_run_summary

    ds = tinyllama_case[0].select(range(100))
    kept, report = apply_long_rows(
        ds, length_report(ds, tinyllama_tokenizer, max_seq_length=WINDOW, packing=True), policy="drop"
    )
    cfg = FinetuneConfig(max_seq_length=WINDOW)
    summary = build_run_summary(
        cfg=cfg,
        plan=plan_run(
            cfg, Hardware(), {"num_hidden_layers": 1, "hidden_size": 8, "intermediate_size": 8, "vocab_size": 8}
        ),
        hardware=Hardware(),
        results={},
        length_report=report,
    )
    assert summary["lengths"]["dropped"] == len(report.long) == 100 - len(kept)
    assert summary["lengths"]["long_row_indices"] == report.long[:20] and summary["lengths"]["policy"] == "drop"
    assert summary["lengths"]["kept_long_rows"] == 0 and summary["lengths"]["tokens_past_window"] == 0
