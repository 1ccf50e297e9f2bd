"""The try-out box: built for real and its Submit handler called on stories260K (CPU)."""

from __future__ import annotations

import pytest

from helpers import stories_lora
from tinyllama_ft.infer import tryout
from tinyllama_ft.machine import kernel


@pytest.fixture(scope="module")
def stories(stories_dir, cpu):
    return stories_lora(stories_dir, cpu, max_seq_length=256)


def _streamed(output) -> str:
    return "".join(o["text"] for o in output.outputs if o.get("name") == "stdout")


def test_submit_streams_the_answer_into_the_output(stories):
    model, tokenizer = stories
    box = tryout.build_tryout(model, tokenizer)
    box.instruction.value = "Tell me a story about a cat."
    box.max_new_tokens.value = 16
    answer = box.on_submit()
    streamed = _streamed(box.output)
    assert answer.strip() and streamed.strip()
    assert streamed.strip() == answer.strip()
    assert len(box.output.outputs) > 1  # token by token, not one block at the end
    assert not box.submit.disabled

    box.temperature.value = 0.8  # sampling path
    assert box.on_submit().strip() and _streamed(box.output).strip()


def test_empty_instruction_is_said_in_the_output(stories):
    model, tokenizer = stories
    box = tryout.build_tryout(model, tokenizer)
    assert box.on_submit() == ""
    assert "instruction is empty" in "".join(o["text"] for o in box.output.outputs)


def test_headless_gives_nothing(stories, capsys):
    model, tokenizer = stories
    assert not kernel.in_interactive_kernel()  # pytest is no notebook kernel
    assert tryout.tryout_box(model, tokenizer) is None
    assert tryout.tryout_box(model, tokenizer, interactive=False) is None
    assert capsys.readouterr().out.count("try-out box skipped") == 2
