"""LoRA: the article's knobs, the same trainable count and adapter config on the transformers backend."""

import pytest

from tinyllama_ft.config.finetune import LLAMA_TARGET_MODULES
from tinyllama_ft.models.lora import add_lora, lora_config, trainable_parameters


def test_tinyllama_shape_trains_25_231_360_parameters(tinyllama_dir):
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    with torch.device("meta"):  # the real shape without allocating 1.1B weights
        model = LlamaForCausalLM(AutoConfig.from_pretrained(str(tinyllama_dir)))
    peft_model = add_lora(model, gradient_checkpointing=False, backend="transformers")
    assert trainable_parameters(peft_model)[0] == 25_231_360


def test_article_defaults_reach_the_peft_config():
    config = lora_config()
    assert (config.r, config.lora_alpha, config.lora_dropout, config.bias) == (32, 32, 0.0, "none")
    assert set(config.target_modules) == set(LLAMA_TARGET_MODULES)
    assert config.use_rslora is False and config.loftq_config == {}
    assert config.task_type == "CAUSAL_LM"


def test_same_seed_same_init_and_only_adapters_train(stories_dir, cpu):
    import torch

    from tinyllama_ft.models.loading import load_model

    weights = []
    for _ in range(2):
        model, _ = load_model(
            str(stories_dir), max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
        )
        model = add_lora(model, seed=3407)
        weights.append({n: p.detach().clone() for n, p in model.named_parameters() if "lora_A" in n})
        assert all(("lora_" in n) == p.requires_grad for n, p in model.named_parameters())
    assert weights[0].keys() == weights[1].keys() and weights[0]
    for name in weights[0]:
        torch.testing.assert_close(weights[0][name], weights[1][name])


def test_unknown_target_module_is_an_error(stories_dir, cpu):
    from tinyllama_ft.models.loading import load_model

    model, _ = load_model(
        str(stories_dir), max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    with pytest.raises(ValueError, match="not_a_module"):
        add_lora(model, target_modules=["not_a_module"], gradient_checkpointing=False)


def test_wrapping_and_reloading_print_no_checkpointing_alias_warning(stories_dir, tmp_path, cpu):
    """Issue 28: transformers (>= 5.2x) deprecates ``is_gradient_checkpointing``, which peft reads each time it wraps
    a model; neither ``add_lora`` nor ``load_adapter`` lets that FutureWarning reach the notebook or the terminal
    (with or without gradient checkpointing), and other warnings still pass."""
    import warnings

    from helpers import trained_stories_adapter
    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.models.loading import load_model

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for checkpointing in (False, True):
            model, _ = load_model(str(stories_dir), max_seq_length=512, load_in_4bit=False, hardware=cpu)
            add_lora(model, gradient_checkpointing=checkpointing)
        load_adapter(trained_stories_adapter(stories_dir, tmp_path, cpu), hardware=cpu, merged=False)
    said = [str(w.message) for w in caught]
    assert not [m for m in said if "is_gradient_checkpointing" in m], said


def test_a_misspelt_target_module_beside_a_right_one_is_refused_naming_it(stories_dir, cpu):
    """peft refuses only when no name matches: ``q_proj,v_prj`` adapted q_proj alone without a word (issue 40
    adversarial test). Every name must be a module's; the error lists the model's projections and exits 2 (a
    ConfigError)."""
    from tinyllama_ft.config.coercion import ConfigError
    from tinyllama_ft.models.loading import load_model

    model, _ = load_model(
        str(stories_dir), max_seq_length=512, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    with pytest.raises(ConfigError, match=r"'v_prj' is no module of LlamaForCausalLM \(its projections are q_proj, k_"):
        add_lora(model, target_modules=["q_proj", "v_prj"], gradient_checkpointing=False)
    peft_model = add_lora(model, target_modules=["q_proj", "self_attn.v_proj"], gradient_checkpointing=False)
    adapted = {n.split(".")[-1] for n, m in peft_model.named_modules() if hasattr(m, "lora_A")}
    assert adapted == {"q_proj", "v_proj"}  # a name's last dotted parts match, as peft matches them


def test_a_chat_run_adapts_the_target_modules_it_is_given(tmp_path):
    """A conversation run reads the LoRA targets from the model's layers only for the default (the Llama names):
    ``target_modules: [q_proj, v_proj]`` was replaced by all seven projections (issue 40 adversarial test)."""
    from chat_fixtures import smollm2_tokenizer, tiny_model

    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.data.formats import ConversationFormat

    tokenizer = smollm2_tokenizer()
    model = tiny_model("llama", tokenizer)
    chosen = FinetuneConfig(dataset_format="messages", target_modules="q_proj,v_proj", output_dir=str(tmp_path))
    assert ConversationFormat("messages").prepare(model, tokenizer, chosen) == ("q_proj", "v_proj")
    default = FinetuneConfig(dataset_format="messages", output_dir=str(tmp_path))
    assert ConversationFormat("messages").prepare(model, tokenizer, default) == LLAMA_TARGET_MODULES
