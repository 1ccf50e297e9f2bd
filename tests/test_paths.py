"""API edges (issue 10, item 6): ``generate`` and ``stream`` agree on no instructions, and every path
parameter expands ``~`` and environment variables (never a folder named ``~`` or ``$RUNS``)."""

import os

import pytest

from helpers import alpaca_rows, stories_lora
from tinyllama_ft.machine.paths import expand_path


@pytest.fixture(scope="module")
def lora(stories_dir, cpu):
    return stories_lora(stories_dir, cpu, 256)


def test_generate_and_stream_return_no_answers_for_no_instructions(lora, capsys):
    from tinyllama_ft.infer.generation import generate, stream

    model, tokenizer = lora
    assert generate(model, tokenizer, []) == [] == stream(model, tokenizer, [])
    assert generate(model, tokenizer, (), inputs=[]) == []
    with pytest.raises(ValueError, match="inputs has 1 items for 0 instructions"):
        generate(model, tokenizer, [], inputs=["x"])
    assert capsys.readouterr().out == ""


def test_expand_path(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RUNS", str(tmp_path / "runs"))
    assert expand_path("~/a") == str(tmp_path / "a")
    assert expand_path("$RUNS/x") == expand_path("${RUNS}/x") == str(tmp_path / "runs" / "x")
    assert expand_path("yahma/alpaca-cleaned") == "yahma/alpaca-cleaned" and expand_path(None) is None
    assert expand_path("$NOT_SET_ANYWHERE/x") == "$NOT_SET_ANYWHERE/x"  # the error that follows names it


def test_every_path_parameter_expands_home_and_variables(lora, stories_dir, alpaca_jsonl, cpu, tmp_path, monkeypatch):
    import shutil

    from tinyllama_ft.models.adapters import load_adapter, save_adapter
    from tinyllama_ft.train.checkpoints import last_checkpoint
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.data.instructions import load_instruction_data
    from tinyllama_ft.machine.lock import release_run_lock
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.train.plotting import loss_curve
    from tinyllama_ft.models.run_record import read_run_config
    from tinyllama_ft.train.output_dir import ensure_drive, prepare_output_dir
    from tinyllama_ft.train.summary import write_run_summary
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.sft_trainer import sft_config_kwargs

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RUNS", str(home / "runs"))
    monkeypatch.setenv("DATA", str(alpaca_jsonl.parent))
    monkeypatch.setenv("MODELS", str(stories_dir.parent))
    monkeypatch.chdir(cwd)
    model, tokenizer = lora

    cfg = FinetuneConfig(
        output_dir="~/runs/x", adapter_dir="$RUNS/x/adapter", report_to="none", dataset="$DATA/" + alpaca_jsonl.name
    )
    assert (cfg.output_dir, cfg.adapter_dir) == (str(home / "runs" / "x"), str(home / "runs" / "x" / "adapter"))
    assert cfg.dataset == str(alpaca_jsonl) and cfg.model_name == "unsloth/tinyllama-bnb-4bit"  # a Hub id stays
    assert not ensure_drive("~/runs/x")
    assert prepare_output_dir(cfg) == "new"
    assert read_run_config("$RUNS/x") is not None and (home / "runs" / "x" / "run.lock").exists()
    raw = FinetuneConfig(report_to="none")
    raw.output_dir = "~/runs/x"  # set after construction: the trainer still expands it
    assert sft_config_kwargs(raw, plan_run(raw, cpu), has_eval=False)["output_dir"] == str(home / "runs" / "x")
    os.makedirs(home / "runs" / "x" / "checkpoint-1")
    assert last_checkpoint("~/runs/x") is None  # found (and skipped: empty), not a missing "~" folder
    saved = save_adapter(model, tokenizer, "$RUNS/x/adapter")
    assert saved == str(home / "runs" / "x" / "adapter")
    shutil.copytree(stories_dir, home / "stories")
    reloaded, _ = load_adapter(
        "~/runs/x/adapter",
        dtype=None,
        load_in_4bit=False,  # max_seq_length: the run's record
        backend="transformers",
        hardware=cpu,
        base_model="~/stories",
    )
    assert reloaded is not None
    assert (
        load_model(
            "$MODELS/" + stories_dir.name,
            max_seq_length=256,
            dtype=None,
            load_in_4bit=False,
            backend="transformers",
            hardware=cpu,
        )[0]
        is not None
    )
    rows, _ = load_instruction_data("$DATA/" + alpaca_jsonl.name)
    assert len(rows) == len(alpaca_rows(alpaca_jsonl, 10**6))
    write_run_summary("~/runs/x/run_summary.json", answer=1)
    loss_curve([{"step": 1, "loss": 2.0}], "$RUNS/x/loss_curve.png")
    assert {"run_summary.json", "loss_curve.png", "adapter"} <= set(os.listdir(home / "runs" / "x"))
    release_run_lock("~/runs/x")
    assert os.listdir(cwd) == []  # no "~", "$RUNS" or "$DATA" folder where the process stood
