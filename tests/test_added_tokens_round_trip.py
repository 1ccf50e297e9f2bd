"""Issue 22, item 3: a model whose named chat template added tokens (ChatML's <|im_start|> / <|im_end|> on
stories260K) trains its embeddings and LM head beside the adapter; reloading it must work on a tied base
(stories260K, as SmolLM2 and Qwen2.5) and an untied one (stories260K's weights with its own LM head, as TinyLlama).

PEFT saves the trained matrices under its wrappers' names too (``lm_head.modules_to_save.weight``,
``lm_head.original_module.weight``) when the base is a folder it can read the vocabulary of: before the fix the fit
check looked for those names in the plain base, and the reload (CLI, notebook, export) failed with
``AdapterMismatchError: ... target modules this base lacks: lm_head.modules_to_save.weight, ...`` although PEFT
loads the folder and answers right. Each round trip here trains once (module fixture), then reloads unmerged and
merged and exports ``merged_16bit``: all answer as the trained model did."""

from __future__ import annotations

import json

import pytest

from chat_fixtures import cpu_trl_cannot_train, train_on_multiturn

ADDED = ["<|im_start|>", "<|im_end|>"]
#: How every reload here loads: CPU, fp32, transformers, 256-token windows.
LOAD = dict(max_seq_length=256, dtype="float32", load_in_4bit=False, backend="transformers")


def _untied_stories(stories_dir, folder):
    """stories260K with ``tie_word_embeddings=False``: its weights, and an LM head of its own (the tied matrix plus
    noise, so that a reload confusing the two matrices answers differently)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    config = json.loads((stories_dir / "config.json").read_text())
    tied = AutoModelForCausalLM.from_pretrained(str(stories_dir))
    model = LlamaForCausalLM(LlamaConfig(**{**config, "tie_word_embeddings": False}))
    model.load_state_dict(tied.state_dict())
    torch.manual_seed(0)
    with torch.no_grad():
        model.lm_head.weight.copy_(tied.lm_head.weight + 0.02 * torch.randn_like(tied.lm_head.weight))
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(stories_dir)).save_pretrained(folder)
    return folder


def _train(model, tokenizer, out):
    train_on_multiturn(model, tokenizer, out, max_steps=6)


def _answer(model, tokenizer, ids):
    """``(logits of the prompt, 8 greedy tokens)``."""
    import torch

    with torch.no_grad():
        logits = model(**ids).logits
        out = model.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return logits, out[0, ids["input_ids"].shape[1] :].tolist()


@pytest.fixture(scope="module", params=["tied", "untied"])
def trained(request, stories_dir, tmp_path_factory):
    """A base folder, the adapter trained on it with ChatML added, the prompt and what the trained model answered."""
    if cpu_trl_cannot_train():
        pytest.skip("TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinyllama_ft.models.adapters import save_adapter
    from tinyllama_ft.models.families import prepare_family
    from tinyllama_ft.models.lora import add_lora, embedding_modules

    tmp = tmp_path_factory.mktemp(f"round_trip_{request.param}")
    base = stories_dir if request.param == "tied" else _untied_stories(stories_dir, tmp / "untied_base")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(str(base)), AutoTokenizer.from_pretrained(str(base))
    assert embedding_modules(model) == (["embed_tokens", "lm_head"], request.param == "tied")
    setup = prepare_family(model, tokenizer, chat_template="chatml", max_seq_length=256)
    assert len(setup.added_token_ids) == 2 and len(tokenizer) == 514
    model = add_lora(
        model,
        target_modules=setup.target_modules,
        gradient_checkpointing=False,
        train_embeddings=True,
        backend="transformers",
    )
    _train(model, tokenizer, tmp / "run")
    adapter = save_adapter(model.eval(), tokenizer, str(tmp / "lora_model"))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tell me a story about a cat."}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    assert set(ids["input_ids"][0].tolist()) & set(setup.added_token_ids)
    logits, tokens = _answer(model, tokenizer, ids)
    # peft >= 0.19 keeps a tied pair's trained copies one matrix (lora.lora_config's ensure_weight_tying); 0.18 has
    # two, trained alike: the reload must give back what training had
    shared = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    return dict(
        base=str(base),
        adapter=adapter,
        tmp=tmp,
        ids=ids,
        logits=logits,
        tokens=tokens,
        tied=request.param == "tied",
        shared=shared,
    )


def test_the_fit_check_passes_on_the_resized_training_base(trained):
    """The fit check on the base the adapter was trained on, resized to the saved rows (``saved_embedding_rows``),
    as ``load_adapter`` runs it: no problem, whichever of PEFT's names the trained matrices were saved under."""
    from transformers import AutoModelForCausalLM

    from tinyllama_ft.models.adapter_fit import _saved_tensors, adapter_fit_problems, saved_embedding_rows

    saved = _saved_tensors(trained["adapter"])
    assert saved["lm_head.weight"] == [514, 64] and saved["model.embed_tokens.weight"] == [514, 64]
    base = AutoModelForCausalLM.from_pretrained(trained["base"])
    assert saved_embedding_rows(trained["adapter"], base) == 514
    base.resize_token_embeddings(514, mean_resizing=False)
    assert adapter_fit_problems(trained["adapter"], base) == []


@pytest.mark.parametrize("merged", [False, True], ids=["unmerged", "merged"])
def test_load_adapter_answers_as_the_trained_model(trained, merged, cpu):
    import torch

    from tinyllama_ft.models.adapters import load_adapter

    model, tokenizer = load_adapter(trained["adapter"], hardware=cpu, merged=merged, **LOAD)
    assert hasattr(model, "peft_config") is not merged
    assert len(tokenizer) == 514 and model.get_input_embeddings().num_embeddings == 514
    assert set(tokenizer.convert_tokens_to_ids(ADDED)) == {512, 513}
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) is trained["shared"]
    logits, tokens = _answer(model, tokenizer, trained["ids"])
    torch.testing.assert_close(logits, trained["logits"], atol=1e-4, rtol=1e-4)
    assert tokens == trained["tokens"]


def test_export_merged_16bit_loads_with_transformers_and_keeps_the_added_tokens(trained, cpu):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinyllama_ft.export.adapter_export import export_adapter

    results = export_adapter(
        adapter_dir=trained["adapter"],
        formats=["merged_16bit"],
        output_dir=str(trained["tmp"]),
        max_seq_length=256,
        dtype="float32",
        load_in_4bit=False,
        merged_dtype="float32",
        hardware=cpu,
    )
    folder = results["merged_16bit"].path
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    assert model.config.vocab_size == 514 and model.config.tie_word_embeddings is trained["tied"]
    assert all(token in tokenizer.get_vocab() for token in ADDED)
    assert tokenizer.convert_tokens_to_ids(ADDED) == [512, 513]
    logits, tokens = _answer(model.eval(), tokenizer, trained["ids"])
    torch.testing.assert_close(logits, trained["logits"], atol=1e-4, rtol=1e-4)
    assert tokens == trained["tokens"]


def test_base_name_maps_each_peft_spelling_to_the_base_parameter(stories_dir):
    """The names PEFT versions save a ``modules_to_save`` / targeted module under, all one base parameter; a
    base's own module or parameter spelled like a wrapper's infix is no infix."""
    import torch
    from transformers import AutoModelForCausalLM

    from tinyllama_ft.models.adapter_fit import base_name

    modules = dict(AutoModelForCausalLM.from_pretrained(str(stories_dir)).named_modules())
    for saved in (
        "lm_head.weight",
        "lm_head.modules_to_save.weight",
        "lm_head.modules_to_save.default.weight",
        "lm_head.original_module.weight",
        "lm_head.base_layer.weight",
    ):
        assert base_name(saved, modules) == "lm_head.weight", saved
    assert base_name("model.embed_tokens.modules_to_save.my_adapter.weight", modules) == "model.embed_tokens.weight"
    lora = "model.layers.0.self_attn.q_proj.lora_A.weight"
    assert base_name(lora, modules) == lora
    own = torch.nn.Module()
    own.base_layer = torch.nn.Linear(2, 2)
    assert (
        base_name("block.base_layer.weight", {"block": own, "block.base_layer": own.base_layer})
        == "block.base_layer.weight"
    )


def test_a_resized_adapter_on_an_unresized_base_is_still_refused_once_per_matrix(trained):
    """A real misfit stays one: the 514-row matrices (saved under three names each) against the plain 512-row
    base, each named once, beside the tokenizer's 514 tokens."""
    from transformers import AutoModelForCausalLM

    from tinyllama_ft.models.adapter_fit import adapter_fit_problems

    problems = adapter_fit_problems(trained["adapter"], AutoModelForCausalLM.from_pretrained(trained["base"]))
    assert problems[0].startswith("vocabulary: the adapter's tokenizer has 514 tokens, this base embeds 512")
    assert problems[1:] == [
        "hidden sizes differ: lm_head.weight: [514, 64] in the adapter, [512, 64] in this base; "
        "model.embed_tokens.weight: [514, 64] in the adapter, [512, 64] in this base"
    ]


def test_gguf_lora_of_an_adapter_with_trained_embeddings_is_refused_before_converting(trained):
    """llama.cpp's LoRA converter stops at the saved embeddings (``Unexpected name ...modules_to_save.weight``,
    after training, in one long line of its log); the export now refuses it first, naming what works."""
    from tinyllama_ft.models.adapters import saves_whole_modules
    from tinyllama_ft.config.coercion import ConfigError
    from tinyllama_ft.export.adapter_export import check_export_tools, export_adapter

    assert saves_whole_modules(trained["adapter"])
    with pytest.raises(ConfigError, match="gguf_lora holds LoRA matrices only.*gguf_f16, gguf_q8_0 or merged_16bit"):
        export_adapter(adapter_dir=trained["adapter"], formats=["gguf_lora"], output_dir=str(trained["tmp"] / "x"))
    assert not (trained["tmp"] / "x").exists()
    check_export_tools(["gguf_lora"], whole_modules=False)  # a plain LoRA exports as one
