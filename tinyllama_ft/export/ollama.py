"""An Ollama ``Modelfile`` beside an exported GGUF: the trained prompt format and its stop strings.

Without one, Ollama prompts the model in a template it never saw. An Alpaca model's Modelfile pins its ``TEMPLATE``
and stop strings (``alpaca_chat_template``); a chat model's has no ``TEMPLATE`` (Ollama reads the chat template the
GGUF carries), unless its run added text after each question (``chat_ollama_template``), and stops on its end-of-turn
token and EOS. ``ollama create my-model -f <folder>/Modelfile`` uses it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from ..data.alpaca_chat_template import ollama_template, stop_strings

#: The Modelfile's name, as ``ollama create -f`` expects by default.
MODELFILE = "Modelfile"


def _quote(text: str) -> str:
    """A Modelfile string: JSON's escaping is the double-quoted form Ollama's parser reads."""
    return json.dumps(text, ensure_ascii=False)


def modelfile_text(
    *,
    gguf_name: str,
    eos_token: str,
    template: str | None = "alpaca",
    temperature: float | None = None,
    stop_tokens: Sequence[str] = (),
    prompt_suffix: str = "",
    chat_body: str | None = None,
) -> str:
    """The Modelfile for a GGUF in the same folder.

    Args:
        gguf_name: the GGUF's file name (``FROM ./<gguf_name>``, relative to the Modelfile).
        eos_token: the tokenizer's EOS text.
        template: the prompt template trained with (``"alpaca"``, ``"alpaca_no_input"``), or None for a chat model
            (no ``TEMPLATE`` line: Ollama takes the GGUF's chat template).
        temperature: ``PARAMETER temperature`` when given; None leaves Ollama's default.
        stop_tokens: a chat model's stop strings (end-of-turn token first); ``eos_token`` is added when missing.
        prompt_suffix: an Alpaca model's text after each instruction (a record's ``prompt_suffix``;
            ``alpaca_chat_template.ollama_template``).
        chat_body: a chat model's ``TEMPLATE`` (``chat_ollama_template``), or None for the GGUF's own.

    Returns:
        The Modelfile's text (``FROM``, an Alpaca ``TEMPLATE`` in triple quotes, one ``PARAMETER stop`` each).

    Raises:
        ValueError: unknown ``template``; empty ``eos_token``; a template holding ``\"\"\"`` (cannot be quoted).
    """
    lines = [f"FROM ./{gguf_name}"]
    if template is None:
        if not eos_token:
            raise ValueError("eos_token is empty: a chat model's answers end with its end-of-turn token and EOS")
        body, stops = chat_body, list(dict.fromkeys([*stop_tokens, eos_token]))
    else:
        body, stops = ollama_template(template, prompt_suffix), stop_strings(eos_token, template)
    if body is not None:
        if '"""' in body:
            raise ValueError('the prompt template holds """, which an Ollama TEMPLATE cannot quote')
        lines.append(f'TEMPLATE """{body}"""')
    lines += [f"PARAMETER stop {_quote(stop)}" for stop in stops]
    if temperature is not None:
        lines.append(f"PARAMETER temperature {temperature}")
    return "\n".join(lines) + "\n"


def chat_ollama_template(tokenizer) -> str:
    """A one-turn Ollama ``TEMPLATE`` rendered from ``tokenizer``'s chat template (``chat_templates.chat_prompt`` of
    one user message), for a chat model whose exported template adds text after each question
    (``chat_templates.suffixed_chat_template``), which Ollama's own reading of the GGUF's template would lose.
    ``{{ .Prompt }}`` takes the message and ``{{ .Response }}`` follows the assistant's header; a leading BOS that the
    tokenizer adds itself is left to the GGUF's tokenizer, as the Alpaca ``TEMPLATE`` leaves it.

    Raises:
        ValueError: the rendered prompt holds ``{{`` (which Go would read as template code).
    """
    from ..models.chat_templates import chat_prompt

    mark = "\x00PROMPT\x00"
    before, _, after = chat_prompt(tokenizer, mark).partition(mark)
    adds_bos = tokenizer.bos_token_id is not None and tokenizer("a")["input_ids"][:1] == [tokenizer.bos_token_id]
    if adds_bos and before.startswith(tokenizer.bos_token):  # the GGUF's tokenizer adds it, as this one does
        before = before[len(tokenizer.bos_token) :]
    if "{{" in before + after:
        raise ValueError("the chat template's prompt holds '{{', which an Ollama TEMPLATE would read as code")
    return f"{before}{{{{ .Prompt }}}}{after}{{{{ .Response }}}}"


def write_modelfile(
    *,
    gguf_path: str | os.PathLike,
    eos_token: str,
    template: str | None = "alpaca",
    stop_tokens: Sequence[str] = (),
    prompt_suffix: str = "",
    chat_body: str | None = None,
) -> Path:
    """Write ``Modelfile`` beside the exported ``gguf_path`` (a temporary name, then a rename) and return its path;
    the other arguments and the ValueError as ``modelfile_text``."""
    gguf_path = Path(gguf_path)
    target = gguf_path.parent / MODELFILE
    text = modelfile_text(
        gguf_name=gguf_path.name,
        eos_token=eos_token,
        template=template,
        stop_tokens=stop_tokens,
        prompt_suffix=prompt_suffix,
        chat_body=chat_body,
    )
    tmp = target.with_name(f".{MODELFILE}.partial")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    return target
