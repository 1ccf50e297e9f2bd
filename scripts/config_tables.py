"""Generate, from ``FinetuneConfig``, docs/parameters.md's parameter table and the notebooks' parameters cells.

    python scripts/config_tables.py          # print them
    python scripts/config_tables.py --write  # rewrite them in docs/parameters.md and the notebooks' .py files
                                             # (then: jupytext --update --to ipynb notebooks/finetune_*.py)

Both are grouped by the configuration's sections (``SECTIONS``); a choice field's Colab form lists the values of
its ``Literal`` annotation (``finetune.choices``). The Alpaca notebook's cell holds every field but the chat
section's (a conversation run's fields; that notebook trains on Alpaca rows only), the preference section's and
the GRPO section's; the chat notebook's holds the fields a chat run changes, the chat section's all among them
(``CHAT_NOTEBOOK``); the preference notebook's those a DPO / ORPO / KTO run changes (``PREFERENCE_NOTEBOOK``); the
GRPO notebook's those a GRPO run changes (``GRPO_NOTEBOOK``). tests/test_notebook.py, tests/test_chat_notebook.py,
tests/test_preference_run.py, tests/test_grpo_run.py and tests/test_readme.py check that the files match what this
prints, so the configuration stays their one source.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from pathlib import Path
from typing import Any, Mapping

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tinyllama_ft.config.finetune import (
    DEFAULTS,
    FIELD_NAMES,
    FIELD_TYPES,
    SECTIONS,
    ConversationFormat,
    choices,
    field_docs,
)
from tinyllama_ft.config.methods import METHODS
from tinyllama_ft.config.packing import ConversationLongRows

FORM_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}
#: The sections' headings in the cells and the table.
SECTION_TITLES = {
    "model": "model",
    "lora": "LoRA",
    "data": "data",
    "chat": "chat (conversations)",
    "training": "training",
    "preference": "preference (DPO, ORPO, KTO, SimPO)",
    "grpo": "GRPO (rewards)",
    "logging": "logging and output",
    "export": "export",
    "generation": "generation",
}
README_START, README_END = "<!-- parameters:start -->", "<!-- parameters:end -->"
CELL_START = '# %% tags=["parameters"]\n'


def section_fields(section: str) -> tuple[str, ...]:
    """The field names declared in one section of ``SECTIONS`` (``"chat"``), in their order."""
    return tuple(f.name for f in dataclasses.fields(SECTIONS[section]))


@dataclasses.dataclass(frozen=True)
class ParametersCell:
    """What one notebook's parameters cell shows.

    Attributes:
        notebook: the notebook's jupytext ``.py`` file, relative to the repository.
        values: field name -> the value the cell gives it; shown in ``FIELD_NAMES``' order, each under its
            section's heading.
        choices: field name -> the values its form lists, where the notebook takes fewer than the field's
            ``Literal`` (the chat notebook: conversation layouts only).
        notes: section name -> a remark after the section's heading.
    """

    notebook: str
    values: Mapping[str, Any]
    choices: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    notes: Mapping[str, str] = dataclasses.field(default_factory=dict)


#: The Alpaca notebook: every field with its default, but the chat section's (dataset_format aside: Alpaca rows or raw
#: text documents, continued pretraining, docs/text.md), the preference section's and the GRPO section's (an SFT run's
#: notebook).
ALPACA_NOTEBOOK = ParametersCell(
    "notebooks/finetune_tinyllama.py",
    {
        name: getattr(DEFAULTS, name)
        for name in FIELD_NAMES
        if name == "dataset_format"
        or name not in section_fields("chat") + section_fields("preference") + section_fields("grpo")
    },
    choices={"dataset_format": ("alpaca", "text")},
    notes={"chat": "dataset_format only: 'text' trains on raw documents, docs/text.md"},
)
_CHAT_SHOWN = (
    *("model_name", "max_seq_length", "dtype", "load_in_4bit", "backend"),
    *("lora_r", "lora_alpha", "lora_dropout", "gradient_checkpointing"),
    *("dataset", "dataset_split", "test_size", "eval_split", "long_rows", "strict"),
    *section_fields("chat"),
    *("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps", "packing"),
    *("eval_steps", "save_steps", "seed"),
    *("report_to", "wandb_project", "wandb_run_name", "output_dir", "resume", "overwrite_output_dir"),
    *("export_formats", "prompts", "max_new_tokens", "reload_merged"),
)
#: The chat notebook: the fields a chat run changes (every other keeps its default), with the notebook's values.
CHAT_NOTEBOOK = ParametersCell(
    "notebooks/finetune_chat.py",
    {
        **{name: getattr(DEFAULTS, name) for name in _CHAT_SHOWN},
        "model_name": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "max_seq_length": 2048,
        "load_in_4bit": False,
        "backend": "transformers",
        "lora_r": 16,
        "dataset": "mlabonne/FineTome-100k",
        "test_size": 0.01,
        "dataset_format": "auto",
        "learning_rate": 2e-4,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "wandb_run_name": "smollm2-chat-sft",
        "output_dir": "outputs_chat",
    },
    choices={
        "dataset_format": typing.get_args(ConversationFormat),
        "long_rows": typing.get_args(ConversationLongRows),
    },
    notes={"lora": "the target modules are read from the model's layers: Phi-3's are fused"},
)
_PREFERENCE_SHOWN = (
    *("model_name", "max_seq_length", "dtype", "load_in_4bit", "backend"),
    *("lora_r", "lora_alpha", "lora_dropout", "gradient_checkpointing"),
    *("dataset", "dataset_split", "template", "test_size", "eval_split", "long_rows", "strict"),
    *("dataset_format", "chat_template"),
    *("learning_rate", "warmup_ratio", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps"),
    *("eval_steps", "save_steps", "seed"),
    *section_fields("preference"),
    *("report_to", "wandb_project", "wandb_run_name", "output_dir", "resume", "overwrite_output_dir"),
    *("export_formats", "prompts", "max_new_tokens", "reload_merged"),
)
#: The preference notebook: the fields a DPO / ORPO / KTO run changes, the preference section's all among them, with
#: the notebook's values (an instruction model with its own chat template on TRL's UltraFeedback pairs; 1,024 tokens:
#: a pair's two sequences fit a T4, docs/preference.md).
PREFERENCE_NOTEBOOK = ParametersCell(
    "notebooks/finetune_preference.py",
    {
        **{name: getattr(DEFAULTS, name) for name in _PREFERENCE_SHOWN},
        "model_name": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "max_seq_length": 1024,
        "load_in_4bit": False,
        "backend": "transformers",
        "lora_r": 16,
        "dataset": "trl-lib/ultrafeedback_binarized",
        "dataset_format": "auto",
        "learning_rate": 5e-5,
        "method": "dpo",
        "wandb_run_name": "smollm2-dpo",
        "output_dir": "outputs_preference",
    },
    choices={
        "dataset_format": ("auto", "alpaca", "messages"),
        "long_rows": typing.get_args(ConversationLongRows),
        "method": tuple(name for name, m in METHODS.items() if m.summary == "preference"),
    },
    notes={"data": "text pairs take the Alpaca template, conversations the chat template below"},
)
_GRPO_SHOWN = (
    *("model_name", "max_seq_length", "dtype", "load_in_4bit", "backend"),
    *("lora_r", "lora_alpha", "lora_dropout", "gradient_checkpointing"),
    *("dataset", "dataset_split", "dataset_config", "template", "test_size", "eval_split", "strict"),
    *("dataset_format", "chat_template"),
    *("learning_rate", "warmup_ratio", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps"),
    *("save_steps", "seed"),
    *("method", "beta", "loss_type", "adapter_name_or_path"),
    *section_fields("grpo"),
    *("report_to", "wandb_project", "wandb_run_name", "output_dir", "resume", "overwrite_output_dir"),
    *("export_formats", "prompts", "max_new_tokens", "reload_merged"),
)
#: The GRPO notebook: the fields a GRPO run changes, the GRPO section's all among them, with the notebook's values:
#: Qwen2.5-0.5B-Instruct (a published GSM8K score of 49.6%: groups with reward variance from the first step) on
#: GSM8K's questions through its chat template; the rewards named, the notebook's own among them (its rewards cell),
#: the layout's weighted below correctness, cut completions masked, advantages unscaled (what kept the offline demo from
#: learning the layout alone); Unsloth's GRPO notebooks' learning rate for LoRA; 256 tokens of worked answer
#: (docs/grpo.md).
GRPO_NOTEBOOK = ParametersCell(
    "notebooks/finetune_grpo.py",
    {
        **{name: getattr(DEFAULTS, name) for name in _GRPO_SHOWN},
        "model_name": "Qwen/Qwen2.5-0.5B-Instruct",
        "max_seq_length": 768,
        "load_in_4bit": False,
        "backend": "transformers",
        "lora_r": 16,
        "dataset": "openai/gsm8k",
        "dataset_config": "main",
        "dataset_format": "messages",
        "learning_rate": 5e-6,
        "method": "grpo",
        "beta": 0.0,
        "reward_funcs": ("correct_number", "answer_format", "shows_the_arithmetic"),
        "reward_weights": (1.0, 0.2, 0.2),
        "scale_rewards": "none",
        "mask_truncated_completions": True,
        "wandb_run_name": "qwen2.5-grpo",
        "output_dir": "outputs_grpo",
        "prompts": ("A baker bakes 12 loaves a day for 5 days and sells 37 of them. How many loaves are left?",),
        "max_new_tokens": 256,
    },
    choices={"dataset_format": ("messages", "alpaca", "auto"), "method": ("grpo",)},
    notes={
        "preference": "the method, and GRPO's KL term: beta 0 loads no reference",
        "grpo": "reward_funcs: built-ins, module:function, or a function of the rewards cell below",
    },
)
NOTEBOOKS = (ALPACA_NOTEBOOK, CHAT_NOTEBOOK, PREFERENCE_NOTEBOOK, GRPO_NOTEBOOK)


def _literal(value) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


def _form(name: str, cell: ParametersCell) -> str:
    """The ``# @param`` form of a field: a dropdown of its choices, or its Colab type (raw for lists and None)."""
    annotation = FIELD_TYPES[name]
    listed = cell.choices.get(name, choices(name))
    if listed and typing.get_origin(annotation) is not tuple:
        form = "[" + ", ".join(_literal(c) for c in listed) + "]"
        if None in listed:
            return form + ' {type:"raw"}'
        if str in typing.get_args(annotation):  # Literal[...] | str: a name, or any string (a Jinja template)
            return form + " {allow-input: true}"
        return form
    if annotation in FORM_TYPES:
        return f'{{type:"{FORM_TYPES[annotation]}"}}'
    return '{type:"raw"}'


def parameters_cell(cell: ParametersCell = ALPACA_NOTEBOOK) -> str:
    """A notebook's parameters cell: one ``name = value  # @param ...`` line per field it shows, by section.

    Args:
        cell: which notebook's cell (``ALPACA_NOTEBOOK``, ``CHAT_NOTEBOOK``).

    Returns:
        The cell's code, ending with the line that records the names defined so far.

    Raises:
        ValueError: ``cell.values`` names a field that is not one.
    """
    unknown = set(cell.values) - set(FIELD_NAMES)
    if unknown:
        raise ValueError(f"{cell.notebook}: not configuration fields: {sorted(unknown)}")
    lines: list[str] = []
    for section in SECTIONS:
        shown = [name for name in section_fields(section) if name in cell.values]
        if not shown:
            continue
        note = cell.notes.get(section)
        lines.append(f"# {SECTION_TITLES[section]}" + (f" ({note})" if note else ""))
        lines += [f"{name} = {_literal(cell.values[name])}  # @param {_form(name, cell)}" for name in shown]
    lines.append(
        "_names_at_parameters = set(globals())  # the configuration cell reads these and papermill's additions"
    )
    return "\n".join(lines) + "\n"


def parameter_table() -> str:
    """docs/parameters.md's table: parameter, default, meaning (the field's docstring), by section."""
    docs = field_docs()
    rows = ["| parameter | default | meaning |", "| --- | --- | --- |"]
    for section in SECTIONS:
        rows.append(f"| **{SECTION_TITLES[section]}** | | |")
        for name in section_fields(section):
            default = _literal(getattr(DEFAULTS, name)).replace("|", "\\|")
            rows.append(f"| `{name}` | `{default}` | {docs[name].replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def _replace_cell(text: str, cell: ParametersCell) -> str:
    start = text.index(CELL_START) + len(CELL_START)
    end = text.index("\n# %%", start)
    return text[:start] + parameters_cell(cell) + text[end:]


def _replace_table(text: str) -> str:
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    return pattern.sub(lambda m: f"{README_START}\n{parameter_table()}{README_END}", text)


def main(argv: list[str]) -> int:
    if "--write" in argv:
        readme = REPO / "docs" / "parameters.md"
        readme.write_text(_replace_table(readme.read_text(encoding="utf-8")), encoding="utf-8")
        for cell in NOTEBOOKS:
            notebook = REPO / cell.notebook
            notebook.write_text(_replace_cell(notebook.read_text(encoding="utf-8"), cell), encoding="utf-8")
        print(
            "rewrote the docs/parameters.md table and the notebooks' parameters cells; now run: jupytext --update --to ipynb "
            + " ".join(cell.notebook for cell in NOTEBOOKS)
        )
        return 0
    for cell in NOTEBOOKS:
        print(f"# {cell.notebook}")
        print(parameters_cell(cell))
    print(parameter_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
