"""``ConfigError`` and ``FieldError``, the near-miss hint for a misspelt name, and the source spellings jsonargparse
reads otherwise.

jsonargparse types and validates every configuration value (``finetune.parse_values``); papermill, Colab forms and YAML
hand over six spellings it refuses or misreads, rewritten here first (docs/internals.md lists them): shown by
tests/test_config.py::test_string_coercions_from_papermill_colab_yaml_and_the_command_line.
A mistyped name gets the closest field name as a hint (``did_you_mean``; ``secrets.check_keys`` checks names).
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


class FieldError(ConfigError):
    """A value its field does not take (type or range), naming the field: ``FinetuneConfig.max_steps=-3 is not allowed:
    ...``, or as the command line's flag (``as_flag()``: ``--max_steps: -3 is not allowed: ...``).

    Attributes: ``name`` (the field), ``value`` (the value or the tuple item refused), ``why`` (the message's tail).
    """

    def __init__(self, name: str, value: Any, why: str, *, item: bool = False, flag: bool = False):
        self.name, self.value, self.why, self.item = name, value, why, item
        label = f"--{name}: " if flag else f"FinetuneConfig.{name}{': ' if item else '='}"
        super().__init__(f"{label}{value!r} is not allowed{why}")

    def as_flag(self) -> FieldError:
        """The same refusal naming the field as the flag ``--NAME``."""
        return FieldError(self.name, self.value, self.why, item=self.item, flag=True)


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """``" (did you mean lora_r?)"`` for the closest of ``known`` to ``key``, or ``""`` when none is close."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


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
