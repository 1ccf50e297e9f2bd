"""The fast recipe's plan: same effective batch everywhere, memory-sized splits, and the same losses."""

import json

import pytest

from helpers import alpaca_rows, stories_lora, text_dataset
from tinyllama_ft.config import FinetuneConfig
from tinyllama_ft.hardware import Hardware
from tinyllama_ft.speed import estimate_peak_gib, model_dims, plan_speed

H200 = Hardware(cuda=True, capability=(9, 0), gpu_name="NVIDIA H200", total_memory_gib=139.8)


def everything(name):
    return True


def nothing_optional(name):
    return False


@pytest.fixture(scope="module")
def tinyllama_config(tinyllama_dir):
    with open(tinyllama_dir / "config.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("backend, micro, gc, measured", [
    # peak GiB measured on the H200 (benchmarks/, TinyLlama shape, 4-bit, seq 4096)
    ("transformers", 8, False, 41.91), ("transformers", 8, True, 11.23),
    ("unsloth", 8, False, 39.20), ("unsloth", 8, True, 5.89),
])
def test_estimate_is_within_reach_of_the_measured_peaks(tinyllama_config, backend, micro, gc, measured):
    est = estimate_peak_gib(model_dims(tinyllama_config), micro, 4096, gc, backend, True, fused_loss=True)
    assert measured * 0.9 <= est <= measured * 1.15, est


def test_h200_gets_flex_attention_liger_and_one_micro_batch_without_checkpointing(tinyllama_config):
    plan = plan_speed(FinetuneConfig(), H200, "bfloat16", tinyllama_config, budget_gib=138, importable=everything)
    assert (plan.backend, plan.attn_implementation, plan.use_liger_kernel) == ("transformers", "flex_attention", True)
    assert (plan.per_device_train_batch_size, plan.gradient_accumulation_steps, plan.gradient_checkpointing) == (8, 1, False)
    cfg = plan.apply(FinetuneConfig())
    assert cfg.effective_batch_size == 8 and cfg.backend == "transformers" and cfg.attn_implementation == "flex_attention"
    assert "batch 8 x accumulation 1" in plan.summary()


def test_t4_keeps_unsloth_and_checkpoints_to_fit_15_gib(tinyllama_config, t4):
    plan = plan_speed(FinetuneConfig(), t4, "float16", tinyllama_config, budget_gib=14.7, importable=everything)
    assert plan.backend == "unsloth" and plan.attn_implementation is None and not plan.use_liger_kernel
    assert plan.gradient_checkpointing and plan.per_device_train_batch_size * plan.gradient_accumulation_steps == 8
    assert plan.estimated_peak_gib <= 0.8 * 14.7


def test_smaller_gpus_halve_the_micro_batch_before_they_checkpoint(tinyllama_config, a100):
    plan = plan_speed(FinetuneConfig(), a100, "bfloat16", tinyllama_config, budget_gib=39, importable=everything)
    assert (plan.per_device_train_batch_size, plan.gradient_accumulation_steps, plan.gradient_checkpointing) == (4, 2, False)
    plan = plan_speed(FinetuneConfig(), a100, "bfloat16", tinyllama_config, budget_gib=22, importable=everything)
    assert (plan.per_device_train_batch_size, plan.gradient_accumulation_steps, plan.gradient_checkpointing) == (8, 1, True)


def test_without_liger_the_logits_count_and_it_says_how_to_get_it(tinyllama_config):
    plan = plan_speed(FinetuneConfig(), H200, "bfloat16", tinyllama_config, budget_gib=138, importable=nothing_optional)
    assert plan.backend == "transformers" and not plan.use_liger_kernel
    assert "pip install liger-kernel" in plan.summary()


@pytest.mark.parametrize("budget", [2, 6, 15, 24, 40, 80, 140])
@pytest.mark.parametrize("split", [(2, 4), (1, 8), (4, 3), (1, 1)])
def test_the_effective_batch_never_changes(tinyllama_config, budget, split):
    cfg = FinetuneConfig(per_device_train_batch_size=split[0], gradient_accumulation_steps=split[1])
    plan = plan_speed(cfg, H200, "bfloat16", tinyllama_config, budget_gib=budget, importable=everything)
    assert plan.per_device_train_batch_size * plan.gradient_accumulation_steps == split[0] * split[1]
    if plan.estimated_peak_gib > 0.8 * budget:  # nothing fits: the smallest, checkpointed step, and it says so
        assert (plan.per_device_train_batch_size, plan.gradient_checkpointing) == (1, True)
        assert "max_seq_length" in plan.summary()


def test_article_recipe_is_literal_and_cpu_only_drops_checkpointing(tinyllama_config, cpu, t4):
    article = plan_speed(FinetuneConfig(recipe="article"), t4, "float16", tinyllama_config, importable=everything)
    assert (article.backend, article.per_device_train_batch_size, article.gradient_accumulation_steps,
            article.gradient_checkpointing, article.use_liger_kernel) == ("unsloth", 2, 4, True, False)
    host = plan_speed(FinetuneConfig(), cpu, "float32", tinyllama_config, importable=everything)
    assert (host.backend, host.attn_implementation, host.use_liger_kernel) == ("transformers", "sdpa", False)
    assert (host.per_device_train_batch_size, host.gradient_accumulation_steps, host.gradient_checkpointing) == (2, 4, False)


def test_unreadable_model_config_keeps_the_configured_split(tmp_path):
    cfg = FinetuneConfig(model_name=str(tmp_path / "missing"))
    plan = plan_speed(cfg, H200, "bfloat16", budget_gib=138, importable=everything)
    assert (plan.per_device_train_batch_size, plan.gradient_accumulation_steps, plan.gradient_checkpointing) == (2, 4, True)
    assert "unreadable" in plan.summary()


def test_unknown_recipe_names_the_field():
    with pytest.raises(ValueError, match="recipe"):
        FinetuneConfig(recipe="turbo")


def _losses(stories_dir, alpaca_jsonl, tmp_path, micro, accumulation):
    from tinyllama_ft.training import build_trainer

    model, tokenizer = stories_lora(stories_dir, Hardware(), max_seq_length=256)
    rows = text_dataset(alpaca_rows(alpaca_jsonl, 400), tokenizer)
    cfg = FinetuneConfig(max_seq_length=256, report_to="none", max_steps=4, learning_rate=2e-3, dtype="float32",
                         per_device_train_batch_size=micro, gradient_accumulation_steps=accumulation,
                         gradient_checkpointing=False, output_dir=str(tmp_path / f"{micro}x{accumulation}"),
                         save_steps=100, dataset_num_proc=None)
    trainer = build_trainer(model, tokenizer, rows.select(range(380)), rows.select(range(380, 400)), cfg, Hardware(),
                            "float32")
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, trainer.evaluate()["eval_loss"]


def test_one_micro_batch_of_8_trains_as_the_articles_2_x_4(stories_dir, alpaca_jsonl, tmp_path):
    """The split is execution only: per-step losses and the eval loss after training agree (fp32, CPU)."""
    fast, fast_eval = _losses(stories_dir, alpaca_jsonl, tmp_path, 8, 1)
    article, article_eval = _losses(stories_dir, alpaca_jsonl, tmp_path, 2, 4)
    assert len(fast) == len(article) == 4
    assert fast == pytest.approx(article, rel=1e-4)
    assert fast_eval == pytest.approx(article_eval, rel=1e-4)


def test_tokens_per_s_leaves_out_the_evaluations_run_during_training(stories_dir, alpaca_jsonl, tmp_path):
    from tinyllama_ft.training import build_trainer, train_and_evaluate

    cpu = Hardware()
    model, tokenizer = stories_lora(stories_dir, cpu, max_seq_length=256)
    ds = text_dataset(alpaca_rows(alpaca_jsonl, 120), tokenizer)
    cfg = FinetuneConfig(max_seq_length=256, report_to="none", max_steps=3, eval_steps=1, save_steps=100,
                         output_dir=str(tmp_path), dataset_num_proc=None, long_rows="truncate")
    trainer = build_trainer(model, tokenizer, ds.select(range(100)), ds.select(range(100, 120)), cfg, cpu, "float32")
    r = train_and_evaluate(trainer)
    evals = [h["eval_runtime"] for h in r["log_history"] if "eval_runtime" in h and 1 <= h["step"] <= 3]
    assert len(evals) >= 3 and r["eval_in_train_s"] == pytest.approx(sum(evals[:3]), abs=0.02)
    assert r["tokens_per_s"] == pytest.approx(r["train_tokens"] / (r["train_runtime_s"] - r["eval_in_train_s"]), rel=0.01)
