"""Continuing a run with a larger ``max_steps`` (issue 28, item 2): the continued steps take the learning rates of an
uninterrupted run of the new total (linear and cosine, with a warm-up whose length depends on the total), and one
line says so. Real stories260K runs through the package's helpers (``resume_driver.py``, in-process; ~1 min)."""

from __future__ import annotations

import json

import pytest

import resume_driver

pytestmark = pytest.mark.slow  # six short training runs

FIRST, TOTAL = 4, 8


def _run(stories_dir, alpaca_jsonl, output_dir, result, max_steps, schedule, *extra) -> dict:
    argv = resume_driver.command(
        stories_dir,
        alpaca_jsonl,
        output_dir,
        result,
        *extra,
        rows=120,
        max_steps=max_steps,
        save_steps=FIRST,
        eval_steps=100,
        lr_scheduler_type=schedule,
        warmup_ratio=0.25,  # 1 warm-up step of 4, 2 of 8: the two totals' schedules differ from the start
    )
    assert resume_driver.main(argv[2:]) == 0
    return json.loads(result.read_text(encoding="utf-8"))


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_continued_steps_follow_the_new_totals_schedule(stories_dir, alpaca_jsonl, tmp_path, capsys, schedule):
    full = _run(stories_dir, alpaca_jsonl, tmp_path / "full", tmp_path / "full.json", TOTAL, schedule)
    _run(stories_dir, alpaca_jsonl, tmp_path / "run", tmp_path / "first.json", FIRST, schedule)
    capsys.readouterr()
    continued = _run(stories_dir, alpaca_jsonl, tmp_path / "run", tmp_path / "more.json", TOTAL, schedule, "--resume")
    out = capsys.readouterr().out
    steps = list(range(FIRST + 1, TOTAL + 1))
    logged = {e["step"]: e["learning_rate"] for e in continued["logged"] if "learning_rate" in e}
    full_logged = {e["step"]: e["learning_rate"] for e in full["logged"] if "learning_rate" in e}
    assert sorted(logged) == steps
    for step in steps:  # what the trainer logged, and what the optimizer took: the same schedule at the same step,
        # equal up to the rounding of Python floats (pytest.approx's 1e-12 floor for the 0 a linear schedule ends at)
        assert logged[step] == pytest.approx(full_logged[step], rel=1e-9), (step, logged, full_logged)
        used, full_used = continued["used_lr"][str(step)], full["used_lr"][str(step)]
        assert used == pytest.approx(full_used, rel=1e-9), (step, continued["used_lr"], full["used_lr"])
    assert continued["results"]["global_step"] == TOTAL
    assert out.count(f"continuing steps {FIRST + 1}-{TOTAL} on the {TOTAL}-step schedule") == 1, out[-3000:]
