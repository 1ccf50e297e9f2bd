"""Damaged checkpoints (issue 10, item 4): a truncated or garbled file in the newest checkpoint of a real
short run (stories260K, real Alpaca rows, CPU) is named and skipped; resume falls back to the checkpoint
before and trains the same losses as the undamaged run; with no sound checkpoint left, a clear error."""

import json
import os
import shutil
import subprocess

import pytest

import resume_driver

from conftest import REPO

MAX_STEPS, SAVE_STEPS = 8, 4


def _driver(stories_dir, alpaca_jsonl, output_dir, result, *extra):
    cmd = resume_driver.command(
        stories_dir,
        alpaca_jsonl,
        output_dir,
        result,
        *extra,
        max_steps=MAX_STEPS,
        save_steps=SAVE_STEPS,
        lora_dropout=0.1,
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run(stories_dir, alpaca_jsonl, tmp_path_factory):
    """A real 8-step run with checkpoint-4 and checkpoint-8."""
    tmp = tmp_path_factory.mktemp("ckpt")
    done = _driver(stories_dir, alpaca_jsonl, tmp / "out", tmp / "full.json")
    assert done.returncode == 0, done.stderr[-3000:]
    return {"out": tmp / "out", "full": json.loads((tmp / "full.json").read_text())}


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garble(path):
    """64 bytes of 0xFF: in the middle of a torch archive or JSON file, in the header of a safetensors file
    (bytes garbled inside a tensor's data cannot be seen: safetensors stores no checksum)."""
    data = bytearray(path.read_bytes())
    at = 8 if path.suffix == ".safetensors" else len(data) // 2
    data[at : at + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))


FILES = (
    "adapter_model.safetensors",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
    "adapter_config.json",
)


@pytest.mark.parametrize("damage", [_truncate, _garble], ids=["truncated", "garbled"])
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_file_is_named_and_the_checkpoint_before_is_used(run, tmp_path, capsys, name, damage):
    from tinyllama_ft.train.checkpoints import checkpoint_problem, last_checkpoint

    out = tmp_path / "out"
    shutil.copytree(run["out"], out)
    assert checkpoint_problem(str(out / "checkpoint-8")) is None
    damage(out / "checkpoint-8" / name)
    path, why = checkpoint_problem(str(out / "checkpoint-8"))
    assert path == str(out / "checkpoint-8" / name) and why
    assert last_checkpoint(str(out)) == str(out / "checkpoint-4")
    said = capsys.readouterr().out
    assert f"skipping {out / 'checkpoint-8'}: {out / 'checkpoint-8' / name}" in said


def test_resume_falls_back_past_a_garbled_optimizer_and_trains_the_same_losses(
    run, stories_dir, alpaca_jsonl, tmp_path
):
    """torch.load reads a garbled optimizer.pt without a word: the CRC check catches it."""
    out = tmp_path / "out"
    shutil.copytree(run["out"], out)
    _garble(out / "checkpoint-8" / "optimizer.pt")
    # resume a run that goes on to step 8: from checkpoint-4, since checkpoint-8 is damaged
    resumed = _driver(stories_dir, alpaca_jsonl, out, tmp_path / "resumed.json", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "optimizer.pt fails its CRC-32 check" in resumed.stdout
    result = json.loads((tmp_path / "resumed.json").read_text())
    assert result["results"]["resumed_from"] == str(out / "checkpoint-4")
    full = {e["step"]: e["loss"] for e in run["full"]["logged"] if "loss" in e}
    again = {e["step"]: e["loss"] for e in result["logged"] if "loss" in e}
    assert sorted(again) == [5, 6, 7, 8]
    for step, loss in again.items():
        assert loss == pytest.approx(full[step], rel=3e-4), (step, loss, full[step])  # ~3.5 nats: 1e-3


def test_no_sound_checkpoint_left_is_an_error_naming_the_files(run, stories_dir, alpaca_jsonl, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(run["out"], out)
    _truncate(out / "checkpoint-8" / "rng_state.pth")
    _garble(out / "checkpoint-4" / "scheduler.pt")
    failed = _driver(stories_dir, alpaca_jsonl, out, tmp_path / "r.json", "--resume")
    assert failed.returncode != 0
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("tinyllama_ft.train.checkpoints.DamagedCheckpointError: resume: no checkpoint")
    assert str(out / "checkpoint-8" / "rng_state.pth") in last and str(out / "checkpoint-4" / "scheduler.pt") in last
    assert "weights_only" not in failed.stderr


def test_only_checkpoint_n_folders_are_checkpoints(tmp_path):
    """transformers names its checkpoints ``checkpoint-<step>`` and resumes only from those (``get_last_checkpoint``);
    a person's copy (``checkpoint-10-old``, a folder of an earlier run set aside) is not the run's newest checkpoint,
    though ``sort_checkpoints``' prefix match reads it as step 10."""
    from tinyllama_ft.train.checkpoints import checkpoint_dirs, last_checkpoint

    for name in ("checkpoint-4", "checkpoint-10-old", "checkpoint-4 (copy)", "checkpoint-best"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    assert checkpoint_dirs(str(tmp_path)) == [str(tmp_path / "checkpoint-4")]
    assert last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-4")
