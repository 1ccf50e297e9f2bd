"""Alpaca prompt templates, EOS handling and a batched ``datasets.map`` function.

The article's template (``shared/ARTICLE.md``) is the standard Alpaca prompt *with* its Input block,
used for every row; the original Alpaca project also has a no-input variant for rows whose input is
empty. Training text = template filled with the row + the tokenizer's EOS token, exactly once ("without
it generation goes on forever"). Generation uses the same template with an empty response.
"""

from __future__ import annotations

from typing import Callable

from ..config.finetune import DEFAULTS

ALPACA_PROMPT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n"
    "### Input:\n{input}\n\n"
    "### Response:\n{output}"
)

ALPACA_PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n"
    "### Response:\n{output}"
)

#: Marker that starts the model's answer in every template.
RESPONSE_MARKER = "### Response:\n"


def format_prompt(instruction: str, input: str = "", output: str = "", template: str = DEFAULTS.template) -> str:
    """The Alpaca template filled with every field exactly as given (no stripping, no Unicode normalization).

    Args:
        instruction: the task. input: extra context; ``""`` when there is none.
        output: the response; ``""`` for a generation prompt (the text then ends with ``"### Response:\\n"``).
        template: ``"alpaca"`` (the article's: Input block always) or ``"alpaca_no_input"`` (the original
            Alpaca no-input variant when ``input`` is empty, the Input block otherwise).

    Raises:
        ValueError: unknown ``template``.
    """
    if template not in ("alpaca", "alpaca_no_input"):
        raise ValueError(f"template={template!r} is not one of 'alpaca', 'alpaca_no_input'")
    if template == "alpaca_no_input" and not input:
        return ALPACA_PROMPT_NO_INPUT.format(instruction=instruction, output=output)
    return ALPACA_PROMPT.format(instruction=instruction, input=input, output=output)


def add_eos(text: str, eos_token: str) -> str:
    """``text`` ending in ``eos_token`` (the tokenizer's EOS text, ``"</s>"`` for Llama) exactly once: appended unless
    already there. Raises ValueError: ``eos_token`` is empty or None (the tokenizer has no EOS)."""
    if not eos_token:
        raise ValueError("the tokenizer has no eos_token: training text needs one so generation stops")
    return text if text.endswith(eos_token) else text + eos_token


def training_text(instruction: str, input: str, output: str, eos_token: str, template: str = DEFAULTS.template) -> str:
    """One training sample: ``format_prompt(instruction, input, output, template)`` ending in ``eos_token`` exactly once
    (``add_eos``); ``input`` may be ``""``. Raises ValueError: unknown ``template``, or no ``eos_token``."""
    return add_eos(format_prompt(instruction, input, output, template), eos_token)


def make_formatting_func(
    eos_token: str,
    *,
    template: str = DEFAULTS.template,
    instruction_column: str = DEFAULTS.instruction_column,
    input_column: str = DEFAULTS.input_column,
    output_column: str = DEFAULTS.output_column,
    text_column: str = "text",
) -> Callable[[dict[str, list]], dict[str, list[str]]]:
    """A batched ``datasets.Dataset.map`` function: columns of a batch -> ``{"text": [...]}``.

    Args:
        eos_token: the tokenizer's EOS text (``tokenizer.eos_token``).
        template: as ``format_prompt``.
        instruction_column, input_column, output_column: the dataset's column names. A missing input
            column, or a ``None`` input, counts as empty.
        text_column: the column written (TRL's ``dataset_text_field``).

    Returns:
        ``f(batch) -> {text_column: list of str}``, for ``dataset.map(f, batched=True)``.

    Raises:
        ValueError: no ``eos_token`` (raised here, before any batch); unknown ``template`` (at the first batch).
    """
    add_eos("", eos_token)  # fail early on a tokenizer without EOS

    def formatting_func(batch: dict[str, list]) -> dict[str, list[str]]:
        n = len(batch[instruction_column])
        inputs = batch.get(input_column) or [""] * n
        texts = [
            training_text(ins, inp or "", out, eos_token, template)
            for ins, inp, out in zip(batch[instruction_column], inputs, batch[output_column])
        ]
        return {text_column: texts}

    return formatting_func
