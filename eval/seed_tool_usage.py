"""The seed report's tool-usage tables: RA Table 19's columns for agent targets, pooled over seeds.

The embedded held-out evaluation writes, per agent metric, a ``tool_usage`` block of means per scored
trajectory (:func:`infra.agents.tool_usage.usage_block`) into
``<stage>/logs/eval_details_<input|output>.json``. Here the blocks of every seed are pooled the way App. E
pools evaluation rounds: each mean weighted by its trajectories (``iters_correct`` by the correct ones,
``iters_wrong`` by the others). One table per stage and target metric, a row per checkpoint (the stage's
input and output); the seeds column says how many runs had the block.
"""

from __future__ import annotations

from typing import Any

from eval.stagewise import RunData, eval_details

ROLES = ("input", "output")


def _block(run: RunData, stage: str, metric: str, role: str) -> dict[str, Any] | None:
    entry = eval_details(run.run_dir, stage, metric, role)
    block = entry.get("tool_usage") if entry else None
    return block if isinstance(block, dict) and block.get("trajectories") else None


def _weighted(pairs: list[tuple[float | None, int]]) -> float | None:
    kept = [(v, n) for v, n in pairs if v is not None and n > 0]
    total = sum(n for _, n in kept)
    return sum(v * n for v, n in kept) / total if total else None


def pool(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Pool ``tool_usage`` blocks of several seeds into one (means weighted by trajectories)."""
    n = [int(b["trajectories"]) for b in blocks]
    ok = [int(b["correct"]) for b in blocks]
    names = sorted({name for b in blocks for name in b["calls"]})
    return {
        "trajectories": sum(n),
        "correct": sum(ok),
        "iters": _weighted([(b["iters"], k) for b, k in zip(blocks, n, strict=True)]),
        "calls": {
            name: _weighted([(b["calls"].get(name, 0.0), k) for b, k in zip(blocks, n, strict=True)])
            for name in names
        },
        "iters_correct": _weighted([(b["iters_correct"], c) for b, c in zip(blocks, ok, strict=True)]),
        "iters_wrong": _weighted([(b["iters_wrong"], k - c) for b, k, c in zip(blocks, n, ok, strict=True)]),
    }


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def tool_usage_markdown(runs: list[RunData], targets: dict[str, list[str]]) -> str | None:
    """Return the tool-usage tables of ``targets`` ({stage: [metric]}); None when no run counted tools."""
    tables = []
    for stage, metrics in targets.items():
        for metric in metrics:
            pooled = {}
            for role in ROLES:
                blocks = [b for run in runs if (b := _block(run, stage, metric, role)) is not None]
                if blocks:
                    pooled[role] = (len(blocks), pool(blocks))
            if not pooled:
                continue
            names = sorted({name for _, p in pooled.values() for name in p["calls"]})
            head = ["checkpoint", "seeds", "trajectories", "iters", *names, "iters correct / wrong"]
            lines = [f"{stage} · `{metric}`", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for role, (seeds, p) in pooled.items():
                cells = [role, f"{seeds} of {len(runs)}", str(p["trajectories"]), _cell(p["iters"])]
                cells += [_cell(p["calls"].get(name, 0.0)) for name in names]
                cells.append(f"{_cell(p['iters_correct'])} / {_cell(p['iters_wrong'])}")
                lines.append("| " + " | ".join(cells) + " |")
            tables.append("\n".join(lines))
    if not tables:
        return None
    intro = (
        "## Tool usage per trajectory (RA Table 19's columns)\n\n"
        "Means per scored held-out episode, pooled over the seeds (each seed weighted by its episodes): "
        "iters = model turns with at least one tool call; one column per tool, every call counted (refused "
        "and failed ones too); iters split by the episode's verdict (correct = the full reward)."
    )
    return intro + "\n\n" + "\n\n".join(tables) + "\n"
