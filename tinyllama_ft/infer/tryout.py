"""A try-out box for the notebook: type an instruction, press Submit, watch the answer stream.

An ipywidgets form (instruction, optional input, ``max_new_tokens`` and ``temperature`` sliders, Submit) over an
``Output`` area that a transformers ``TextStreamer`` writes the answer into (``core.stream_answers``). Headless
runs (papermill, a script) get one printed line instead.
"""

from __future__ import annotations

from ..machine.kernel import in_interactive_kernel

#: Slider ranges: (min, max, step, default).
MAX_NEW_TOKENS_SLIDER = (16, 512, 16, 128)
TEMPERATURE_SLIDER = (0.0, 1.5, 0.05, 0.0)


def answer_into(
    output,
    model,
    tokenizer,
    instruction: str,
    *,
    input: str = "",
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    template: str | None = None,
    data_format=None,
) -> str:
    """Generate an answer, streaming it into ``output`` (an ipywidgets ``Output``), and return its text.

    Args:
        output: the ``Output`` widget written to (cleared first).
        model, tokenizer, template, data_format: as ``generation.generate``.
        instruction, input: the Alpaca fields (``input`` may be ``""``; a chat run's instruction is a user message).
        max_new_tokens: most tokens generated. temperature: 0 = greedy; > 0 samples at that temperature.

    Returns:
        The answer up to (not including) the stop token, special tokens removed.

    Raises:
        ValueError: empty instruction, ``max_new_tokens`` < 1 or ``temperature`` < 0; the prompt's tokens plus
            ``max_new_tokens`` exceed the model's positions (``core.check_positions``).
    """
    from transformers import TextStreamer

    from .core import decode_answers, stream_answers
    from .generation import answer_with

    class WidgetStreamer(TextStreamer):  # text into the ipywidgets Output, not stdout
        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            if text:
                output.append_stdout(text)

    if not instruction.strip():
        raise ValueError("instruction is empty: type an instruction first")
    if max_new_tokens < 1 or temperature < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1 and temperature={temperature} >= 0")
    output.clear_output()
    answers = answer_with(
        stream_answers,
        model,
        tokenizer,
        instruction,
        input or None,
        template,
        data_format,
        max_new_tokens=int(max_new_tokens),
        do_sample=temperature > 0,
        temperature=float(temperature),
        make_streamer=lambda tok: WidgetStreamer(tok, skip_special_tokens=True),
    )
    return decode_answers(tokenizer, answers)[0]


def build_tryout(model, tokenizer, *, template: str | None = None, data_format=None):
    """The try-out form, built without displaying it (what ``tryout_box`` shows; tests call its handler).

    Returns:
        An ``ipywidgets.VBox`` with attributes ``instruction``, ``input``, ``max_new_tokens``,
        ``temperature``, ``submit``, ``output`` (the widgets) and ``on_submit(button=None) -> str`` (the
        Submit handler: it streams the answer into ``output`` and returns it; an error is written there).

    Raises:
        ImportError: ipywidgets is not installed (``pip install ipywidgets``).
    """
    try:
        import ipywidgets as w
    except ImportError as err:
        raise ImportError("the try-out box needs ipywidgets: pip install ipywidgets") from err

    instruction = w.Textarea(
        placeholder="Type an instruction, e.g. Name three primary colors.",
        layout=w.Layout(width="100%", height="4em"),
        description="Instruction",
    )
    context = w.Textarea(
        placeholder="(optional) input / context", layout=w.Layout(width="100%", height="3em"), description="Input"
    )
    max_new_tokens, temperature = (
        kind(value=value, min=lo, max=hi, step=step, description=name, style={"description_width": "initial"})
        for kind, name, (lo, hi, step, value) in (
            (w.IntSlider, "max_new_tokens", MAX_NEW_TOKENS_SLIDER),
            (w.FloatSlider, "temperature", TEMPERATURE_SLIDER),
        )
    )
    submit = w.Button(description="Submit", button_style="primary")
    output = w.Output(layout=w.Layout(border="1px solid #ccc", padding="4px", width="100%"))
    box = w.VBox([instruction, context, w.HBox([max_new_tokens, temperature, submit]), output])

    def on_submit(button=None) -> str:
        submit.disabled = True
        try:
            return answer_into(
                output,
                model,
                tokenizer,
                instruction.value,
                input=context.value,
                max_new_tokens=max_new_tokens.value,
                temperature=temperature.value,
                template=template,
                data_format=data_format,
            )
        except ValueError as err:
            output.clear_output()
            output.append_stderr(f"{err}\n")
            return ""
        finally:
            submit.disabled = False

    submit.on_click(on_submit)
    box.instruction, box.input, box.max_new_tokens, box.temperature = instruction, context, max_new_tokens, temperature
    box.submit, box.output, box.on_submit = submit, output, on_submit
    return box


def tryout_box(model, tokenizer, *, template: str | None = None, interactive: bool | None = None, data_format=None):
    """Show the try-out box in an interactive notebook; do nothing (one printed line) elsewhere.

    Args:
        model, tokenizer, template, data_format: as ``generation.generate``.
        interactive: None detects it (``machine.kernel.in_interactive_kernel``); False skips; True always shows.

    Returns:
        The displayed ``VBox`` (see ``build_tryout``), or None when skipped.
    """
    if not (in_interactive_kernel() if interactive is None else interactive):
        print("try-out box skipped: no interactive notebook kernel (papermill or a script)")
        return None
    box = build_tryout(model, tokenizer, template=template, data_format=data_format)
    from IPython.display import display

    display(box)
    return box
