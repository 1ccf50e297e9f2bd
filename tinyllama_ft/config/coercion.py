"""Type checks and coercions for configuration values from papermill, Colab forms, YAML and the command line.

Those sources hand over strings where a Python literal was meant: papermill's ``-p dtype None`` and Colab's
``"None"``, ``-p target_modules q_proj,v_proj``, YAML's ``2e-4`` (a string to PyYAML), ``--packing false``.
Each field's type decides what is accepted; anything else is an error naming the field. A mistyped
name gets the closest field name as a hint (``difflib``), e.g. ``lora_rank`` -> "did you mean lora_r?"
(``check_keys``: one check for recipes, notebook parameters and flags). Why not jsonargparse's types: docs/internals.md.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Iterable

#: Strings that mean None for an optional field.
NONE_STRINGS = ("None", "none", "null", "~", "")
TRUE_STRINGS = ("true", "yes", "on", "1")
FALSE_STRINGS = ("false", "no", "off", "0")


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


def _without_none(annotation: Any) -> tuple[Any, bool]:
    """``(the annotation without None, whether None was in it)``: ``int | None`` -> ``(int, True)``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        rest = tuple(a for a in args if a is not type(None))
        if len(rest) < len(args):
            return (rest[0] if len(rest) == 1 else typing.Union[rest]), True
    return annotation, False


def _scalar(annotation: Any) -> Any:
    """The plain type a value is coerced to: a ``Literal[...]`` of strings, or ``Literal[...] | str``, is ``str``."""
    if typing.get_origin(annotation) is typing.Literal:
        kinds = {type(v) for v in typing.get_args(annotation)}
        return kinds.pop() if len(kinds) == 1 else annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = {_scalar(a) for a in typing.get_args(annotation)}
        return kinds.pop() if len(kinds) == 1 else annotation
    return annotation


def coerce_value(name: str, value: Any, annotation: Any, *, comma_separated: bool = False) -> Any:
    """Check ``value`` against a field's type, converting the strings the sources above produce.

    Only the type is checked here: whether a value is among a ``Literal``'s choices, or in range, is
    ``FinetuneConfig``'s check (it names the allowed values).

    Args:
        name: the field, for messages.
        value: what was given.
        annotation: the field's resolved type (``typing.get_type_hints(FinetuneConfig)[name]``): ``int``,
            ``str | None``, ``tuple[str, ...]``, ``tuple[float, ...]``, ``float``, ``bool``, a ``Literal[...]`` of strings (coerced as a
            ``str``), ``Literal[...] | str``, ``tuple[Literal[...], ...]``.
        comma_separated: for a tuple field, a string is a comma-separated list (``"q_proj,v_proj"``);
            otherwise a string is a one-element tuple (one prompt).

    Returns:
        The value in the field's type (a tuple for tuple fields).

    Raises:
        ConfigError: the value cannot be read as that type; the message names the field and the value.
        TypeError: the annotation is none of the above (a field added with a type this function has no rule for).
    """
    annotation, optional = _without_none(annotation)
    is_tuple = typing.get_origin(annotation) is tuple
    base = _scalar(typing.get_args(annotation)[0] if is_tuple else annotation)

    def bad(expected: str) -> ConfigError:
        return ConfigError(
            f"FinetuneConfig.{name}={value!r} is not allowed: expected {expected}"
            f"{' or None' if optional else ''}, got {type(value).__name__}"
        )

    if value is None or (optional and isinstance(value, str) and value.strip() in NONE_STRINGS):
        if optional:
            return None
        raise bad("a list of strings" if is_tuple else _EXPECTED.get(base, str(base)))
    if is_tuple and base is str:
        if isinstance(value, str):
            items = [v.strip() for v in value.split(",")] if comma_separated else [value]
            return tuple(v for v in items if v)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise bad("a list of strings" + (" (or one comma-separated string)" if comma_separated else ""))
    if is_tuple and base in (int, float):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()] if comma_separated else [value]
        if isinstance(value, (list, tuple)):
            return tuple(coerce_value(name, v, base) for v in value)
        raise bad("a list of numbers" + (" (or one comma-separated string)" if comma_separated else ""))
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in TRUE_STRINGS + FALSE_STRINGS:
            return value.strip().lower() in TRUE_STRINGS
        raise bad("True or False")
    if base in (int, float):
        if isinstance(value, bool):
            raise bad(_EXPECTED[base])
        if isinstance(value, int) or (isinstance(value, float) and (base is float or value.is_integer())):
            return base(value)  # 3.0 is an integer; an int is a number
        if isinstance(value, str):
            try:
                return base(value.strip())
            except ValueError:
                pass
        raise bad(_EXPECTED[base])
    if base is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # papermill turns -p wandb_run_name 7 into an int
        raise bad("a string")
    raise TypeError(f"coerce_value: no rule for the annotation {annotation!r} of {name}")


_EXPECTED = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
