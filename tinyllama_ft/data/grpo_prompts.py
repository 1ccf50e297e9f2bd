"""GRPO's prompt rows: a prompt and its reference answer, read (``row_files``) and checked as instruction rows are.

A prompt is text or chat messages ending with a user turn (``prompt_column``); the reference is a number or text
(``answer_column``, also kept as ``answer``, the column the built-in rewards read). Every column reaches the rewards
by name with its values as read. ``grpo_prompts`` puts the prompts in the run's form, each asking for the answer layout
(``with_suffix``, ``LAYOUT_SUFFIX``): the Alpaca template's text, or messages that TRL renders with the chat template;
``drop_long_prompts`` drops those TRL could not fit.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from ..config.finetune import DEFAULTS
from ..models.run_record import with_suffix
from .alpaca_prompts import format_prompt
from .answers import LAYOUT_INSTRUCTION
from .conversations import conversation_problem
from .instructions import DataReport, _field_problem, mapped_by
from .row_files import DataError, read_rows
from .tokenization import without_rows

#: The reference answer's column in the rows TRL gets (the keyword every reward receives it by).
ANSWER = "answer"
#: A prompt's forms: a string, or a list of chat messages.
FORMS = ("text", "conversation")
#: What every GRPO prompt gets after its question (``with_suffix``): a line asking for the layout the rewards check.
LAYOUT_SUFFIX = f"\n{LAYOUT_INSTRUCTION}"
#: The names TRL passes a reward besides the rows' columns (``prompts``, ``completions``, ...) or leaves out of them
#: (``completion``, ``completion_ids``): a column under one of them would be lost or clash.
REWARD_ARGUMENTS = (
    "prompts",
    "completions",
    "completion",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
)


def _answer_problem(row: dict, column: str) -> tuple[tuple[str, str, str] | None, Any]:
    """The reference as read: a number (``42``, ``2.5``) or a non-blank string."""
    value = row.get(column)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None, value
    problem = _field_problem(row, column, True)
    return (problem, None) if problem else (None, value)


def _row_problem(row: dict, prompt_column: str, answer_column: str, form: str | None):
    """``(problem, kind, clean)``: the first fault as ``(field, reason, kind)``, or None with the prompt's form and
    the clean row."""
    kind = "conversation" if isinstance(row.get(prompt_column), list) else "text"
    if kind == "conversation":
        problem, prompt = conversation_problem(row, column=prompt_column, last="user")  # the completion answers it
    else:
        problem, prompt = _field_problem(row, prompt_column, True), row.get(prompt_column)
    if problem is None and form not in (None, kind):
        problem = prompt_column, f"is {kind}, but the first rows' prompts are {form}", "wrong type"
    if problem is None:
        problem, answer = _answer_problem(row, answer_column)
    return (problem, None, None) if problem else (None, kind, {**row, "prompt": prompt, ANSWER: answer})


def _check_column_names(row: dict, prompt_column: str, answer_column: str, source: str) -> None:
    """Raise ``DataError`` for a column the rewards could not receive by its name (``REWARD_ARGUMENTS``), or a ``prompt``
    / ``answer`` column that the prompt or the reference would replace."""
    for name, column in (("prompt", prompt_column), (ANSWER, answer_column)):
        if column != name and name in row:
            raise DataError(
                f"{source}: the rows have a column {name!r} besides {name}_column={column!r}, and the run's {name} "
                f"(what TRL and the built-in rewards read as {name!r}) would replace it: rename that column, or set "
                f"{name}_column={name!r}"
            )
    clash = [c for c in row if c in REWARD_ARGUMENTS]
    if clash:
        raise DataError(
            f"{source}: column {clash[0]!r}: TRL passes every reward an argument of that name, so the column could "
            f"not reach the rewards: rename it"
        )


def check_prompt_rows(
    rows: Iterable[Any],
    *,
    prompt_column: str = DEFAULTS.prompt_column,
    answer_column: str = DEFAULTS.answer_column,
    strict: bool = DEFAULTS.strict,
    source: str = "rows",
) -> tuple[list[dict[str, Any]], DataReport, str | None]:
    """Keep rows with a usable prompt and reference answer, once each.

    Args:
        rows: raw rows (``row_files.read_rows``).
        prompt_column: the prompt's column: a non-blank string, or chat messages ending with a user turn.
        answer_column: the reference's column: a number or a non-blank string.
        strict: raise on the first bad row instead of dropping it.
        source: the file or dataset id, for messages.

    Returns:
        ``(clean, report, form)``: each kept row with every column as read, ``prompt`` (str | messages, the
        ``prompt_column``'s) and ``answer`` (the ``answer_column``'s value as read: a number or a string; the column
        keeps its own name too); the ``DataReport`` (kinds:
        ``"missing"``, ``"null"``, ``"wrong type"``, ``"empty"``, ``"out of order"``, ``"duplicate"``, ...); the form
        of the first good row's prompt (``FORMS``; a row of the other form is a ``"wrong type"``), None if none.

    Raises:
        row_files.DataError: with ``strict=True``, at the first bad row, naming ``source``, its 0-based index and the
            field (a missing one with the row's columns and the parameter that names it); a row with a column named
            as an argument TRL passes every reward (``REWARD_ARGUMENTS``), or a ``prompt`` / ``answer`` column
            besides another ``prompt_column`` / ``answer_column`` (naming the column).
    """
    form = None

    def check(row):  # the first good row's form is the rows' form
        nonlocal form
        _check_column_names(row, prompt_column, answer_column, source)
        problem, kind, item = _row_problem(row, prompt_column, answer_column, form)
        form = form or kind
        return problem, item

    columns = {prompt_column: mapped_by("prompt_column"), answer_column: mapped_by("answer_column")}
    report = DataReport(source=source, columns=columns)
    same = " (same prompt and answer)"  # 5 and "5" are the same answer

    def key(item):
        return json.dumps([item["prompt"], str(item[ANSWER])])

    clean = report.keep_each(rows, check, key, same, strict=strict)
    return clean, report, form


#: A JSON number literal (no leading zeros, no NaN / Infinity): what a CSV cell must be to be read as a number.
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")


def csv_numbers(rows: list[Any], *, keep: Iterable[str] = ()) -> list[Any]:
    """CSV rows (every value text) with each column whose every non-empty cell is a JSON number literal read as numbers
    (``"134"`` -> 134, ``"2.5"`` -> 2.5; an empty cell there -> None), as a JSON file holds them and as ``datasets``
    reads a CSV's numeric column, so a reward comparing ``answer`` with a number sees one. A column with any other
    cell (``"3/4"``, ``"007"``, ``"1,000"``) stays text, as do the ``keep`` columns (the prompt's); unreadable rows
    (``row_files.UnreadableRow``) pass as they are."""
    dicts = [row for row in rows if isinstance(row, dict)]
    columns = dict.fromkeys(name for row in dicts for name in row)
    numeric = [
        name
        for name in columns
        if name not in set(keep)
        and any(row.get(name) for row in dicts)
        and all(_NUMBER.fullmatch(row[name]) for row in dicts if row.get(name))
    ]
    for row in dicts:
        for name in numeric:
            if name in row:
                row[name] = json.loads(row[name]) if row[name] else None
    return rows


def load_prompt_rows(
    source: str,
    *,
    split: str = DEFAULTS.dataset_split,
    config: str | None = DEFAULTS.dataset_config,
    prompt_column: str = DEFAULTS.prompt_column,
    answer_column: str = DEFAULTS.answer_column,
    strict: bool = DEFAULTS.strict,
) -> tuple[list[dict[str, Any]], DataReport, str]:
    """``(clean, report, form)`` of GRPO prompt rows read (``row_files.read_rows``: a local file or a Hub id such as
    ``openai/gsm8k`` with ``config="main"``; a CSV's numeric columns as numbers, ``csv_numbers``) and checked
    (``check_prompt_rows``); the report is printed.

    Raises:
        row_files.DataError: ``"<source>: no usable rows"`` when the source is empty or every row was dropped; or as
            ``read_rows`` / ``check_prompt_rows``.
    """
    rows = read_rows(source, split=split, config=config)
    if str(source).lower().endswith(".csv"):  # text cells: a numeric column is read as numbers, as JSON holds them
        rows = csv_numbers(rows, keep=[prompt_column])
    clean, report, form = check_prompt_rows(
        rows, prompt_column=prompt_column, answer_column=answer_column, strict=strict, source=source
    )
    report.print_and_require(clean)
    return clean, report, form


def _kind(value) -> str:
    """A value's kind for Arrow: its type's name (``int``, ``str``, ``datetime``, ...), ``list[<kind>]`` (a list of one
    scalar kind), or ``nested`` (a dict, a list of mixed or nested values)."""
    if isinstance(value, list):
        inner = {_kind(v) for v in value if v is not None}
        if len(inner) <= 1 and not any(k == "nested" or k.startswith("list") for k in inner):
            return f"list[{''.join(inner)}]"
    return "nested" if isinstance(value, (dict, list, tuple)) else type(value).__name__


def _needs_json(values: list) -> bool:
    kinds = {_kind(v) for v in values if v is not None}
    return len(kinds) > 1 or "nested" in kinds


def prompt_dataset(rows: list[dict[str, Any]]):
    """Rows -> a ``datasets.Dataset`` whose every value reads back as it was read (a number stays a number, an int an
    int). A column whose values (None aside) share one scalar kind, or are lists of one, is stored in Arrow's type for
    it; any other (numbers and text mixed, ints and floats, dicts, nested lists) is stored as JSON (``datasets``'
    ``Json`` feature), which gives back each value exactly. A column some rows lack is None there. ``prompt`` (text or
    chat messages) keeps Arrow's type, as TRL reads it. In a JSON column a value JSON cannot write (a date beside
    numbers) is its ``str``."""
    import datasets
    from datasets.features import Json

    names = list(dict.fromkeys(name for row in rows for name in row))
    columns = {name: [row.get(name) for row in rows] for name in names}
    as_json = [name for name, values in columns.items() if name != "prompt" and _needs_json(values)]
    native = datasets.Dataset.from_dict({n: v for n, v in columns.items() if n not in as_json}).features
    features = datasets.Features({n: Json() if n in as_json else native[n] for n in names})
    for name in as_json:  # encoded here, so a string that reads as JSON ("134") stays a string
        columns[name] = [None if v is None else json.dumps(v, ensure_ascii=False, default=str) for v in columns[name]]
    return datasets.Dataset.from_dict(columns, features=features)


def grpo_prompts(
    rows: Iterable[dict[str, Any]],
    *,
    dataset_format: str = "auto",
    template: str = DEFAULTS.template,
    suffix: str = LAYOUT_SUFFIX,
):
    """The prompt rows TRL's ``GRPOTrainer`` samples from: ``prompt`` (text or messages), ``answer`` and every other
    column of the rows, which TRL passes each reward by name.

    Args:
        rows: ``check_prompt_rows``' clean rows (one form), or any rows with ``prompt`` and ``answer``.
        dataset_format: ``"alpaca"``: each prompt is text, filled into the Alpaca ``template`` as the instruction
            (TRL tokenizes it, special tokens added as the tokenizer adds them); ``"messages"``: a text prompt becomes
            one user turn, and TRL renders the messages with the tokenizer's chat template; ``"auto"``: text prompts
            as ``"alpaca"``, chat prompts as ``"messages"``.
        template: the Alpaca template (``alpaca_prompts.format_prompt``).
        suffix: added after each question (``with_suffix``; a chat prompt: to its last user turn), asking for the
            answer layout the rewards check: ``LAYOUT_SUFFIX``; ``""`` adds none. The adapter's record keeps it.

    Returns:
        A ``datasets.Dataset`` with ``prompt`` (strings, or lists of ``{"role", "content"}``), ``answer`` and the rows'
        other columns, each value as read (``prompt_dataset``: a number stays a number).

    Raises:
        ValueError: ``dataset_format="alpaca"`` with chat prompts (naming the first row), or an unknown
            ``dataset_format``.
    """
    if dataset_format not in ("auto", "alpaca", "messages"):
        raise ValueError(f"dataset_format={dataset_format!r}: GRPO prompts are 'alpaca', 'messages' or 'auto'")
    out = []
    for index, row in enumerate(rows):
        prompt = row["prompt"]
        if isinstance(prompt, str) and dataset_format == "messages":
            prompt = [{"role": "user", "content": with_suffix(prompt, suffix)}]
        elif isinstance(prompt, str):
            prompt = format_prompt(with_suffix(prompt, suffix), "", "", template)
        elif dataset_format == "alpaca":
            raise ValueError(
                f"row {index}: the prompt is chat messages, and dataset_format='alpaca' fills text into the Alpaca "
                "template: use dataset_format='messages' or 'auto'"
            )
        else:
            prompt = with_suffix(prompt, suffix)
        out.append({"prompt": prompt, **{k: v for k, v in row.items() if k != "prompt"}})
    return prompt_dataset(out)


def prompt_token_ids(tokenizer, prompt) -> list[int]:
    """A prompt's token ids as TRL's ``GRPOTrainer`` tokenizes it: text with the tokenizer's own special tokens,
    messages through the chat template with the assistant's header added."""
    if isinstance(prompt, str):
        return tokenizer(prompt)["input_ids"]
    return list(
        tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    )


def drop_long_prompts(dataset, tokenizer, *, max_prompt_tokens: int):
    """Drop the prompts longer than ``max_prompt_tokens`` (``max_seq_length - max_completion_length``): TRL's GRPO does
    not cut them, and a cut question has no answer. Returns ``(kept, dropped)``: ``grpo_prompts``' dataset without those
    rows (measured with the run's tokenizer, its chat template set for messages), and their 0-based indices. Raises
    ValueError: every prompt is too long (naming the shortest's length)."""
    lengths = [len(prompt_token_ids(tokenizer, p)) for p in dataset["prompt"]]
    dropped = [i for i, n in enumerate(lengths) if n > max_prompt_tokens]
    if dropped and len(dropped) == len(lengths):
        raise ValueError(
            f"every prompt is longer than {max_prompt_tokens} tokens (max_seq_length - max_completion_length; the "
            f"shortest has {min(lengths)}): raise max_seq_length or lower max_completion_length"
        )
    return without_rows(dataset, dropped), dropped
