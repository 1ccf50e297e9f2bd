"""What a headless user sees, and a finished run resumed (issue 28, items 1, 5 and 6; issue 40, items 7 and 8).

One real 4-step run of the console script on stories260K with its stdout piped (evaluations at steps 2 and 4, a
checkpoint at 4): the terminal shows one line per step and one per evaluation, no tqdm bar, no ``\\r``, no raw
trainer dict or dataclass repr, losses with 4 decimals, perplexity with 2, tokens/s as an integer, a line before each
long phase, each answer once. That run, resumed with the same ``max_steps``, trains nothing and changes no file (exit
0); with a smaller one it is refused (exit 2). A run stopped by Ctrl-C exits 130 saying how to continue, and does. Its adapter refuses a prompt past the model's 512 positions (exit 2). A
notebook under run_offline.sh's papermill (scripts/papermill_log.py) shows the side-by-side table as text and printed
lines as they are, without an empty line after each; the session's notebook run (conftest.notebook_run) holds no repr,
no stuck bar and no echoed value in its outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import default_sigint, wait_for_a_whole_checkpoint, whole_checkpoint_steps

from test_console_script import ENV  # the console script's environment: offline, the caller's threads, no W&B

pytestmark = pytest.mark.slow  # a training run of the console script, three more commands, a papermill run

BIN = Path(sys.executable).parent
PIPES = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
STEPS = 4


def console(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "tinyllama-ft"), *argv], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=900
    )


def train_args(stories_dir, alpaca_jsonl, output_dir: Path, max_steps: int = STEPS, *more: str) -> list[str]:
    return [
        "train",
        *("--model_name", str(stories_dir), "--dataset", str(alpaca_jsonl), "--max_seq_length", "512"),
        *("--max_steps", str(max_steps), "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"),
        *("--test_size", "0.004", "--learning_rate", "1e-3", "--report_to", "none", "--max_new_tokens", "8"),
        *("--eval_steps", "2", "--save_steps", str(STEPS), "--output_dir", str(output_dir), *more),
    ]


@pytest.fixture(scope="module")
def finished(stories_dir, alpaca_jsonl, tmp_path_factory):
    """``(output_dir, completed process)`` of the 4-step run, stdout and stderr piped."""
    root = tmp_path_factory.mktemp("finished")
    done = console(*train_args(stories_dir, alpaca_jsonl, root / "out"), cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "out", done


def hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_piped_stdout_is_one_line_per_step_and_per_evaluation(finished):
    out_dir, done = finished
    out = done.stdout
    assert "\r" not in out and not re.search(r"\d+%\|", out), out[-3000:]  # no tqdm bar
    assert "{'loss'" not in out and "{'eval_loss'" not in out and "{'train_runtime'" not in out, out[-3000:]
    lines = out.splitlines()
    steps = [line for line in lines if re.match(r"step \d+/\d+  loss ", line)]
    assert [s.split()[1] for s in steps] == [f"{i}/{STEPS}" for i in range(1, STEPS + 1)], steps
    for line in steps:  # loss with 4 decimals, tokens/s an integer
        assert re.fullmatch(rf"step \d/{STEPS}  loss \d+\.\d{{4}}  lr \S+  tokens/s [\d,]+", line), line
    evals = [line for line in lines if "eval_loss" in line and not line.startswith("tinyllama-ft")]
    wanted = ["before training", f"step 2/{STEPS}", f"step {STEPS}/{STEPS}"]  # each evaluation once
    assert [line.split("  eval_loss ")[0] for line in evals] == wanted, evals
    assert all(re.search(r"eval_loss \d+\.\d{4}$", line) for line in evals), evals
    held_out = [line for line in lines if line.startswith(("before: ", "after:  "))]
    assert len(held_out) == 2 and all(
        re.match(r"\w+: +response loss \d+\.\d{4} \(perplexity \d+\.\d{2}\), full-text loss \d+\.\d{4}, ", line)
        for line in held_out
    ), held_out
    summary = json.loads((out_dir / "run_summary.json").read_text(encoding="utf-8"))
    last = lines[-1]
    before, after = summary["eval_loss_before"], summary["eval_loss_after"]
    assert last.startswith(f"tinyllama-ft train: done: eval_loss {before:.4f} -> {after:.4f}, adapter in "), last
    assert round(after, 4) != after and evals[-1].endswith(f"{after:.4f}")  # the file keeps the full float


def test_piped_stderr_has_no_library_progress_bars(finished):
    """datasets' ``Map`` / ``Packing train dataset`` and transformers' ``Loading weights`` bars stay off in a
    command's output (kernel.quiet_library_bars): the run's own lines say what they would. Nor does transformers warn
    of "indexing errors" for rows past ``max_seq_length``: the length report counts them, and they are dropped."""
    _, done = finished
    err = done.stderr
    assert "\r" not in err and not re.search(r"\d+%\|", err), err[-3000:]
    assert not re.search(r"^(Map|Packing|Building labels|Loading weights|Filter)\b", err, re.M), err[-3000:]
    assert "indexing errors" not in err, err[-3000:]


#: What printed a raw repr where a person reads a line (issue 40, item 7).
RAW_REPRS = ("Hardware(", "InstallPlan(", "Tracking(", "AlpacaFormat(", "secrets: {", "<Figure", "object at 0x")


def test_piped_stdout_reads_as_lines_says_what_takes_long_and_answers_once(finished):
    out_dir, done = finished
    out, lines = done.stdout, done.stdout.splitlines()
    assert not [r for r in RAW_REPRS if r in out], out[:3000]
    assert "secrets: WANDB_API_KEY " in out and "machine: CPU, no CUDA GPU (" in out, out[:3000]
    summary = json.loads((out_dir / "run_summary.json").read_text(encoding="utf-8"))
    [sample] = summary["samples"]
    assert out.count(f"### Instruction: {sample['instruction']}") == 1, out[-3000:]  # streamed, not printed first
    # the held-out checks and the side-by-side answers (minutes on a CPU) each say what they do before they start
    said = [i for i, line in enumerate(lines) if re.match(r"held-out check: losses on \d+ rows, then greedy ", line)]
    before, after = (lines.index(next(x for x in lines if x.startswith(p))) for p in ("before: ", "after:  "))
    assert len(said) == 2 and said[0] < before < said[1] < after, said
    side = next(i for i, line in enumerate(lines) if re.match(r"side-by-side answers: \d+ held-out prompts", line))
    assert after < side < lines.index("| instruction | base | tuned |")


def test_resuming_a_finished_run_trains_nothing_and_changes_no_file(finished, stories_dir, alpaca_jsonl, tmp_path):
    out_dir = tmp_path / "out"
    shutil.copytree(finished[0], out_dir)
    before = hashes(out_dir)
    done = console(*train_args(stories_dir, alpaca_jsonl, out_dir, STEPS, "--resume", "true"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == (
        f"tinyllama-ft train: run already finished at step {STEPS} (max_steps {STEPS}): nothing to train"
    ), done.stdout[-2000:]
    assert hashes(out_dir) == before
    assert f"checkpoint-{STEPS + 1}" not in os.listdir(out_dir)


def test_resuming_below_the_checkpoints_step_is_refused(finished, stories_dir, alpaca_jsonl, tmp_path):
    out_dir = tmp_path / "out"
    shutil.copytree(finished[0], out_dir)
    before = hashes(out_dir)
    done = console(*train_args(stories_dir, alpaca_jsonl, out_dir, 2, "--resume", "true"), cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tinyllama-ft train: error: ") and "max_steps=2" in last and f", {STEPS} (" in last, last
    assert "planned:" not in done.stdout and hashes(out_dir) == before


def test_generate_refuses_a_prompt_past_the_models_positions(finished, tmp_path):
    done = console(
        "generate",
        *("--adapter", str(finished[0] / "lora_model"), "--prompt", "dog " * 600, "--max_new_tokens", "16"),
        cwd=tmp_path,
    )
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    last = done.stderr.strip().splitlines()[-1]
    assert re.search(r"prompt 0 has \d+ tokens and max_new_tokens=16: \d+ positions, more than the model's 512", last)
    assert "Traceback" not in done.stderr


def test_a_run_without_held_out_rows_says_so_once_and_prints_no_empty_results(stories_dir, alpaca_jsonl, tmp_path):
    """test_size 0: the held-out check and the side-by-side answers are skipped, each said in one line; no
    "before: None" / "after:  None" and no table without rows."""
    args = train_args(stories_dir, alpaca_jsonl, tmp_path / "out", 1, "--test_size", "0")
    done = console(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert (
        lines.count("held-out check skipped: no held-out rows (test_size=0, or a single row: nothing to hold out)") == 2
    )
    assert "side-by-side answers skipped: no held-out rows" in lines
    assert not [x for x in lines if x.startswith(("before:", "after:", "| instruction"))], done.stdout


def test_ctrl_c_exits_130_keeping_the_checkpoints_and_says_how_to_continue(stories_dir, alpaca_jsonl, tmp_path):
    """Ctrl-C (SIGINT) during training: exit status 130, one line that says the checkpoints are kept and how to
    continue, no traceback and no run lock left; the same command with --resume true then continues the run."""
    import signal

    args = train_args(stories_dir, alpaca_jsonl, tmp_path / "out", 400, "--save_steps", "2", "--eval_steps", "400")
    run = subprocess.Popen(
        [str(BIN / "tinyllama-ft"), *args], cwd=tmp_path, env=ENV, text=True, preexec_fn=default_sigint, **PIPES
    )
    wait_for_a_whole_checkpoint(tmp_path / "out", run)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 130, err[-3000:]
    assert err.strip().splitlines()[-1] == (
        "tinyllama-ft train: interrupted: its checkpoints are kept; the same command with --resume true continues "
        "from the last one"
    ), err[-3000:]
    assert "Traceback" not in err and not (tmp_path / "out" / "run.lock").exists()
    step = whole_checkpoint_steps(tmp_path / "out")[-1]  # Ctrl-C may have cut the next save short: a resume goes back
    done = console(*train_args(stories_dir, alpaca_jsonl, tmp_path / "out", step + 1, "--resume", "true"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"step {step + 1}/{step + 1}  loss" in done.stdout and f"step {step}/" not in done.stdout


def test_the_notebooks_outputs_read_as_lines(notebook_run):
    """The main job's notebook (the session's papermill run): no cell echoes a value (``True``, ``InstallPlan(...)``),
    no line is a repr, no library bar is kept at 0%, the loss curve's text form names its file, each answer is printed
    once, and the held-out checks and side-by-side answers say what they do before the minutes they take."""
    import nbformat

    from conftest import NOTEBOOK_PROMPTS, NOTEBOOK_STEPS

    _, out, _ = notebook_run
    cells = [c for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"]
    outputs = [o for c in cells for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "execute_result"], "a cell echoed its last value"
    bars = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert not bars, bars[0]["data"]["text/plain"]  # under papermill a bar widget stays at 0%

    def text(cell) -> str:
        return "".join(
            o.text if o.output_type == "stream" else o.data.get("text/plain", "") + "\n" for o in cell.outputs
        )

    texts = [text(c) for c in cells]
    everything = "".join(texts)
    assert not [r for r in RAW_REPRS if r in everything] and not re.search(r"\d+%\|", everything)
    assert "secrets: WANDB_API_KEY from the environment, HF_TOKEN from the environment\n" in everything
    assert "machine: CPU, no CUDA GPU (" in everything and "data format: Alpaca rows (" in everything
    for prompt in NOTEBOOK_PROMPTS:
        assert everything.count(f"### Instruction: {prompt}\n") == 1, prompt
    [curve] = [o for o in outputs if "image/png" in o.get("data", {})]
    assert curve.data["text/plain"].startswith(f"loss curve: {NOTEBOOK_STEPS} training steps, "), curve.data
    assert "run summary: outputs/run_summary.json\n" in everything
    said = r"^held-out check: losses on \d+ rows, then greedy answers to \d+ short-answer prompts "
    [checks] = [t for t in texts if "\nbefore: " in t and "\nafter:  " not in t]
    assert re.search(said, checks, re.M).start() < checks.index("\nbefore: "), checks
    [after] = [t for t in texts if "\nafter:  " in t]
    side = after.index("\nside-by-side answers: ")
    assert re.search(said, after, re.M).start() < after.index("\nafter:  ") < side < after.index("| instruction")
    [training] = [t.splitlines() for t in texts if f"step {NOTEBOOK_STEPS}/{NOTEBOOK_STEPS}  loss" in t]
    steps = [i for i, line in enumerate(training) if line.startswith("step ")]
    assert steps == list(range(steps[0], steps[0] + len(steps))), training  # one after another, nothing between


NOTEBOOK = [
    """\
from transformers import AutoModelForCausalLM, AutoTokenizer
from tinyllama_ft.evaluate.side_by_side import show_answers
from tinyllama_ft.infer.generation import generate, stream

tokenizer = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForCausalLM.from_pretrained(MODEL)
rows = [dict(instruction="Name a colour.", base="Blue, I think.", tuned="Red.", base_stopped=True, tuned_stopped=False)]""",
    "show_answers(rows)",
    """\
expected = generate(model, tokenizer, ["Tell me a story."], max_new_tokens=40)[0]
print("EXPECTED " + json.dumps(expected))""",
    """\
stream(model, tokenizer, ["Tell me a story."], max_new_tokens=40)
print("END OF ANSWER")""",
    """\
import time

for step in range(1, 4):  # each line its own message, as the step lines are
    print(f"step {step}/3", flush=True)
    time.sleep(0.3)""",
]


def test_papermill_log_shows_the_table_as_text_and_the_answer_in_lines(stories_dir, tmp_path):
    """As run_offline.sh runs papermill (scripts/papermill_log.py): the printed lines, a streamed answer and the
    step lines, each line once, with no empty line papermill's log would add after each."""
    import nbformat

    from conftest import REPO

    cells = [nbformat.v4.new_code_cell(f"import json\nMODEL = {str(stories_dir)!r}")] + [
        nbformat.v4.new_code_cell(source) for source in NOTEBOOK
    ]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / "in.ipynb")
    command = [sys.executable, str(REPO / "scripts" / "papermill_log.py"), "in.ipynb", "out.ipynb", "--log-output"]
    done = subprocess.run(
        [*command, "--no-progress-bar", "-k", "python3"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    log = done.stdout + done.stderr
    expected = json.loads(re.search(r"EXPECTED (\".*\")", log).group(1))
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("### Instruction: Tell me a story."))
    end = next(i for i, line in enumerate(lines) if line.endswith("END OF ANSWER"))
    streamed = lines[start + 1 : end]
    while streamed and not streamed[-1]:  # the empty line after the answer, as the notebook shows it
        streamed.pop()
    # in whole lines (not one word per line), and without the empty line papermill's own log adds after each
    assert streamed == expected.rstrip("\n").splitlines(), streamed
    assert "<IPython.core.display.HTML object>" not in log
    assert "| Name a colour. | Blue, I think. | Red. [no EOS] |" in log, log[-3000:]
    first = lines.index("step 1/3")
    assert lines[first : first + 3] == ["step 1/3", "step 2/3", "step 3/3"], lines[first - 2 : first + 8]
