"""Preference rows in TRL's standard forms, read (``row_files``) and checked as instruction rows are.

Paired rows (``prompt`` / ``chosen`` / ``rejected``) and unpaired ones (``prompt`` / ``completion`` / ``label``, for
KTO), each as text (the prompt goes into the run's Alpaca template, with an optional input column) or as
conversations (role/content turns; a pair may leave its prompt implicit, as the turns ``chosen`` and ``rejected``
share). A bad row is dropped and counted by kind, or with ``strict`` named by row and field (``instructions``).
"""

from __future__ import annotations

from typing import Any, Iterable

from ..config.finetune import DEFAULTS
from .conversations import _order_problem, conversation_problem, turns_problem
from .instructions import DataReport, _field_problem
from .row_files import DataError, read_rows

#: The columns of a paired row and of an unpaired one (TRL's names).
PAIRED = ("prompt", "chosen", "rejected")
UNPAIRED = ("prompt", "completion", "label")
#: What a row lacking one of them is told (no parameter renames them; ``input_column`` names the optional context).
TRL_COLUMNS = (
    "preference rows take TRL's column names, prompt / chosen / rejected (pairs) or prompt / completion / label (KTO): "
    "rename the file's columns"
)
#: ``form`` values: the response columns hold text, or turns; "auto" reads which from the first object row.
FORMS = ("text", "conversation", "auto")


def detect_layout(rows: Iterable[Any], source: str = "rows") -> tuple[str, str]:
    """``(layout, form)`` of the first row that is an object: ``"paired"`` when it has ``chosen``, ``"unpaired"`` when
    it has ``completion``; ``"text"`` when that column holds a string, else ``"conversation"``. Raises
    row_files.DataError: the first object has neither column, or no row is an object (naming ``source``)."""
    for index, row in enumerate(rows):
        if isinstance(row, dict):
            column = "chosen" if "chosen" in row else "completion" if "completion" in row else None
            if column is None:
                raise DataError(f"{source}: preference rows: row {index} has the columns {sorted(row)}: {TRL_COLUMNS}")
            form = "text" if isinstance(row[column], str) else "conversation"
            return ("paired" if column == "chosen" else "unpaired"), form
    raise DataError(f"{source}: preference rows: no row is an object")


def _label(row: dict) -> tuple[tuple[str, str, str] | None, bool | None]:
    """``(problem, label)``: a JSON boolean, or a CSV cell's ``true`` / ``false`` (any case)."""
    value = row.get("label")
    if value is None:
        return (("label", "is missing", "missing") if "label" not in row else ("label", "is None", "null")), None
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):  # CSV holds no booleans
        return None, value.strip().lower() == "true"
    if not isinstance(value, bool):
        return ("label", f"is {value!r:.40}, not true or false (true: desirable)", "wrong type"), None
    return None, value


def _conversation_row(row: dict, responses: tuple[str, ...]) -> tuple[tuple[str, str, str] | None, dict | None]:
    """``(problem, clean)`` for a conversational row: ``{"prompt": turns, <response>: [one assistant turn], ...}``."""
    if row.get("prompt") is None and len(responses) == 2:
        # the implicit prompt: each response column holds the whole conversation, the two share all but the last turn
        whole = {}
        for column in responses:
            problem, whole[column] = conversation_problem(row, column=column)
            if problem:
                return problem, None
        from trl.data_utils import extract_prompt  # the turns both share; TRL 1.15 and 1.16 alike

        split = extract_prompt(whole)
        if any(len(split[c]) != 1 for c in responses):
            why = f"differs from {responses[0]} before its last turn (the implicit prompt)"
            return (responses[1], why, "prompt mismatch"), None
        return None, split
    problem, prompt = turns_problem(row, "prompt")
    if problem:
        return problem, None
    clean: dict[str, Any] = {"prompt": prompt}
    for column in responses:
        problem, turns = turns_problem(row, column)
        if problem:
            return problem, None
        if len(turns) != 1 or turns[0]["role"] != "assistant":
            return (column, f"holds {len(turns)} turn(s), not one assistant turn", "not one assistant turn"), None
        clean[column] = turns
    problem = _order_problem(prompt + clean[responses[0]], "prompt")
    return (problem, None) if problem else (None, clean)


def _text_row(
    row: dict, responses: tuple[str, ...], input_column: str
) -> tuple[tuple[str, str, str] | None, dict | None]:
    problem = _field_problem(row, "prompt", True) or _field_problem(row, input_column, False)
    for column in responses:
        problem = problem or _field_problem(row, column, True)
    if problem:
        return problem, None
    inp = row.get(input_column)
    return None, {
        "prompt": row["prompt"],
        "input": inp if inp and inp.strip() else "",
        **{c: row[c] for c in responses},
    }


def check_preference_rows(
    rows: Iterable[Any],
    *,
    form: str = "auto",
    input_column: str = DEFAULTS.input_column,
    strict: bool = DEFAULTS.strict,
    source: str = "rows",
) -> tuple[list[dict[str, Any]], DataReport, str, str]:
    """Keep well-formed preference rows, normalised, once each.

    Args:
        rows: raw rows (``row_files.read_rows``); the layout (paired or unpaired) is read from the first object.
        form: ``"text"``, ``"conversation"`` or ``"auto"`` (``FORMS``; default: the first object's decides); a row
            of the other form is a ``"wrong type"``.
        input_column: text form: the optional context column (``DEFAULTS.input_column``, Alpaca's "input").
        strict: raise on the first bad row instead of dropping it (``DEFAULTS.strict``).
        source: name used in messages (the file or dataset id).

    Returns:
        ``(clean, report, layout, form)``. Text rows become ``{"prompt", "input", "chosen", "rejected"}`` (or
        ``"completion"``, ``"label"``) strings (a missing or blank input ``""``); conversational rows
        ``{"prompt": [turns], "chosen": [one assistant turn], "rejected": [...]}`` (implicit prompts made explicit),
        or ``"completion"`` and ``"label"``. ``label`` is a bool (True: desirable; a CSV cell's "true" / "false" read
        as one). The report counts per kind
        (those of ``instructions.check_rows`` and ``conversations.check_conversations``, plus ``"identical pair"``,
        ``"prompt mismatch"``, ``"not one assistant turn"``).

    Raises:
        ValueError: unknown ``form``. row_files.DataError: the layout cannot be read (``detect_layout``); with
            ``strict``, at the first bad row, naming ``source``, the 0-based row index and the field.
    """
    if form not in FORMS:
        raise ValueError(f"form={form!r} is not one of {FORMS}")
    rows = list(rows)
    layout, found = detect_layout(rows, source)
    form = found if form == "auto" else form
    responses = PAIRED[1:] if layout == "paired" else UNPAIRED[1:2]

    def check(row):
        column = responses[0]
        value = row.get(column)
        kind = "text" if isinstance(value, str) else "conversation" if isinstance(value, list) else None
        if kind is not None and kind != form:
            shape = "text" if kind == "text" else "a list of turns"
            return (column, f"is {shape}; rows here are {form}", "wrong type"), None
        problem, item = _text_row(row, responses, input_column) if form == "text" else _conversation_row(row, responses)
        if problem is None and layout == "unpaired":
            problem, label = _label(row)
            item = None if problem else {**item, "label": label}
        if problem is None and layout == "paired" and item["chosen"] == item["rejected"]:
            problem = "rejected", "is the same as chosen (the pair prefers nothing)", "identical pair"
        return problem, item

    report = DataReport(source=source, columns=dict.fromkeys((*PAIRED, *UNPAIRED), TRL_COLUMNS))
    clean = report.keep_each(rows, check, lambda item: repr(sorted(item.items())), "", strict=strict)
    return clean, report, layout, form


def preference_features(layout: str, form: str):
    """``datasets.Features`` of ``check_preference_rows``' clean rows for a ``layout`` and ``form``."""
    import datasets

    text = datasets.Value("string")
    turns = [{"role": text, "content": text}]
    value = text if form == "text" else turns
    columns = {"prompt": value}
    if form == "text":
        columns["input"] = text
    columns.update({c: value for c in (PAIRED[1:] if layout == "paired" else UNPAIRED[1:2])})
    if layout == "unpaired":
        columns["label"] = datasets.Value("bool")
    return datasets.Features(columns)


def load_preference_data(
    source: str,
    *,
    split: str = DEFAULTS.dataset_split,
    config: str | None = DEFAULTS.dataset_config,
    form: str = "auto",
    input_column: str = DEFAULTS.input_column,
    strict: bool = DEFAULTS.strict,
):
    """Read and check preference rows into a ``datasets.Dataset``.

    Args:
        source, split, config: as ``row_files.read_rows`` (a local .json/.jsonl/.csv/.parquet file, a folder or a
            Hub id such as ``trl-lib/ultrafeedback_binarized``); defaults from ``config.DEFAULTS``.
        form, input_column, strict: as ``check_preference_rows``.

    Returns:
        ``(dataset, report, layout, form)``: the clean rows (``preference_features``), the printed ``DataReport``,
        ``"paired"`` / ``"unpaired"`` and ``"text"`` / ``"conversation"``.

    Raises:
        row_files.DataError: ``"<source>: no usable rows"`` when the source is empty or every row was dropped; or as
            ``read_rows`` / ``check_preference_rows``.
    """
    import datasets

    rows = read_rows(source, split=split, config=config)
    clean, report, layout, form = (
        check_preference_rows(rows, form=form, input_column=input_column, strict=strict, source=source)
        if rows
        else ([], DataReport(source=source), None, None)
    )
    report.print_and_require(clean)
    return datasets.Dataset.from_list(clean, features=preference_features(layout, form)), report, layout, form
