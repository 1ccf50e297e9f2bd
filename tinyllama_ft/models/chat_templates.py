"""Chat templates: the tokenizer's own, or a named one for a base model, with EOS and stop tokens to match.

``set_chat_template`` keeps the tokenizer's template or installs one of ``NAMED_TEMPLATES`` as TRL's
``clone_chat_template`` does (tokens added, EOS and generation config set to the end-of-turn token, which is read
from the template itself). Kept: TRL's ``clone_chat_template`` needs a source tokenizer from the Hub; ours runs
offline (tests/test_chat_templates.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..config.finetune import DEFAULTS

#: ChatML as TRL's former ``setup_chat_format`` (``ChatMlSpecialTokens``) wrote it: no default system turn.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
#: Zephyr's template (TinyLlama/TinyLlama-1.1B-Chat-v1.0 tokenizer_config.json): every turn closed by EOS, no new token.
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)


@dataclass(frozen=True)
class NamedTemplate:
    """A chat template for a base model: its Jinja text (or the name of TRL's copy in ``trl.chat_template_utils``),
    the special tokens it needs, and its end-of-turn token (None: the tokenizer's own EOS)."""

    template: str | None
    special_tokens: tuple[str, ...]
    end_of_turn: str | None
    trl_template: str | None = None


NAMED_TEMPLATES = {
    "chatml": NamedTemplate(CHATML_TEMPLATE, ("<|im_start|>", "<|im_end|>"), "<|im_end|>"),
    "zephyr": NamedTemplate(ZEPHYR_TEMPLATE, (), None),
    # Meta Llama 3, the copy TRL ships (trl/chat_templates/llama3.jinja)
    "llama-3": NamedTemplate(
        None, ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"), "<|eot_id|>", "llama3_chat_template"
    ),
}

#: Placeholder contents: private-use characters no template touches and no real text holds.
_MARK = "\ue000tlft{}\ue001"


def template_text(name: str) -> str:
    """The Jinja text of a ``NAMED_TEMPLATES`` entry (a TRL one from the installed ``trl.chat_template_utils``). Raises
    ValueError: unknown name."""
    if name not in NAMED_TEMPLATES:
        raise ValueError(f"chat_template={name!r}: not one of {sorted(NAMED_TEMPLATES)} (or 'auto', or a Jinja string)")
    spec = NAMED_TEMPLATES[name]
    if spec.template is not None:
        return spec.template
    import trl.chat_template_utils

    return getattr(trl.chat_template_utils, spec.trl_template)


class TemplateMismatch(ValueError):
    """The template does not render a conversation as placeholder turns predict (it drops, reorders or
    rewrites a turn's content beyond trimming, or leaves an assistant turn unclosed)."""


def render(tokenizer, messages, *, add_generation_prompt: bool = False, chat_template: str | None = None) -> str:
    """``tokenizer.apply_chat_template(messages, tokenize=False, ...)``: ``messages`` (``[{"role", "content"}]``)
    rendered as text, ending with the assistant's header when ``add_generation_prompt``. Raises ValueError: the
    tokenizer has no chat template and none is given (transformers' message)."""
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt, chat_template=chat_template
    )


def render_turns(tokenizer, messages, *, end_of_turn: str | None = None) -> list[tuple[str, bool, bool]]:
    """The rendered conversation cut into ``(text, supervised, is_content)`` pieces, in order.

    Rendered once with placeholder contents to locate each turn's content and markup; the real contents are put
    back (trimmed where the template trims) and the joined pieces checked against the real rendering. An assistant
    turn is supervised from the end of the generation prompt (else from its content) through its ``end_of_turn``
    token; everything else is not.

    Args:
        tokenizer: with a chat template. messages: normalised turns (``conversations``).
        end_of_turn: the token closing an assistant turn; default ``end_of_turn_token(tokenizer)``.

    Returns:
        Pieces whose texts join to ``render(tokenizer, messages)``; ``is_content`` marks a turn's own text.

    Raises:
        TemplateMismatch: as the class says.
    """
    end_of_turn = end_of_turn or end_of_turn_token(tokenizer)
    marks = [{"role": m["role"], "content": _MARK.format(i)} for i, m in enumerate(messages)]
    probe = render(tokenizer, marks)
    pieces: list[tuple[str, bool, bool]] = []
    at = 0
    for i, message in enumerate(messages):
        where = probe.find(_MARK.format(i), at)
        if where < 0:
            raise TemplateMismatch(f"the chat template drops, reorders or rewrites turn {i} ({message['role']})")
        markup = probe[at:where]
        if message["role"] == "assistant":
            prompt = render(tokenizer, marks[:i], add_generation_prompt=True)
            cut = len(prompt) - at if probe.startswith(prompt) and at <= len(prompt) <= where else len(markup)
            pieces += [(markup[:cut], False, False), (markup[cut:], True, False)]
        else:
            pieces.append((markup, False, False))
        pieces.append((message["content"], message["role"] == "assistant", True))
        at = where + len(_MARK.format(i))
        if message["role"] == "assistant":
            nxt = probe.find(_MARK.format(i + 1), at) if i + 1 < len(messages) else len(probe)
            close = probe.find(end_of_turn, at, nxt)
            if close < 0:
                raise TemplateMismatch(f"the chat template does not close assistant turn {i} with {end_of_turn!r}")
            pieces.append((probe[at : close + len(end_of_turn)], True, False))
            at = close + len(end_of_turn)
    pieces.append((probe[at:], False, False))
    real = render(tokenizer, messages)
    if "".join(p[0] for p in pieces) != real:
        trimmed = [(p[0].strip() if p[2] else p[0], p[1], p[2]) for p in pieces]
        if "".join(p[0] for p in trimmed) != real:
            raise TemplateMismatch("the chat template rewrites a turn's content (beyond trimming it)")
        pieces = trimmed
    return [p for p in pieces if p[0]]


def end_of_turn_token(tokenizer) -> str:
    """The special token the template closes an assistant turn with (first special token after its content). Raises
    ValueError: the tokenizer has no chat template, or no special token follows an assistant's content."""
    if not tokenizer.chat_template:
        raise ValueError(
            "the tokenizer has no chat template: pass chat_template='auto' only for a model that ships "
            f"one, else one of {sorted(NAMED_TEMPLATES)}"
        )
    marks = [{"role": role, "content": _MARK.format(i)} for i, role in enumerate(("user", "assistant", "user"))]
    probe = render(tokenizer, marks)
    after = probe[probe.find(_MARK.format(1)) + len(_MARK.format(1)) : probe.find(_MARK.format(2))]
    specials = special_tokens(tokenizer)
    found = [(after.find(t), -len(t), t) for t in specials if t in after]
    if not found:
        raise ValueError(
            f"the chat template closes an assistant turn with {after!r}: no special token, so "
            "generation cannot stop on one; use a template whose turns end in a special token"
        )
    return min(found)[2]


def special_tokens(tokenizer) -> list[str]:
    """Texts of the tokenizer's special tokens: its named ones and every added token marked special."""
    added = [t.content for t in tokenizer.added_tokens_decoder.values() if t.special]
    return sorted({t for t in [*tokenizer.all_special_tokens, *added] if t})


def stop_token_ids(tokenizer, model=None) -> list[int]:
    """Ids generation stops on: the template's end-of-turn token, the tokenizer's EOS, then the model's generation
    config EOS ids (Qwen: ``<|im_end|>`` and ``<|endoftext|>``), each once."""
    ids = [tokenizer.convert_tokens_to_ids(end_of_turn_token(tokenizer))]
    more = [tokenizer.eos_token_id] + (_generation_eos_ids(model) if model is not None else [])
    return ids + [i for i in dict.fromkeys(more) if i is not None and i not in ids]


def _generation_eos_ids(model) -> list[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def check_stop_tokens(tokenizer, model) -> int:
    """The end-of-turn token id, once the model's generation config (or config) stops on it. Raises ValueError: it does
    not stop on it: names both, and how to fix it."""
    token = end_of_turn_token(tokenizer)
    token_id = tokenizer.convert_tokens_to_ids(token)
    eos_ids = _generation_eos_ids(model)
    if token_id not in eos_ids:
        raise ValueError(
            f"the chat template ends assistant turns with {token!r} (id {token_id}) but the model's generation config "
            f"stops on eos_token_id={eos_ids}: a trained model would not stop after its answer. Use a template whose "
            f"end-of-turn token the model stops on, or set_chat_template(..., chat_template=<name>) on a base model "
            f"(it sets the generation config), or add {token_id} to model.generation_config.eos_token_id"
        )
    return token_id


@dataclass
class ChatFormat:
    """What ``set_chat_template`` set: the template's name, end-of-turn token, stop ids, and the ids of the tokens
    it added (their new embedding rows must train)."""

    name: str
    end_of_turn: str
    stop_token_ids: list[int]
    added_token_ids: list[int] = field(default_factory=list)


def set_chat_template(tokenizer, model=None, *, chat_template: str = DEFAULTS.chat_template) -> ChatFormat:
    """Choose the chat template (in place) and make EOS, stop tokens and the model's configs agree with it.

    Args:
        tokenizer: the model's tokenizer.
        model: its embeddings are resized for new tokens, its configs get the stop ids; None: the tokenizer only.
        chat_template: ``"auto"`` (the tokenizer's own; ``DEFAULTS.chat_template``), a ``NAMED_TEMPLATES`` name
            for a base model, or a Jinja string (used as is, EOS unchanged).

    Returns:
        A ``ChatFormat``.

    Raises:
        ValueError: ``"auto"`` on a tokenizer without a template; an unknown name; a template without a special
            end-of-turn token; with a model, as ``check_stop_tokens``.
    """
    from .loading import ensure_pad_token

    added: list[int] = []
    name = chat_template
    if chat_template == "auto":
        if not tokenizer.chat_template:
            raise ValueError(
                "chat_template='auto': this tokenizer has no chat template (a base model); name one of "
                f"{sorted(NAMED_TEMPLATES)}"
            )
        name = "own"
    elif chat_template in NAMED_TEMPLATES:
        spec = NAMED_TEMPLATES[chat_template]
        tokenizer.chat_template = template_text(chat_template)
        new = [t for t in spec.special_tokens if t not in tokenizer.get_vocab()]
        if new:
            tokenizer.add_tokens(new, special_tokens=True)
            added = tokenizer.convert_tokens_to_ids(new)
        if spec.end_of_turn:
            tokenizer.eos_token = spec.end_of_turn
    elif "{%" in chat_template or "{{" in chat_template:
        tokenizer.chat_template, name = chat_template, "custom"
    else:
        template_text(chat_template)  # raises naming the choices
    eot = end_of_turn_token(tokenizer)
    stops = stop_token_ids(tokenizer, model if name not in NAMED_TEMPLATES else None)
    if model is not None:
        if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tokenizer))
        if name in NAMED_TEMPLATES:
            model.config.eos_token_id = stops[0]
            if getattr(model, "generation_config", None) is not None:
                model.generation_config.eos_token_id = stops
        ensure_pad_token(tokenizer, model)
        check_stop_tokens(tokenizer, model)
    return ChatFormat(name=name, end_of_turn=eot, stop_token_ids=stops, added_token_ids=added)


def chat_prompt(tokenizer, messages) -> str:
    """The generation prompt (``add_generation_prompt=True``) for ``messages``: a conversation's turns, or a string
    (one user turn). Special tokens are text: tokenize it with ``add_special_tokens=False``."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return render(tokenizer, messages, add_generation_prompt=True)


def jinja_string(text: str) -> str:
    """``text`` as a Jinja string literal (Jinja reads Python's backslash escapes in it)."""
    return json.dumps(text, ensure_ascii=False)


def suffixed_chat_template(chat_template: str, suffix: str) -> str:
    """``chat_template`` that adds ``suffix`` after the content of a conversation's last turn when it is the user's
    (a GRPO run's prompts: ``run_record.with_suffix``), so an exported model is prompted as its run was; ``""``:
    ``chat_template`` as it is.

    Args:
        chat_template: a Jinja chat template (``tokenizer.chat_template``).
        suffix: the text the run added (a record's ``prompt_suffix``).
    """
    if not suffix:
        return chat_template
    last = "messages[-1]"
    return (
        f"{{%- if messages and {last}['role'] == 'user' and {last}['content'] is string -%}}"
        f"{{%- set messages = messages[:-1] + [{{'role': 'user', 'content': {last}['content'] + "
        f"{jinja_string(suffix)}}}] -%}}{{%- endif -%}}" + chat_template
    )


def adds_bos(tokenizer) -> bool:
    """Whether ``tokenizer`` puts its BOS before a text it encodes (TinyLlama's does; SmolLM2's, whose ``bos_token`` is
    ``<|im_start|>``, adds none), as the package's training prompts were encoded."""
    return tokenizer.bos_token_id is not None and tokenizer("a")["input_ids"][:1] == [tokenizer.bos_token_id]


def chat_ollama_template(tokenizer, chat_template: str | None = None) -> str:
    """A one-turn Ollama ``TEMPLATE`` rendered from ``chat_template`` (None: ``tokenizer``'s; ``render`` of one user
    message), for a chat model whose exported template adds text after each question (``suffixed_chat_template``),
    which Ollama's own reading of the GGUF's template would lose.
    ``{{ .Prompt }}`` takes the message and ``{{ .Response }}`` follows the assistant's header; a leading BOS that the
    tokenizer adds itself is left to the GGUF's tokenizer, as the Alpaca ``TEMPLATE`` leaves it.

    Raises:
        ValueError: the rendered prompt holds ``{{`` (which Go would read as template code).
    """
    mark = "\x00PROMPT\x00"
    user = [{"role": "user", "content": mark}]
    before, _, after = render(tokenizer, user, add_generation_prompt=True, chat_template=chat_template).partition(mark)
    if adds_bos(tokenizer) and before.startswith(tokenizer.bos_token):  # the GGUF's tokenizer adds it, as this one does
        before = before[len(tokenizer.bos_token) :]
    if "{{" in before + after:
        raise ValueError("the chat template's prompt holds '{{', which an Ollama TEMPLATE would read as code")
    return f"{before}{{{{ .Prompt }}}}{after}{{{{ .Response }}}}"
