"""``tinyllama-ft``: the command line over the same helpers as the notebook, built by jsonargparse from ``COMMANDS``.

    tinyllama-ft train --config article [--NAME VALUE ...]    # a shipped recipe by name, or any YAML path
    tinyllama-ft generate --adapter DIR --prompt TEXT [--input CONTEXT] [--max_new_tokens N ...]
    tinyllama-ft export --adapter DIR --format gguf_q8_0 [--format merged_16bit ...] [--output_dir DIR]  (and eval)

Each command is a function whose signature and docstring are its flags and help (as litgpt's ``__main__``), plus the
``FinetuneConfig`` fields its entry names (flag over recipe over default); exit status as docs/command-line.md says.
One jsonargparse parse; a refusal is one line naming the flag (tests/test_cli.py).
"""

import inspect
import json
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, List, Optional, Sequence, Union

from .config.coercion import ConfigError, FieldError, without_none
from .config.finetune import FIELD_NAMES, FIELD_TYPES, FinetuneConfig, add_field_arguments, field_docs, parse_values
from .config.secrets import check_keys
from .data.row_files import DataError
from .machine.kernel import quiet_library_bars

#: Fields ``generate``, ``export`` and ``eval`` take as None (not given): then what the run recorded (``run_record``).
RECORDED_FIELDS = ("template", "max_seq_length", "dtype", "load_in_4bit")


def train(config: str = "default", **fields: Any) -> dict:
    """Fine-tune with a recipe and overrides (the notebook's run).

    Args:
        config: recipe: a shipped one by name (a tinyllama_ft/recipes file without .yaml: article, default,
            offline_cpu, ...) or a YAML file of field: value; relative paths in it resolve against the working
            directory.
        fields: the ``FinetuneConfig`` fields given as flags, over the recipe's values.

    Returns:
        The run summary (``pipeline.run_training``), or the steps of a finished run that ``--resume true`` found.
    """
    from .config.sources import config_from_recipe
    from .data.formats import check_sources
    from .pipeline import run_training
    from .train.checkpoints import RunFinished
    from .train.summary import format_outcome

    cfg = config_from_recipe(config, fields)
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


def _checked(adapter: str, base_model: str | None, fields: dict, where: str, **values) -> tuple[FinetuneConfig, dict]:
    """The fields given (and ``values``) as a ``FinetuneConfig`` (its defaults for the rest), the recorded fields given
    (None: the record's), and the adapter's base checked (``adapters.adapter_base``), before any model loads."""
    from .models.adapters import adapter_base

    recorded = {k: fields.get(k) for k in RECORDED_FIELDS}
    cfg = FinetuneConfig.from_mapping({**{k: v for k, v in fields.items() if v is not None}, **values}, where=where)
    adapter_base(adapter, base_model, adapter_flag="--adapter", base_flag="--base_model")
    return cfg, {k: None if v is None else getattr(cfg, k) for k, v in recorded.items()}


def _loaded(adapter: str, base_model: str | None, cfg: FinetuneConfig, recorded: dict, **options):
    """``adapters.load_adapter`` of ``adapter`` (on the hardware it detects) with the command's backend, base and
    recorded fields (``_checked``'s), plus ``options``."""
    from .models.adapters import load_adapter

    return load_adapter(
        adapter,
        **recorded,
        backend=cfg.backend,
        base_model=base_model,
        trust_remote_code=cfg.trust_remote_code,
        **options,
    )


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


def generate(
    adapter: str, prompt: List[str], input: Optional[List[str]] = None, base_model: Optional[str] = None, **fields: Any
) -> list[str]:
    """Answer prompts with a saved adapter, streaming.

    Args:
        adapter: folder of a saved adapter (save_adapter, train).
        prompt: an instruction, repeatable (each answered, in order), or a JSON list of them ('["first", "second"]').
        input: Alpaca's input, the context after the instruction (a row's second field): one for every --prompt, or
            one each (repeated, or a JSON list as long as --prompt); Alpaca adapters only (a chat adapter takes the
            context inside --prompt).
        base_model: base model to load instead of the one recorded in the adapter (e.g. a local copy).
        fields: the ``FinetuneConfig`` fields given as flags (``COMMANDS``).

    Returns:
        The answers, one per prompt, in order (``generation.stream``).
    """
    from .data.formats import recorded_data_format
    from .infer.generation import one_per_instruction, stream
    from .models.run_record import read_record

    where = "tinyllama-ft generate"
    cfg, recorded = _checked(adapter, base_model, fields, where, prompts=repeated_values(prompt))
    fmt = recorded_data_format(read_record(adapter), template=recorded.pop("template"), where=where)
    inputs = repeated_values(input)
    if inputs is not None and not fmt.takes_input:
        raise ConfigError(
            f"--input fills the Alpaca prompt's input, and this adapter was trained on {fmt.trained_on}: put the "
            "context inside --prompt"
        )
    try:
        inputs = None if inputs is None else one_per_instruction(inputs, len(cfg.prompts), "--input")
    except ValueError as err:
        raise ConfigError(f"{err}: give one for all, or one each") from None
    model, tokenizer = _loaded(adapter, base_model, cfg, recorded, merged=cfg.reload_merged)
    return stream(model, tokenizer, cfg.prompts, inputs=inputs, max_new_tokens=cfg.max_new_tokens, data_format=fmt)


def export(
    adapter: str, format: List[str], base_model: Optional[str] = None, output_dir: Optional[str] = None, **fields: Any
) -> dict:
    """Export a saved adapter: merged 16-bit, GGUF (+ Ollama Modelfile), GGUF LoRA.

    Args:
        adapter: folder of a saved adapter (save_adapter, train).
        format: an export format (FinetuneConfig.export_formats' values), repeatable.
        base_model: base model to merge into instead of the one recorded in the adapter (a local copy).
        output_dir: the run folder; exports go to <output_dir>/export/<format>/ (default: the adapter's parent
            folder, the run's output_dir).
        fields: the ``FinetuneConfig`` fields given as flags (``COMMANDS``).

    Returns:
        ``{format: export.ExportResult}``.
    """
    from .export.adapter_export import describe_exports, export_adapter

    try:
        cfg, recorded = _checked(adapter, base_model, fields, "tinyllama-ft export", export_formats=format)
    except FieldError as err:  # export_formats is given here as --format
        raise FieldError("format", err.value, err.why, flag=True) if err.name == "export_formats" else err from None
    output_dir = output_dir or os.path.dirname(os.path.abspath(adapter))
    results = export_adapter(
        adapter_dir=adapter,
        formats=cfg.export_formats,
        base_model=base_model,
        output_dir=output_dir,
        trust_remote_code=cfg.trust_remote_code,
        **recorded,
    )
    print(describe_exports(results))
    print(f"tinyllama-ft export: done: {len(results)} format(s) in {os.path.join(output_dir, 'export')}")
    return results


def evaluate(
    adapter: str,
    tasks: Union[List[str], str],
    base_model: Optional[str] = None,
    limit: Optional[float] = None,
    num_fewshot: Optional[int] = None,
    batch_size: Union[int, str] = 1,
    output_dir: Optional[str] = None,
    **fields: Any,
):
    """Benchmark a saved adapter against its base on lm-evaluation-harness tasks.

    Args:
        adapter: folder of a saved adapter (save_adapter, train).
        tasks: lm-eval tasks, groups or tags (mmlu, gsm8k, hellaswag, arc_easy: data from the Hub), the shipped
            offline ones (tinyllama_ft_mmlu, tinyllama_ft_arithmetic) or a .jsonl/.json/.csv of question/answer
            rows; comma-separated or a list.
        base_model: base model to load instead of the one recorded in the adapter (a local copy).
        limit: questions per task (lm-eval's --limit).
        num_fewshot: examples in each prompt (lm-eval's).
        batch_size: a number or 'auto' (lm-eval's).
        output_dir: where benchmarks.json goes (default: the adapter's parent folder, the run's output_dir).
        fields: the ``FinetuneConfig`` fields given as flags (``COMMANDS``).

    Returns:
        ``benchmarks.Benchmarks``.
    """
    from .data.formats import recorded_data_format
    from .evaluate.benchmarks import RESULTS_FILE, evaluate_benchmarks
    from .models.run_record import read_record

    cfg, recorded = _checked(adapter, base_model, fields, "tinyllama-ft eval")
    fmt = recorded_data_format(read_record(adapter), template=recorded.pop("template"), where="tinyllama-ft eval")
    model, tokenizer = _loaded(adapter, base_model, cfg, recorded)
    output_dir = output_dir or os.path.dirname(os.path.abspath(adapter))
    results = evaluate_benchmarks(
        model,
        tokenizer,
        tasks,
        data_format=fmt,
        limit=int(limit) if limit is not None and limit >= 1 else limit,
        num_fewshot=num_fewshot,
        batch_size=batch_size,
        output_dir=output_dir,
    )
    print(results.table())
    print(
        f"tinyllama-ft eval: done in {results.settings['seconds']:.0f} s, in {os.path.join(output_dir, RESULTS_FILE)}"
    )
    return results


@dataclass(frozen=True)
class Command:
    """A subcommand: its function (flags and help from its signature and docstring; a ``List[str]`` parameter is a
    repeatable flag, each ``--NAME`` adding an item), the ``FinetuneConfig`` fields it takes as flags besides (passed as
    ``**fields``, only those given), and whether it takes ``RECORDED_FIELDS`` (None by default: the run's record)."""

    function: Callable[..., Any]
    fields: Sequence[str] = ()
    recorded: bool = True


COMMANDS: dict[str, Command] = {
    "train": Command(train, FIELD_NAMES, recorded=False),
    "generate": Command(generate, ("backend", "trust_remote_code", "reload_merged", "max_new_tokens")),
    "export": Command(export, ("trust_remote_code",)),
    "eval": Command(evaluate, ("backend", "trust_remote_code")),
}


@lru_cache(maxsize=None)
def command_parser(name: str):
    """The jsonargparse parser of one ``COMMANDS`` entry: its function's parameters, then its fields."""
    import docstring_parser
    from jsonargparse import ArgumentParser, set_parsing_settings

    set_parsing_settings(docstring_parse_attribute_docstrings=True)  # each field's help: its docstring
    command = COMMANDS[name]
    doc = docstring_parser.parse(inspect.getdoc(command.function))
    parser = ArgumentParser(description=doc.short_description, exit_on_error=False, allow_abbrev=False)
    params = inspect.signature(command.function).parameters
    repeatable = {name for name, p in params.items() if without_none(p.annotation)[0] == List[str]}
    parser.add_function_arguments(command.function, as_group=False, skip=repeatable)
    for param in (p for p in doc.params if p.arg_name in repeatable):  # jsonargparse's lists take --NAME+ instead
        required = params[param.arg_name].default is inspect.Parameter.empty
        parser.add_argument(f"--{param.arg_name}", type=str, action="append", required=required, help=param.description)
    if command.recorded:
        group = parser.add_argument_group("Recorded by the run (default: the value beside the adapter)")
        for field in RECORDED_FIELDS:
            group.add_argument(
                f"--{field}",
                type=Optional[FIELD_TYPES[field]],
                help=f"{field_docs()[field]} Default: the run's value, recorded beside the adapter; a value that "
                "contradicts it is refused (dtype, load_in_4bit: used, said once)",
            )
    add_field_arguments(parser, command.fields)
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
    from . import __version__

    parser.add_argument("--version", action="version", version=f"tinyllama-ft {__version__}")
    subcommands = parser.add_subcommands(required=True, dest="command")
    for name in COMMANDS:
        subcommands.add_subcommand(name, command_parser(name), help=command_parser(name).description)
    return parser


def _refusal(command: str, argv: Sequence[str]) -> ConfigError | None:
    """Our one line for a flag jsonargparse refused, where its own is unclear: an unknown flag (it names no near miss
    and shows a secret's value: ``--hf_token=...``) or a field's value (``Parser key "max_steps": Expected a <class
    'int'>``), a required flag missing (it names its key, ``generate.prompt``) or a flag last without its value (it
    reads ``None is not allowed``); None for the others (its message is kept). tests/test_cli.py::test_bad_flags_..."""
    known = [*command_parser(command).get_defaults().keys(), "help"]
    flags = {}
    for i, arg in enumerate(argv):
        name, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name:
            flags[name] = value if eq else argv[i + 1] if i + 1 < len(argv) else None
    params = inspect.signature(COMMANDS[command].function).parameters.values()
    required = [f"--{p.name}" for p in params if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    missing = [flag for flag in required if flag[2:] not in flags]
    without_value = [f"--{name}" for name, value in flags.items() if value is None and name != "help"]
    try:
        check_keys(flags, known, f"tinyllama-ft {command}", help_command=f"tinyllama-ft {command}")
        if missing or without_value:
            what = f"{', '.join(missing)} required" if missing else f"{without_value[0]} needs a value"
            raise ConfigError(f"tinyllama-ft {command}: {what} (tinyllama-ft {command} --help lists the flags)")
        parse_values({k: v for k, v in flags.items() if k in FIELD_NAMES})
    except FieldError as err:
        return err.as_flag()
    except ConfigError as err:
        return err
    return None


def run(argv: Sequence[str]) -> Any:
    """Parse ``argv`` (after the program name) and run the command, in this process.

    Returns:
        What the command's function returns (the run summary for ``train``, the answers for ``generate``,
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
        return COMMANDS[command].function(**given)  # the function's own defaults; the fields given only
    except FieldError as err:  # a value out of its field's range: named by its flag where one gave it
        raise err.as_flag() if err.name in given else err from None


#: Environment variable that makes ``main`` show the traceback of an error (as ``--debug`` does).
DEBUG_ENV = "TINYLLAMA_FT_DEBUG"


def _one_line(err: BaseException, name: str) -> str:
    """The error's message on one line, its ``name:`` prefix not repeated, an unexpected kind's type named."""
    text = (" ".join(str(err).split()) or type(err).__name__).removeprefix(f"{name}: ")
    return text if isinstance(err, (OSError, ValueError, RuntimeError)) else f"{type(err).__name__}: {text}"


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
    except KeyboardInterrupt:  # train: the checkpoints written so far stay (and the run lock is released)
        then = ": its checkpoints are kept; the same command with --resume true continues from the last one"
        print(f"{name}: interrupted{then if name == 'tinyllama-ft train' else ''}", file=sys.stderr)
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
