"""Generate, from ``FinetuneConfig``, docs/parameters.md's parameter table and the notebook's parameters cell.

    python scripts/config_tables.py          # print both
    python scripts/config_tables.py --write  # rewrite them in docs/parameters.md and notebooks/finetune_tinyllama.py
                                             # (then: jupytext --to ipynb notebooks/finetune_tinyllama.py)

tests/test_config.py checks that both match what this prints, so the config stays their one source.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tinyllama_ft.config.finetune import (
    BACKENDS,
    DATASET_FORMATS,
    DEFAULTS,
    DTYPES,
    PACKING_STRATEGIES,  # noqa: E402
    RECIPES,
    REPORT_TO,
    TEMPLATES,
    FinetuneConfig,
    field_docs,
)
from tinyllama_ft.config.packing import LONG_ROWS  # noqa: E402

CHOICES = {
    "template": TEMPLATES,
    "recipe": RECIPES,
    "backend": BACKENDS,
    "dtype": DTYPES,
    "report_to": REPORT_TO,
    "long_rows": LONG_ROWS,
    "packing_strategy": PACKING_STRATEGIES,
    "lora_bias": ("none", "all", "lora_only"),
    "dataset_format": DATASET_FORMATS,
}
FORM_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
SECTION_TITLES = {
    "model": "model",
    "lora": "LoRA",
    "data": "data",
    "training": "training",
    "logging": "logging and output",
    "generation": "generation",
}
README_START, README_END = "<!-- parameters:start -->", "<!-- parameters:end -->"
CELL_START = '# %% tags=["parameters"]\n'


def _literal(value) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


def parameters_cell() -> str:
    """The parameters cell's code: one ``name = default  # @param ...`` line per field, by section."""
    lines: list[str] = []
    section = None
    for f in dataclasses.fields(FinetuneConfig):
        if f.metadata["section"] != section:
            section = f.metadata["section"]
            lines.append(f"# {SECTION_TITLES[section]}")
        value = getattr(DEFAULTS, f.name)
        if f.name in CHOICES:
            form = (
                "["
                + ", ".join(_literal(c) for c in CHOICES[f.name])
                + "]"
                + (' {type:"raw"}' if None in CHOICES[f.name] else "")
            )
        elif f.type in FORM_TYPES:
            form = f'{{type:"{FORM_TYPES[f.type]}"}}'
        else:
            form = '{type:"raw"}'
        lines.append(f"{f.name} = {_literal(value)}  # @param {form}")
    lines.append(
        "_names_at_parameters = set(globals())  # the configuration cell reads these and papermill's additions"
    )
    return "\n".join(lines) + "\n"


def parameter_table() -> str:
    """The README's table: parameter, default, meaning (the field's docstring)."""
    docs = field_docs()
    rows = ["| parameter | default | meaning |", "| --- | --- | --- |"]
    section = None
    for f in dataclasses.fields(FinetuneConfig):
        if f.metadata["section"] != section:
            section = f.metadata["section"]
            rows.append(f"| **{SECTION_TITLES[section]}** | | |")
        default = _literal(getattr(DEFAULTS, f.name)).replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{default}` | {docs[f.name].replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def _replace_cell(text: str) -> str:
    start = text.index(CELL_START) + len(CELL_START)
    end = text.index("\n# %%", start)
    return text[:start] + parameters_cell() + text[end:]


def _replace_table(text: str) -> str:
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    return pattern.sub(lambda m: f"{README_START}\n{parameter_table()}{README_END}", text)


def main(argv: list[str]) -> int:
    if "--write" in argv:
        readme, notebook = REPO / "docs" / "parameters.md", REPO / "notebooks" / "finetune_tinyllama.py"
        readme.write_text(_replace_table(readme.read_text(encoding="utf-8")), encoding="utf-8")
        notebook.write_text(_replace_cell(notebook.read_text(encoding="utf-8")), encoding="utf-8")
        print(
            "rewrote the docs/parameters.md table and the notebook's parameters cell; now run: "
            "jupytext --to ipynb notebooks/finetune_tinyllama.py"
        )
        return 0
    print(parameters_cell())
    print(parameter_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
