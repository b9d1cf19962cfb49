"""The stagewise table's data: a run directory read into rows and cells, shared by the text and HTML reports.

``load_run(run_dir)`` reads ``runs/<name>/manifest.json`` and each stage's ``eval.json`` and
``metrics.jsonl``; ``stagewise_rows(run)`` lays it out in the paper's Table 2 form (see ``eval.report``);
``comparison(a, b)`` pairs two runs' stages by pipeline position. ``eval.report`` (markdown, rich) and
``eval.html`` (the HTML page) both render from here; ``eval.report`` calls ``eval.html``, never the
reverse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.plots import read_metrics

#: What ``rufus stage`` records in a stage folder (seed, input, config) so a seed report can read the run.
STAGE_RUN = "stage_run.json"


@dataclass
class Cell:
    """One table cell: a value, its change against the row above, and the stage role of the metric."""

    value: float
    delta: float | None = None
    role: str = ""


@dataclass
class Row:
    """One checkpoint of the pipeline."""

    label: str
    stage: str | None
    status: str
    cells: dict[str, Cell] = field(default_factory=dict)


@dataclass
class StageData:
    """What the report reads of one stage."""

    id: str
    status: str
    eval: dict[str, Any] | None
    metrics: list[dict[str, Any]]
    dropped_metric_lines: int
    selected_step: int | None


@dataclass
class RunData:
    """A run directory's manifest and stages."""

    run_dir: Path
    name: str
    base: str
    stages: list[StageData]
    seed: int | None = None
    config_hashes: dict[str, str | None] = field(default_factory=dict)
    input_hashes: dict[str, str | None] = field(default_factory=dict)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc


def eval_details(run_dir: Path, stage: str, metric: str, role: str) -> dict[str, Any] | None:
    """Return ``metric``'s entry of ``<run_dir>/<stage>/logs/eval_details_<role>.json`` (None without one).

    The embedded held-out evaluation writes that file per checkpoint (role ``input`` or ``output``); an
    evaluation from before it was written has none. ValueError names a file that is not JSON.
    """
    path = run_dir / stage / "logs" / f"eval_details_{role}.json"
    if not path.is_file():
        return None
    data = _read_json(path)
    details = data.get("details") if isinstance(data, dict) else None
    entry = details.get(metric) if isinstance(details, dict) else None
    return entry if isinstance(entry, dict) else None


def scores(evaluation: dict[str, Any], side: str, path: Path) -> dict[str, float]:
    raw = evaluation.get(side, {})
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: '{side}' must map metric names to numbers")
    out = {}
    for key, value in raw.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def stage_runs_manifest(run_dir: Path) -> dict[str, Any]:
    """A manifest for a ``rufus stage --run-dir`` folder: its stages from their ``stage_run.json`` records.

    One seed per folder (the records must agree); stages in name order; the recipe name is ``rufus stage``.
    """
    records = sorted(Path(run_dir).glob(f"*/{STAGE_RUN}"))
    if not records:
        raise FileNotFoundError(
            f"{run_dir / 'manifest.json'} not found and no */{STAGE_RUN}: is {run_dir} a run directory "
            "(runs/<name>) or the --run-dir of `rufus stage`?"
        )
    loaded = [(path, _read_json(path)) for path in records]
    seeds = {rec.get("seed") for _, rec in loaded}
    if len(seeds) != 1:
        raise ValueError(f"{run_dir}: its {STAGE_RUN} records name several seeds {sorted(map(str, seeds))}")
    stages = [
        {
            "id": path.parent.name,
            "status": "done" if (path.parent / "handoff.json").is_file() else "pending",
            "config_hash": rec.get("config_hash"),
            "input_hash": rec.get("input_hash"),
        }
        for path, rec in loaded
    ]
    return {"recipe": "rufus stage", "seed": seeds.pop(), "base": {"model": loaded[0][1].get("init_from")},
            "stages": stages}  # fmt: skip


def load_run(run_dir: Path) -> RunData:
    """Return the manifest and per-stage eval/metrics of a run directory (errors name the file)."""
    run_dir = Path(run_dir)
    manifest_path = run_dir / "manifest.json"
    if manifest_path.is_file():
        manifest = _read_json(manifest_path)
    else:
        manifest = stage_runs_manifest(run_dir)
    if not isinstance(manifest.get("stages"), list):
        raise ValueError(f"{manifest_path}: 'stages' must be a list")
    stages = []
    for no, entry in enumerate(manifest["stages"]):
        if not isinstance(entry, dict) or "id" not in entry:
            raise ValueError(f"{manifest_path}: stages[{no}] has no 'id'")
        stage_dir = run_dir / entry["id"]
        eval_path = stage_dir / "eval.json"
        evaluation = _read_json(eval_path) if eval_path.is_file() else None
        rows, dropped = read_metrics(stage_dir / "metrics.jsonl")
        head = entry.get("metrics") or {}
        selected = head.get("selected_step") if isinstance(head, dict) else None
        stages.append(
            StageData(
                id=entry["id"],
                status=str(entry.get("status", "pending")),
                eval=evaluation,
                metrics=rows,
                dropped_metric_lines=dropped,
                selected_step=int(selected) if isinstance(selected, (int, float)) else None,
            )
        )
    base = manifest.get("base") or {}
    base_name = base.get("model", "base") if isinstance(base, dict) else str(base)
    return RunData(
        run_dir=run_dir,
        name=str(manifest.get("recipe", run_dir.name)),
        base=base_name,
        stages=stages,
        seed=manifest.get("seed"),
        config_hashes={e["id"]: e.get("config_hash") for e in manifest["stages"]},
        input_hashes={e["id"]: e.get("input_hash") for e in manifest["stages"]},
    )


def stagewise_rows(run: RunData) -> tuple[list[str], list[Row]]:
    """Return (metric columns in order of first appearance, rows: base then one per stage)."""
    columns: list[str] = []
    rows = [Row(label=f"base ({run.base})", stage=None, status="done")]
    for stage in run.stages:
        row = Row(label=f"+ {stage.id}", stage=stage.id, status=stage.status)
        rows.append(row)
        if stage.eval is None:
            continue
        path = run.run_dir / stage.id / "eval.json"
        before, after = scores(stage.eval, "input", path), scores(stage.eval, "output", path)
        targets = list(stage.eval.get("targets", []))
        guards = list(stage.eval.get("guardrails", []))
        for metric in targets + guards + sorted(set(after) - set(targets) - set(guards)):
            if metric not in columns:
                columns.append(metric)
            role = "target" if metric in targets else "guardrail" if metric in guards else ""
            above = rows[-2]
            if metric in before and metric not in above.cells:
                above.cells[metric] = Cell(before[metric])
            if metric in after:
                delta = after[metric] - before[metric] if metric in before else None
                row.cells[metric] = Cell(after[metric], delta, role)
    return columns, rows


def fmt_value(value: float) -> str:
    """Return a value with 3 decimals for fractions and 1 for percentages or counts."""
    return f"{value:.3f}" if abs(value) <= 1.5 else f"{value:.1f}"


def fmt_delta(delta: float | None) -> str:
    """Return a signed change with an arrow ('' when there is none)."""
    if delta is None:
        return ""
    arrow = "▲" if delta > 0 else "▼" if delta < 0 else "="
    return f"{delta:+.3f} {arrow}" if abs(delta) <= 1.5 else f"{delta:+.1f} {arrow}"


def comparison(a: RunData, b: RunData) -> tuple[list[str], list[tuple[str, str, dict[str, tuple]]]]:
    """Return (metrics, [(stage A, stage B, {metric: (A out, B out)})]) for stages paired by position."""
    metrics: list[str] = []
    pairs = []
    for i in range(max(len(a.stages), len(b.stages))):
        sa = a.stages[i] if i < len(a.stages) else None
        sb = b.stages[i] if i < len(b.stages) else None
        outs = []
        for s, run in ((sa, a), (sb, b)):
            ev = s.eval if s else None
            outs.append(scores(ev, "output", run.run_dir / s.id / "eval.json") if ev and s else {})
        cells = {}
        for m in [*outs[0], *outs[1]]:
            if m not in metrics:
                metrics.append(m)
            cells[m] = (outs[0].get(m), outs[1].get(m))
        pairs.append((sa.id if sa else "–", sb.id if sb else "–", cells))
    return metrics, pairs
