"""An adapter on the wrong base (issue 10, item 5): real stories260K adapters loaded onto real tiny bases
built from the TinyLlama config (another vocabulary) or with fewer layers are refused, naming what
differs; without the check, PEFT loads them and generation fails with IndexError."""

import json
import shutil

import pytest

from helpers import stories_lora
from tinyllama_ft.models.adapter_fit import AdapterMismatchError, adapter_fit_problems
from tinyllama_ft.models.adapters import load_adapter, save_adapter

#: How every base here loads: CPU, fp32, transformers, 256-token windows.
LOAD = dict(max_seq_length=256, dtype=None, load_in_4bit=False, backend="transformers")
STORIES_SHAPE = dict(
    hidden_size=64, intermediate_size=172, num_hidden_layers=5, num_attention_heads=8, num_key_value_heads=4, head_dim=8
)


def _tiny_base(config_dir, tokenizer_dir, folder, **changes):
    """A random tiny Llama saved as a model folder: ``config_dir``'s config.json with ``changes``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    config = json.loads((config_dir / "config.json").read_text())
    config.update(changes)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**config)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def made(stories_dir, tinyllama_dir, tmp_path_factory, cpu):
    tmp = tmp_path_factory.mktemp("fit")
    model, tokenizer = stories_lora(stories_dir, cpu, 256)
    stories_adapter = save_adapter(model, tokenizer, str(tmp / "stories_adapter"))
    # TinyLlama's config (vocabulary 32000, its tokenizer) at stories260K's sizes: only the vocabulary differs
    tiny_tinyllama = _tiny_base(tinyllama_dir, tinyllama_dir, tmp / "tiny_tinyllama", **STORIES_SHAPE)
    fewer_layers = _tiny_base(stories_dir, stories_dir, tmp / "three_layers", num_hidden_layers=3)
    return {
        "tmp": tmp,
        "stories_adapter": stories_adapter,
        "tiny_tinyllama": tiny_tinyllama,
        "fewer_layers": fewer_layers,
    }


def test_the_right_base_fits(made, stories_dir, cpu):
    model, tokenizer = load_adapter(made["stories_adapter"], hardware=cpu, **LOAD, base_model=str(stories_dir))
    assert model.peft_config["default"].r > 0


def test_a_stories_adapter_on_a_tinyllama_shaped_base_with_another_vocabulary_is_refused(made, cpu):
    with pytest.raises(AdapterMismatchError) as e:
        load_adapter(made["stories_adapter"], hardware=cpu, **LOAD, base_model=str(made["tiny_tinyllama"]))
    said = str(e.value)
    assert "vocab_size: 512 in the adapter's base, 32000 in this base" in said
    assert str(made["tiny_tinyllama"]) in said and "hidden_size" not in said  # only what differs


def test_an_adapter_whose_tokenizer_outgrows_the_base_is_refused_even_without_its_base(made, stories_dir, cpu):
    """The issue's IndexError: an adapter trained with a 32000-token vocabulary, onto stories260K (512)."""
    import torch
    from peft import PeftModel
    from tinyllama_ft.infer.generation import generate
    from tinyllama_ft.models.lora import add_lora, peft_wrapping
    from tinyllama_ft.models.loading import load_model

    base, tokenizer = load_model(str(made["tiny_tinyllama"]), hardware=cpu, **LOAD)
    adapter = save_adapter(
        add_lora(base, gradient_checkpointing=False), tokenizer, str(made["tmp"] / "big_vocab_adapter")
    )
    config = json.loads((made["tmp"] / "big_vocab_adapter" / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "someone/base-that-is-not-here"  # the recorded base cannot be consulted
    (made["tmp"] / "big_vocab_adapter" / "adapter_config.json").write_text(json.dumps(config))
    small, _ = load_model(str(stories_dir), hardware=cpu, **LOAD)
    problems = adapter_fit_problems(adapter, small)
    assert problems == [
        "vocabulary: the adapter's tokenizer has 32000 tokens, this base embeds 512 (ids from 512 "
        "on would fail with IndexError at generation)"
    ]
    with pytest.raises(AdapterMismatchError, match="32000 tokens, this base embeds 512"):
        load_adapter(adapter, hardware=cpu, **LOAD, base_model=str(stories_dir))
    # what the check prevents: PEFT loads it silently, generation fails far from the cause
    with peft_wrapping():
        unchecked = PeftModel.from_pretrained(small, adapter)
    with pytest.raises(IndexError):
        with torch.no_grad():
            generate(unchecked, tokenizer, ["Name a color."], max_new_tokens=2)


def test_a_base_lacking_target_modules_is_refused_naming_them(made, cpu):
    with pytest.raises(AdapterMismatchError) as e:
        load_adapter(made["stories_adapter"], hardware=cpu, **LOAD, base_model=str(made["fewer_layers"]))
    said = str(e.value)
    assert "num_hidden_layers: 5 in the adapter's base, 3 in this base" in said
    assert "target modules this base lacks: model.layers.3.mlp.down_proj" in said and "'q_proj'" in said


def test_module_sizes_are_checked_when_the_recorded_base_is_unknown(made, stories_dir, cpu, tmp_path):
    from tinyllama_ft.models.loading import load_model

    adapter = tmp_path / "adapter"
    shutil.copytree(made["stories_adapter"], adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "someone/base-that-is-not-here"
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    wide = _tiny_base(stories_dir, stories_dir, tmp_path / "wide", intermediate_size=256)
    base, _ = load_model(str(wide), hardware=cpu, **LOAD)
    problems = adapter_fit_problems(str(adapter), base)
    assert len(problems) == 1 and problems[0].startswith(
        "hidden sizes differ: model.layers.0.mlp.down_proj: the adapter's LoRA input size is 172, this base's is 256"
    )


def test_another_model_type_alone_is_no_misfit_but_is_named_beside_one(made, stories_dir, cpu, tmp_path):
    """A repository shipping its own code for the same weights has its own model_type (tests/test_secrets.py
    loads such a copy of stories260K with this adapter): only sizes, layers, vocabulary and modules decide."""
    from tinyllama_ft.models.loading import load_model

    recorded = tmp_path / "repackaged"  # the adapter's recorded base: stories260K's config, another model_type
    recorded.mkdir()
    config = json.loads((stories_dir / "config.json").read_text())
    (recorded / "config.json").write_text(json.dumps({**config, "model_type": "repackaged_llama"}))
    adapter = tmp_path / "adapter"
    shutil.copytree(made["stories_adapter"], adapter)
    adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(
        json.dumps({**adapter_config, "base_model_name_or_path": str(recorded)})
    )
    same, _ = load_model(str(stories_dir), hardware=cpu, **LOAD)
    assert adapter_fit_problems(str(adapter), same) == []
    fewer, _ = load_model(str(made["fewer_layers"]), hardware=cpu, **LOAD)
    problems = adapter_fit_problems(str(adapter), fewer)
    assert problems[0] == "model_type: 'repackaged_llama' in the adapter's base, 'llama' in this base"
    assert any(p.startswith("num_hidden_layers: 5") for p in problems[1:])
