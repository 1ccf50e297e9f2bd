"""The package imports light, and the notebook pair and its URLs agree with pyproject.toml."""

import re
import subprocess
import sys
import tomllib

from conftest import REPO

NOTEBOOK = REPO / "notebooks" / "finetune_tinyllama"


def test_import_pulls_in_neither_torch_nor_transformers():
    code = (
        "import sys, tinyllama_ft, tinyllama_ft.config, tinyllama_ft.install, tinyllama_ft.hardware, "
        "tinyllama_ft.precision, tinyllama_ft.prompts\n"
        "heavy = [m for m in ('torch', 'transformers', 'trl', 'datasets', 'unsloth', 'wandb') if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_lazy_names_resolve_to_their_modules():
    import tinyllama_ft

    assert tinyllama_ft.load_model.__module__ == "tinyllama_ft.modeling"
    assert tinyllama_ft.save_adapter.__module__ == "tinyllama_ft.adapters"


def test_jupytext_pair_is_in_sync():
    import jupytext

    py, ipynb = jupytext.read(f"{NOTEBOOK}.py"), jupytext.read(f"{NOTEBOOK}.ipynb")
    assert [(c.cell_type, c.source) for c in py.cells] == [(c.cell_type, c.source) for c in ipynb.cells]
    tags = [c.metadata.get("tags", []) for c in ipynb.cells]
    assert sum("parameters" in t for t in tags) == 1


def test_repository_url_is_the_one_in_pyproject():
    url = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    slug = url.removeprefix("https://github.com/")
    text = (NOTEBOOK.with_suffix(".py")).read_text(encoding="utf-8")
    assert f"git+{url}" in text
    assert f"colab.research.google.com/github/{slug}/blob/main/notebooks/finetune_tinyllama.ipynb" in text
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"colab.research.google.com/github/{slug}/blob/main/notebooks/finetune_tinyllama.ipynb" in readme
    others = set(re.findall(r"github\.com/([\w.-]+/[\w.-]+)", text + readme)) - {slug}
    assert not {o for o in others if "tinyllama" in o.lower()}, others


def test_no_import_cycles_in_the_package():
    sys.path.insert(0, str(REPO / "scripts"))
    import import_graph

    assert import_graph.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    graph = import_graph.import_graph()
    assert graph["plan"] >= {"config", "modeling"} and "adapters" not in graph["modeling"]
    assert import_graph.cycles(graph) == []


def test_test_only_code_is_not_in_the_package():
    assert not (REPO / "tinyllama_ft" / "wandb_runfile.py").exists()
