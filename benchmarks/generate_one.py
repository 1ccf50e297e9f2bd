"""One streaming-decode configuration: batch 1, greedy, ``--new`` tokens, the Alpaca prompt of the notebook.

Prints one ``RESULT {json}`` line: ``warmup_s`` (the first call's wall time minus a warm call's: loading
excluded, compilation and CUDA-graph capture included), ``first_call_s``, ``decode_tokens_per_s`` (new
tokens / wall time of a warm call, median of ``--repeats``), ``new_tokens`` and the first 16 generated ids.

Modes (``--mode``):

* ``plain``: transformers + PEFT, bf16 base with the adapter unmerged, ``generate`` + ``TextStreamer``
  (dynamic cache): what a practitioner writes without Unsloth;
* ``unsloth``: the article's cells 9-10: Unsloth ``FastLanguageModel`` on the 4-bit base + adapter,
  ``for_inference``, ``generate`` + ``TextStreamer``;
* ``hf_static``: transformers bf16 base with the adapter merged, ``generate(cache_implementation="static")``
  (transformers compiles the decode step) + ``TextStreamer``;
* ``package``: this package's reload and ``stream`` helpers, as the notebook's cells 9-10 call them:
  ``load_adapter(merged=True)`` (4-bit base dequantized to bf16, adapter merged) and ``stream`` with
  ``decode="inductor"`` (a static KV cache and the one-token step compiled by inductor with CUDA graphs;
  what ``decode="auto"`` picks for requests of 1,000+ new tokens or once compiled).

    python3 benchmarks/generate_one.py --adapter /tmp/gen-adapter --mode plain [--new 256]
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--adapter", required=True, help="a saved LoRA adapter folder (its base model path inside)")
ap.add_argument("--mode", required=True, choices=("plain", "unsloth", "hf_static", "package"))
ap.add_argument("--new", type=int, default=256, help="new tokens per answer")
ap.add_argument("--seq", type=int, default=4096, help="max_seq_length the model is loaded with")
ap.add_argument("--repeats", type=int, default=3, help="warm calls timed after the first")
a = ap.parse_args()

if a.mode == "unsloth":
    import unsloth  # noqa: F401  first: it patches transformers and peft
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for --mode package

import torch

INSTRUCTION = "Give three tips for staying healthy."
PROMPT = ("Below is an instruction that describes a task, paired with an input that provides further context. "
          "Write a response that appropriately completes the request.\n\n"
          f"### Instruction:\n{INSTRUCTION}\n\n### Input:\n\n\n### Response:\n")


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def hf_answer(model, tokenizer, **extra):
    from transformers import TextStreamer

    batch = tokenizer([PROMPT], return_tensors="pt").to(model.device)

    def run():
        with torch.inference_mode():
            out = model.generate(**batch, max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False,
                                 streamer=TextStreamer(tokenizer, skip_prompt=True), use_cache=True,
                                 pad_token_id=tokenizer.pad_token_id, **extra)
        return out[0, batch["input_ids"].shape[1]:].tolist()

    return run


if a.mode in ("plain", "hf_static"):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinyllama_ft.adapters import adapter_base_model

    tokenizer = AutoTokenizer.from_pretrained(a.adapter)
    base = AutoModelForCausalLM.from_pretrained(adapter_base_model(a.adapter), dtype=torch.bfloat16,
                                                device_map={"": 0})
    model = PeftModel.from_pretrained(base, a.adapter)
    if a.mode != "plain":
        model = model.merge_and_unload()
    model.eval()
    answer = hf_answer(model, tokenizer, **({"cache_implementation": "static"} if a.mode == "hf_static" else {}))
elif a.mode == "unsloth":
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(a.adapter, max_seq_length=a.seq, dtype=None,
                                                         load_in_4bit=True)
    FastLanguageModel.for_inference(model)
    answer = hf_answer(model, tokenizer)
else:
    from tinyllama_ft.adapters import load_adapter
    from tinyllama_ft.generation import stream

    model, tokenizer = load_adapter(a.adapter, max_seq_length=a.seq, merged=True)  # the notebook's reload cell (reload_merged=True)
    def answer():
        return stream(model, tokenizer, INSTRUCTION, max_new_tokens=a.new, ignore_eos=True, return_ids=True,
                      decode="inductor")[0]

ids, first = timed(answer)
warm = [timed(answer) for _ in range(a.repeats)]
steady = statistics.median(t for _, t in warm)
result = dict(name=a.mode, new_tokens=len(ids), first_call_s=round(first, 3), warm_call_s=round(steady, 4),
              warmup_s=round(first - steady, 3), decode_tokens_per_s=round(len(ids) / steady, 1),
              first_ids=ids[:16], same_ids_every_call=all(w == ids for w, _ in warm),
              peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3))
print("\nRESULT " + json.dumps(result), flush=True)
