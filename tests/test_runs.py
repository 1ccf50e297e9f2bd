"""Output folder safety (an earlier run is never overwritten or mixed silently) and Google Drive mounting.

The earlier run is a real 4-step training of stories260K on real Alpaca rows (checkpoints written by
transformers, ``run_config.json`` by ``prepare_output_dir``); Colab and its mount function are injected.
"""

from tinyllama_ft.train.plan import plan_run
import json
import os
import shutil
from pathlib import Path
from dataclasses import replace

import pytest

from helpers import alpaca_rows, stories_lora, text_dataset
from tinyllama_ft.config.finetune import FIELD_NAMES, FinetuneConfig, identity_fields
from tinyllama_ft.machine.lock import LOCK_FILE
from tinyllama_ft.models.run_record import RUN_CONFIG, read_run_config
from tinyllama_ft.train.output_dir import ensure_drive, identity_differences, prepare_output_dir, run_identity

#: Fields that do not change what is computed (free to change on resume): the ones not marked identity.
NOT_IDENTITY = set(FIELD_NAMES) - set(identity_fields())


def _cfg(stories_dir, alpaca_jsonl, output_dir, **changes):
    return FinetuneConfig(
        model_name=str(stories_dir),
        dataset=str(alpaca_jsonl),
        max_seq_length=256,
        backend="transformers",
        load_in_4bit=False,
        gradient_checkpointing=False,
        learning_rate=2e-3,
        max_steps=4,
        save_steps=2,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        test_size=0.0,
        report_to="none",
        dataset_num_proc=None,
        output_dir=str(output_dir),
        **changes,
    )


def _train(cfg, stories_dir, alpaca_jsonl):
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.train.trainers import build_trainer
    from tinyllama_ft.train.loop import train_and_evaluate

    model, tokenizer = stories_lora(stories_dir, Hardware(), cfg.max_seq_length, cfg.seed)
    ds = text_dataset(alpaca_rows(alpaca_jsonl, 40), tokenizer)
    trainer = build_trainer(
        model=model, tokenizer=tokenizer, train_dataset=ds, eval_dataset=None, cfg=cfg, plan=plan_run(cfg, Hardware())
    )
    return train_and_evaluate(trainer, resume=cfg.resume)


@pytest.fixture(scope="module")
def finished(stories_dir, alpaca_jsonl, tmp_path_factory):
    """A finished run's folder: checkpoint-2, checkpoint-4, run_config.json, run_summary.json, loss curve, adapter."""
    out = tmp_path_factory.mktemp("finished") / "outputs"
    cfg = _cfg(stories_dir, alpaca_jsonl, out)
    assert prepare_output_dir(cfg) == "new"
    results = _train(cfg, stories_dir, alpaca_jsonl)
    assert results["global_step"] == 4
    (out / "run_summary.json").write_text(json.dumps({"global_step": 4}))
    (out / "loss_curve.png").write_bytes(b"\x89PNG")
    (out / "lora_model").mkdir()
    (out / "lora_model" / "adapter_config.json").write_text("{}")
    (out / "wandb").mkdir()
    return cfg


@pytest.fixture
def earlier(finished, tmp_path):
    """A private copy of the finished run (tests change it), and its configuration pointed at the copy."""
    out = tmp_path / "outputs"
    shutil.copytree(finished.output_dir, out)
    return replace(finished, output_dir=str(out))


def _listing(path):
    return sorted(os.listdir(path))


# --- (c) output folder safety ---


def test_new_or_empty_output_dir_starts_and_records_the_run(stories_dir, alpaca_jsonl, tmp_path):
    cfg = _cfg(stories_dir, alpaca_jsonl, tmp_path / "new" / "outputs")
    assert prepare_output_dir(cfg) == "new"
    assert read_run_config(cfg.output_dir) == json.loads(json.dumps(run_identity(cfg)))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert prepare_output_dir(replace(cfg, output_dir=str(empty))) == "new"
    assert _listing(empty) == sorted([RUN_CONFIG, LOCK_FILE])  # the lock: held until the run ends
    # killed before its first checkpoint: nothing to lose, a different run may start there
    assert prepare_output_dir(replace(cfg, output_dir=str(empty), learning_rate=1e-4)) == "new"
    assert read_run_config(str(empty))["learning_rate"] == 1e-4


def test_identity_keeps_training_fields_and_drops_volatile_ones(stories_dir, alpaca_jsonl, tmp_path):
    identity = run_identity(_cfg(stories_dir, alpaca_jsonl, tmp_path))
    for name in (
        "model_name",
        "dataset",
        "lora_r",
        "target_modules",
        "learning_rate",
        "effective_batch_size",
        "max_seq_length",
        "seed",
        "packing",
        "template",
        "optim",
        "lr_scheduler_type",
    ):
        assert name in identity
    assert not NOT_IDENTITY & set(identity)
    # the split is execution only: a smaller micro-batch with more accumulation is the same run
    import dataclasses

    cfg = _cfg(stories_dir, alpaca_jsonl, tmp_path)
    resplit = dataclasses.replace(
        cfg, per_device_train_batch_size=1, gradient_accumulation_steps=cfg.effective_batch_size
    )
    assert run_identity(resplit) == run_identity(cfg)
    assert run_identity(dataclasses.replace(cfg, gradient_accumulation_steps=99)) != run_identity(cfg)
    assert {
        "resume",
        "overwrite_output_dir",
        "prompts",
        "max_new_tokens",
        "output_dir",
        "max_steps",
        "backend",
        "recipe",
        "use_liger_kernel",
    } <= NOT_IDENTITY
    assert run_identity(dataclasses.replace(cfg, max_steps=cfg.max_steps * 2)) == run_identity(cfg)  # train longer
    assert run_identity(cfg, data_fingerprint="abc")["data_fingerprint"] == "abc"
    assert "data_fingerprint" not in run_identity(cfg)


def test_finished_run_is_not_overwritten_without_a_flag(earlier):
    before = {p: _listing(os.path.join(earlier.output_dir, p)) for p in ("checkpoint-2", "checkpoint-4")}
    record = read_run_config(earlier.output_dir)
    with pytest.raises(FileExistsError, match="resume=True.*overwrite_output_dir=True") as err:
        prepare_output_dir(earlier)
    assert "checkpoint-4" in str(err.value) and "run_summary.json" in str(err.value)
    assert {p: _listing(os.path.join(earlier.output_dir, p)) for p in before} == before
    assert read_run_config(earlier.output_dir) == record


@pytest.mark.parametrize("leftover", ["run_summary.json", "lora_model", "checkpoint-2"])
def test_any_trace_of_an_earlier_run_counts(earlier, leftover):
    """A summary or adapter alone (checkpoints deleted), or one checkpoint alone, is an earlier run too."""
    out = earlier.output_dir
    for name in os.listdir(out):
        if name != leftover:
            shutil.rmtree(os.path.join(out, name)) if os.path.isdir(os.path.join(out, name)) else os.remove(
                os.path.join(out, name)
            )
    with pytest.raises(FileExistsError, match=leftover):
        prepare_output_dir(earlier)


def test_resume_without_a_checkpoint_does_not_overwrite_a_finished_run(earlier):
    for name in ("checkpoint-2", "checkpoint-4"):
        shutil.rmtree(os.path.join(earlier.output_dir, name))
    with pytest.raises(FileExistsError, match="no complete checkpoint.*overwrite_output_dir=True"):
        prepare_output_dir(replace(earlier, resume=True))
    assert os.path.exists(os.path.join(earlier.output_dir, "run_summary.json"))


def test_resume_with_the_same_training_config_is_allowed(earlier, tmp_path):
    moved = tmp_path / "moved_to_drive"  # a folder copied elsewhere still resumes: output_dir is not identity
    shutil.copytree(earlier.output_dir, moved)
    cfg = replace(
        earlier,
        output_dir=str(moved),
        resume=True,
        max_steps=earlier.max_steps + 2,  # continued (the same max_steps: finished, nothing to train)
        prompts=("Name a color.",),
        max_new_tokens=8,
        report_to="wandb",
        eval_steps=5,
        save_steps=1,
        gradient_checkpointing=True,
    )
    assert prepare_output_dir(cfg) == "resume"
    assert "checkpoint-4" in os.listdir(moved)


def test_resume_with_a_different_training_config_names_the_fields(earlier):
    changed = replace(earlier, resume=True, learning_rate=1e-4, lora_r=8, target_modules=("q_proj",))
    with pytest.raises(ValueError, match="overwrite_output_dir=True") as err:
        prepare_output_dir(changed)
    message = str(err.value)
    assert "learning_rate" in message and "lora_r" in message and "target_modules" in message
    assert "seed" not in message and "model_name" not in message
    assert "0.002 then, 0.0001 now" in message
    assert read_run_config(earlier.output_dir)["learning_rate"] == 2e-3  # the record is kept
    assert identity_differences(read_run_config(earlier.output_dir), run_identity(earlier)) == {}


def test_resume_without_a_record_says_it_cannot_check(earlier, capsys):
    os.remove(os.path.join(earlier.output_dir, RUN_CONFIG))
    assert prepare_output_dir(replace(earlier, resume=True, max_steps=earlier.max_steps + 2)) == "resume"
    assert "cannot check" in capsys.readouterr().out
    assert read_run_config(earlier.output_dir) is not None  # recorded from now on


def test_resume_and_overwrite_together_is_an_error(earlier):
    with pytest.raises(ValueError, match="resume=True and overwrite_output_dir=True"):
        prepare_output_dir(replace(earlier, resume=True, overwrite_output_dir=True))
    assert "checkpoint-4" in os.listdir(earlier.output_dir)


def test_overwrite_deletes_the_earlier_run_so_nothing_mixes(earlier, stories_dir, alpaca_jsonl, capsys):
    cfg = replace(earlier, overwrite_output_dir=True, max_steps=3, save_steps=3, learning_rate=1e-3)
    assert prepare_output_dir(cfg) == "overwrite"
    assert "deleted" in capsys.readouterr().out
    # W&B logs and TRL's model card (rewritten at the next save) are not the run's checkpoints: kept
    assert _listing(cfg.output_dir) == sorted(["README.md", RUN_CONFIG, "wandb", LOCK_FILE])
    assert read_run_config(cfg.output_dir)["learning_rate"] == 1e-3
    results = _train(cfg, stories_dir, alpaca_jsonl)
    assert results["resumed_from"] is None
    assert [n for n in _listing(cfg.output_dir) if n.startswith("checkpoint-")] == ["checkpoint-3"]
    # and the new run is itself protected
    with pytest.raises(FileExistsError, match="checkpoint-3"):
        prepare_output_dir(replace(cfg, overwrite_output_dir=False))


def test_overwrite_deletes_the_earlier_runs_offline_wandb_runs(earlier, monkeypatch, capsys):
    """A real offline W&B run of the earlier run: ``wandb sync`` would upload it as if it were the new one."""
    from tinyllama_ft.train.tracking import finish_tracking, start_tracking

    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    tracking = start_tracking(
        report_to="wandb",
        wandb_project="tiny-llama",
        wandb_run_name="earlier",
        output_dir=earlier.output_dir,
        prompt_allowed=False,
    )
    finish_tracking(tracking)
    wandb_dir = os.path.join(earlier.output_dir, "wandb")
    assert tracking.mode == "offline" and any(n.startswith("offline-run-") for n in os.listdir(wandb_dir))
    assert prepare_output_dir(replace(earlier, overwrite_output_dir=True)) == "overwrite"
    assert os.listdir(wandb_dir) == []  # its run folder and the links into it (latest-run, debug.log)


def test_new_config_fields_default_off_and_come_from_a_notebook_namespace():
    cfg = FinetuneConfig()
    assert cfg.overwrite_output_dir is False and cfg.mount_drive is False
    from tinyllama_ft.config.sources import config_from_notebook

    namespace = {"overwrite_output_dir": True, "mount_drive": True, "In": []}
    cfg = config_from_notebook(namespace, names_before=set(namespace))
    assert cfg.overwrite_output_dir is True and cfg.mount_drive is True


# --- (b) Google Drive ---


class Mount:
    def __init__(self):
        self.calls = []

    def __call__(self, mount_point):
        self.calls.append(mount_point)
        os.makedirs(os.path.join(mount_point, "MyDrive"))


def test_output_dir_on_drive_mounts_it_on_colab(tmp_path, capsys):
    mount, point = Mount(), str(tmp_path / "drive")
    assert ensure_drive(os.path.join(point, "MyDrive", "run1"), colab=True, mount=mount, mount_point=point) is True
    assert mount.calls == [point]
    assert "not on Drive" not in capsys.readouterr().out
    assert ensure_drive(
        os.path.join(point, "MyDrive", "run1"), mount_drive=True, colab=True, mount=mount, mount_point=point
    )
    assert mount.calls == [point]  # already mounted: not mounted twice


def test_mount_drive_with_a_local_output_dir_mounts_and_warns(tmp_path, capsys):
    mount, point = Mount(), str(tmp_path / "drive")
    assert ensure_drive("outputs", mount_drive=True, colab=True, mount=mount, mount_point=point) is True
    assert mount.calls == [point]
    assert "output_dir='outputs' is not on Drive" in capsys.readouterr().out


def test_no_drive_needed_mounts_nothing(tmp_path):
    mount = Mount()
    assert (
        ensure_drive(str(tmp_path / "outputs"), colab=True, mount=mount, mount_point=str(tmp_path / "drive")) is False
    )
    assert mount.calls == []


def test_mount_drive_outside_colab_is_a_notice(tmp_path, capsys):
    mount = Mount()
    assert (
        ensure_drive("outputs", mount_drive=True, colab=False, mount=mount, mount_point=str(tmp_path / "drive"))
        is False
    )
    assert mount.calls == []
    out = capsys.readouterr().out
    assert "mount_drive=True: not in Colab" in out and out.count("\n") == 1


def test_output_dir_on_drive_outside_colab_is_an_error(tmp_path):
    point = str(tmp_path / "drive")
    with pytest.raises(RuntimeError, match="output_dir=.*not Colab"):
        ensure_drive(os.path.join(point, "MyDrive", "run1"), colab=False, mount=Mount(), mount_point=point)
    assert not os.path.exists(point)
    with pytest.raises(RuntimeError, match="output_dir='/content/drive/MyDrive/run1'"):
        ensure_drive("/content/drive/MyDrive/run1", colab=False)


def test_an_adapter_outside_output_dir_is_an_earlier_run_too(stories_dir, alpaca_jsonl, tmp_path, capsys):
    """A new run's save would replace an adapter at an adapter_dir outside output_dir: refused as an earlier run in
    output_dir is; overwrite_output_dir deletes it, and the message names everything it deletes."""
    adapter = tmp_path / "elsewhere" / "my_adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    cfg = _cfg(stories_dir, alpaca_jsonl, tmp_path / "new_run", adapter_dir=str(adapter))
    with pytest.raises(FileExistsError, match=rf"{adapter}.*resume=True.*overwrite_output_dir=True"):
        prepare_output_dir(cfg)
    assert (adapter / "adapter_config.json").exists()  # kept
    (tmp_path / "new_run" / "export" / "gguf_q8_0").mkdir(parents=True)
    assert prepare_output_dir(replace(cfg, overwrite_output_dir=True)) == "overwrite"
    said = capsys.readouterr().out
    assert not adapter.exists() and not (tmp_path / "new_run" / "export").exists()
    assert f"export, {adapter}" in said
    for listed in (
        "export/ (every exported format)",
        "the adapter folder (adapter_dir, inside output_dir or not)",
        "offline W&B runs",
        "checkpoint-* folders",
        "run_summary.json",
        "loss_curve.png",
    ):
        assert listed in said, listed


def test_overwrite_output_dir_documents_everything_it_deletes():
    from tinyllama_ft.config.finetune import field_docs
    from tinyllama_ft.train.output_dir import DELETED_BY_OVERWRITE

    doc = field_docs()["overwrite_output_dir"]
    docs = Path(__file__).resolve().parents[1] / "docs"
    readme = " ".join((docs / "parameters.md").read_text(encoding="utf-8").split())
    assert doc in readme  # the parameter table
    assert "export/` (every exported format)" in (docs / "troubleshooting.md").read_text(encoding="utf-8")
    for name in (
        "checkpoint-*",
        "run_summary.json",
        "loss_curve.png",
        "export/",
        "adapter_dir",
        "W&B",
        "run_config.json",
    ):
        assert name in doc, name
        assert any(name in item for item in DELETED_BY_OVERWRITE), name


def test_an_adapter_dir_holding_other_files_is_refused_and_an_empty_one_is_new(stories_dir, alpaca_jsonl, tmp_path):
    """The adapter's save replaces adapter_dir whole, and overwrite_output_dir deleted whatever stood there: a folder
    of someone's files (no adapter_config.json) is refused, with or without the flag, and kept."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.txt").write_text("years of work")
    for overwrite in (False, True):
        cfg = _cfg(
            stories_dir, alpaca_jsonl, tmp_path / "run", adapter_dir=str(precious), overwrite_output_dir=overwrite
        )
        with pytest.raises(FileExistsError, match=r"holds files that are not an adapter \(thesis.txt\)"):
            prepare_output_dir(cfg)
        assert (precious / "thesis.txt").read_text() == "years of work"
    (tmp_path / "empty").mkdir()
    cfg = _cfg(stories_dir, alpaca_jsonl, tmp_path / "run2", adapter_dir=str(tmp_path / "empty"))
    assert prepare_output_dir(cfg) == "new"  # made beforehand, nothing in it: nothing to lose
