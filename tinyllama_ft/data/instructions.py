"""Instruction data: check the rows read from the Hub or a local file (``row_files``), split off an eval set.

Other column names are mapped onto instruction/input/output, and every row is checked before the tokenizer sees
it: a bad row is dropped and counted by reason, or with ``strict=True`` named by row (0-based) and field; an
unreadable file is named with its line. Text is kept as read (a whitespace-only input counts as no input).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..config.finetune import DEFAULTS
from .row_files import DataError, UnreadableRow, read_rows

#: How many bad rows a report names.
SHOW_BAD_ROWS = 5


@dataclass
class BadRow:
    """One rejected row: its 0-based index in the source, the field at fault, why, and the kind of fault.

    ``field`` is a column name, ``"<row>"`` (the whole row: not an object, a duplicate, too many CSV
    values) or ``"<line>"`` (a JSONL line that does not parse). ``kind`` is the short reason the report
    counts by: ``"missing"``, ``"null"``, ``"wrong type"``, ``"empty"``, ``"not an object"``,
    ``"unparseable"``, ``"column count"`` or ``"duplicate"``.
    """

    index: int
    field: str
    reason: str
    kind: str = "bad"

    def __str__(self) -> str:
        return f"row {self.index}: field {self.field!r} {self.reason}"


def mapped_by(parameter: str) -> str:
    """What a missing column's reason says to do when the configuration field ``parameter`` names that column."""
    return f"set {parameter} (--{parameter} on the command line) to the column that holds it"


@dataclass
class DataReport:
    """What a loader kept and dropped of ``source`` (the dataset id or path read): ``total`` rows read, ``kept``
    rows that passed the checks, ``bad`` every rejected row. ``columns``: column -> what to do when a row lacks it
    (``mapped_by``: the parameter naming it), said with the row's own columns."""

    source: str
    total: int = 0
    kept: int = 0
    bad: list[BadRow] = field(default_factory=list)
    columns: dict[str, str] = field(default_factory=dict)

    def reject(self, bad: BadRow, *, strict: bool) -> None:
        """Count ``bad`` among the dropped rows, or with ``strict`` raise it at once. Raises DataError: ``strict`` is
        True; the message names ``source``, the 0-based row index and the field."""
        if strict:
            raise DataError(f"{self.source}: {bad} (row index is 0-based; strict=True)")
        self.bad.append(bad)

    def keep_each(
        self, rows: Iterable[Any], check: Callable, key: Callable | None = None, same: str = "", *, strict: bool
    ) -> list:
        """The items ``check`` makes of ``rows``, once each; every other row counted here (or, ``strict``, raised).

        Args:
            rows: raw rows, in source order (``total`` and ``kept`` are counted here).
            check: a row that is an object (a dict) -> ``(problem, item)``: ``problem`` a ``(field, reason, kind)``
                for ``BadRow``, or None. A row that is none (``row_files.UnreadableRow``, a list, ...) is refused here.
            key: item -> what makes two items the same (hashable); a later equal item is a ``"duplicate"``. None:
                no duplicate check.
            same: what a duplicate shares, for its reason (``" (same turns)"``).
            strict: as ``reject``.

        Raises:
            DataError: as ``reject``.
        """
        clean, first_index = [], {}
        for index, row in enumerate(rows):
            self.total += 1
            if isinstance(row, UnreadableRow):
                problem, item = (row.field, row.reason, row.kind), None
            elif not isinstance(row, dict):
                problem, item = ("<row>", f"is of type {type(row).__name__}, not an object", "not an object"), None
            else:
                problem, item = check(row)
                if problem is not None and problem[0] in self.columns and problem[0] not in row:  # another name?
                    has = ", ".join(repr(str(c)) for c in row) or "none"
                    problem = (
                        problem[0],
                        f"is missing (the row's columns: {has}): {self.columns[problem[0]]}",
                        "missing",
                    )
            if problem is None and key is not None and first_index.setdefault(key(item), index) != index:
                problem = "<row>", f"duplicates row {first_index[key(item)]}{same}", "duplicate"
            if problem is None:
                clean.append(item)
            else:
                self.reject(BadRow(index, *problem), strict=strict)
        self.kept = len(clean)
        return clean

    @property
    def dropped(self) -> int:
        """How many rows were rejected."""
        return len(self.bad)

    @property
    def by_reason(self) -> dict[str, int]:
        """Rejected rows per kind of fault (e.g. ``{"empty": 2, "duplicate": 1}``), first seen first."""
        return dict(Counter(b.kind for b in self.bad))

    def summary(self) -> str:
        """``"<source>: N rows read, K kept, D dropped"``, then, if any row was dropped, the counts per reason and a
        second line naming the first ``SHOW_BAD_ROWS`` bad rows (0-based indices)."""
        line = f"{self.source}: {self.total} rows read, {self.kept} kept, {self.dropped} dropped"
        if self.bad:
            line += " (" + ", ".join(f"{kind}: {n}" for kind, n in self.by_reason.items()) + ")"
            shown = "; ".join(str(b) for b in self.bad[:SHOW_BAD_ROWS])
            more = f" (and {self.dropped - SHOW_BAD_ROWS} more)" if self.dropped > SHOW_BAD_ROWS else ""
            line += f"\n  dropped (row index from 0): {shown}{more}"
        return line

    def print_and_require(self, clean: list) -> None:
        """Print ``summary``; raise DataError ``"<source>: no usable rows"`` when ``clean`` (the rows a loader kept)
        is empty: the source had none, or every row was dropped (all for one missing column: that row's reason alone,
        which names the row's columns and the parameter that maps them)."""
        print(self.summary())
        if not clean:
            first = self.bad[0] if self.bad else None
            if (
                first
                and first.kind == "missing"
                and all((b.kind, b.field) == ("missing", first.field) for b in self.bad)
            ):
                raise DataError(f"{self.source}: no usable rows: all {self.total} rows lack {first.field!r}; {first}")
            why = f"all {self.total} rows were dropped" if self.total else "it has no rows"
            raise DataError(f"{self.source}: no usable rows ({why}): nothing to train on\n{self.summary()}")


def check_rows(
    rows: Iterable[Any],
    instruction_column: str = "instruction",
    input_column: str = "input",
    output_column: str = "output",
    strict: bool = False,
    source: str = "rows",
) -> tuple[list[dict[str, str]], DataReport]:
    """Keep rows with a non-blank string instruction and output, a string (or absent) input, once each.

    Args:
        rows: raw rows (dicts), e.g. from ``read_rows``.
        instruction_column, input_column, output_column: the source's column names.
        strict: raise on the first bad row instead of dropping it.
        source: name used in messages (the file or dataset id).

    Returns:
        ``(clean, report)``: clean rows as ``{"instruction", "input", "output"}`` dicts, text exactly as
        read (no stripping, no Unicode normalization; ``strip()`` only decides emptiness); a missing,
        ``None`` or whitespace-only input becomes ``""``. A row whose (instruction, input, output) equals
        an earlier kept row's is dropped as a ``"duplicate"`` naming that row. ``report`` has the counts.

    Raises:
        DataError: (a ValueError) with ``strict=True``, at the first bad row (duplicates and unparseable lines
            included), naming ``source``, the row's 0-based index and the field (a missing one with the row's columns
            and the parameter that names it).
    """

    def check(row):
        problem = (
            _field_problem(row, instruction_column, True)
            or _field_problem(row, output_column, True)
            or _field_problem(row, input_column, False)
        )
        if problem is not None:
            return problem, None
        inp = row.get(input_column)
        return None, {
            "instruction": row[instruction_column],
            "input": inp if inp and inp.strip() else "",
            "output": row[output_column],
        }

    fields = {instruction_column: "instruction_column", output_column: "output_column"}
    report = DataReport(source=source, columns={column: mapped_by(name) for column, name in fields.items()})
    same = " (same instruction, input and output)"
    clean = report.keep_each(rows, check, lambda item: tuple(item.values()), same, strict=strict)
    return clean, report


def _field_problem(row: dict, name: str, required: bool) -> tuple[str, str, str] | None:
    value = row.get(name)
    if value is None:
        if not required:
            return None
        return (name, "is missing", "missing") if name not in row else (name, "is None", "null")
    if not isinstance(value, str):
        return name, f"is of type {type(value).__name__}, not a string", "wrong type"
    if required and not value.strip():
        return name, "is whitespace-only" if value else "is empty", "empty"
    return None


def load_instruction_data(
    source: str = DEFAULTS.dataset,
    *,
    split: str = DEFAULTS.dataset_split,
    config: str | None = DEFAULTS.dataset_config,
    instruction_column: str = DEFAULTS.instruction_column,
    input_column: str = DEFAULTS.input_column,
    output_column: str = DEFAULTS.output_column,
    strict: bool = DEFAULTS.strict,
):
    """``(dataset, report)``: instruction rows read (``read_rows``: ``source``, ``split``, ``config``; the default is
    the article's dataset) and checked (``check_rows``: the columns, ``strict``) into a ``datasets.Dataset`` of
    string columns ``instruction``, ``input``, ``output``, and the printed ``DataReport``.

    Raises:
        DataError: ``"<source>: no usable rows"`` when the source is empty (0 bytes, only blank lines, a
            CSV header alone, ``[]``) or every row was dropped (the message gives the first reasons), so
            nothing trains zero steps; or as ``read_rows`` / ``check_rows``.
    """
    import datasets

    rows = read_rows(source, split=split, config=config)
    clean, report = check_rows(rows, instruction_column, input_column, output_column, strict=strict, source=source)
    report.print_and_require(clean)
    features = datasets.Features({k: datasets.Value("string") for k in ("instruction", "input", "output")})
    return datasets.Dataset.from_list(clean, features=features), report


def split_train_eval(
    dataset,
    *,
    test_size: float = DEFAULTS.test_size,
    seed: int = DEFAULTS.seed,
    min_test_rows: int = 1,
    first: int | tuple[int, int] = 0,
    eval_split: str | None = DEFAULTS.eval_split,
):
    """``(train, eval)``: ``test_size`` (a fraction, rounded up) of a ``datasets.Dataset`` held out for evaluation,
    shuffled with ``seed`` (the article's ``train_test_split``, 3407); at least ``min_test_rows`` (the format's: 1,
    or 50 pairs) but never more than half. With 2+ rows both are non-empty; with 1 row or ``test_size == 0`` eval
    is ``None``. ``first`` > 0: the first ``first`` rows are the eval set as they are (a source that deals its own
    held-out rows: ``dataset: arithmetic``), and ``test_size`` only says whether to hold out.

    ``eval_split`` ``"validation"`` or ``"test"``: a three-way split. Validation is the part ``eval_split=None`` holds
    out (the same rows), test as many rows again drawn from the rest with ``seed`` (``first``: a pair ``(n_validation,
    n_test)`` of rows at the front, validation first), train the rest whichever part is named; eval is the part named.
    Raises ValueError: another ``eval_split``, or too few rows for three non-empty parts (names the counts)."""
    n = len(dataset)
    if eval_split not in (None, "validation", "test"):
        raise ValueError(f"eval_split={eval_split!r} is not one of None, 'validation', 'test'")
    if n < 2 or test_size <= 0:
        return dataset, None
    if eval_split is not None and n < 3:
        raise ValueError(f"eval_split={eval_split!r} splits the rows three ways: {n} rows are too few")
    if isinstance(first, tuple):
        n_val, n_test = first
        if eval_split is None or n_val + n_test >= n:
            raise ValueError(
                f"held-out rows at the front {first} need eval_split 'validation' or 'test' and fewer than the {n} rows"
            )
        held = range(n_val) if eval_split == "validation" else range(n_val, n_val + n_test)
        return dataset.select(range(n_val + n_test, n)), dataset.select(held)
    if first > 0:
        first = min(first, n - 1)
        return dataset.select(range(first, n)), dataset.select(range(first))
    n_test = min(max(1, int(-(-test_size * n // 1)), min(min_test_rows, n // 2)), n - 1)
    if eval_split is not None:
        n_test = min(n_test, (n - 1) // 2)  # validation, test and at least one training row
    parts = dataset.train_test_split(test_size=n_test, seed=seed)
    if eval_split is None:
        return parts["train"], parts["test"]
    rest = parts["train"].train_test_split(test_size=n_test, seed=seed)
    return rest["train"], parts["test"] if eval_split == "validation" else rest["test"]
