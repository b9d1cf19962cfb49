"""The seed report's per-environment-type tables: where a target's change came from, over the seeds.

Held-out rows that name an environment type (``metadata.env_type``: stage 08's reconciliations, memos and
trackers) are also scored per type, and the embedded evaluation writes that split as ``by_env_type``
({type: {score, prompts, truncated}}) into ``<stage>/logs/eval_details_<input|output>.json``. For each
stage and target metric split on some seed, two tables: per type, the input, output and change (mean and
min–max over the seeds that split both checkpoints), the one-sided t-test p of the change (descriptive:
the verdict belongs to the metric, and types are several tests at once) and the budget-cut episodes summed
over those seeds; then per seed, each score input → output, the metric's own first.
"""

from __future__ import annotations

from typing import Any

from eval.registry import RAW_METRICS
from eval.seed_stats import SeedRow, fmt_stat
from eval.stagewise import RunData, eval_details

ROLES = ("input", "output")


Split = dict[str, dict[str, Any]]  # {env type: {score, prompts, truncated}} of one checkpoint


def _split(run: RunData, stage: str, metric: str, role: str) -> Split:
    entry = eval_details(run.run_dir, stage, metric, role)
    split = entry.get("by_env_type") if entry else None
    if not isinstance(split, dict):
        return {}
    return {k: v for k, v in split.items() if isinstance(v, dict) and isinstance(v.get("score"), int | float)}


def _value(value: float | None, raw: bool) -> str:
    return "–" if value is None else (f"{value:.2f}" if raw else f"{100 * value:.1f}")


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


POOLED_HEADERS = [
    "environment type",
    "seeds",
    "prompts per seed",
    "input (mean, min–max)",
    "output (mean, min–max)",
    "change (mean, min–max)",
    "p (one-sided t)",
    "budget-cut episodes (input → output)",
]


def _pooled_row(kind: str, n_runs: int, metric: str, splits: list[tuple[Split, Split]]) -> str:
    paired = [(i[kind], o[kind]) if kind in i and kind in o else None for i, o in splits]
    both = [pair for pair in paired if pair is not None]
    row = SeedRow("", kind, "target", *([pair and pair[k]["score"] for pair in paired] for k in (0, 1)))
    raw = metric in RAW_METRICS
    sides = (row.inputs, row.outputs, row.changes)
    stats = [fmt_stat(v, signed=k == 2, raw=raw) for k, v in enumerate(sides)]
    prompts = sorted({int(side.get("prompts", 0)) for pair in both for side in pair})
    cut_in, cut_out = (sum(int(pair[k].get("truncated", 0)) for pair in both) for k in (0, 1))
    p = row.p_value
    return _md_row([
        f"`{kind}`",
        f"{row.seeds} of {n_runs}",
        "–" if not prompts else "–".join(str(n) for n in dict.fromkeys((prompts[0], prompts[-1]))),
        *stats,
        "–" if p is None else f"{p:.3f}",
        f"{cut_in} → {cut_out}" if both else "–",
    ])  # fmt: skip


def _per_seed_row(run: RunData, stage: str, metric: str, types: list[str], split: tuple[Split, Split]) -> str:
    raw = metric in RAW_METRICS
    ev = next((s.eval for s in run.stages if s.id == stage), None) or {}
    cells = [run.run_dir.name, "–" if run.seed is None else str(run.seed)]
    cells.append(" → ".join(_value(ev.get(side, {}).get(metric), raw) for side in ROLES))
    for kind in types:
        cells.append(" → ".join(_value(side.get(kind, {}).get("score"), raw) for side in split))
    return _md_row(cells)


def _tables(runs: list[RunData], stage: str, metric: str, splits: list[tuple[Split, Split]]) -> str:
    types = sorted({k for pair in splits for side in pair for k in side})
    unit = "raw scores" if metric in RAW_METRICS else "percentages"
    lines = [
        f"{stage} · `{metric}` by environment type ({unit}; a type's score is the mean over its prompts of "
        "each prompt's mean episode score, as the metric's)",
        "",
        _md_row(POOLED_HEADERS),
        "|" + "---|" * len(POOLED_HEADERS),
        *(_pooled_row(kind, len(runs), metric, splits) for kind in types),
        "",
        _md_row(["run", "seed", f"`{metric}`", *(f"`{kind}`" for kind in types)]),
        "|" + "---|" * (len(types) + 3),
        *(_per_seed_row(run, stage, metric, types, split) for run, split in zip(runs, splits, strict=True)),
    ]
    return "\n".join(lines)


def breakdown_markdown(runs: list[RunData], targets: dict[str, list[str]]) -> str | None:
    """Return the per-type tables of ``targets`` ({stage: [metric]}); None when no run split a target."""
    tables = []
    for stage, metrics in targets.items():
        for metric in metrics:
            splits = [tuple(_split(run, stage, metric, role) for role in ROLES) for run in runs]
            if not any(i or o for i, o in splits):
                continue
            tables.append(_tables(runs, stage, metric, splits))
    if not tables:
        return None
    intro = (
        "## By environment type\n\n"
        "Where each target's change came from. Per type: mean and min – max over the seeds that scored the "
        "type on both checkpoints; the p-value is descriptive (the verdict above belongs to the metric, and "
        "the types are several tests at once); budget-cut episodes are summed over those seeds. Then each "
        "seed's scores, input → output."
    )
    return intro + "\n\n" + "\n\n".join(tables) + "\n"
