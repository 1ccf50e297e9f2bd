"""Shared fixtures: the test inputs, all from this repository (tests/fixtures, data/alpaca_demo) or PyPI packages.

Nothing here reads ``../shared``: a fresh clone with only the repository and PyPI passes the tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
#: The Alpaca-cleaned rows: the 1,000 demo rows and the 418 longer rows passed over before them (see
#: tests/fixtures/alpaca_long.NOTICE); merged, they are lines 0-1417 of the data set, byte for byte.
ALPACA_DEMO = REPO / "data" / "alpaca_demo" / "alpaca_demo.jsonl"
ALPACA_LONG = FIXTURES / "alpaca_long.jsonl"
ALPACA_LONG_POSITIONS = FIXTURES / "alpaca_long.positions.json"
#: sha256 of the first 1,418 lines of alpaca_cleaned_5k.jsonl (the GPU machine's copy of yahma/alpaca-cleaned)
#: how many rows ``alpaca_jsonl`` holds
ALPACA_ROWS = 1418
ALPACA_FIRST_1418_SHA256 = "0f874db72bdecdd0468b380b44893c6113c6a507f9d1049b1f51a8f2e4a2ae80"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def alpaca_first_lines() -> list[str]:
    """Lines 0-1417 of Alpaca-cleaned, rebuilt from the demo rows and the long rows (checked by their sha256)."""
    merge = runpy.run_path(str(REPO / "scripts" / "make_alpaca_demo.py"))["merge_lines"]
    lines = merge(
        ALPACA_DEMO.read_text(encoding="utf-8").splitlines(keepends=True),
        ALPACA_LONG.read_text(encoding="utf-8").splitlines(keepends=True),
        json.loads(ALPACA_LONG_POSITIONS.read_text(encoding="utf-8")),
    )
    digest = hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
    assert digest == ALPACA_FIRST_1418_SHA256, f"merged Alpaca rows changed: sha256 {digest}"
    return lines


@pytest.fixture(scope="session")
def alpaca_jsonl(tmp_path_factory) -> Path:
    """Lines 0-1417 of Alpaca-cleaned in the data set's order (1,418 real rows: 1,000 within 256 SmolLM2 tokens,
    418 longer), so the first N rows a test reads are the data set's first N rows."""
    path = tmp_path_factory.mktemp("alpaca") / "alpaca_first_1418.jsonl"
    path.write_text("".join(alpaca_first_lines()), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def stories_dir() -> Path:
    """llama2.c's stories260K in Hugging Face form (MIT; tests/fixtures/stories260k/NOTICE)."""
    return FIXTURES / "stories260k" / "hf"


@pytest.fixture(scope="session")
def tinyllama_dir() -> Path:
    """TinyLlama-1.1B's config and its Llama-2 tokenizer (tests/fixtures/tinyllama/NOTICE)."""
    return FIXTURES / "tinyllama"


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
    from tinyllama_ft.machine.hardware import Hardware

    return Hardware()


@pytest.fixture(scope="session")
def t4():
    from tinyllama_ft.machine.hardware import Hardware

    return Hardware(cuda=True, capability=(7, 5), gpu_name="Tesla T4", total_memory_gib=14.74, colab=True)


@pytest.fixture(scope="session")
def a100():
    from tinyllama_ft.machine.hardware import Hardware

    return Hardware(cuda=True, capability=(8, 0), gpu_name="NVIDIA A100-SXM4-40GB", total_memory_gib=39.39)


# --- the notebook's papermill run, once per session, shared by every test that reads it ---------------

#: Keys known to no server: the run has them (the secrets tests check no file it writes holds them). New for each
#: test run; the same in every pytest-xdist worker of one run (its run id), which read the one notebook run.
_RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or __import__("secrets").token_hex(16)
FAKE_WANDB_KEY = "wandbfake" + hashlib.sha256(f"wandb {_RUN_ID}".encode()).hexdigest()[:32]  # 41 characters, as W&B's
FAKE_HF_TOKEN = "hf_fake" + hashlib.sha256(f"hf {_RUN_ID}".encode()).hexdigest()[:32]
#: The notebook run's parameters: the toy fast path, stories260K on the Alpaca rows, 40 steps (the main job's values,
#: tinyllama_ft/recipes/offline_cpu.yaml, train SmolLM2: tests/test_readme.py runs those).
NOTEBOOK_STEPS = 40
NOTEBOOK_PROMPTS = ["What is the capital of France?", "Name three colors."]


def notebook_parameters(stories_dir, alpaca_jsonl) -> dict:
    return dict(
        model_name=str(stories_dir),
        dataset=str(alpaca_jsonl),
        max_seq_length=512,
        learning_rate=2e-4,
        max_steps=NOTEBOOK_STEPS,
        eval_steps=20,
        save_steps=20,
        gradient_checkpointing=False,
        test_size=0.07,  # about 55 of the ~790 rows within 512 stories260K tokens
        report_to="wandb",
        prompts=NOTEBOOK_PROMPTS,
        max_new_tokens=16,
    )


def notebook_pair(name: str, cell_name: str):
    """``notebooks/<name>`` checked as a jupytext pair: the .py and .ipynb hold the same cells, the parameters cell is
    what ``scripts/config_tables.py`` generates for ``config_tables.<cell_name>``, the first cell's Colab badge opens
    this repository's copy (pyproject.toml's URL). Skips where jupytext is missing (the GPU machine's library set).

    Returns:
        ``(ipynb cells, the parameters cell)``.
    """
    import sys
    import tomllib

    jupytext = pytest.importorskip("jupytext")
    sys.path.insert(0, str(REPO / "scripts"))
    import config_tables

    path = REPO / "notebooks" / name
    py, ipynb = jupytext.read(f"{path}.py"), jupytext.read(f"{path}.ipynb")
    assert [(c.cell_type, c.source) for c in py.cells] == [(c.cell_type, c.source) for c in ipynb.cells]
    [cell] = [c for c in ipynb.cells if "parameters" in c.metadata.get("tags", [])]
    assert cell.source + "\n" == config_tables.parameters_cell(getattr(config_tables, cell_name))
    url = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    slug = url.removeprefix("https://github.com/")
    assert f"colab.research.google.com/github/{slug}/blob/main/notebooks/{name}.ipynb" in py.cells[0].source
    return ipynb.cells, cell


def execute_notebook(workdir: Path, env: dict, notebook: str = "finetune_tinyllama", **parameters) -> Path:
    """Run ``notebooks/<notebook>.ipynb`` (the Alpaca notebook by default) under papermill in ``workdir`` with ``env``
    set (None removes a variable)."""
    import papermill

    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            if value is None:
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, value)
        papermill.execute_notebook(
            str(REPO / "notebooks" / f"{notebook}.ipynb"),
            str(workdir / "out.ipynb"),
            cwd=str(workdir),
            kernel_name="python3",
            progress_bar=False,
            parameters=parameters,
        )
    return workdir / "out.ipynb"


@pytest.fixture(scope="session")
def notebook_run(tmp_path_factory, stories_dir, alpaca_jsonl):
    """The main job: the notebook under papermill on stories260K and the real rows (CPU), with W&B keys in the
    environment and a W&B server that does not answer; every default write location inside the work folder.

    Under pytest-xdist (scripts/test.sh: ``-n 2 --dist loadfile``) the first worker that asks runs it and the others
    wait for it and read the same folder (a lock and a note in the run's shared temporary root).

    Returns:
        ``(workdir, executed notebook path, run_summary dict)``.
    """
    import json

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        workdir = _run_notebook_with_keys(tmp_path_factory.mktemp("notebook-run"), stories_dir, alpaca_jsonl)
    else:
        from filelock import FileLock

        shared = tmp_path_factory.getbasetemp().parent
        note = shared / "notebook-run.json"
        with FileLock(str(shared / "notebook-run.lock")):
            if note.exists():
                workdir = Path(json.loads(note.read_text(encoding="utf-8"))["workdir"])
            else:
                workdir = _run_notebook_with_keys(tmp_path_factory.mktemp("notebook-run"), stories_dir, alpaca_jsonl)
                note.write_text(json.dumps({"workdir": str(workdir)}), encoding="utf-8")
    summary = json.loads((workdir / "outputs" / "run_summary.json").read_text(encoding="utf-8"))
    return workdir, workdir / "out.ipynb", summary


def _run_notebook_with_keys(workdir: Path, stories_dir, alpaca_jsonl) -> Path:
    import socket

    with socket.socket() as s:  # a port nothing listens on: the run must go offline fast, key in hand
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    home, tmp = workdir / "home", workdir / "tmp"
    home.mkdir(), tmp.mkdir()
    env = {
        "WANDB_API_KEY": FAKE_WANDB_KEY,
        "HF_TOKEN": FAKE_HF_TOKEN,
        "WANDB_BASE_URL": closed,
        "WANDB_MODE": None,
        "WANDB_DISABLED": None,
        "WANDB_DISABLE_GIT": "true",
        # every place a library writes to by default lands inside workdir, where it is searched
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "HF_HOME": str(home / "hf"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "WANDB_CONFIG_DIR": str(home / "wandb-config"),
        "WANDB_CACHE_DIR": str(home / "wandb-cache"),
        "WANDB_DATA_DIR": str(home / "wandb-data"),
        "MPLCONFIGDIR": str(home / "mpl"),
    }
    execute_notebook(workdir, env, **notebook_parameters(stories_dir, alpaca_jsonl))
    return workdir
