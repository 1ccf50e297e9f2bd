"""Shared fixtures: the real data in ../shared/data (override with TINYLLAMA_FT_SHARED_DATA)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The one place the shared-data path is resolved: the env variable, else ../shared/data beside the repo.
SHARED_DATA = Path(os.environ.get("TINYLLAMA_FT_SHARED_DATA") or REPO.parent / "shared" / "data").resolve()

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"shared data missing: {path} (set TINYLLAMA_FT_SHARED_DATA to the shared/data folder)")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return _need(SHARED_DATA)


@pytest.fixture(scope="session")
def alpaca_jsonl() -> Path:
    return _need(SHARED_DATA / "alpaca" / "alpaca_cleaned_5k.jsonl")


@pytest.fixture(scope="session")
def stories_dir() -> Path:
    return _need(SHARED_DATA / "stories260k" / "hf")


@pytest.fixture(scope="session")
def tinyllama_dir() -> Path:
    return _need(SHARED_DATA / "tinyllama")


@pytest.fixture(scope="session")
def stories_tokenizer(stories_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(stories_dir))


@pytest.fixture(scope="session")
def tinyllama_tokenizer(tinyllama_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tinyllama_dir))


@pytest.fixture(scope="session")
def cpu():
    from tinyllama_ft.hardware import Hardware

    return Hardware()


@pytest.fixture(scope="session")
def t4():
    from tinyllama_ft.hardware import Hardware

    return Hardware(cuda=True, capability=(7, 5), gpu_name="Tesla T4", total_memory_gib=14.74, colab=True)


@pytest.fixture(scope="session")
def a100():
    from tinyllama_ft.hardware import Hardware

    return Hardware(cuda=True, capability=(8, 0), gpu_name="NVIDIA A100-SXM4-40GB", total_memory_gib=39.39)
