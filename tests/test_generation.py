"""Generation: stops at EOS without EOS text, batches several instructions, streams what it returns."""

import sys

import pytest

from helpers import stories_lora, trained_stories_adapter
from tinyllama_ft.infer.generation import generate, stream
from tinyllama_ft.data.alpaca_prompts import format_prompt


class ForceEosAt:
    """A logits processor that makes EOS the only choice at new-token step ``k`` (0-based)."""

    def __init__(self, prompt_length: int, k: int, eos_id: int):
        self.at, self.eos = prompt_length + k, eos_id

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] == self.at:
            scores[:] = float("-inf")
            scores[:, self.eos] = 0.0
        return scores


@pytest.fixture(scope="module")
def model_and_tokenizer(stories_dir):
    from tinyllama_ft.machine.hardware import Hardware

    return stories_lora(stories_dir, Hardware())


@pytest.mark.parametrize("k", [0, 5])
def test_output_ends_at_forced_eos_and_holds_no_eos_text(model_and_tokenizer, k):
    from transformers import LogitsProcessorList

    model, tokenizer = model_and_tokenizer
    instruction = "Tell me a story about a cat."
    prompt_length = len(tokenizer(format_prompt(instruction)).input_ids)
    free = generate(model, tokenizer, instruction, max_new_tokens=20)[0]
    forced = generate(
        model,
        tokenizer,
        instruction,
        max_new_tokens=20,
        logits_processor=LogitsProcessorList([ForceEosAt(prompt_length, k, tokenizer.eos_token_id)]),
    )[0]
    assert tokenizer.eos_token not in forced
    expected = tokenizer.decode(tokenizer(free, add_special_tokens=False).input_ids[:k]) if k else ""
    assert forced == expected and len(free) > len(forced)


def test_many_instructions_in_one_batch_match_one_at_a_time(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    questions = ["What is the capital of France?", "Write a haiku about the sea, please, in detail."]
    together = generate(model, tokenizer, questions, max_new_tokens=16)
    alone = [generate(model, tokenizer, q, max_new_tokens=16)[0] for q in questions]
    assert together == alone
    assert tokenizer.padding_side == "right"  # restored after left-padded generation


def test_stream_prints_as_it_goes_and_returns_the_same_answer(model_and_tokenizer, capsys):
    model, tokenizer = model_and_tokenizer
    streamed = stream(model, tokenizer, ["What is the capital of France?"], max_new_tokens=16)
    printed = capsys.readouterr().out
    assert streamed == generate(model, tokenizer, "What is the capital of France?", max_new_tokens=16)
    assert streamed[0].strip() and streamed[0].strip() in printed


def test_sampling_knobs_are_used(model_and_tokenizer):
    import torch

    model, tokenizer = model_and_tokenizer
    torch.manual_seed(0)
    a = generate(model, tokenizer, "Tell me a story.", max_new_tokens=24, do_sample=True, temperature=1.5, top_p=0.95)
    torch.manual_seed(1)
    b = generate(
        model,
        tokenizer,
        "Tell me a story.",
        max_new_tokens=24,
        do_sample=True,
        temperature=1.5,
        top_p=0.95,
        repetition_penalty=1.3,
    )
    assert a != b


def test_inputs_must_match_instructions(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match="inputs has 1 items for 2 instructions"):
        generate(model, tokenizer, ["a", "b"], inputs=["x"])


@pytest.fixture(scope="module")
def trained_adapter(stories_dir, tmp_path_factory):
    """A saved stories260K adapter whose LoRA B matrices are non-zero (as after training), so merging matters."""
    return trained_stories_adapter(stories_dir, tmp_path_factory.mktemp("adapter"))


@pytest.fixture(scope="module")
def merged_and_adapter(trained_adapter):
    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.machine.hardware import Hardware

    merged = load_adapter(trained_adapter, max_seq_length=512, backend="transformers", hardware=Hardware(), merged=True)
    on_top = load_adapter(trained_adapter, max_seq_length=512, backend="transformers", hardware=Hardware())
    return merged, on_top


def test_merged_reload_is_a_plain_model_computing_what_the_adapter_computes(merged_and_adapter):
    import torch
    from transformers import PreTrainedModel

    (merged, tokenizer), (on_top, _) = merged_and_adapter
    assert isinstance(merged, PreTrainedModel) and not getattr(merged, "peft_config", None)
    assert getattr(merged, "hf_quantizer", None) is None  # a plain transformers model, no 4-bit weights
    ids = tokenizer([format_prompt("Tell me a story about a dog.")], return_tensors="pt").input_ids
    with torch.no_grad():
        a, b = merged(ids).logits, on_top(ids).logits
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-4), (a - b).abs().max()
    base_logits = on_top.get_base_model()
    with on_top.disable_adapter(), torch.no_grad():
        assert not torch.allclose(base_logits(ids).logits, a, rtol=1e-5, atol=1e-3)  # the adapter changes the output


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_static_cache_decoding_matches_generates_greedy_tokens(merged_and_adapter, capsys, ignore_eos):
    """``decode="static"`` (transformers' static KV cache, which transformers compiles on CUDA; what "auto" picks
    there for a long request on a plain non-Llama model) gives generate's greedy tokens, streamed and batched."""
    (model, tokenizer), _ = merged_and_adapter
    questions = ["Tell me a story about a cat.", "What is the capital of France?"]
    options = dict(max_new_tokens=120, ignore_eos=ignore_eos, return_ids=True)
    fast = stream(model, tokenizer, questions, decode="static", **options)
    plain = stream(model, tokenizer, questions, decode="plain", **options)
    assert fast == plain
    assert (
        all(len(ids) == 120 for ids in fast) if ignore_eos else all(tokenizer.eos_token_id not in ids for ids in fast)
    )
    texts = stream(model, tokenizer, questions, max_new_tokens=120, decode="static")
    printed = capsys.readouterr().out
    assert texts == [tokenizer.decode(ids, skip_special_tokens=True) for ids in fast] or ignore_eos
    assert all(t.strip()[:40] in printed for t in texts)
    batched = generate(model, tokenizer, questions, max_new_tokens=120, decode="static", ignore_eos=ignore_eos)
    assert batched == generate(model, tokenizer, questions, max_new_tokens=120, decode="plain", ignore_eos=ignore_eos)


def test_static_cache_decoding_streams_in_pieces_and_refuses_too_long_a_request(merged_and_adapter):
    """The streamer gets the answer as it is generated (several pieces that add up to it); a prompt whose answer
    would pass the model's positions is refused before generating, as on every decoder."""
    from tinyllama_ft.infer.core import PromptTooLongError, model_positions, stream_answers

    (model, tokenizer), _ = merged_and_adapter
    pieces = []

    class Recorder:
        skip_prompt = True

        def put(self, value):
            pieces.append(value.flatten().tolist())

        def end(self):
            pass

    (answer,) = stream_answers(
        model,
        tokenizer,
        [format_prompt("Tell me a story.")],
        stop_token_ids=[tokenizer.eos_token_id],
        max_new_tokens=50,
        decode="static",
        ignore_eos=True,
        make_streamer=lambda tok: Recorder(),
    )
    assert len(answer.ids) == 50 and len(pieces) > 2 and sum(pieces, [])[-50:] == answer.ids
    with pytest.raises(PromptTooLongError, match="positions"):
        stream(model, tokenizer, ["Tell me a story."], max_new_tokens=model_positions(model), decode="static")


def test_auto_decoding_uses_generate_where_the_static_decoder_cannot_apply(merged_and_adapter):
    from tinyllama_ft.infer.core import decode_mode

    (merged, _), (on_top, _) = merged_and_adapter
    assert decode_mode(merged, "auto", False, 1.0, None) == "plain"  # CPU: generate
    assert decode_mode(merged, "auto", False, 1.0, None, new_tokens=10_000) == "plain"  # compiling pays on CUDA only
    assert decode_mode(merged, "static", False, 1.0, None) == "static"
    for args, why in [
        ((on_top, "static", False, 1.0, None), "PEFT"),
        ((merged, "static", True, 1.0, None), "do_sample"),
        ((merged, "static", False, 1.2, None), "repetition_penalty"),
    ]:
        with pytest.raises(ValueError, match=why):
            decode_mode(*args)
    for unknown in ("turbo", "eager", "inductor"):  # "inductor" was the package's own compiled decoder
        with pytest.raises(ValueError, match="choose one of"):
            decode_mode(merged, unknown, False, 1.0, None)


def test_merged_reload_after_unsloth_in_the_process_reloads_unmerged_and_says_so(trained_adapter, monkeypatch):
    """Unsloth (not installable here) is stood in by its module entry: what load_adapter looks at."""
    import types

    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.machine.hardware import Hardware

    monkeypatch.setitem(sys.modules, "unsloth", types.ModuleType("unsloth"))
    with pytest.warns(UserWarning, match="after Unsloth was used in this process"):
        model, _ = load_adapter(
            trained_adapter, max_seq_length=512, backend="transformers", hardware=Hardware(), merged=True
        )
    assert getattr(model, "peft_config", None)  # base + adapter, not merged


def test_the_backend_that_loaded_a_model_is_known_to_generation(model_and_tokenizer, merged_and_adapter, stories_dir):
    """``prepare_for_inference`` runs Unsloth's ``for_inference`` on a model Unsloth loaded. Before, it read a
    ``model.tinyllama_ft`` attribute that nothing set any more, so it never ran (the Unsloth side is checked on the
    GPU: tests/gpu/test_gpu_trained_model.py counts the calls); the backend is now held by ``modeling`` itself,
    keyed by the model, never set on a Hugging Face model."""
    from transformers import AutoModelForCausalLM

    from tinyllama_ft.models.loading import loaded_backend

    model, _ = model_and_tokenizer  # load_model + add_lora (a PEFT model wrapping the loaded one)
    assert loaded_backend(model) == "transformers" and loaded_backend(model.get_base_model()) == "transformers"
    merged, on_top = merged_and_adapter
    assert loaded_backend(merged[0]) == loaded_backend(on_top[0]) == "transformers"
    assert not hasattr(model, "tinyllama_ft") and not hasattr(merged[0], "tinyllama_ft")
    assert loaded_backend(AutoModelForCausalLM.from_pretrained(str(stories_dir))) is None  # loaded elsewhere


def test_batches_pad_with_the_pad_token_never_eos(stories_dir):
    """Every generation loop pads left with the package's pad token: a tokenizer left without one (or padding with
    EOS) gets ``<unk>`` first. Before, ``held_out.greedy_answers`` padded such a batch with EOS itself."""
    from tinyllama_ft.evaluate.held_out import greedy_answers
    from tinyllama_ft.data.formats import AlpacaFormat
    from tinyllama_ft.machine.hardware import Hardware

    model, tokenizer = stories_lora(stories_dir, Hardware())
    rows = [
        {"instruction": "Name a color.", "input": "", "output": ""},
        {
            "instruction": "Write a very long and detailed story about a dog and a cat who live in a house.",
            "input": "",
            "output": "",
        },
    ]
    seen = []
    real_generate = model.generate

    def recording(**kwargs):  # the real generate runs; the call's padding is recorded
        seen.append((kwargs["input_ids"][0].tolist(), kwargs["pad_token_id"]))
        return real_generate(**kwargs)

    model.generate = recording
    tokenizer.pad_token = None
    batched = greedy_answers(model, tokenizer, rows, max_new_tokens=6, batch_size=2, data_format=AlpacaFormat())
    assert tokenizer.pad_token == "<unk>" and tokenizer.pad_token_id != tokenizer.eos_token_id
    ids, pad = seen[0]
    assert pad == tokenizer.pad_token_id and ids[0] == tokenizer.pad_token_id  # the shorter prompt, left-padded
    assert tokenizer.eos_token_id not in ids
    assert batched == greedy_answers(
        model, tokenizer, rows[:1], max_new_tokens=6, data_format=AlpacaFormat()
    ) + greedy_answers(
        model,
        tokenizer,
        rows[1:],
        max_new_tokens=6,
        data_format=AlpacaFormat(),
    )  # padding changes no answer
