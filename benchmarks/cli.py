"""The command line every benchmark configuration takes (imports nothing heavy: Unsloth must load first)."""

import argparse


def parse_args(doc: str) -> argparse.Namespace:
    """``--model`` (HF folder), ``--data`` (Alpaca .jsonl), ``--steps`` (15), ``--seq`` (4096 tokens)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", required=True, help="model folder (Hugging Face format)")
    ap.add_argument("--data", required=True, help="Alpaca rows, .jsonl")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--seq", type=int, default=4096)
    return ap.parse_args()
