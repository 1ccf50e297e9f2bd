"""The compiled static-cache decoder on a CUDA GPU (run on the GPU machine; skipped elsewhere).

    python3 -m pytest -q tests/gpu/test_gpu_decoding.py   # in its own process: see below

It gives ``generate``'s greedy tokens on a real model (stories260K, float32). Unsloth, once it has loaded a
model, replaces transformers' Llama forward methods for the whole process (test_gpu_faults.py does that),
so this file runs alone.
"""

import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from tinyllama_ft.machine.hardware import detect_hardware  # noqa: E402


def test_static_cache_decoding_gives_generates_greedy_tokens_on_a_real_model(stories_dir, tmp_path):
    from tinyllama_ft.models.adapters import load_adapter, save_adapter
    from tinyllama_ft.infer.generation import stream
    from tinyllama_ft.models.lora import add_lora
    from tinyllama_ft.models.loading import load_model

    if "unsloth" in sys.modules:
        pytest.skip("Unsloth is loaded in this process: run this file alone")
    hardware = detect_hardware()
    model, tokenizer = load_model(
        str(stories_dir),
        max_seq_length=512,
        dtype="float32",
        load_in_4bit=False,
        backend="transformers",
        hardware=hardware,
    )
    model = add_lora(model, gradient_checkpointing=False)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    adapter = save_adapter(model, tokenizer, str(tmp_path / "lora_model"))
    merged, tokenizer = load_adapter(
        adapter,
        max_seq_length=512,
        dtype="float32",
        load_in_4bit=False,
        backend="transformers",
        hardware=hardware,
        merged=True,
    )
    questions = ["Tell me a story about a cat.", "What is the capital of France?"]
    fast = stream(merged, tokenizer, questions, max_new_tokens=200, decode="static", ignore_eos=True, return_ids=True)
    plain = stream(merged, tokenizer, questions, max_new_tokens=200, decode="plain", ignore_eos=True, return_ids=True)
    assert fast == plain


def test_graph_decoder_gives_generates_greedy_tokens_on_a_real_model_and_batches(stories_dir, tmp_path):
    """The fused CUDA-graph decoder (Liger kernels where installed), float32: generate's greedy tokens, one
    prompt at a time and in a left-padded batch."""
    from tinyllama_ft.infer.generation import generate, stream
    from tinyllama_ft.infer.fast.graph_decoder import fused_decoder_for
    from tinyllama_ft.models.loading import load_model

    model, tokenizer = load_model(
        str(stories_dir),
        max_seq_length=512,
        dtype="float32",
        load_in_4bit=False,
        backend="transformers",
        hardware=detect_hardware(),
    )
    questions = ["Tell me a story about a cat.", "What is the capital of France?", "Write a haiku about the sea."]
    fast = stream(model, tokenizer, questions, max_new_tokens=200, decode="auto", ignore_eos=True, return_ids=True)
    decoder = fused_decoder_for(model, 1, 300)
    assert decoder.graph is not None, "auto did not use the CUDA-graph decoder"
    print("kernels:", decoder.kernels, "matmul:", decoder.matmul)
    plain = stream(model, tokenizer, questions, max_new_tokens=200, decode="plain", ignore_eos=True, return_ids=True)
    assert fast == plain
    together = generate(model, tokenizer, questions, max_new_tokens=120)
    assert together == generate(model, tokenizer, questions, max_new_tokens=120, decode="plain")
    assert fused_decoder_for(model, 3, 200).graph is not None


def test_chat_answers_use_the_graph_decoder_and_stop_on_every_stop_token(stories_dir):
    """Issue 21: chat answers go through the same core, so a Llama-class chat model on CUDA answers with the
    CUDA-graph decoder (greedy tokens as generate's), stopping on the template's stop ids (end of turn, then EOS);
    the decoder's state is held by the core's tables, never set on the Hugging Face model."""
    from tinyllama_ft.data.formats import ConversationFormat
    from tinyllama_ft.infer import core
    from tinyllama_ft.infer.chat_generation import chat_generate, chat_stream
    from tinyllama_ft.infer.fast.graph_decoder import FUSED_DECODERS
    from tinyllama_ft.infer.generation import generate
    from tinyllama_ft.models.loading import load_model

    class Cfg:
        max_seq_length = 512

    model, tokenizer = load_model(
        str(stories_dir),
        max_seq_length=512,
        dtype="float32",
        load_in_4bit=False,
        backend="transformers",
        hardware=detect_hardware(),
    )
    fmt = ConversationFormat("messages", chat_template="zephyr")
    fmt.prepare(model, tokenizer, Cfg())
    stops = fmt.stop_token_ids(tokenizer)
    assert core.decode_mode(model, "auto", False, 1.0, None) == "graph"
    questions = ["Tell me a story about a cat.", "What is the capital of France?", "Write a haiku about the sea."]
    fast = chat_generate(model, tokenizer, questions, max_new_tokens=120, return_ids=True)
    assert FUSED_DECODERS[model][3].graph is not None and model not in core.GRAPH_FAILED
    plain = chat_generate(model, tokenizer, questions, max_new_tokens=120, return_ids=True, decode="plain")
    assert fast == plain and not any(set(ids) & set(stops) for ids in fast)
    streamed = chat_stream(model, tokenizer, questions, max_new_tokens=120)
    assert FUSED_DECODERS[model][1].graph is not None
    assert streamed == [tokenizer.decode(ids, skip_special_tokens=True) for ids in plain]
    assert generate(model, tokenizer, questions, max_new_tokens=120, data_format=fmt) == streamed
    assert not [name for name in vars(model) if name.startswith("_tinyllama_ft")]
