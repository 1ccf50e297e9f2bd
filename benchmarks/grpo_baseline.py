"""The GRPO demo model before training: which answer layout it can already produce, and its held-out checks.

On SmolLM2-135M-Instruct (``demo_model.demo_model_path``, CPU, greedy) and the package's arithmetic problems
(``data.arithmetic``), the two measurements docs/grpo.md reports:

* ``layouts``: the first ``--held-out`` held-out problems, each asking for the answer as ``#### <number>`` or in
  ``<answer>`` tags, through the chat template and the Alpaca template: answers in the layout, right numbers;
* ``checks``: ``evaluate.grpo_checks.grpo_scores`` on the 100 held-out problems (chat prompts), and per kind.

Usage (repository root)::

    OMP_NUM_THREADS=1 python benchmarks/grpo_baseline.py layouts --held-out 40 --max-new-tokens 64
    OMP_NUM_THREADS=1 python benchmarks/grpo_baseline.py checks --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tinyllama_ft.config.finetune import FinetuneConfig  # noqa: E402
from tinyllama_ft.data.answers import extract_number, follows_layout, reference_number  # noqa: E402
from tinyllama_ft.data.arithmetic import arithmetic_problems  # noqa: E402
from tinyllama_ft.data.formats import AlpacaFormat, ConversationFormat  # noqa: E402

TAGS = re.compile(r"<answer>\s*(-?\d[\d,]*)\s*</answer>\s*$")  # the tagged answer, last in the text
OPENED = re.compile(r"<answer>\s*(-?\d[\d,]*)")
#: layout name -> (the line asking for it, does a text follow it, the number it gives)
LAYOUTS = {
    "####": ("Give the final answer on the last line as: #### <number>", follows_layout, extract_number),
    "<answer>": (
        "Put the final answer in answer tags, as in <answer>42</answer>.",
        lambda t: bool(TAGS.search(t.strip())),
        lambda t: extract_number(OPENED.findall(t)[-1]) if OPENED.findall(t) else extract_number(t),
    ),
}


def _model(form: str):
    from tinyllama_ft.machine.hardware import Hardware
    from tinyllama_ft.models.demo_model import demo_model_path
    from tinyllama_ft.models.loading import load_model

    model, tokenizer = load_model(
        demo_model_path(),
        max_seq_length=512,
        dtype=None,
        load_in_4bit=False,
        backend="transformers",
        hardware=Hardware(),
    )
    fmt = ConversationFormat("messages") if form == "chat" else AlpacaFormat()
    fmt.prepare(model, tokenizer, FinetuneConfig(max_seq_length=512))
    return model, tokenizer, fmt


def layouts(args) -> None:
    from tinyllama_ft.infer.generation import generate

    _, held = arithmetic_problems(0, held_out=args.held_out)
    for form in ("chat", "alpaca"):
        model, tokenizer, fmt = _model(form)
        for name, (ask, follows, number) in LAYOUTS.items():
            answers = generate(
                model,
                tokenizer,
                [f"{r['question']}\n{ask}" for r in held],
                data_format=fmt,
                max_new_tokens=args.max_new_tokens,
            )
            right = sum(number(a) == reference_number(r["answer"]) for a, r in zip(answers, held))
            print(
                f"{form:6} {name:9} in the layout {sum(map(follows, answers))}/{len(held)}  right {right}/{len(held)}"
            )


def checks(args) -> None:
    from tinyllama_ft.data.grpo_prompts import check_prompt_rows, grpo_prompts
    from tinyllama_ft.evaluate.grpo_checks import grpo_scores
    from tinyllama_ft.train.rewards import resolve_rewards

    model, tokenizer, _ = _model("chat")
    _, held = arithmetic_problems(0)
    rows = grpo_prompts(check_prompt_rows(held)[0], dataset_format="messages")
    rewards = resolve_rewards(
        ["correct_number", "answer_format", "soft_overlong_punishment"], max_completion_length=args.max_new_tokens
    )
    start = time.perf_counter()
    scores = grpo_scores(model, tokenizer, rows, reward_funcs=rewards, max_new_tokens=args.max_new_tokens, batch_size=8)
    print(f"{scores} ({time.perf_counter() - start:.0f} s)")
    for kind in dict.fromkeys(r["kind"] for r in held):
        pairs = [(r, a) for r, a in zip(held, scores.answers) if r["kind"] == kind]
        right = sum(extract_number(a) == reference_number(r["answer"]) for r, a in pairs)
        print(
            f"{kind:9} right {right}/{len(pairs)}  in the layout {sum(follows_layout(a) for _, a in pairs)}/{len(pairs)}"
        )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("layouts", "checks"))
    p.add_argument("--held-out", type=int, default=40, help="layouts: held-out problems asked")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default: 64 (layouts), 128 (checks)")
    args = p.parse_args(argv)
    args.max_new_tokens = args.max_new_tokens or (64 if args.what == "layouts" else 128)
    (layouts if args.what == "layouts" else checks)(args)


if __name__ == "__main__":
    main()
