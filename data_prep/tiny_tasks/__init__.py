"""Deterministic offline task generators for the embedded (tiny) scale, shared by the whole tiny chain.

Families: ``math``, ``puzzle``, ``science``, ``code``, ``if_multi_constraint``, ``if_multiturn``. Every
generator returns :class:`TinyTask` records with a reference solution; :func:`generate` picks a family,
:func:`sft_samples` renders tasks as SFT conversations, and :func:`write_heldout` writes the held-out set
of any embedded metric so every stage that reports e.g. ``math_acc`` scores the very same rows.

Prompts stay under ~60 tokens and answers under ~40 so a ~1M-parameter model trained for a minute can
learn them partially, leaving room for RL to raise the score.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from data_prep.io import write_jsonl
from data_prep.schema import SFTSample
from data_prep.tiny_tasks import code, instructions, math, puzzles, science
from data_prep.tiny_tasks.common import TinyTask, rng_for

GENERATORS: dict[str, Callable[..., list[TinyTask]]] = {
    "math": math.generate,
    "puzzle": puzzles.generate,
    "science": science.generate,
    "code": code.generate,
    "if_multi_constraint": instructions.multi_constraint,
    "if_multiturn": instructions.multi_turn,
}
# Embedded metric -> the families its held-out set draws from.
METRIC_FAMILIES: dict[str, tuple[str, ...]] = {
    "sft_format": ("math", "puzzle", "science", "code", "if_multi_constraint", "if_multiturn"),
    "math_acc": ("math",),
    "puzzle_acc": ("puzzle",),
    "science_acc": ("science",),
    "code_pass1": ("code",),
    "if_all_constraints": ("if_multi_constraint",),
    "if_multiturn_rubrics": ("if_multiturn",),
}


def generate(family: str, n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` tasks of ``family`` for ``split``; the error lists the known families."""
    if family not in GENERATORS:
        raise KeyError(f"unknown tiny task family {family!r}; known: {', '.join(GENERATORS)}")
    return GENERATORS[family](n, seed, split)


def heldout_tasks(metric: str, n: int, seed: int) -> list[TinyTask]:
    """Return the ``n`` held-out tasks of ``metric`` (families interleaved for ``sft_format``)."""
    if metric not in METRIC_FAMILIES:
        raise KeyError(f"unknown embedded metric {metric!r}; known: {', '.join(METRIC_FAMILIES)}")
    families = METRIC_FAMILIES[metric]
    counts = [(n + len(families) - 1 - i) // len(families) for i in range(len(families))]
    tasks = [
        t for fam, k in zip(families, counts, strict=True) if k for t in generate(fam, k, seed, "heldout")
    ]
    if metric == "sft_format":
        rng_for("sft_format", seed).shuffle(tasks)
        for task in tasks:
            task.metadata = {
                **task.metadata,
                "scored_reward": task.metadata["reward"],
                "reward": "sft_format",
            }
    for task in tasks:
        task.metadata = {**task.metadata, "metric": metric}
    return tasks


def write_heldout(metric: str, n: int, seed: int, out_dir: str | Path) -> Path:
    """Write ``out_dir/<metric>.jsonl`` (PromptRow rows, reference kept out) and return its path."""
    path = Path(out_dir) / f"{metric}.jsonl"
    write_jsonl(path, (t.prompt_row().model_dump(mode="json") for t in heldout_tasks(metric, n, seed)))
    return path


def sft_samples(tasks: list[TinyTask]) -> list[SFTSample]:
    """Return each task with its reference solution as an SFT conversation."""
    return [t.sft_sample() for t in tasks]


__all__ = [
    "GENERATORS",
    "METRIC_FAMILIES",
    "TinyTask",
    "generate",
    "heldout_tasks",
    "sft_samples",
    "write_heldout",
]
