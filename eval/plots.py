"""Training-dynamics plots of one stage from its ``metrics.jsonl`` (the paper's Figures 3–8 style).

Each numeric key gets a panel: the per-step value as a light line and a 5-step moving average as a dark
line; a dashed line marks the step carried forward when the manifest records it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot is imported)

#: Keys plotted first, in this order; any other numeric key follows alphabetically.
NAMED_KEYS = (
    "reward_mean",
    "pass_rate",
    "heldout_loss",
    "response_length_mean",
    "truncation_ratio",
    "loss",
    "entropy",
    "kl",
    "clip_fraction",
    "lr",
)
SMOOTH = 5


def read_metrics(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Return (rows with a numeric 'step', number of malformed lines dropped) of a metrics.jsonl file."""
    rows, dropped = [], 0
    if not path.is_file():
        return rows, dropped
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), (int, float)):
            rows.append(row)
        else:
            dropped += 1
    return rows, dropped


def plot_keys(rows: list[dict[str, Any]]) -> list[str]:
    """Return the numeric keys to plot: the named ones first, held-out metrics next, then the rest."""
    numeric = {
        k
        for r in rows
        for k, v in r.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }
    named = [k for k in NAMED_KEYS if k in numeric]
    heldout = sorted(k for k in numeric if k.startswith("heldout_") and k not in named)
    rest = sorted(numeric - set(named) - set(heldout))
    return named[:3] + heldout + named[3:] + rest


def _moving_average(values: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_stage(
    rows: list[dict[str, Any]], out_png: Path, title: str, marker_step: int | None = None
) -> Path | None:
    """Write a grid of per-key training curves to ``out_png`` and return it (None when nothing is numeric)."""
    keys = plot_keys(rows)
    if not keys:
        return None
    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.0 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        pts = sorted((r["step"], float(r[key])) for r in rows if isinstance(r.get(key), (int, float)))
        steps = [p[0] for p in pts]
        values = [p[1] for p in pts]
        ax.plot(steps, values, color="tab:blue", alpha=0.35, linewidth=1)
        if len(values) >= SMOOTH:
            ax.plot(steps, _moving_average(values, SMOOTH), color="tab:blue", linewidth=2)
        elif len(values) == 1:
            ax.scatter(steps, values, color="tab:blue")
        if marker_step is not None:
            ax.axvline(marker_step, color="gray", linestyle="--", linewidth=1)
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
    return out_png
