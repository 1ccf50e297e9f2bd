"""The article's loss is one parameter away: with ``completion_only_loss=False`` the package's first optimizer step is
the article's recipe's (TRL's ``SFTTrainer`` on the article's ``text`` rows, as ``shared/tools/reference_recipe_cpu.py``
runs it): the same packed ids, positions and labels in the same order, and the same logged loss. The default
(``completion_only_loss=True``) trains on the same ids with the prompt tokens masked, so its first loss is another
number (benchmarks/README.md: +0.54% / +0.71% on the TinyLlama shape). Real stories260K and Alpaca rows, CPU, fp32.
"""

from __future__ import annotations

import inspect
import json
import warnings

import pytest
import torch

from helpers import alpaca_rows, stories_lora

#: The article's Alpaca template (shared/ARTICLE.md, cell 4), spelled here so the reference owes nothing to the package.
ARTICLE_PROMPT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{}\n\n### Input:\n{}\n\n### Response:\n{}"
)
SEQ = 512
ROWS = 120  # 48 of them are longer than 512 stories260K tokens (6 have a prompt that long): both sides cut them alike


def _trl_trains_on_a_cpu() -> bool:
    import trl
    from packaging.version import Version

    return Version(trl.__version__) >= Version("1.16")


pytestmark = [
    pytest.mark.slow,  # four one-step trainers: about 20 s on a loaded 2-core machine
    # both sides train on the CPU (the package's plan for Hardware()), where TRL 1.15's Triton loss kernel cannot run
    pytest.mark.skipif(not _trl_trains_on_a_cpu(), reason="TRL < 1.16 trains only on a GPU (fused Triton loss kernel)"),
]


def _first_step(trainer):
    """The first optimizer step's micro-batches, concatenated, and the loss the trainer logs for it."""
    loader = iter(trainer.get_train_dataloader())
    batches = [next(loader) for _ in range(trainer.args.gradient_accumulation_steps)]
    trainer.train()
    (loss,) = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {k: torch.cat([b[k].reshape(-1) for b in batches]) for k in ("input_ids", "position_ids", "labels")}, loss


def _article_step(stories_dir, rows: list[dict], tmp_path):
    """The article's cells 2-7 on the CPU (the reference's way: transformers + PEFT instead of Unsloth): text rows,
    packing, 2 x 4, seed 3407, one step."""
    import datasets
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tok = AutoTokenizer.from_pretrained(stories_dir)
    tok.pad_token = tok.unk_token
    lora = LoraConfig(
        r=32,
        lora_alpha=32,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    with warnings.catch_warnings():  # peft reads transformers' renamed is_gradient_checkpointing (pyproject: error)
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(stories_dir, dtype=torch.float32), lora)
    checkpointing = next(  # transformers 5.2x renamed it; TRL 1.15's SFTConfig knows only the old name
        n
        for n in ("activation_checkpointing", "gradient_checkpointing")
        if n in inspect.signature(SFTConfig).parameters
    )
    text = [ARTICLE_PROMPT.format(r["instruction"], r["input"], r["output"]) + tok.eos_token for r in rows]
    args = SFTConfig(
        output_dir=str(tmp_path / "article"),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        max_steps=1,
        learning_rate=2e-5,
        optim="adamw_torch",
        weight_decay=0.1,
        lr_scheduler_type="linear",
        seed=3407,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        max_length=SEQ,
        packing=True,
        dataset_text_field="text",
        bf16=False,
        use_cpu=True,
        **{checkpointing: False},  # as the CPU reference (the article: True; no loss changes)
    )
    trainer = SFTTrainer(
        model=model, processing_class=tok, train_dataset=datasets.Dataset.from_dict({"text": text}), args=args
    )
    return _first_step(trainer)


def _package_step(stories_dir, rows: list[dict], tmp_path, **fields):
    """The notebook's cells: the rows read and formatted by the package, ``build_trainer`` with the article's values
    (``FinetuneConfig``'s defaults) at seq 512 in fp32, one step."""
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.data.alpaca_prompts import make_formatting_func
    from tinyllama_ft.data.instructions import load_instruction_data
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.trainers import build_trainer

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = FinetuneConfig(
        model_name=str(stories_dir),
        dataset=str(path),
        max_seq_length=SEQ,
        max_steps=1,
        dtype="float32",
        report_to="none",
        output_dir=str(tmp_path / "out"),
        dataset_num_proc=None,
        **fields,
    )
    plan = plan_run(cfg, Hardware())
    assert (plan.per_device_train_batch_size, plan.gradient_accumulation_steps) == (2, 4)
    model, tok = stories_lora(stories_dir, Hardware(), max_seq_length=SEQ)
    data, _ = load_instruction_data(cfg.dataset)
    train = data.map(make_formatting_func(tok.eos_token, template=cfg.template), batched=True)
    trainer = build_trainer(
        model=model, tokenizer=tok, train_dataset=train, eval_dataset=None, cfg=cfg, plan=plan, progress=False
    )
    return _first_step(trainer)


def test_whole_text_loss_trains_the_articles_first_step(stories_dir, alpaca_jsonl, tmp_path):
    rows = alpaca_rows(alpaca_jsonl, ROWS)
    expected, expected_loss = _article_step(stories_dir, rows, tmp_path)
    got, loss = _package_step(stories_dir, rows, tmp_path, completion_only_loss=False)
    for key in ("input_ids", "position_ids", "labels"):
        assert torch.equal(got[key], expected[key]), key
    assert loss == pytest.approx(expected_loss, rel=1e-6)  # the same tokens through the same fp32 kernels


def test_the_default_response_loss_trains_the_same_ids_with_the_prompt_masked(stories_dir, alpaca_jsonl, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(stories_dir)
    rows = [  # rows within the window: the default drops a row whose prompt fills it, the article cuts it
        r
        for r in alpaca_rows(alpaca_jsonl, ROWS)
        if len(tok(ARTICLE_PROMPT.format(r["instruction"], r["input"], r["output"]) + tok.eos_token).input_ids) <= SEQ
    ]
    expected, expected_loss = _article_step(stories_dir, rows, tmp_path)
    got, loss = _package_step(stories_dir, rows, tmp_path)
    assert torch.equal(got["input_ids"], expected["input_ids"])
    assert torch.equal(got["position_ids"], expected["position_ids"])
    kept = got["labels"] != -100
    assert torch.equal(got["labels"][kept], expected["labels"][kept])  # a subset of the article's labels
    assert 0.3 < kept.sum() / (expected["labels"] != -100).sum() < 0.9  # the prompts masked, the responses kept
    assert abs(loss / expected_loss - 1) > 1e-3  # so the first loss is another number
