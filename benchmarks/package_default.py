"""Configuration (3): this package's default GPU path, as the notebook runs it, with the article's defaults.

The notebook's cells in order: ``plan_run`` (``recipe="fast"``: backend, attention, kernels, micro-batch
and checkpointing for this GPU, the effective batch kept), ``load_model``, ``add_lora``, the rows, and
``build_trainer``. ``--t4``: the T4 stand-in (fp16, 15 GiB cap), planned as on a T4's memory.

``FinetuneConfig``'s defaults (effective batch 2 x 4, seq 4096, packing) except what a benchmark needs:
no W&B, no eval split (all rows train, as in the other configurations), ``--steps`` steps, no checkpoint
before the end. The loss is the package's default, on the response + EOS tokens (``completion_only_loss=True``), so
the first loss is not the recipe's quantity (the recipe counts every token); ``--whole-text-loss``
(``completion_only_loss=False``, name ``package_whole_text``) trains the recipe's very tokens and labels
(tests/test_article_step.py), and its first loss is the one to hold against the recipe's.

    python3 benchmarks/package_default.py --model /tmp/tinyllama-shaped --data alpaca_cleaned_5k.jsonl
"""

from cli import T4_MEMORY_GIB, parse_args
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tinyllama_ft, installed or not

from tinyllama_ft.config.finetune import FinetuneConfig
from tinyllama_ft.data.instructions import load_instruction_data
from tinyllama_ft.machine.distributed import same_on_all_processes
from tinyllama_ft.machine.hardware import cap_gpu_memory, detect_hardware
from tinyllama_ft.models.lora import add_lora
from tinyllama_ft.models.loading import load_model
from tinyllama_ft.train.plan import plan_run
from tinyllama_ft.data.alpaca_prompts import make_formatting_func
from tinyllama_ft.train.trainers import build_trainer

a = parse_args(__doc__, package=True)

cfg = FinetuneConfig(
    model_name=a.model,
    dataset=a.data,
    max_seq_length=a.seq,
    report_to="none",
    max_steps=a.steps,
    output_dir=tempfile.mkdtemp(prefix="bench-package-default-"),
    save_steps=10**6,
    dtype="float16" if a.t4 else None,
    gpu_memory_cap_gib=T4_MEMORY_GIB if a.t4 else 0,
    completion_only_loss=not a.whole_text_loss,
)
hardware = detect_hardware()
cap_gpu_memory(cfg.gpu_memory_cap_gib, hardware)
plan = plan_run(cfg, hardware)  # the notebook's "How it will run" cell
print(plan.summary(), flush=True)
same_on_all_processes((plan.per_device_train_batch_size, plan.gradient_accumulation_steps), what="the batch split")
if plan.backend == "unsloth":
    import unsloth  # noqa: F401  before transformers is imported below (common.py)
model, tokenizer = load_model(
    cfg.model_name,
    max_seq_length=cfg.max_seq_length,
    dtype=plan.dtype,
    load_in_4bit=plan.load_in_4bit,
    backend=plan.backend,
    hardware=hardware,
    attn_implementation=plan.attn_implementation,
)

from common import Clock, train_and_report  # after load_model: it imports transformers

model = add_lora(
    model, gradient_checkpointing=plan.gradient_checkpointing, backend=plan.backend
)  # the article's LoRA values otherwise
rows, _ = load_instruction_data(cfg.dataset)
train = rows.map(make_formatting_func(tokenizer.eos_token, template=cfg.template), batched=True)
clock = Clock()
trainer = build_trainer(
    model=model, tokenizer=tokenizer, train_dataset=train, eval_dataset=None, cfg=cfg, plan=plan, callbacks=[clock]
)
name = ("package_whole_text" if a.whole_text_loss else "package_default") + ("_t4" if a.t4 else "")
if plan.world_size > 1:  # accelerate launch (train_throughput.py's package_ddp2): the same script on each GPU
    name = f"package_ddp{plan.world_size}"
train_and_report(
    trainer, clock, name, cfg.max_seq_length, plan.per_device_train_batch_size, plan.gradient_accumulation_steps
)
