"""Reading raw rows: a local ``.json`` / ``.jsonl`` / ``.csv`` / ``.parquet`` file, or a folder or Hub dataset.

Text is kept exactly as stored (UTF-8, a leading byte-order mark dropped). A file that cannot be read at all
raises naming the file and line; a line that cannot be parsed (JSONL, CSV) stays in place as an
``UnreadableRow`` for the row checks (``instructions.check_rows``, ``conversations.check_conversations``) to report.
Kept over datasets' json/csv builders, which stop at the first bad line: tests/test_data.py::test_jsonl_bad_lines_in_the_middle.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from typing import Any

from ..config.locations import check_source

#: The row files this module reads.
LOCAL_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")


class DataError(ValueError):
    """Rows that a loader refuses: a file it cannot read, a bad row under ``strict``, no usable row, a layout it
    cannot read. The message names the file (or Hub id), and the row, field and columns where there are some. Every
    loader (Alpaca rows, conversations, preference pairs, GRPO prompts) raises it; the command line exits 2 on it, as
    on a configuration error: the person's input is at fault (docs/command-line.md, "Exit status")."""


@dataclass
class UnreadableRow:
    """Stands in for a source row the reader could not parse, so ``instructions.check_rows`` (or
    ``conversations.check_conversations``) reports it in place, naming ``field`` and ``reason``."""

    field: str
    reason: str
    kind: str


def _read_text(path: str) -> str:
    """The whole file decoded as UTF-8 (a leading byte-order mark dropped); not UTF-8 or a NUL byte: DataError."""
    with open(path, "rb") as f:  # bytes, decoded below with an explicit encoding: exact offsets on error
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(
            f"{path}: line {line}, byte {e.start}: not UTF-8 text ({e.reason}: "
            f"{data[e.start : e.end]!r}); save the file as UTF-8"
        ) from e
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise DataError(f"{path}: line {line}, byte {nul}: NUL byte, a binary (or UTF-16) file, not UTF-8 text")
    return text.removeprefix("\ufeff")


def _read_jsonl(path: str) -> list[Any]:
    rows: list[Any] = []
    # split on "\n" only: str.splitlines() would also split inside strings at U+2028, U+0085, ...
    for lineno, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            rows.append(UnreadableRow("<line>", f"at {path}:{lineno} is not valid JSON ({e.msg})", "unparseable"))
    return rows


def _read_json(path: str) -> list[Any]:
    text = _read_text(path)
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: line {e.lineno}, column {e.colno}: not valid JSON ({e.msg})") from e
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise DataError(f"{path}: expected a JSON list of rows (or an object holding one list)")
        data = lists[0]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    return data


def _read_csv(path: str) -> list[Any]:
    # newline="": quoted fields keep their "\r\n" / "\n" exactly, as the csv module requires
    reader = csv.DictReader(io.StringIO(_read_text(path), newline=""))
    if reader.fieldnames is None:
        return []
    n = len(reader.fieldnames)
    rows: list[Any] = []
    for row in reader:
        # DictReader fills a short line with None and puts extra values under the key None: its values
        # are misaligned, so the row is rejected rather than trained on.
        where = f"{path}:{reader.line_num}"
        if None in row:
            reason = f"has {n + len(row[None])} values for {n} columns (at {where}; an unquoted comma?)"
            rows.append(UnreadableRow("<row>", reason, "column count"))
        elif None in row.values():
            missing = [k for k, v in row.items() if v is None]
            reason = f"is missing: the line has {n - len(missing)} of {n} values (at {where})"
            rows.append(UnreadableRow(missing[0], reason, "column count"))
        else:
            rows.append(row)
    return rows


def _read_parquet(path: str) -> list[Any]:
    import pyarrow
    import pyarrow.parquet

    try:
        return pyarrow.parquet.read_table(path).to_pylist()
    except pyarrow.ArrowException as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from e


def read_rows(source: str, split: str = "train", config: str | None = None, *, flag: str = "dataset") -> list[Any]:
    """Raw rows from a local file/folder or a Hub dataset, unchecked.

    Args:
        source: a ``.json`` (a list of objects), ``.jsonl``, ``.csv`` or ``.parquet`` file; a local folder
            or Hub id for ``datasets.load_dataset`` (e.g. the article's ``"yahma/alpaca-cleaned"``).
        split: split to read from a folder or Hub dataset.
        config: dataset configuration name, if it has several.
        flag: the argument's name in messages (``"dataset"``, ``"--dataset"``, ``"extra_datasets[0]"``).

    Returns:
        The rows, in file order, text exactly as stored (local files are read as UTF-8; a leading
        byte-order mark is dropped). A JSONL line that does not parse, or a CSV line with too few or too
        many values, stays in place as an unreadable row that ``check_rows`` reports. An empty (0-byte)
        file gives no rows.

    Raises:
        locations.PathArgumentError: (a FileNotFoundError) ``source`` is a local path (``paths.is_local_path``) that
            does not exist; locations.HubUnreachableError: a Hub id the Hub does not answer for and the cache lacks.
        DataError: (a ValueError) a local file with an unsupported suffix, or one that cannot be read at all: not
            UTF-8 or binary (naming the line and byte), a ``.json`` that does not parse (naming line and column),
            a ``.parquet`` that is not parquet; a local folder ``datasets.load_dataset`` cannot read (no row files,
            a file that does not parse, no ``split``), naming the folder and datasets' reason.
    """
    source = check_source(source, flag, repo_type="dataset")  # "~/data.jsonl", "$DATA/x.jsonl" are local files
    if os.path.isfile(source):
        suffix = os.path.splitext(source)[1].lower()
        readers = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}
        if suffix not in readers:
            raise DataError(f"{flag}={source!r}: unsupported file type {suffix!r}; use one of {LOCAL_SUFFIXES}")
        return readers[suffix](source) if os.path.getsize(source) else []
    import datasets

    if not os.path.isdir(source):  # a Hub id: its failures (the Hub, a split) are not the person's file
        return datasets.load_dataset(source, config, split=split).to_list()
    try:
        return datasets.load_dataset(source, config, split=split).to_list()
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetsError) as err:
        cause = f" ({err.__cause__})" if err.__cause__ else ""
        raise DataError(
            f"{flag}={source!r}: a folder datasets cannot read rows from: {' '.join(str(err).split())}{cause}; "
            f"give one {', '.join(LOCAL_SUFFIXES)} file, or a folder of them"
        ) from err
