"""The first optimizer step's data on train_throughput.py's own inputs, on a CPU: the article's recipe (TRL's
SFTTrainer on the text column, packed) against the package (build_trainer) in both loss modes.

TinyLlama's tokenizer, the 5,000 Alpaca rows, seq 4096, the article's 2 x 4: the 8 packed sequences' ids, positions
and labels compared, and the supervised tokens counted. No forward pass: a 1-layer random model with TinyLlama's
vocabulary only builds the trainers. Plain TRL, as the package's transformers backend. ``--num-proc none`` packs in one
process, as Unsloth's patched trainer packs the package's pre-tokenized rows (benchmarks/README.md, issue 44 fourth
session). About 30 s (one process) to a minute.

    python3 benchmarks/first_step_data.py [--shared ../shared] [--num-proc 2|none]
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repo root: tinyllama_ft

import torch
from common import alpaca_texts, read_rows, recipe_sft_config
from trl import SFTTrainer
from peft import LoraConfig, get_peft_model
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--shared", type=Path, default=Path(os.environ.get("SHARED_DIR") or HERE.parents[1] / "shared"))
ap.add_argument(
    "--num-proc",
    type=lambda v: None if v == "none" else int(v),
    default=2,
    help="dataset_num_proc on both sides (the recipe's and FinetuneConfig's 2; 'none': one process). TRL packs each "
    "worker's shard of rows apart: 2 gives 282 windows, one process 281",
)
a = ap.parse_args()
TOK = str(a.shared / "data" / "tinyllama")
DATA = str(a.shared / "data" / "alpaca" / "alpaca_cleaned_5k.jsonl")
SEQ = 4096


def model():
    torch.manual_seed(0)
    c = LlamaConfig(
        vocab_size=32000,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )
    return get_peft_model(
        LlamaForCausalLM(c), LoraConfig(r=8, lora_alpha=8, target_modules=["q_proj"], task_type="CAUSAL_LM")
    )


def step_batches(trainer):
    it = iter(trainer.get_train_dataloader())
    return [next(it) for _ in range(trainer.args.gradient_accumulation_steps)]


tok = AutoTokenizer.from_pretrained(TOK)
args = recipe_sft_config(
    "a",
    10,
    SEQ,
    bf16=False,
    optim="adamw_torch",
    use_cpu=True,
    gradient_checkpointing=False,
    dataset_num_proc=a.num_proc,
)
art = SFTTrainer(
    model=model(),
    processing_class=tok,
    train_dataset=read_rows(DATA).map(alpaca_texts(tok.eos_token), batched=True),
    args=args,
)
A = step_batches(art)

from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.data.instructions import load_instruction_data
from tinyllama_ft.data.alpaca_prompts import make_formatting_func
from tinyllama_ft.machine.hardware import Hardware
from tinyllama_ft.train.plan import plan_run
from tinyllama_ft.train.trainers import build_trainer


def cat(bs, k):
    return torch.cat([b[k].reshape(-1) for b in bs])


for col in (True, False):
    cfg = FinetuneConfig(
        model_name=TOK,
        dataset=DATA,
        max_seq_length=SEQ,
        report_to="none",
        max_steps=10,
        output_dir=tempfile.mkdtemp(),
        save_steps=10**6,
        dtype="float32",
        dataset_num_proc=a.num_proc,
        gradient_checkpointing=False,
        completion_only_loss=col,
    )
    rows, _ = load_instruction_data(cfg.dataset)
    train = rows.map(make_formatting_func(tok.eos_token, template=cfg.template), batched=True)
    tr = build_trainer(
        model=model(),
        tokenizer=tok,
        train_dataset=train,
        eval_dataset=None,
        cfg=cfg,
        plan=plan_run(cfg, Hardware()),
        progress=False,
    )
    P = step_batches(tr)
    same_ids = torch.equal(cat(A, "input_ids"), cat(P, "input_ids")) and torch.equal(
        cat(A, "position_ids"), cat(P, "position_ids")
    )
    al, pl = cat(A, "labels"), cat(P, "labels")
    print(
        f"completion_only_loss={col}: packed windows {len(art.train_dataset)} vs {len(tr.train_dataset)}; "
        f"first step ids+positions equal: {same_ids}; labels equal: {torch.equal(al, pl)}; "
        f"tokens {al.numel()}; supervised article {(al != -100).sum().item()} package {(pl != -100).sum().item()}; "
        f"package labels where supervised == ids: {torch.equal(pl[pl != -100], cat(P, 'input_ids')[pl != -100])}"
    )
