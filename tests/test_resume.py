"""Interruptions: a run SIGKILLed mid-training (a Colab disconnect) resumes from its last checkpoint and
trains exactly what the uninterrupted run trains (real stories260K, real Alpaca rows, CPU, ~20 s)."""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

import resume_driver


pytestmark = pytest.mark.slow  # two training processes, one killed and resumed

MAX_STEPS, SAVE_STEPS, KILL_AFTER = 12, 4, 8


def _driver(stories_dir, alpaca_jsonl, output_dir, result, *extra):
    # dropout on: the resumed run also needs the checkpoint's RNG state to match
    return resume_driver.command(
        stories_dir,
        alpaca_jsonl,
        output_dir,
        result,
        *extra,
        max_steps=MAX_STEPS,
        save_steps=SAVE_STEPS,
        lora_dropout=0.1,
    )


def _wait_for(path, proc, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc {proc.returncode}) before {path} was written")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} not written within {timeout} s")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def runs(stories_dir, alpaca_jsonl, tmp_path_factory):
    """An uninterrupted run, and the same run SIGKILLed after checkpoint-8 then resumed."""
    tmp = tmp_path_factory.mktemp("resume")
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    full = subprocess.Popen(
        _driver(stories_dir, alpaca_jsonl, tmp / "full", tmp / "full.json"),
        env=env,
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the victim sleeps 2 s after each step past 8, so the kill lands mid-run, between checkpoints 8 and 12
    victim = subprocess.Popen(
        _driver(
            stories_dir,
            alpaca_jsonl,
            tmp / "killed",
            tmp / "victim.json",
            "--step-delay",
            "2",
            "--delay-after",
            str(KILL_AFTER),
        ),
        env=env,
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # trainer_state.json is the last file transformers writes into a checkpoint: its presence means complete
    _wait_for(tmp / "killed" / f"checkpoint-{KILL_AFTER}" / "trainer_state.json", victim)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    left = sorted(os.listdir(tmp / "killed"))
    _, err = full.communicate(timeout=300)
    assert full.returncode == 0, err[-3000:]
    resumed = subprocess.run(
        _driver(stories_dir, alpaca_jsonl, tmp / "killed", tmp / "resumed.json", "--resume"),
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return {
        "tmp": tmp,
        "left_by_kill": left,
        "full": json.loads((tmp / "full.json").read_text()),
        "resumed": json.loads((tmp / "resumed.json").read_text()),
        "victim_wrote_result": (tmp / "victim.json").exists(),
    }


def _train_losses(logged):
    return {entry["step"]: entry["loss"] for entry in logged if "loss" in entry}


def test_the_kill_landed_between_checkpoint_8_and_the_end(runs):
    assert not runs["victim_wrote_result"]
    assert f"checkpoint-{KILL_AFTER}" in runs["left_by_kill"] and f"checkpoint-{MAX_STEPS}" not in runs["left_by_kill"]


def test_resumed_run_starts_after_the_checkpoint_and_runs_only_the_remaining_steps(runs):
    results = runs["resumed"]["results"]
    assert results["resumed_from"].endswith(f"checkpoint-{KILL_AFTER}")
    assert results["global_step"] == MAX_STEPS
    losses = _train_losses(runs["resumed"]["logged"])
    assert min(losses) == KILL_AFTER + 1
    assert sorted(losses) == list(range(KILL_AFTER + 1, MAX_STEPS + 1))
    assert results["eval_loss_before"] is None  # no "before" evaluation of a half-trained model
    full = runs["full"]["results"]
    tokens_at_8 = next(e["num_input_tokens_seen"] for e in full["log_history"] if e.get("step") == KILL_AFTER)
    assert results["train_tokens"] == full["train_tokens"] - tokens_at_8


def test_resumed_losses_match_the_uninterrupted_run(runs):
    full, resumed = _train_losses(runs["full"]["logged"]), _train_losses(runs["resumed"]["logged"])
    assert set(full) == set(range(1, MAX_STEPS + 1))
    for step, loss in resumed.items():
        assert loss == pytest.approx(full[step], rel=3e-4), (step, loss, full[step])  # ~3.5 nats: 1e-3
    assert runs["resumed"]["results"]["eval_loss_after"] == pytest.approx(
        runs["full"]["results"]["eval_loss_after"], rel=3e-4
    )


def test_checkpoint_cut_short_by_a_kill_is_skipped(runs, tmp_path):
    """A kill during a save leaves checkpoint-N without (or with half of) trainer_state.json."""
    from tinyllama_ft.train.checkpoints import last_checkpoint

    out = tmp_path / "out"
    shutil.copytree(runs["tmp"] / "killed", out)
    newest = out / f"checkpoint-{MAX_STEPS}"
    assert last_checkpoint(str(out)) == str(newest)
    state = newest / "trainer_state.json"
    state.write_text(state.read_text()[:100])  # cut short mid-write
    assert last_checkpoint(str(out)) == str(out / f"checkpoint-{KILL_AFTER}")
    state.unlink()  # killed before it was written
    assert last_checkpoint(str(out)) == str(out / f"checkpoint-{KILL_AFTER}")
    shutil.rmtree(out / f"checkpoint-{KILL_AFTER}")
    assert last_checkpoint(str(out)) is None
