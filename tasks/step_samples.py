"""A seeded generator of step-labelled arithmetic solutions (binary rows of `tasks.step_labels`).

Each problem is ``Compute a * b + c * d - e.`` with two or three products and an optional
subtraction (factors 2..9, ``e`` 1..9); a correct solution has one step per product, one per
addition or subtraction, and ``The answer is R.``. About half the solutions carry one error,
drawn evenly from four kinds:

    wrong_product   a product step states a wrong value (off by 1..3 or by one factor)
    wrong_sum       an addition or subtraction step states a wrong value (off by 1..9)
    miscopy         a later step reads a product or sum as another value than the step that made it
    dropped_term    the last subtraction is never done: the answer is the sum before it

Every later step works on from the wrong value with correct arithmetic. Labels follow the
convention of `tasks.step_labels`: 1 before the first wrong step, 0 from it on (the ``dropped_term``
error is the answer step). ``source`` names the error kind (``arithmetic/correct`` when there is
none); it is never shown to a model.

The shipped sample ``tasks/samples/step_arithmetic.jsonl`` is ``generate_rows(200, seed=0)``
(tests/unit/test_verifier_rows.py checks it).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

KINDS = ("wrong_product", "wrong_sum", "miscopy", "dropped_term")
SAMPLE = Path(__file__).resolve().parent / "samples" / "step_arithmetic.jsonl"


def _off(rng: random.Random, value: int, spread: int) -> int:
    """``value`` moved by 1..spread either way (never to itself, never below 0)."""
    while True:
        wrong = value + rng.choice((-1, 1)) * rng.randint(1, spread)
        if wrong >= 0 and wrong != value:
            return wrong


def solution(rng: random.Random, kind: str | None) -> tuple[str, list[str], list[int]]:
    """One problem, its steps and their labels, with an error of ``kind`` (None: a correct solution)."""
    factors = [(rng.randint(2, 9), rng.randint(2, 9)) for _ in range(rng.choice((2, 3)))]
    minus = rng.randint(1, 9) if kind == "dropped_term" or rng.random() < 0.5 else None
    problem = "Compute " + " + ".join(f"{a} * {b}" for a, b in factors) + (f" - {minus}" if minus else "") + "."
    steps: list[str] = []
    first_wrong: int | None = None
    # which computed step carries the error (product steps first, then the sums)
    sums = len(factors) - 1 + (1 if minus else 0)
    target = {
        "wrong_product": rng.randrange(len(factors)),
        "wrong_sum": len(factors) + rng.randrange(sums),
        "miscopy": len(factors) + rng.randrange(sums),
    }.get(kind or "", -1)

    def state(value: int, index: int, spread: int) -> int:
        nonlocal first_wrong
        if index == target and kind in ("wrong_product", "wrong_sum"):
            first_wrong = len(steps)
            return _off(rng, value, spread)
        return value

    products = []
    for a, b in factors:
        products.append(state(a * b, len(steps), 3 if rng.random() < 0.5 else max(a, b)))
        steps.append(f"{a} * {b} = {products[-1]}")
    total = products[0]
    terms = [(p, "+") for p in products[1:]] + ([(minus, "-")] if minus and kind != "dropped_term" else [])
    for operand, sign in terms:
        shown = total
        if len(steps) == target and kind == "miscopy":
            first_wrong = len(steps)
            shown = _off(rng, total, 9)
        value = shown + operand if sign == "+" else shown - operand
        total = state(value, len(steps), 9)
        steps.append(f"{shown} {sign} {operand} = {total}")
    if kind == "dropped_term":
        first_wrong = len(steps)
    steps.append(f"The answer is {total}.")
    labels = [1 if first_wrong is None or k < first_wrong else 0 for k in range(len(steps))]
    return problem, steps, labels


def generate_rows(count: int, seed: int, error_rate: float = 0.5) -> list[dict]:
    """``count`` binary rows (ids ``arith-SEED-I``); each has an error with probability ``error_rate``."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        kind = rng.choice(KINDS) if rng.random() < error_rate else None
        problem, steps, labels = solution(rng, kind)
        rows.append(
            {
                "id": f"arith-{seed}-{index}",
                "problem": problem,
                "steps": steps,
                "labels": labels,
                "source": f"arithmetic/{kind or 'correct'}",
            }
        )
    return rows


def write_rows(rows: list[dict], path: Path) -> None:
    """One JSON object per line."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
