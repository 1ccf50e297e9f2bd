"""What the shipped tasks' YAML files name with ``!function`` (lm-eval imports this file by its path, so imports are
absolute): the MMLU subset's rows in ``cais/mmlu``'s columns, the GRPO demo's held-out arithmetic problems, and their
scoring by the number the answer gives (``data.answers.extract_number``, as the GRPO checks score).
"""

from __future__ import annotations

import csv
from pathlib import Path

#: The MMLU subset's files: ``<subject>_test.csv`` and ``<subject>_dev.csv``, headerless (question, A, B, C, D, answer).
MMLU_DIR = Path(__file__).resolve().parent / "mmlu"
LETTERS = "ABCD"


def mmlu_subject(subject: str, **_metadata):
    """One subject's ``test`` and ``dev`` rows as a ``datasets.DatasetDict`` with ``cais/mmlu``'s columns
    (``question``, ``subject``, ``choices``: 4 strings, ``answer``: 0-3), so lm-eval's own MMLU template reads them.

    Args:
        subject: the subject's file stem (``"astronomy"``). ``_metadata``: what lm-eval passes besides (the task's
            metadata and the model's arguments), unused.

    Raises:
        FileNotFoundError: no such subject in ``MMLU_DIR``. ValueError: a row without 6 fields or an answer A-D.
    """
    import datasets

    splits = {}
    for split in ("test", "dev"):
        path = MMLU_DIR / f"{subject}_{split}.csv"
        rows = []
        with path.open(newline="", encoding="utf-8") as f:
            for line, fields in enumerate(csv.reader(f), start=1):
                if len(fields) != 6 or fields[5] not in LETTERS:
                    raise ValueError(f"{path}: row {line}: expected question, A, B, C, D and an answer A-D")
                question, *choices, answer = fields
                rows.append(dict(question=question, subject=subject, choices=choices, answer=LETTERS.index(answer)))
        splits[split] = datasets.Dataset.from_list(rows)
    return datasets.DatasetDict(splits)


def arithmetic_held_out(seed: int = 3407, held_out: int = 100, **_metadata):
    """The GRPO demo's held-out problems (``arithmetic.arithmetic_problems(..., seed=seed)``'s held-out rows, 25 of
    each kind), each question asking for the answer layout as GRPO's prompts do (``grpo_prompts.grpo_prompts``), as a
    ``DatasetDict`` with one split ``test``: ``question``, ``answer`` (the integer as text), ``kind``.

    Args:
        seed: the GRPO run's ``seed`` (``DEFAULTS.seed``, 3407, in ``grpo_offline_cpu``). held_out: how many.
    """
    import datasets

    from tinyllama_ft.data.arithmetic import arithmetic_problems
    from tinyllama_ft.data.grpo_prompts import grpo_prompts

    _, held = arithmetic_problems(0, held_out=held_out, seed=seed)
    asked = grpo_prompts([{"prompt": r["question"], "answer": r["answer"]} for r in held], dataset_format="messages")
    rows = [
        dict(question=a["prompt"][-1]["content"], answer=str(a["answer"]), kind=r["kind"]) for a, r in zip(asked, held)
    ]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def score_number(doc: dict, results: list[str]) -> dict[str, float]:
    """lm-eval's ``process_results`` for an answer that is a number: ``exact_match`` 1.0 when the number the
    generation gives (after its last ``####``, else its last number) equals the reference's, ``format`` 1.0 when its
    last line is ``#### <number>`` (``answers.follows_layout``)."""
    from tinyllama_ft.data.answers import extract_number, follows_layout, reference_number

    text = results[0]
    reference = reference_number(doc["answer"])
    return {
        "exact_match": float(reference is not None and extract_number(text) == reference),
        "format": float(follows_layout(text)),
    }
