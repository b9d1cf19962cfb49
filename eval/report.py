"""The stagewise report of a run: the paper's Table 2 form, training plots, and a two-run comparison.

``write_report(run_dir, compare=None)`` reads ``runs/<name>/manifest.json`` and each stage's ``eval.json``
and ``metrics.jsonl`` and writes ``RUN_DIR/report/``: ``stagewise.md``, ``index.html`` and one PNG of
training curves per stage. ``print_stagewise(run_dir, console)`` prints the same table with rich.

Table form (paper §5.2): one row per checkpoint in pipeline order, the base first. A stage's row carries
its targets and guardrails measured on its output checkpoint, each with the change against the row above,
read from the same stage's ``eval.json`` (output minus input, both measured by that stage). The row above
also carries, in the stage's columns, the input values that stage measured. Every metric is taken as
higher-is-better (accuracies, pass rates, rubric pass rates).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.plots import plot_stage, read_metrics
from eval.registry import column_for


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


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc


def scores(evaluation: dict[str, Any], side: str, path: Path) -> dict[str, float]:
    raw = evaluation.get(side, {})
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: '{side}' must map metric names to numbers")
    out = {}
    for key, value in raw.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def load_run(run_dir: Path) -> RunData:
    """Return the manifest and per-stage eval/metrics of a run directory (errors name the file)."""
    run_dir = Path(run_dir)
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} not found: is {run_dir} a run directory (runs/<name>)?")
    manifest = _read_json(manifest_path)
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
        run_dir=run_dir, name=str(manifest.get("recipe", run_dir.name)), base=base_name, stages=stages
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


def _md_cell(cell: Cell | None) -> str:
    if cell is None:
        return "–"
    text = fmt_value(cell.value)
    if cell.delta is not None:
        text += f" ({fmt_delta(cell.delta)})"
    return f"**{text}**" if cell.role == "target" else f"_{text}_" if cell.role == "guardrail" else text


def markdown_table(columns: list[str], rows: list[Row]) -> str:
    """Return the stagewise table as GitHub markdown (targets bold, guardrails italic)."""
    head = "| checkpoint | status | " + " | ".join(column_for(c) for c in columns) + " |"
    sep = "|" + "---|" * (len(columns) + 2)
    body = [
        f"| {r.label} | {r.status} | " + " | ".join(_md_cell(r.cells.get(c)) for c in columns) + " |"
        for r in rows
    ]
    return "\n".join([head, sep, *body])


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


def comparison_markdown(a: RunData, b: RunData) -> str:
    """Return the two-run comparison as markdown: per pipeline position, A's and B's output and B − A."""
    metrics, pairs = comparison(a, b)
    lines = [
        f"| position | {a.name} | {b.name} | " + " | ".join(column_for(m) for m in metrics) + " |",
        "|" + "---|" * (len(metrics) + 3),
    ]
    for i, (ida, idb, cells) in enumerate(pairs):
        parts = []
        for m in metrics:
            va, vb = cells.get(m, (None, None))
            if va is None and vb is None:
                parts.append("–")
                continue
            text = f"{fmt_value(va) if va is not None else '–'} / {fmt_value(vb) if vb is not None else '–'}"
            if va is not None and vb is not None:
                text += f" ({fmt_delta(vb - va)})"
            parts.append(text)
        lines.append(f"| {i} | {ida} | {idb} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def write_plots(run: RunData, out_dir: Path) -> dict[str, Path]:
    """Write one training-dynamics PNG per stage that has metrics and return {stage id: path}."""
    plots = {}
    for stage in run.stages:
        png = plot_stage(
            stage.metrics, out_dir / f"{stage.id}.png", f"{run.name}: {stage.id}", stage.selected_step
        )
        if png is not None:
            plots[stage.id] = png
    return plots


def write_report(run_dir: Path, compare: Path | None = None) -> Path:
    """Write RUN_DIR/report/ (stagewise.md, index.html, plots/*.png) and return the report folder."""
    from eval.html import render_html

    run = load_run(run_dir)
    other = load_run(compare) if compare is not None else None
    out = Path(run_dir) / "report"
    plots_dir = out / "plots"
    plots = write_plots(run, plots_dir)
    other_plots = write_plots(other, plots_dir / "compare") if other else {}
    columns, rows = stagewise_rows(run)
    md = [f"# Stagewise report: {run.name}", "", markdown_table(columns, rows), ""]
    md.append("Bold: the stage's targets; italic: its guardrails; (Δ) against the row above.")
    dropped = {s.id: s.dropped_metric_lines for s in run.stages if s.dropped_metric_lines}
    if dropped:
        md.append(f"Malformed metrics.jsonl lines dropped: {dropped}.")
    md += ["", "## Training dynamics", ""]
    md += [f"- {sid}: [plots/{p.name}](plots/{p.name})" for sid, p in plots.items()] or ["(no metrics.jsonl)"]
    if other:
        o_cols, o_rows = stagewise_rows(other)
        md += ["", f"## Comparison with {other.name}", "", comparison_markdown(run, other), ""]
        md += [f"### {other.name}", "", markdown_table(o_cols, o_rows)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "stagewise.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    html = render_html(run, columns, rows, plots, other, other_plots, out)
    (out / "index.html").write_text(html, encoding="utf-8")
    return out


def print_stagewise(run_dir: Path, console: Any = None) -> None:
    """Print the stagewise table of a run with rich (green rises, red drops; targets bold)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    run = load_run(run_dir)
    columns, rows = stagewise_rows(run)
    table = Table(title=f"Stagewise: {run.name}")
    table.add_column("checkpoint")
    table.add_column("status")
    for c in columns:
        table.add_column(column_for(c), justify="right")
    for r in rows:
        cells = []
        for c in columns:
            cell = r.cells.get(c)
            if cell is None:
                cells.append("–")
                continue
            colour = "green" if (cell.delta or 0) > 0 else "red" if (cell.delta or 0) < 0 else "default"
            style = "bold " if cell.role == "target" else "italic " if cell.role == "guardrail" else ""
            delta = f" [{colour}]{fmt_delta(cell.delta)}[/{colour}]" if cell.delta is not None else ""
            cells.append(f"[{style}default]{fmt_value(cell.value)}[/]{delta}")
        table.add_row(r.label, r.status, *cells)
    console.print(table)
