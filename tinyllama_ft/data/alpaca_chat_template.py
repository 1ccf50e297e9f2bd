"""The Alpaca prompt format as a chat template: Jinja (transformers, vLLM, llama.cpp), an Ollama ``TEMPLATE``
and the stop strings.

An Alpaca-tuned model must be prompted in Alpaca, not in a reader's fallback ChatML. The Jinja template renders
exactly ``alpaca_prompts.format_prompt`` after ``bos_token``; any conversation other than one user turn
(optionally followed by the assistant's answer) raises in the template.
"""

from __future__ import annotations


from ..models.chat_templates import jinja_string
from .alpaca_prompts import ALPACA_PROMPT, ALPACA_PROMPT_NO_INPUT, format_prompt

#: Stop strings beyond EOS: Alpaca starts every new turn with this header; a model that goes on past its
#: response into a new instruction is stopped there.
ALPACA_TURN_HEADER = "### Instruction:"

_CHECK = (
    "{% if messages | length < 1 or messages | length > 2 or messages[0]['role'] != 'user'"
    " or (messages | length == 2 and messages[1]['role'] != 'assistant') %}"
    "{{ raise_exception('The Alpaca format takes one user message (the instruction; an optional key "
    "input holds the Input block) and optionally the assistant response: no system or multi-turn "
    "messages') }}{% endif %}"
)
_INSTRUCTION = "{{ messages[0]['content'] }}"
_INPUT = "{{ messages[0]['input'] | default('', true) }}"
_OUTPUT = "{% if messages | length == 2 %}{{ messages[1]['content'] + eos_token }}{% endif %}"


def _fill(prompt: str, instruction: str, input: str = "", output: str = "") -> str:
    """``prompt`` with its ``{instruction}``/``{input}``/``{output}`` fields replaced by template code."""
    # str.replace, not str.format: the template code holds braces of its own.
    return prompt.replace("{instruction}", instruction).replace("{input}", input).replace("{output}", output)


def jinja_chat_template(template: str = "alpaca", suffix: str = "", bos: bool = True) -> str:
    """The Jinja chat template that renders ``alpaca_prompts.format_prompt`` for the given prompt template.

    Args:
        template: the prompt template the model was trained with: ``"alpaca"`` (the article's: the Input
            block always, empty when the message has no ``input``) or ``"alpaca_no_input"`` (the no-input
            variant when ``input`` is empty or absent).
        suffix: text the run added after each instruction (a record's ``prompt_suffix``): rendered after the
            message's content, as the run's prompts had it.
        bos: start with ``bos_token``, as a tokenizer that adds BOS encoded the run's prompts
            (``chat_templates.adds_bos``; SmolLM2's adds none, so its template starts with the prompt).

    Returns:
        The template text, for ``tokenizer.chat_template`` (written by ``save_pretrained`` as
        ``chat_template.jinja``) and for GGUF's ``tokenizer.chat_template``.

    Raises:
        ValueError: unknown ``template``.
    """
    format_prompt("", template=template)  # raises on an unknown template
    instruction = f"{{{{ messages[0]['content'] + {jinja_string(suffix)} }}}}" if suffix else _INSTRUCTION
    with_input = _fill(ALPACA_PROMPT, instruction, _INPUT, _OUTPUT)
    if template == "alpaca":
        body = with_input
    else:
        body = (
            "{% if messages[0]['input'] | default('', true) %}"
            + with_input
            + "{% else %}"
            + _fill(ALPACA_PROMPT_NO_INPUT, instruction, output=_OUTPUT)
            + "{% endif %}"
        )
    return ("{{ bos_token }}" if bos else "") + _CHECK + body


def ollama_template(template: str = "alpaca", suffix: str = "") -> str:
    """The prompt format as an Ollama Modelfile ``TEMPLATE`` (Go template; ``.Prompt``/``.Response``).

    Ollama passes a user message only, no Alpaca Input: ``"alpaca"`` renders the empty Input block (what
    ``format_prompt(instruction)`` gives), ``"alpaca_no_input"`` the no-input variant.

    Args:
        template: as ``jinja_chat_template``.
        suffix: text the run added after each instruction (a record's ``prompt_suffix``), after ``{{ .Prompt }}``.

    Returns:
        The TEMPLATE text; with ``{{ .Prompt }}`` = instruction and ``{{ .Response }}`` = "" it is exactly
        ``format_prompt(instruction + suffix, template=template)``.

    Raises:
        ValueError: unknown ``template``; a ``suffix`` holding ``{{`` (Go template code, which a TEMPLATE cannot
            hold as text).
    """
    format_prompt("", template=template)
    if "{{" in suffix:
        raise ValueError(f"the prompt suffix {suffix!r} holds '{{{{', which an Ollama TEMPLATE would read as code")
    prompt = ALPACA_PROMPT if template == "alpaca" else ALPACA_PROMPT_NO_INPUT
    return _fill(prompt, "{{ .Prompt }}" + suffix, "", "{{ .Response }}")


def stop_strings(eos_token: str, template: str = "alpaca") -> list[str]:
    """Strings that end a response in the trained format: the EOS text, then Alpaca's turn header.

    Args:
        eos_token: the tokenizer's EOS text (``"</s>"`` for Llama, ``"<|im_end|>"`` for SmolLM2).
        template: as ``jinja_chat_template``.

    Returns:
        ``[eos_token, "### Instruction:"]``.

    Raises:
        ValueError: no ``eos_token``, or an unknown ``template``.
    """
    format_prompt("", template=template)
    if not eos_token:
        raise ValueError("eos_token is empty: the trained format ends every response with the tokenizer's EOS")
    return [eos_token, ALPACA_TURN_HEADER]
