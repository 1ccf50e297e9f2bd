"""The offline script (issue 10, item 8): ``-p resume True`` resumes as the README says (the script's
default overwrite steps aside), a failed run never leaves an output notebook beside another run's
summary, and Ctrl-C exits 130 saying how to continue (which then does). Real runs of scripts/run_offline.sh (papermill, stories260K, 200 real Alpaca rows, CPU)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from helpers import alpaca_rows, default_sigint, wait_for_a_whole_checkpoint, whole_checkpoint_steps

pytestmark = pytest.mark.slow  # real papermill runs of the script: the slow tier (pyproject.toml)
#: The toy fast path as the README gives it (stories260K has 512 positions), few steps, few tokens.
QUICK = [
    "-p",
    "save_steps",
    "2",
    "-p",
    "eval_steps",
    "2",
    "-p",
    "report_to",
    "none",
    "-p",
    "max_new_tokens",
    "8",
    "-p",
    "max_seq_length",
    "512",
]


#: The script's environment in the tests: the test's own .venv, no setup, one torch thread.
_ENV = dict(
    os.environ, SKIP_SETUP="1", VENV=str(Path(sys.executable).parent.parent), PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"
)


def _script(out, dataset, stories_dir, *args):
    env = dict(_ENV, OUT=str(out), MODEL=str(stories_dir), DATASET=str(dataset))
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "run_offline.sh"), *QUICK, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def runs(stories_dir, alpaca_jsonl, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("offline")
    dataset = tmp / "rows.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in alpaca_rows(alpaca_jsonl, 200)), encoding="utf-8")
    out = tmp / "run"
    first = _script(out, dataset, stories_dir, "-p", "max_steps", "4")
    assert first.returncode == 0, first.stderr[-3000:]
    summary_1 = json.loads((out / "outputs" / "run_summary.json").read_text())
    shutil.rmtree(out / "outputs" / "checkpoint-4")  # as if disconnected before the last save
    resumed = _script(out, dataset, stories_dir, "-p", "resume", "True", "-p", "max_steps", "4")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary_2 = json.loads((out / "outputs" / "run_summary.json").read_text())
    return {"out": out, "dataset": dataset, "summaries": (summary_1, summary_2)}


def test_resume_through_the_script_continues_the_run(runs):
    first, resumed = runs["summaries"]
    assert first["global_step"] == 4 and first["resumed_from"] is None
    assert resumed["global_step"] == 4 and resumed["resumed_from"].endswith("checkpoint-2")
    out = runs["out"]
    assert (out / "finetune_tinyllama.out.ipynb").exists() and not (out / "finetune_tinyllama.failed.ipynb").exists()
    assert not (out / "outputs" / "run.lock").exists()  # the kernel's exit released it


def _live_lock(output_dir: Path) -> bool:
    """``output_dir``'s run lock is held by a live process. A Ctrl-C of the script may leave the kernel's lock behind
    when papermill stops the kernel before its exit handler runs: the next run takes a dead process's lock over
    (machine/lock.py), so only a live holder would keep the resume out."""
    from tinyllama_ft.machine.lock import read_lock

    lock = read_lock(str(output_dir))
    if lock is None:
        return False
    try:
        os.kill(lock["pid"], 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_exits_130_says_how_to_continue_and_the_same_command_with_resume_does(
    stories_dir, alpaca_jsonl, tmp_path
):
    """Ctrl-C (SIGINT to the script's process group, as a terminal sends it) during training: exit status 130 and a
    line that says the checkpoints are kept and that ``-p resume True`` continues, not "run failed"; it does."""
    import signal

    out, dataset = tmp_path / "run", tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in alpaca_rows(alpaca_jsonl, 200)), encoding="utf-8")
    env = dict(_ENV, OUT=str(out), MODEL=str(stories_dir), DATASET=str(dataset))
    argv = [
        "bash",
        str(REPO / "scripts" / "run_offline.sh"),
        *QUICK,
        "-p",
        "max_steps",
        "400",
        "-p",
        "eval_steps",
        "400",
    ]
    script = subprocess.Popen(
        argv,
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    wait_for_a_whole_checkpoint(out / "outputs", script)
    os.killpg(script.pid, signal.SIGINT)
    _, err = script.communicate(timeout=300)
    assert script.returncode == 130, err[-3000:]
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            f"run interrupted: its checkpoints in {out} are kept; the same command with -p resume True continues"
        )
    ), err[-3000:]
    assert "run failed" not in err and not _live_lock(out / "outputs")
    step = whole_checkpoint_steps(out / "outputs")[-1]  # Ctrl-C may have cut the next save short: a resume goes back
    resumed = _script(out, dataset, stories_dir, "-p", "resume", "True", "-p", "max_steps", str(step + 1))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((out / "outputs" / "run_summary.json").read_text())["resumed_from"].endswith(f"checkpoint-{step}")


def test_a_failed_run_leaves_no_notebook_beside_another_runs_summary(runs, stories_dir):
    out, nb = runs["out"], runs["out"] / "finetune_tinyllama.out.ipynb"
    summary = out / "outputs" / "run_summary.json"
    # fails at the configuration cell, before the output folder is touched: the earlier pair stays
    before = summary.read_bytes()
    failed = _script(out, runs["dataset"], stories_dir, "-p", "template", "no_such_template")
    assert failed.returncode != 0 and "run failed" in failed.stderr
    assert (out / "finetune_tinyllama.failed.ipynb").exists() and nb.exists() and summary.read_bytes() == before
    assert "no_such_template" not in nb.read_text(encoding="utf-8")
    # fails after its overwrite deleted the earlier run (a model folder with a config but no weights fails at
    # the model cell, after the output folder's): the earlier run's notebook goes with its summary
    config_only = out.parent / "config_only"
    config_only.mkdir(exist_ok=True)
    shutil.copy(stories_dir / "config.json", config_only / "config.json")
    failed = _script(out, runs["dataset"], config_only)
    assert failed.returncode != 0 and "run failed" in failed.stderr
    assert not summary.exists() and not nb.exists() and (out / "finetune_tinyllama.failed.ipynb").exists()
