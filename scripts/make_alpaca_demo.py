"""Regenerate data/alpaca_demo/alpaca_demo.jsonl from the 5,000 shared Alpaca-cleaned rows.

Rule (deterministic, no randomness): walk ``alpaca_cleaned_5k.jsonl`` in file order and keep a row when
its whole training text -- the article's Alpaca prompt (``alpaca_prompts.training_text``, Input block always)
with the response and SmolLM2's EOS ``<|im_end|>`` -- is at most ``--max-tokens`` (256) SmolLM2 tokens;
stop at ``--rows`` (1,000) rows. Lines are copied byte for byte. Why 256: the demo trains at
``max_seq_length=256`` on a CPU, so every demo row trains whole and ends in its EOS (nothing truncated).
The first 1,000 such rows are rows 0-1416 of the source.

Usage (from the repository root):
    python scripts/make_alpaca_demo.py --source ../shared/data/alpaca/alpaca_cleaned_5k.jsonl \
        --out data/alpaca_demo/alpaca_demo.jsonl
(``--tokenizer FOLDER`` uses an existing SmolLM2 folder instead of ``demo_model.demo_model_path()``.)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path


def select_lines(source: Path, tokenizer, rows: int = 1000, max_tokens: int = 256) -> list[str]:
    """The source's lines (with their newline) that the rule keeps, in file order."""
    from tinyllama_ft.data.alpaca_prompts import training_text

    kept = []
    with open(source, encoding="utf-8") as f:
        for number, line in enumerate(f):
            row = json.loads(line)
            text = training_text(row["instruction"], row["input"], row["output"], tokenizer.eos_token)
            if len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= max_tokens:
                kept.append(line if line.endswith("\n") else line + "\n")
                if len(kept) == rows:
                    break
    if len(kept) < rows:
        raise ValueError(f"{source} has only {len(kept)} rows of <= {max_tokens} tokens; {rows} asked")
    return kept


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="alpaca_cleaned_5k.jsonl")
    parser.add_argument("--out", default="data/alpaca_demo/alpaca_demo.jsonl")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--tokenizer", default=None, help="SmolLM2 folder (default: demo_model_path())")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from tinyllama_ft.models.demo_model import demo_model_path

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or demo_model_path())
    lines = select_lines(Path(args.source), tokenizer, args.rows, args.max_tokens)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.writelines(lines)
    os.chmod(tmp, 0o644)  # mkstemp makes it 0600
    os.replace(tmp, out)
    print(f"wrote {len(lines)} rows to {out}")
    return str(out)


if __name__ == "__main__":
    main()
