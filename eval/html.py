"""The HTML page of the stagewise report: the coloured table, the comparison and linked training plots."""

from __future__ import annotations

import html
import os
from pathlib import Path

from eval.registry import column_for
from eval.stagewise import Row, RunData, comparison, fmt_delta, fmt_value, stagewise_rows

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child, td:nth-child(2) { text-align: left; }
td.target { background: #e8f0fe; font-weight: 600; }
td.guardrail { background: #f6f6f6; font-style: italic; }
span.up { color: #137333; } span.down { color: #c5221f; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
"""


def _delta_span(delta: float | None) -> str:
    if delta is None:
        return ""
    cls = "up" if delta > 0 else "down" if delta < 0 else ""
    return f' <span class="{cls}">({html.escape(fmt_delta(delta))})</span>'


def table_html(columns: list[str], rows: list[Row]) -> str:
    """Return the stagewise table as HTML (target cells shaded, rises green, drops red)."""
    head = "".join(f"<th>{html.escape(column_for(c))}</th>" for c in columns)
    out = [f"<table><tr><th>checkpoint</th><th>status</th>{head}</tr>"]
    for r in rows:
        tds = []
        for c in columns:
            cell = r.cells.get(c)
            if cell is None:
                tds.append("<td>–</td>")
                continue
            cls = f' class="{cell.role}"' if cell.role else ""
            tds.append(f"<td{cls}>{fmt_value(cell.value)}{_delta_span(cell.delta)}</td>")
        out.append(f"<tr><td>{html.escape(r.label)}</td><td>{html.escape(r.status)}</td>{''.join(tds)}</tr>")
    out.append("</table>")
    return "\n".join(out)


def _comparison_html(a: RunData, b: RunData) -> str:
    metrics, pairs = comparison(a, b)
    head = "".join(f"<th>{html.escape(column_for(m))}</th>" for m in metrics)
    out = [f"<table><tr><th>{html.escape(a.name)}</th><th>{html.escape(b.name)}</th>{head}</tr>"]
    for ida, idb, cells in pairs:
        tds = []
        for m in metrics:
            va, vb = cells.get(m, (None, None))
            if va is None and vb is None:
                tds.append("<td>–</td>")
                continue
            text = f"{fmt_value(va) if va is not None else '–'} / {fmt_value(vb) if vb is not None else '–'}"
            delta = _delta_span(vb - va) if va is not None and vb is not None else ""
            tds.append(f"<td>{text}{delta}</td>")
        out.append(f"<tr><td>{html.escape(ida)}</td><td>{html.escape(idb)}</td>{''.join(tds)}</tr>")
    out.append("</table>")
    return "\n".join(out)


def _plots_html(plots: dict[str, Path], base: Path) -> str:
    parts = []
    for sid, png in plots.items():
        rel = html.escape(os.path.relpath(png, base).replace(os.sep, "/"))
        parts.append(
            f'<h3>{html.escape(sid)}</h3><a href="{rel}"><img src="{rel}" alt="{html.escape(sid)}"></a>'
        )
    return "\n".join(parts) or "<p>No metrics.jsonl in any stage.</p>"


def render_html(
    run: RunData,
    columns: list[str],
    rows: list[Row],
    plots: dict[str, Path],
    other: RunData | None,
    other_plots: dict[str, Path],
    out_dir: Path,
) -> str:
    """Return the report page; image paths are relative to ``out_dir`` so the folder can be moved."""
    body = [
        f"<h1>Stagewise report: {html.escape(run.name)}</h1>",
        table_html(columns, rows),
        "<p>Shaded bold: the stage's targets; italic: its guardrails; (Δ) against the row above.</p>",
        "<h2>Training dynamics</h2>",
        _plots_html(plots, out_dir),
    ]
    if other is not None:
        o_cols, o_rows = stagewise_rows(other)
        body += [
            f"<h2>Comparison: {html.escape(run.name)} / {html.escape(other.name)}</h2>",
            "<p>Per pipeline position: each run's stage output; (Δ) second − first.</p>",
            _comparison_html(run, other),
            f"<h2>{html.escape(other.name)}</h2>",
            table_html(o_cols, o_rows),
            _plots_html(other_plots, out_dir),
        ]
    head = f'<meta charset="utf-8"><title>{html.escape(run.name)}</title><style>{_CSS}</style>'
    return f"<!doctype html>\n<html><head>{head}</head><body>\n" + "\n".join(body) + "\n</body></html>\n"
