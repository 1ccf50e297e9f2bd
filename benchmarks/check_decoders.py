"""The held-out checks' greedy answers through both decoders, on the same PEFT model, in one process.

Issue 32 target 4: the checks used to answer with ``generate`` on the PEFT model, 4 prompts per batch; they now
answer through the CUDA-graph decoder reading the model as a merged 16-bit copy, 16 per batch
(``core.check_batch_size``). This prints, for each load (the Alpaca notebook's 4-bit base, the chat notebook's
bf16 base) and each path: wall time, new tokens and tokens/s, the answers that stopped, and the share of
answers whose tokens agree with ``generate``'s, plus the held-out loss (a forward pass, the same for both). With
random weights (the TinyLlama-shaped model) every answer runs to ``max_new_tokens``; the adapter has non-zero
LoRA weights (build_adapter.py), so the merged copy differs from the base.

    python3 benchmarks/check_decoders.py --adapter /tmp/gen-adapter --dataset alpaca_cleaned_5k.jsonl [--rows 20]
"""

import argparse
import json
import time

import torch

from tinyllama_ft.data.formats import AlpacaFormat
from tinyllama_ft.evaluate.held_out import greedy_answers, held_out_scores


def load(adapter: str, four_bit: bool):
    """The base (4-bit NF4 with bf16 compute, or bf16) with the adapter on top, unmerged: as the notebooks hold it."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    base_name = json.load(open(f"{adapter}/adapter_config.json"))["base_model_name_or_path"]
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
    cuda = torch.cuda.is_available()  # a CPU runs the bf16 load only, as a smoke test of this script
    base = AutoModelForCausalLM.from_pretrained(
        base_name,
        dtype=torch.bfloat16 if cuda else torch.float32,
        device_map={"": 0} if cuda else None,
        quantization_config=quant if four_bit else None,
    )
    tokenizer = AutoTokenizer.from_pretrained(base_name)
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        tokenizer.add_special_tokens({"pad_token": tokenizer.unk_token or "<pad>"})
    return PeftModel.from_pretrained(base, adapter), tokenizer


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def answers(model, tokenizer, rows, fmt, decode: str, batch_size: int) -> tuple[list, float]:
    _sync()
    start = time.perf_counter()
    found = greedy_answers(model, tokenizer, rows, data_format=fmt, batch_size=batch_size, decode=decode)
    _sync()
    return found, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", required=True, help="adapter folder (build_adapter.py) on the shaped model")
    ap.add_argument("--dataset", required=True, help="Alpaca rows (JSONL)")
    ap.add_argument("--rows", type=int, default=20, help="prompts, as the stopping count (STOP_ROWS = 20)")
    ap.add_argument("--out", help="write the figures as JSON here")
    a = ap.parse_args()
    with open(a.dataset, encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(a.rows), f)]
    fmt, results = AlpacaFormat(), []
    loads = (("4-bit base + adapter (Alpaca notebook)", True), ("bf16 base + adapter (chat)", False))
    for label, four_bit in loads if torch.cuda.is_available() else loads[1:]:
        model, tokenizer = load(a.adapter, four_bit)
        loss = held_out_scores(model, tokenizer, rows, data_format=fmt, max_seq_length=1024).response_loss
        runs = {}
        for name, decode, batch in (("generate, batch 4", "plain", 4), ("merged copy + graph, batch 16", "graph", 16)):
            answers(model, tokenizer, rows[:2], fmt, decode, min(batch, 2))  # kernels and cuBLAS warmed
            found, seconds = answers(model, tokenizer, rows, fmt, decode, batch)
            runs[name] = (found, seconds)
        plain = runs["generate, batch 4"][0]
        peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
        for name, (found, seconds) in runs.items():
            tokens = sum(x.new_tokens for x in found)
            agree = sum(x.ids == p.ids for x, p in zip(found, plain)) / len(found)
            row = dict(
                load=label,
                path=name,
                seconds=round(seconds, 2),
                new_tokens=tokens,
                tokens_per_s=round(tokens / seconds, 1),
                stopped=sum(x.stopped for x in found),
                answers=len(found),
                same_tokens_as_generate=round(agree, 3),
                held_out_loss=round(loss, 6),
                peak_gib=round(peak, 2),
            )
            results.append(row)
            print(json.dumps(row), flush=True)
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    print("| load | path | s | new tokens | tokens/s | stopped | same tokens as generate |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| {r['load']} | {r['path']} | {r['seconds']:.1f} | {r['new_tokens']:,} | {r['tokens_per_s']:,.0f} | "
            f"{r['stopped']}/{r['answers']} | {r['same_tokens_as_generate']:.0%} |"
        )
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
