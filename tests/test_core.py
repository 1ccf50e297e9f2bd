"""The generation core (infer/core.py) on a CPU, on the real stories260K model: what a reviewer broke in it.

A published model whose pad token is a stop token still answers; a caller's ``TextStreamer(skip_prompt=True)``
gets every new token on each decoder path; a CUDA-graph decoder that fails is tried once, not once per batch, and
what it held is freed; a misspelt option names itself."""

import warnings

import pytest

from chat_fixtures import family_tokenizer, tiny_model
from tinyllama_ft.data.formats import AlpacaFormat
from tinyllama_ft.infer import core


@pytest.fixture(scope="module")
def stories(stories_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinyllama_ft.models.pad_token import ensure_pad_token

    tokenizer = AutoTokenizer.from_pretrained(stories_dir)
    model = AutoModelForCausalLM.from_pretrained(stories_dir)
    ensure_pad_token(tokenizer, model)
    return model, tokenizer


def _prompts(tokenizer, n):
    fmt = AlpacaFormat()
    return [fmt.prompt(tokenizer, f"Tell me a story about dog number {i}.") for i in range(n)], fmt


def test_a_pad_token_that_is_also_a_stop_token_still_answers():
    """Qwen2.5-Instruct pads with ``<|endoftext|>``, which its generation config also stops on: left padding keeps
    it out of the answers, so the core answers (batched as one at a time) instead of refusing."""
    from tinyllama_ft.infer.chat_generation import chat_generate

    tokenizer, spec = family_tokenizer("qwen2_5")
    model = tiny_model("qwen2", tokenizer, spec)
    assert tokenizer.pad_token_id in model.generation_config.eos_token_id
    questions = ["Hi", "Name a colour, please, and say why"]
    together = chat_generate(model, tokenizer, questions, max_new_tokens=6, return_ids=True)
    alone = [chat_generate(model, tokenizer, [q], max_new_tokens=6, return_ids=True)[0] for q in questions]
    assert together == alone


@pytest.mark.parametrize("decode", ["plain", "graph"])
def test_a_callers_skip_prompt_streamer_gets_every_new_token(stories, decode):
    from transformers import TextStreamer

    model, tokenizer = stories
    prompts, fmt = _prompts(tokenizer, 1)
    seen = []

    class Collect(TextStreamer):
        def on_finalized_text(self, text, stream_end=False):
            seen.append(text)

    answers = core.stream_answers(
        model,
        tokenizer,
        prompts,
        stop_token_ids=fmt.stop_token_ids(tokenizer),
        encode_kwargs=fmt.encode_kwargs,
        max_new_tokens=24,
        decode=decode,
        make_streamer=lambda tok: Collect(tok, skip_prompt=True, skip_special_tokens=True),
    )
    assert "".join(seen).strip() == core.decode_answers(tokenizer, answers)[0].strip() != ""


def test_a_failed_graph_decoder_is_tried_once_and_freed(stories, monkeypatch):
    from tinyllama_ft.infer.fast import graph_decoder, llama_ops

    model, tokenizer = stories
    tries = []

    def fails(self, *args, **kwargs):
        tries.append(1)
        raise RuntimeError("capture failed")

    monkeypatch.setattr(graph_decoder.FusedLlamaDecoder, "decode", fails)
    monkeypatch.setattr(core, "decode_mode", lambda *args: "graph")  # "auto" on CUDA
    prompts, fmt = _prompts(tokenizer, 4)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        answers = core.generate_answers(
            model, tokenizer, prompts, stop_token_ids=[tokenizer.eos_token_id], max_new_tokens=4, batch_size=1
        )
    assert len(answers) == 4 and len(tries) == 1 and len([w for w in said if "CUDA-graph" in str(w.message)]) == 1
    assert model in core.GRAPH_FAILED and model not in graph_decoder.FUSED_DECODERS
    assert model not in llama_ops.FUSED_WEIGHTS
    core.forget(model)
    assert model not in core.GRAPH_FAILED


def test_a_misspelt_option_names_itself(stories):
    model, tokenizer = stories
    with pytest.raises(TypeError, match="max_new_token"):
        core.generate_answers(model, tokenizer, ["x"], stop_token_ids=[2], max_new_token=4)
    with pytest.raises(ValueError, match="stop_token_ids is empty"):
        core.generate_answers(model, tokenizer, ["x"], stop_token_ids=[], max_new_tokens=4)


def _long_instruction(tokenizer, fmt, tokens: int) -> str:
    """An instruction whose Alpaca prompt is exactly ``tokens`` tokens long (as the core tokenizes it)."""
    words = []
    while len(tokenizer(fmt.prompt(tokenizer, " ".join(words)), **fmt.encode_kwargs)["input_ids"]) < tokens:
        words.append("dog")
    while len(tokenizer(fmt.prompt(tokenizer, " ".join(words)), **fmt.encode_kwargs)["input_ids"]) > tokens:
        words.pop()
    return " ".join(words)


def test_a_prompt_past_the_models_positions_is_refused_by_every_helper(stories, capsys):
    """Issue 28, item 5: transformers only warns and answers past ``max_position_embeddings`` (512 here); every
    generating helper refuses instead, naming the prompt's tokens, max_new_tokens and the positions, before anything
    is generated or streamed. One token less fits and answers."""
    from tinyllama_ft.evaluate.held_out import greedy_answers
    from tinyllama_ft.infer.generation import generate, stream
    from tinyllama_ft.infer.tryout import answer_into

    model, tokenizer = stories
    fmt = AlpacaFormat()
    instruction = _long_instruction(tokenizer, fmt, 500)
    n = len(tokenizer(fmt.prompt(tokenizer, instruction), **fmt.encode_kwargs)["input_ids"])
    assert 490 <= n <= 500

    class Output:  # the try-out box's ipywidgets Output, as far as answer_into writes to it
        def clear_output(self):
            pass

        def append_stdout(self, text):
            print(text, end="")

    helpers = {
        "generate": lambda m: generate(model, tokenizer, ["Hi", instruction], max_new_tokens=m),
        "stream": lambda m: stream(model, tokenizer, ["Hi", instruction], max_new_tokens=m),
        "core.generate_answers": lambda m: core.generate_answers(
            model, tokenizer, [fmt.prompt(tokenizer, instruction)], stop_token_ids=[2], max_new_tokens=m, batch_size=1
        ),
        "try-out box": lambda m: answer_into(Output(), model, tokenizer, instruction, max_new_tokens=m),
        "held-out answers": lambda m: greedy_answers(
            model,
            tokenizer,
            [{"instruction": instruction, "output": "A dog."}],
            max_new_tokens=m,
            data_format=AlpacaFormat(),
        ),
    }
    too_many = 512 - n + 1
    for name, helper in helpers.items():
        capsys.readouterr()
        with pytest.raises(ValueError) as refused:
            helper(too_many)
        message = str(refused.value)
        assert f"{n} tokens" in message and f"max_new_tokens={too_many}" in message, (name, message)
        assert "the model's 512" in message, (name, message)
        assert isinstance(refused.value, core.PromptTooLongError), name
        assert "dog" not in capsys.readouterr().out, name  # nothing streamed, not even the titles' first answer
    assert len(generate(model, tokenizer, [instruction], max_new_tokens=too_many - 1)) == 1  # it fits: answered


def test_the_positions_of_a_run_with_scaled_rope_are_its_max_seq_length(stories_dir, cpu):
    """A run's model loaded with max_seq_length 1024 on the 512-position base (linear RoPE x2) knows 1024 positions:
    a 600-token prompt answers, ~1,020 tokens + 8 new ones are refused naming 1024."""
    from tinyllama_ft.infer.generation import generate
    from tinyllama_ft.models.loading import load_model

    model, tokenizer = load_model(
        str(stories_dir), max_seq_length=1024, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    fmt = AlpacaFormat()
    assert generate(model, tokenizer, [_long_instruction(tokenizer, fmt, 600)], max_new_tokens=8)
    long = _long_instruction(tokenizer, fmt, 1020)
    n = len(tokenizer(fmt.prompt(tokenizer, long), **fmt.encode_kwargs)["input_ids"])
    assert n + 8 > 1024
    with pytest.raises(
        ValueError, match=f"has {n} tokens and max_new_tokens=8: {n + 8} positions, more than the model's 1024"
    ):
        generate(model, tokenizer, [long], max_new_tokens=8)
    assert core.model_positions(model) == 1024


def test_the_held_out_checks_leave_out_rows_past_the_positions(stories, capsys):
    """The run's own held-out generation (stopping count, side by side) leaves a row out, in one line, where the
    core would refuse it: a training run is not stopped after it trained (the notebook's 50 held-out rows on
    stories260K hold such rows)."""
    from tinyllama_ft.evaluate.held_out import held_out_check

    model, tokenizer = stories
    fmt = AlpacaFormat()
    rows = [
        {"instruction": "Name a colour.", "input": "", "output": "Blue."},
        {"instruction": _long_instruction(tokenizer, fmt, 490), "input": "", "output": "A dog."},
    ]
    check = held_out_check(model, tokenizer, rows, max_seq_length=512, max_new_tokens=32, data_format=AlpacaFormat())
    assert check.scores.rows == 2 and check.stopping.total == 1
    said = capsys.readouterr().out
    assert (
        "stopping count: 1 of 2 held-out rows left out: their prompt plus 32 new tokens exceeds the model's 512" in said
    )
