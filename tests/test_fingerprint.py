"""Resume on changed data (issue 10, item 3): the training rows' fingerprint is part of the run identity; a
real run resumed after one row of its file changed, or its rows were reordered, is refused naming
``data_fingerprint``; the same rows resume."""

import json
import os
import subprocess

import pytest

import resume_driver

from conftest import REPO
from helpers import alpaca_rows
from tinyllama_ft.data.instructions import check_rows, load_instruction_data
from tinyllama_ft.data.fingerprint import data_fingerprint


def _write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def test_fingerprint_is_the_kept_rows_text_and_order(alpaca_jsonl, tmp_path):
    rows = alpaca_rows(alpaca_jsonl, 50)
    _write_jsonl(tmp_path / "a.jsonl", rows)
    dataset, _ = load_instruction_data(str(tmp_path / "a.jsonl"))
    clean, _ = check_rows(rows)
    fp = data_fingerprint(dataset)
    assert fp.startswith("sha256:") and len(fp) == 71
    assert data_fingerprint(clean) == fp  # a Dataset or a list of dicts
    assert data_fingerprint([dict(reversed(list(r.items()))) for r in clean]) == fp  # key order is not content
    assert data_fingerprint(dataset.map(lambda r: {"text": "rendered " + r["output"]})) == fp  # rendered text is not
    # a row that check_rows drops does not train: same fingerprint
    _write_jsonl(tmp_path / "b.jsonl", rows + [{"instruction": "", "output": "dropped: empty instruction"}])
    assert data_fingerprint(load_instruction_data(str(tmp_path / "b.jsonl"))[0]) == fp
    changed = [dict(r) for r in clean]
    changed[7]["output"] += "."
    assert data_fingerprint(changed) != fp
    assert data_fingerprint(clean[1:] + clean[:1]) != fp  # order counts: the split and batches depend on it
    with pytest.raises(KeyError, match="row 0 has no field 'output'"):
        data_fingerprint([{"instruction": "x", "input": ""}])


def _driver(stories_dir, data, output_dir, result, *extra):
    cmd = resume_driver.command(stories_dir, data, output_dir, result, *extra, rows=120, max_steps=2, save_steps=2)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run(stories_dir, alpaca_jsonl, tmp_path_factory):
    """A real 2-step run (checkpoint-2) on 120 rows copied to a file of its own."""
    tmp = tmp_path_factory.mktemp("fingerprint")
    rows = alpaca_rows(alpaca_jsonl, 120)
    _write_jsonl(tmp / "data.jsonl", rows)
    done = _driver(stories_dir, tmp / "data.jsonl", tmp / "out", tmp / "r.json")
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = json.loads((tmp / "out" / "run_config.json").read_text())["data_fingerprint"]
    assert recorded == data_fingerprint(check_rows(rows)[0])
    return {"tmp": tmp, "rows": rows}


@pytest.mark.parametrize("change", ["one row edited", "rows reordered"])
def test_resume_after_the_rows_changed_is_refused_naming_the_field(run, stories_dir, change):
    rows = [dict(r) for r in run["rows"]]
    if change == "one row edited":
        rows[10]["output"] = rows[10]["output"].replace(" ", "  ", 1)
    else:
        rows[0], rows[1] = rows[1], rows[0]
    original = run["tmp"] / "data.jsonl"  # the run's dataset path: edit the file in place, as a user would
    saved = original.read_bytes()
    _write_jsonl(original, rows)
    try:
        refused = _driver(
            stories_dir, original, run["tmp"] / "out", run["tmp"] / "x.json", "--resume", "--max-steps", "4"
        )
    finally:
        original.write_bytes(saved)
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode != 0 and last.startswith("ValueError: resume=True but the checkpoints"), refused.stderr[
        -2000:
    ]
    assert "data_fingerprint" in last and "the training rows changed" in last
    assert not (run["tmp"] / "out" / "run.lock").exists()  # the refused run left no lock behind
