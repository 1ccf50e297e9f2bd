"""What a run recorded beside its adapter (``tinyllama_ft.json``: the prompt format and how the base was loaded;
older adapters: the run's ``run_config.json``), and how later commands take it: ``resolve_settings`` refuses a
caller's value that contradicts the record where it would change the answers, and uses it with a notice where it is
only another precision. ``formats.recorded_data_format`` turns a record into the format the adapter is prompted in.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from ..config.coercion import ConfigError
from ..machine.paths import expand_path, write_json_atomically

#: The record's file name inside the adapter folder.
RECORD_FILE = "tinyllama_ft.json"
#: The run's identity, written in ``output_dir`` when a run starts (``train.output_dir.prepare_output_dir``).
RUN_CONFIG = "run_config.json"
#: Recorded settings that change what the model answers: a different explicit value is refused.
MUST_MATCH = ("dataset_format", "template", "chat_template", "max_seq_length")
#: Recorded settings that only change the precision the base runs in: a different explicit value is used, said once.
MAY_DIFFER = ("dtype", "load_in_4bit")
#: The record's key for what the run added after each question (a GRPO run's layout line); absent: nothing.
PROMPT_SUFFIX = "prompt_suffix"
#: The attribute ``adapters.load_adapter`` sets on the model it returns: its record, whose format
#: (``formats.recorded_data_format``) the answering helpers (``generation``, ``chat_generation``) prompt with.
RECORD_ATTRIBUTE = "tinyllama_ft_record"


def read_run_config(output_dir: str) -> dict[str, Any] | None:
    """The identity recorded in ``<output_dir>/run_config.json``, or None when there is none (or it is unreadable)."""
    try:
        return json.loads(Path(expand_path(output_dir), RUN_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def adapter_record(cfg, plan=None, *, data_format=None) -> dict[str, Any]:
    """The record ``save_adapter`` writes beside an adapter.

    Args:
        cfg: the run's ``FinetuneConfig``.
        plan: its ``plan.RunPlan`` (the dtype and 4-bit choice the base was loaded with); None: the configuration's.
        data_format: the run's prepared format (``formats.data_format(cfg)``): its ``name`` is the recorded
            ``dataset_format`` (a preference run's: "alpaca" for text pairs, "messages" for turns), its ``family``
            (a chat run's ``families.FamilySetup``) the end-of-turn token and stop ids. None: ``cfg.dataset_format``.

    Returns:
        ``{"model_name", "dataset", "dataset_format", "template", "chat_template", "max_seq_length", "dtype",
        "load_in_4bit", "method"}``, plus ``"extra_datasets"`` when given, ``"end_of_turn"`` and ``"stop_token_ids"``
        for a chat run, ``"adapter_name_or_path"`` for a run that continued an adapter and ``"prompt_suffix"`` for a
        format that adds text after each question (``data_format.prompt_suffix``: GRPO's layout line). JSON-ready; the
        adapter's model card is written from it (``model_card.card_facts``).
    """
    family = getattr(data_format, "family", None)
    record = {
        "model_name": cfg.model_name,
        "dataset": cfg.dataset,
        "dataset_format": data_format.name if data_format is not None else cfg.dataset_format,
        "template": cfg.template,
        "chat_template": cfg.chat_template,
        "max_seq_length": cfg.max_seq_length,
        "dtype": plan.dtype if plan is not None else cfg.dtype,
        "load_in_4bit": plan.load_in_4bit if plan is not None else cfg.load_in_4bit,
        "method": cfg.method,
    }
    if cfg.extra_datasets:
        record["extra_datasets"] = list(cfg.extra_datasets)
    if cfg.adapter_name_or_path:
        record["adapter_name_or_path"] = cfg.adapter_name_or_path
    if family is not None:
        record.update(end_of_turn=family.end_of_turn, stop_token_ids=list(family.stop_token_ids))
    if getattr(data_format, "prompt_suffix", ""):
        record[PROMPT_SUFFIX] = data_format.prompt_suffix
    return record


def with_suffix(prompt, suffix: str):
    """``prompt`` with ``suffix`` added as a GRPO run adds it (``grpo_prompts``) to its questions: after a text prompt, after the content
    of a chat prompt's last turn (a new list; the caller's messages are left as they were). ``""`` changes nothing.

    Args:
        prompt: a string, or a list of ``{"role", "content"}`` messages (the last the user's question).
        suffix: the text added (``LAYOUT_SUFFIX`` in a GRPO run; a record's ``prompt_suffix``).
    """
    if not suffix:
        return prompt
    if isinstance(prompt, str):
        return prompt + suffix
    messages = [dict(m) for m in prompt]
    messages[-1]["content"] = messages[-1]["content"] + suffix
    return messages


def write_record(folder: str, record: Mapping[str, Any]) -> str:
    """Write ``record`` to ``<folder>/tinyllama_ft.json`` (``paths.write_json_atomically``); returns the path."""
    return write_json_atomically(os.path.join(folder, RECORD_FILE), dict(record), sort_keys=True)


def read_record(adapter_dir: str) -> dict[str, Any]:
    """What the run that saved ``adapter_dir`` recorded: its ``tinyllama_ft.json``; else the recorded fields of the
    run's ``run_config.json`` in the folder or its parent; else ``{}`` (a PEFT folder from elsewhere, said once).

    Raises:
        ConfigError: ``tinyllama_ft.json`` is not a JSON object, or a recorded value is not one the configuration
            allows (``dtype: "float99"``): names the file and the field.
    """
    path = os.path.join(adapter_dir, RECORD_FILE)
    if os.path.isfile(path):
        try:
            record = json.loads(Path(path).read_text(encoding="utf-8"))
        except ValueError as err:
            raise ConfigError(
                f"{path}: not readable JSON ({err}); delete it to load the adapter with the package's defaults"
            ) from None
        if not isinstance(record, dict):
            raise ConfigError(f"{path}: expected a JSON object, got {type(record).__name__}")
        return _checked(record, path)
    for folder in (adapter_dir, os.path.dirname(os.path.abspath(adapter_dir))):
        found = read_run_config(folder)
        if found:
            record = {k: found[k] for k in ("model_name", *MUST_MATCH, *MAY_DIFFER) if k in found}
            return _checked(record, os.path.join(folder, RUN_CONFIG))
    if os.path.abspath(adapter_dir) not in _SAID_UNRECORDED:
        _SAID_UNRECORDED.add(os.path.abspath(adapter_dir))
        print(
            f"{adapter_dir}: no {RECORD_FILE} or {RUN_CONFIG} records how it was trained: prompting it as Alpaca "
            f"(template='alpaca'), with the base's own positions; pass template / max_seq_length if it was trained "
            f"otherwise",
            file=sys.stderr,  # a notice: stdout stays the answers
        )
    return {}


#: Adapter folders already said to have no record (said once per process).
_SAID_UNRECORDED: set[str] = set()


def _checked(record: dict[str, Any], path: str) -> dict[str, Any]:
    """``record``, once its values pass ``FinetuneConfig``'s checks; else ConfigError naming the file."""
    from ..config.finetune import FinetuneConfig

    values = {k: record[k] for k in (*MUST_MATCH, *MAY_DIFFER) if k in record}
    if not isinstance(record.get(PROMPT_SUFFIX, ""), str):
        raise ConfigError(f"{path}: {PROMPT_SUFFIX} is not a string (the record of the run that trained this adapter)")
    try:
        FinetuneConfig.from_mapping(values, where=path)
    except ConfigError as err:
        raise ConfigError(
            f"{path}: {err} (the record of the run that trained this adapter: fix or delete it)"
        ) from None
    return record


def resolve_settings(
    record: Mapping[str, Any], given: Mapping[str, Any], *, defaults: Mapping[str, Any], where: str = "load_adapter"
) -> dict[str, Any]:
    """The settings to load and prompt an adapter with: the caller's, the record's, then the defaults.

    Args:
        record: ``read_record``'s result. given: name -> value the caller passed (None: not given).
        defaults: name -> value used when neither gives one (``max_seq_length=None``: the base's positions).
        where: the caller, for messages (``"tinyllama-ft generate"``).

    Returns:
        ``{name: value}`` for every name in ``defaults``, and every name of ``given`` that is given or recorded.

    Raises:
        ConfigError: a given value of ``MUST_MATCH`` differs from the recorded one: names the field, both values and
            how to fix it.
    """
    out = dict(defaults)
    out.update({k: v for k, v in record.items() if k in out or k in given})
    for name, value in given.items():
        if value is None:
            continue
        recorded = record.get(name)
        if recorded is not None and recorded != value:
            if name in MUST_MATCH:
                raise ConfigError(
                    f"{where}: {name}={value!r}, but the adapter was trained with {name}={recorded!r} "
                    f"(recorded in its {RECORD_FILE} / run_config.json): leave {name} out to use the "
                    f"recorded value"
                )
            if name in MAY_DIFFER:
                print(f"{where}: {name}={value!r} (the run trained with {recorded!r})")
        out[name] = value
    return out
