"""An Ollama ``Modelfile`` beside an exported GGUF: the trained prompt format and its stop strings.

Without one, Ollama (like llama-server) prompts the model in a template it never saw; the Modelfile pins the
Alpaca ``TEMPLATE`` (``chat_template.ollama_template``) and ``PARAMETER stop`` for each stop string
(``chat_template.stop_strings``). Use it with::

    ollama create my-model -f outputs/export/gguf_q8_0/Modelfile
    ollama run my-model "Name three primary colors."
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .chat_template import ollama_template, stop_strings

#: The Modelfile's name, as ``ollama create -f`` expects by default.
MODELFILE = "Modelfile"


def _quote(text: str) -> str:
    """A Modelfile string: JSON's escaping is the double-quoted form Ollama's parser reads."""
    return json.dumps(text, ensure_ascii=False)


def modelfile_text(*, gguf_name: str, eos_token: str, template: str = "alpaca", temperature: float | None = None) -> str:
    """The Modelfile for a GGUF in the same folder.

    Args:
        gguf_name: the GGUF's file name (``FROM ./<gguf_name>``, relative to the Modelfile).
        eos_token: the tokenizer's EOS text; the first stop string.
        template: the prompt template the model was trained with (``"alpaca"``, ``"alpaca_no_input"``).
        temperature: ``PARAMETER temperature`` when given; None leaves Ollama's default.

    Returns:
        The Modelfile's text (``FROM``, ``TEMPLATE`` in triple quotes, one ``PARAMETER stop`` per stop string).

    Raises:
        ValueError: unknown ``template``; empty ``eos_token``; a template holding ``\"\"\"`` (cannot be quoted).
    """
    body = ollama_template(template)
    if '"""' in body:
        raise ValueError('the prompt template holds """, which an Ollama TEMPLATE cannot quote')
    lines = [f"FROM ./{gguf_name}", f'TEMPLATE """{body}"""']
    lines += [f"PARAMETER stop {_quote(stop)}" for stop in stop_strings(eos_token, template)]
    if temperature is not None:
        lines.append(f"PARAMETER temperature {temperature}")
    return "\n".join(lines) + "\n"


def write_modelfile(*, gguf_path: str | os.PathLike, eos_token: str, template: str = "alpaca") -> Path:
    """Write ``Modelfile`` beside ``gguf_path`` (atomically: a temporary name, then a rename).

    Args:
        gguf_path: the exported GGUF.
        eos_token, template: as ``modelfile_text``.

    Returns:
        The Modelfile's path.

    Raises:
        ValueError: as ``modelfile_text``.
    """
    gguf_path = Path(gguf_path)
    target = gguf_path.parent / MODELFILE
    text = modelfile_text(gguf_name=gguf_path.name, eos_token=eos_token, template=template)
    tmp = target.with_name(f".{MODELFILE}.partial")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, target)
    return target
