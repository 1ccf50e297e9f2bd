"""Path parameters as a person types them (``~/runs/x``, ``$HOME/data.jsonl``), and the one rule that tells a local
path from a Hub id.

Python's file functions take ``~`` literally, so every path passes through ``expand_path`` where it enters; every
model or data argument is read with ``is_local_path``. Standard library only: ``preflight.py`` reads this file
before anything is installed.
"""

from __future__ import annotations

import json
import os

#: Beginnings that make a value a local path (an absolute, a relative or a home path), never a Hub id.
LOCAL_PREFIXES = ("/", "./", "../", "~")
#: File endings that make a value a local path: a GGUF model, or rows (``row_files``).
LOCAL_SUFFIXES = (".gguf", ".json", ".jsonl", ".csv", ".parquet")


def expand_path(path: str | os.PathLike | None) -> str | None:
    """``os.path.expanduser(os.path.expandvars(path))`` as a string (not made absolute): a Hub id is unchanged, None
    stays None, an unset variable stays as written (so the error that follows names it)."""
    if path is None:
        return None
    return os.path.expanduser(os.path.expandvars(os.fspath(path)))


def is_local_path(value: str | os.PathLike) -> bool:
    """True when a model or data argument (a ``str`` or path object) names a local file or folder, which may not
    exist, rather than a Hub id: as typed or expanded it starts with ``LOCAL_PREFIXES``, ends in ``LOCAL_SUFFIXES``
    (any case), holds more than one ``/`` (a Hub id is ``name`` or ``namespace/name``), or exists."""
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
