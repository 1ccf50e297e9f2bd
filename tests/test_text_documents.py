"""dataset_format 'text' (continued pretraining): documents read from files or a text column, bad ones named and
counted, EOS after each, long ones split into windows (none cut), packed without attention across documents, the
held-out documents scored whole, and a text adapter prompted with raw text. Real stories260K model and tokenizer,
real TRL trainer, the shipped Python-reference corpus."""

import json
from pathlib import Path

import pytest

from helpers import sft_trainer, stories_lora
from tinyllama_ft.config.coercion import ConfigError
from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.data.formats import TextFormat, data_format, recorded_data_format
from tinyllama_ft.data.row_files import DataError
from tinyllama_ft.data.text_documents import chunk_ids, document_ids, load_documents, tokenize_documents

CORPUS = Path(__file__).resolve().parents[1] / "data" / "python_reference"
WINDOW = 64  # tokens: several corpus documents are longer, so they are split


@pytest.fixture(scope="session")
def text_folder(tmp_path_factory) -> Path:
    """Three good documents (.txt, .md, one in a subfolder), an empty, a binary and a Latin-1 file, and a file of
    another suffix that is not read."""
    root = tmp_path_factory.mktemp("docs")
    (root / "sub").mkdir()
    (root / "a.txt").write_text("The walrus operator binds a name inside an expression.\n", encoding="utf-8")
    (root / "b.md").write_text("# Lambdas\n\nA lambda is an anonymous function, café ☕.\n", encoding="utf-8")
    (root / "sub" / "c.txt").write_text("Generators yield values lazily.\n" * 3, encoding="utf-8")
    (root / "empty.txt").write_bytes(b"")
    (root / "binary.txt").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")  # an executable's header
    (root / "latin1.txt").write_bytes("caf\u00e9 au lait".encode("latin-1"))
    (root / "notes.json").write_text("[]", encoding="utf-8")
    return root


def test_a_folder_gives_one_document_per_text_file_and_names_each_bad_file(text_folder, capsys):
    docs, report = load_documents(str(text_folder))
    assert [d["text"].split()[0] for d in docs] == ["The", "#", "Generators"]  # sorted by path: a, b, sub/c
    assert docs[1]["text"] == "# Lambdas\n\nA lambda is an anonymous function, café ☕.\n"  # exactly as stored
    assert (report.total, report.kept, report.by_reason) == (6, 3, {"binary": 1, "empty": 1, "undecodable": 1})
    said = capsys.readouterr().out
    assert "6 rows read, 3 kept, 3 dropped" in said
    for name in ("binary.txt", "empty.txt", "latin1.txt"):
        assert name in said
    with pytest.raises(DataError, match=r"binary\.txt.*NUL byte"):
        load_documents(str(text_folder), strict=True)


def test_a_single_bad_file_and_a_folder_without_documents_are_one_line_errors(text_folder, tmp_path):
    with pytest.raises(DataError, match=r"(?s)no usable rows.*empty\.txt' is empty"):
        load_documents(str(text_folder / "empty.txt"))
    with pytest.raises(DataError, match=r"latin1\.txt.*not UTF-8"):
        load_documents(str(text_folder / "latin1.txt"), strict=True)


def test_a_text_column_is_read_and_a_row_without_it_is_named(tmp_path):
    path = tmp_path / "docs.jsonl"
    rows = [{"text": "first document"}, {"body": "no text here"}, {"text": 3}, {"text": "second"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    docs, report = load_documents(str(path))
    assert docs["text"] == ["first document", "second"]
    assert report.by_reason == {"missing": 1, "wrong type": 1}
    assert "row 1: field 'text' is missing (the row's columns: 'body')" in report.summary()
    only_body = tmp_path / "body.jsonl"
    only_body.write_text(json.dumps({"body": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"all 1 rows lack 'text'"):
        load_documents(str(only_body))


def test_the_config_picks_the_text_format_and_refuses_what_would_cut_or_misuse_documents(tmp_path):
    cfg = FinetuneConfig(dataset_format="text", max_seq_length=WINDOW, output_dir=str(tmp_path))
    assert cfg.packing_strategy == "bfd_split"  # long_rows 'drop' (the default) or 'split': a document is split
    fmt = data_format(cfg)
    assert isinstance(fmt, TextFormat) and fmt.max_seq_length == WINDOW
    for cutting in ({"long_rows": "truncate"}, {"packing": False}, {"packing_strategy": "wrapped"}):
        with pytest.raises(ConfigError, match=r"dataset_format='text'.*never cut"):
            FinetuneConfig(dataset_format="text", output_dir=str(tmp_path), **cutting)
    with pytest.raises(ConfigError, match=r"long_rows='split' does not apply to method='orpo'"):
        FinetuneConfig(dataset_format="text", long_rows="split", method="orpo", output_dir=str(tmp_path / "o"))


def test_chunks_cover_every_token_once():
    ids = list(range(10))
    assert chunk_ids(ids, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert chunk_ids(ids, 10) == [ids] and chunk_ids([], 3) == []
    with pytest.raises(ValueError, match="max_seq_length=0"):
        chunk_ids(ids, 0)


@pytest.fixture(scope="module")
def corpus(stories_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(stories_dir))
    docs, report = load_documents(str(CORPUS / "topics"))
    return tokenizer, docs, report


def test_the_shipped_corpus_is_72_documents_with_its_notice(corpus):
    _, docs, report = corpus
    assert (report.total, report.kept) == (72, 72)
    notice = (CORPUS / "NOTICE").read_text(encoding="utf-8")
    assert "Python Software Foundation License Version 2" in notice and "pydoc_data/topics.py" in notice


def test_each_document_ends_in_eos_with_the_loss_on_every_token_and_long_ones_are_counted(corpus):
    tokenizer, docs, _ = corpus
    ds, report = tokenize_documents(docs.select(range(12)), tokenizer, max_seq_length=WINDOW)
    lengths = [len(ids) for ids in ds["input_ids"]]
    assert all(ids[-1] == tokenizer.eos_token_id and ids.count(tokenizer.eos_token_id) == 1 for ids in ds["input_ids"])
    assert all(m == [1] * len(ids) for ids, m in zip(ds["input_ids"], ds["completion_mask"]))
    assert report.tokens == sum(lengths) and report.long == sum(n > WINDOW for n in lengths) > 0
    assert report.windows == sum(len(chunk_ids(ids, WINDOW)) for ids in ds["input_ids"])
    assert f"{report.long} longer than {WINDOW} tokens, split into windows (none cut)" in report.summary()


def test_the_chunk_report_is_in_the_run_summary(corpus, stories_dir):
    """What tokenize prints (documents, tokens, long ones, their windows) is recorded under "chunks" in
    run_summary.json, through the format's summary fields as the pipeline and the notebook pass them."""
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.summary import build_run_summary

    tokenizer, docs, _ = corpus
    cfg = FinetuneConfig(model_name=str(stories_dir), dataset_format="text", max_seq_length=WINDOW)
    fmt = TextFormat(WINDOW)
    rows = fmt.tokenize(docs.select(range(12)), tokenizer, cfg)
    fmt.first_batch = {"samples": 1}
    fields = fmt.summary_fields()
    summary = build_run_summary(cfg=cfg, plan=plan_run(cfg, Hardware()), hardware=Hardware(), results={}, **fields)
    lengths = [len(ids) for ids in rows["input_ids"]]
    chunks = json.loads(json.dumps(summary["chunks"]))
    assert chunks == {
        "documents": 12,
        "tokens": sum(lengths),
        "long": sum(n > WINDOW for n in lengths),
        "windows": sum(len(chunk_ids(ids, WINDOW)) for ids in rows["input_ids"]),
        "max_seq_length": WINDOW,
    }
    assert chunks["long"] > 0 and summary["plan"]["eos_first_batch"] == {"samples": 1}


def test_packed_documents_never_attend_across_and_no_token_is_cut(corpus, stories_dir, tmp_path):
    """TRL's bfd_split packing of the text format's rows: every window is at most max_seq_length tokens, the windows
    hold every document token exactly once (none cut), every token is a target, and each packed sample's logits
    equal those of the same tokens run alone (no attention across documents or windows)."""
    import torch

    from tinyllama_ft.machine.hardware import Hardware

    tokenizer, docs, _ = corpus
    model, tokenizer = stories_lora(stories_dir, Hardware())
    ds, report = tokenize_documents(docs.select(range(8)), tokenizer, max_seq_length=WINDOW)
    trainer = sft_trainer(
        model,
        tokenizer,
        ds,
        tmp_path,
        max_seq_length=WINDOW,
        dataset_format="text",
        long_rows="split",
        per_device_train_batch_size=4,
        max_steps=1,
    )
    packed = trainer.train_dataset
    windows = [  # each packed row's samples, by their lengths
        ids[sum(lengths[:i]) : sum(lengths[: i + 1])]
        for ids, lengths in zip(packed["input_ids"], packed["seq_lengths"])
        for i in range(len(lengths))
    ]
    assert len(windows) == report.windows and all(len(w) <= WINDOW for w in windows)
    assert sum(len(w) for w in windows) == report.tokens  # every token kept
    assert sorted(map(tuple, windows)) == sorted(tuple(w) for ids in ds["input_ids"] for w in chunk_ids(ids, WINDOW))
    batch = next(iter(trainer.get_train_dataloader()))
    ids, positions, labels = batch["input_ids"][0], batch["position_ids"][0], batch["labels"][0]
    starts = (positions == 0).nonzero().flatten().tolist() + [len(ids)]
    assert len(starts) > 2  # several samples packed in the batch
    # the loss on every token but each sample's first (no token of the sample before it predicts it)
    assert (labels == -100).nonzero().flatten().tolist() == starts[:-1]
    model.eval()
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0]
        for s, e in zip(starts, starts[1:]):
            alone = model(input_ids=ids[None, s:e]).logits[0]
            torch.testing.assert_close(packed[s:e], alone, atol=1e-4, rtol=1e-4)


def test_held_out_documents_are_scored_whole_in_training_windows(corpus):
    tokenizer, docs, _ = corpus
    fmt = TextFormat(WINDOW)
    rows = fmt.held_out_rows(docs.select(range(3)))
    ids, masks = fmt.score_ids(tokenizer, rows)
    whole = [t for r in rows for t in document_ids(tokenizer, r["text"])]
    assert [t for w in ids for t in w] == whole and all(len(w) <= WINDOW for w in ids)
    assert all(m == [1] * len(w) for w, m in zip(ids, masks))


def test_a_text_adapter_is_prompted_with_the_raw_text(corpus):
    tokenizer, docs, _ = corpus
    fmt = recorded_data_format({"dataset_format": "text", "max_seq_length": 128})
    assert isinstance(fmt, TextFormat) and fmt.max_seq_length == 128
    assert fmt.prompt(tokenizer, "The assert statement") == "The assert statement"
    assert fmt.stop_token_ids(tokenizer) == [tokenizer.eos_token_id]
    from jinja2 import Template

    rendered = Template(fmt.exported_chat_template(tokenizer)).render(messages=[{"role": "user", "content": "x = 1"}])
    assert rendered == "x = 1"
    assert fmt.ollama_template(tokenizer) == ("{{ .Prompt }}", [tokenizer.eos_token])
    with pytest.raises(ConfigError, match="template='alpaca'"):
        recorded_data_format({"dataset_format": "text"}, template="alpaca")


def test_the_forgetting_check_scores_the_alpaca_rows_an_alpaca_run_holds_out(
    corpus, stories_dir, alpaca_jsonl, tmp_path
):
    """forgetting_dataset: the held-out part of the Alpaca rows (the split an Alpaca run with the same test_size and
    seed makes) is scored beside the documents, and the run summary's held-out fields carry it before and after."""
    from tinyllama_ft.data.instructions import load_instruction_data, split_train_eval
    from tinyllama_ft.data.text_documents import forgetting_rows
    from tinyllama_ft.evaluate.held_out import held_out_check, heldout_summary
    from tinyllama_ft.machine.hardware import Hardware

    cfg = FinetuneConfig(
        dataset_format="text", forgetting_dataset=str(alpaca_jsonl), test_size=0.02, output_dir=str(tmp_path)
    )
    rows = forgetting_rows(cfg)
    alpaca, _ = load_instruction_data(str(alpaca_jsonl))
    assert rows == split_train_eval(alpaca, test_size=0.02, seed=cfg.seed)[1].to_list() and len(rows) >= 2
    assert forgetting_rows(FinetuneConfig(dataset_format="text", output_dir=str(tmp_path))) == []
    with pytest.raises(ConfigError, match="forgetting_dataset=.*dataset_format='text' only"):
        FinetuneConfig(forgetting_dataset=str(alpaca_jsonl), output_dir=str(tmp_path))

    model, tokenizer = stories_lora(stories_dir, Hardware())
    _, docs, _ = corpus
    fmt = TextFormat(WINDOW)
    fmt.tokenize(docs.select(range(2)), tokenizer, FinetuneConfig(dataset_format="text", max_seq_length=WINDOW))
    fmt.forgetting_rows = rows[:4]
    check = held_out_check(model, tokenizer, fmt.held_out_rows(docs.select(range(2))), data_format=fmt, stop_rows=1)
    assert check.forgetting is not None and check.forgetting.rows == 4 and check.forgetting.response_tokens > 0
    assert "forgetting check (held-out Alpaca rows): response loss" in str(check)
    assert heldout_summary(check, check)["forgetting"]["after"] == check.forgetting.as_dict()
