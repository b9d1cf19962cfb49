"""Training-dynamics plots of one stage from its ``metrics.jsonl`` (the paper's Figures 3–8 style).

What a reader looks for comes first (reward, pass rate, response length, truncation, entropy, KL, grad
norm, zero-signal groups, aborted samples, then held-out scores); every other numeric key follows
alphabetically. Each key that moved gets a panel: the per-step value as a light line and a 5-step moving
average as a dark line; a dashed line marks the step carried forward when the manifest records it. Keys
that never moved (one value at every step) get no panel: they are folded into one line of text under the
grid ("constant: lr=0.0002, phase=0, ...").
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot is imported)

#: Keys plotted first, in this order (held-out metrics after them); any other key follows alphabetically.
NAMED_KEYS = (
    "reward_mean",
    "pass_rate",
    "response_length_mean",
    "truncation_ratio",
    "entropy",
    "kl",
    "grad_norm",
    "zero_signal_group_fraction",
    "aborted_samples",
    "loss",
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


def _values(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in rows:
        for k, v in r.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out.setdefault(k, []).append(float(v))
    return out


def plot_keys(rows: list[dict[str, Any]]) -> list[str]:
    """Return every numeric key in reading order: the named ones, held-out metrics, then the rest."""
    numeric = set(_values(rows))
    named = [k for k in NAMED_KEYS if k in numeric]
    heldout = sorted(k for k in numeric if k.startswith("heldout_") and k not in named)
    rest = sorted(numeric - set(named) - set(heldout))
    return named + heldout + rest


def split_constant(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, float]]:
    """Return (keys that moved, in reading order; ``{key: value}`` of keys with one value at every step).

    A key seen at a single step counts as moved (one point is still a reading, not a flat series).
    """
    values = _values(rows)
    moved, constant = [], {}
    for key in plot_keys(rows):
        vals = values[key]
        if len(vals) > 1 and max(vals) == min(vals):
            constant[key] = vals[0]
        else:
            moved.append(key)
    return moved, constant


def _fmt(value: float) -> str:
    return str(int(value)) if value.is_integer() else f"{value:.4g}"


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
    """Write a grid of per-key training curves to ``out_png`` and return it (None when nothing is numeric).

    Keys that never moved are folded into one line of text under the grid instead of a flat panel each.
    """
    keys, constant = split_constant(rows)
    if not keys and not constant:
        return None
    ncols = max(1, min(3, len(keys)))
    nrows = max(1, math.ceil(len(keys) / ncols))
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
    if constant:
        folded = ", ".join(f"{k}={_fmt(v)}" for k, v in constant.items())
        fig.text(0.01, 0.005, "\n".join(textwrap.wrap(f"constant: {folded}", 40 * ncols)), fontsize=8,
                 va="bottom", ha="left", color="dimgray")  # fmt: skip
        lines = 1 + len(folded) // (40 * ncols)
        fig.tight_layout(rect=(0, min(0.4, 0.1 * lines / nrows + 0.02), 1, 0.98))
    else:
        fig.tight_layout(rect=(0, 0, 1, 0.98))
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
    return out_png
