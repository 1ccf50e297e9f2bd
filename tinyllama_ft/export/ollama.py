"""An Ollama ``Modelfile`` beside an exported GGUF: the trained prompt format and its stop strings.

Without one, Ollama prompts the model in a template it never saw: the adapter's format says its ``TEMPLATE`` and
stop strings (``ollama_template``: an Alpaca model's pins both; a chat model's has no ``TEMPLATE``, Ollama reading the
chat template the GGUF carries, unless its run added text after each question). ``ollama create my-model -f
<folder>/Modelfile`` uses it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence


#: The Modelfile's name, as ``ollama create -f`` expects by default.
MODELFILE = "Modelfile"


def modelfile_text(*, gguf_name: str, template: str | None, stops: Sequence[str]) -> str:
    """The Modelfile for a GGUF in the same folder.

    Args:
        gguf_name: the GGUF's file name (``FROM ./<gguf_name>``, relative to the Modelfile).
        template, stops: the adapter's format's ``ollama_template(tokenizer)`` (``formats.recorded_data_format``):
            the ``TEMPLATE`` (None: none, Ollama takes the GGUF's chat template) and the stop strings.

    Returns:
        The Modelfile's text (``FROM``, the ``TEMPLATE`` in triple quotes, one ``PARAMETER stop`` each).

    Raises:
        ValueError: a template holding ``\"\"\"`` (cannot be quoted).
    """
    lines = [f"FROM ./{gguf_name}"]
    if template is not None:
        if '"""' in template:
            raise ValueError('the prompt template holds """, which an Ollama TEMPLATE cannot quote')
        lines.append(f'TEMPLATE """{template}"""')
    # JSON's escaping is the double-quoted string Ollama's parser reads
    lines += [f"PARAMETER stop {json.dumps(stop, ensure_ascii=False)}" for stop in stops]
    return "\n".join(lines) + "\n"


def write_modelfile(*, gguf_path: str | os.PathLike, template: str | None, stops: Sequence[str]) -> Path:
    """Write ``Modelfile`` beside the exported ``gguf_path`` (in ``export_adapter``'s staging folder, which appears
    as the format's folder only when complete) and return its path; the other arguments and the ValueError as
    ``modelfile_text``."""
    gguf_path = Path(gguf_path)
    target = gguf_path.parent / MODELFILE
    target.write_text(modelfile_text(gguf_name=gguf_path.name, template=template, stops=stops), encoding="utf-8")
    return target
