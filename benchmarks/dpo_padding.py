"""DPO's padding and padded lengths on the demo pairs, from the tokenizer alone (issue 44 target 2; CPU, seconds).

TRL's DPO collator pads a micro-batch's chosen and rejected sequences (prompt + response) to the longest of them; on
flex attention each new padded length is a new shape for torch.compile. This replays the shuffled micro-batches of a
run and prints the padding fraction and how many distinct padded lengths the first steps meet, as they are and rounded
up to a multiple (TRL's ``pad_to_multiple_of``). An estimate: a seeded shuffle, not the trainer's sampler.

Usage (repo root): python3 benchmarks/dpo_padding.py --tokenizer ../main/.device-data/tinyllama [--steps 30]
"""

from __future__ import annotations

import argparse
import random
import statistics


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, help="a tokenizer folder (the TinyLlama one)")
    ap.add_argument("--pairs", default="data/alpaca_pairs/pairs.jsonl")
    ap.add_argument("--max-seq-length", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps of 8 pairs")
    ap.add_argument("--micro", default="8,2", help="pairs per micro-batch, comma-separated")
    a = ap.parse_args(argv)
    from transformers import AutoTokenizer

    from tinyllama_ft.data.preference_tokens import tokenize_preferences
    from tinyllama_ft.data.preferences import load_preference_data

    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    ds, _, _, form = load_preference_data(a.pairs)
    t, _ = tokenize_preferences(ds, tok, form=form, max_seq_length=a.max_seq_length)
    lengths = [
        (len(p) + len(c), len(p) + len(r)) for p, c, r in zip(t["prompt_ids"], t["chosen_ids"], t["rejected_ids"])
    ]
    flat = [x for pair in lengths for x in pair]
    print(f"{len(lengths)} pairs; sequence tokens median {statistics.median(flat):.0f}, max {max(flat)}")
    for mb in (int(x) for x in a.micro.split(",")):
        rng, order, longest, real, padded = random.Random(3407), list(range(len(lengths))), [], 0, 0
        for step in range(a.steps * 8 // mb):
            at = step * mb % len(order)
            if at == 0:
                rng.shuffle(order)
            batch = [lengths[i] for i in order[at : at + mb]]
            longest.append(max(max(pair) for pair in batch))
            real += sum(sum(pair) for pair in batch)
            padded += 2 * len(batch) * longest[-1]
        rounded = {m: len({-(-n // m) * m for n in longest}) for m in (64, 128, 256)}
        print(
            f"micro-batch {mb} pairs, {a.steps} steps: padding {1 - real / padded:.1%} of the tokens; distinct padded "
            f"lengths {len(set(longest))} (to a multiple of 64: {rounded[64]}, 128: {rounded[128]}, 256: {rounded[256]})"
        )


if __name__ == "__main__":
    main()
