"""run_summary.json: library versions and an atomic JSON write."""

import json

import torch
import transformers

from tinyllama_ft.train.summary import library_versions, write_run_summary


def test_library_versions_has_torch_and_transformers():
    versions = library_versions()
    assert versions["torch"] == torch.__version__
    assert versions["transformers"] == transformers.__version__
    assert library_versions(["no-such-distribution-xyz"])["no-such-distribution-xyz"] is None


def test_write_run_summary_is_valid_json_without_leftovers(tmp_path):
    path = tmp_path / "run" / "run_summary.json"
    out = write_run_summary(str(path), eval_loss_after=1.25, gpu=None, samples=[{"response": "Paris ✓"}])
    assert out == str(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["eval_loss_after"] == 1.25 and data["samples"][0]["response"] == "Paris ✓"
    assert data["versions"]["torch"] == torch.__version__
    assert "git_commit" in data
    assert [p.name for p in path.parent.iterdir()] == ["run_summary.json"]


def test_write_run_summary_replaces_an_existing_file(tmp_path):
    path = tmp_path / "run_summary.json"
    write_run_summary(str(path), eval_loss_after=2.0, versions={}, git_commit=None)
    write_run_summary(str(path), eval_loss_after=1.0, versions={}, git_commit=None)
    assert json.loads(path.read_text(encoding="utf-8")) == {"eval_loss_after": 1.0, "versions": {}, "git_commit": None}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_summary.json"]
