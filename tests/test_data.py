"""Reading, checking and splitting instruction data, with real files on disk."""

import csv
import json

import datasets
import pytest

from tinyllama_ft.data import load_instruction_data, read_rows, split_train_eval

GOOD = {"instruction": "Name a colour.", "input": "", "output": "Blue"}


def write_jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def alpaca_5k(alpaca_jsonl):
    ds, report = load_instruction_data(str(alpaca_jsonl))
    return ds, report


def test_real_5k_keeps_every_row(alpaca_5k):
    ds, report = alpaca_5k
    assert len(ds) == 5000
    assert (report.total, report.kept, report.dropped) == (5000, 5000, 0)
    assert ds.column_names == ["instruction", "input", "output"]


def test_jsonl_bad_rows_are_dropped_and_counted(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        json.dumps(GOOD),                                        # 0 ok
        json.dumps({**GOOD, "output": None}),                    # 1 None output
        json.dumps({"input": "", "output": "x"}),                # 2 missing instruction
        "{not json",                                             # 3 unreadable line
        json.dumps({"instruction": "Say hi.", "output": "hi"}),  # 4 ok, no input
    ])
    ds, report = load_instruction_data(path)
    assert (report.total, report.kept, report.dropped) == (5, 2, 3)
    assert [b.index for b in report.bad] == [1, 2, 3]
    summary = report.summary()
    assert "row 1: field 'output' is None" in summary
    assert "row 2: field 'instruction' is missing" in summary
    assert "row 3:" in summary and "d.jsonl:4" in summary
    assert ds[1] == {"instruction": "Say hi.", "input": "", "output": "hi"}


def test_json_bad_types_and_empty_values(tmp_path):
    rows = [
        {**GOOD, "instruction": 7},        # 0 int instruction
        GOOD,                              # 1
        {**GOOD, "output": ""},            # 2 empty output
        {**GOOD, "instruction": "  \n "},  # 3 whitespace-only instruction
        {**GOOD, "input": None},           # 4 None input = empty
    ]
    path = tmp_path / "d.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    ds, report = load_instruction_data(str(path))
    assert [(b.index, b.field) for b in report.bad] == [(0, "instruction"), (2, "output"), (3, "instruction")]
    assert "row 0: field 'instruction' is a int, not a string" in report.summary()
    assert len(ds) == 2 and ds[1]["input"] == ""


def test_csv_row_missing_a_column(tmp_path):
    path = tmp_path / "d.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        f.write("instruction,input,output\n")
        csv.writer(f).writerow(["Name a colour.", "", "Blue"])
        f.write("Say hi.,\n")  # short row: output missing
        csv.writer(f).writerow(["Say hi.", "", "hi"])
    ds, report = load_instruction_data(str(path))
    assert len(ds) == 2
    assert [(b.index, b.field) for b in report.bad] == [(1, "output")]


def test_parquet_with_other_column_names(tmp_path):
    path = str(tmp_path / "d.parquet")
    datasets.Dataset.from_list([
        {"prompt": "Name a colour.", "answer": "Blue"},
        {"prompt": "Say hi.", "answer": None},
    ]).to_parquet(path)
    ds, report = load_instruction_data(path, instruction_column="prompt", output_column="answer")
    assert ds.to_list() == [GOOD]
    assert [(b.index, b.field) for b in report.bad] == [(1, "answer")]


def test_summary_shows_only_the_first_bad_rows(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [json.dumps(GOOD)] + [json.dumps({**GOOD, "output": None})] * 8)
    _, report = load_instruction_data(path)
    assert "row 5:" in report.summary() and "row 6:" not in report.summary()
    assert "(and 3 more)" in report.summary()


def test_strict_raises_naming_row_and_field(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [json.dumps(GOOD), json.dumps({**GOOD, "output": None})])
    with pytest.raises(ValueError, match=r"row 1: field 'output'"):
        load_instruction_data(path, strict=True)


def test_all_bad_rows_raise(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [json.dumps({**GOOD, "output": None})] * 3)
    with pytest.raises(ValueError, match="no usable rows"):
        load_instruction_data(path)


def test_missing_local_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_rows(str(tmp_path / "nope.jsonl"))
    with pytest.raises(FileNotFoundError):
        read_rows("data/nope.jsonl")  # relative: not sent to the Hub


def test_unsupported_suffix_raises(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("hello\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unsupported file type '.txt'"):
        read_rows(str(path))


def _pairs(ds):
    return [(r["instruction"], r["input"], r["output"]) for r in ds]


def test_split_5k_holds_out_20_disjoint_rows():
    # indices as a column so disjointness is exact, even where two rows share their text
    ds = datasets.Dataset.from_dict({"i": list(range(5000))})
    train, eval_ = split_train_eval(ds, 0.004, seed=3407)
    assert (len(train), len(eval_)) == (4980, 20)
    assert set(train["i"]).isdisjoint(eval_["i"])
    assert set(train["i"]) | set(eval_["i"]) == set(range(5000))


def test_split_real_rows_is_disjoint_and_reproducible(alpaca_5k):
    ds, _ = alpaca_5k
    train, eval_ = split_train_eval(ds)
    assert len(eval_) == 20
    train_pairs, eval_pairs = set(_pairs(train)), set(_pairs(eval_))
    assert len(train_pairs) + len(eval_pairs) == len(set(_pairs(ds)))
    assert train_pairs.isdisjoint(eval_pairs)
    assert _pairs(split_train_eval(ds, seed=3407)[1]) == _pairs(eval_)
    assert _pairs(split_train_eval(ds, seed=1)[1]) != _pairs(eval_)


def test_split_tiny_datasets():
    two = datasets.Dataset.from_list([GOOD, {**GOOD, "output": "Red"}])
    train, eval_ = split_train_eval(two)
    assert (len(train), len(eval_)) == (1, 1)
    assert train[0] != eval_[0]
    one = datasets.Dataset.from_list([GOOD])
    train, eval_ = split_train_eval(one)
    assert eval_ is None and len(train) == 1
    assert split_train_eval(two, test_size=0)[1] is None


def test_home_relative_path_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write_jsonl(tmp_path / "d.jsonl", [json.dumps(GOOD)])
    assert read_rows("~/d.jsonl") == [GOOD]
