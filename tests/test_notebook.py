"""The main job: the notebook under papermill (the session's one run, conftest.notebook_run), its parameters
cell against the configuration, and a new user's first mistakes stopping at the configuration cell."""

import ast
import json
import subprocess
import sys

import pytest

from conftest import NOTEBOOK_PROMPTS, NOTEBOOK_STEPS, REPO
from tinyllama_ft.config.finetune import DEFAULTS, FIELD_NAMES, FinetuneConfig

NOTEBOOK = REPO / "notebooks" / "finetune_tinyllama.ipynb"


def _parameters_cell():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    [cell] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    return cell.source


def _chat_section():
    import dataclasses

    from tinyllama_ft.config.finetune import SECTIONS

    return {f.name for f in dataclasses.fields(SECTIONS["chat"])}


def test_parameters_cell_holds_every_field_but_the_chat_preference_and_grpo_sections_with_its_default():
    """The Alpaca notebook trains on Alpaca rows (or raw text documents: dataset_format, the chat section's one field
    here), by SFT: a conversation run's fields (the chat section's) are the chat notebook's and a preference or GRPO
    run's (method, beta, num_generations, ...) their notebooks', not offered here; they keep their defaults (method
    "sft")."""
    tree = ast.parse(_parameters_cell())
    values = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and not node.targets[0].id.startswith("_")
    }
    import dataclasses

    from tinyllama_ft.config.finetune import SECTIONS

    chat = _chat_section() | {
        f.name for section in ("preference", "grpo") for f in dataclasses.fields(SECTIONS[section])
    }
    assert {"chat_template", "assistant_only_loss", "extra_datasets", "dataset_format", "method", "beta"} <= chat
    assert set(values) & chat == {"dataset_format"}
    shown = [n for n in FIELD_NAMES if n not in chat or n == "dataset_format"]
    assert list(values) == shown  # every other field, in the config's order
    assert FinetuneConfig(**values) == DEFAULTS  # and each default as the config has it


def test_parameters_cell_is_the_generated_one():
    sys.path.insert(0, str(REPO / "scripts"))
    import config_tables

    assert _parameters_cell() + "\n" == config_tables.parameters_cell(config_tables.ALPACA_NOTEBOOK)
    assert "dataset_format = 'alpaca'  # @param ['alpaca', 'text']\n" in _parameters_cell()
    assert "chat_template" not in _parameters_cell()


def test_a_text_run_is_reached_by_the_notebooks_parameters():
    """`papermill -p dataset_format text -p dataset data/python_reference/topics` (docs/text.md): the configuration
    cell reads the parameters cell and papermill's injected values into a text run (raw documents, windows split,
    none cut), the cells after it unchanged."""
    from tinyllama_ft.config.sources import config_from_notebook
    from tinyllama_ft.data.formats import TextFormat, data_format

    namespace: dict = {}
    exec(_parameters_cell(), namespace)  # the parameters cell, then papermill's cell of -p values
    namespace.update(dataset_format="text", dataset="data/python_reference/topics")
    cfg = config_from_notebook(namespace, names_before=namespace["_names_at_parameters"])
    assert (cfg.dataset_format, cfg.dataset, cfg.packing_strategy) == (
        "text",
        "data/python_reference/topics",
        "bfd_split",
    )
    assert isinstance(data_format(cfg), TextFormat) and data_format(cfg).max_seq_length == cfg.max_seq_length
    text = " ".join((REPO / "docs" / "text.md").read_text(encoding="utf-8").split())
    assert "-p dataset_format text -p dataset data/python_reference/topics" in text


def _stops_at_config(tmp_path, **parameters):
    import papermill
    from papermill.exceptions import PapermillExecutionError

    with pytest.raises(PapermillExecutionError) as raised:
        papermill.execute_notebook(
            str(NOTEBOOK),
            str(tmp_path / "out.ipynb"),
            cwd=str(tmp_path),
            kernel_name="python3",
            progress_bar=False,
            parameters=parameters,
        )
    out = json.loads((tmp_path / "out.ipynb").read_text(encoding="utf-8"))
    failed = [
        c
        for c in out["cells"]
        if c["cell_type"] == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]
    assert len(failed) == 1 and "config_from_notebook" in "".join(failed[0]["source"])  # the configuration cell
    return str(raised.value)


def test_a_misspelt_parameter_stops_at_the_configuration_cell_naming_the_one_meant(tmp_path):
    message = _stops_at_config(tmp_path, lora_rank=8)
    assert "lora_rank" in message and "did you mean lora_r?" in message


def test_a_wrong_type_stops_at_the_configuration_cell_naming_the_parameter(tmp_path):
    message = _stops_at_config(tmp_path, max_steps="ten")
    assert "max_steps='ten'" in message and "expected an integer" in message


def test_the_notebook_namespace_gives_only_its_parameters():
    from tinyllama_ft.config.sources import config_from_notebook

    namespace = {"lora_r": 8, "max_steps": 5, "In": [], "get_ipython": print, "np": object(), "sys": sys}
    before = set(namespace)
    namespace.update(
        hf_token_holder=object(), rows=object(), config_from_notebook=config_from_notebook, _injected_private=1
    )  # objects and functions defined later are not parameters
    namespace["seed"] = 1  # papermill's injected cell rebinds a parameter
    cfg = config_from_notebook(namespace, names_before=before)
    assert (cfg.lora_r, cfg.max_steps, cfg.seed) == (8, 5, 1)
    namespace["learning_rat"] = 1e-4  # a literal added after the parameters cell: papermill's -p, misspelt
    with pytest.raises(ValueError, match="did you mean learning_rate"):
        config_from_notebook(namespace, names_before=before)


@pytest.mark.slow
def test_copying_cells_names_every_helper_default_that_is_not_the_configurations():
    """docs/notebook.md ("Copying cells") says a helper's argument named as a configuration field defaults to the
    configuration's value; every exported helper's argument where that is not so (and ``data_format``, the run's
    format object) is named there with its helper (issue 40: ``data_format`` was not)."""
    import importlib
    import inspect

    import tinyllama_ft

    text = (REPO / "docs" / "notebook.md").read_text(encoding="utf-8")
    section = " ".join(text[text.index("## Copying cells") : text.index("## CPU and GPU")].split())
    assert "keyword arguments whose defaults are the configuration's" not in section  # the old claim, for all
    exceptions = []
    for module, names in tinyllama_ft._MODULES.items():
        for name in names.split():
            helper = getattr(importlib.import_module(f"tinyllama_ft.{module}"), name)
            if not inspect.isfunction(helper):
                continue
            for p in inspect.signature(helper).parameters.values():
                if p.default is p.empty or (p.name not in FIELD_NAMES and p.name != "data_format"):
                    continue
                if p.name == "data_format" or p.default != getattr(DEFAULTS, p.name):
                    exceptions.append((name, p.name))
    assert ("generate", "data_format") in exceptions and ("load_adapter", "load_in_4bit") in exceptions
    for helper, argument in exceptions:
        assert f"`{helper}`" in section and f"`{argument}" in section, (helper, argument)


def test_eval_loss_drops_by_at_least_ten_percent(notebook_run):
    _, _, summary = notebook_run
    assert summary["eval_loss_after"] <= 0.9 * summary["eval_loss_before"], summary


@pytest.mark.slow
def test_papermill_parameters_reach_the_run(notebook_run):
    _, _, summary = notebook_run
    assert summary["config"]["max_steps"] == NOTEBOOK_STEPS and summary["global_step"] == NOTEBOOK_STEPS
    assert summary["config"]["learning_rate"] == 2e-4 and summary["config"]["max_seq_length"] == 512
    assert summary["backend"] == "transformers" and summary["dtype"] == "float32" and summary["gpu"] is None
    assert (
        summary["execution"]["per_device_train_batch_size"] * summary["execution"]["gradient_accumulation_steps"] == 8
    )
    assert [s["instruction"] for s in summary["samples"]] == NOTEBOOK_PROMPTS
    assert all(s["response"].strip() for s in summary["samples"])
    assert summary["train_tokens"] > NOTEBOOK_STEPS * 8 * 256 and summary["tokens_per_s"] > 0
    assert summary["peak_memory_gib"] is None and summary["versions"]["transformers"]
    eos = summary["plan"]["eos_first_batch"]
    assert eos["samples"] > 0 and eos["samples_ok"] == eos["samples"]


@pytest.mark.slow
def test_run_logged_offline_plotted_and_printed_progress(notebook_run):
    workdir, out, _ = notebook_run
    assert list((workdir / "outputs" / "wandb").glob("offline-run-*"))
    assert (workdir / "outputs" / "loss_curve.png").stat().st_size > 1000
    text = out.read_text(encoding="utf-8")
    assert "logging offline" in text and "### Instruction: Name three colors." in text
    assert f"step {NOTEBOOK_STEPS}/{NOTEBOOK_STEPS}  loss" in text and "tokens/s" in text  # the progress lines


@pytest.mark.slow
def test_adapter_loads_in_a_fresh_process_with_plain_peft(notebook_run):
    _, _, summary = notebook_run
    code = (
        f"from peft import AutoPeftModelForCausalLM\n"
        f"m = AutoPeftModelForCausalLM.from_pretrained({summary['adapter_dir']!r})\n"
        f"print(type(m).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=300)
    assert "PeftModelForCausalLM" in out.stdout
