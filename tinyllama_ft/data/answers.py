"""The answer layout GRPO rewards and checks read: a final line ``#### <number>``, as GSM8K writes its answers.

``####`` is one token in SmolLM2's and Llama-3's vocabularies and GSM8K's own marker, so a small model has seen it
and a reference in GSM8K's ``answer`` column parses with the same rule. ``extract_number`` reads the number after
the last ``####``, else the last number in the text (so correctness is scored apart from the layout);
``follows_layout`` says whether the text ends with the required line.
"""

from __future__ import annotations

import re
from decimal import Decimal

#: The marker before the final answer.
ANSWER_MARK = "####"
#: The sentence each GRPO prompt ends with (``grpo_prompts``), asking for the layout ``follows_layout`` checks.
LAYOUT_INSTRUCTION = f"Give the final answer on the last line as: {ANSWER_MARK} <number>"
#: A number as written in an answer: optional sign, digits with optional thousands commas, optional decimals.
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
_LAYOUT_LINE = re.compile(rf"^[ \t]*{re.escape(ANSWER_MARK)}[ \t]*\$?({NUMBER})[ \t]*\.?[ \t]*$")
_AFTER_MARK = re.compile(rf"{re.escape(ANSWER_MARK)}[ \t]*\$?({NUMBER})")


def follows_layout(text: str) -> bool:
    """Whether ``text``'s last non-empty line is ``#### <number>`` (spaces, a ``$`` before the number and a final
    period allowed; nothing else on the line).

    Args:
        text: a completion's text (special tokens removed).
    """
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return bool(lines) and _LAYOUT_LINE.match(lines[-1]) is not None


def extract_number(text: str) -> Decimal | None:
    """The answer ``text`` (a completion, or a reference such as GSM8K's ``answer``: "...\\n#### 72") gives, as a
    ``Decimal``: the number after its last ``####``, else its last number (commas dropped); None without a number."""
    marked = _AFTER_MARK.findall(text)
    found = marked or re.findall(NUMBER, text)
    return Decimal(found[-1].replace(",", "")) if found else None  # NUMBER's match, commas gone, always parses


def reference_number(value) -> Decimal | None:
    """A row's reference answer (``answer_column``: 42, "42", "3 + 4 = 7\\n#### 7") as a ``Decimal``: an int or float
    as it is, a string through ``extract_number``; None when it holds no number (bools and None included)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    return extract_number(str(value))
