"""Trainer construction on the installed TRL/transformers (run in both library sets by .ci/run)."""

from tinyllama_ft.train.plan import plan_run
import inspect

import pytest

from helpers import alpaca_rows, stories_lora, text_dataset
from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.data.eos_check import eos_supervision
from tinyllama_ft.train.sft_trainer import sft_config_kwargs
from tinyllama_ft.train.trainers import RENAMED_ARGUMENTS, build_trainer, training_plan


def test_kwargs_use_the_installed_spelling_of_every_renamed_argument(cpu):
    from trl import SFTConfig

    params = inspect.signature(SFTConfig.__init__).parameters
    cfg = FinetuneConfig(recipe="article")  # gradient checkpointing on as configured: its renamed arguments appear
    kwargs = sft_config_kwargs(cfg, plan_run(cfg, cpu), has_eval=True)
    assert all(k in params for k in kwargs)
    for name, spellings in RENAMED_ARGUMENTS.items():
        present = [s for s in spellings if s in kwargs]
        assert len(present) == 1, (name, present)
        assert present[0] == next(s for s in spellings if s in params)
    ratio = kwargs.get("warmup_ratio", kwargs.get("warmup_steps"))
    assert ratio == 0.1


def test_article_values_on_a_t4_and_on_a_cpu(cpu, t4):
    gpu = sft_config_kwargs(FinetuneConfig(), plan_run(FinetuneConfig(), t4), has_eval=True)
    assert gpu["optim"] == "adamw_8bit" and gpu["fp16"] is True and gpu["bf16"] is False
    assert (gpu["per_device_train_batch_size"], gpu["gradient_accumulation_steps"]) == (2, 4)
    assert (gpu["learning_rate"], gpu["weight_decay"], gpu["lr_scheduler_type"], gpu["seed"]) == (
        2e-5,
        0.1,
        "linear",
        3407,
    )
    assert (gpu["packing"], gpu["dataset_text_field"], gpu["save_total_limit"], gpu["logging_steps"]) == (
        True,
        "text",
        2,
        1,
    )
    assert gpu["report_to"] == ["wandb"]
    host = sft_config_kwargs(
        FinetuneConfig(report_to="none"), plan_run(FinetuneConfig(report_to="none"), cpu), has_eval=False
    )
    assert host["optim"] == "adamw_torch" and not host["fp16"] and not host["bf16"]
    assert host["report_to"] == [] and host["eval_strategy"] == "no"


def test_too_old_a_config_class_is_an_error(cpu):
    class OldConfig:
        def __init__(self, output_dir, learning_rate):
            pass

    with pytest.raises(TypeError, match="upgrade"):
        sft_config_kwargs(FinetuneConfig(), plan_run(FinetuneConfig(), cpu), has_eval=True, config_cls=OldConfig)


def short_rows(alpaca_jsonl, tokenizer, read: int, keep: int) -> list[dict]:
    """Of the first ``read`` Alpaca rows, the first ``keep`` under 400 stories260K tokens: they fit the 512-token
    window whole (longer ones are truncated by "bfd" packing, EOS with them)."""
    return [
        r
        for r in alpaca_rows(alpaca_jsonl, read)
        if len(tokenizer(r["instruction"] + r["input"] + r["output"]).input_ids) < 400
    ][:keep]


def window_512(output_dir, *, max_steps: int) -> FinetuneConfig:
    return FinetuneConfig(
        max_seq_length=512, report_to="none", max_steps=max_steps, output_dir=str(output_dir), dataset_num_proc=None
    )


@pytest.fixture(scope="module")
def trainer(stories_dir, alpaca_jsonl, tmp_path_factory):
    from tinyllama_ft.machine.hardware import Hardware

    cpu = Hardware()
    model, tokenizer = stories_lora(stories_dir, cpu)
    rows = short_rows(alpaca_jsonl, tokenizer, 400, 64)
    assert len(rows) == 64
    cfg = window_512(tmp_path_factory.mktemp("out"), max_steps=3)
    ds = text_dataset(rows, tokenizer)
    return build_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=ds.select(range(60)),
        eval_dataset=ds.select(range(60, 64)),
        cfg=cfg,
        plan=plan_run(cfg, cpu),
    )


def test_trainer_packs_without_padding_and_plans_steps(trainer):
    plan = training_plan(trainer)
    lengths = [len(ids) for ids in trainer.train_dataset["input_ids"]]
    assert plan["sequences"] == len(lengths) and all(n <= 512 for n in lengths)
    assert plan["tokens_per_epoch"] == sum(lengths)
    assert plan["planned_steps"] == 3 and plan["steps_per_epoch"] == -(-len(lengths) // 8)
    assert trainer.args.eval_strategy == "steps"


def test_every_sample_in_a_collated_batch_ends_in_one_supervised_eos(trainer):
    tokenizer = trainer.processing_class
    eos = tokenizer.eos_token_id
    batch = next(iter(trainer.get_train_dataloader()))
    ids, labels = batch["input_ids"], batch["labels"]
    assert tokenizer.pad_token_id != eos
    starts = (batch["position_ids"] == 0).sum().item()  # one sample starts at each position_ids reset
    assert (ids == eos).sum().item() == starts
    assert bool((labels[ids == eos] == eos).all())  # EOS is a training target, never masked as padding
    counts = eos_supervision(trainer)  # and no problem of any kind (every other count 0)
    assert counts == {
        **dict.fromkeys(counts, 0),
        **dict.fromkeys(("samples", "samples_ok", "eos_tokens", "eos_supervised"), starts),
    }


def test_on_flex_attention_every_packed_batch_has_one_length_and_the_same_loss(
    stories_dir, alpaca_jsonl, tmp_path_factory, cpu
):
    """A plan on flex attention pads each padding-free batch to ``per_device_train_batch_size * max_seq_length``
    tokens (one shape, so the compiled kernel is built once); the tail is pad ids each at position 0, never
    supervised, and the loss equals the batch's without it. Evaluation (on SDPA) and a plan on SDPA keep batches
    unpadded."""
    import dataclasses

    import torch

    model, tokenizer = stories_lora(stories_dir, cpu)
    rows = short_rows(alpaca_jsonl, tokenizer, 200, 40)
    cfg = window_512(tmp_path_factory.mktemp("flex"), max_steps=2)
    sdpa = plan_run(cfg, cpu)
    flex = dataclasses.replace(sdpa, attn_implementation="flex_attention")
    assert "pad_to_multiple_of" not in sft_config_kwargs(cfg, sdpa, has_eval=False)
    held_out = text_dataset(alpaca_rows(alpaca_jsonl, 210)[200:], tokenizer)
    trainer = build_trainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=text_dataset(rows, tokenizer),
        eval_dataset=held_out,
        cfg=cfg,
        plan=flex,
    )
    width = flex.per_device_train_batch_size * 512
    batches = list(trainer.get_train_dataloader())
    assert len(batches) > 2 and all(b["input_ids"].shape == (1, width) for b in batches)
    # evaluation runs on SDPA (sdpa_evaluating): its batches keep their own length
    lengths = [len(ids) for ids in trainer.eval_dataset["input_ids"]]
    step = cfg.per_device_eval_batch_size
    eval_widths = [sum(lengths[i : i + step]) for i in range(0, len(lengths), step)]
    assert [b["input_ids"].shape[1] for b in trainer.get_eval_dataloader()] == eval_widths and min(eval_widths) < width
    assert trainer.data_collator.pad_to_multiple_of == width
    batch = batches[-1]  # the epoch's last batch: the fewest rows, the longest tail
    real = int(batch["position_ids"][0].nonzero().max()) + 1  # the last document's last token
    assert real < width
    tail = slice(real, width)
    assert bool((batch["input_ids"][0, tail] == tokenizer.pad_token_id).all())
    assert bool((batch["position_ids"][0, tail] == 0).all()) and bool((batch["labels"][0, tail] == -100).all())
    keys = ("input_ids", "labels", "position_ids")
    with torch.no_grad():
        padded = model(**{k: batch[k] for k in keys}).loss
        trimmed = model(**{k: batch[k][:, :real] for k in keys}).loss
    torch.testing.assert_close(padded, trimmed, atol=1e-5, rtol=1e-5)
    unpadded = build_trainer(
        model=model, tokenizer=tokenizer, train_dataset=text_dataset(rows, tokenizer), cfg=cfg, plan=sdpa
    )
    counts = eos_supervision(trainer, batches=None)  # the tail is no sample: the same counts as without it
    assert counts == eos_supervision(unpadded, batches=None) and counts["samples"] == len(rows)
