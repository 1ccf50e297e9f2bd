"""GRPO's reward functions: the built-ins named in ``reward_funcs``, and the user's own, checked before a model loads.

Each reward has TRL's signature, ``f(prompts, completions, completion_ids=None, trainer_state=None, **kwargs)``
returning one float (or None: not scored) per completion; completions are strings for text prompts and lists of
messages for chat prompts; ``kwargs`` holds the rows' columns (the reference as ``answer``) and TRL's extras
(``log_extra``, ``log_metric``). ``resolve_rewards`` turns names, ``module:function`` / ``module.function`` /
``file.py:function`` strings (``pkgutil.resolve_name``) and callables into that list, refusing what TRL could not
call, naming it.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import pkgutil
import sys
from typing import Any, Callable, Sequence

from ..config.coercion import ConfigError, did_you_mean
from ..config.finetune import DEFAULTS
from ..data.answers import extract_number, follows_layout, reference_number

#: The share of ``max_completion_length`` over which ``soft_overlong_punishment`` ramps to -1 (DAPO's 4,096 of
#: 20,480 tokens: eq. 13 of arxiv.org/abs/2503.14476).
OVERLONG_SHARE = 0.2


class RewardError(ConfigError):
    """A reward in ``reward_funcs`` that cannot be used (unknown, not importable, not callable, wrong signature)."""


def completion_text(completion: Any) -> str:
    """A completion's text: the string itself, or the text of a chat completion's assistant messages joined.

    Args:
        completion: a string (text prompts), or a list of ``{"role", "content"}`` messages (chat prompts), a content
            being a string or a list of ``{"type": "text", "text": ...}`` parts.

    Raises:
        TypeError: anything else (naming its type).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and all(isinstance(m, dict) for m in completion):
        contents = [m.get("content") or "" for m in completion if m.get("role", "assistant") == "assistant"]
        parts = (
            "".join(p.get("text", "") for p in c if isinstance(p, dict)) if isinstance(c, list) else c for c in contents
        )
        return "".join(parts)
    raise TypeError(f"a completion is a string or a list of messages, not a {type(completion).__name__}")


def correct_number(
    prompts, completions, completion_ids=None, trainer_state=None, *, answer=None, **kwargs
) -> list[float | None]:
    """1.0 for a completion whose number equals the reference, else 0.0 (``data.answers.extract_number``: the number
    after its last ``####``, else its last number), so a right answer scores before the layout is learnt.

    Args:
        prompts, completion_ids, trainer_state: TRL's; not read.
        completions: one per prompt (``completion_text``).
        answer: the reference per completion (the ``answer`` column: a number, or text as GSM8K's ``answer``).

    Returns:
        One reward per completion; None where the reference holds no number (TRL leaves it out).

    Raises:
        ValueError: no ``answer`` column (the prompt rows lack ``answer_column``).
    """
    if answer is None:
        raise ValueError("correct_number needs the reference answers: the prompt rows have no 'answer' column")
    return [
        None if expected is None else float(extract_number(completion_text(completion)) == expected)
        for completion, expected in zip(completions, map(reference_number, answer), strict=True)
    ]


def answer_format(prompts, completions, completion_ids=None, trainer_state=None, **kwargs) -> list[float | None]:
    """1.0 for a completion whose last non-empty line is ``#### <number>`` (``data.answers.follows_layout``), else 0.0.

    Args:
        prompts, completion_ids, trainer_state: TRL's; not read. completions: one per prompt.
    """
    return [float(follows_layout(completion_text(c))) for c in completions]


def soft_overlong_punishment(max_completion_length: int) -> Callable:
    """DAPO's soft overlong punishment, TRL's ``get_soft_overlong_punishment``: 0 up to ``max_completion_length -
    cache`` tokens (the cache ``OVERLONG_SHARE`` of it, at least 1), then down to -1 at ``max_completion_length``.
    Logged under the built-in's name, not TRL's ``soft_overlong_punishment_reward``
    (test_soft_overlong_punishment_is_trls_under_the_builtin_name)."""
    from trl.rewards import get_soft_overlong_punishment

    cache = max(1, round(OVERLONG_SHARE * max_completion_length))
    penalty = get_soft_overlong_punishment(max_completion_len=max_completion_length, soft_punish_cache=cache)
    penalty.__name__ = "soft_overlong_punishment"
    return penalty


#: The built-ins by name -> a maker taking ``max_completion_length``.
BUILTIN_REWARDS: dict[str, Callable[[int], Callable]] = {
    "correct_number": lambda max_completion_length: correct_number,
    "answer_format": lambda max_completion_length: answer_format,
    "soft_overlong_punishment": soft_overlong_punishment,
}


def reward_name(func: Callable) -> str:
    """The name TRL logs a reward under (``rewards/<name>/mean``), TRL's ``get_callable_name``'s rule: ours, since
    importing TRL's imports torch (test_a_bad_reward_is_refused_before_torch_is_even_imported)."""
    import functools

    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__name__", type(func).__name__)


def check_reward(func: Any, where: str) -> None:
    """Refuse what TRL could not call as a reward.

    Args:
        func: the candidate.
        where: how the user named it, for the message (``"reward_funcs[1]='my_rewards:score'"``).

    Raises:
        RewardError: ``func`` is a class (TRL would call it and get an instance), is not callable, or its signature
            has no ``completions`` or ``completion_ids`` parameter TRL can pass by name, or no ``**kwargs`` to take
            the rest (the columns, ``trainer_state``, ``log_extra``, ``log_metric``).
    """
    if inspect.isclass(func):
        raise RewardError(f"{where} is a class: pass a function, or an instance whose __call__ is the reward")
    if not callable(func):
        raise RewardError(f"{where} is a {type(func).__name__}, not a function")
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a builtin without a readable signature: TRL will tell
        return
    kinds = inspect.Parameter
    named = {p.name for p in params if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)}
    kwargs = any(p.kind is kinds.VAR_KEYWORD for p in params)
    data = bool(named & {"completions", "completion_ids"})  # TRL's own rewards may read the ids alone
    missing = [w for w, ok in (("'completions' or 'completion_ids' parameter", data), ("**kwargs", kwargs)) if not ok]
    if missing:
        raise RewardError(
            f"{where} has no {' and no '.join(missing)}: TRL calls a reward as f(prompts=..., completions=..., "
            "completion_ids=..., trainer_state=..., **columns); write it as "
            "def reward(prompts, completions, completion_ids=None, trainer_state=None, **kwargs)"
        )


def _load_file(path: str, where: str) -> str:
    """Import ``path`` (a ``.py`` file) under a module name of its own, registered in ``sys.modules`` so its rewards
    pickle by reference as an imported module's do; returns that name. Raises RewardError: no such file."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise RewardError(f"{where}: no such file {path!r}")
    name = f"tinyllama_ft_rewards_{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return name


def import_reward(spec: str, where: str = "reward") -> Callable:
    """The callable ``spec`` names (``pkgutil.resolve_name``): ``"package.module:function"``,
    ``"package.module.function"``, ``"path/to/file.py:function"``, or a bare name of a function defined in
    ``__main__`` (a notebook's cells: the GRPO notebook's rewards cell; the script being run). A module not found is
    looked for in the working folder too, as ``python -m`` would (console scripts do not search it).

    Args:
        spec: the string; the part after the ``:`` may be dotted (``"module:Class.method"``).
        where: how to name it in messages.

    Raises:
        RewardError: a bare name and no function of that name in ``__main__``, a module or file that is missing or
            fails to import (its error quoted), or no such attribute in it.
    """
    module_name, colon, attr = spec.rpartition(":")
    if not colon and "." not in spec:
        found = getattr(sys.modules.get("__main__"), spec, None)
        if getattr(found, "__module__", None) == "__main__":  # defined in a notebook's rewards cell, or the script
            return found
        raise RewardError(
            f"{where}: {spec!r} is no built-in reward ({', '.join(BUILTIN_REWARDS)}), not module:function, and no "
            "function of that name is defined in __main__ (a notebook's rewards cell)"
            + did_you_mean(spec, BUILTIN_REWARDS)
        )
    if module_name.endswith(".py"):
        spec = f"{_load_file(module_name, where)}:{attr}"
    module_name = module_name or spec
    try:
        try:
            return pkgutil.resolve_name(spec)
        except ModuleNotFoundError as err:
            if err.name != spec.partition(":")[0].split(".")[0] or os.getcwd() in sys.path:
                raise
        sys.path.append(os.getcwd())
        return pkgutil.resolve_name(spec)
    except ModuleNotFoundError as err:
        raise RewardError(f"{where}: no module named {err.name!r} (importing {module_name!r})") from err
    except AttributeError as err:  # pkgutil's: "module 'my_rewards' has no attribute 'score'"
        raise RewardError(f"{where}: {err}") from err
    except Exception as err:  # noqa: BLE001  the user's module failed while importing: say so, with its error
        raise RewardError(f"{where}: importing {module_name!r} failed: {type(err).__name__}: {err}") from err


def resolve_rewards(
    reward_funcs: Sequence[str | Callable] = DEFAULTS.reward_funcs,
    *,
    max_completion_length: int = DEFAULTS.max_completion_length,
) -> list[Callable]:
    """The reward functions a GRPO run passes to TRL, each checked (``check_reward``); call it before loading a model.

    Args:
        reward_funcs: built-in names (``BUILTIN_REWARDS``), ``"module:function"`` / ``"file.py:function"`` strings,
            names of functions defined in ``__main__`` (``import_reward``) or callables, in order.
        max_completion_length: the run's, for ``soft_overlong_punishment``.

    Returns:
        The callables, in order.

    Raises:
        RewardError: an empty list, an unknown name, a module, file or attribute not found, a reward TRL could not
            call, or two rewards under one name (TRL logs each as ``rewards/<name>/mean``); the message names the
            item (``reward_funcs[i]``).
    """
    if isinstance(reward_funcs, str) or callable(reward_funcs):
        reward_funcs = [reward_funcs]
    if not reward_funcs:
        raise RewardError("reward_funcs is empty: GRPO needs at least one reward function")
    resolved, names = [], {}
    for i, item in enumerate(reward_funcs):
        where = f"reward_funcs[{i}]={item!r}" if isinstance(item, str) else f"reward_funcs[{i}] ({item!r:.60})"
        if isinstance(item, str) and item in BUILTIN_REWARDS:
            func = BUILTIN_REWARDS[item](max_completion_length)
        elif isinstance(item, str):
            func = import_reward(item, where)
        else:
            func = item
        check_reward(func, where)
        name = reward_name(func)
        if name in names:
            raise RewardError(
                f"{where} is logged as {name!r}, as reward_funcs[{names[name]}] is: give the functions different names"
            )
        names[name] = i
        resolved.append(func)
    return resolved
