"""The command line and the shipped recipes: every recipe validates, bad flags and keys name the field meant,
``--help`` documents every field, and ``train`` runs the notebook's run (same eval losses on the same inputs)."""

import json
import re
import shlex
import subprocess
import sys

import pytest

from conftest import NOTEBOOK_STEPS, REPO, notebook_parameters
from tinyllama_ft.cli import main, run
from tinyllama_ft.config.coercion import ConfigError
from tinyllama_ft.config.finetune import DEFAULTS, FIELD_NAMES, FinetuneConfig, field_docs
from tinyllama_ft.config.sources import RECIPES_DIR, config_from_recipe, load_recipe, recipe_names


def test_the_recipes_ship_inside_the_package_and_validate():
    assert recipe_names() == [
        "article",
        "chat_offline_cpu",
        "cpt_offline_cpu",
        "default",
        "dpo_offline_cpu",
        "grpo_offline_cpu",
        "offline_cpu",
        "simpo_offline_cpu",
    ]
    for name in recipe_names():
        config_from_recipe(name)  # raises on any unknown key or wrong type
    assert config_from_recipe("default") == DEFAULTS  # default.yaml is the package's defaults, every field
    assert set(load_recipe("default")) == set(FIELD_NAMES)
    article = config_from_recipe("article")
    assert (
        article.recipe,
        article.max_steps,
        article.per_device_train_batch_size,
        article.gradient_accumulation_steps,
        article.gradient_checkpointing,
    ) == ("article", -1, 2, 4, True)


def test_the_shipped_recipes_name_no_test_or_shared_path():
    """A recipe inside the wheel reads nothing from the repository's tests/ or from outside it (../shared): such a
    recipe is a test's (tests/recipes/), loaded by its path."""
    import yaml

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    shipped = sorted(RECIPES_DIR.rglob("*.yaml"))
    assert len(shipped) >= 4  # the three recipes and the accelerate config
    for path in shipped:
        for text in strings(yaml.safe_load(path.read_text(encoding="utf-8"))):
            parts = text.replace("\\", "/").split("/")
            assert ".." not in parts and "shared" not in parts and parts[0] != "tests", (path.name, text)
    assert config_from_recipe(str(REPO / "tests" / "recipes" / "chat_offline.yaml")).assistant_only_loss


def test_pyproject_ships_the_recipes_as_package_data():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "recipes/*.yaml" in project["tool"]["setuptools"]["package-data"]["tinyllama_ft"]
    assert project["project"]["scripts"]["tinyllama-ft"] == "tinyllama_ft.cli:main"
    assert RECIPES_DIR.parent == REPO / "tinyllama_ft"


def test_offline_cpu_recipe_is_what_the_offline_script_passes():
    script = "\n".join(
        line
        for line in (REPO / "scripts" / "run_offline.sh").read_text(encoding="utf-8").splitlines()
        if not line.startswith("#") and not line.lstrip().startswith("echo ")  # messages name flags too
    )
    passed = dict(re.findall(r"-p (\w+) ([^\s\\\\\"()]+)", script))
    recipe = load_recipe("offline_cpu")
    from_script = FinetuneConfig.from_mapping({k: v for k, v in passed.items() if k not in ("model_name", "dataset")})
    for name in passed:
        if name in ("model_name", "dataset", "overwrite_output_dir"):
            continue
        assert getattr(config_from_recipe("offline_cpu"), name) == getattr(from_script, name), name
    assert {k for k in passed if k not in ("model_name", "dataset", "overwrite_output_dir")} <= set(recipe)
    assert recipe["model_name"] == "HuggingFaceTB/SmolLM2-135M-Instruct"  # the script's defaults: the demo model
    assert recipe["dataset"] == "data/alpaca_demo/alpaca_demo.jsonl" and (REPO / recipe["dataset"]).is_file()
    assert "MODEL=${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}" in script
    assert "DATASET=${DATASET:-data/alpaca_demo/alpaca_demo.jsonl}" in script


def test_a_recipe_with_a_misspelt_key_or_a_wrong_type_names_it(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lora_rank: 8\nmax_steps: 10\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*'lora_rank' \(did you mean lora_r\?\)"):
        config_from_recipe(str(bad))
    bad.write_text("max_steps: ten\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="max_steps='ten'"):
        config_from_recipe(str(bad))
    with pytest.raises(
        FileNotFoundError,
        match="article, chat_offline_cpu, cpt_offline_cpu, default, dpo_offline_cpu, grpo_offline_cpu, offline_cpu, simpo",
    ):
        config_from_recipe("artcle")


def test_resume_given_over_a_recipe_that_overwrites_continues_the_run(tmp_path):
    """offline_cpu sets overwrite_output_dir: true; ``--resume true`` on it continues the run (as run_offline.sh's
    ``-p resume True``) instead of refusing the pair, and ``--overwrite_output_dir true`` wins over a recipe's
    ``resume: true``; both given on the command line still contradict each other."""
    assert load_recipe("offline_cpu")["overwrite_output_dir"] is True
    for resume in (True, "true"):
        cfg = config_from_recipe("offline_cpu", {"resume": resume})
        assert (cfg.resume, cfg.overwrite_output_dir) == (True, False)
    assert config_from_recipe("offline_cpu", {"resume": False}).overwrite_output_dir is True
    resuming = tmp_path / "resuming.yaml"
    resuming.write_text("resume: true\nmax_steps: 3\n", encoding="utf-8")
    cfg = config_from_recipe(str(resuming), {"overwrite_output_dir": True})
    assert (cfg.resume, cfg.overwrite_output_dir) == (False, True)
    with pytest.raises(ConfigError, match="resume=True and overwrite_output_dir=True contradict"):
        config_from_recipe("offline_cpu", {"resume": True, "overwrite_output_dir": True})


def test_a_recipe_key_given_twice_or_a_yaml_syntax_error_is_one_line_naming_the_lines(tmp_path, capsys):
    """PyYAML keeps the last of two equal keys silently; a recipe refuses it, naming the key and both lines."""
    twice = tmp_path / "twice.yaml"
    twice.write_text("max_steps: 10\nlora_r: 8\nmax_steps: 20\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"twice\.yaml: 'max_steps' is given twice, on line 1 and on line 3"):
        config_from_recipe(str(twice))
    broken = tmp_path / "broken.yaml"
    broken.write_text("max_steps: 10\nlora_r: [8\n", encoding="utf-8")
    for path, named in ((twice, "given twice"), (broken, "broken.yaml: not valid YAML: line 3, column 1")):
        assert main(["train", "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_secret_looking_key_in_a_recipe_is_one_line_without_its_value(tmp_path, capsys):
    recipe = tmp_path / "leak.yaml"
    recipe.write_text("wandb_api_key: 0123456789abcdef\nmax_steps: 3\n", encoding="utf-8")
    assert main(["train", "--config", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "'wandb_api_key' looks like a secret" in err and "WANDB_API_KEY" in err and "0123456789abcdef" not in err
    assert len(err.strip().splitlines()) == 1


def _toy_recipe(tmp_path, stories_dir, alpaca_jsonl, **more) -> str:
    import yaml

    values = {
        "model_name": str(stories_dir),
        "dataset": str(alpaca_jsonl),
        "max_seq_length": 512,
        "max_steps": 1,
        "report_to": "none",
        "output_dir": str(tmp_path / "out"),
        **more,
    }
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return str(path)


def test_an_output_dir_that_is_a_file_stops_with_one_line(tmp_path, stories_dir, alpaca_jsonl, capsys):
    (tmp_path / "out").write_text("notes", encoding="utf-8")
    assert main(["train", "--config", _toy_recipe(tmp_path, stories_dir, alpaca_jsonl)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        f"tinyllama-ft train: error: output_dir={str(tmp_path / 'out')!r} is a file, not a folder"
    )
    assert (tmp_path / "out").read_text(encoding="utf-8") == "notes"  # untouched


def test_q4_k_m_without_a_quantizer_stops_before_training(tmp_path, stories_dir, alpaca_jsonl, capsys):
    from tinyllama_ft.export.gguf_export import find_quantizer

    if find_quantizer() is not None:
        pytest.skip("llama.cpp's quantizer is installed here")
    recipe = _toy_recipe(tmp_path, stories_dir, alpaca_jsonl, export_formats=["gguf_q4_k_m"])
    assert main(["train", "--config", recipe]) == 1
    out, err = capsys.readouterr()
    assert "gguf_q4_k_m needs llama.cpp's quantizer" in err.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists() and "step 1/1" not in out  # nothing trained, nothing written


def test_too_little_disk_for_an_export_is_one_line(tmp_path, stories_dir, monkeypatch, capsys):
    """The free space the export needs is checked before anything is written (the disk is reported nearly full)."""
    import collections

    import tinyllama_ft.export.disk_space as disk_space
    from helpers import trained_stories_adapter

    adapter = trained_stories_adapter(stories_dir, tmp_path / "run")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 4096, 4096))
    assert main(["export", "--adapter", adapter, "--format", "merged_16bit"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "GiB" in err[-1] and err[-1].startswith("tinyllama-ft export: error: ")
    assert not (tmp_path / "run" / "export").exists()  # nothing written, not even an empty folder


def test_relative_paths_in_a_recipe_resolve_against_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "r.yaml").write_text("dataset: rows.jsonl\nlearning_rate: 2e-4\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    cfg = config_from_recipe("sub/r.yaml")
    assert cfg.dataset == "rows.jsonl" and cfg.learning_rate == 2e-4  # PyYAML reads 2e-4 as a string: coerced


def test_help_groups_the_fields_by_section_and_lists_each_literals_choices(capsys):
    """``--help`` reads the sections and the choice fields' Literal annotations, the declarations validation reads."""
    import dataclasses

    from tinyllama_ft.config.finetune import SECTIONS, choices

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    starts = [out.index(f"\n{section.__doc__.splitlines()[0].rstrip('.')}:\n") for section in SECTIONS.values()]
    assert starts == sorted(starts)  # one group per section, in the sections' order
    for (name, section), start, end in zip(SECTIONS.items(), starts, starts[1:] + [len(out)]):
        for f in dataclasses.fields(section):
            assert f"--{f.name} " in out[start:end], (name, f.name)  # each flag in its section's group
    options = out[out.index("\noptions:") :]
    for name in FIELD_NAMES:
        listed = [c for c in choices(name) if c is not None]
        if listed:  # the flag's help (its type) lists the Literal's values
            start = options.index(f"  --{name} ")
            help_text = " ".join(options[start : options.find("\n  --", start + 3)].split())
            assert "Literal[" + ", ".join(repr(c) for c in listed) + "]" in help_text, name
    assert "--recipe {fast,article}" in out and "--dtype DTYPE" in out  # the choices in the usage line too


def test_version_prints_the_packages_version(capsys):
    """``tinyllama-ft --version``, for a bug report: the installed package's version, exit status 0."""
    import importlib.metadata

    import tinyllama_ft

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"tinyllama-ft {tinyllama_ft.__version__}\n"
    assert tinyllama_ft.__version__ == importlib.metadata.version("tinyllama-ft")  # the one pyproject.toml declares


def test_help_documents_every_field(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    docs = field_docs()
    for name in FIELD_NAMES:
        assert f"--{name}" in text and " ".join(docs[name].split())[:40] in text, name
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "--adapter" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    assert "--format" in capsys.readouterr().out


def test_each_commands_flags_and_help_are_its_functions_signature_and_docstring(capsys):
    """Issue 41 item 4: a command is one typed function (as litgpt's ``__main__``): its parameters are its flags, its
    docstring's first line the command's help and its ``Args`` the flags' help, each command one ``COMMANDS`` entry."""
    import inspect

    import docstring_parser

    from tinyllama_ft.cli import COMMANDS

    for name, command in COMMANDS.items():
        with pytest.raises(SystemExit):
            main([name, "--help"])
        out = capsys.readouterr().out
        flat = "".join(out.split())  # argparse wraps lines, and breaks words at hyphens
        doc = docstring_parser.parse(inspect.getdoc(command.function))
        assert doc.short_description in " ".join(out.split()), name
        params = [p for p in inspect.signature(command.function).parameters.values() if p.kind != p.VAR_KEYWORD]
        described = {p.arg_name: "".join(p.description.split()) for p in doc.params}
        for param in params:
            assert f"--{param.name} " in out and described[param.name] in flat, (name, param.name)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train", "--lora_rank", "8"], "did you mean lora_r?"),
        (["train", "--config", "offline_cpu", "--max_step=3"], "did you mean max_steps?"),
        (["generate", "--adapter", "x", "--prompt", "hi", "--max_new_token", "3"], "did you mean max_new_tokens?"),
        (["train", "--max_steps", "ten"], "--max_steps: 'ten' is not allowed: expected an integer"),
        (["train", "--lora_dropout=x"], "--lora_dropout: 'x' is not allowed: expected a number"),
        (["generate", "--adapter", "x", "--prompt", "hi", "--max_new_tokens", "1.5"], "--max_new_tokens: '1.5' is not"),
        (["export", "--adapter", "x", "--format", "gguf_f16", "--max_seq_length", "ten"], "--max_seq_length: 'ten' is"),
        (["train", "--backend", "vllm"], "--backend: 'vllm' is not allowed: one of ('auto', 'unsloth'"),
        (["train", "--dtype", "int8"], "--dtype: 'int8' is not allowed: one of (None, 'bfloat16'"),
        (["train", "--config", "offline_cpu", "--test_size", "2.0"], "--test_size: 2.0 is not allowed"),
        # out of the field's range, named by the flag too (issue 40 adversarial test: "FinetuneConfig.max_steps=-3")
        (["train", "--max_steps", "-3"], "--max_steps: -3 is not allowed: -1 (full epochs) or a positive number"),
        (["train", "--learning_rate", "nan"], "--learning_rate: nan is not allowed: a finite number"),  # not "<class"
        (
            ["train", "--method", "grpo", "--reward_weights", "1,a"],
            "--reward_weights: 'a' is not allowed: expected a",
        ),
        (["generate", "--adapter", "x", "--prompt", "hi", "--max_new_tokens", "0"], "--max_new_tokens: 0 is not allo"),
        (["export", "--adapter", "x", "--format", "merged_16bit", "--format", "gguf_q5"], "--format: 'gguf_q5' is not"),
        (["export", "--adapter", "x", "--formats", "gguf_f16"], "did you mean format?"),
        (["train", "--wandb_api_key=0123abcd"], "'wandb_api_key' looks like a secret"),  # not "did you mean ..."
        (["generate", "--adapter", "x", "--prompt", "hi", "--hf_token", "0123abcd"], "set HF_TOKEN in the environment"),
        (["generate", "--prompt", "hi"], "error: --adapter required"),  # not jsonargparse's generate.adapter
        (["generate", "--max_new_tokens", "8"], "--adapter, --prompt required"),
        (["train", "--config", "offline_cpu", "--max_steps"], "--max_steps needs a value"),  # not "None is not allowed"
        (["train", "--config", "tinyllama_ft"], "'tinyllama_ft': is a folder, not a YAML file"),
    ],
)
def test_bad_flags_stop_before_anything_runs_naming_the_flag(argv, expected, capsys):
    assert main(argv) == 2  # a configuration error: exit status 2, one line, no traceback
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "0123abcd" not in err  # a secret given as a flag is never shown
    assert err.startswith(f"tinyllama-ft {argv[0]}: error: ")
    with pytest.raises(ConfigError):  # in-process, run() raises what main() reports
        run(argv)


def test_the_refusals_ours_replace_are_unclear_in_jsonargparses_words():
    """Why ``cli._refusal`` has words of its own (issue 41, item 4): jsonargparse names no near miss for a misspelt
    flag, shows a secret-looking flag's value, and spreads a field's refused value over lines of Python types."""
    from argparse import ArgumentError

    from tinyllama_ft.cli import build_parser

    said = {}
    for argv in (["train", "--lora_rank", "8"], ["train", "--hf_token=0123abcd"], ["train", "--dtype", "int8"]):
        with pytest.raises(ArgumentError) as refused:
            build_parser().parse_args(argv)
        said[argv[1]] = str(refused.value)
    assert "lora_r " not in said["--lora_rank"] and "did you mean" not in said["--lora_rank"]
    assert "0123abcd" in said["--hf_token=0123abcd"]
    assert "<class 'NoneType'>" in said["--dtype"] and len(said["--dtype"].splitlines()) > 5


def test_a_flag_overrides_the_recipe_even_at_the_fields_default(monkeypatch):
    """``--load_in_4bit true`` (the field's default) over the recipe's false: the flags given come from the one parse
    of argv (jsonargparse's ``defaults=False``), not from a pre-scan or a comparison with the defaults."""
    import tinyllama_ft.data.formats as formats
    import tinyllama_ft.pipeline as pipeline

    monkeypatch.setattr(formats, "check_sources", lambda cfg, flag_prefix: None)
    monkeypatch.setattr(pipeline, "run_training", lambda cfg: {"config": cfg})
    cfg = run(["train", "--config", "offline_cpu", "--load_in_4bit", "true", "--lora_r", "8"])["config"]
    assert (cfg.load_in_4bit, cfg.lora_r, cfg.max_steps, cfg.gradient_checkpointing) == (True, 8, 40, False)
    assert run(["train", "--config", "offline_cpu"])["config"] == config_from_recipe("offline_cpu")


#: A bad data file for each loader: name -> (file name, its text, flags, what the one error line says).
BAD_DATA = {
    "alpaca rows with other column names": (
        "q.csv",
        "question,context,answer\nWhat is 2+2?,,4\nName a color.,,Red\n",
        [],
        "q.csv: no usable rows: all 2 rows lack 'instruction'; row 0: field 'instruction' is missing (the row's "
        "columns: 'question', 'context', 'answer'): set instruction_column (--instruction_column on the command line)",
    ),
    "a .json file that does not parse": ("rows.json", "not json\n", [], "rows.json: line 1, column 1: not valid JSON"),
    "conversations without their column": (
        "c.jsonl",
        '{"turns": [{"role": "user", "content": "hi"}]}\n',
        ["--dataset_format", "messages"],
        "c.jsonl: no usable rows: all 1 rows lack 'messages'; row 0: field 'messages' is missing (the row's columns: "
        "'turns'): set dataset_format (--dataset_format on the command line)",
    ),
    "pairs under other column names": (
        "p.jsonl",
        '{"prompt": "a", "good": "b", "bad": "c"}\n',
        ["--method", "dpo"],
        "p.jsonl: preference rows: row 0 has the columns ['bad', 'good', 'prompt']: preference rows take TRL's column "
        "names",
    ),
    "a bad pair under --strict": (
        "p.jsonl",
        '{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"question": "a", "chosen": "b", "rejected": "d"}\n',
        ["--method", "dpo", "--strict", "true"],
        "p.jsonl: row 1: field 'prompt' is missing (the row's columns: 'question', 'chosen', 'rejected')",
    ),
    "GRPO prompts without the answer column": (
        "g.jsonl",
        '{"question": "What is 2+2?", "solution": "4"}\n',
        ["--method", "grpo", "--max_completion_length", "16", "--num_generations", "2"],
        "g.jsonl: no usable rows: all 1 rows lack 'answer'; row 0: field 'answer' is missing (the row's columns: "
        "'question', 'solution'): set answer_column (--answer_column on the command line)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_each_loaders_bad_file_exits_2_naming_the_file_row_columns_and_flag(case, tmp_path, stories_dir, capsys):
    """A data file the loader refuses is the person's input at fault, as a bad flag is: exit status 2 for every
    loader (row_files.DataError), one line naming the file, the row, its columns and the parameter that maps them."""
    name, text, flags, expected = BAD_DATA[case]
    (tmp_path / name).write_text(text, encoding="utf-8")
    base = ["train", "--model_name", str(stories_dir), "--dataset", str(tmp_path / name), "--report_to", "none"]
    sizes = ["--max_seq_length", "256", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"]
    assert main([*base, *sizes, "--output_dir", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"tinyllama-ft train: error: {tmp_path}/{expected}"), err[-1]
    assert "--debug" not in err[-1] and not (tmp_path / "out").exists()  # refused before output_dir is touched


def test_an_empty_folder_as_dataset_exits_2_naming_it(tmp_path, stories_dir, capsys):
    """A folder without row files is a data error (exit 2, the folder named), not datasets' own error (exit 1)."""
    (tmp_path / "rows").mkdir()
    argv = ["train", "--model_name", str(stories_dir), "--dataset", str(tmp_path / "rows"), "--report_to", "none"]
    assert main([*argv, "--output_dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"tinyllama-ft train: error: dataset='{tmp_path}/rows': a folder datasets cannot"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_train_with_the_notebooks_recipe_gives_the_notebooks_eval_losses(
    notebook_run, stories_dir, alpaca_jsonl, tmp_path
):
    """Same inputs as the session's notebook run (the toy fast path, 40 steps), as a recipe file: the same eval
    losses."""
    import yaml

    _, _, notebook = notebook_run
    params = notebook_parameters(stories_dir, alpaca_jsonl)
    recipe = {k: v for k, v in params.items() if k not in ("report_to", "prompts", "max_new_tokens")}
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    argv = [
        "train",
        "--config",
        str(tmp_path / "toy.yaml"),
        "--output_dir",
        str(tmp_path / "cli"),
        "--report_to",
        "none",
        "--max_new_tokens",
        "8",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "tinyllama_ft.cli", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"step {NOTEBOOK_STEPS}/{NOTEBOOK_STEPS}  loss" in done.stdout  # progress lines reach the terminal
    cli = json.loads((tmp_path / "cli" / "run_summary.json").read_text(encoding="utf-8"))
    steps = lambda s: [h["step"] for h in s["log_history"] if "eval_loss" in h]  # noqa: E731
    evals = lambda s: [h["eval_loss"] for h in s["log_history"] if "eval_loss" in h]  # noqa: E731
    # one evaluation per step: the one after training is the last step's (issue 28, item 6), not logged twice
    assert steps(cli) == steps(notebook) == [20, NOTEBOOK_STEPS]
    assert cli["eval_loss_before"] == pytest.approx(notebook["eval_loss_before"], rel=1e-6)
    assert cli["eval_loss_after"] == pytest.approx(notebook["eval_loss_after"], rel=1e-6)
    assert evals(cli) == pytest.approx(evals(notebook), rel=1e-6)
    assert cli["execution"] == notebook["execution"] and cli["plan"] == notebook["plan"]
    for key in ("heldout_before", "heldout_after"):  # the held-out checks run in the notebook's order too
        assert cli[key]["response_loss"] == pytest.approx(notebook[key]["response_loss"], rel=1e-5), key
    assert [cli[k] for k in ("stopped_before", "stopped_after", "stop_total")] == [
        notebook[k] for k in ("stopped_before", "stopped_after", "stop_total")
    ]
    assert [r["tuned"] for r in cli["side_by_side"]] == [r["tuned"] for r in notebook["side_by_side"]]
    answer = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinyllama_ft.cli",
            "generate",
            "--adapter",
            cli["adapter_dir"],
            "--prompt",
            "Name three colors.",
            "--max_new_tokens",
            "8",
            "--max_seq_length",
            "512",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    assert "### Instruction: Name three colors." in answer.stdout, shlex.join(argv)


@pytest.mark.slow
def test_train_gives_the_chat_notebooks_run_on_the_same_inputs(alpaca_jsonl, tmp_path):
    """The chat notebook and ``tinyllama-ft train`` are one run for conversations too (issue 21): a tiny random
    Llama with SmolLM2's real tokenizer and ChatML template, real Alpaca rows as one-turn conversations plus the
    multi-turn fixtures, 4 steps; the same eval losses, held-out checks and side-by-side answers."""
    import papermill
    import yaml

    from chat_fixtures import cpu_trl_cannot_train, tiny_chat_run

    if cpu_trl_cannot_train():
        pytest.skip("TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
    from test_chat_notebook import _parameters

    params = _parameters(REPO / "notebooks" / "finetune_chat.ipynb")  # the cell's values: the recipe holds them all
    params.update(tiny_chat_run(alpaca_jsonl, tmp_path), max_steps=4, eval_steps=2)
    papermill.execute_notebook(
        str(REPO / "notebooks" / "finetune_chat.ipynb"),
        str(tmp_path / "out.ipynb"),
        cwd=str(tmp_path),
        kernel_name="python3",
        progress_bar=False,
        parameters={**params, "output_dir": str(tmp_path / "notebook")},
    )
    (tmp_path / "chat.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    argv = ["train", "--config", str(tmp_path / "chat.yaml"), "--output_dir", str(tmp_path / "cli")]
    done = subprocess.run(
        [sys.executable, "-m", "tinyllama_ft.cli", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    notebook, cli = (
        json.loads((tmp_path / d / "run_summary.json").read_text(encoding="utf-8")) for d in ("notebook", "cli")
    )
    assert cli["config"] == {**notebook["config"], "output_dir": cli["config"]["output_dir"]}
    steps = lambda s: [h["step"] for h in s["log_history"] if "eval_loss" in h]  # noqa: E731
    evals = lambda s: [h["eval_loss"] for h in s["log_history"] if "eval_loss" in h]  # noqa: E731
    assert steps(cli) == steps(notebook) and len(steps(cli)) >= 2
    assert evals(cli) == pytest.approx(evals(notebook), rel=1e-6)
    assert cli["eval_loss_after"] == pytest.approx(notebook["eval_loss_after"], rel=1e-6)
    assert cli["chat"] == notebook["chat"] and cli["plan"] == notebook["plan"]
    for key in ("heldout_before", "heldout_after"):
        assert cli[key]["response_loss"] == pytest.approx(notebook[key]["response_loss"], rel=1e-5), key
    assert [r["tuned"] for r in cli["side_by_side"]] == [r["tuned"] for r in notebook["side_by_side"]]
    assert cli["samples"] == notebook["samples"]


def test_generate_answers_each_repeated_prompt_in_order(stories_dir, tmp_path, cpu):
    """Issue 40: ``generate --prompt A --prompt B`` answered B alone; each is answered, in order, as a JSON list of
    them is, and a repeated ``--input`` gives each prompt its own context."""
    from helpers import trained_stories_adapter
    from tinyllama_ft.infer.generation import stream
    from tinyllama_ft.models.adapters import load_adapter

    adapter = trained_stories_adapter(stories_dir, tmp_path, cpu)
    prompts, context = ["Name a color.", "Once upon a time"], "The sky was blue."
    common = ["generate", "--adapter", adapter, "--max_new_tokens", "8"]
    answers = run([*common, "--prompt", prompts[0], "--prompt", prompts[1]])
    model, tokenizer = load_adapter(adapter, hardware=cpu, merged=True)
    assert answers == stream(model, tokenizer, prompts, max_new_tokens=8) and answers[0] != answers[1]
    assert run([*common, "--prompt", json.dumps(prompts)]) == answers
    each = run([*common, "--prompt", prompts[0], "--input", context, "--prompt", prompts[1], "--input", ""])
    assert each == stream(model, tokenizer, prompts, inputs=[context, ""], max_new_tokens=8)


def test_generate_takes_an_alpaca_input_as_the_helper_does(stories_dir, tmp_path, cpu, capsys):
    """Issue 28: ``--input`` is the Alpaca row's second field (one for every prompt, or one each), rendered into the
    prompt as ``stream(..., inputs=)`` renders it; a list of the wrong length is a usage error before anything loads."""
    from helpers import trained_stories_adapter
    from tinyllama_ft.infer.generation import stream
    from tinyllama_ft.models.adapters import load_adapter

    adapter = trained_stories_adapter(stories_dir, tmp_path, cpu)
    prompts, context = ["Summarize the text.", "Name the animal in it."], "Once upon a time there was a cat."
    common = ["generate", "--adapter", adapter, "--prompt", json.dumps(prompts), "--max_new_tokens", "8"]
    answers = run([*common, "--input", context])
    model, tokenizer = load_adapter(adapter, hardware=cpu, merged=True)
    assert answers == stream(model, tokenizer, prompts, inputs=context, max_new_tokens=8)
    assert answers != stream(model, tokenizer, prompts, max_new_tokens=8)  # the input reaches the prompt
    assert (
        run([*common, "--input", json.dumps([context, ""])])[1]
        == stream(model, tokenizer, prompts[1:], max_new_tokens=8)[0]
    )  # one each; "" is no input
    assert main([*common, "--input", json.dumps(["a", "b", "c"])]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("--input has 3 items for 2 instructions: give one for all, or one each")
    )
