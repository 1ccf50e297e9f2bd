"""A chat template that adds tokens to a base model (ChatML's <|im_start|> / <|im_end|> on TinyLlama): the
embeddings and LM head train beside the adapter (lora.add_lora's train_embeddings), the adapter saves them, and
load_adapter resizes the base to them and reloads what was trained (before this, the new rows stayed untrained
and the reload failed with "the adapter's tokenizer has 32002 tokens, this base embeds 32000")."""

import pytest

from chat_fixtures import cpu_trl_cannot_train, train_on_multiturn, tiny_model, tinyllama_tokenizer


@pytest.mark.skipif(cpu_trl_cannot_train(), reason="TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
def test_a_tied_model_trains_its_embeddings_and_keeps_them_tied(stories_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinyllama_ft.models.families import prepare_family
    from tinyllama_ft.models.lora import add_lora, embedding_modules

    model, tokenizer = (
        AutoModelForCausalLM.from_pretrained(str(stories_dir)),
        AutoTokenizer.from_pretrained(str(stories_dir)),
    )
    assert embedding_modules(model) == (["embed_tokens", "lm_head"], True)
    setup = prepare_family(model, tokenizer, chat_template="chatml", max_seq_length=256)
    model = add_lora(
        model,
        target_modules=setup.target_modules,
        gradient_checkpointing=False,
        train_embeddings=True,
        backend="transformers",
    )
    _train(model, tokenizer, tmp_path)
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight


def test_unsloth_is_refused_trained_embeddings_by_name():
    from tinyllama_ft.models.lora import add_lora

    with pytest.raises(
        ValueError, match=r"train_embeddings .* not done on the Unsloth backend: set backend='transformers'"
    ):
        add_lora(object(), train_embeddings=True, backend="unsloth")


def _train(model, tokenizer, out):
    train_on_multiturn(model, tokenizer, out, max_steps=8)


@pytest.fixture(scope="module")
def chatml_tinyllama(tmp_path_factory):
    """A 2-layer Llama on the real TinyLlama tokenizer (untied LM head, as TinyLlama's), ChatML added, trained."""
    if cpu_trl_cannot_train():
        pytest.skip("TRL < 1.16 trains only on a GPU (fused Triton loss kernel)")
    from tinyllama_ft.models.adapters import save_adapter
    from tinyllama_ft.models.families import prepare_family
    from tinyllama_ft.models.lora import add_lora

    tokenizer = tinyllama_tokenizer()
    model = tiny_model("llama", tokenizer)
    assert not model.config.tie_word_embeddings
    setup = prepare_family(model, tokenizer, chat_template="chatml", max_seq_length=256)
    assert len(setup.added_token_ids) == 2 and len(tokenizer) == 32002
    before = {
        name: model.get_parameter(name).detach().clone() for name in ("model.embed_tokens.weight", "lm_head.weight")
    }
    model = add_lora(
        model,
        target_modules=setup.target_modules,
        gradient_checkpointing=False,
        train_embeddings=True,
        backend="transformers",
    )
    out = tmp_path_factory.mktemp("chatml")
    _train(model, tokenizer, out)
    adapter = save_adapter(model.eval(), tokenizer, str(out / "lora_model"))
    return model, tokenizer, setup, before, adapter


def test_the_added_tokens_rows_train_in_both_matrices(chatml_tinyllama):
    model, _, setup, before, _ = chatml_tinyllama
    new = setup.added_token_ids
    for name, now in (
        ("model.embed_tokens.weight", model.get_input_embeddings().weight),
        ("lm_head.weight", model.get_output_embeddings().weight),
    ):
        assert (now.detach()[new] - before[name][new]).abs().amax(dim=1).min() > 1e-3, name  # each new row moved


def test_load_adapter_resizes_the_base_and_reloads_what_was_trained(chatml_tinyllama, monkeypatch):
    import torch

    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.machine.hardware import Hardware

    model, tokenizer, _, _, adapter = chatml_tinyllama
    # the adapter's recorded base is the in-memory tiny model: save it (un-resized, as a user's base is) beside
    base_dir = str(adapter) + "-base"
    base_tokenizer = tinyllama_tokenizer()
    tiny_model("llama", base_tokenizer).save_pretrained(base_dir)
    base_tokenizer.save_pretrained(base_dir)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi there"}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    assert set(ids["input_ids"][0].tolist()) & set(tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]))
    with torch.no_grad():
        want = model(**ids).logits
    for merged in (False, True):
        reloaded, reloaded_tok = load_adapter(
            adapter,
            max_seq_length=256,
            dtype="float32",
            load_in_4bit=False,
            backend="transformers",
            hardware=Hardware(),
            base_model=base_dir,
            merged=merged,
        )
        assert len(reloaded_tok) == 32002 and reloaded.get_input_embeddings().num_embeddings == 32002
        with torch.no_grad():
            got = reloaded(**ids).logits
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
