"""The fused CUDA-graph decoder's math on a CPU (no graph there): transformers' greedy tokens, one prompt
or a left-padded batch, on the real stories260K model in float32 with a merged adapter."""

import pytest

from helpers import trained_stories_adapter
from tinyllama_ft.infer.core import decode_mode
from tinyllama_ft.infer.generation import generate, stream
from tinyllama_ft.data.alpaca_prompts import format_prompt

QUESTIONS = ["Tell me a story about a cat.", "What is the capital of France?", "Write a haiku about the sea, please."]


@pytest.fixture(scope="module")
def merged_and_adapter(stories_dir, tmp_path_factory):
    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.machine.hardware import Hardware

    adapter = trained_stories_adapter(stories_dir, tmp_path_factory.mktemp("adapter"))
    model, tokenizer = load_adapter(adapter, max_seq_length=512, backend="transformers", hardware=Hardware())
    merged = load_adapter(adapter, max_seq_length=512, backend="transformers", hardware=Hardware(), merged=True)
    return merged, (model, tokenizer)


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_stream_through_the_fused_decoder_gives_generates_greedy_tokens(merged_and_adapter, capsys, ignore_eos):
    (model, tokenizer), _ = merged_and_adapter
    fast = stream(
        model, tokenizer, QUESTIONS, max_new_tokens=150, decode="graph", ignore_eos=ignore_eos, return_ids=True
    )
    plain = stream(
        model, tokenizer, QUESTIONS, max_new_tokens=150, decode="plain", ignore_eos=ignore_eos, return_ids=True
    )
    assert fast == plain
    assert (
        all(len(ids) == 150 for ids in fast) if ignore_eos else all(tokenizer.eos_token_id not in ids for ids in fast)
    )
    printed = capsys.readouterr().out
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in fast]
    assert all(t.strip()[:40] in printed for t in texts)


def test_left_padded_batch_through_the_fused_decoder_gives_generates_answers(merged_and_adapter):
    (model, tokenizer), _ = merged_and_adapter
    lengths = {len(tokenizer(format_prompt(q)).input_ids) for q in QUESTIONS}
    assert len(lengths) == 3  # the batch really is padded
    fast = generate(model, tokenizer, QUESTIONS, max_new_tokens=80, decode="graph")
    assert fast == generate(model, tokenizer, QUESTIONS, max_new_tokens=80, decode="plain")
    assert fast == [generate(model, tokenizer, q, max_new_tokens=80, decode="plain")[0] for q in QUESTIONS]
    assert tokenizer.padding_side == "right"


def test_decoders_are_kept_per_batch_size_and_share_the_fused_weights(merged_and_adapter):
    from tinyllama_ft.infer.fast.graph_decoder import FusedLlamaDecoder, fused_decoder_for

    (model, tokenizer), _ = merged_and_adapter
    one = fused_decoder_for(model, 1, 100)
    assert fused_decoder_for(model, 1, 400) is one and one.L == 512 and one.kernels == "torch" and not one.use_graph
    assert one.matmul == "cublas"  # "auto" off CUDA
    with pytest.raises(ValueError, match="needs a CUDA device"):
        FusedLlamaDecoder(model, 64, 1, matmul="triton")
    three = fused_decoder_for(model, 3, 100)
    assert three is not one and three.layers is one.layers
    ids = tokenizer([format_prompt("Tell me a story.")], return_tensors="pt").input_ids
    chunks = []
    answer = one.decode(ids, None, 50, None, on_tokens=chunks.append, every=8)[0]
    assert [len(c[0]) for c in chunks] == [8] * 6 + [2] and sum((c[0] for c in chunks), []) == answer
    with pytest.raises(ValueError, match="exceeds the cache"):
        one.decode(ids, None, 2000, None)
    with pytest.raises(ValueError, match="rows"):
        three.decode(ids, None, 10, None)


def test_auto_picks_the_fused_decoder_only_on_cuda_and_forcing_it_says_why_not(merged_and_adapter):
    (merged, _), (on_top, _) = merged_and_adapter
    assert decode_mode(merged, "auto", False, 1.0, None) == "plain"  # CPU: generate
    assert decode_mode(merged, "graph", False, 1.0, None) == "graph"
    assert decode_mode(on_top, "graph", False, 1.0, None) == "graph"  # read as a merged copy (below)
    for args, why in [
        ((on_top, "static", False, 1.0, None), "PEFT"),
        ((merged, "graph", True, 1.0, None), "do_sample"),
    ]:
        with pytest.raises(ValueError, match=why):
            decode_mode(*args)


def test_a_peft_model_decodes_through_a_merged_copy_as_generate_does(merged_and_adapter):
    """Issue 32 target 4: the held-out checks' greedy answers on the PEFT model (adapter on, and off as the
    side-by-side table's base column) through the fused decoder equal transformers' ``generate`` on the PEFT
    model, in float32 on a CPU, for a left-padded batch of 16 rows; the merged copy lives only for the call."""
    import torch

    from tinyllama_ft.infer.core import generate_answers
    from tinyllama_ft.infer.fast.graph_decoder import FUSED_DECODERS
    from tinyllama_ft.infer.fast.llama_ops import FUSED_WEIGHTS, why_not_fusable

    (merged, _), (on_top, tokenizer) = merged_and_adapter
    assert why_not_fusable(on_top) is None and on_top.dtype == torch.float32
    prompts = [format_prompt(q) for q in (QUESTIONS * 6)[:16]]
    kwargs = dict(stop_token_ids=[tokenizer.eos_token_id], max_new_tokens=60, batch_size=16)

    def both():
        fast = generate_answers(on_top, tokenizer, prompts, decode="graph", **kwargs)
        assert on_top not in FUSED_WEIGHTS and on_top not in FUSED_DECODERS
        return fast, generate_answers(on_top, tokenizer, prompts, decode="plain", **kwargs)

    tuned, tuned_plain = both()
    assert tuned == tuned_plain
    assert tuned == generate_answers(merged, tokenizer, prompts, decode="plain", **kwargs)
    with on_top.disable_adapter():
        base, base_plain = both()
    assert base == base_plain and base != tuned  # the adapter changes the answers: the copy follows it
