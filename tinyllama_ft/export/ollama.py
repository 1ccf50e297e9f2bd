"""An Ollama ``Modelfile`` beside an exported GGUF: the trained prompt format and its stop strings.

Without one, Ollama (like llama-server) prompts the model in a template it never saw; the Modelfile pins the
Alpaca ``TEMPLATE`` (``alpaca_chat_template.ollama_template``) and ``PARAMETER stop`` for each stop string
(``alpaca_chat_template.stop_strings``). A chat model's Modelfile has no ``TEMPLATE``: Ollama then reads the chat template
the GGUF carries (the adapter's own), and the Modelfile stops on its end-of-turn token and EOS. Use it with::

    ollama create my-model -f outputs/export/gguf_q8_0/Modelfile
    ollama run my-model "Name three primary colors."
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
) -> str:
    """The Modelfile for a GGUF in the same folder.

    Args:
        gguf_name: the GGUF's file name (``FROM ./<gguf_name>``, relative to the Modelfile).
        eos_token: the tokenizer's EOS text; the first stop string.
        template: the prompt template the model was trained with (``"alpaca"``, ``"alpaca_no_input"``), or None
            for a chat model: no ``TEMPLATE`` line, so Ollama takes the chat template the GGUF carries
            (``tokenizer.chat_template``, the one the adapter was trained with) and never Alpaca's.
        temperature: ``PARAMETER temperature`` when given; None leaves Ollama's default.
        stop_tokens: a chat model's stop strings (its end-of-turn token first, then EOS); ``eos_token`` is added
            when missing.

    Returns:
        The Modelfile's text (``FROM``, ``TEMPLATE`` in triple quotes for Alpaca, one ``PARAMETER stop`` per stop
        string).

    Raises:
        ValueError: unknown ``template``; empty ``eos_token``; a template holding ``\"\"\"`` (cannot be quoted).
    """
    lines = [f"FROM ./{gguf_name}"]
    if template is None:
        if not eos_token:
            raise ValueError("eos_token is empty: a chat model's answers end with its end-of-turn token and EOS")
        stops = list(dict.fromkeys([*stop_tokens, eos_token]))
    else:
        body = ollama_template(template)
        if '"""' in body:
            raise ValueError('the prompt template holds """, which an Ollama TEMPLATE cannot quote')
        lines.append(f'TEMPLATE """{body}"""')
        stops = stop_strings(eos_token, template)
    lines += [f"PARAMETER stop {_quote(stop)}" for stop in stops]
    if temperature is not None:
        lines.append(f"PARAMETER temperature {temperature}")
    return "\n".join(lines) + "\n"


def write_modelfile(
    *, gguf_path: str | os.PathLike, eos_token: str, template: str | None = "alpaca", stop_tokens: Sequence[str] = ()
) -> Path:
    """Write ``Modelfile`` beside ``gguf_path`` (atomically: a temporary name, then a rename).

    Args:
        gguf_path: the exported GGUF.
        eos_token, template, stop_tokens: as ``modelfile_text``.

    Returns:
        The Modelfile's path.

    Raises:
        ValueError: as ``modelfile_text``.
    """
    gguf_path = Path(gguf_path)
    target = gguf_path.parent / MODELFILE
    text = modelfile_text(gguf_name=gguf_path.name, eos_token=eos_token, template=template, stop_tokens=stop_tokens)
    tmp = target.with_name(f".{MODELFILE}.partial")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, target)
    return target
