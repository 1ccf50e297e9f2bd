"""One run per output_dir at a time (issue 10, item 1): real processes race for a folder through
``prepare_output_dir``; a killed run's lock is stale at once on its host; another machine's lock is
stale once its heartbeat is old, and blocks while the heartbeat is fresh."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import REPO
from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.machine.lock import LOCK_FILE, RunLockedError, acquire_run_lock, read_lock, release_run_lock
from tinyllama_ft.train.output_dir import prepare_output_dir

RACER = """
import sys, time
from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.train.output_dir import prepare_output_dir
from tinyllama_ft.machine.lock import release_run_lock
out, start, hold = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
cfg = FinetuneConfig(output_dir=out, report_to="none")
time.sleep(max(0.0, start - time.time()))
print(prepare_output_dir(cfg), flush=True)
time.sleep(hold)
release_run_lock(out)
"""

HOLDER = """
import sys, time
from tinyllama_ft.machine.lock import acquire_run_lock
acquire_run_lock(sys.argv[1], heartbeat_s=float(sys.argv[2]), stale_after_s=float(sys.argv[3]))
print("locked", flush=True)
time.sleep(600)
"""


def _python(code, *args, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )


def _write_lock(out, **fields):
    out.mkdir(parents=True, exist_ok=True)
    now = time.time()
    info = {
        "host": "colab-runtime-before-the-disconnect",
        "pid": 4242,
        "started": now - 3600,
        "started_utc": "earlier",
        "heartbeat": now,
        "token": "theirs",
        **fields,
    }
    (out / LOCK_FILE).write_text(json.dumps(info), encoding="utf-8")


def test_two_processes_racing_for_one_folder_one_wins_the_other_is_told_who(tmp_path):
    out = tmp_path / "outputs"
    start = time.time() + 4  # both import first, then call prepare_output_dir at the same instant
    racers = [_python(RACER, out, start, 3) for _ in range(2)]
    done = [(p.pid, *p.communicate(timeout=60), p.returncode) for p in racers]
    won = [d for d in done if d[3] == 0]
    lost = [d for d in done if d[3] != 0]
    assert len(won) == 1 and len(lost) == 1, done
    assert won[0][1].strip() == "new"
    said = lost[0][2].strip().splitlines()[-1]
    assert said.startswith("tinyllama_ft.machine.lock.RunLockedError: output_dir=")
    assert str(out) in said and f"host {socket.gethostname()!r}, process {won[0][0]}" in said
    assert "heartbeat 0 s ago" in said or "heartbeat 1 s ago" in said or "heartbeat 2 s ago" in said
    assert not (out / LOCK_FILE).exists()  # the winner released it at its end


def test_a_killed_run_on_this_host_leaves_a_lock_that_is_stale_at_once(tmp_path, capsys):
    out = tmp_path / "outputs"
    holder = _python(HOLDER, out, 30, 300)
    assert holder.stdout.readline().strip() == "locked"
    assert read_lock(str(out))["pid"] == holder.pid
    with pytest.raises(RunLockedError, match=f"process {holder.pid}"):
        acquire_run_lock(str(out))  # alive: blocks
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    lock = acquire_run_lock(str(out))  # no waiting for the 300 s heartbeat timeout
    assert f"process {holder.pid}" in capsys.readouterr().out and read_lock(str(out))["pid"] == os.getpid()
    lock.release()
    assert not (out / LOCK_FILE).exists()


def test_another_machines_lock_with_an_old_heartbeat_is_taken_over(tmp_path, capsys):
    out = tmp_path / "outputs"
    _write_lock(out, heartbeat=time.time() - 400)
    with acquire_run_lock(str(out), stale_after_s=300) as lock:
        assert read_lock(str(out))["token"] == lock.info["token"]
    said = capsys.readouterr().out
    assert "stale lock" in said and "'colab-runtime-before-the-disconnect', process 4242" in said and "is dead" in said


def test_another_machines_lock_with_a_fresh_heartbeat_blocks_and_names_it(tmp_path):
    out = tmp_path / "outputs"
    _write_lock(out, heartbeat=time.time() - 5)
    with pytest.raises(RunLockedError) as e:
        prepare_output_dir(FinetuneConfig(output_dir=str(out), report_to="none"))
    said = str(e.value)
    assert (
        f"output_dir={str(out)!r} is in use" in said and "'colab-runtime-before-the-disconnect', process 4242" in said
    )
    assert "last heartbeat 5 s ago" in said and "expires 300 s after" in said
    assert read_lock(str(out))["token"] == "theirs" and not (out / "run_config.json").exists()


def test_a_live_runs_heartbeat_keeps_it_locked_past_the_timeout_for_another_machine(tmp_path, monkeypatch):
    out = tmp_path / "outputs"
    holder = _python(HOLDER, out, 0.2, 1)
    try:
        assert holder.stdout.readline().strip() == "locked"
        first = read_lock(str(out))["heartbeat"]
        time.sleep(1.5)  # longer than stale_after_s=1: only the heartbeat keeps it live
        assert read_lock(str(out))["heartbeat"] > first
        monkeypatch.setattr(socket, "gethostname", lambda: "another-colab-runtime")  # pid means nothing here
        with pytest.raises(RunLockedError, match=f"process {holder.pid}"):
            acquire_run_lock(str(out), stale_after_s=1)
    finally:
        holder.kill()
        holder.wait()


def test_the_same_process_reuses_its_lock_and_a_failed_prepare_releases_it(tmp_path):
    out = tmp_path / "outputs"
    cfg = FinetuneConfig(output_dir=str(out), report_to="none")
    assert prepare_output_dir(cfg) == "new"
    token = read_lock(str(out))["token"]
    assert prepare_output_dir(cfg) == "new"  # the cell run again
    assert read_lock(str(out))["token"] == token
    (out / "run_summary.json").write_text("{}")
    with pytest.raises(FileExistsError):
        prepare_output_dir(cfg)
    assert not (out / LOCK_FILE).exists()
    assert release_run_lock(str(out)) is False


def test_only_the_main_process_of_a_launch_takes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert acquire_run_lock(str(tmp_path / "outputs")) is None
    assert not (tmp_path / "outputs" / LOCK_FILE).exists()
    monkeypatch.setenv("RANK", "0")
    with acquire_run_lock(str(tmp_path / "outputs")):
        assert (tmp_path / "outputs" / LOCK_FILE).exists()


def test_the_command_lines_run_releases_the_lock_when_it_fails(tmp_path, stories_dir, alpaca_jsonl, cpu, capsys):
    """``pipeline.run_training`` (``tinyllama-ft train``) holds the lock from ``prepare_output_dir`` on and
    gives it back however the run ends: here the model has a config but no weights, so loading it fails
    after the folder was locked; the next run in the folder is not locked out."""
    import shutil

    from helpers import alpaca_rows
    from tinyllama_ft.pipeline import run_training

    model = tmp_path / "config_only"
    model.mkdir()
    shutil.copy(stories_dir / "config.json", model / "config.json")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in alpaca_rows(alpaca_jsonl, 20)), encoding="utf-8")
    out = tmp_path / "outputs"
    cfg = FinetuneConfig(
        model_name=str(model),
        dataset=str(rows),
        output_dir=str(out),
        report_to="none",
        load_in_4bit=False,
        max_seq_length=256,
    )
    with pytest.raises(OSError):
        run_training(cfg, hardware=cpu)
    assert "output_dir" in capsys.readouterr().out and (out / "run_config.json").exists()  # it got that far
    assert not (out / LOCK_FILE).exists() and release_run_lock(str(out)) is False
    from tinyllama_ft.data.instructions import load_instruction_data
    from tinyllama_ft.data.fingerprint import data_fingerprint

    recorded = json.loads((out / "run_config.json").read_text(encoding="utf-8"))
    assert recorded["data_fingerprint"] == data_fingerprint(load_instruction_data(str(rows))[0])  # for a resume
    assert prepare_output_dir(cfg) == "new"  # nothing but run_config.json there, and no lock in the way
    assert release_run_lock(str(out)) is True
