"""The installed ``tinyllama-ft`` console script as a user runs it (a subprocess, not ``main()`` in-process): exit
status 0 on success with one readable last line, 2 on a configuration error, 1 on a failure, no traceback unless
``--debug``; and ``generate`` / ``export`` / ``load_adapter`` take what the run recorded beside its adapter (prompt
format, chat template and stop tokens, ``max_seq_length``), refusing a flag that contradicts it.

Two real runs of the console script on stories260K (2 steps each, seconds): an Alpaca run with
``template=alpaca_no_input`` and a chat run (Alpaca rows as one-turn conversations, the Zephyr template) that also
exports ``merged_16bit``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = str(Path(sys.executable).with_name("tinyllama-ft"))
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),  # the caller's (1 on a busy machine), else 2 cores
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "WANDB_DISABLED": "true",
}
ENV.pop("TINYLLAMA_FT_DEBUG", None)


def console(*argv: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *argv], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def small_run(stories_dir, alpaca_jsonl, output_dir: Path, *more: str) -> list[str]:
    return [
        "train",
        "--model_name",
        str(stories_dir),
        "--dataset",
        str(alpaca_jsonl),
        "--max_seq_length",
        "512",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "2",
        "--gradient_accumulation_steps",
        "1",
        "--test_size",
        "0.07",  # about 55 of the ~790 rows within 512 stories260K tokens
        "--learning_rate",
        "1e-3",
        "--report_to",
        "none",
        "--max_new_tokens",
        "8",
        "--output_dir",
        str(output_dir),
        *more,
    ]


@pytest.fixture(scope="module")
def runs(stories_dir, alpaca_jsonl, tmp_path_factory):
    """``{"alpaca": (folder, process), "chat": (folder, process)}``: the two training runs, by the console script."""
    root = tmp_path_factory.mktemp("console")
    done = {}
    for name, more in (
        ("alpaca", ("--template", "alpaca_no_input")),
        ("chat", ("--dataset_format", "auto", "--chat_template", "zephyr", "--export_formats", "merged_16bit")),
    ):
        folder = root / name
        done[name] = folder, console(*small_run(stories_dir, alpaca_jsonl, folder, *more), cwd=root)
    return done


@pytest.mark.parametrize("name", ["alpaca", "chat"])
def test_train_exits_0_with_one_readable_last_line(runs, name):
    folder, done = runs[name]
    assert done.returncode == 0, done.stderr[-3000:]
    assert last_line(done.stdout).startswith("tinyllama-ft train: done: eval_loss ")
    assert str(folder / "lora_model") in last_line(done.stdout)
    assert "Traceback" not in done.stderr and "'log_history'" not in done.stderr  # the summary is not dumped
    record = json.loads((folder / "lora_model" / "tinyllama_ft.json").read_text(encoding="utf-8"))
    assert record["max_seq_length"] == 512 and record["dtype"] == "float32" and record["load_in_4bit"] is False
    if name == "chat":
        assert (record["dataset_format"], record["chat_template"], record["end_of_turn"]) == ("auto", "zephyr", "</s>")
        assert record["stop_token_ids"] == [2]
    else:
        assert (record["dataset_format"], record["template"]) == ("alpaca", "alpaca_no_input")


def test_generate_and_export_exit_0(runs, tmp_path):
    folder, _ = runs["alpaca"]
    done = console(
        "generate",
        "--adapter",
        str(folder / "lora_model"),
        "--prompt",
        "Name three colors.",
        "--max_new_tokens",
        "4",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "Traceback" not in done.stderr and "['" not in done.stderr
    )  # no list of answers dumped (a bar's [00:00] is not one)
    done = console(
        "export",
        "--adapter",
        str(folder / "lora_model"),
        "--format",
        "merged_16bit",
        "--output_dir",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert last_line(done.stdout) == f"tinyllama-ft export: done: 1 format(s) in {tmp_path / 'out' / 'export'}"


def test_errors_end_in_one_line_with_status_2_or_1(runs, tmp_path):
    folder, _ = runs["alpaca"]
    done = console("train", "--lora_rank", "8", cwd=tmp_path)  # a configuration error
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert last_line(done.stderr).startswith("tinyllama-ft train: error: ") and "did you mean lora_r?" in done.stderr
    done = console("generate", "--adapter", str(tmp_path / "missing"), "--prompt", "hi", cwd=tmp_path)  # no such folder
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        last_line(done.stderr)
        == f"tinyllama-ft generate: error: --adapter: no such file or folder: {tmp_path / 'missing'}"
    )
    offline = [
        "generate",
        "--adapter",
        str(folder / "lora_model"),
        "--base_model",
        "someorg/not-cached",
        "--prompt",
        "hi",
    ]
    done = console(*offline, cwd=tmp_path)  # a failure: a Hub id, HF_HUB_OFFLINE=1, not in the cache
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert last_line(done.stderr).startswith("tinyllama-ft generate: error: --base_model: someorg/not-cached: ")
    debug = console(*offline, "--debug", cwd=tmp_path)
    assert debug.returncode == 1 and "Traceback" in debug.stderr  # --debug shows where it failed
    done = console(
        "generate", "--adapter", str(folder / "lora_model"), "--prompt", "hi", "--max_seq_length", "4096", cwd=tmp_path
    )  # contradicts the record: RoPE scaling x8 would garble every answer
    assert done.returncode == 2, done.stderr[-2000:]
    assert "max_seq_length=4096" in last_line(done.stderr) and "max_seq_length=512" in last_line(done.stderr)


def test_generate_prompts_as_the_run_recorded(runs, cpu):
    """A chat adapter is answered through its chat template and stop tokens; ``alpaca_no_input`` is honoured."""
    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.infer.chat_generation import chat_generate
    from tinyllama_ft.cli import run
    from tinyllama_ft.config.coercion import ConfigError
    from tinyllama_ft.infer.generation import generate

    prompts = ["Name three colors.", "Write a short poem about the sea."]
    for name, expected in (
        ("chat", lambda m, t: chat_generate(m, t, prompts, max_new_tokens=8, stop_token_ids=[2])),
        ("alpaca", lambda m, t: generate(m, t, prompts, max_new_tokens=8, template="alpaca_no_input")),
    ):
        adapter = str(runs[name][0] / "lora_model")
        answers = run(["generate", "--adapter", adapter, "--prompt", json.dumps(prompts), "--max_new_tokens", "8"])
        model, tokenizer = load_adapter(adapter, backend="transformers", hardware=cpu, merged=True)
        assert answers == expected(model, tokenizer), name
        alpaca = generate(model, tokenizer, prompts, max_new_tokens=8, template="alpaca")
        assert answers != alpaca, name  # the article's default template would have answered otherwise
    with pytest.raises(ConfigError, match="trained on conversations"):
        run(["generate", "--adapter", str(runs["chat"][0] / "lora_model"), "--prompt", "hi", "--template", "alpaca"])
    with pytest.raises(
        ConfigError, match="template='alpaca', but the adapter was trained with template='alpaca_no_input'"
    ):
        run(["generate", "--adapter", str(runs["alpaca"][0] / "lora_model"), "--prompt", "hi", "--template", "alpaca"])


def _rope_factor(model) -> float:
    params = getattr(model.config, "rope_parameters", None) or getattr(model.config, "rope_scaling", None) or {}
    return float(params.get("factor", 1.0))


def test_load_adapter_takes_max_seq_length_from_the_record_never_4096(runs, cpu, tmp_path, capsys):
    """On a 512-position base the old default (4096) scaled RoPE x8; the record (and, with none, the base's own
    positions) decide now. A precision flag that differs is used and said."""
    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.config.coercion import ConfigError

    adapter = runs["alpaca"][0] / "lora_model"
    model, _ = load_adapter(str(adapter), backend="transformers", hardware=cpu)
    assert _rope_factor(model) == 1.0
    plain = tmp_path / "plain_peft"  # a PEFT folder from elsewhere: no record, no run_config.json
    shutil.copytree(adapter, plain)
    (plain / "tinyllama_ft.json").unlink()
    model, _ = load_adapter(str(plain), backend="transformers", hardware=cpu)
    assert _rope_factor(model) == 1.0  # the base's 512 positions
    with pytest.raises(ConfigError, match="max_seq_length=1024, but the adapter was trained with max_seq_length=512"):
        load_adapter(str(adapter), max_seq_length=1024, backend="transformers", hardware=cpu)
    load_adapter(str(adapter), load_in_4bit=True, backend="transformers", hardware=cpu)
    assert "load_in_4bit=True (the run trained with False)" in capsys.readouterr().out


def test_a_chat_runs_export_carries_its_own_chat_template(runs, tmp_path):
    """export_formats acts in a chat run (merged_16bit above), and ``tinyllama-ft export`` of a chat adapter writes
    the adapter's own template into the merged model, the GGUF and the Modelfile (read back from the files)."""
    import gguf
    from transformers import AutoTokenizer

    from tinyllama_ft.models.chat_templates import ZEPHYR_TEMPLATE
    from tinyllama_ft.export.adapter_export import export_adapter

    folder, _ = runs["chat"]
    trained = AutoTokenizer.from_pretrained(folder / "lora_model").chat_template
    assert trained == ZEPHYR_TEMPLATE
    merged = AutoTokenizer.from_pretrained(folder / "export" / "merged_16bit")  # written by the training run itself
    assert merged.chat_template == trained
    results = export_adapter(adapter_dir=str(folder / "lora_model"), formats=["gguf_q8_0"], output_dir=str(tmp_path))
    path = Path(results["gguf_q8_0"].path)
    reader = gguf.GGUFReader(str(path / "model-q8_0.gguf"))
    field = reader.fields["tokenizer.chat_template"]
    assert bytes(field.parts[field.data[0]]).decode("utf-8") == trained
    modelfile = (path / "Modelfile").read_text(encoding="utf-8")
    assert "TEMPLATE" not in modelfile and "### Instruction" not in modelfile  # Ollama reads the GGUF's template
    assert 'PARAMETER stop "</s>"' in modelfile
