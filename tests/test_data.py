"""Reading, checking and splitting instruction data, with real files on disk."""

import csv
import json
import re

import datasets
import pytest

from conftest import ALPACA_ROWS

from tinyllama_ft.data.instructions import (
    BadRow,
    DataReport,
    check_rows,
    load_instruction_data,
    read_rows,
    split_train_eval,
)

GOOD = {"instruction": "Name a colour.", "input": "", "output": "Blue"}


def write_jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def alpaca_all(alpaca_jsonl):
    ds, report = load_instruction_data(str(alpaca_jsonl))
    return ds, report


def test_real_rows_keep_every_row(alpaca_all):
    ds, report = alpaca_all
    assert len(ds) == ALPACA_ROWS
    assert (report.total, report.kept, report.dropped) == (ALPACA_ROWS, ALPACA_ROWS, 0)
    assert ds.column_names == ["instruction", "input", "output"]


def test_jsonl_bad_rows_are_dropped_and_counted(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [
            json.dumps(GOOD),  # 0 ok
            json.dumps({**GOOD, "output": None}),  # 1 None output
            json.dumps({"input": "", "output": "x"}),  # 2 missing instruction
            "{not json",  # 3 unreadable line
            json.dumps({"instruction": "Say hi.", "output": "hi"}),  # 4 ok, no input
        ],
    )
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
        {**GOOD, "instruction": 7},  # 0 int instruction
        GOOD,  # 1
        {**GOOD, "output": ""},  # 2 empty output
        {**GOOD, "instruction": "  \n "},  # 3 whitespace-only instruction
        {"instruction": "Name a shape.", "input": None, "output": "Circle"},  # 4 None input = empty
    ]
    path = tmp_path / "d.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    ds, report = load_instruction_data(str(path))
    assert [(b.index, b.field) for b in report.bad] == [(0, "instruction"), (2, "output"), (3, "instruction")]
    assert "row 0: field 'instruction' is of type int, not a string" in report.summary()
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
    datasets.Dataset.from_list(
        [
            {"prompt": "Name a colour.", "answer": "Blue"},
            {"prompt": "Say hi.", "answer": None},
        ]
    ).to_parquet(path)
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
    with pytest.raises(ValueError, match=re.escape(path) + r": no usable rows \(all 3 rows were dropped\)"):
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


def test_a_folder_datasets_cannot_read_is_a_data_error_naming_it(tmp_path):
    """A local folder goes to datasets.load_dataset; an empty one, one whose JSONL does not parse, or one without the
    split is the person's input at fault (DataError: exit status 2), named with datasets' reason, not datasets' own
    error (exit 1, no parameter named)."""
    from tinyllama_ft.data.row_files import DataError

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=rf"dataset='{empty}': a folder datasets cannot read rows from: .*data files"):
        read_rows(str(empty))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "rows.jsonl").write_text('{"instruction": "a", "output": "b"}\nnot json\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"--dataset='{broken}': a folder datasets cannot read"):
        read_rows(str(broken), flag="--dataset")
    good = tmp_path / "good"
    good.mkdir()
    (good / "rows.jsonl").write_text('{"instruction": "a", "output": "b"}\n', encoding="utf-8")
    assert read_rows(str(good)) == [{"instruction": "a", "output": "b"}]
    with pytest.raises(DataError, match="Unknown split"):
        read_rows(str(good), split="validation")


def _pairs(ds):
    return [(r["instruction"], r["input"], r["output"]) for r in ds]


def test_split_5k_holds_out_20_disjoint_rows():
    # indices as a column so disjointness is exact, even where two rows share their text
    ds = datasets.Dataset.from_dict({"i": list(range(5000))})
    train, eval_ = split_train_eval(ds, test_size=0.004, seed=3407)
    assert (len(train), len(eval_)) == (4980, 20)
    assert set(train["i"]).isdisjoint(eval_["i"])
    assert set(train["i"]) | set(eval_["i"]) == set(range(5000))


def test_split_real_rows_is_disjoint_and_reproducible(alpaca_all):
    ds, _ = alpaca_all
    assert len(split_train_eval(ds)[1]) == 6  # the default 0.4% of 1,418 rows, rounded up
    train, eval_ = split_train_eval(ds, test_size=0.04)
    assert len(eval_) == 57
    train_pairs, eval_pairs = set(_pairs(train)), set(_pairs(eval_))
    assert len(train_pairs) + len(eval_pairs) == len(set(_pairs(ds)))
    assert train_pairs.isdisjoint(eval_pairs)
    assert _pairs(split_train_eval(ds, test_size=0.04, seed=3407)[1]) == _pairs(eval_)
    assert _pairs(split_train_eval(ds, test_size=0.04, seed=1)[1]) != _pairs(eval_)


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


# --- every kind of bad row: dropped, counted by reason, named by 0-based index and field ------------


def bad(report):
    return [(b.index, b.field, b.kind) for b in report.bad]


def write_rows(path, rows):
    """JSONL: dicts and lists are JSON-encoded, strings written as they are (to plant broken lines)."""
    return write_jsonl(path, [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows])


def test_wrong_types_are_dropped_naming_field_and_type(tmp_path):
    path = write_rows(
        tmp_path / "d.jsonl",
        [
            GOOD,  # 0
            {**GOOD, "instruction": 3},  # 1 number
            {**GOOD, "output": 2.5},  # 2 float
            {**GOOD, "instruction": True},  # 3 bool
            {**GOOD, "output": False},  # 4 falsy bool: not "missing", not "empty"
            {**GOOD, "instruction": ["Name", "a colour."]},  # 5 list
            {**GOOD, "output": {"text": "Blue"}},  # 6 nested object
            {**GOOD, "input": 0},  # 7 falsy number input: not "no input"
            {**GOOD, "input": ["x"]},  # 8 list input
            {**GOOD, "input": {}},  # 9 empty object input
            {"instruction": "Say hi.", "input": "", "output": "hi"},  # 10
        ],
    )
    ds, report = load_instruction_data(path)
    assert bad(report) == [
        (1, "instruction", "wrong type"),
        (2, "output", "wrong type"),
        (3, "instruction", "wrong type"),
        (4, "output", "wrong type"),
        (5, "instruction", "wrong type"),
        (6, "output", "wrong type"),
        (7, "input", "wrong type"),
        (8, "input", "wrong type"),
        (9, "input", "wrong type"),
    ]
    types = [b.reason.removeprefix("is of type ").removesuffix(", not a string") for b in report.bad]
    assert types == ["int", "float", "bool", "bool", "list", "dict", "int", "list", "dict"]
    assert (report.total, report.kept, len(ds)) == (11, 2, 2)


def test_whitespace_only_instruction_or_output_is_bad_but_input_becomes_empty(tmp_path):
    padded = {"instruction": "  Pad me. ", "input": " x ", "output": " kept \n"}
    path = write_rows(
        tmp_path / "d.jsonl",
        [
            {**GOOD, "instruction": " \t\n"},  # 0
            {**GOOD, "output": "\u3000\u00a0 "},  # 1 ideographic + no-break space
            {**GOOD, "instruction": ""},  # 2
            {"instruction": "Say hi.", "input": " \n\t", "output": "hi"},  # 3 whitespace input = no input
            padded,  # 4 kept exactly, spaces and all
        ],
    )
    ds, report = load_instruction_data(path)
    assert bad(report) == [(0, "instruction", "empty"), (1, "output", "empty"), (2, "instruction", "empty")]
    assert [b.reason for b in report.bad] == ["is whitespace-only", "is whitespace-only", "is empty"]
    assert ds.to_list() == [{"instruction": "Say hi.", "input": "", "output": "hi"}, padded]


def test_duplicates_keep_the_first_and_name_it(tmp_path):
    hi = {"instruction": "Say hi.", "input": "", "output": "hi"}
    path = write_rows(
        tmp_path / "d.jsonl",
        [
            GOOD,  # 0
            hi,  # 1
            dict(GOOD),  # 2 duplicate of 0
            {**GOOD, "output": None},  # 3 bad for another reason
            {**GOOD, "input": None},  # 4 duplicate of 0: None input is ""
            {**GOOD, "input": "  "},  # 5 duplicate of 0: blank input is ""
            {**GOOD, "output": "Blue "},  # 6 not a duplicate: one more space
            {"output": "hi", "input": "", "instruction": "Say hi."},  # 7 duplicate of 1, other key order
            {**GOOD, "source": "other column"},  # 8 duplicate of 0: only the 3 fields count
        ],
    )
    ds, report = load_instruction_data(path)
    assert bad(report) == [
        (2, "<row>", "duplicate"),
        (3, "output", "null"),
        (4, "<row>", "duplicate"),
        (5, "<row>", "duplicate"),
        (7, "<row>", "duplicate"),
        (8, "<row>", "duplicate"),
    ]
    assert [b.reason.split(" (")[0] for b in report.bad if b.kind == "duplicate"] == [
        "duplicates row 0",
        "duplicates row 0",
        "duplicates row 0",
        "duplicates row 1",
        "duplicates row 0",
    ]
    assert report.by_reason == {"duplicate": 5, "null": 1}
    assert ds.to_list() == [GOOD, hi, {**GOOD, "output": "Blue "}]


def test_jsonl_bad_lines_in_the_middle(tmp_path):
    path = write_rows(
        tmp_path / "d.jsonl",
        [
            GOOD,  # line 1, row 0
            "",  # line 2: blank, not a row
            '{"instruction": "Say hi.", "output": ',  # line 3, row 1: cut off
            "not json at all",  # line 4, row 2
            "[1, 2]",  # line 5, row 3: JSON, but not an object
            "null",  # line 6, row 4
            {"instruction": "Say hi.", "output": "hi"},  # line 7, row 5
            "   ",  # line 8: blank
            '"just a string"',  # line 9, row 6
        ],
    )
    ds, report = load_instruction_data(path)
    assert bad(report) == [
        (1, "<line>", "unparseable"),
        (2, "<line>", "unparseable"),
        (3, "<row>", "not an object"),
        (4, "<row>", "not an object"),
        (6, "<row>", "not an object"),
    ]
    assert f"{path}:3 is not valid JSON" in report.bad[0].reason and f"{path}:4 " in report.bad[1].reason
    assert [b.reason for b in report.bad[2:]] == [f"is of type {t}, not an object" for t in ("list", "NoneType", "str")]
    assert (report.total, len(ds)) == (7, 2)


def test_csv_lines_with_too_few_or_too_many_values(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text(
        "instruction,input,output\n"
        "Name a colour.,,Blue\n"  # line 2, row 0
        "Say hi.,hi\n"  # line 3, row 1: output missing (input got "hi")
        "Name a fruit, please.,,Apple\n"  # line 4, row 2: unquoted comma, 4 values
        '"Name a fruit, please.",,Apple\n'  # line 5, row 3: quoted, fine
        '"A two\nline instruction",,ok\n'  # lines 6-7, row 4: fine
        "Only one value\n"  # line 8, row 5
        "a,b,c,d,e\n",  # line 9, row 6: 5 values (the first three look fine)
        encoding="utf-8",
    )
    ds, report = load_instruction_data(str(path))
    assert bad(report) == [
        (1, "output", "column count"),
        (2, "<row>", "column count"),
        (5, "input", "column count"),
        (6, "<row>", "column count"),
    ]
    assert [b.reason for b in report.bad] == [
        f"is missing: the line has 2 of 3 values (at {path}:3)",
        f"has 4 values for 3 columns (at {path}:4; an unquoted comma?)",
        f"is missing: the line has 1 of 3 values (at {path}:8)",
        f"has 5 values for 3 columns (at {path}:9; an unquoted comma?)",
    ]
    assert ds["instruction"] == ["Name a colour.", "Name a fruit, please.", "A two\nline instruction"]


def _empty_parquet(path):
    datasets.Dataset.from_dict({k: [] for k in GOOD}).to_parquet(str(path))


@pytest.mark.parametrize(
    "name, content",
    [
        ("d.jsonl", b""),
        ("d.jsonl", b"\n\n  \n\t\r\n"),
        ("d.json", b""),
        ("d.json", b" \n"),
        ("d.json", b"[]"),
        ("d.csv", b""),
        ("d.csv", b"instruction,input,output\n"),
        ("d.parquet", b""),
        ("d.parquet", _empty_parquet),
    ],
    ids=[
        "jsonl-0-bytes",
        "jsonl-blank-lines",
        "json-0-bytes",
        "json-blank",
        "json-empty-list",
        "csv-0-bytes",
        "csv-header-only",
        "parquet-0-bytes",
        "parquet-0-rows",
    ],
)
@pytest.mark.parametrize("strict", [False, True])
def test_empty_sources_raise_no_usable_rows(tmp_path, name, content, strict):
    path = tmp_path / name
    content(path) if callable(content) else path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(str(path)) + r": no usable rows \(it has no rows\)"):
        load_instruction_data(str(path), strict=strict)


NONE_OUTPUT = {**GOOD, "output": None}
CSV_HEAD = "instruction,input,output\nName a colour.,,Blue\n"


@pytest.mark.parametrize(
    "name, content, field",
    [
        ("d.jsonl", [GOOD, {**GOOD, "output": ["Blue"]}, NONE_OUTPUT], "output"),
        ("d.jsonl", [GOOD, {**GOOD, "input": 5}, NONE_OUTPUT], "input"),
        ("d.jsonl", [GOOD, {"input": "", "output": "x"}, NONE_OUTPUT], "instruction"),
        ("d.jsonl", [GOOD, {**GOOD, "instruction": None}, NONE_OUTPUT], "instruction"),
        ("d.jsonl", [GOOD, {**GOOD, "output": " \n"}, NONE_OUTPUT], "output"),
        ("d.jsonl", [GOOD, "[1]", NONE_OUTPUT], "<row>"),
        ("d.jsonl", [GOOD, "{oops", NONE_OUTPUT], "<line>"),
        ("d.jsonl", [GOOD, GOOD, NONE_OUTPUT], "<row>"),
        ("d.csv", CSV_HEAD + "Say hi.,hi\nx,,\n", "output"),
        ("d.csv", CSV_HEAD + "a,b,c,d\nx,,\n", "<row>"),
    ],
    ids=[
        "wrong-type",
        "wrong-type-input",
        "missing",
        "none",
        "whitespace",
        "not-object",
        "unparseable",
        "duplicate",
        "csv-short",
        "csv-long",
    ],
)
def test_strict_raises_at_the_first_bad_row_of_every_kind(tmp_path, name, content, field):
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        write_rows(path, content)
    with pytest.raises(ValueError, match=re.escape(f"{path}: row 1: field '{field}' ")) as e:
        load_instruction_data(str(path), strict=True)
    assert "0-based" in str(e.value) and "row 2" not in str(e.value)
    _, report = load_instruction_data(str(path))  # not strict: the same row is dropped, and the next one
    assert [(b.index, b.field) for b in report.bad] == [(1, field), (2, "output")]


LINE = json.dumps(GOOD).encode() + b"\n"


@pytest.mark.parametrize(
    "name, content, where",
    [
        (
            "d.json",
            b'[\n  {"instruction": "a", "output": "b"},\n  {"instruction": "c" "output": "d"}\n]',
            r"line 3, column 23: not valid JSON",
        ),
        ("d.jsonl", LINE + '{"instruction": "café"}\n'.encode("latin-1"), rf"line 2, byte {len(LINE) + 20}: not UTF-8"),
        ("d.csv", b"instruction,input,output\n" + "Say “hi”.,,hi\n".encode("cp1252"), r"line 2, byte 29: not UTF-8"),
        ("d.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", r"line 1, byte 0: not UTF-8"),
        ("d.jsonl", json.dumps(GOOD).encode("utf-16-le"), r"line 1, byte 1: NUL byte"),
        ("d.csv", "instruction,input,output\n".encode("utf-16"), r"line 1, byte 0: not UTF-8"),
        ("d.parquet", b"PAR1 not really parquet", r"not a readable parquet file"),
    ],
    ids=["json-syntax", "jsonl-latin1", "csv-cp1252", "binary", "utf16-no-bom", "utf16-bom", "parquet"],
)
def test_unreadable_files_raise_naming_file_and_position(tmp_path, name, content, where):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ": " + where):
        read_rows(str(path))


def test_report_counts_by_reason_and_stays_compatible(tmp_path):
    path = write_rows(tmp_path / "d.jsonl", [GOOD, NONE_OUTPUT, GOOD, "{oops", GOOD, {**GOOD, "output": "Red"}])
    _, report = load_instruction_data(path)
    assert report.by_reason == {"null": 1, "duplicate": 2, "unparseable": 1}
    assert (report.source, report.total, report.kept, report.dropped, len(report.bad)) == (path, 6, 2, 4, 4)
    assert report.summary().split("\n")[0] == (
        f"{path}: 6 rows read, 2 kept, 4 dropped (null: 1, duplicate: 2, unparseable: 1)"
    )
    # the old constructor (no kind) and a clean report still work as before
    old = DataReport("x", 2, 1, [BadRow(1, "output", "is None")])
    assert old.summary() == (
        "x: 2 rows read, 1 kept, 1 dropped (bad: 1)\n  dropped (row index from 0): row 1: field 'output' is None"
    )
    assert DataReport("x", 3, 3).summary() == "x: 3 rows read, 3 kept, 0 dropped"


def test_check_rows_strict_names_the_source(tmp_path):
    with pytest.raises(ValueError, match=r"^rows: row 0: field 'output' is None \(row index is 0-based"):
        check_rows([NONE_OUTPUT], strict=True)


@pytest.mark.parametrize(
    "values, line",
    [
        ({}, "data format: Alpaca rows (instruction, input, output), the 'alpaca' prompt, answers ending in EOS"),
        (
            {"dataset_format": "auto"},
            "data format: conversations (messages or ShareGPT rows, read from each source) through the chat template "
            "'auto', loss on the assistant turns",
        ),
        ({"method": "dpo", "dataset_format": "auto"}, "data format: preference pairs for DPO (text or conversations)"),
        ({"method": "kto", "dataset_format": "messages"}, "data format: preference rows for KTO (conversations)"),
        ({"method": "grpo"}, "data format: GRPO prompts with reference answers (text rows)"),
    ],
)
def test_each_data_format_prints_as_one_line_a_person_reads(values, line):
    """Issue 40, item 7: the notebooks' ``print(fmt)`` showed ``AlpacaFormat(template='alpaca')``."""
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.data.formats import data_format

    assert str(data_format(FinetuneConfig(**values))) == line


def test_a_three_way_split_keeps_the_validation_rows_and_holds_out_a_disjoint_test_part():
    # issue 40, item 6: values tuned on the held-out rows (now "validation") are reported on rows no tuning read
    ds = datasets.Dataset.from_dict({"i": list(range(969))})
    _, held = split_train_eval(ds, test_size=0.05, seed=3407, min_test_rows=50)
    train_v, validation = split_train_eval(ds, test_size=0.05, seed=3407, min_test_rows=50, eval_split="validation")
    train_t, test = split_train_eval(ds, test_size=0.05, seed=3407, min_test_rows=50, eval_split="test")
    assert validation["i"] == held["i"] and len(test) == len(validation) == 50
    assert train_v["i"] == train_t["i"] and len(train_t) == 969 - 100  # the same training rows, whichever is read
    assert set(test["i"]).isdisjoint(validation["i"]) and set(train_t["i"]).isdisjoint([*test["i"], *validation["i"]])
    # rows a source deals itself at the front: validation, then test
    train, test = split_train_eval(ds, test_size=0.05, first=(100, 100), eval_split="test")
    assert test["i"] == list(range(100, 200)) and train["i"] == list(range(200, 969))
    assert split_train_eval(ds, test_size=0.05, first=(100, 100), eval_split="validation")[1]["i"] == list(range(100))
    with pytest.raises(ValueError, match="eval_split='dev'"):
        split_train_eval(ds, eval_split="dev")
    with pytest.raises(ValueError, match="2 rows are too few"):
        split_train_eval(ds.select(range(2)), eval_split="test")
