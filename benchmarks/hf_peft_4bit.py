"""Configuration (2): the article's values without Unsloth: transformers + PEFT + bitsandbytes 4-bit (QLoRA).

Standalone (nothing from tinyllama_ft; benchmarks/common.py for the measurement). Same LoRA, data and
SFTConfig values as article_recipe.py; the model is loaded as plain QLoRA does it: NF4 with double
quantization, computing in bf16 from compute capability 8.0 (fp16 below), SDPA attention, the
whole model on GPU 0, ``prepare_model_for_kbit_training`` with gradient checkpointing, and ``<unk>`` as
the pad token (what Unsloth picks on Llama). No RoPE scaling above the model's 2048 positions, as the
reference script: it changes no speed or memory.

    python3 benchmarks/hf_peft_4bit.py --model /tmp/tinyllama-shaped --data alpaca_cleaned_5k.jsonl
"""

from cli import parse_args

import torch
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
from trl import SFTTrainer

from common import Clock, alpaca_texts, read_rows, recipe_sft_config, train_and_report

a = parse_args(__doc__)

bf16 = torch.cuda.get_device_capability(0)[0] >= 8
dtype = torch.bfloat16 if bf16 else torch.float16
tokenizer = AutoTokenizer.from_pretrained(a.model)
tokenizer.pad_token = tokenizer.unk_token
model = AutoModelForCausalLM.from_pretrained(
    a.model,
    quantization_config=BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=dtype,
    ),
    dtype=dtype,
    attn_implementation="sdpa",
    device_map={"": 0},
)
model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
torch.manual_seed(3407)  # the article's random_state, for the adapter init
model = get_peft_model(
    model,
    LoraConfig(
        r=32,
        lora_alpha=32,
        lora_dropout=0.0,
        bias="none",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    ),
)
dataset = read_rows(a.data).map(alpaca_texts(tokenizer.eos_token), batched=True)

args = recipe_sft_config("hf_peft_4bit", a.steps, a.seq, bf16=bf16)
clock = Clock()
trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=dataset, args=args, callbacks=[clock])
train_and_report(
    trainer, clock, "hf_peft_4bit", a.seq, args.per_device_train_batch_size, args.gradient_accumulation_steps
)
