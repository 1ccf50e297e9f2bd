"""target_modules naming embed_tokens / lm_head trains them in full (PEFT's modules_to_save) at their own
embedding_learning_rate, and the saved adapter carries them back on reload. Real stories260K model, real TRL
trainer."""

import pytest
import torch

from helpers import sft_trainer
from tinyllama_ft.machine.hardware import Hardware


def _model(stories_dir, target_modules):
    from tinyllama_ft.models.loading import load_model
    from tinyllama_ft.models.lora import add_lora

    model, tokenizer = load_model(
        str(stories_dir),
        max_seq_length=256,
        dtype=None,
        load_in_4bit=False,
        backend="transformers",
        hardware=Hardware(),
    )
    return add_lora(model, target_modules=target_modules, gradient_checkpointing=False), tokenizer


@pytest.fixture(scope="module")
def whole(stories_dir):
    return _model(stories_dir, ("q_proj", "v_proj", "embed_tokens", "lm_head"))


def test_embed_tokens_and_lm_head_train_in_full_not_as_lora(whole):
    model, _ = whole
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("embed_tokens.modules_to_save" in n for n in trainable)
    assert any("lm_head.modules_to_save" in n for n in trainable) or model.config.tie_word_embeddings
    assert not any("embed_tokens.lora_" in n or "lm_head.lora_" in n for n in trainable)
    assert any("q_proj.lora_A" in n for n in trainable)


def test_the_whole_modules_get_their_own_learning_rate(whole, tmp_path, corpus_rows):
    model, tokenizer = whole
    trainer = sft_trainer(
        model,
        tokenizer,
        corpus_rows(tokenizer),
        tmp_path,
        max_seq_length=64,
        dataset_format="text",
        learning_rate=1e-3,
        embedding_learning_rate=1e-5,
        per_device_train_batch_size=2,
        max_steps=1,
    )
    optimizer = trainer.create_optimizer()
    whole_ids = {id(p) for n, p in model.named_parameters() if p.requires_grad and "modules_to_save" in n}
    rates = {(id(p) in whole_ids, group["lr"]) for group in optimizer.param_groups for p in group["params"]}
    assert rates == {(True, 1e-5), (False, 1e-3)}
    assert sum(len(g["params"]) for g in optimizer.param_groups) == sum(
        p.requires_grad for p in model.parameters()
    )  # every trainable parameter in exactly one group


@pytest.fixture(scope="module")
def corpus_rows():
    from pathlib import Path

    from tinyllama_ft.data.text_documents import load_documents, tokenize_documents

    topics = Path(__file__).resolve().parents[1] / "data" / "python_reference" / "topics"

    def rows(tokenizer):
        docs, _ = load_documents(str(topics))
        return tokenize_documents(docs.select(range(4)), tokenizer, max_seq_length=64)[0]

    return rows


def test_save_and_reload_carry_the_whole_modules(stories_dir, tmp_path):
    from tinyllama_ft.models.adapters import load_adapter, save_adapter

    model, tokenizer = _model(stories_dir, ("q_proj", "embed_tokens"))
    name = next(n for n, p in model.named_parameters() if "embed_tokens.modules_to_save" in n)
    with torch.no_grad():
        dict(model.named_parameters())[name].add_(0.5)  # moved, as training would
    moved = model.get_input_embeddings().weight.detach().clone()
    path = save_adapter(model, tokenizer, str(tmp_path / "adapter"))
    reloaded, _ = load_adapter(path, backend="transformers", hardware=Hardware())
    torch.testing.assert_close(reloaded.get_input_embeddings().weight, moved)


def test_the_memory_estimate_counts_the_whole_modules(tinyllama_dir):
    """Each vocabulary x hidden matrix trained in full adds its fp32 copy, gradient and two Adam moments (16 bytes a
    parameter) to the plan's estimate; a tied pair counts once."""
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.train.memory_estimate import estimate_peak_gib, model_dims
    from tinyllama_ft.train.plan import whole_module_count

    import json

    dims = model_dims(json.loads((tinyllama_dir / "config.json").read_text(encoding="utf-8")))
    sizes = dict(micro_batch=2, max_seq_length=512, gradient_checkpointing=True, backend="transformers")
    base = estimate_peak_gib(dims, load_in_4bit=True, fused_loss=False, **sizes)
    both = estimate_peak_gib(dims, load_in_4bit=True, fused_loss=False, whole_modules=2, **sizes)
    assert both - base == pytest.approx(2 * dims["vocab"] * dims["hidden"] * 16 / 2**30, rel=1e-9)
    cfg = FinetuneConfig(target_modules=("q_proj", "embed_tokens", "lm_head"))
    assert whole_module_count(cfg.target_modules, dims) == 2 and not dims["tied"]  # TinyLlama: untied
    assert whole_module_count(cfg.target_modules, {**dims, "tied": True}) == 1  # SmolLM2: one matrix
    assert whole_module_count(FinetuneConfig().target_modules, dims) == 0
