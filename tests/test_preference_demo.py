"""The offline demo's preference pairs: scripts/make_preference_demo.py makes pairs the package reads whole, drops and
counts pairs whose rejected answer equals or contains the chosen one, and the committed data/alpaca_pairs/pairs.jsonl
is what its NOTICE says."""

from __future__ import annotations

import hashlib
import json
import re
import runpy

import pytest
from conftest import ALPACA_DEMO, REPO

SCRIPT = REPO / "scripts" / "make_preference_demo.py"
PAIRS = REPO / "data" / "alpaca_pairs" / "pairs.jsonl"


@pytest.fixture(scope="module")
def script() -> dict:
    return runpy.run_path(str(SCRIPT))


def read_pairs(path):
    """The package's own reading of a pairs file: ``(clean rows, report, layout, form)``, strict (a bad row raises)."""
    from tinyllama_ft.data.preferences import check_preference_rows
    from tinyllama_ft.data.row_files import read_rows

    return check_preference_rows(read_rows(str(path)), strict=True, source=str(path))


def demo_rows() -> list[dict]:
    return [json.loads(line) for line in ALPACA_DEMO.read_text(encoding="utf-8").splitlines()]


def notice_facts(notice: str) -> dict:
    """The pair count, sha256, row count and drop counts the NOTICE states."""
    found = {
        "pairs": r"pairs\.jsonl: (\d+) preference pairs",
        "sha256": r"sha256 ([0-9a-f]{64})",
        "rows": r"from the (\d+) demo rows",
        "equal": r"rejected equal to chosen\s+(\d+)",
        "contains": r"rejected containing chosen (\d+)",
        "empty": r"either side empty (\d+)",
    }
    facts = {}
    for key, pattern in found.items():
        match = re.search(pattern, notice)
        assert match, f"the NOTICE does not state {key} ({pattern})"
        facts[key] = match.group(1) if key == "sha256" else int(match.group(1))
    return facts


def test_script_on_three_rows_writes_pairs_the_reader_keeps_and_a_rerun_the_same_bytes(script, tmp_path):
    """--limit 3 with a small budget: three pairs of the first demo rows, each rejected text the model's own answer,
    read back by the package's preference reader with no row dropped; the NOTICE states them; a rerun writes the
    same pairs byte for byte (greedy, float32)."""
    first, again = tmp_path / "a" / "pairs.jsonl", tmp_path / "b" / "pairs.jsonl"
    counts = script["main"](["--limit", "3", "--max-new-tokens", "4", "--out", str(first)])
    assert (counts["rows"], counts["kept"], sum(counts["dropped"].values())) == (3, 3, 0)
    clean, report, layout, form = read_pairs(first)
    assert (layout, form, report.total, report.kept, len(report.bad)) == ("paired", "text", 3, 3, 0)
    rows = demo_rows()[:3]
    assert [(p["prompt"], p["input"], p["chosen"]) for p in clean] == [
        (r["instruction"], r["input"], r["output"]) for r in rows
    ]
    for pair in clean:  # the model's answer, cut at 4 tokens: short, and no other row's reference answer
        assert pair["rejected"].strip() and len(pair["rejected"]) < len(pair["chosen"])
        assert pair["rejected"] not in {r["output"] for r in demo_rows()}
    facts = notice_facts((first.parent / "NOTICE").read_text(encoding="utf-8"))
    assert facts["pairs"] == 3 and facts["rows"] == 3
    assert facts["sha256"] == hashlib.sha256(first.read_bytes()).hexdigest()

    script["main"](["--limit", "3", "--max-new-tokens", "4", "--out", str(again)])
    assert again.read_bytes() == first.read_bytes()


def test_limit_without_out_is_refused(script, capsys):
    """A partial run never overwrites the committed file: --limit needs --out (refused before any model loads)."""
    with pytest.raises(SystemExit):
        script["main"](["--limit", "3"])
    assert "--limit 3 makes a partial file: give --out" in capsys.readouterr().err


def test_pairs_whose_rejected_answer_equals_or_contains_the_chosen_one_are_dropped_and_counted(script):
    """The drop rule after whitespace normalisation, on constructed answers: equal (modulo whitespace) and containing
    the chosen answer are dropped and counted; a rejected prefix of the chosen answer, another case, or a different
    answer is kept, with the row's own answer as its rejected text."""
    rows = [
        {"instruction": f"Task {i}", "input": "x" if i % 2 else "", "output": "Paris is the capital."} for i in range(7)
    ]
    rejected = [
        "Paris is the capital.",  # equal
        "  Paris   is the\ncapital.\n",  # equal after whitespace normalisation
        "Sure! Paris is the capital. Anything else?",  # contains
        "Paris is\tthe capital. Paris is the capital.",  # contains (after normalisation)
        "Paris is the",  # a prefix of the chosen answer: kept
        "paris is the capital.",  # another case: kept
        " \n ",  # empty
    ]
    pairs, dropped = script["make_pairs"](rows, rejected)
    assert dict(dropped) == {"empty": 1, "equal": 2, "contains": 2}
    assert pairs == [
        {"prompt": "Task 4", "input": "", "chosen": "Paris is the capital.", "rejected": "Paris is the"},
        {"prompt": "Task 5", "input": "x", "chosen": "Paris is the capital.", "rejected": "paris is the capital."},
    ]
    assert [script["drop_reason"]("a  b", r) for r in ("a b", "xa b", "a", "")] == ["equal", "contains", None, "empty"]
    with pytest.raises(ValueError, match="2 rows but 1 rejected"):
        script["make_pairs"](rows[:2], rejected[:1])


def test_committed_pairs_read_back_whole_and_match_their_notice(script):
    """data/alpaca_pairs/pairs.jsonl: the package reads every line as a pair (strict: no bad row); its line count,
    sha256 and the drop counts are the NOTICE's; each pair is a demo row (in order) with a rejected text that passes
    the drop rule and is no demo row's reference answer."""
    notice = (PAIRS.parent / "NOTICE").read_text(encoding="utf-8")
    facts = notice_facts(notice)
    lines = PAIRS.read_text(encoding="utf-8").splitlines()
    clean, report, layout, form = read_pairs(PAIRS)
    assert (layout, form, len(report.bad), report.kept) == ("paired", "text", 0, len(lines))
    assert len(lines) == facts["pairs"] and facts["sha256"] == hashlib.sha256(PAIRS.read_bytes()).hexdigest()
    rows = demo_rows()
    assert facts["rows"] == len(rows) == facts["pairs"] + facts["equal"] + facts["contains"] + facts["empty"]
    assert "CC BY-NC 4.0" in notice and "Apache-2.0" in notice
    answers = {r["output"] for r in rows}
    by_row = iter((r["instruction"], r["input"], r["output"]) for r in rows)
    for pair in clean:
        assert (pair["prompt"], pair["input"], pair["chosen"]) in by_row  # a demo row, in file order
        assert script["drop_reason"](pair["chosen"], pair["rejected"]) is None
        assert pair["rejected"] not in answers
