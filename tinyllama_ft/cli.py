"""``tinyllama-ft``: the command line over the same helpers as the notebook (jsonargparse).

    tinyllama-ft train --config article [--NAME VALUE ...]    # a shipped recipe by name, or any YAML path
    tinyllama-ft generate --adapter DIR --prompt TEXT [--max_new_tokens N ...]
    tinyllama-ft export --adapter DIR --format gguf_q8_0 [--format merged_16bit ...] [--output_dir DIR]
    tinyllama-ft train --help                                  # every field, with its meaning and default

Flags are ``FinetuneConfig``'s flat field names, as the recipes' YAML keys and the notebook's parameters.
A flag overrides the recipe; the recipe overrides the package's defaults. An unknown flag or key stops
with the closest field name ("did you mean lora_r?"); a wrong type names the field.

Subcommands live in ``COMMANDS`` (name -> ``Command``): a new one (e.g. ``export``) is one more entry.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Union

from .coercion import ConfigError, unknown_keys_error
from .config import DEFAULTS, FIELD_NAMES, FinetuneConfig, field_docs

#: Fields the ``generate`` command takes (how to load the adapter, what to generate).
GENERATE_FIELDS = ("max_seq_length", "dtype", "load_in_4bit", "backend", "trust_remote_code", "reload_merged",
                   "max_new_tokens", "template")


@dataclass(frozen=True)
class Command:
    """A subcommand: its one-line help, how it adds its arguments, and what it runs.

    ``run(values, given)`` gets the parsed values (a dict) and the flag names given explicitly.
    """

    help: str
    add_arguments: Callable[[Any], None]
    run: Callable[[dict, set], Any]


def _cli_type(f: dataclasses.Field):
    base = {"str": str, "int": int, "float": float, "bool": bool}
    if f.type.startswith("tuple[str"):
        return Union[List[str], str]
    inner = base[f.type.split("|")[0].strip()]
    return Optional[inner] if f.type.endswith("None") else inner


def add_field_arguments(parser, names: Sequence[str] = FIELD_NAMES) -> None:
    """One ``--NAME`` flag per configuration field, typed from its annotation, its docstring as help."""
    docs = field_docs()
    fields = {f.name: f for f in dataclasses.fields(FinetuneConfig)}
    for name in names:
        default = getattr(DEFAULTS, name)
        parser.add_argument(f"--{name}", type=_cli_type(fields[name]),
                            default=list(default) if isinstance(default, tuple) else default, help=docs[name])


def _add_train_arguments(parser) -> None:
    from .params import recipe_names

    parser.add_argument("--config", type=str, default="default",
                        help=f"recipe: a shipped one by name ({', '.join(recipe_names())}) or a YAML file of "
                             f"field: value; relative paths in it resolve against the working directory")
    add_field_arguments(parser)


def _run_train(values: dict, given: set) -> dict:
    from .params import config_from_recipe
    from .pipeline import run_training

    cfg = config_from_recipe(values["config"], {k: values[k] for k in given if k != "config"})
    summary = run_training(cfg)
    print({k: summary.get(k) for k in ("eval_loss_before", "eval_loss_after", "train_tokens", "tokens_per_s",
                                       "adapter_dir")})
    return summary


def _add_generate_arguments(parser) -> None:
    parser.add_argument("--adapter", type=str, required=True, help="folder of a saved adapter (save_adapter, train)")
    parser.add_argument("--prompt", type=Union[List[str], str], required=True,
                        help="an instruction, or a list of them ('[\"first\", \"second\"]')")
    parser.add_argument("--base_model", type=Optional[str], default=None,
                        help="base model to load instead of the one recorded in the adapter (e.g. a local copy)")
    add_field_arguments(parser, GENERATE_FIELDS)


def _run_generate(values: dict, given: set) -> list[str]:
    from .adapters import adapter_base_model, load_adapter
    from .generation import stream
    from .hardware import detect_hardware
    from .plan import plan_run

    base = values["base_model"] or adapter_base_model(values["adapter"])
    cfg = FinetuneConfig.from_mapping({"model_name": base, "prompts": values["prompt"],
                                       **{k: values[k] for k in GENERATE_FIELDS}}, where="tinyllama-ft generate")
    hardware = detect_hardware()
    plan = plan_run(cfg, hardware)
    model, tokenizer = load_adapter(values["adapter"], max_seq_length=cfg.max_seq_length, dtype=plan.dtype,
                                    load_in_4bit=plan.load_in_4bit, backend=plan.backend, hardware=hardware,
                                    base_model=values["base_model"], trust_remote_code=cfg.trust_remote_code,
                                    merged=cfg.reload_merged)
    return stream(model, tokenizer, cfg.prompts, max_new_tokens=cfg.max_new_tokens, template=cfg.template)


#: Fields the ``export`` command takes (how the base is loaded for the merge), with their flag types; unset: the run's.
EXPORT_FIELDS = {"template": str, "max_seq_length": int, "dtype": str, "load_in_4bit": bool}


def _add_export_arguments(parser) -> None:
    from .config import EXPORT_FORMATS

    parser.add_argument("--adapter", type=str, required=True, help="folder of a saved adapter (save_adapter, train)")
    parser.add_argument("--format", type=str, required=True, action="append",
                        help=f"an export format, repeatable: {', '.join(EXPORT_FORMATS)}")
    parser.add_argument("--base_model", type=Optional[str], default=None,
                        help="base model to merge into instead of the one recorded in the adapter (a local copy)")
    parser.add_argument("--output_dir", type=Optional[str], default=None,
                        help="the run folder; exports go to <output_dir>/export/<format>/ (default: the adapter's "
                             "parent folder, the run's output_dir)")
    docs = field_docs()
    for name, kind in EXPORT_FIELDS.items():
        parser.add_argument(f"--{name}", type=Optional[kind], default=None,
                            help=f"{docs[name]} Default: the run's value in run_config.json beside the adapter")
    parser.add_argument("--trust_remote_code", type=bool, default=DEFAULTS.trust_remote_code,
                        help=docs["trust_remote_code"])


def _run_export(values: dict, given: set) -> dict:
    import os

    from .export import describe_exports, export_adapter

    formats = FinetuneConfig.from_mapping({"export_formats": values["format"]},
                                          where="tinyllama-ft export --format").export_formats
    results = export_adapter(adapter_dir=values["adapter"], formats=formats, base_model=values["base_model"],
                             output_dir=values["output_dir"] or os.path.dirname(os.path.abspath(values["adapter"])),
                             trust_remote_code=values["trust_remote_code"], **{k: values[k] for k in EXPORT_FIELDS})
    print(describe_exports(results))
    return results


COMMANDS: dict[str, Command] = {
    "train": Command("fine-tune with a recipe and overrides (the notebook's run)", _add_train_arguments, _run_train),
    "generate": Command("answer prompts with a saved adapter, streaming", _add_generate_arguments, _run_generate),
    "export": Command("export a saved adapter: merged 16-bit, GGUF (+ Ollama Modelfile), GGUF LoRA",
                      _add_export_arguments, _run_export),
}


def build_parser():
    """The ``tinyllama-ft`` parser: one jsonargparse subcommand per ``COMMANDS`` entry."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(prog="tinyllama-ft", description="LoRA / QLoRA fine-tuning of small open LLMs "
                            "(TinyLlama first) on instruction data, and generation with the adapter.",
                            exit_on_error=True)
    subcommands = parser.add_subcommands(required=True, dest="command")
    for name, command in COMMANDS.items():
        sub = ArgumentParser(description=command.help)
        command.add_arguments(sub)
        subcommands.add_subcommand(name, sub, help=command.help)
    return parser


def _given_flags(argv: Sequence[str]) -> list[str]:
    return [a[2:].split("=", 1)[0] for a in argv if a.startswith("--") and len(a) > 2]


def check_flags(command: str, argv: Sequence[str]) -> set[str]:
    """The flag names in ``argv`` (after the subcommand), each checked against the command's arguments.

    Raises:
        ConfigError: a flag the command does not take; the message names it and the closest one.
    """
    known = {"help", "config"} | set(FIELD_NAMES) if command == "train" else \
        {"help", "adapter", "format", "base_model", "output_dir", "trust_remote_code"} | set(EXPORT_FIELDS) \
        if command == "export" else \
        {"help", "adapter", "prompt", "base_model"} | set(GENERATE_FIELDS)
    given = _given_flags(argv)
    unknown = [g for g in given if g not in known]
    if unknown:
        raise unknown_keys_error(unknown, sorted(known), f"tinyllama-ft {command}")
    return set(given) - {"help"}


def main(argv: Sequence[str] | None = None) -> Any:
    """Entry point of the ``tinyllama-ft`` console script.

    Returns:
        What the command's ``run`` returns (the run summary for ``train``, the answers for ``generate``,
        ``{format: export.ExportResult}`` for ``export``).

    Raises:
        SystemExit: bad arguments (jsonargparse's usage message), or a configuration error (its message,
            exit status 2).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        given = check_flags(argv[0], argv[1:]) if argv and argv[0] in COMMANDS else set()
        parsed = build_parser().parse_args(argv)
        command = parsed.command
        values = parsed[command].as_dict()
        return COMMANDS[command].run(values, given)
    except (ConfigError, FileNotFoundError) as e:
        print(f"tinyllama-ft: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
