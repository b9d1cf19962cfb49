"""Tiny logic/algorithmic puzzles from reasoning-gym, scored by reasoning-gym's own ``score_answer``.

Five generators with very easy configurations (short words, one-digit terms, small numbers), so
prompts stay under ~30 tokens and answers are one short word or number. Each row carries the dataset name
and the JSON round-tripped entry in its metadata, which is exactly what the puzzle reward hands to
``reasoning_gym.get_score_answer_fn(dataset)(answer, entry)``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from data_prep.tiny_tasks.common import TinyTask, check_split, int_seed, user

# name -> (easy config, rationale from the entry)
EASY_CONFIGS: dict[str, tuple[dict[str, Any], Callable[[dict], str]]] = {
    "spell_backward": (
        {"min_word_len": 3, "max_word_len": 4},
        lambda e: f"{' '.join(e['metadata']['word'])} reversed is {' '.join(e['answer'])}.",
    ),
    "chain_sum": (
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        lambda e: f"{e['metadata']['expression']} = {e['answer']}.",
    ),
    "count_bits": (
        {"min_n": 1, "max_n": 31},
        lambda e: f"{e['metadata']['number']} is {e['metadata']['binary']} in binary.",
    ),
    "gcd": (
        {"min_value": 2, "max_value": 30},
        lambda e: f"gcd of {' and '.join(map(str, e['metadata']['numbers']))} is {e['answer']}.",
    ),
    "letter_counting": (
        {"min_words": 2, "max_words": 3},
        lambda e: f"{e['metadata']['target_letter']} appears {e['answer']} times.",
    ),
}


def _entries(name: str, size: int, seed: int) -> list[dict]:
    import reasoning_gym

    logging.getLogger("reasoning_gym").setLevel(logging.ERROR)
    config, _ = EASY_CONFIGS[name]
    dataset = reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
    return [json.loads(json.dumps(dataset[i])) for i in range(size)]


def generate(
    n: int, seed: int, split: str = "train", datasets: tuple[str, ...] | None = None
) -> list[TinyTask]:
    """Return ``n`` puzzle tasks, cycling over ``datasets`` (default: all easy generators)."""
    check_split(split)
    names = tuple(datasets or EASY_CONFIGS)
    unknown = [d for d in names if d not in EASY_CONFIGS]
    if unknown:
        raise ValueError(f"unknown tiny puzzle dataset(s) {unknown}; known: {sorted(EASY_CONFIGS)}")
    per = {name: (n + len(names) - 1 - i) // len(names) for i, name in enumerate(names)}
    pools = {name: _entries(name, k, int_seed("puzzle", split, seed, name)) for name, k in per.items() if k}
    tasks = []
    for i in range(n):
        name = names[i % len(names)]
        entry = pools[name][i // len(names)]
        tasks.append(
            TinyTask(
                id=f"puzzle-{split}-{seed}-{i}",
                prompt=user(entry["question"]),
                label=str(entry["answer"]),
                metadata={
                    "reward": "reasoning",
                    "family": "puzzle",
                    "answer_format": "boxed",
                    "dataset": name,
                    "entry": entry,
                    "source": "tiny_tasks/reasoning_gym",
                },
                reasoning=EASY_CONFIGS[name][1](entry),
                answer=f"\\boxed{{{entry['answer']}}}",
            )
        )
    return tasks
