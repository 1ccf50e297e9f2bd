"""Path parameters as a person types them (``~/runs/x``, ``$HOME/data.jsonl``), and the one rule that tells a local
path from a Hub id.

Python's file functions take ``~`` literally (``os.makedirs("~/runs/x")`` creates a folder named ``~``), so
every helper that takes a path passes it through ``expand_path`` where it enters. Every model or data argument
(``model_name``, ``dataset``, ``--base_model``, ``--adapter``, the notebooks' parameters) is read with
``is_local_path``; ``config.locations`` turns a missing path into one line naming the argument. Standard library
only: ``preflight.py`` reads this file before anything is installed.
"""

from __future__ import annotations

import json
import os

#: Beginnings that make a value a local path (an absolute, a relative or a home path), never a Hub id.
LOCAL_PREFIXES = ("/", "./", "../", "~")
#: File endings that make a value a local path: a GGUF model, or rows (``row_files``).
LOCAL_SUFFIXES = (".gguf", ".json", ".jsonl", ".csv", ".parquet")


def expand_path(path: str | os.PathLike | None) -> str | None:
    """``path`` with ``~``/``~user`` and ``$VAR``/``${VAR}`` expanded (``os.path.expanduser(os.path.expandvars())``).

    Args:
        path: a local path, or a Hub id (returned unchanged: it has neither ``~`` nor ``$``); None passes through.

    Returns:
        The expanded path as a string (not made absolute); None for None. An unset variable stays as written
        (``os.path.expandvars``), so the error that follows names it.
    """
    if path is None:
        return None
    return os.path.expanduser(os.path.expandvars(os.fspath(path)))


def is_local_path(value: str | os.PathLike) -> bool:
    """Whether a model or data argument names a local file or folder rather than a Hub id: the package's one rule.

    A value is a local path when, as typed or after ``expand_path``, it starts with ``/``, ``./``, ``../`` or ``~``,
    exists, ends in ``.gguf``, ``.json``, ``.jsonl``, ``.csv`` or ``.parquet`` (any case), or holds more than one
    ``/`` (a Hub id is ``name`` or ``namespace/name``); anything else is a Hub id.

    Args:
        value: the argument as given (a ``str`` or path object).

    Returns:
        True for a local path (which may not exist: ``locations.check_source`` then says so), False for a Hub id.
    """
    typed = os.fspath(value)
    expanded = expand_path(typed)
    return any(
        text.startswith(LOCAL_PREFIXES) or text.lower().endswith(LOCAL_SUFFIXES) or text.count("/") > 1
        for text in (typed, expanded)
    ) or os.path.exists(expanded)


def write_json_atomically(path: str, value, **dump_kwargs) -> str:
    """Write ``value`` as indented JSON to ``path`` through ``<path>.tmp`` and a rename, so a kill leaves the old
    file or the new one, never half of it; ``dump_kwargs`` go to ``json.dump``. Returns ``path``."""
    with open(f"{path}.tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, **dump_kwargs)
        f.write("\n")
    os.replace(f"{path}.tmp", path)
    return path
