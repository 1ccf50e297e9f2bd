"""Build a TinyLlama-1.1B-shaped Llama with random weights: the real model's speed and memory without
its download. Reads TinyLlama's config.json and real tokenizer from a folder (shared/data/tinyllama) and
writes a Hugging Face model folder (bf16 safetensors + tokenizer).

    python3 benchmarks/build_tinyllama_shaped.py --src ../shared/data/tinyllama --out /tmp/tinyllama-shaped
"""

import argparse
import os

import torch
from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--src", required=True, help="folder with TinyLlama's config.json and tokenizer")
ap.add_argument("--out", required=True)
a = ap.parse_args()
if os.path.isfile(os.path.join(a.out, "config.json")):
    print(f"{a.out} exists")
else:
    config = AutoConfig.from_pretrained(a.src)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(a.out)
    AutoTokenizer.from_pretrained(a.src).save_pretrained(a.out)
    print(f"wrote {a.out}: {sum(p.numel() for p in model.parameters()):,} parameters")
