"""The execution plan: one decision for backend and dtype, the same effective batch everywhere, memory-sized splits,
and the same losses whatever the split."""

import json

import pytest

from helpers import alpaca_rows, stories_lora, text_dataset
from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.machine.hardware import Hardware
from tinyllama_ft.train.plan import plan_run
from tinyllama_ft.train.memory_estimate import estimate_peak_gib, model_dims

H200 = Hardware(cuda=True, capability=(9, 0), gpu_name="NVIDIA H200", total_memory_gib=139.8)


def everything(name):
    return True


def nothing_optional(name):
    return False


@pytest.fixture(scope="module")
def tinyllama_config(tinyllama_dir):
    with open(tinyllama_dir / "config.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("backend", ["transformers", "unsloth"])
def test_estimate_grows_with_what_costs_memory(tinyllama_config, backend):
    dims = model_dims(tinyllama_config)

    def est(**kw):
        args = dict(
            micro_batch=4,
            max_seq_length=2048,
            gradient_checkpointing=False,
            backend=backend,
            load_in_4bit=True,
            fused_loss=True,
        )
        return estimate_peak_gib(dims, **{**args, **kw})

    base = est()
    assert est(micro_batch=8) > base > est(micro_batch=2)  # activations scale with the tokens in a micro-batch
    assert est(max_seq_length=4096) > base
    assert est(gradient_checkpointing=True) < base  # only layer inputs are kept
    assert est(fused_loss=False) - base == pytest.approx(4 * 2048 * dims["vocab"] * 8 / 2**30)  # fp32 logits + grad
    assert est(load_in_4bit=False) > base  # 16-bit weights: 4x the 4-bit ones
    assert est(lora_r=64) > base


def test_h200_gets_flex_attention_liger_and_one_micro_batch_without_checkpointing(tinyllama_config):
    plan = plan_run(FinetuneConfig(), H200, tinyllama_config, budget_gib=138, importable=everything)
    assert (plan.backend, plan.attn_implementation, plan.use_liger_kernel) == ("transformers", "flex_attention", True)
    assert (plan.per_device_train_batch_size, plan.gradient_accumulation_steps, plan.gradient_checkpointing) == (
        8,
        1,
        False,
    )
    assert (
        plan.effective_batch_size == 8 and plan.dtype == "bfloat16" and plan.optim == "adamw_8bit" and plan.load_in_4bit
    )
    assert "batch 8 x accumulation 1" in plan.summary()
    # issue 32: the checks decode on a merged 16-bit copy of TinyLlama's projections: 22 layers x (2 x 2048^2 +
    # 2 x 2048 x 256 + 3 x 2048 x 5632) parameters x 2 bytes
    assert "merged 16-bit copy of the projections (1.8 GiB" in plan.summary()


def test_t4_keeps_unsloth_and_checkpoints_to_fit_15_gib(tinyllama_config, t4):
    plan = plan_run(FinetuneConfig(), t4, tinyllama_config, budget_gib=14.7, importable=everything)
    assert plan.backend == "unsloth" and plan.attn_implementation is None and not plan.use_liger_kernel
    assert plan.gradient_checkpointing and plan.per_device_train_batch_size * plan.gradient_accumulation_steps == 8
    assert plan.estimated_peak_gib <= 0.8 * 14.7
    assert "merged 16-bit copy" not in plan.summary()  # Unsloth answers with its own inference path


def test_smaller_gpus_halve_the_micro_batch_before_they_checkpoint(tinyllama_config, a100):
    plan = plan_run(FinetuneConfig(), a100, tinyllama_config, budget_gib=39, importable=everything)
    assert (plan.per_device_train_batch_size, plan.gradient_accumulation_steps, plan.gradient_checkpointing) == (
        4,
        2,
        False,
    )
    plan = plan_run(FinetuneConfig(), a100, tinyllama_config, budget_gib=22, importable=everything)
    assert (plan.per_device_train_batch_size, plan.gradient_accumulation_steps, plan.gradient_checkpointing) == (
        8,
        1,
        True,
    )


def test_without_liger_the_logits_count_and_it_says_how_to_get_it(tinyllama_config):
    plan = plan_run(FinetuneConfig(), H200, tinyllama_config, budget_gib=138, importable=nothing_optional)
    assert plan.backend == "transformers" and not plan.use_liger_kernel
    assert "pip install liger-kernel" in plan.summary()


@pytest.mark.parametrize("budget", [2, 6, 15, 24, 40, 80, 140])
@pytest.mark.parametrize("split", [(2, 4), (1, 8), (4, 3), (1, 1)])
def test_the_effective_batch_never_changes(tinyllama_config, budget, split):
    cfg = FinetuneConfig(per_device_train_batch_size=split[0], gradient_accumulation_steps=split[1])
    plan = plan_run(cfg, H200, tinyllama_config, budget_gib=budget, importable=everything)
    assert plan.per_device_train_batch_size * plan.gradient_accumulation_steps == split[0] * split[1]
    if plan.estimated_peak_gib > 0.8 * budget:  # nothing fits: the smallest, checkpointed step, and it says so
        assert (plan.per_device_train_batch_size, plan.gradient_checkpointing) == (1, True)
        assert "max_seq_length" in plan.summary()


def test_article_recipe_is_literal_and_cpu_only_drops_checkpointing(tinyllama_config, cpu, t4):
    article = plan_run(FinetuneConfig(recipe="article"), t4, tinyllama_config, importable=everything)
    assert (
        article.backend,
        article.per_device_train_batch_size,
        article.gradient_accumulation_steps,
        article.gradient_checkpointing,
        article.use_liger_kernel,
    ) == ("unsloth", 2, 4, True, False)
    host = plan_run(FinetuneConfig(), cpu, tinyllama_config, importable=everything)
    assert (host.backend, host.attn_implementation, host.use_liger_kernel) == ("transformers", "sdpa", False)
    assert (host.per_device_train_batch_size, host.gradient_accumulation_steps, host.gradient_checkpointing) == (
        2,
        4,
        False,
    )


def test_unreadable_model_config_keeps_the_configured_split(tmp_path):
    cfg = FinetuneConfig(model_name=str(tmp_path / "missing"))
    plan = plan_run(cfg, H200, budget_gib=138, importable=everything)
    assert (plan.per_device_train_batch_size, plan.gradient_accumulation_steps, plan.gradient_checkpointing) == (
        2,
        4,
        True,
    )
    assert "unreadable" in plan.summary()


def test_dtype_and_backend_are_decided_once_here(tinyllama_config, cpu, t4):
    h200 = plan_run(FinetuneConfig(), H200, tinyllama_config, budget_gib=138, importable=everything)
    on_t4 = plan_run(FinetuneConfig(), t4, tinyllama_config, budget_gib=14.7, importable=everything)
    host = plan_run(FinetuneConfig(), cpu, tinyllama_config, importable=everything)
    assert (h200.dtype, on_t4.dtype, host.dtype) == ("bfloat16", "float16", "float32")
    assert (h200.optim, on_t4.optim, host.optim) == ("adamw_8bit", "adamw_8bit", "adamw_torch")
    assert (h200.load_in_4bit, on_t4.load_in_4bit, host.load_in_4bit) == (True, True, False)
    assert host.device == "cpu" and "load_in_4bit=True needs a CUDA GPU" in host.summary()
    native = Hardware(cpu_bf16=True)
    assert plan_run(FinetuneConfig(), native, tinyllama_config).cpu_autocast_bf16
    assert not plan_run(FinetuneConfig(dtype="float32"), native, tinyllama_config).cpu_autocast_bf16
    with pytest.raises(ValueError, match="bfloat16"):
        plan_run(FinetuneConfig(dtype="bfloat16"), t4, tinyllama_config, importable=everything)


#: The shipped recipes that run on a CPU and whose figures the docs publish.
OFFLINE_RECIPES = (
    "offline_cpu",
    "chat_offline_cpu",
    "dpo_offline_cpu",
    "simpo_offline_cpu",
    "grpo_offline_cpu",
    "cpt_offline_cpu",
)


def test_the_offline_recipes_compute_in_float32_on_a_cpu_that_computes_bf16_natively(monkeypatch, tinyllama_config):
    # issue 40, item 6: the same numerics on any x86 CPU; the run's summary says which it used
    import torch

    from tinyllama_ft.config.sources import config_from_recipe
    from tinyllama_ft.machine.hardware import detect_hardware
    from tinyllama_ft.models.precision import trainer_precision_flags
    from tinyllama_ft.train.summary import build_run_summary

    if torch.cuda.is_available():
        pytest.skip("the CPU's bf16 probe is read only without CUDA")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    native = detect_hardware()
    assert native.cpu_bf16 and not native.cuda
    assert plan_run(FinetuneConfig(), native, tinyllama_config).cpu_autocast_bf16  # dtype None: TRL's default stays
    for recipe in OFFLINE_RECIPES:
        cfg = config_from_recipe(recipe)
        plan = plan_run(cfg, native, tinyllama_config)
        assert (plan.dtype, plan.cpu_autocast_bf16) == ("float32", False), recipe
        assert trainer_precision_flags(plan.dtype, plan.cpu_autocast_bf16) == {"fp16": False, "bf16": False}
    numerics = build_run_summary(cfg=cfg, plan=plan, hardware=native, results={})["numerics"]
    assert numerics == {
        "device": "cpu",
        "dtype": "float32",
        "autocast": None,
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "cpu": numerics["cpu"],
        "cpu_bf16": True,
    }
    autocast = plan_run(FinetuneConfig(), native, tinyllama_config)
    assert build_run_summary(cfg=cfg, plan=autocast, hardware=native, results={})["numerics"]["autocast"] == "bfloat16"


def test_the_plan_is_frozen_and_leaves_the_configuration_alone(tinyllama_config):
    import dataclasses

    cfg = FinetuneConfig()
    before = cfg.to_dict()
    plan = plan_run(cfg, H200, tinyllama_config, budget_gib=138, importable=everything)
    assert cfg.to_dict() == before and cfg.backend == "auto" and cfg.gradient_checkpointing is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.per_device_train_batch_size = 1
    assert json.loads(json.dumps(plan.to_dict()))["backend"] == "transformers"


def test_rope_factor_is_planned_from_the_model_config(tinyllama_config, cpu):
    assert plan_run(FinetuneConfig(max_seq_length=4096), cpu, tinyllama_config).rope_scaling_factor == 2.0
    assert plan_run(FinetuneConfig(max_seq_length=2048), cpu, tinyllama_config).rope_scaling_factor is None


def test_unknown_recipe_names_the_field():
    with pytest.raises(ValueError, match="recipe"):
        FinetuneConfig(recipe="turbo")


def _losses(stories_dir, alpaca_jsonl, tmp_path, micro, accumulation):
    from tinyllama_ft.train.trainers import build_trainer

    model, tokenizer = stories_lora(stories_dir, Hardware(), max_seq_length=256)
    rows = text_dataset(alpaca_rows(alpaca_jsonl, 400), tokenizer)
    cfg = FinetuneConfig(
        max_seq_length=256,
        report_to="none",
        max_steps=4,
        learning_rate=2e-3,
        dtype="float32",
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        gradient_checkpointing=False,
        output_dir=str(tmp_path / f"{micro}x{accumulation}"),
        save_steps=100,
        dataset_num_proc=None,
    )
    trainer = build_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=rows.select(range(380)),
        eval_dataset=rows.select(range(380, 400)),
        cfg=cfg,
        plan=plan_run(cfg, Hardware()),
    )
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, trainer.evaluate()["eval_loss"]


@pytest.mark.slow
def test_one_micro_batch_of_8_trains_as_the_articles_2_x_4(stories_dir, alpaca_jsonl, tmp_path):
    """The split is execution only: per-step losses and the eval loss after training agree (fp32, CPU)."""
    fast, fast_eval = _losses(stories_dir, alpaca_jsonl, tmp_path, 8, 1)
    article, article_eval = _losses(stories_dir, alpaca_jsonl, tmp_path, 2, 4)
    assert len(fast) == len(article) == 4
    assert fast == pytest.approx(article, rel=1e-4)
    assert fast_eval == pytest.approx(article_eval, rel=1e-4)


@pytest.mark.slow
def test_tokens_per_s_leaves_out_the_evaluations_run_during_training(stories_dir, alpaca_jsonl, tmp_path):
    from tinyllama_ft.train.trainers import build_trainer
    from tinyllama_ft.train.loop import train_and_evaluate

    cpu = Hardware()
    model, tokenizer = stories_lora(stories_dir, cpu, max_seq_length=256)
    ds = text_dataset(alpaca_rows(alpaca_jsonl, 120), tokenizer)
    cfg = FinetuneConfig(
        max_seq_length=256,
        report_to="none",
        max_steps=3,
        eval_steps=1,
        save_steps=100,
        output_dir=str(tmp_path),
        dataset_num_proc=None,
        long_rows="truncate",
    )
    trainer = build_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=ds.select(range(100)),
        eval_dataset=ds.select(range(100, 120)),
        cfg=cfg,
        plan=plan_run(cfg, cpu),
    )
    r = train_and_evaluate(trainer)
    evals = [h["eval_runtime"] for h in r["log_history"] if "eval_runtime" in h and 1 <= h["step"] <= 3]
    # exact: the same logged runtimes summed in the same order, rounded as train/loop.py rounds them
    assert len(evals) >= 3 and r["eval_in_train_s"] == round(sum(evals[:3]), 2)
    assert r["tokens_per_s"] == pytest.approx(
        r["train_tokens"] / (r["train_runtime_s"] - r["eval_in_train_s"]), rel=0.01
    )


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("lr_scheduler_type", "foo", "lr_scheduler_type='foo': foo is not a valid SchedulerType, please select one of"),
        ("optim", "foo", "optim='foo': foo is not a valid OptimizerNames, please select one of"),
        ("optim", "adamw_8bit", "optim='adamw_8bit' is a bitsandbytes optimizer, which needs a CUDA GPU"),
        ("attn_implementation", "foo", "attn_implementation='foo' is not an attention kernel"),
    ],
)
def test_names_the_trainer_refuses_late_are_refused_by_the_plan(field, value, named, cpu):
    """Before, each failed after the model had loaded (the trainer's or transformers' own message, exit 1)."""
    from tinyllama_ft.config.coercion import ConfigError

    with pytest.raises(ConfigError, match=named):
        plan_run(FinetuneConfig(**{field: value}), cpu, model_config={})
    plan_run(
        FinetuneConfig(lr_scheduler_type="cosine", optim="adamw_torch", attn_implementation="sdpa"),
        cpu,
        model_config={},
    )


def test_the_t4_grpo_plan_rolls_out_on_the_fused_decoder_when_its_copy_fits_and_says_why_not_when_not(
    tinyllama_config, t4
):
    """The T4 plan (Unsloth, 4-bit, fp16) samples GRPO's rollouts on the fused decoder, stating the merged copy's and
    the cache's memory; where they would pass the budget beside training's estimate, ``auto`` keeps ``generate`` and
    both the plan and the trainer's rollout line say why."""
    from types import SimpleNamespace

    from tinyllama_ft.train.grpo_rollout import why_not_fused
    from tinyllama_ft.train.memory_estimate import fused_rollout_gib

    cfg = FinetuneConfig(method="grpo", dataset_format="alpaca", dtype="float16", gpu_memory_cap_gib=15)
    plan = plan_run(cfg, t4, tinyllama_config, budget_gib=15.0, importable=everything)
    line = next(r for r in plan.reasons if r.startswith("rollouts:"))
    assert plan.backend == "unsloth" and plan.load_in_4bit and plan.rollouts_fit
    assert "the fused CUDA-graph decoder on Unsloth's model" in line and "4-bit base dequantized once and kept" in line
    assert plan.rollouts_keep_base
    parts = fused_rollout_gib(cfg, model_dims(tinyllama_config), plan.effective_batch_size, "float16", True)
    assert parts["copy"] == pytest.approx(
        22 * (2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 5632) * 2 / 2**30, rel=1e-12
    )
    assert parts["base"] == parts["copy"]  # the 4-bit base kept dequantized beside the merged copy
    assert fused_rollout_gib(cfg, model_dims(tinyllama_config), 8, "float16")["base"] == 0  # a 16-bit base: in place
    # 22 layers x 2 (k, v) x 8 completions x 4096 tokens x 256 key/value columns x 2 bytes
    assert parts["cache"] == pytest.approx(22 * 2 * 8 * 4096 * 256 * 2 / 2**30, rel=1e-12)
    assert plan.rollout_gib == round(sum(parts.values()), 2)

    from tinyllama_ft.train.memory_estimate import HEADROOM

    # room for the merged copy and cache but not the kept base: the base is dequantized again each step, and said so
    without_base = plan.estimated_peak_gib + sum(parts.values()) - parts["base"] + 0.05
    budget = max(without_base, plan.estimated_peak_gib / HEADROOM + 0.05)  # the same split either way
    assert budget < plan.estimated_peak_gib + sum(parts.values())
    dequantizing = plan_run(cfg, t4, tinyllama_config, budget_gib=budget, importable=everything)
    assert dequantizing.estimated_peak_gib == plan.estimated_peak_gib
    assert dequantizing.rollouts_fit and not dequantizing.rollouts_keep_base
    assert dequantizing.rollout_gib == round(sum(parts.values()) - parts["base"], 2)
    line = next(r for r in dequantizing.reasons if r.startswith("rollouts:"))
    assert "dequantized into it again before each step's rollouts: keeping it dequantized" in line

    budget = plan.estimated_peak_gib / HEADROOM + 0.05  # the same split, no room for the copy beside it
    tight = plan_run(cfg, t4, tinyllama_config, budget_gib=budget, importable=everything)
    assert tight.estimated_peak_gib == plan.estimated_peak_gib and not tight.rollouts_fit
    assert any(r.startswith("rollouts: generate: the fused decoder's") for r in tight.reasons)
    cuda_model = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    with pytest.MonkeyPatch.context() as patch:  # the structural checks pass: only the memory decides here
        patch.setattr("tinyllama_ft.train.grpo_rollout.why_not_readable", lambda model: None)
        assert why_not_fused("auto", cuda_model, SimpleNamespace(), plan) is None
        assert "would pass the" in why_not_fused("auto", cuda_model, SimpleNamespace(), tight)
        assert why_not_fused("fused", cuda_model, SimpleNamespace(), tight) is None  # forced: the estimate yields
    kept = FinetuneConfig(**{**cfg.__dict__, "rollout_decoder": "generate"})
    generate = plan_run(kept, t4, tinyllama_config, budget_gib=15.0, importable=everything)
    assert generate.rollout_gib is None and not any(r.startswith("rollouts:") for r in generate.reasons)


def test_the_t4_plan_on_transformers_keeps_the_adapter_in_float32_and_says_why(tinyllama_config, t4, a100):
    on_t4 = plan_run(
        FinetuneConfig(backend="transformers"), t4, tinyllama_config, budget_gib=14.7, importable=everything
    )
    assert (on_t4.dtype, on_t4.load_in_4bit, on_t4.adapter_dtype) == ("float16", True, "float32")
    assert any("adapter trains in float32" in r and "GradScaler" in r for r in on_t4.reasons)
    unsloth = plan_run(FinetuneConfig(), t4, tinyllama_config, budget_gib=14.7, importable=everything)
    assert (unsloth.backend, unsloth.adapter_dtype) == ("unsloth", None)  # Unsloth's own choice
    bf16 = plan_run(FinetuneConfig(), a100, tinyllama_config, budget_gib=39.0, importable=everything)
    assert (bf16.dtype, bf16.adapter_dtype) == ("bfloat16", None)  # TRL's bf16 QLoRA adapter trains under bf16
    assert plan_run(FinetuneConfig(), Hardware(), tinyllama_config).adapter_dtype == "float32"


@pytest.mark.parametrize("method", ["dpo", "kto", "orpo", "simpo"])
def test_preference_runs_take_sdpa_without_compiles_and_say_when_the_compiled_paths_pay(tinyllama_config, t4, method):
    # a preference micro-batch is padded to its longest sequence: flex attention / Unsloth's blocks compile per length
    h200 = plan_run(FinetuneConfig(method=method), H200, tinyllama_config, budget_gib=139.0, importable=everything)
    assert (h200.backend, h200.attn_implementation) == ("transformers", "sdpa")
    assert any("not flex attention" in r and "attn_implementation='flex_attention'" in r for r in h200.reasons)
    on_t4 = plan_run(FinetuneConfig(method=method), t4, tinyllama_config, budget_gib=14.7, importable=everything)
    assert (on_t4.backend, on_t4.attn_implementation, on_t4.adapter_dtype) == ("transformers", "sdpa", "float32")
    assert any("not Unsloth" in r and "backend='unsloth'" in r for r in on_t4.reasons)
    sft = plan_run(FinetuneConfig(), H200, tinyllama_config, budget_gib=139.0, importable=everything)
    assert sft.attn_implementation == "flex_attention"  # packed to one length: flex compiles once
    asked = plan_run(
        FinetuneConfig(method=method, attn_implementation="flex_attention", backend="unsloth"),
        t4,
        tinyllama_config,
        budget_gib=14.7,
        importable=everything,
    )
    assert asked.backend == "unsloth"


@pytest.mark.parametrize("hardware", ["t4", "cpu"])
def test_a_plan_on_unsloth_imports_it_before_trls_config_check_imports_transformers(tmp_path, tinyllama_dir, hardware):
    """Unsloth patches transformers, TRL and PEFT as they are imported (and warns when it comes after them); the plan
    cell is the first to import them (TRL's config check), so on an Unsloth plan ``plan_run`` imports unsloth first. A
    stand-in ``unsloth`` package records which of them were already imported; on a CPU plan it is never imported.
    Fails before: TRL's check ran first and unsloth came only with the model."""
    import os
    import subprocess
    import sys

    (tmp_path / "unsloth").mkdir()
    (tmp_path / "unsloth" / "__init__.py").write_text(
        "import os, sys\n"
        "seen = [m for m in ('transformers', 'trl', 'peft') if m in sys.modules]\n"
        "open(os.environ['SEEN'], 'w').write(' '.join(seen) or 'none')\n",
        encoding="utf-8",
    )
    code = (
        "import json, sys\n"
        "from tinyllama_ft.config.finetune import FinetuneConfig\n"
        "from tinyllama_ft.machine.hardware import Hardware\n"
        "from tinyllama_ft.train.plan import plan_run\n"
        "t4 = Hardware(cuda=True, capability=(7, 5), gpu_name='Tesla T4', total_memory_gib=14.74, colab=True)\n"
        "cfg, hardware = FinetuneConfig(), t4 if sys.argv[2] == 't4' else Hardware()\n"
        "plan = plan_run(cfg, hardware, json.load(open(sys.argv[1])), budget_gib=14.7)\n"
        "print(plan.backend, 'trl' in sys.modules)\n"
    )
    seen = tmp_path / "seen.txt"
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "SEEN": str(seen), "OMP_NUM_THREADS": "1"}
    config = str(tinyllama_dir / "config.json")
    done = subprocess.run([sys.executable, "-c", code, config, hardware], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    if hardware == "t4":
        assert done.stdout.split() == ["unsloth", "True"]  # TRL's check ran, after unsloth
        assert seen.read_text(encoding="utf-8") == "none"
    else:
        assert done.stdout.split() == ["transformers", "True"] and not seen.exists()
