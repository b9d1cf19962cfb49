"""Deterministic offline task generators for the embedded (tiny) scale, shared by the whole tiny chain.

Families: ``math``, ``puzzle``, ``science``, ``code``, ``if_multi_constraint``, ``if_multiturn``,
``awm_agent`` (AWM-format tool tasks, :mod:`.awm`), ``terminal_agent`` (Harbor-format terminal tasks,
:mod:`.harbor`), ``search_agent`` (multi-hop questions over a generated offline wiki, :mod:`.search`). Every
generator returns :class:`TinyTask` records with a reference solution; :func:`generate` picks a family,
:func:`sft_samples` renders tasks as SFT conversations, and :func:`write_heldout` writes the held-out set
of any embedded metric so every stage that reports e.g. ``math_acc`` scores the very same rows.

The family and metric tables are registries: the built-ins above are a shared library (SFT uses all of
them, :data:`SHARED_METRICS`), and a stage folder brings its own with :func:`register_family` and
:func:`register_metric` from its ``data_prep.py`` (or ``env.py``) at import time, without editing this file.

Prompts stay under ~60 tokens and answers under ~40 so a ~1M-parameter model trained for a minute can
learn them partially, leaving room for RL to raise the score.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from data_prep.io import write_jsonl
from data_prep.schema import SFTSample
from data_prep.tiny_tasks import awm, code, harbor, instructions, math, puzzles, science, search
from data_prep.tiny_tasks.common import TinyTask, rng_for

TaskGenerator = Callable[..., list[TinyTask]]

_GENERATORS: dict[str, TaskGenerator] = {
    "math": math.generate,
    "puzzle": puzzles.generate,
    "science": science.generate,
    "code": code.generate,
    "if_multi_constraint": instructions.multi_constraint,
    "if_multiturn": instructions.multi_turn,
    awm.FAMILY: awm.generate,
    harbor.FAMILY: harbor.generate,
    search.FAMILY: search.generate,
}
# Embedded metric -> the families its held-out set draws from.
_METRIC_FAMILIES: dict[str, tuple[str, ...]] = {
    "sft_format": ("math", "puzzle", "science", "code", "if_multi_constraint", "if_multiturn"),
    "math_acc": ("math",),
    "puzzle_acc": ("puzzle",),
    "science_acc": ("science",),
    "code_pass1": ("code",),
    "if_all_constraints": ("if_multi_constraint",),
    "if_multiturn_rubrics": ("if_multiturn",),
    awm.METRIC: (awm.FAMILY,),
    harbor.METRIC: (harbor.FAMILY,),
    search.METRIC: (search.FAMILY,),
}
# Embedded metric -> the reward its held-out rows are scored with, where it is not the training reward
# (e.g. search accuracy is the judge's grade with the training reward's gates and penalties off).
_METRIC_REWARDS: dict[str, str] = {search.METRIC: search.EVAL_REWARD}

#: Read-only views of the registries (family -> generator, embedded metric -> families).
GENERATORS: Mapping[str, TaskGenerator] = MappingProxyType(_GENERATORS)
METRIC_FAMILIES: Mapping[str, tuple[str, ...]] = MappingProxyType(_METRIC_FAMILIES)
#: The built-in families and metrics, fixed: what SFT screens by default never depends on later stages.
SHARED_FAMILIES: tuple[str, ...] = tuple(_GENERATORS)
SHARED_METRICS: tuple[str, ...] = tuple(_METRIC_FAMILIES)


def register_family(name: str, fn: TaskGenerator) -> TaskGenerator:
    """Register tiny task family ``name``: ``fn(n, seed, split) -> list[TinyTask]``, deterministic.

    Registering the same function again is a no-op; another function under a taken name is an error.
    Returns ``fn``, so a stage may use it as ``register_family("name", generate)`` at import time.
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"tiny task family name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise TypeError(f"tiny task family {name!r}: generator {fn!r} is not callable")
    known = _GENERATORS.get(name)
    if known is not None and known is not fn:
        raise ValueError(
            f"tiny task family {name!r} is already registered by "
            f"{getattr(known, '__module__', '?')}.{getattr(known, '__qualname__', known)}"
        )
    _GENERATORS[name] = fn
    return fn


def register_metric(
    metric: str, families: Iterable[str], description: str | None = None, *, reward: str | None = None
) -> None:
    """Register embedded held-out metric ``metric`` drawing from ``families`` (registered; one name or many).

    Held-out rows are split evenly across ``families`` in order; ``reward`` (a registered reward name)
    scores them instead of the tasks' training reward (their ``metadata.reward``). The metric also becomes
    an embedded metric of ``eval.registry`` (``EMBEDDED_METRICS``, ``column_for``) with ``description``,
    or a default one naming its families when the registry does not know it yet. Registering the same
    families again is a no-op; other families (or another description) under a taken name is an error.
    """
    if not metric or not isinstance(metric, str):
        raise ValueError(f"embedded metric name must be a non-empty string, got {metric!r}")
    fams = (families,) if isinstance(families, str) else tuple(families)
    if not fams:
        raise ValueError(f"embedded metric {metric!r}: no families given")
    unknown = [f for f in fams if f not in _GENERATORS]
    if unknown:
        raise KeyError(
            f"embedded metric {metric!r}: unknown tiny task families {unknown}; "
            f"known: {', '.join(_GENERATORS)} (register_family first)"
        )
    known = _METRIC_FAMILIES.get(metric)
    if known is not None and known != fams:
        raise ValueError(
            f"embedded metric {metric!r} is already registered with families {known}, not {fams}"
        )
    # eval.registry is a leaf module (pure data, no imports from the recipe); importing it here, lazily,
    # keeps data_prep -> eval the only direction and lets reports read eval.registry without data_prep.
    from eval.registry import EMBEDDED_METRICS, register_embedded_metric

    if description is not None:
        register_embedded_metric(metric, description)
    elif metric not in EMBEDDED_METRICS:
        register_embedded_metric(metric, f"Held-out tiny tasks of families {', '.join(fams)} (registered).")
    _METRIC_FAMILIES[metric] = fams
    if reward is not None:
        _METRIC_REWARDS[metric] = reward


def generate(family: str, n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` tasks of ``family`` for ``split``; the error lists the known families."""
    if family not in GENERATORS:
        raise KeyError(f"unknown tiny task family {family!r}; known: {', '.join(GENERATORS)}")
    return GENERATORS[family](n, seed, split)


def heldout_tasks(metric: str, n: int, seed: int, split: str = "heldout") -> list[TinyTask]:
    """Return the ``n`` held-out tasks of ``metric`` (families interleaved for ``sft_format``).

    ``split="train"`` draws the same metric's tasks from the training split (RL validation sets).
    """
    if metric not in METRIC_FAMILIES:
        raise KeyError(f"unknown embedded metric {metric!r}; known: {', '.join(METRIC_FAMILIES)}")
    families = METRIC_FAMILIES[metric]
    counts = [(n + len(families) - 1 - i) // len(families) for i in range(len(families))]
    tasks = [t for fam, k in zip(families, counts, strict=True) if k for t in generate(fam, k, seed, split)]
    if metric == "sft_format":
        rng_for("sft_format", seed).shuffle(tasks)
        for task in tasks:
            task.metadata = {
                **task.metadata,
                "scored_reward": task.metadata["reward"],
                "reward": "sft_format",
            }
    reward = _METRIC_REWARDS.get(metric)
    for task in tasks:
        task.metadata = {**task.metadata, "metric": metric}
        if reward is not None:
            task.metadata["reward"] = reward
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
    "SHARED_FAMILIES",
    "SHARED_METRICS",
    "TaskGenerator",
    "TinyTask",
    "generate",
    "heldout_tasks",
    "register_family",
    "register_metric",
    "sft_samples",
    "write_heldout",
]
