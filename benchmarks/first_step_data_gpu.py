"""The T4 plan's first optimizer step on a GPU: the recipe's data (Unsloth's patched SFTTrainer on the text column, as
article_recipe.py --t4) against the package's (build_trainer on the Unsloth backend, completion_only_loss=False), on
one Unsloth model and tokenizer (fp16, 4-bit, 15 GiB cap). Prints each side's tokens, rows and supervised tokens, and
where the ids, positions and labels first differ. No training; about 60 s after the model is built.

    python3 benchmarks/first_step_data_gpu.py --model /tmp/tinyllama-shaped --data alpaca_cleaned_5k.jsonl
"""

import unsloth  # noqa: F401  first: it patches transformers, TRL and peft when imported

import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tinyllama_ft

from cli import parse_args
import torch
from unsloth import FastLanguageModel
from common import alpaca_texts, read_rows, recipe_sft_config
from trl import SFTTrainer
from tinyllama_ft.machine.hardware import cap_gpu_memory, detect_hardware

a = parse_args(__doc__)
M, D = a.model, a.data
hw = detect_hardware()
cap_gpu_memory(15, hw)
model, tok = FastLanguageModel.from_pretrained(
    model_name=M, max_seq_length=4096, dtype=torch.float16, load_in_4bit=True
)
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


def first(tr):
    it = iter(tr.get_train_dataloader())
    bs = [next(it) for _ in range(tr.args.gradient_accumulation_steps)]
    print("batch keys", {k: tuple(v.shape) for k, v in bs[0].items() if hasattr(v, "shape")}, flush=True)
    return {
        k: torch.cat([b[k].reshape(-1).cpu() for b in bs])
        for k in ("input_ids", "position_ids", "labels")
        if k in bs[0]
    }


def show(name, X):
    ids = X["input_ids"]
    lab = X["labels"]
    print(
        f"{name}: tokens {ids.numel()} supervised {(lab != -100).sum().item()} bos {(ids == 1).sum().item()} eos {(ids == 2).sum().item()} "
        f"docs {(X['position_ids'] == 0).sum().item() if 'position_ids' in X else '-'} first ids {ids[:12].tolist()}",
        flush=True,
    )


R = P = None
try:
    rec = SFTTrainer(
        model=model,
        processing_class=tok,
        train_dataset=read_rows(D).map(alpaca_texts(tok.eos_token), batched=True),
        args=recipe_sft_config("r", 4, 4096, bf16=False),
    )
    print("recipe packed rows", len(rec.train_dataset), rec.train_dataset.column_names, flush=True)
    R = first(rec)
    show("recipe", R)
except Exception:
    traceback.print_exc()
try:
    from tinyllama_ft.config.finetune import FinetuneConfig
    from tinyllama_ft.data.alpaca_prompts import make_formatting_func
    from tinyllama_ft.data.instructions import load_instruction_data
    from tinyllama_ft.train.plan import plan_run
    from tinyllama_ft.train.trainers import build_trainer

    cfg = FinetuneConfig(
        model_name=M,
        dataset=D,
        max_seq_length=4096,
        report_to="none",
        max_steps=4,
        output_dir=tempfile.mkdtemp(),
        save_steps=10**6,
        dtype="float16",
        gpu_memory_cap_gib=15,
        completion_only_loss=False,
    )
    plan = plan_run(cfg, hw)
    print(plan.summary().splitlines()[0], flush=True)
    rows, _ = load_instruction_data(cfg.dataset)
    train = rows.map(make_formatting_func(tok.eos_token, template=cfg.template), batched=True)
    pk = build_trainer(
        model=model, tokenizer=tok, train_dataset=train, eval_dataset=None, cfg=cfg, plan=plan, progress=False
    )
    print("package packed rows", len(pk.train_dataset), pk.train_dataset.column_names, type(pk).__mro__[1], flush=True)
    P = first(pk)
    show("package", P)
except Exception:
    traceback.print_exc()
if R is not None and P is not None:
    for k in R:
        a, b = R[k], P.get(k)
        eq = b is not None and a.shape == b.shape and torch.equal(a, b)
        msg = ""
        if b is not None and not eq:
            n = min(a.numel(), b.numel())
            d = (a[:n] != b[:n]).nonzero()
            i = d[0].item() if len(d) else n
            msg = f" first difference at {i}: recipe {a[max(0, i - 5) : i + 8].tolist()} package {b[max(0, i - 5) : i + 8].tolist()}"
        print(f"{k}: equal {eq} (recipe {a.numel()}, package {None if b is None else b.numel()}){msg}", flush=True)
