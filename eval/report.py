"""The stagewise report of a run: the paper's Table 2 form, training plots, and a two-run comparison.

``write_report(run_dir, compare=None)`` reads ``runs/<name>/manifest.json`` and each stage's ``eval.json``
and ``metrics.jsonl`` and writes ``RUN_DIR/report/``: ``stagewise.md``, ``index.html`` and one PNG of
training curves per stage. ``print_stagewise(run_dir, console)`` prints the same table with rich.

Table form (paper §5.2): one row per checkpoint in pipeline order, the base first. A stage's row carries
its targets and guardrails measured on its output checkpoint, each with the change against the row above,
read from the same stage's ``eval.json`` (output minus input, both measured by that stage). The row above
also carries, in the stage's columns, the input values that stage measured. Every metric is taken as
higher-is-better (accuracies, pass rates, rubric pass rates).

The rows and cells themselves are computed in ``eval.stagewise`` (re-exported here); this module and
``eval.html`` only render them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.html import render_html
from eval.plots import plot_stage
from eval.registry import column_for
from eval.stagewise import (
    Cell,
    Row,
    RunData,
    StageData,
    comparison,
    fmt_delta,
    fmt_value,
    load_run,
    scores,
    stagewise_rows,
)

__all__ = [
    "Cell",
    "Row",
    "RunData",
    "StageData",
    "comparison",
    "comparison_markdown",
    "fmt_delta",
    "fmt_value",
    "load_run",
    "markdown_table",
    "print_stagewise",
    "scores",
    "stagewise_rows",
    "write_plots",
    "write_report",
]


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
