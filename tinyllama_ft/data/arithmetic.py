"""Arithmetic word problems the package generates itself, so the GRPO demo downloads no data.

Two- and three-number sums and products as short English word problems with integer answers, seeded. Every
problem is one multiset of operands of one kind; the held-out problems (validation, and a test set if asked) are a
fixed number of each kind drawn first, and no problem repeats another's arithmetic (the same numbers in another story
or order count as the same).
"""

from __future__ import annotations

import math
import random
from itertools import combinations_with_replacement

from ..config.locations import GENERATED_DATASET

#: The kinds of problem: name -> (number of operands, smallest and largest operand, the operation).
KINDS: dict[str, tuple[int, int, int, str]] = {
    "sum2": (2, 2, 99, "+"),
    "sum3": (3, 2, 30, "+"),
    "product2": (2, 2, 20, "*"),
    "product3": (3, 2, 9, "*"),
}
#: Held-out problems by default: 100 (25 of each kind).
HELD_OUT = 100
#: The ``dataset`` value that names these problems in a GRPO run (``grpo_format.GrpoFormat.load``): nothing is read.
SOURCE = GENERATED_DATASET
#: Training problems such a run generates (with ``HELD_OUT`` more, seeded by the run's ``seed``).
TRAIN = 1000

NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kemi", "Liam", "Mei", "Noor")
ITEMS = ("apples", "pencils", "marbles", "stickers", "books", "cookies", "stamps", "shells", "cards", "coins")
#: Word-problem stories per kind: ``{name}``, ``{item}`` and the operands ``{a}``, ``{b}``, ``{c}``.
STORIES: dict[str, tuple[str, ...]] = {
    "sum2": (
        "{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?",
        "A box holds {a} {item} and a bag holds {b} {item}. How many {item} are there altogether?",
        "{name} found {a} {item} in the morning and {b} {item} in the afternoon. How many {item} did {name} find?",
    ),
    "sum3": (
        "{name} collects {a} {item} on Monday, {b} on Tuesday and {c} on Wednesday. How many {item} is that in all?",
        "There are {a} red, {b} blue and {c} green {item} on a table. How many {item} are on the table?",
        "{name} buys {a} {item}, then {b} more, then another {c}. How many {item} did {name} buy?",
    ),
    "product2": (
        "There are {a} boxes with {b} {item} in each box. How many {item} are there?",
        "{name} makes {a} piles of {item} with {b} {item} in every pile. How many {item} does {name} have?",
        "Each of {a} children has {b} {item}. How many {item} do the children have together?",
    ),
    "product3": (
        "There are {a} shelves, each with {b} boxes, and each box holds {c} {item}. How many {item} are there?",
        "{name} has {a} bags. Each bag holds {b} packs and each pack has {c} {item}. How many {item} is that?",
        "A school has {a} classes of {b} groups, and every group gets {c} {item}. How many {item} are given out?",
    ),
}


def answer_of(kind: str, operands: tuple[int, ...]) -> int:
    """The integer answer: the operands' sum (``sum*`` kinds) or product (``product*``). Raises KeyError: unknown
    ``kind``."""
    return sum(operands) if KINDS[kind][3] == "+" else math.prod(operands)


def problem_pool(kind: str) -> list[tuple[int, ...]]:
    """Every distinct operand multiset of ``kind`` (sorted tuples), in a fixed order. Raises KeyError: unknown
    ``kind``."""
    count, low, high, _ = KINDS[kind]
    return list(combinations_with_replacement(range(low, high + 1), count))


def _problem(kind: str, operands: tuple[int, ...], rng: random.Random) -> dict:
    shown = list(operands)
    rng.shuffle(shown)  # the story's order; the pool key stays sorted
    story = rng.choice(STORIES[kind])
    values = dict(zip("abc", shown))
    question = story.format(name=rng.choice(NAMES), item=rng.choice(ITEMS), **values)
    return {"question": question, "answer": answer_of(kind, operands), "kind": kind, "operands": list(shown)}


def arithmetic_problems(train: int, *, held_out: int = HELD_OUT, seed: int = 3407) -> tuple[list[dict], list[dict]]:
    """Seeded word problems, split into ``train`` and ``held_out`` with no operand multiset in both: ``(train_rows,
    held_out_rows)`` of ``arithmetic_splits`` without a test set (the held-out rows are its validation rows). Raises
    ValueError: as ``arithmetic_splits``."""
    train_rows, held, _ = arithmetic_splits(train, validation=held_out, test=0, seed=seed)
    return train_rows, held


def arithmetic_splits(
    train: int, *, validation: int = HELD_OUT, test: int = HELD_OUT, seed: int = 3407
) -> tuple[list[dict], list[dict], list[dict]]:
    """Seeded word problems in three parts, no operand multiset in two of them.

    Args:
        train: training problems wanted, the kinds taken in turn (sum2, sum3, product2, product3, sum2, ...); a
            kind whose operand sets are used up is passed over (``problem_pool``: product3 has 120).
        validation: held-out problems for tuning, the kinds in the same turn (100: 25 each); dealt first, so they
            depend on neither ``test`` nor ``train`` (``arithmetic_problems``' held-out rows).
        test: held-out problems for the figures to report, dealt next in the same turn (0: none, and the training
            problems are ``arithmetic_problems``').
        seed: the seed of every choice (operands, story, name, item, operand order); the same seed gives the same
            rows in the same order.

    Returns:
        ``(train_rows, validation_rows, test_rows)``: dicts with ``question`` (str), ``answer`` (int), ``kind`` and
        ``operands`` (in the story's order).

    Raises:
        ValueError: a negative count; more held-out problems of a kind than it has operand sets, or more problems in
            all than the kinds hold (the message gives the counts).
    """
    if min(train, validation, test) < 0:
        raise ValueError(
            f"arithmetic_problems: train={train}, validation={validation}, test={test}: counts must be >= 0"
        )
    rng = random.Random(seed)
    pools = {kind: problem_pool(kind) for kind in KINDS}
    for pool in pools.values():
        rng.shuffle(pool)
    sizes = {kind: len(pool) for kind, pool in pools.items()}
    held_out = validation + test
    if held_out > len(KINDS) * min(sizes.values()) or train + held_out > sum(sizes.values()):
        raise ValueError(
            f"arithmetic_problems: train={train}, held out {validation} + {test} is more than the kinds hold ({sizes} "
            f"distinct operand sets; held-out problems are dealt evenly): ask for fewer"
        )

    def deal(n: int) -> list[dict]:
        rows: list[dict] = []
        while len(rows) < n:
            for kind, pool in pools.items():
                if pool and len(rows) < n:
                    rows.append(_problem(kind, pool.pop(0), rng))
        return rows

    held = deal(validation)
    tested = deal(test)
    return deal(train), held, tested
