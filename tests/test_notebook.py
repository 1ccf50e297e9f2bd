"""The main job: the notebook under papermill on stories260K and the real Alpaca rows (CPU, ~1 minute)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.notebook


@pytest.fixture(scope="module")
def run(tmp_path_factory, stories_dir, alpaca_jsonl):
    import papermill

    workdir = tmp_path_factory.mktemp("notebook")
    env_backup = dict(os.environ)
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED"):  # exercise the default W&B path, headless
        os.environ.pop(name, None)
    os.environ["WANDB_DISABLE_GIT"] = "true"
    try:
        papermill.execute_notebook(
            str(REPO / "notebooks" / "finetune_tinyllama.ipynb"), str(workdir / "out.ipynb"), cwd=str(workdir),
            kernel_name="python3", progress_bar=False,
            parameters=dict(model_name=str(stories_dir), dataset=str(alpaca_jsonl), max_seq_length=512,
                            learning_rate=2e-4, max_steps=40, eval_steps=20, save_steps=20, gradient_checkpointing=False,
                            test_size=0.01, report_to="wandb", prompts=["What is the capital of France?", "Name three colors."]),
        )
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    summary = json.loads((workdir / "outputs" / "run_summary.json").read_text())
    return workdir, summary


def test_eval_loss_drops_by_at_least_ten_percent(run):
    _, summary = run
    assert summary["eval_loss_after"] <= 0.9 * summary["eval_loss_before"], summary


def test_papermill_parameters_reach_the_run(run):
    _, summary = run
    assert summary["config"]["max_steps"] == 40 and summary["global_step"] == 40
    assert summary["config"]["learning_rate"] == 2e-4 and summary["config"]["max_seq_length"] == 512
    assert summary["backend"] == "transformers" and summary["dtype"] == "float32" and summary["gpu"] is None
    assert [s["instruction"] for s in summary["samples"]] == ["What is the capital of France?", "Name three colors."]
    assert all(s["response"].strip() for s in summary["samples"])
    assert summary["train_tokens"] > 40 * 8 * 256 and summary["tokens_per_s"] > 0
    assert summary["peak_memory_gib"] is None and summary["versions"]["transformers"]


def test_run_logged_offline_and_plotted(run):
    workdir, _ = run
    assert list((workdir / "outputs" / "wandb").glob("offline-run-*"))
    assert (workdir / "outputs" / "loss_curve.png").stat().st_size > 1000
    out = (workdir / "out.ipynb").read_text()
    assert "logging offline" in out and "### Instruction: Name three colors." in out


def test_adapter_loads_in_a_fresh_process_with_plain_peft(run):
    _, summary = run
    code = (f"from peft import AutoPeftModelForCausalLM\n"
            f"m = AutoPeftModelForCausalLM.from_pretrained({summary['adapter_dir']!r})\n"
            f"print(type(m).__name__)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=300)
    assert "PeftModelForCausalLM" in out.stdout
