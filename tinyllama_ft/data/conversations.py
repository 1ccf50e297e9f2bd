"""Conversation data: rows as OpenAI-style ``messages`` or ShareGPT ``conversations``, checked and normalised.

Rows reach the chat template as ``{"messages": [{"role", "content"}, ...]}`` (roles system / user / assistant;
ShareGPT roles mapped as TRL's ``maybe_convert_to_chatml`` maps them); Alpaca rows become one-turn conversations.
Every row is checked as ``instructions.check_rows`` checks Alpaca rows (same ``BadRow`` / ``DataReport``, same
``strict``): a bad row is dropped and counted by kind, or named by row and field. Text is kept as read.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..config.finetune import (  # dataset_format values; "auto" reads the first object's columns
    DATASET_FORMATS,
    DEFAULTS,
)
from .instructions import BadRow, DataReport, check_rows
from .row_files import DataError, read_rows

#: The turns' column of each conversation layout (``dataset_format``).
DEFAULT_COLUMN = {"messages": "messages", "sharegpt": "conversations"}
#: What a row lacking its layout's column is told.
LAYOUT_HINT = (
    "set dataset_format (--dataset_format on the command line): 'messages' reads a messages column, 'sharegpt' a "
    "conversations column, 'alpaca' instruction / input / output"
)
#: Roles of the normalised ``messages``.
ROLES = ("system", "user", "assistant")
#: ShareGPT ``from`` values and the role each becomes (TRL's ``maybe_convert_to_chatml`` maps the first three).
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "user": "user", "assistant": "assistant"}


def alpaca_to_messages(instruction: str, input: str = "", output: str = "") -> list[dict[str, str]]:
    """One Alpaca row as a one-turn conversation: ``[{"role": "user", "content": instruction [+ "\\n\\n" + input]},
    {"role": "assistant", "content": output}]`` (``input`` appended after a blank line when not empty)."""
    user = f"{instruction}\n\n{input}" if input else instruction
    return [{"role": "user", "content": user}, {"role": "assistant", "content": output}]


def detect_format(rows: Iterable[Any], source: str = "rows") -> str:
    """``"messages"``, ``"sharegpt"`` or ``"alpaca"``: the layout of the first row that is an object. Raises
    row_files.DataError: no row is an object holding ``messages``, ``conversations`` or ``instruction`` (naming
    ``source``, the file or dataset id, and the row's columns)."""
    for index, row in enumerate(rows):
        if isinstance(row, dict):
            if "messages" in row:
                return "messages"
            if "conversations" in row:
                return "sharegpt"
            if "instruction" in row:
                return "alpaca"
            raise DataError(
                f"{source}: dataset_format='auto': row {index} has the columns {sorted(row)}; expected 'messages', "
                f"'conversations' (ShareGPT) or 'instruction' (Alpaca): {LAYOUT_HINT}"
            )
    raise DataError(f"{source}: dataset_format='auto': no row is an object, so the layout cannot be read")


def _turn_problem(turn: Any, j: int, column: str, sharegpt: bool) -> tuple[tuple[str, str, str] | None, dict | None]:
    """``(problem, normalised turn)`` for turn ``j``: exactly one of the two is None."""
    where = f"{column}[{j}]"
    if not isinstance(turn, dict):
        return (where, f"is of type {type(turn).__name__}, not an object", "wrong type"), None
    role_key, content_key = ("from", "value") if sharegpt else ("role", "content")
    for key in (role_key, content_key):
        value = turn.get(key)
        if value is None:
            why = ("is missing", "missing") if key not in turn else ("is None", "null")
            return (f"{where}.{key}", *why), None
        if not isinstance(value, str):
            return (f"{where}.{key}", f"is of type {type(value).__name__}, not a string", "wrong type"), None
    role = turn[role_key]
    known = SHAREGPT_ROLES if sharegpt else {r: r for r in ROLES}
    if role not in known:
        return (f"{where}.{role_key}", f"is {role!r}, not one of {sorted(known)}", "unknown role"), None
    content = turn[content_key]
    if not content.strip():
        return (f"{where}.{content_key}", "is whitespace-only" if content else "is empty", "empty turn"), None
    return None, {"role": known[role], "content": content}


def _order_problem(messages: list[dict[str, str]], column: str, last: str = "assistant") -> tuple[str, str, str] | None:
    """The first turn out of order: system only first, then user/assistant alternating from user, ``last``'s turn last
    (the assistant's answer; a GRPO prompt's user question, which the completion answers)."""
    start = 1 if messages[0]["role"] == "system" else 0
    for j, message in enumerate(messages[start:], start=start):
        expected = "user" if (j - start) % 2 == 0 else "assistant"
        if message["role"] != expected:
            where = "a system turn is allowed only first" if message["role"] == "system" else f"expected {expected!r}"
            return f"{column}[{j}]", f"is a {message['role']!r} turn out of order ({where})", "out of order"
    if last == "assistant" and not any(m["role"] == "assistant" for m in messages):
        return column, "has no assistant turn", "no assistant turn"
    if messages[-1]["role"] != last:
        return f"{column}[{len(messages) - 1}]", f"is the last turn but not the {last}'s", "out of order"
    return None


def conversation_problem(
    row: dict, *, dataset_format: str = "messages", column: str | None = None, last: str = "assistant"
) -> tuple[tuple[str, str, str] | None, list[dict[str, str]] | None]:
    """``(problem, messages)`` of one raw row (a dict) in ``dataset_format`` ``"messages"`` or ``"sharegpt"``, its
    turns in ``column`` (default ``"messages"`` / ``"conversations"``), ``last``'s turn last (``_order_problem``):
    ``problem`` the first fault as ``(field, reason, kind)`` and ``messages`` None, or ``problem`` None and
    ``messages`` the normalised turns."""
    sharegpt = dataset_format == "sharegpt"
    column = column or DEFAULT_COLUMN[dataset_format]
    problem, messages = turns_problem(row, column, sharegpt=sharegpt)
    if problem:
        return problem, None
    problem = _order_problem(messages, column, last)
    return (problem, None) if problem else (None, messages)


def turns_problem(
    row: dict, column: str, *, sharegpt: bool = False
) -> tuple[tuple[str, str, str] | None, list[dict[str, str]] | None]:
    """Check the list of turns in ``row[column]``, each turn on its own (order is ``conversation_problem``'s).

    Args:
        row: a row (a dict). column: the column holding the turns. sharegpt: turns are ``from``/``value``.

    Returns:
        ``(problem, messages)``: the first fault as ``(field, reason, kind)`` (field ``column`` or
        ``column[j].key``) and None, or None and the normalised turns (at least one).
    """
    turns = row.get(column)
    if turns is None:
        return ((column, "is missing", "missing") if column not in row else (column, "is None", "null")), None
    if not isinstance(turns, list):
        return (column, f"is of type {type(turns).__name__}, not a list of turns", "wrong type"), None
    if not turns:
        return (column, "has no turns", "empty turn"), None
    messages = []
    for j, turn in enumerate(turns):
        problem, message = _turn_problem(turn, j, column, sharegpt)
        if problem:
            return problem, None
        messages.append(message)
    return None, messages


def check_conversations(
    rows: Iterable[Any],
    *,
    dataset_format: str = "auto",
    strict: bool = DEFAULTS.strict,
    source: str = "rows",
) -> tuple[list[dict[str, list[dict[str, str]]]], DataReport]:
    """Keep well-formed conversations, normalised to ``{"messages": [...]}``, once each.

    Args:
        rows: raw rows, e.g. from ``row_files.read_rows`` (a list; ``auto`` reads the first object's columns).
        dataset_format: one of ``DATASET_FORMATS`` (default "auto": the first object's columns decide). ``"alpaca"`` checks the rows with ``instructions.check_rows`` and turns
            each kept row into a one-turn conversation (``alpaca_to_messages``).
        strict: raise on the first bad row instead of dropping it (default ``DEFAULTS.strict``).
        source: name used in messages (the file or dataset id).

    Returns:
        ``(clean, report)``: ``clean`` rows (the turns read from ``"messages"``, or ShareGPT's ``"conversations"``) as ``{"messages": [{"role", "content"}, ...]}``; ``report`` counts rows
        read, kept and dropped per kind (``"unknown role"``, ``"empty turn"``, ``"wrong type"``, ``"missing"``,
        ``"null"``, ``"no assistant turn"``, ``"out of order"``, ``"duplicate"``, ``"not an object"``,
        ``"unparseable"``).

    Raises:
        ValueError: unknown ``dataset_format``. row_files.DataError: the layout cannot be detected (``auto``); with
            ``strict=True``, at the first bad row, naming ``source``, the 0-based row index and the field (e.g.
            ``messages[2].role``; a missing column with the row's columns and ``dataset_format``).
    """
    if dataset_format not in DATASET_FORMATS:
        raise ValueError(f"dataset_format={dataset_format!r} is not one of {DATASET_FORMATS}")
    rows = list(rows)
    if dataset_format == "auto":
        dataset_format = detect_format(rows, source)
    if dataset_format == "alpaca":
        clean, report = check_rows(rows, strict=strict, source=source)
        return [{"messages": alpaca_to_messages(r["instruction"], r["input"], r["output"])} for r in clean], report
    report = DataReport(source=source, columns={DEFAULT_COLUMN[dataset_format]: LAYOUT_HINT})
    messages = report.keep_each(
        rows,
        lambda row: conversation_problem(row, dataset_format=dataset_format),
        lambda turns: tuple((m["role"], m["content"]) for m in turns),
        " (same turns)",
        strict=strict,
    )
    return [{"messages": turns} for turns in messages], report


def load_conversations(
    source: str = DEFAULTS.dataset,
    *,
    split: str = DEFAULTS.dataset_split,
    config: str | None = DEFAULTS.dataset_config,
    dataset_format: str = "auto",
    strict: bool = DEFAULTS.strict,
):
    """Read and check conversation rows (or Alpaca rows, as one-turn conversations) into a ``datasets.Dataset``.

    Args:
        source, split, config: as ``row_files.read_rows`` (a local ``.json``/``.jsonl``/``.parquet`` file, a folder or
            a Hub id); defaults from ``config.DEFAULTS``.
        dataset_format, strict: as ``check_conversations``.

    Returns:
        ``(dataset, report)``: a ``datasets.Dataset`` with one column ``messages`` and the ``DataReport`` (printed).

    Raises:
        row_files.DataError: ``"<source>: no usable rows"`` when the source is empty or every row was dropped (the
            message gives the first reasons); or as ``row_files.read_rows`` / ``check_conversations``.
    """
    import datasets

    rows = read_rows(source, split=split, config=config)
    clean, report = (
        check_conversations(rows, dataset_format=dataset_format, strict=strict, source=source)
        if rows
        else ([], DataReport(source=source))
    )
    report.print_and_require(clean)
    turn = {"role": datasets.Value("string"), "content": datasets.Value("string")}
    return datasets.Dataset.from_list(clean, features=datasets.Features({"messages": [turn]})), report


def load_conversation_sources(
    sources: Sequence[str],
    *,
    split: str = DEFAULTS.dataset_split,
    config: str | None = DEFAULTS.dataset_config,
    dataset_format: str = "auto",
    strict: bool = DEFAULTS.strict,
):
    """``load_conversations`` on each source in turn (``dataset``, then ``extra_datasets``), concatenated in order.

    Args:
        sources: Hub ids or local files (at least one); each is read with ``dataset_format`` (``"auto"``: each
            source's own layout, so Alpaca rows and ``messages`` rows can be mixed).
        split, config, dataset_format, strict: as ``load_conversations`` (defaults from ``config.DEFAULTS``).

    Returns:
        ``(dataset, report)``: one ``messages`` dataset; one ``DataReport`` over all sources (``source`` joins
        their names with " + ", counts are summed, each bad row keeps its 0-based index in its own source and
        names that source in its reason). Each source's own report is printed as it is read.

    Raises:
        ValueError: no source given; as ``load_conversations`` (a source with no usable row names itself).
    """
    import datasets

    if not sources:
        raise ValueError("load_conversation_sources: no source given (set dataset)")
    parts, report = [], DataReport(source=" + ".join(sources))
    for source in sources:
        part, own = load_conversations(source, split=split, config=config, dataset_format=dataset_format, strict=strict)
        parts.append(part)
        report.total += own.total
        report.kept += own.kept
        report.bad += [BadRow(b.index, b.field, f"{b.reason} (in {source})", b.kind) for b in own.bad]
    return (parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)), report
