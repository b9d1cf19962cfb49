"""Tiny arithmetic word problems with answers in ``\\boxed{}`` (the math family at embedded scale).

Six templates over one- and two-digit numbers: add, take away, groups of, share equally, total cost and
change. The rationale is the one equation that solves the problem, so the mapping prompt → answer is
learnable by a ~1M-parameter model yet not trivial (it has to compute, not copy).
"""

from __future__ import annotations

import random

from data_prep.tiny_tasks.common import TinyTask, check_split, rng_for, user

NAMES = ("Tom", "Ann", "Sam", "Mia", "Ben", "Eva")
THINGS = ("apple", "book", "cat", "bird", "star", "car", "tree", "chair")


def _problem(rng: random.Random) -> tuple[str, str, int]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    kind = rng.randrange(6)
    if kind == 0:
        a, b = rng.randint(1, 20), rng.randint(1, 9)
        return (
            f"{name} has {a} {thing}s and gets {b} more. How many {thing}s now?",
            f"{a} + {b} = {a + b}",
            a + b,
        )
    if kind == 1:
        a = rng.randint(2, 20)
        b = rng.randint(1, a)
        return (
            f"{name} has {a} {thing}s and gives away {b}. How many are left?",
            f"{a} - {b} = {a - b}",
            a - b,
        )
    if kind == 2:
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        return (
            f"There are {a} boxes with {b} {thing}s each. How many {thing}s in all?",
            f"{a} * {b} = {a * b}",
            a * b,
        )
    if kind == 3:
        b, k = rng.randint(2, 9), rng.randint(1, 9)
        a = b * k
        return f"{a} {thing}s are shared by {b} kids equally. How many each?", f"{a} / {b} = {k}", k
    if kind == 4:
        a, b = rng.randint(2, 9), rng.randint(1, 9)
        return (
            f"{name} buys {a} {thing}s at {b} dollars each. What is the cost?",
            f"{a} * {b} = {a * b}",
            a * b,
        )
    a = rng.randint(1, 9)
    b = rng.randint(a, 20)
    return (
        f"A {thing} costs {a} dollars. {name} pays {b} dollars. What is the change?",
        f"{b} - {a} = {b - a}",
        b - a,
    )


def generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` math tasks for ``split`` (train and heldout use independent streams)."""
    check_split(split)
    rng = rng_for("math", split, seed)
    tasks = []
    for i in range(n):
        question, equation, value = _problem(rng)
        tasks.append(
            TinyTask(
                id=f"math-{split}-{seed}-{i}",
                prompt=user(question),
                label=str(value),
                metadata={
                    "reward": "reasoning",
                    "family": "math",
                    "answer_format": "boxed",
                    "source": "tiny_tasks",
                },
                reasoning=f"{equation}.",
                answer=f"\\boxed{{{value}}}",
            )
        )
    return tasks
