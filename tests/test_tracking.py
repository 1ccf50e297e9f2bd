"""W&B: key from the environment or Colab secrets, never a prompt without a person, offline fallback."""

import sys
import time
import types

import pytest

from tinyllama_ft.tracking import Tracking, find_api_key, finish_tracking, start_tracking


@pytest.fixture
def no_wandb_env(monkeypatch):
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")


def test_key_from_environment_then_colab_secrets(monkeypatch):
    assert find_api_key({"WANDB_API_KEY": "k1"}, secret=lambda name: "k2") == ("k1", "environment")
    assert find_api_key({}, secret=lambda name: "k2" if name == "WANDB_API_KEY" else None) == ("k2", "colab-secrets")
    assert find_api_key({}, secret=lambda name: None) == (None, None)


def test_colab_secrets_are_read_through_google_colab_userdata(monkeypatch):
    from tinyllama_ft.tracking import colab_secret

    userdata = types.SimpleNamespace(get=lambda name: {"WANDB_API_KEY": "from-colab"}[name])
    colab = types.ModuleType("google.colab")
    colab.userdata = userdata
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    assert colab_secret("WANDB_API_KEY") == "from-colab"
    assert colab_secret("HF_TOKEN") is None  # a missing secret is "no key", not an error


def test_report_to_none_starts_nothing():
    assert start_tracking("none") == Tracking(report_to="none")


def test_no_key_and_no_person_logs_offline_and_says_where(no_wandb_env, tmp_path, capsys, monkeypatch):
    import wandb

    monkeypatch.setattr(wandb, "login", lambda *a, **k: pytest.fail("must not prompt"))
    tracking = start_tracking("wandb", "tiny-llama", "test-run", str(tmp_path), {"lora_r": 32}, prompt_allowed=False)
    wandb.log({"loss": 1.25})
    finish_tracking(tracking)
    out = capsys.readouterr().out
    assert tracking.mode == "offline" and tracking.key_source is None
    assert "offline" in out and str(tmp_path) in out and out.count("\n") == 1
    run_folder = tmp_path / "wandb"
    assert any(p.name.startswith("offline-run-") for p in run_folder.iterdir())
    record_file = next(run_folder.glob("offline-run-*/run-*.wandb"))
    for _ in range(100):  # W&B's service process may still be flushing the record file after finish()
        if b"loss" in record_file.read_bytes():
            break
        time.sleep(0.1)
    assert b"loss" in record_file.read_bytes()  # the logged metric is in the run's record file
