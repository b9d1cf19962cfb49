"""Table 13 of RA §3.8: each preference set's size before and after the validity filter, and the reward
model's average score and the average length of its chosen and rejected responses.

``build_table13({dataset: (original, valid_pairs)}, score=..., count_tokens=...)`` returns one
:class:`Table13Row` per dataset; ``write_table13(rows, out_dir)`` writes ``table13.md`` (our numbers, then
the paper's, labelled as such) and ``table13.json``. ``score`` is the reward-model client's
``score(prompts: list[list[dict]], responses: list[str]) -> list[float]``, called in batches on the
chosen and then the rejected responses with their prompt. Without a scorer, or when scoring is aborted
(the scorer raised, or answered a batch with the wrong number of scores), the score columns read "–" in
the Markdown and ``null`` in the JSON, never 0; a non-finite score leaves that pair out of both
averages (``unscored``), so the two columns always average the same pairs. Tokens likewise need a
``count_tokens(text) -> int`` (e.g. :func:`tokenizer_counter` over the policy's tokenizer).
Bradley–Terry scores have no shared zero across datasets: compare the two score columns within a row.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from data_prep.io import atomic_write_text
from data_prep.preference_sources import PreferencePair

Scorer = Callable[[list[list[dict[str, Any]]], list[str]], list[float]]
TokenCounter = Callable[[str], int]

TITLES = {"arena": "Arena Human Preference", "helpsteer3": "HelpSteer3", "hh_rlhf": "H-RLHF"}
#: The paper's Table 13 (Skywork-Reward-V2-Qwen3-8B scores), copied for comparison, never computed here.
PAPER_TABLE13: dict[str, dict[str, float | int]] = {
    "arena": {"original": 84402, "valid": 53502, "avg_chosen_score": 17.06, "avg_rejected_score": 12.08,
              "avg_chosen_tokens": 1055.1, "avg_rejected_tokens": 623.7},
    "helpsteer3": {"original": 38459, "valid": 29506, "avg_chosen_score": 9.60, "avg_rejected_score": 2.95,
                   "avg_chosen_tokens": 439.1, "avg_rejected_tokens": 373.2},
    "hh_rlhf": {"original": 112052, "valid": 75815, "avg_chosen_score": -4.23, "avg_rejected_score": -8.41,
                "avg_chosen_tokens": 78.8, "avg_rejected_tokens": 72.9},
}  # fmt: skip
COLUMNS = ("Dataset", "Original #", "Valid #", "Avg. Chosen Score", "Avg. Rejected Score",
           "Avg. Chosen Tokens", "Avg. Rejected Tokens")  # fmt: skip


class Table13Row(BaseModel):
    """One dataset's row; a None average means "not measured" (no scorer / counter, or aborted)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str
    original: int
    valid: int
    avg_chosen_score: float | None = None
    avg_rejected_score: float | None = None
    avg_chosen_tokens: float | None = None
    avg_rejected_tokens: float | None = None
    scored: int = 0
    unscored: int = 0
    score_status: str = "not scored"


def tokenizer_counter(tokenizer: Any) -> TokenCounter:
    """Count a response's tokens with a Hugging Face tokenizer (no special tokens, no chat template)."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _score_side(score: Scorer, pairs: Sequence[PreferencePair], side: str, batch_size: int) -> list[float]:
    out: list[float] = []
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start : start + batch_size]
        got = list(score([p.prompt for p in batch], [getattr(p, side) for p in batch]))
        if len(got) != len(batch):
            raise ValueError(f"{len(got)} scores for a batch of {len(batch)} {side} responses")
        out.extend(got)
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def table13_row(
    dataset: str,
    original: int,
    pairs: Sequence[PreferencePair],
    *,
    score: Scorer | None = None,
    count_tokens: TokenCounter | None = None,
    batch_size: int = 64,
) -> Table13Row:
    """One dataset's row of Table 13 from its original count and its valid pairs."""
    row = Table13Row(dataset=dataset, original=original, valid=len(pairs))
    if count_tokens is not None and pairs:
        row.avg_chosen_tokens = _mean([count_tokens(p.chosen) for p in pairs])
        row.avg_rejected_tokens = _mean([count_tokens(p.rejected) for p in pairs])
    if score is None or not pairs:
        return row
    try:
        chosen = _score_side(score, pairs, "chosen", batch_size)
        rejected = _score_side(score, pairs, "rejected", batch_size)
    except Exception as exc:  # an infrastructure failure: the averages are unknown, not 0
        row.score_status = f"aborted: {type(exc).__name__}: {exc}"
        return row
    both = [(c, r) for c, r in zip(chosen, rejected, strict=True) if _finite(c) and _finite(r)]
    row.scored, row.unscored = len(both), len(pairs) - len(both)
    row.avg_chosen_score = _mean([float(c) for c, _ in both])
    row.avg_rejected_score = _mean([float(r) for _, r in both])
    row.score_status = "scored" if both else "aborted: no finite score"
    return row


def build_table13(
    datasets: Mapping[str, tuple[int, Sequence[PreferencePair]]],
    *,
    score: Scorer | None = None,
    count_tokens: TokenCounter | None = None,
    batch_size: int = 64,
) -> list[Table13Row]:
    """Rows of Table 13, one per ``dataset -> (original, valid pairs)``, in the order given."""
    return [
        table13_row(name, original, pairs, score=score, count_tokens=count_tokens, batch_size=batch_size)
        for name, (original, pairs) in datasets.items()
    ]


def _cell(value: float | int | None, digits: int) -> str:
    if value is None:
        return "–"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.{digits}f}"


def _markdown_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [TITLES.get(r["dataset"], r["dataset"]), _cell(r["original"], 0), _cell(r["valid"], 0)]
        cells += [_cell(r[k], 2) for k in ("avg_chosen_score", "avg_rejected_score")]
        cells += [_cell(r[k], 1) for k in ("avg_chosen_tokens", "avg_rejected_tokens")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_markdown(rows: Sequence[Table13Row], drops: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """``table13.md``: our table, the drops per reason when given, then the paper's table."""
    ours = [r.model_dump() for r in rows]
    paper = [{"dataset": name, **PAPER_TABLE13[name]} for name in TITLES if name in PAPER_TABLE13]
    lines = ["# Table 13: RLHF prompt datasets", "", "## Ours (this run)", "", *_markdown_table(ours), ""]
    lines += [f"- {TITLES.get(r.dataset, r.dataset)}: reward-model scores {r.score_status}" for r in rows]
    if drops:
        reasons = list(dict.fromkeys(reason for d in drops.values() for reason in d))  # first-seen order
        lines += ["", "### Drops per reason", "", "| Dataset | " + " | ".join(reasons) + " |"]
        lines.append("|" + "---|" * (len(reasons) + 1))
        for name, d in drops.items():
            lines.append(
                f"| {TITLES.get(name, name)} | " + " | ".join(str(d.get(x, 0)) for x in reasons) + " |"
            )
    lines += [
        "",
        "## Paper (Rufus-Air §3.8, Table 13; copied, not computed here)",
        "",
        *_markdown_table(paper),
    ]
    lines += [
        "",
        "Bradley–Terry scores have no shared zero across datasets: compare scores within a row.",
        "",
    ]
    return "\n".join(lines)


def write_table13(
    rows: Sequence[Table13Row], out_dir: str | Path, drops: Mapping[str, Mapping[str, int]] | None = None
) -> tuple[Path, Path]:
    """Write ``table13.md`` and ``table13.json`` into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "table13.md", out / "table13.json"
    atomic_write_text(md, render_markdown(rows, drops))
    payload = {"ours": [r.model_dump() for r in rows], "drops": dict(drops or {}), "paper": PAPER_TABLE13}
    atomic_write_text(js, json.dumps(payload, indent=2) + "\n")
    return md, js
