"""Path parameters as a person types them: ``~/runs/x``, ``$HOME/data.jsonl``, ``${DRIVE}/outputs``.

Python's file functions take ``~`` literally (``os.makedirs("~/runs/x")`` creates a folder named ``~``), so
every helper that takes a path passes it through ``expand_path`` where it enters.
"""

from __future__ import annotations

import os


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
