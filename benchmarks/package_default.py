"""Configuration (3): this package's default GPU path, as the notebook runs it, with the article's defaults.

``load_model`` (backend "auto": Unsloth on a CUDA GPU, imported inside it), ``add_lora``, the rows through
``load_instruction_data`` and ``make_formatting_func``, and ``build_trainer`` with ``FinetuneConfig``'s
defaults (batch 2 x accumulation 4, seq 4096, packing) except what a benchmark needs: no W&B, no eval
split (all rows train, as in the other configurations), ``--steps`` steps, no checkpoint before the end.

    python3 benchmarks/package_default.py --model /tmp/tinyllama-shaped --data alpaca_cleaned_5k.jsonl
"""

from cli import parse_args
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tinyllama_ft, installed or not

from tinyllama_ft.config import FinetuneConfig
from tinyllama_ft.data import load_instruction_data
from tinyllama_ft.hardware import detect_hardware
from tinyllama_ft.lora import add_lora
from tinyllama_ft.modeling import load_model
from tinyllama_ft.prompts import make_formatting_func
from tinyllama_ft.training import build_trainer

a = parse_args(__doc__)

cfg = FinetuneConfig(
    model_name=a.model, dataset=a.data, max_seq_length=a.seq, report_to="none", max_steps=a.steps,
    output_dir=tempfile.mkdtemp(prefix="bench-package-default-"), save_steps=10**6,
)
hardware = detect_hardware()
model, tokenizer = load_model(cfg.model_name, cfg.max_seq_length, cfg.dtype, cfg.load_in_4bit, cfg.backend, hardware)

from common import Clock, train_and_report  # after load_model: it imports unsloth, which must precede transformers

model = add_lora(model)  # the article's LoRA values are add_lora's (and FinetuneConfig's) defaults
rows, _ = load_instruction_data(cfg.dataset)
train = rows.map(make_formatting_func(tokenizer.eos_token, cfg.template), batched=True)
clock = Clock()
trainer = build_trainer(model, tokenizer, train, None, cfg, hardware, model.tinyllama_ft.dtype, callbacks=[clock])
train_and_report(trainer, clock, "package_default", cfg.max_seq_length, cfg.per_device_train_batch_size,
                 cfg.gradient_accumulation_steps)
