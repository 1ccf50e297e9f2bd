"""``ConfigError``, the one check of parameter names, and the source spellings jsonargparse reads otherwise.

jsonargparse types and validates every configuration value (``finetune.parse_field``); papermill, Colab forms and YAML
hand over six spellings it refuses or misreads, rewritten here first (docs/internals.md lists them): shown by
tests/test_config.py::test_string_coercions_from_papermill_colab_yaml_and_the_command_line.
A mistyped name gets the closest field name as a hint (``check_keys``: recipes, notebook parameters and flags).
"""

from __future__ import annotations

import difflib
import typing
from typing import Any, Iterable

#: Strings that mean None for an optional field, besides jsonargparse's "null" and "~".
NONE_STRINGS = ("None", "none", "")


class ConfigError(ValueError):
    """A configuration value or key is not allowed; the message names the field (and, for a misspelt key,
    the field meant)."""


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """``" (did you mean lora_r?)"`` for the closest of ``known`` to ``key``, or ``""`` when none is close."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def check_keys(keys: Iterable[str], known: Iterable[str], where: str, help_command: str = "tinyllama-ft train") -> None:
    """The one check of parameter names (a recipe's keys, the notebook's parameters, a command's flags).

    Raises:
        ConfigError: a key looks like a secret (``secrets.refuse_secret_names``; its value is never shown), or keys
            are not among ``known`` (each named with its near miss; ``help_command --help`` lists them all).
    """
    from .secrets import refuse_secret_names

    refuse_secret_names(dict.fromkeys(keys), where)
    known = list(known)
    names = "; ".join(f"{k!r}{did_you_mean(k, known)}" for k in keys if k not in known)
    what = "not a FinetuneConfig field" if help_command == "tinyllama-ft train" else "not a flag of this command"
    if names:
        raise ConfigError(f"{where}: unknown parameter {names}: {what} ({help_command} --help lists them all)")


def without_none(annotation: Any) -> tuple[Any, bool]:
    """``(the annotation without None, whether None was in it)``: ``int | None`` -> ``(int, True)``."""
    args = typing.get_args(annotation)
    if type(None) not in args:
        return annotation, False
    rest = tuple(a for a in args if a is not type(None))
    return (rest[0] if len(rest) == 1 else typing.Union[rest]), True


def source_spelling(value: Any, annotation: Any, *, comma_separated: bool = False) -> Any:
    """``value`` with the spellings jsonargparse does not read as meant rewritten; jsonargparse checks the result.

    Args:
        value: what a recipe, a flag or the notebook gave.
        annotation: the field's resolved type (``finetune.FIELD_TYPES``).
        comma_separated: for a tuple field, a string is a comma-separated list (``"q_proj,v_proj"``); otherwise a
            string is a one-element list (one prompt).

    Returns:
        For an optional field, None for ``"None"``, ``"none"`` or ``""`` (papermill's ``-p dtype None``, Colab's
        forms); for a tuple field, a list, its string items read as here (a string split as above); for an int field, an integral
        float as an int (``3.0``); for a float field, a string ``float()`` reads (``"inf"``, which the field's
        finiteness check then names); for a str field, a number as its text (papermill's ``-p wandb_run_name 7``).
        Anything else as given.
    """
    base, optional = without_none(annotation)
    if isinstance(value, str) and optional and value.strip() in NONE_STRINGS:
        return None
    if typing.get_origin(base) is tuple:
        if isinstance(value, str):
            value = [v for v in ([v.strip() for v in value.split(",")] if comma_separated else [value]) if v]
        items = typing.get_args(base)[0]
        return (
            [source_spelling(v, items) if isinstance(v, str) else v for v in value]
            if isinstance(value, (list, tuple))
            else value
        )
    if base is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if base is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if base is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value
