"""Tokens per optimizer step that shared/tools/reference_recipe_cpu.py really feeds (its RESULT line counts
8 x 512 per step). Rebuilds its rows, split, tokenizer and SFTConfig as that file writes them, iterates
its trainer's dataloader over ``steps`` optimizer steps (no training) and prints ``TOKENS {json}``.

    python3 benchmarks/reference_cpu_tokens.py SHARED/data [STEPS]
"""

import json
import os
import sys

os.environ["WANDB_DISABLED"] = "true"
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

D, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 60
P = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n### Instruction:\n{}\n\n### Input:\n{}\n\n### Response:\n{}"
)
tok = AutoTokenizer.from_pretrained(f"{D}/stories260k/hf")
tok.pad_token = tok.unk_token
with open(f"{D}/alpaca/alpaca_cleaned_5k.jsonl", encoding="utf-8") as f:
    rows = [json.loads(line) for line in f]
ds = Dataset.from_dict({"text": [P.format(r["instruction"], r["input"], r["output"]) + tok.eos_token for r in rows]})
train = ds.train_test_split(test_size=0.04, seed=3407)["train"]
args = SFTConfig(
    per_device_train_batch_size=2,
    gradient_accumulation_steps=4,
    max_steps=steps,
    seed=3407,
    output_dir="/tmp/reference-cpu-tokens",
    report_to="none",
    max_length=512,
    packing=True,
    dataset_text_field="text",
    use_cpu=True,
)
trainer = SFTTrainer(
    model=AutoModelForCausalLM.from_pretrained(f"{D}/stories260k/hf"),
    processing_class=tok,
    train_dataset=train,
    args=args,
)
micro = steps * args.gradient_accumulation_steps
fed = sum(b["input_ids"].numel() for b, _ in zip(trainer.get_train_dataloader(), range(micro)))  # padding-free: all fed
print("TOKENS " + json.dumps({"steps": steps, "tokens": fed, "tokens_per_step": round(fed / steps, 1)}))
