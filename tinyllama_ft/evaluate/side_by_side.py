"""Base vs. fine-tuned answers side by side, from one PEFT model: the adapter switched off, then on.

The base answers come from the very weights being fine-tuned with the LoRA adapter disabled
(``with model.disable_adapter():``, PEFT's context manager), before any merge: no second model load,
no second copy in memory. Answers are greedy, so a row differs only because the adapter does.
"""

from __future__ import annotations

import html
from typing import Sequence

from .held_out import STOP_MAX_NEW_TOKENS, rows_within_positions, stopping_count


def compare_answers(
    model,
    tokenizer,
    rows: Sequence[dict],
    *,
    data_format,
    max_new_tokens: int = STOP_MAX_NEW_TOKENS,
    batch_size: int | None = None,
) -> list[dict]:
    """Answer each held-out row's prompt with the adapter off (base) and on (fine-tuned); one printed line first.

    Args:
        model: a PEFT model (``lora.add_lora`` output, trained or not), not merged.
        tokenizer, rows, data_format, max_new_tokens, batch_size: as ``held_out.greedy_answers``.

    Returns:
        One dict per row whose prompt and ``max_new_tokens`` fit the model's positions (others left out, said in
        one line: ``held_out.rows_within_positions``; [] without rows, said in one line): ``instruction`` (a
        conversation's last user message), ``input``, ``reference`` (``data_format.reference``; "" where its
        ``side_by_side_reference`` is False), ``base``, ``tuned`` (answer text), ``base_stopped``, ``tuned_stopped`` (a
        stop token within ``max_new_tokens``).

    Raises:
        TypeError: ``model`` has no ``disable_adapter`` (not a PEFT model, or already merged).
    """
    if not hasattr(model, "disable_adapter"):
        raise TypeError(f"{type(model).__name__} has no disable_adapter(): pass the PEFT model before any merge")
    if not rows:
        print("side-by-side answers skipped: no held-out rows")
        return []
    options = dict(max_new_tokens=max_new_tokens, data_format=data_format)
    rows = rows_within_positions(model, tokenizer, rows, what="side-by-side answers", **options)
    if not rows:  # none fits the model's positions (rows_within_positions said so)
        return []
    print(
        f"side-by-side answers: {len(rows)} held-out prompts, base (adapter off) then fine-tuned, "
        f"{max_new_tokens} new tokens at most...",
        flush=True,  # said before the minutes it can take on a CPU
    )
    options["batch_size"] = batch_size
    with model.disable_adapter():
        base = stopping_count(model, tokenizer, rows, **options)
    tuned = stopping_count(model, tokenizer, rows, **options)
    table = []
    for i, r in enumerate(rows):
        instruction, context = data_format.instruction(r)
        table.append(
            dict(
                instruction=instruction,
                input=context,
                reference=data_format.reference(r) if data_format.side_by_side_reference else "",
                base=base.answers[i].strip(),
                tuned=tuned.answers[i].strip(),
                base_stopped=base.ended[i],
                tuned_stopped=tuned.ended[i],
            )
        )
    return table


def answers_table(
    rows: Sequence[dict], *, width: int | None = 160, columns: Sequence[str] = ("instruction", "base", "tuned")
) -> str:
    """A Markdown table of ``compare_answers`` rows (plain text, no pandas).

    Args:
        rows: ``compare_answers`` output.
        width: characters kept per cell (longer text ends with "…"); None keeps all.
        columns: which keys, in order; an answer that did not end with EOS gets " [no EOS]".

    Returns:
        The table, one line per row plus a header.
    """

    def value(row, key):
        text = " ".join(str(row.get(key, "")).split()).replace("|", "\\|")
        if width is not None and len(text) > width:
            text = text[: width - 1] + "…"
        return text + (" [no EOS]" if row.get(f"{key}_stopped") is False else "")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(value(r, k) for k in columns) + " |" for r in rows]
    return "\n".join(lines)


def answers_html(rows: Sequence[dict], *, columns: Sequence[str] = ("instruction", "base", "tuned")) -> str:
    """The same table as HTML (for ``IPython.display.HTML`` in Jupyter), text escaped, newlines kept."""

    def cell(row, key):
        text = html.escape(str(row.get(key, ""))).replace("\n", "<br>")
        if row.get(f"{key}_stopped") is False:
            text += " <i>[no EOS]</i>"
        return f'<td style="text-align:left;vertical-align:top">{text}</td>'

    head = "".join(f'<th style="text-align:left">{html.escape(k)}</th>' for k in columns)
    body = "".join("<tr>" + "".join(cell(r, k) for k in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def show_answers(rows: Sequence[dict], *, columns: Sequence[str] = ("instruction", "base", "tuned")) -> None:
    """Display the table: in a Jupyter kernel (papermill too) one output holding the HTML table and, as its plain-text
    form, the Markdown table (what ``papermill --log-output`` and other text front ends show, where an ``HTML`` object
    alone reads ``<IPython.core.display.HTML object>``); the Markdown table printed elsewhere. No rows: nothing
    (``compare_answers`` said why)."""
    from ..machine.kernel import jupyter_kernel

    if not rows:
        return
    text = answers_table(rows, columns=columns)
    if jupyter_kernel() is not None:
        from IPython.display import display

        display({"text/html": answers_html(rows, columns=columns), "text/plain": text}, raw=True)
    else:
        print(text)
