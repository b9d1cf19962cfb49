"""Steps shared by the RL stages' data prep (01, 03): held-out sets, overlap/decontamination, self-check.

* :func:`write_stage_heldout` writes ``heldout/<metric>.jsonl`` for every target and guardrail metric;
* :func:`drop_heldout_overlap` removes training rows whose prompt equals a held-out prompt (exact match
  after whitespace/case normalisation), then :func:`decontaminate` runs the project's 8-gram screen
  (``data_prep.decontaminate``) with the held-out sets (embedded) or benchmark files (production) as the
  benchmark items;
* :func:`reference_self_check` scores each row's reference solution with the row's own reward and keeps
  only rows whose gold passes (the correctness filter when the reference stands in for the teacher).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from data_prep.decontam_pipeline import row_text
from data_prep.decontaminate import build_index, scan_texts, screen_rule
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import METRIC_FAMILIES, TinyTask, write_heldout
from infra.layering import ConfigError
from rewards.contract import RewardRequest, get_reward, safe_score


def write_stage_heldout(metrics: Iterable[str], n: int, seed: int, heldout_dir: Path) -> dict[str, Path]:
    """Write the held-out set of each metric; return ``metric -> path``.

    Raises :class:`~infra.layering.ConfigError` naming ``eval.targets``/``eval.guardrails`` for a metric
    with no embedded held-out set (one a stage registers only when it is imported, e.g. stage 08's).
    """
    metrics = list(dict.fromkeys(metrics))
    unknown = [m for m in metrics if m not in METRIC_FAMILIES]
    if unknown:
        raise ConfigError(
            f"eval.targets/eval.guardrails: no embedded held-out set for {', '.join(map(repr, unknown))};"
            f" known: {', '.join(METRIC_FAMILIES)}"
        )
    return {m: write_heldout(m, n, seed, heldout_dir) for m in metrics}


def write_stage_validation(
    metrics: Iterable[str],
    n: int,
    seed: int,
    validation_dir: Path,
    heldout: dict[str, Path],
    split: str = "heldout",
) -> tuple[dict[str, Path], dict[str, int]]:
    """Write ``validation/<metric>.jsonl`` for RL checkpoint selection; return paths and drop counts.

    Drawn like the metric's held-out set (same families; ``split``, by default the held-out one) from
    another seed, so it measures the same skill on other prompts; a prompt equal to one of
    ``heldout[metric]``'s (or to an earlier validation prompt) is dropped, so selecting on it never looks
    at the held-out score (the counts: held-out prompts and repeats). An empty result is a
    :class:`ConfigError` naming the metric.
    """
    from data_prep.io import write_jsonl
    from data_prep.tiny_tasks import heldout_tasks
    from data_prep.tiny_tasks.common import int_seed

    paths, dropped = {}, {}
    for metric in dict.fromkeys(metrics):
        held = [json.loads(line) for line in Path(heldout[metric]).read_text().splitlines() if line.strip()]
        tasks = heldout_tasks(metric, n, int_seed("validation", seed), split)
        kept, n_held = drop_heldout_overlap(tasks, held)
        unique: dict[str, TinyTask] = {}
        for task in kept:
            unique.setdefault(_norm(prompt_text(task.prompt_row())), task)
        dropped[metric] = n_held + len(kept) - len(unique)
        if not unique:
            raise ConfigError(
                f"eval.validation_split {split!r}: every validation prompt of {metric!r} is a held-out "
                "prompt (its held-out set is a fixed set of cells; draw validation from split 'train')"
            )
        paths[metric] = Path(validation_dir) / f"{metric}.jsonl"
        write_jsonl(paths[metric], (t.prompt_row().model_dump(mode="json") for t in unique.values()))
    return paths, dropped


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def screened_messages(messages: Any, metadata: dict | None) -> Any:
    """Return the messages the held-out screens read: an agent task's system turn left out.

    That turn is its environment's description (an AWM scenario's app, shared by every task of the
    scenario), not the task: kept, every task of a held-out task's scenario would match it.
    """
    if (metadata or {}).get("environment") == "agent" and isinstance(messages, list):
        return [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]
    return messages


def prompt_text(row: PromptRow | dict) -> str:
    """Return the concatenated text of a row's prompt messages, as the overlap and 8-gram screens read it."""
    data = row.model_dump() if isinstance(row, PromptRow) else row
    return row_text({"prompt": screened_messages(data["prompt"], data.get("metadata"))}) or ""


def load_rows(paths: Iterable[Path]) -> list[dict]:
    """Return the JSON rows of the given JSONL files."""
    return [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]


def drop_heldout_overlap(rows: Sequence[Any], heldout_rows: Sequence[dict]) -> tuple[list[Any], int]:
    """Return rows whose prompt text is not a held-out prompt, and how many were dropped.

    ``rows`` are :class:`TinyTask` or :class:`PromptRow` objects.
    """
    held = {_norm(prompt_text(r)) for r in heldout_rows}
    kept = [r for r in rows if _norm(prompt_text(_as_row(r))) not in held]
    return kept, len(rows) - len(kept)


def _as_row(item: Any) -> PromptRow:
    return item.prompt_row() if isinstance(item, TinyTask) else item


def decontaminate(
    rows: Sequence[Any], benchmarks: dict[str, list[tuple[str, str]]], *, drop_shared: bool = False
) -> tuple[list[Any], dict[str, Any]]:
    """Screen rows against ``benchmarks`` (``name -> [(item id, text)]``) with the 8-gram rule.

    ``drop_shared``: the sets are held-out sets of generated tasks; phrases their items share are template
    and not indexed (:func:`data_prep.decontaminate.build_index`). Returns the kept rows and a report:
    items indexed, short items skipped, removed per benchmark.
    """
    from data_prep.benchmarks import BenchmarkItem

    loaded = [(name, [BenchmarkItem(i, t) for i, t in items], False) for name, items in benchmarks.items()]
    index = build_index(loaded, drop_shared=drop_shared)
    matches = scan_texts(index, [prompt_text(_as_row(r)) for r in rows]) if rows else []
    kept = [r for r, m in zip(rows, matches, strict=True) if m is None]
    removed = Counter(m.benchmark for m in matches if m is not None)
    report = {
        "rule": screen_rule(drop_shared),
        "items": {name: len(items) for name, items in benchmarks.items()},
        "skipped_short_items": dict(index.skipped_short),
        "scanned": len(rows),
        "removed": sum(removed.values()),
        "removed_per_benchmark": dict(removed),
    }
    return kept, report


def heldout_benchmarks(heldout_paths: dict[str, Path]) -> dict[str, list[tuple[str, str]]]:
    """Return the held-out sets as benchmark items (``metric -> [(id, prompt text)]``)."""
    return {m: [(r["id"], prompt_text(r)) for r in load_rows([p])] for m, p in heldout_paths.items()}


def reference_self_check(tasks: Sequence[TinyTask]) -> tuple[list[TinyTask], dict[str, int]]:
    """Keep tasks whose reference response scores 1.0 under their own reward; count failures by reason."""
    kept, failures = [], Counter()
    for task in tasks:
        result = safe_score(
            get_reward(task.metadata["reward"]),
            RewardRequest(
                prompt=task.prompt, response=task.response(), label=task.label, metadata=task.metadata
            ),
        )
        if result.score == 1.0 and not result.aborted:
            kept.append(task)
        else:
            failures[result.failure or ("aborted" if result.aborted else "score_below_1")] += 1
    return kept, dict(failures)


def rows_to_jsonl(rows: Iterable[PromptRow]) -> Iterable[dict]:
    """Yield rows as JSON-ready dicts."""
    return (r.model_dump(mode="json") for r in rows)
