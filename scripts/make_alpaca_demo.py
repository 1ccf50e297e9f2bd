"""Regenerate the demo rows (data/alpaca_demo) and the tests' long rows (tests/fixtures/alpaca_long.jsonl).

Rule (deterministic, no randomness): walk an Alpaca-cleaned JSONL file in file order and keep a row when its
whole training text -- the article's Alpaca prompt (``alpaca_prompts.training_text``, Input block always) with
the response and SmolLM2's EOS ``<|im_end|>`` -- is at most ``--max-tokens`` (256) SmolLM2 tokens; stop at
``--rows`` (1,000) kept rows. Why 256: the demo trains at ``max_seq_length=256`` on a CPU, so every demo row
trains whole and ends in its EOS. The rows passed over on the way (longer than 256 tokens) are the long rows the
tests of ``long_rows``, lengths and packing need; ``--long-out`` writes them and ``--positions-out`` their line
numbers, so the two files together give back the source's first lines byte for byte (``merge_lines``). On the
first 5,000 rows of Alpaca-cleaned the kept rows end at line 1,417: 1,000 demo rows and 418 long rows.

Usage (from the repository root; the source is the GPU machine's data, ``../shared/data/alpaca``):
    python scripts/make_alpaca_demo.py --source ../shared/data/alpaca/alpaca_cleaned_5k.jsonl
(``--tokenizer FOLDER`` uses an existing SmolLM2 folder instead of ``demo_model.demo_model_path()``.)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path


def select_lines(source: Path, tokenizer, rows: int = 1000, max_tokens: int = 256) -> tuple[list[str], dict[int, str]]:
    """Split the source's first lines by the rule.

    Returns:
        ``(kept, passed)``: the kept lines (with their newline) in file order, and ``{line number: line}`` of the
        lines passed over before the last kept one.

    Raises:
        ValueError: the source has fewer than ``rows`` lines that fit.
    """
    from tinyllama_ft.data.alpaca_prompts import training_text

    kept, passed = [], {}
    with open(source, encoding="utf-8") as f:
        for number, line in enumerate(f):
            line = line if line.endswith("\n") else line + "\n"
            row = json.loads(line)
            text = training_text(row["instruction"], row["input"], row["output"], tokenizer.eos_token)
            if len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= max_tokens:
                kept.append(line)
                if len(kept) == rows:
                    break
            else:
                passed[number] = line
    if len(kept) < rows:
        raise ValueError(f"{source} has only {len(kept)} rows of <= {max_tokens} tokens; {rows} asked")
    return kept, passed


def merge_lines(kept: list[str], passed: list[str], positions: list[int]) -> list[str]:
    """The source's lines back from the two files: ``passed[i]`` stands at line ``positions[i]``, ``kept`` fills
    the other lines in order.

    Raises:
        ValueError: the counts or positions do not fit together.
    """
    if len(passed) != len(positions) or sorted(set(positions)) != positions:
        raise ValueError(f"{len(passed)} passed lines but positions {len(positions)} (must be increasing, unique)")
    total = len(kept) + len(passed)
    if positions and positions[-1] >= total:
        raise ValueError(f"position {positions[-1]} is past the {total} merged lines")
    at, rest = dict(zip(positions, passed)), iter(kept)
    return [at[i] if i in at else next(rest) for i in range(total)]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.chmod(tmp, 0o644)  # mkstemp makes it 0600
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="Alpaca-cleaned JSONL (alpaca_cleaned_5k.jsonl)")
    parser.add_argument("--out", default="data/alpaca_demo/alpaca_demo.jsonl")
    parser.add_argument("--long-out", default="tests/fixtures/alpaca_long.jsonl")
    parser.add_argument("--positions-out", default="tests/fixtures/alpaca_long.positions.json")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--tokenizer", default=None, help="SmolLM2 folder (default: demo_model_path())")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from tinyllama_ft.models.demo_model import demo_model_path

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or demo_model_path())
    kept, passed = select_lines(Path(args.source), tokenizer, args.rows, args.max_tokens)
    _write(Path(args.out), "".join(kept))
    _write(Path(args.long_out), "".join(passed.values()))
    _write(Path(args.positions_out), json.dumps(list(passed)) + "\n")
    print(f"wrote {len(kept)} rows to {args.out} and the {len(passed)} longer rows before them to {args.long_out}")
    return args.out


if __name__ == "__main__":
    main()
