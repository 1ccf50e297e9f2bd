"""One decoding configuration: greedy, ``--new`` tokens, the Alpaca prompt of the notebook; batch 1
streamed, then left-padded batches of ``--batches`` different prompts.

Prints one ``RESULT {json}`` line: ``warmup_s`` (the first batch-1 call's wall time minus a warm call's:
loading excluded, compilation and CUDA-graph capture included), ``first_call_s``, ``decode_tokens_per_s``
(new tokens / wall time of a warm batch-1 call, median of ``--repeats``), ``new_tokens``, the first 16
generated ids, and ``batches``: per batch size, ``tokens_per_s`` (rows x new tokens / a warm call's wall
time, after one untimed call at that size) and that first call's seconds.

Modes (``--mode``):

* ``plain``: transformers + PEFT, bf16 base with the adapter unmerged, ``generate`` + ``TextStreamer``
  (dynamic cache): what a practitioner writes without Unsloth;
* ``unsloth``: the article's cells 9-10: Unsloth ``FastLanguageModel`` on the 4-bit base + adapter,
  ``for_inference``, ``generate`` + ``TextStreamer``;
* ``unsloth_graphs``: ``unsloth`` with ``UNSLOTH_DECODE_CUDA_GRAPHS=1`` (Unsloth's CUDA-graph replay of the
  decode step, which it otherwise keeps for its RL trainers' generation);
* ``hf_static``: transformers bf16 base with the adapter merged, ``generate(cache_implementation="static")``
  (transformers compiles the decode step) + ``TextStreamer``;
* ``package``: this package's reload and ``stream``/``generate`` helpers, as the notebook's cells 9-10 call
  them: ``load_adapter(merged=True)`` (4-bit base dequantized to bf16, adapter merged) and the default
  ``decode="auto"``: the fused CUDA-graph decoder (``graph_decoder.py``: q/k/v and gate/up fused, static
  cache, Liger's kernels, batch-1 projections through the Triton matrix-vector kernel, one captured graph
  per step; no compilation);
* ``package_cublas``: ``package`` with the batch-1 projections through cuBLAS (``graph_decoding.MATMUL =
  "cublas"``: the default before 2026-12-01; results of that day name it ``package`` and the default
  ``package_triton``). ``--gemv-configs``: Triton block shapes to use (decode_probe.py writes them).

    python3 benchmarks/generate_one.py --adapter /tmp/gen-adapter --mode plain [--new 256]
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--adapter", required=True, help="a saved LoRA adapter folder (its base model path inside)")
ap.add_argument(
    "--mode",
    required=True,
    choices=("plain", "unsloth", "unsloth_graphs", "hf_static", "package", "package_cublas"),
)
ap.add_argument("--new", type=int, default=256, help="new tokens per answer")
ap.add_argument("--seq", type=int, default=4096, help="max_seq_length the model is loaded with")
ap.add_argument("--repeats", type=int, default=3, help="warm calls timed after the first")
ap.add_argument(
    "--gemv-configs", default="/tmp/gemv_configs.json", help="package: Triton block shapes to add (decode_probe.py)"
)
ap.add_argument("--batches", default="4,16", help="left-padded batch sizes timed after batch 1 ('' for none)")
a = ap.parse_args()

if a.mode.startswith("unsloth"):
    if a.mode == "unsloth_graphs":
        os.environ["UNSLOTH_DECODE_CUDA_GRAPHS"] = "1"  # read per generate() call (unsloth/models/_decode_graphs.py)
    import unsloth  # noqa: F401  first: it patches transformers and peft
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for --mode package

import torch

INSTRUCTION = "Give three tips for staying healthy."
#: Instructions of different lengths for the batches (left padding), cycled.
MANY = [
    INSTRUCTION,
    "What is the capital of France?",
    "Write a short poem about the sea and the wind at night.",
    "Explain photosynthesis.",
    "List five fruits that are rich in vitamin C and say why each is good for you.",
    "Translate 'good morning' into Spanish.",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "Why is the sky blue?",
]
PROMPT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    f"### Instruction:\n{INSTRUCTION}\n\n### Input:\n\n\n### Response:\n"
)


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def prompt(instruction):
    return PROMPT.replace(INSTRUCTION, instruction)


def hf_answer(model, tokenizer, rows=1, **extra):
    from transformers import TextStreamer

    tokenizer.padding_side = "left"
    batch = tokenizer([prompt(MANY[i % len(MANY)]) for i in range(rows)], return_tensors="pt", padding=True).to(
        model.device
    )

    def run():
        with torch.inference_mode():
            out = model.generate(
                **batch,
                max_new_tokens=a.new,
                min_new_tokens=a.new,
                do_sample=False,
                streamer=TextStreamer(tokenizer, skip_prompt=True) if rows == 1 else None,
                use_cache=True,
                pad_token_id=tokenizer.pad_token_id,
                **extra,
            )
        return out[0, batch["input_ids"].shape[1] :].tolist()

    return run


loading = time.perf_counter()
if a.mode in ("plain", "hf_static"):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinyllama_ft.models.adapters import adapter_base

    from tinyllama_ft.models.loading import ensure_pad_token

    tokenizer = AutoTokenizer.from_pretrained(a.adapter)
    ensure_pad_token(tokenizer)  # <unk>, as the package and Unsloth pick (the batches pad on the left)
    base = AutoModelForCausalLM.from_pretrained(adapter_base(a.adapter), dtype=torch.bfloat16, device_map={"": 0})
    model = PeftModel.from_pretrained(base, a.adapter)
    if a.mode != "plain":
        model = model.merge_and_unload()
    model.eval()
    extra = {"cache_implementation": "static"} if a.mode == "hf_static" else {}
    answer = hf_answer(model, tokenizer, **extra)
    batched = lambda rows: hf_answer(model, tokenizer, rows, **extra)  # noqa: E731
elif a.mode.startswith("unsloth"):
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(a.adapter, max_seq_length=a.seq, dtype=None, load_in_4bit=True)
    FastLanguageModel.for_inference(model)
    answer = hf_answer(model, tokenizer)
    batched = lambda rows: hf_answer(model, tokenizer, rows)  # noqa: E731
else:
    from tinyllama_ft.models.adapters import load_adapter
    from tinyllama_ft.infer.generation import generate, stream

    from tinyllama_ft.infer.fast import graph_decoder as graph_decoding

    if a.mode == "package_cublas":
        graph_decoding.MATMUL = "cublas"
    elif Path(a.gemv_configs).is_file():
        from gemv_configs import use_configs

        use_configs(a.gemv_configs)
    model, tokenizer = load_adapter(
        a.adapter, max_seq_length=a.seq, merged=True
    )  # the notebook's reload cell (reload_merged=True)

    def answer():
        return stream(model, tokenizer, INSTRUCTION, max_new_tokens=a.new, ignore_eos=True, return_ids=True)[0]

    def batched(rows):
        instructions = [MANY[i % len(MANY)] for i in range(rows)]
        return lambda: generate(model, tokenizer, instructions, max_new_tokens=a.new, ignore_eos=True)


load_s = time.perf_counter() - loading
ids, first = timed(answer)
warm = [timed(answer) for _ in range(a.repeats)]
steady = statistics.median(t for _, t in warm)
batches = {}
for rows in [int(b) for b in a.batches.split(",") if b.strip()]:
    run = batched(rows)
    _, first_b = timed(run)
    _, warm_b = timed(run)
    batches[str(rows)] = dict(
        tokens_per_s=round(rows * a.new / warm_b, 1), first_call_s=round(first_b, 2), warm_call_s=round(warm_b, 3)
    )
from tinyllama_ft.infer.core import GRAPH_FAILED  # noqa: E402  (what the package keeps per model, if anything)
from tinyllama_ft.infer.fast.graph_decoder import FUSED_DECODERS  # noqa: E402

result = dict(
    name=a.mode,
    load_s=round(load_s, 2),
    new_tokens=len(ids),
    first_call_s=round(first, 3),
    warm_call_s=round(steady, 4),
    warmup_s=round(first - steady, 3),
    decode_tokens_per_s=round(len(ids) / steady, 1),
    first_ids=ids[:16],
    same_ids_every_call=all(w == ids for w, _ in warm),
    batches=batches,
    decoder_failed=GRAPH_FAILED.get(model),
    decoder_attention_ms={str(b): d.attention_ms for b, d in FUSED_DECODERS.get(model, {}).items()},
    peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3),
)
print("\nRESULT " + json.dumps(result), flush=True)
