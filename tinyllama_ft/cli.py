"""``tinyllama-ft``: the command line over the same helpers as the notebook (jsonargparse).

    tinyllama-ft train --config article [--NAME VALUE ...]    # a shipped recipe by name, or any YAML path
    tinyllama-ft generate --adapter DIR --prompt TEXT [--input CONTEXT] [--max_new_tokens N ...]
    tinyllama-ft export --adapter DIR --format gguf_q8_0 [--format merged_16bit ...] [--output_dir DIR]  (and eval)

Flags are ``FinetuneConfig``'s field names (flag over recipe over default); exit status 0 on success, 2 on a
usage, configuration or data error, 1 on a failure, 130 on Ctrl-C (docs/command-line.md). One jsonargparse parse per
command; a refusal is one line naming the flag: tests/test_cli.py::test_bad_flags_stop_before_anything_runs_naming_the_flag.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, List, Optional, Sequence, Union

from .config.coercion import ConfigError, FieldError
from .config.finetune import (
    FIELD_NAMES,
    FIELD_TYPES,
    FinetuneConfig,
    add_field_arguments,
    field_docs,
    parse_values,
)
from .config.secrets import check_keys
from .data.row_files import DataError
from .machine.kernel import quiet_library_bars

#: Fields the ``generate`` command takes with the configuration's defaults (how to load, what to generate).
GENERATE_FIELDS = ("backend", "trust_remote_code", "reload_merged", "max_new_tokens")
#: Fields ``generate`` and ``export`` take (typed as the field, or None); unset: what the run recorded (``run_record``).
RECORDED_FIELDS = ("template", "max_seq_length", "dtype", "load_in_4bit")


@dataclass(frozen=True)
class Command:
    """A subcommand: its one-line help, how it adds its arguments, and what it runs.

    ``run(values, given)`` gets the parsed values (a dict) and the flag names given explicitly.
    """

    help: str
    add_arguments: Callable[[Any], None]
    run: Callable[[dict, set], Any]


def _add_train_arguments(parser) -> None:
    from .config.sources import recipe_names

    parser.add_argument(
        "--config",
        type=str,
        default="default",
        help=f"recipe: a shipped one by name ({', '.join(recipe_names())}) or a YAML file of "
        f"field: value; relative paths in it resolve against the working directory",
    )
    add_field_arguments(parser)


def _run_train(values: dict, given: set) -> dict:
    from .config.sources import config_from_recipe
    from .data.formats import check_sources
    from .pipeline import run_training
    from .train.checkpoints import RunFinished
    from .train.summary import format_outcome

    cfg = config_from_recipe(values["config"], {k: values[k] for k in given if k != "config"})
    check_sources(cfg, flag_prefix="--")  # named as flags here; run_training checks again, answered from memory
    try:
        summary = run_training(cfg)
    except RunFinished as done:  # resume=True on a finished run: nothing trained, nothing written (exit 0)
        print(f"tinyllama-ft train: {done}")
        return {"global_step": done.global_step, "max_steps": done.max_steps, "resumed_from": done.checkpoint}
    if "adapter_dir" in summary:  # the main process (the others of a launch return their step counts)
        print(
            f"tinyllama-ft train: done: {format_outcome(summary)}, adapter in {summary['adapter_dir']}, "
            f"summary in {os.path.join(cfg.output_dir, 'run_summary.json')}"
        )
    return summary


def _add_recorded_arguments(parser) -> None:
    docs = field_docs()
    group = parser.add_argument_group("Recorded by the run (default: the value beside the adapter)")
    for name in RECORDED_FIELDS:
        group.add_argument(
            f"--{name}",
            type=Optional[FIELD_TYPES[name]],
            default=None,
            help=f"{docs[name]} Default: the run's value, recorded beside the adapter; a value that "
            f"contradicts it is refused (dtype, load_in_4bit: used, said once)",
        )


def _add_adapter_arguments(parser, base_help: str) -> None:
    parser.add_argument("--adapter", type=str, required=True, help="folder of a saved adapter (save_adapter, train)")
    parser.add_argument("--base_model", type=Optional[str], default=None, help=base_help)


def _adapter_base(values: dict) -> str:
    from .models.adapters import adapter_base

    return adapter_base(values["adapter"], values["base_model"], adapter_flag="--adapter", base_flag="--base_model")


def _add_generate_arguments(parser) -> None:
    _add_adapter_arguments(parser, "base model to load instead of the one recorded in the adapter (e.g. a local copy)")
    parser.add_argument(
        "--prompt",
        type=str,
        required=True,
        action="append",
        help='an instruction, repeatable (each answered, in order), or a JSON list of them (\'["first", "second"]\')',
    )
    parser.add_argument(
        "--input",
        type=str,
        default=None,
        action="append",
        help="Alpaca's input, the context after the instruction (a row's second field): one for every --prompt, or "
        "one each (repeated, or a JSON list as long as --prompt); Alpaca adapters only (a chat adapter takes the "
        "context inside --prompt)",
    )
    add_field_arguments(parser, GENERATE_FIELDS)
    _add_recorded_arguments(parser)


def repeated_values(values: list[str] | None) -> list[str] | str | None:
    """A repeatable flag's values (``--prompt A --prompt B``; jsonargparse's ``action="append"``), each a string or a
    JSON list of strings, as one list in order; one plain string stays a string (one ``--input`` for every prompt),
    None stays None (not given)."""
    if values is None:
        return None
    out: list[str] = []
    for value in values:
        try:
            listed = json.loads(value) if value.lstrip().startswith("[") else None
        except ValueError:
            listed = None
        is_list = isinstance(listed, list) and all(isinstance(item, str) for item in listed)
        out.extend(listed if is_list else [value])
        if len(values) == 1 and not is_list:
            return value
    return out


def _recorded_flags(values: dict, given: set, where: str) -> dict:
    """The ``RECORDED_FIELDS`` given on the command line, validated as configuration fields; None where not given."""
    explicit = {k: values[k] for k in RECORDED_FIELDS if k in given and values[k] is not None}
    FinetuneConfig.from_mapping(explicit, where=where)  # types and allowed values, as for train
    return {k: explicit.get(k) for k in RECORDED_FIELDS}


def _run_generate(values: dict, given: set) -> list[str]:
    from .data.formats import recorded_data_format
    from .infer.generation import stream
    from .machine.hardware import detect_hardware
    from .models.adapters import load_adapter
    from .models.run_record import read_record

    where = "tinyllama-ft generate"
    cfg = FinetuneConfig.from_mapping(
        {"prompts": repeated_values(values["prompt"]), **{k: values[k] for k in GENERATE_FIELDS}}, where=where
    )
    flags = _recorded_flags(values, given, where)
    _adapter_base(values)
    record = read_record(values["adapter"])
    fmt = recorded_data_format(record, template=flags["template"], where=where)  # refused here by flag
    inputs = _generate_inputs(repeated_values(values["input"]), len(cfg.prompts), fmt)
    model, tokenizer = load_adapter(
        values["adapter"],
        max_seq_length=flags["max_seq_length"],
        dtype=flags["dtype"],
        load_in_4bit=flags["load_in_4bit"],
        backend=cfg.backend,
        hardware=detect_hardware(),
        base_model=values["base_model"],
        trust_remote_code=cfg.trust_remote_code,
        merged=cfg.reload_merged,
    )
    return stream(model, tokenizer, cfg.prompts, inputs=inputs, max_new_tokens=cfg.max_new_tokens, data_format=fmt)


def _generate_inputs(given, n_prompts: int, fmt) -> list[str] | None:
    """``--input`` as one string per prompt (None when not given), checked (ConfigError) before the model loads."""
    if given is None:
        return None
    if not fmt.takes_input:
        raise ConfigError(
            f"--input fills the Alpaca prompt's input, and this adapter was trained on {fmt.trained_on}: put the "
            "context inside --prompt"
        )
    from .infer.generation import one_per_instruction

    try:
        return one_per_instruction(given, n_prompts, "--input")
    except ValueError as err:
        raise ConfigError(f"{err}: give one for all, or one each") from None


def _add_export_arguments(parser) -> None:
    from .config.finetune import EXPORT_FORMATS

    _add_adapter_arguments(parser, "base model to merge into instead of the one recorded in the adapter (a local copy)")
    parser.add_argument(
        "--format",
        type=str,
        required=True,
        action="append",
        help=f"an export format, repeatable: {', '.join(EXPORT_FORMATS)}",
    )
    parser.add_argument(
        "--output_dir",
        type=Optional[str],
        default=None,
        help="the run folder; exports go to <output_dir>/export/<format>/ (default: the adapter's "
        "parent folder, the run's output_dir)",
    )
    _add_recorded_arguments(parser)
    add_field_arguments(parser, ("trust_remote_code",))


def _run_export(values: dict, given: set) -> dict:
    from .export.adapter_export import describe_exports, export_adapter

    formats = FinetuneConfig.from_mapping(
        {"export_formats": values["format"]}, where="tinyllama-ft export --format"
    ).export_formats
    flags = _recorded_flags(values, given, "tinyllama-ft export")
    _adapter_base(values)
    output_dir = values["output_dir"] or os.path.dirname(os.path.abspath(values["adapter"]))
    results = export_adapter(
        adapter_dir=values["adapter"],
        formats=formats,
        base_model=values["base_model"],
        output_dir=output_dir,
        trust_remote_code=values["trust_remote_code"],
        **flags,
    )
    print(describe_exports(results))
    print(f"tinyllama-ft export: done: {len(results)} format(s) in {os.path.join(output_dir, 'export')}")
    return results


def _add_eval_arguments(parser) -> None:
    _add_adapter_arguments(parser, "base model to load instead of the one recorded in the adapter (a local copy)")
    parser.add_argument(
        "--tasks",
        type=Union[List[str], str],
        required=True,
        help="lm-eval tasks, groups or tags (mmlu, gsm8k, hellaswag, arc_easy: data from the Hub), the shipped "
        "offline ones (tinyllama_ft_mmlu, tinyllama_ft_arithmetic) or a .jsonl/.json/.csv of question/answer rows; "
        "comma-separated or a list",
    )
    parser.add_argument("--limit", type=Optional[float], default=None, help="questions per task (lm-eval's --limit)")
    parser.add_argument("--num_fewshot", type=Optional[int], default=None, help="examples in each prompt (lm-eval's)")
    parser.add_argument("--batch_size", type=Union[int, str], default=1, help="a number or 'auto' (lm-eval's)")
    parser.add_argument(
        "--output_dir",
        type=Optional[str],
        default=None,
        help="where benchmarks.json goes (default: the adapter's parent folder, the run's output_dir)",
    )
    _add_recorded_arguments(parser)
    add_field_arguments(parser, ("backend", "trust_remote_code"))


def _run_eval(values: dict, given: set):
    from .evaluate.benchmarks import RESULTS_FILE, evaluate_benchmarks
    from .machine.hardware import detect_hardware
    from .models.adapters import load_adapter
    from .models.run_record import read_record

    flags = _recorded_flags(values, given, "tinyllama-ft eval")
    _adapter_base(values)
    limit = values["limit"]
    model, tokenizer = load_adapter(
        values["adapter"],
        max_seq_length=flags["max_seq_length"],
        dtype=flags["dtype"],
        load_in_4bit=flags["load_in_4bit"],
        backend=values["backend"],
        hardware=detect_hardware(),
        base_model=values["base_model"],
        trust_remote_code=values["trust_remote_code"],
    )
    output_dir = values["output_dir"] or os.path.dirname(os.path.abspath(values["adapter"]))
    results = evaluate_benchmarks(
        model,
        tokenizer,
        values["tasks"],
        record=read_record(values["adapter"]),
        template=flags["template"],
        limit=int(limit) if limit is not None and limit >= 1 else limit,
        num_fewshot=values["num_fewshot"],
        batch_size=values["batch_size"],
        output_dir=output_dir,
    )
    print(results.table())
    print(
        f"tinyllama-ft eval: done in {results.settings['seconds']:.0f} s, in {os.path.join(output_dir, RESULTS_FILE)}"
    )
    return results


COMMANDS: dict[str, Command] = {
    "train": Command("fine-tune with a recipe and overrides (the notebook's run)", _add_train_arguments, _run_train),
    "generate": Command("answer prompts with a saved adapter, streaming", _add_generate_arguments, _run_generate),
    "export": Command(
        "export a saved adapter: merged 16-bit, GGUF (+ Ollama Modelfile), GGUF LoRA",
        _add_export_arguments,
        _run_export,
    ),
    "eval": Command(
        "benchmark a saved adapter against its base on lm-evaluation-harness tasks", _add_eval_arguments, _run_eval
    ),
}


@lru_cache(maxsize=None)
def command_parser(name: str):
    """The jsonargparse parser of one ``COMMANDS`` entry's flags."""
    from jsonargparse import ArgumentParser, set_parsing_settings

    set_parsing_settings(docstring_parse_attribute_docstrings=True)  # each field's help: its docstring
    parser = ArgumentParser(description=COMMANDS[name].help, exit_on_error=False, allow_abbrev=False)
    COMMANDS[name].add_arguments(parser)
    return parser


def build_parser():
    """The ``tinyllama-ft`` parser: one jsonargparse subcommand per ``COMMANDS`` entry."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(
        prog="tinyllama-ft",
        description="LoRA / QLoRA fine-tuning of small open LLMs "
        "(TinyLlama first) on instruction data, and generation with the adapter.",
        exit_on_error=False,
        allow_abbrev=False,
    )  # run() raises its errors as one ConfigError line
    subcommands = parser.add_subcommands(required=True, dest="command")
    for name, command in COMMANDS.items():
        subcommands.add_subcommand(name, command_parser(name), help=command.help)
    return parser


def _refusal(command: str, argv: Sequence[str]) -> ConfigError | None:
    """Our one line for a flag jsonargparse refused, where its own is unclear: an unknown flag (it names no near miss
    and shows a secret's value: ``--hf_token=...``) or a field's value (``Parser key "max_steps": Expected a <class
    'int'>``); None for the others (a missing flag: its message is kept). tests/test_cli.py::test_bad_flags_..."""
    known = [*command_parser(command).get_defaults().keys(), "help"]
    flags = {}
    for i, arg in enumerate(argv):
        name, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name:
            flags[name] = value if eq else argv[i + 1] if i + 1 < len(argv) else None
    try:
        check_keys(flags, known, f"tinyllama-ft {command}", help_command=f"tinyllama-ft {command}")
        parse_values({k: v for k, v in flags.items() if k in FIELD_NAMES})
    except FieldError as err:
        return err.as_flag()
    except ConfigError as err:
        return err
    return None


def run(argv: Sequence[str]) -> Any:
    """Parse ``argv`` (after the program name) and run the command, in this process.

    Returns:
        What the command's ``run`` returns (the run summary for ``train``, the answers for ``generate``,
        ``{format: export.ExportResult}`` for ``export``, ``benchmarks.Benchmarks`` for ``eval``).

    Raises:
        SystemExit: ``--help`` (status 0).
        ConfigError: a flag the command does not take, a value its field does not take (``FieldError``, named by its
            flag), a missing required flag (jsonargparse's words, on one line), a recipe or record contradiction.
        Whatever the command raises.
    """
    from argparse import ArgumentError

    argv = list(argv)
    command = argv[0] if argv and argv[0] in COMMANDS else None
    try:
        given = build_parser().parse_args(argv, defaults=False)[command].as_dict()  # the flags given, typed
    except ArgumentError as err:
        name = f"tinyllama-ft {command}" if command else "tinyllama-ft"
        refusal = _refusal(command, argv[1:]) if command else None
        text = " ".join(str(err).split())
        raise refusal or ConfigError(f"{name}: {text} ({name} --help lists the flags)") from None
    quiet_library_bars()  # a command prints its own lines: bars off outside a person's notebook
    try:
        return COMMANDS[command].run({**command_parser(command).get_defaults().as_dict(), **given}, set(given))
    except FieldError as err:  # a value out of its field's range: named by its flag where one gave it
        raise err.as_flag() if err.name in given else err from None


#: Environment variable that makes ``main`` show the traceback of an error (as ``--debug`` does).
DEBUG_ENV = "TINYLLAMA_FT_DEBUG"


def _one_line(err: BaseException, name: str) -> str:
    """The error's message on one line, its ``name:`` prefix not repeated, an unexpected kind's type named."""
    text = " ".join(str(err).split()) or type(err).__name__
    text = text[len(name) + 2 :] if text.startswith(f"{name}: ") else text
    return (
        text if isinstance(err, (ConfigError, OSError, ValueError, RuntimeError)) else f"{type(err).__name__}: {text}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tinyllama-ft`` console script (and ``python -m tinyllama_ft.cli``): ``run``, then an exit
    status.

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``. ``--debug`` anywhere (or
            ``TINYLLAMA_FT_DEBUG=1``) shows the traceback of an error.

    Returns:
        0 on success (also ``train --resume true`` of a finished run: nothing trained or written); 2 on a
        ``ConfigError`` (a misspelt flag, a bad value, a contradiction with the recipe or the run's record) or a
        ``row_files.DataError`` (a data file every loader refuses alike: unreadable, a bad row under ``--strict``, no
        usable row); 1 on any other failure; 130 on Ctrl-C. An error ends as one line ``tinyllama-ft <command>: error: <message>`` on
        stderr; a failure's says that ``--debug`` shows the traceback.

    Raises:
        SystemExit: ``--help`` (status 0), as jsonargparse raises it.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if "torch" not in sys.modules:  # read once, when torch's OpenMP starts: waiting threads sleep, not spin
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning on busy cores: 8x slower (troubleshooting.md)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    name = f"tinyllama-ft {argv[0]}" if argv and argv[0] in COMMANDS else "tinyllama-ft"
    try:
        run(argv)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the console script turns every error into one line and a status
        if debug:
            import traceback

            traceback.print_exc()
        usage = isinstance(err, (ConfigError, DataError))  # the person's input: a flag, a value, a data file
        hint = "" if usage or debug else " (--debug shows the traceback)"
        print(f"{name}: error: {_one_line(err, name)}{hint}", file=sys.stderr)
        return 2 if usage else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
