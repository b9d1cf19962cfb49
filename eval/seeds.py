"""The seed-spread report: how far each stage moved its metrics across N runs of one recipe (N seeds).

``write_seed_report(run_dirs, out)`` reads each run with ``eval.stagewise.load_run`` and writes ``out``
(markdown) and a PNG beside it, and, for agent targets whose evaluations counted tools, RA Table 19's
tool usage pooled over the seeds (:mod:`eval.seed_tool_usage`). One row per stage (pipeline order) and
per target or guardrail metric:
the mean and min–max over seeds of the input score (the checkpoint the stage started from), the output
score and the change (output − input), as percentages. A run whose stage has no ``eval.json`` (or lacks
the metric) is listed as missing and left out of that row's statistics; the row shows how many seeds it
rests on. ``stage=`` (``rufus seeds --stage ID``) compares one stage alone, so a ``rufus run`` chain and
``rufus stage`` folders of that stage (e.g. RL seeds from one SFT checkpoint) make one report; the footer says
how many distinct input checkpoints each stage started from.

The verdict of a target (a one-sided t-test of the per-seed changes, p < 0.05) is
:class:`eval.seed_stats.SeedRow`'s; the p-value is a column of the table. (Until the 5-seed measurement the
rule was "every seed rises and mean change > max − min", which approximates this test at 3 seeds but grows
stricter with every seed added, since the range widens with n.) Targets scored per environment type get
tables of where their change came from (:mod:`eval.seed_breakdown`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from eval.registry import RAW_METRICS
from eval.seed_breakdown import breakdown_markdown
from eval.seed_stats import ALPHA, SeedRow, fmt_stat
from eval.seed_tool_usage import tool_usage_markdown
from eval.stagewise import RunData, load_run, scores


def only_stage(run: RunData, stage: str) -> RunData:
    """Return ``run`` cut to its stage ``stage`` and named after it; ValueError names the run without it."""
    kept = [s for s in run.stages if s.id == stage]
    if not kept:
        raise ValueError(f"{run.run_dir}: no stage '{stage}' (it has {[s.id for s in run.stages]})")
    return replace(
        run,
        name=f"stage {stage}",
        stages=kept,
        config_hashes={stage: run.config_hashes.get(stage)},
        input_hashes={stage: run.input_hashes.get(stage)},
    )


def load_runs(run_dirs: list[Path], stage: str | None = None) -> list[RunData]:
    """Return the loaded runs; raise ValueError naming the directory whose recipe or stages differ.

    ``stage``: compare that one stage only, so the runs may come from different recipes or commands (a
    ``rufus run`` chain beside ``rufus stage`` folders); its config must still be the same in every run.
    """
    if len(run_dirs) < 2:
        raise ValueError(f"a seed report needs at least 2 run directories, got {len(run_dirs)}")
    runs = [load_run(Path(d)) for d in run_dirs]
    if stage is not None:
        runs = [only_stage(run, stage) for run in runs]
    first = runs[0]
    for run in runs[1:]:
        if run.name != first.name:
            raise ValueError(
                f"{run.run_dir}: recipe '{run.name}' differs from '{first.name}' in {first.run_dir}"
            )
        ids, first_ids = [s.id for s in run.stages], [s.id for s in first.stages]
        if ids != first_ids:
            raise ValueError(f"{run.run_dir}: stages {ids} differ from {first_ids} in {first.run_dir}")
        for sid, digest in run.config_hashes.items():
            theirs = first.config_hashes.get(sid)
            if digest and theirs and digest != theirs:
                raise ValueError(
                    f"{run.run_dir}: stage {sid} ran with another config than in {first.run_dir} "
                    "(config hashes differ); a seed report compares one configuration"
                )
    seen: dict[int, Path] = {}
    for run in runs:
        if run.seed is not None and run.seed in seen:
            raise ValueError(
                f"{run.run_dir}: seed {run.seed} again (also {seen[run.seed]}); "
                "a seed report needs distinct seeds"
            )
        if run.seed is not None:
            seen[run.seed] = run.run_dir
    return runs


def rows_of(runs: list[RunData]) -> list[SeedRow]:
    """Return one SeedRow per stage and target/guardrail metric of loaded runs, in pipeline order."""
    rows: list[SeedRow] = []
    for i, stage in enumerate(runs[0].stages):
        evals = [run.stages[i].eval for run in runs]
        roles: dict[str, str] = {}
        for ev in evals:
            for m in (ev or {}).get("targets", []):
                roles.setdefault(m, "target")
        for ev in evals:
            for m in (ev or {}).get("guardrails", []):
                roles.setdefault(m, "guardrail")
        sides = []
        for run, ev in zip(runs, evals, strict=True):
            path = run.run_dir / stage.id / "eval.json"
            sides.append((scores(ev, "input", path), scores(ev, "output", path)) if ev else ({}, {}))
        for metric, role in roles.items():
            rows.append(
                SeedRow(
                    stage.id,
                    metric,
                    role,
                    [s[0].get(metric) for s in sides],
                    [s[1].get(metric) for s in sides],
                )
            )
    return rows


def seed_rows(run_dirs: list[Path]) -> list[SeedRow]:
    """Return one SeedRow per stage and target/guardrail metric, in pipeline order."""
    return rows_of(load_runs(run_dirs))


def missing(rows: list[SeedRow], run_dirs: list[Path]) -> list[str]:
    """Return 'stage/metric: run dirs' for every row some seed did not measure."""
    out = []
    for r in rows:
        gone = [Path(d).name for d, c in zip(run_dirs, r.changes, strict=True) if c is None]
        if gone:
            out.append(f"{r.stage}/{r.metric}: {', '.join(gone)}")
    return out


def row_cells(row: SeedRow, n_runs: int) -> list[str]:
    """Return the table cells of a row: stage, metric, role, input, output, change, p, verdict."""
    verdict = row.verdict if row.seeds == n_runs else f"{row.verdict} ({row.seeds}/{n_runs} seeds)"
    raw = row.metric in RAW_METRICS
    stats = (row.inputs, row.outputs, row.changes)
    cells = [fmt_stat(v, signed=k == 2, raw=raw) for k, v in enumerate(stats)]
    p = row.p_value if row.role == "target" else None
    return [row.stage, row.metric, row.role, *cells, "–" if p is None else f"{p:.3f}", verdict]


HEADERS = [
    "stage",
    "metric",
    "role",
    "input (mean, min–max)",
    "output (mean, min–max)",
    "change (mean, min–max)",
    "p (one-sided t)",
    "verdict",
]


def inputs_line(runs: list[RunData]) -> str | None:
    """Return how many distinct input checkpoints each stage started from (None when none was recorded)."""
    parts = []
    for stage in runs[0].stages:
        hashes = [run.input_hashes.get(stage.id) for run in runs]
        known = {h for h in hashes if h}
        if known:
            parts.append(f"{stage.id} {len(known)} ({sum(map(bool, hashes))} of {len(runs)} recorded)")
    return "Distinct input checkpoints per stage over the seeds: " + ", ".join(parts) + "." if parts else None


def seed_markdown(rows: list[SeedRow], run_dirs: list[Path], runs: list[RunData] | None = None) -> str:
    """Return the seed-spread table as markdown with a footer naming the runs, their input checkpoints (when
    ``runs`` is given) and any missing evals."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row_cells(r, len(run_dirs))) + " |" for r in rows]
    names = ", ".join(str(d) for d in run_dirs)
    lines += [
        "",
        f"{len(run_dirs)} seeds (run dirs: {names}); values are percentages (raw scores for "
        f"{', '.join(sorted(RAW_METRICS))}), mean over seeds with min – max "
        'in brackets; change = output − input of the stage. Verdict "rise": the per-seed changes are above '
        f"zero by a one-sided one-sample t-test at the {ALPHA:.0%} level (p in its column).",
    ]
    inputs = inputs_line(runs) if runs else None
    if inputs:
        lines.append(inputs)
    gone = missing(rows, run_dirs)
    if gone:
        lines.append(f"Not measured (left out of the statistics): {'; '.join(gone)}.")
    return "\n".join(lines) + "\n"


def plot_changes(rows: list[SeedRow], png: Path) -> Path:
    """Write a PNG of per-seed change per target metric (dots), its mean (bar) and a zero line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = [r for r in rows if r.role == "target" and r.metric not in RAW_METRICS]  # points, not raw
    fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(targets) + 1), 4))
    for x, r in enumerate(targets):
        changes = [100 * c for c in r.changes if c is not None]
        if changes:
            ax.bar(x, sum(changes) / len(changes), width=0.6, color="#9ecae1", zorder=1)
            ax.scatter([x] * len(changes), changes, color="#08519c", s=18, zorder=2)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(targets)), [f"{r.stage}\n{r.metric}" for r in targets], fontsize=7)
    ax.set_ylabel("change (output − input), percentage points")
    ax.set_title("Per-seed change of the targets (bar: mean)", fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


def write_seed_report(run_dirs: list[Path], out: Path, runs: list[RunData] | None = None) -> Path:
    """Write the markdown report to ``out`` and its plot to ``out`` with a .png suffix; return ``out``.

    ``runs``: the already loaded runs of ``run_dirs`` (read again when not given).
    """
    run_dirs = [Path(d) for d in run_dirs]
    runs = runs or load_runs(run_dirs)
    rows = rows_of(runs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = plot_changes(rows, out.with_suffix(".png"))
    text = f"# Seed spread: {runs[0].name}\n\n" + seed_markdown(rows, run_dirs, runs)
    text += f"\n![per-seed change of the targets]({png.name})\n"
    targets: dict[str, list[str]] = {}
    for row in rows:
        if row.role == "target":
            targets.setdefault(row.stage, []).append(row.metric)
    for extra in (breakdown_markdown(runs, targets), tool_usage_markdown(runs, targets)):
        if extra:
            text += "\n" + extra
    out.write_text(text, encoding="utf-8")
    return out
