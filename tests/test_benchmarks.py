"""Issue 43: benchmarks before and after on lm-evaluation-harness (tinyllama_ft/evaluate/benchmarks.py), on stories260K
with a small adapter: the shipped offline tasks, a file of question/answer rows, the prompt format of generation tasks,
batched against unbatched scores, one-line refusals, and (slow) the same numbers as lm-eval's own command line."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import trained_stories_adapter

from tinyllama_ft.config.coercion import ConfigError

pytest.importorskip("lm_eval")

MMLU_SUBJECTS = ("astronomy", "business_ethics", "electrical_engineering", "us_foreign_policy")


@pytest.fixture(scope="module")
def adapter(stories_dir, tmp_path_factory, cpu):
    """A stories260K adapter with non-zero LoRA B matrices (so base and tuned differ), recorded as an Alpaca run."""
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.models.run_record import adapter_record, write_record

    path = trained_stories_adapter(stories_dir, tmp_path_factory.mktemp("bench"), cpu)
    cfg = FinetuneConfig(model_name=str(stories_dir), max_seq_length=512, dtype="float32", load_in_4bit=False)
    write_record(path, adapter_record(cfg))
    return path


@pytest.fixture(scope="module")
def loaded(adapter, cpu):
    from tinyllama_ft.models.adapters import load_adapter

    return load_adapter(adapter, hardware=cpu, backend="transformers")


@pytest.fixture(scope="module")
def qa_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("qa") / "capitals.jsonl"
    rows = [{"question": "What is the capital of France?", "answer": "Paris"}, {"question": "2 + 2 =", "answer": 4}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_shipped_mmlu_subset_is_the_original_files_with_lm_evals_columns():
    """Four whole subjects from the authors' test and dev CSVs (mmlu/NOTICE), read in cais/mmlu's columns."""
    from tinyllama_ft.evaluate.benchmark_tasks import TASKS_DIR
    from tinyllama_ft.evaluate.benchmark_tasks.functions import mmlu_subject

    notice = (TASKS_DIR / "mmlu" / "NOTICE").read_text(encoding="utf-8")
    assert "MIT" in notice and "hendrycks/test" in notice
    sizes = {}
    for subject in MMLU_SUBJECTS:
        data = mmlu_subject(subject, pretrained="ignored")  # lm-eval passes the model's arguments too
        with open(TASKS_DIR / "mmlu" / f"{subject}_test.csv", newline="", encoding="utf-8") as f:
            first = next(csv.reader(f))
        assert data["test"][0] == {
            "question": first[0],
            "subject": subject,
            "choices": first[1:5],
            "answer": "ABCD".index(first[5]),
        }
        assert len(data["dev"]) == 5
        sizes[subject] = len(data["test"])
    assert sizes == {"astronomy": 152, "business_ethics": 100, "electrical_engineering": 145, "us_foreign_policy": 100}
    assert sum(p.stat().st_size for p in (TASKS_DIR / "mmlu").iterdir()) < 1_000_000


def test_the_arithmetic_task_is_the_grpo_demos_held_out_set_asked_as_grpo_asks():
    from tinyllama_ft.data.arithmetic import TRAIN, arithmetic_problems
    from tinyllama_ft.data.grpo_format import MIN_HELD_OUT_PROMPTS
    from tinyllama_ft.evaluate.benchmark_tasks.functions import arithmetic_held_out, score_number

    rows = arithmetic_held_out()["test"]
    _, held = arithmetic_problems(TRAIN, held_out=MIN_HELD_OUT_PROMPTS, seed=3407)  # what the GRPO run holds out
    assert len(rows) == len(held) == 100
    assert [r["answer"] for r in rows] == [str(h["answer"]) for h in held]
    assert rows[0]["question"].startswith(held[0]["question"]) and rows[0]["question"].endswith("#### <number>")
    assert score_number({"answer": "42"}, ["6 x 7 = 42\n#### 42"]) == {"exact_match": 1.0, "format": 1.0}
    assert score_number({"answer": "42"}, ["It is 42, not 41."]) == {"exact_match": 0.0, "format": 0.0}


def test_a_question_file_becomes_an_exact_match_task_and_a_bad_row_is_named(qa_file, tmp_path):
    from tinyllama_ft.evaluate.benchmarks import OWN_TEMPLATE, own_task

    assert own_task(qa_file, tmp_path) == "own_capitals"
    text = (tmp_path / "own_capitals.yaml").read_text(encoding="utf-8")
    assert str(OWN_TEMPLATE) in text and str(qa_file) in text
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a?", "answer": "b"}\n{"question": "c?", "answer": ""}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.jsonl: row 1: answer is missing or empty .*row index is 0-based\)"):
        own_task(bad, tmp_path)


def test_generation_tasks_are_prompted_as_generate_prompts_the_adapter(loaded, adapter):
    """The record decides: an Alpaca adapter's template as a Jinja chat template that renders format_prompt exactly,
    stopping on EOS; a template that contradicts the record is refused as generate refuses it."""
    from tinyllama_ft.data.alpaca_prompts import format_prompt
    from tinyllama_ft.evaluate.benchmarks import generation_format
    from tinyllama_ft.models.run_record import read_record

    model, tokenizer = loaded
    record = read_record(adapter)
    template, stops, fmt = generation_format(tokenizer, record=record)
    assert fmt.name == "alpaca" and stops == [tokenizer.eos_token_id]
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Add 2 and 3."}],
        chat_template=template,
        tokenize=False,
        add_generation_prompt=True,
    )
    assert rendered == tokenizer.bos_token + format_prompt("Add 2 and 3.")
    no_input = {**record, "template": "alpaca_no_input"}
    assert "### Input:" not in tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}],
        chat_template=generation_format(tokenizer, record=no_input)[0],
        tokenize=False,
    )
    with pytest.raises(ConfigError, match="template='alpaca_no_input', but the adapter was trained with"):
        generation_format(tokenizer, record=record, template="alpaca_no_input")


def test_base_and_tuned_scores_batched_and_unbatched_agree_and_are_written(loaded, qa_file, tmp_path):
    """One PEFT model, the adapter off then on, on the two shipped tasks and a question file: a row per task and metric
    (the MMLU group's too), the JSON beside run_summary.json; batch size 4 gives batch size 1's scores."""
    from tinyllama_ft.evaluate.benchmarks import RESULTS_FILE, evaluate_benchmarks

    model, tokenizer = loaded
    template = tokenizer.chat_template
    tasks = ["tinyllama_ft_mmlu", "tinyllama_ft_arithmetic", str(qa_file)]
    one = evaluate_benchmarks(model, tokenizer, tasks, limit=2, batch_size=1, output_dir=str(tmp_path))
    four = evaluate_benchmarks(model, tokenizer, ",".join(tasks), limit=2, batch_size=4)
    assert tokenizer.chat_template == template and not model.training  # the tokenizer's own template is back
    by = {(r.task, r.metric): r for r in one.rows}
    assert set(by) == {
        *((f"tinyllama_ft_mmlu_{s}", "acc") for s in MMLU_SUBJECTS),
        ("tinyllama_ft_mmlu", "acc"),
        ("tinyllama_ft_arithmetic", "exact_match"),
        ("tinyllama_ft_arithmetic", "format"),
        ("own_capitals", "exact_match"),
    }
    assert by["tinyllama_ft_mmlu", "acc"].samples == 8 and by["own_capitals", "exact_match"].samples == 2
    assert any(r.base != r.tuned for r in one.rows if r.metric == "acc")  # the adapter changes some answer
    for row in one.rows:
        assert row.delta == pytest.approx(row.tuned - row.base)
    for a, b in zip(one.rows, four.rows):
        assert (a.task, a.metric) == (b.task, b.metric)
        assert a.base == pytest.approx(b.base, rel=1e-9, abs=1e-12) and a.tuned == pytest.approx(
            b.tuned, rel=1e-9, abs=1e-12
        )
    written = json.loads((tmp_path / RESULTS_FILE).read_text(encoding="utf-8"))
    assert written["rows"][0]["task"] == one.rows[0].task and written["settings"]["limit"] == 2
    assert "| tinyllama_ft_mmlu | acc | 8 |" in one.table()


def test_unknown_tasks_and_tasks_without_data_are_refused_in_one_line(loaded, tmp_path, monkeypatch):
    from tinyllama_ft.config.locations import HubUnreachableError
    from tinyllama_ft.evaluate import benchmarks

    model, tokenizer = loaded
    with pytest.raises(ConfigError, match="'mmlu_nonsense' is not an lm-eval task"):
        benchmarks.evaluate_benchmarks(model, tokenizer, ["mmlu_nonsense"])
    own = tmp_path / "tasks"
    own.mkdir()
    (own / "needs_hub.yaml").write_text(  # a task whose data is a Hub dataset the cache lacks, the Hub offline
        "task: needs_hub\ndataset_path: tinyllama-ft-tests/no-such-dataset\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_choice: [a, b]\ndoc_to_target: 0\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(HubUnreachableError) as info:
        benchmarks.evaluate_benchmarks(model, tokenizer, ["needs_hub"], include_path=[str(own)])
    message = str(info.value)
    assert message.startswith("task 'needs_hub': its data could not be fetched") and "\n" not in message
    assert "tinyllama_ft_mmlu, tinyllama_ft_arithmetic" in message


def _text(value):
    """``value`` with every number and bool as its text (lm-eval's samples file writes them so)."""
    return [_text(v) for v in value] if isinstance(value, (list, tuple)) else str(value)


@pytest.mark.slow
def test_our_table_equals_lm_evals_own_command_line(loaded, adapter, stories_dir, qa_file, tmp_path):
    """Issue 43's check: `lm_eval --model hf --model_args pretrained=...,peft=...` on the same tasks, limit and batch
    size gives our base and tuned scores exactly, and the same generated answers (the Alpaca template given to it as
    the tokenizer's chat template: what our generation tasks are prompted with)."""
    from transformers import AutoTokenizer

    from tinyllama_ft.data.alpaca_chat_template import jinja_chat_template
    from tinyllama_ft.evaluate.benchmark_tasks import TASKS_DIR
    from tinyllama_ft.evaluate.benchmarks import evaluate_benchmarks, own_task

    model, tokenizer = loaded
    ours = evaluate_benchmarks(
        model,
        tokenizer,
        ["tinyllama_ft_mmlu", "tinyllama_ft_arithmetic", str(qa_file)],
        limit=3,
        batch_size=2,
        log_samples=True,
    )
    include = tmp_path / "tasks"  # lm_eval's --include_path takes one folder: the shipped tasks and the file's
    shutil.copytree(TASKS_DIR, include, ignore=shutil.ignore_patterns("__pycache__"))
    own_task(qa_file, include)
    alpaca = tmp_path / "alpaca_tokenizer"  # the adapter's tokenizer with the Alpaca template as its chat template
    saved = AutoTokenizer.from_pretrained(adapter)
    saved.chat_template = jinja_chat_template("alpaca")
    saved.save_pretrained(alpaca)
    lm_eval = Path(sys.executable).with_name("lm_eval")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    for side, peft in (("base", ""), ("tuned", f",peft={adapter}")):
        for tasks, extra in (
            ("tinyllama_ft_mmlu", []),
            ("tinyllama_ft_arithmetic,own_capitals", ["--apply_chat_template", "--fewshot_as_multiturn", "false"]),
        ):
            out = tmp_path / f"{side}-{tasks.split(',')[0]}"
            subprocess.run(
                [str(lm_eval), "run", "--model", "hf", "--model_args",
                 f"pretrained={stories_dir},dtype=float32,tokenizer={alpaca}{peft}", "--tasks", tasks,
                 "--include_path", str(include), "--limit", "3", "--batch_size", "2", "--device", "cpu",
                 "--output_path", str(out), "--log_samples", *extra],
                check=True, env=env, capture_output=True, text=True,
            )  # fmt: skip
            [result] = out.rglob("results_*.json")
            theirs = json.loads(result.read_text(encoding="utf-8"))
            for task, values in theirs["results"].items():
                for key, value in values.items():
                    if isinstance(value, (int, float)):
                        assert ours.results[side]["results"][task][key] == value, (side, task, key)
            for samples in out.rglob("samples_*.jsonl"):
                theirs = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
                task = samples.name.split("_20")[0].removeprefix("samples_")
                mine = json.loads(json.dumps(ours.results[side]["samples"][task], default=str))
                assert len(mine) == len(theirs) > 0
                answers = lambda samples: [_text(s["filtered_resps"]) for s in samples]  # noqa: E731
                assert answers(theirs) == answers(mine), (side, task)  # its file holds the values as text


def test_the_eval_command_prints_the_table_and_writes_beside_the_run_summary(adapter, capsys):
    """`tinyllama-ft eval --adapter RUN --tasks ...`: the table on stdout, benchmarks.json in the adapter's parent
    folder (the run's output_dir, where run_summary.json is); a task that is none: exit 2, one line."""
    from tinyllama_ft.cli import main

    assert main(["eval", "--adapter", adapter, "--tasks", "tinyllama_ft_mmlu_astronomy", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "| tinyllama_ft_mmlu_astronomy | acc | 2 |" in out and "tinyllama-ft eval: done in" in out
    written = json.loads((Path(adapter).parent / "benchmarks.json").read_text(encoding="utf-8"))
    assert [r["task"] for r in written["rows"]] == ["tinyllama_ft_mmlu_astronomy"]
    assert written["settings"]["limit"] == 2 and written["settings"]["generation_format"] == "alpaca"
    assert main(["eval", "--adapter", adapter, "--tasks", "no_such_task.jsonl"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tinyllama-ft eval: error: --tasks: no such file") and "\n" not in err


@pytest.fixture(scope="module")
def text_adapter(adapter, stories_dir, tmp_path_factory):
    """The same adapter recorded as a continued-pretraining run (dataset_format: text), in a run folder of its own."""
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.models.run_record import adapter_record, write_record

    path = tmp_path_factory.mktemp("bench-text") / "lora_model"
    shutil.copytree(adapter, path)
    cfg = FinetuneConfig(model_name=str(stories_dir), max_seq_length=512, dtype="float32", load_in_4bit=False)
    write_record(str(path), adapter_record(dataclasses.replace(cfg, dataset_format="text")))
    return str(path)


def test_a_text_adapter_is_asked_in_raw_text_as_generate_asks_it(text_adapter, qa_file, capsys):
    """Issue 42: `tinyllama-ft eval` on a text adapter prompts generation tasks with the question as it is (no chat
    template, no Alpaca prompt), stopping at EOS, as `generate` completes it; a --template is refused before any model
    loads, as generate refuses it. (It read the record as a chat run's: the tokenizer's chat template, few-shot turns.)"""
    from transformers import AutoTokenizer

    from tinyllama_ft.cli import main
    from tinyllama_ft.evaluate.benchmarks import generation_format
    from tinyllama_ft.models.run_record import read_record

    tokenizer = AutoTokenizer.from_pretrained(text_adapter)
    template, stops = generation_format(tokenizer, record=read_record(text_adapter))[:2]
    assert stops == [tokenizer.eos_token_id]
    messages = [{"role": "user", "content": "The capital of France is"}]
    rendered = tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    assert rendered == "The capital of France is"
    assert main(["eval", "--adapter", text_adapter, "--tasks", str(qa_file), "--limit", "1"]) == 0
    assert "| own_capitals | exact_match | 1 |" in capsys.readouterr().out
    written = json.loads((Path(text_adapter).parent / "benchmarks.json").read_text(encoding="utf-8"))
    assert written["settings"]["generation_format"] == "text"
    assert written["settings"]["stop_token_ids"] == [tokenizer.eos_token_id]
    assert main(["eval", "--adapter", text_adapter, "--tasks", str(qa_file), "--template", "alpaca"]) == 2
    assert "the adapter was trained on raw text documents" in capsys.readouterr().err
