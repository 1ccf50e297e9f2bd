"""Secrets stay secret, loading runs no foreign code, weights are never pickles.

A W&B key or Hub token comes from the environment or Colab's secrets, is never a parameter and is never
written anywhere by a run (checked byte for byte on every file a real papermill run writes);
``trust_remote_code`` is off unless asked; model and adapter weights are read and written as safetensors.
"""

import base64
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from conftest import FAKE_HF_TOKEN, FAKE_WANDB_KEY, NOTEBOOK_STEPS
from helpers import stories_lora
from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.config.secrets import export_secrets
from wandb_runfile import read_offline_metrics

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle")


# --- secrets are never parameters -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "wandb_api_key",
        "WANDB_API_KEY",
        "hf_token",
        "HF_TOKEN",
        "token",
        "api_key",
        "Hub_Token",
        "push_to_hub_token",
        "HUGGING_FACE_HUB_TOKEN",
        "wandb_key",
        "password",
        "client_secret",
    ],
)
def test_from_mapping_refuses_a_secret_name_without_showing_its_value(name):
    with pytest.raises(ValueError) as raised:
        FinetuneConfig.from_mapping({"max_steps": 5, name: FAKE_WANDB_KEY})
    message = str(raised.value)
    assert repr(name) in message and "environment" in message and "Colab secret" in message
    assert FAKE_WANDB_KEY not in message and FAKE_WANDB_KEY not in repr(raised.value)


def test_tokenizer_and_config_names_are_not_taken_for_secrets():
    from tinyllama_ft.config.coercion import ConfigError

    names = {
        "eos_token": "</s>",
        "pad_token": "<unk>",
        "max_new_tokens": 8,
        "tokenizer": None,
        "wandb_project": "p",
        "tokens_per_s": 1.0,
        "bos_token_id": 1,
    }
    # secret-looking names are refused first: every name here is refused as unknown instead
    with pytest.raises(
        ConfigError, match=r"unknown parameter 'eos_token' .*; 'pad_token' .*; 'tokens_per_s'; 'bos_token_id':"
    ):
        FinetuneConfig.from_mapping(names)


@pytest.fixture
def colab(monkeypatch):
    """Colab's ``google.colab.userdata`` (Colab cannot run here: the one stand-in), holding both secrets."""
    stored = {"WANDB_API_KEY": FAKE_WANDB_KEY, "HF_TOKEN": FAKE_HF_TOKEN}

    def get(name):
        if name not in stored:
            raise KeyError(name)  # SecretNotFoundError in Colab
        return stored[name]

    module = types.ModuleType("google.colab")
    module.userdata = types.SimpleNamespace(get=get)
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", module)
    for name in ("WANDB_API_KEY", "HF_TOKEN"):
        monkeypatch.setenv(name, "placeholder")  # recorded, so the test's changes are undone
        monkeypatch.delenv(name)
    return stored


def test_colab_secrets_reach_the_environment_silently_and_the_hub_uses_the_token(colab, monkeypatch, tmp_path, capsys):
    import huggingface_hub

    monkeypatch.setenv("HF_HOME", str(tmp_path))  # no stored login to shadow the token
    assert export_secrets() == {"WANDB_API_KEY": "colab-secrets", "HF_TOKEN": "colab-secrets"}
    assert os.environ["HF_TOKEN"] == FAKE_HF_TOKEN and os.environ["WANDB_API_KEY"] == FAKE_WANDB_KEY
    assert huggingface_hub.get_token() == FAKE_HF_TOKEN
    monkeypatch.setenv("HF_TOKEN", "from-the-environment")
    assert export_secrets(("HF_TOKEN",)) == {"HF_TOKEN": "environment"}  # the environment wins, untouched
    assert os.environ["HF_TOKEN"] == "from-the-environment"
    captured = capsys.readouterr()
    assert FAKE_HF_TOKEN not in captured.out + captured.err and FAKE_WANDB_KEY not in captured.out + captured.err


def test_the_secrets_print_as_one_line_naming_each_source_never_a_value(colab, monkeypatch):
    """Issue 40, item 7: the notebook's ``print("secrets:", export_secrets())`` reads as a sentence, not a dict."""
    monkeypatch.setenv("HF_TOKEN", FAKE_HF_TOKEN)
    found = export_secrets()
    assert str(found) == "WANDB_API_KEY from Colab's secrets, HF_TOKEN from the environment"
    assert str(export_secrets(env={}, secret=lambda name: None)) == "WANDB_API_KEY not set, HF_TOKEN not set"
    assert FAKE_HF_TOKEN not in str(found) + repr(found) and FAKE_WANDB_KEY not in str(found) + repr(found)


# --- trust_remote_code off unless asked; safetensors only --------------------------------------------

CUSTOM_CODE = """import pathlib
pathlib.Path({marker!r}).write_text("the model's own code ran")
from transformers import LlamaConfig, LlamaForCausalLM


class CustomConfig(LlamaConfig):
    model_type = "tinyllama_ft_custom"


class CustomForCausalLM(LlamaForCausalLM):
    config_class = CustomConfig
"""


@pytest.fixture(scope="module")
def custom_code_model(tmp_path_factory, stories_dir):
    """stories260K as a repository that ships its own model code (``auto_map``), which leaves a marker."""
    folder = tmp_path_factory.mktemp("custom-code-model")
    for f in stories_dir.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((stories_dir / "config.json").read_text())
    config.update(
        model_type="tinyllama_ft_custom",
        architectures=["CustomForCausalLM"],
        auto_map={"AutoConfig": "custom_code.CustomConfig", "AutoModelForCausalLM": "custom_code.CustomForCausalLM"},
    )
    (folder / "config.json").write_text(json.dumps(config))
    marker = folder.parent / f"{folder.name}.ran"
    (folder / "custom_code.py").write_text(CUSTOM_CODE.format(marker=str(marker)))
    return folder, marker


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, stories_dir):
    from tinyllama_ft.models.adapters import save_adapter
    from tinyllama_ft.machine.hardware import Hardware

    model, tokenizer = stories_lora(stories_dir, Hardware())
    return Path(save_adapter(model, tokenizer, str(tmp_path_factory.mktemp("adapter") / "lora_model")))


def test_model_code_from_the_repository_never_runs_by_default(custom_code_model, adapter, cpu):
    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.models.loading import load_model

    folder, marker = custom_code_model
    cfg = FinetuneConfig(model_name=str(folder), backend="transformers", load_in_4bit=False, max_seq_length=512)
    assert cfg.trust_remote_code is False
    with pytest.raises(ValueError, match="trust_remote_code"):
        load_model(
            cfg.model_name,
            max_seq_length=cfg.max_seq_length,
            dtype=cfg.dtype,
            load_in_4bit=cfg.load_in_4bit,
            backend=cfg.backend,
            hardware=cpu,
            trust_remote_code=cfg.trust_remote_code,
        )
    with pytest.raises(ValueError, match="trust_remote_code"):
        load_adapter(
            str(adapter),
            max_seq_length=512,
            dtype=None,
            load_in_4bit=False,
            backend="transformers",
            hardware=cpu,
            base_model=str(folder),
        )
    assert not marker.exists()


def test_asked_for_the_repository_code_runs_through_both_loaders(custom_code_model, adapter, tmp_path):
    """The same folder loads once asked: the refusal above is the flag's doing, and load_adapter passes it on."""
    folder, marker = custom_code_model
    code = (
        "from tinyllama_ft.models.adapters import load_adapter\n"
        "from tinyllama_ft.machine.hardware import Hardware\n"
        "from tinyllama_ft.models.loading import load_model\n"
        f"m, _ = load_model({str(folder)!r}, max_seq_length=512, load_in_4bit=False, backend='transformers', "
        f"hardware=Hardware(), trust_remote_code=True)\n"
        f"p, _ = load_adapter({str(adapter)!r}, max_seq_length=512, load_in_4bit=False, backend='transformers', "
        f"hardware=Hardware(), "
        f"base_model={str(folder)!r}, trust_remote_code=True)\n"
        "print(type(m).__name__, type(p.get_base_model()).__name__)\n"
    )
    env = dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "modules"))  # where transformers copies the code
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["CustomForCausalLM", "CustomForCausalLM"] and marker.exists()


def test_pickled_weights_are_never_loaded(stories_dir, adapter, tmp_path, cpu):
    import torch
    from safetensors.torch import load_file

    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.models.loading import load_model

    def pickled_copy(src, weights: str, pickle_name: str):
        """``src`` with its safetensors weights replaced by the same tensors pickled under ``pickle_name``."""
        dst = tmp_path / f"pickled-{src.name}"
        dst.mkdir()
        for f in src.iterdir():
            if f.name != weights:
                (dst / f.name).write_bytes(f.read_bytes())
        torch.save(load_file(src / weights), dst / pickle_name)
        return dst

    model_dir = pickled_copy(stories_dir, "model.safetensors", "pytorch_model.bin")
    with pytest.raises(OSError, match="safetensors"):
        load_model(
            str(model_dir), max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
        )
    adapter_dir = pickled_copy(adapter, "adapter_model.safetensors", "adapter_model.bin")
    with pytest.raises(FileNotFoundError, match="adapter_dir=.*safetensors"):
        load_adapter(
            str(adapter_dir), max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
        )


# --- a real run with keys in the environment: the keys are in none of its files --------------------
# (the session's one notebook run, conftest.notebook_run: W&B and Hub keys set, the W&B server silent)


@pytest.fixture(scope="module")
def keyed_run(notebook_run):
    return notebook_run


@pytest.mark.slow
def test_the_run_had_the_key_and_went_offline_in_one_line(keyed_run):
    _, out, _ = keyed_run
    text = out.read_text()
    assert "secrets: WANDB_API_KEY from the environment" in text  # the kernel had the key: the search is not vacuous
    lines = [line for line in text.splitlines() if "W&B: logging offline" in line]
    assert len(lines) == 1 and "not reachable" in lines[0], lines


@pytest.mark.slow
def test_no_file_the_run_wrote_holds_a_key(keyed_run):
    workdir, _, _ = keyed_run
    needles = {}
    for name, key in (("WANDB_API_KEY", FAKE_WANDB_KEY), ("HF_TOKEN", FAKE_HF_TOKEN)):
        needles[name] = key.encode()
        needles[f"{name} (utf-16)"] = key.encode("utf-16-le")
        needles[f"{name} (base64 basic auth)"] = base64.b64encode(f"api:{key}".encode())[:-4]
    files = [p for p in workdir.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {
        "out.ipynb",
        "run_summary.json",
        "debug.log",
        "debug-internal.log",
        "adapter_model.safetensors",
        "trainer_state.json",
        "training_args.bin",
        "optimizer.pt",
    } <= names, sorted(names)
    assert any(p.suffix == ".wandb" for p in files)
    leaks = [
        f"{p.relative_to(workdir)}: {what}"
        for p in files
        for what, needle in needles.items()
        if needle in p.read_bytes()
    ]
    assert not leaks, leaks


@pytest.mark.slow
def test_adapter_and_checkpoints_hold_weights_only_as_safetensors(keyed_run):
    workdir, _, summary = keyed_run
    adapter = Path(summary["adapter_dir"])
    assert (adapter / "adapter_model.safetensors").is_file()
    assert not [f.name for f in adapter.iterdir() if f.suffix in PICKLE_SUFFIXES]
    checkpoints = sorted((workdir / "outputs").glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-20", f"checkpoint-{NOTEBOOK_STEPS}"]
    for checkpoint in checkpoints:
        assert (checkpoint / "adapter_model.safetensors").is_file()
        pickles = {f.name for f in checkpoint.iterdir() if f.suffix in PICKLE_SUFFIXES}
        # the Trainer's own resume state (torch.save): optimizer moments, scheduler, RNG, arguments; no weights
        assert pickles <= {"optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"}, pickles


@pytest.mark.slow
def test_train_loss_per_step_reads_back_from_the_offline_run(keyed_run):
    workdir, _, summary = keyed_run
    run_dir = next((workdir / "outputs" / "wandb").glob("offline-run-*"))
    logged = {
        row["train/global_step"]: row["train/loss"] for row in read_offline_metrics(str(run_dir)) if "train/loss" in row
    }
    trained = {entry["step"]: entry["loss"] for entry in summary["log_history"] if "loss" in entry}
    assert len(trained) == NOTEBOOK_STEPS and logged == trained
