"""Instruction data: read rows from the Hub or a local file, check them, split off an eval set.

The article loads ``yahma/alpaca-cleaned`` (split ``train``) and holds out ``test_size=0.004`` of it. Here
the same call also takes a local ``.json`` / ``.jsonl`` / ``.csv`` / ``.parquet`` file (or a folder
``datasets.load_dataset`` understands), maps other column names onto instruction/input/output, and
checks every row before it reaches the tokenizer: a bad row (``None``, missing, not a string, empty
instruction or output) is dropped and counted, or with ``strict=True`` raises naming the row and field.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

LOCAL_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")
#: How many bad rows a report names.
SHOW_BAD_ROWS = 5


@dataclass
class BadRow:
    """One rejected row: its 0-based index in the source, the field at fault, and why."""

    index: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"row {self.index}: field {self.field!r} {self.reason}"


@dataclass
class DataReport:
    """What ``load_instruction_data`` kept and dropped.

    Attributes:
        source: the dataset id or path read.
        total: rows read.
        kept: rows that passed the checks.
        bad: every rejected row (index, field, reason).
    """

    source: str
    total: int = 0
    kept: int = 0
    bad: list[BadRow] = field(default_factory=list)

    @property
    def dropped(self) -> int:
        return len(self.bad)

    def summary(self) -> str:
        """One or two lines for the notebook: counts, and the first few bad rows."""
        line = f"{self.source}: {self.total} rows read, {self.kept} kept, {self.dropped} dropped"
        if self.bad:
            shown = "; ".join(str(b) for b in self.bad[:SHOW_BAD_ROWS])
            more = f" (and {self.dropped - SHOW_BAD_ROWS} more)" if self.dropped > SHOW_BAD_ROWS else ""
            line += f"\n  dropped: {shown}{more}"
        return line


class _Unreadable:
    """Placeholder for a source row that could not be parsed (e.g. a JSONL line that is not JSON)."""

    def __init__(self, where: str, reason: str):
        self.where, self.reason = where, reason


def _read_jsonl(path: str) -> list[Any]:
    rows: list[Any] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                rows.append(_Unreadable(f"{path}:{lineno}", f"is not valid JSON ({e.msg})"))
    return rows


def _read_json(path: str) -> list[Any]:
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: line {e.lineno}, column {e.colno}: not valid JSON ({e.msg})") from e
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise ValueError(f"{path}: expected a JSON list of rows (or an object holding one list)")
        data = lists[0]
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    return data


def _read_csv(path: str) -> list[Any]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            return []
        # DictReader fills short rows with None (restval) and puts extras under None: both stay visible.
        return [dict(r) for r in reader]


def _read_parquet(path: str) -> list[Any]:
    import datasets

    return datasets.Dataset.from_parquet(path).to_list()


def read_rows(source: str, split: str = "train", config: str | None = None) -> list[Any]:
    """Raw rows from a local file/folder or a Hub dataset, unchecked.

    Args:
        source: a ``.json`` (a list of objects), ``.jsonl``, ``.csv`` or ``.parquet`` file; a local folder
            or Hub id for ``datasets.load_dataset`` (e.g. the article's ``"yahma/alpaca-cleaned"``).
        split: split to read from a folder or Hub dataset.
        config: dataset configuration name, if it has several.

    Returns:
        The rows, in file order (a JSONL line that does not parse stays in place as an unreadable row,
        reported by ``check_rows``).

    Raises:
        FileNotFoundError: ``source`` looks like a local file (has a data suffix) but does not exist.
        ValueError: a local file with an unsupported suffix, or a JSON file that does not parse.
    """
    source = os.path.expanduser(source)  # "~/data.jsonl" is a local file (a Hub id never starts with ~)
    if os.path.isfile(source):
        suffix = os.path.splitext(source)[1].lower()
        readers = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}
        if suffix not in readers:
            raise ValueError(f"dataset={source!r}: unsupported file type {suffix!r}; use one of {LOCAL_SUFFIXES}")
        return readers[suffix](source)
    if source.lower().endswith(LOCAL_SUFFIXES) or source.startswith((".", "/", "~")) and not os.path.isdir(source):
        raise FileNotFoundError(f"dataset={source!r}: no such file")
    import datasets

    return datasets.load_dataset(source, config, split=split).to_list()


def check_rows(
    rows: Iterable[Any],
    instruction_column: str = "instruction",
    input_column: str = "input",
    output_column: str = "output",
    strict: bool = False,
    source: str = "rows",
) -> tuple[list[dict[str, str]], DataReport]:
    """Keep rows with a non-empty string instruction and output and a string (or absent) input.

    Args:
        rows: raw rows (dicts), e.g. from ``read_rows``.
        instruction_column, input_column, output_column: the source's column names.
        strict: raise on the first bad row instead of dropping it.
        source: name used in messages.

    Returns:
        ``(clean, report)``: clean rows as ``{"instruction", "input", "output"}`` dicts (a missing or
        ``None`` input becomes ``""``), and the counts.

    Raises:
        ValueError: with ``strict=True``, at the first bad row, naming its index and field.
    """
    report = DataReport(source=source)
    clean: list[dict[str, str]] = []
    for index, row in enumerate(rows):
        report.total += 1
        problem = _row_problem(row, instruction_column, input_column, output_column)
        if problem is not None:
            bad = BadRow(index, *problem)
            if strict:
                raise ValueError(f"{source}: {bad} (strict=True)")
            report.bad.append(bad)
            continue
        clean.append({
            "instruction": row[instruction_column],
            "input": row.get(input_column) or "",
            "output": row[output_column],
        })
    report.kept = len(clean)
    return clean, report


def _row_problem(row: Any, ins_col: str, inp_col: str, out_col: str) -> tuple[str, str] | None:
    if isinstance(row, _Unreadable):
        return "<line>", f"at {row.where} {row.reason}"
    if not isinstance(row, dict):
        return "<row>", f"is a {type(row).__name__}, not an object"
    for name in (ins_col, out_col):
        if name not in row:
            return name, "is missing"
        value = row[name]
        if value is None:
            return name, "is None"
        if not isinstance(value, str):
            return name, f"is a {type(value).__name__}, not a string"
        if not value.strip():
            return name, "is empty"
    value = row.get(inp_col)
    if value is not None and not isinstance(value, str):
        return inp_col, f"is a {type(value).__name__}, not a string"
    return None


def load_instruction_data(
    source: str = "yahma/alpaca-cleaned",
    split: str = "train",
    config: str | None = None,
    instruction_column: str = "instruction",
    input_column: str = "input",
    output_column: str = "output",
    strict: bool = False,
):
    """Read and check instruction rows into a ``datasets.Dataset``.

    Args:
        source, split, config: as ``read_rows``; the default is the article's dataset.
        instruction_column, input_column, output_column, strict: as ``check_rows``.

    Returns:
        ``(dataset, report)``: a ``datasets.Dataset`` with string columns ``instruction``, ``input``,
        ``output``, and the ``DataReport`` (already printed).

    Raises:
        ValueError: no row is left after the checks (the message gives the first reasons), or as
            ``read_rows`` / ``check_rows``.
    """
    import datasets

    rows = read_rows(source, split=split, config=config)
    clean, report = check_rows(rows, instruction_column, input_column, output_column, strict=strict, source=source)
    print(report.summary())
    if not clean:
        raise ValueError(f"{report.summary()}\nno usable rows: nothing to train on")
    features = datasets.Features({k: datasets.Value("string") for k in ("instruction", "input", "output")})
    return datasets.Dataset.from_list(clean, features=features), report


def split_train_eval(dataset, test_size: float = 0.004, seed: int = 3407):
    """Hold out ``test_size`` of the rows for evaluation (the article's ``train_test_split``).

    Args:
        dataset: a ``datasets.Dataset`` of n rows.
        test_size: fraction of rows for the eval set (rounded up to at least one row).
        seed: shuffle seed (the article's 3407).

    Returns:
        ``(train, eval)``: disjoint datasets; with 2+ rows and ``test_size > 0`` eval has at least one
        row and train at least one; with 1 row (or ``test_size == 0``) eval is ``None``.
    """
    n = len(dataset)
    if n < 2 or test_size <= 0:
        return dataset, None
    n_test = min(max(1, int(-(-test_size * n // 1))), n - 1)
    parts = dataset.train_test_split(test_size=n_test, seed=seed)
    return parts["train"], parts["test"]
