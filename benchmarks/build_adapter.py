"""Save a LoRA adapter for the TinyLlama-shaped model: the article's LoRA (r=32, alpha 32, the seven
projections) with random A and B (``init_lora_weights=False``), so that merged and unmerged weights
differ from the base and a generation benchmark decodes through a real, non-zero adapter.

    python3 benchmarks/build_adapter.py --model /tmp/tinyllama-shaped --out /tmp/gen-adapter
"""

import argparse
import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--model", required=True, help="base model folder (build_tinyllama_shaped.py)")
ap.add_argument("--out", required=True)
a = ap.parse_args()
if os.path.isfile(os.path.join(a.out, "adapter_config.json")):
    print(f"{a.out} exists")
else:
    base = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16)
    torch.manual_seed(3407)
    model = get_peft_model(
        base,
        LoraConfig(
            r=32,
            lora_alpha=32,
            lora_dropout=0.0,
            init_lora_weights=False,
            task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        ),
    )
    with torch.no_grad():  # small random B: the adapter moves the logits without swamping the base
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(0.01)
    model.save_pretrained(a.out)
    AutoTokenizer.from_pretrained(a.model).save_pretrained(a.out)
    print(f"wrote {a.out}")
