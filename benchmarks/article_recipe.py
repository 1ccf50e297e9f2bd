"""Configuration (1): the article's recipe (shared/ARTICLE.md, cells 2-4, 6-7), standalone.

Imports nothing from tinyllama_ft; only benchmarks/common.py for the measurement. Changes from the 2024
article, each forced by the installed libraries or by what a benchmark measures:

* ``SFTTrainer(tokenizer=...)`` -> ``processing_class=tokenizer`` (TRL renamed it);
* ``TrainingArguments`` -> ``SFTConfig``, which now carries ``dataset_text_field``, ``packing``,
  ``dataset_num_proc`` and ``max_length`` (was the trainer's ``max_seq_length``);
* ``warmup_ratio=0.1`` -> ``warmup_steps=0.1`` when SFTConfig has no ``warmup_ratio`` (transformers 5:
  a value below 1 is a fraction of the steps);
* no eval split, ``eval_strategy``, eval batch or W&B (cell 5): the benchmark times training only
  (``report_to="none"``);
* ``save_strategy="no"`` (was ``save_total_limit=2``) and ``max_steps=--steps`` (was one epoch);
* ``include_num_input_tokens_seen="non_padding"`` and a ``Clock`` callback: the measurement (common.py).

    python3 benchmarks/article_recipe.py --model /tmp/tinyllama-shaped --data alpaca_cleaned_5k.jsonl
"""

import unsloth  # first: it patches transformers, TRL and peft when imported

from cli import cap_like_a_t4, parse_args

import torch
from trl import SFTTrainer
from unsloth import FastLanguageModel

from common import Clock, alpaca_texts, read_rows, recipe_sft_config, train_and_report

a = parse_args(__doc__)
if a.t4:  # the T4 stand-in: what dtype=None picks on a T4 (fp16), in a T4's memory
    cap_like_a_t4()

# cell 2: load
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name=a.model,
    max_seq_length=a.seq,
    dtype=torch.float16 if a.t4 else None,
    load_in_4bit=True,
)
# cell 3: LoRA
model = FastLanguageModel.get_peft_model(
    model,
    r=32,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=32,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing=True,
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
)
# cell 4: data
dataset = read_rows(a.data).map(alpaca_texts(tokenizer.eos_token), batched=True)

# cells 6-7: training arguments (the article's values, shared with hf_peft_4bit.py: common.recipe_sft_config) and trainer
name = "article_recipe_t4" if a.t4 else "article_recipe"
args = recipe_sft_config(name, a.steps, a.seq, bf16=unsloth.is_bf16_supported() and not a.t4)
clock = Clock()
trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=dataset, args=args, callbacks=[clock])
train_and_report(trainer, clock, name, a.seq, args.per_device_train_batch_size, args.gradient_accumulation_steps)
