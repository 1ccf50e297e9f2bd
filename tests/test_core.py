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
    monkeypatch.setattr(core.GenerationOptions, "mode", lambda self, m, new_tokens=0: "graph")  # "auto" on CUDA
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
