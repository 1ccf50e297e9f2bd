"""Hub push: everything up to the upload call (ids, token lookup, offline and unanswered Hub, the files sent)."""

import inspect
import shutil
import time

import pytest

from tinyllama_ft.export.hub import folder_kind, push_to_hub, upload_files


@pytest.fixture
def online(monkeypatch):
    """HF_HUB_OFFLINE off for this test (conftest sets it; huggingface_hub read it at import)."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def model_folder(stories_dir, tmp_path):
    """A merged-model folder (real stories260K files) with what must never be uploaded beside it."""
    folder = tmp_path / "merged_16bit"
    shutil.copytree(stories_dir, folder)
    (folder / ".model.safetensors.partial").write_bytes(b"half")
    (folder / "checkpoint-2").mkdir()
    (folder / "checkpoint-2" / "optimizer.pt").write_bytes(b"x")
    return folder


def test_upload_list_is_the_visible_top_level_files(model_folder, stories_dir):
    import os

    assert folder_kind(model_folder) == "merged"
    assert upload_files(model_folder) == sorted(os.listdir(stories_dir))
    with pytest.raises(FileNotFoundError, match="nothing to push"):
        upload_files(model_folder / "checkpoint-2")


def test_token_is_never_a_parameter():
    assert not [p for p in inspect.signature(push_to_hub).parameters if "token" in p.lower()]


@pytest.mark.parametrize("repo_id", ["no-owner", "me/bad name!", "a/b/c"])
def test_bad_repo_ids_are_refused_first(model_folder, repo_id):
    with pytest.raises(ValueError, match="repo_id"):
        push_to_hub(folder=model_folder, repo_id=repo_id)


def test_offline_fails_at_once_with_a_clear_message(model_folder, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="HF_HUB_OFFLINE is set"):
        push_to_hub(folder=model_folder, repo_id="me/stories-merged")
    assert time.perf_counter() - start < 2


def test_no_token_says_where_to_put_it(model_folder, monkeypatch, online):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(RuntimeError, match="set HF_TOKEN in the environment or as a Colab secret"):
        push_to_hub(folder=model_folder, repo_id="me/stories-merged")


def test_a_hub_that_does_not_answer_fails_fast(model_folder, monkeypatch, online):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # a real closed port: refused at once
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="does not answer"):
        push_to_hub(folder=model_folder, repo_id="me/stories-merged", timeout_s=3)
    assert time.perf_counter() - start < 5
