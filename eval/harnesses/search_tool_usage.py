"""RA Table 19: mean tool usage per trajectory of a search benchmark, from the harness's per-item records.

Use::

    python -m eval.harnesses.search_tool_usage --bench browsecomp run1/result.items.jsonl [run2/...]

pools the records of one or more runs (App. E pools 2–5 evaluation rounds per benchmark) and prints the
markdown row; :mod:`eval.harnesses.search_bench` writes the same block into its ``result.json``
(``tool_usage``) and the table beside it (``result.tool_usage.md``). Over the scored trajectories (an item
left unscored by infrastructure failures is excluded and counted), per trajectory:

* ``iters``: assistant turns with at least one tool call (Table 19's "Iters"; a context manager's
  scratchpad or summary reply calls no tool and is not one);
* ``search`` / ``scrape`` / ``python``: calls of ``web_search`` / ``web_scrape`` / ``python``, each call the
  model made, refused or malformed ones included (a malformed call keeps its name when it has one);
  ``other_tools``: calls of any other name;
* ``iters_correct`` / ``iters_wrong``: ``iters`` split by the judge's pass@1 verdict (``correct`` 1 or 0;
  partial credit is wrong), None when no trajectory has that verdict (never 0).

A malformed record (no transcript, a bad entry, a ``correct`` that is not 0, 1 or null) is dropped and
counted with the first reason. Transcripts are counted by :func:`infra.agents.tool_usage.tool_call_counts`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from infra.agents.tool_usage import mean_or_none, tool_call_counts

TOOLS = {"web_search": "search", "web_scrape": "scrape", "python": "python"}
COUNTS = ("iters", "search", "scrape", "python", "other_tools")
DEFINITION = (
    "RA Table 19: means per scored trajectory; iters = assistant turns with >= 1 tool call; search/scrape/"
    "python = calls of web_search/web_scrape/python; iters split by the judge's pass@1 verdict"
)


def trajectory_counts(transcript: list[dict[str, Any]]) -> dict[str, int]:
    """Return one transcript's ``iters`` and tool calls by kind; ValueError on a malformed entry."""
    iters, calls = tool_call_counts(transcript)
    counts = dict.fromkeys(COUNTS, 0)
    counts["iters"] = iters
    for name, n in calls.items():
        counts[TOOLS.get(name, "other_tools")] += n
    return counts


def _verdict(record: Any) -> tuple[float | None, list[dict[str, Any]]]:
    if not isinstance(record, dict):
        raise ValueError("not an object")
    transcript = record.get("transcript")
    if not isinstance(transcript, list):
        raise ValueError("no transcript list")
    correct = record.get("correct", "absent")
    if correct is not None and (isinstance(correct, bool) or correct not in (0, 1)):
        raise ValueError(f"correct={correct!r}: expected 0, 1 or null")
    return correct, transcript


def tool_usage(
    benchmark: str, records: Iterable[Any], dropped: int = 0, first_drop: str = ""
) -> dict[str, Any]:
    """Return the ``tool_usage`` block of ``benchmark`` over the item ``records`` (``dropped``/``first_drop``:
    malformed records a reader already set aside)."""
    per: list[tuple[float, dict[str, int]]] = []
    unscored = 0
    for i, record in enumerate(records):
        try:
            correct, transcript = _verdict(record)
            counts = trajectory_counts(transcript)
        except ValueError as exc:
            dropped += 1
            rid = record.get("id") if isinstance(record, dict) else None
            first_drop = first_drop or f"record {i} (id {rid!r}): {exc}"
            continue
        if correct is None:
            unscored += 1
        else:
            per.append((float(correct), counts))
    right = [c["iters"] for ok, c in per if ok == 1.0]
    wrong = [c["iters"] for ok, c in per if ok == 0.0]
    return {
        "benchmark": benchmark,
        "trajectories": len(per),
        "correct": len(right),
        "wrong": len(wrong),
        "mean": {k: mean_or_none([c[k] for _, c in per]) for k in COUNTS},
        "iters_correct": mean_or_none(right),
        "iters_wrong": mean_or_none(wrong),
        "unscored_excluded": unscored,
        "dropped_records": dropped,
        "first_dropped": first_drop or None,
        "definition": DEFINITION,
    }


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def usage_markdown(blocks: list[dict[str, Any]]) -> str:
    """Return the blocks as Table 19's markdown: Iters, Search, Scrape, Python, Iters corr. / wrong."""
    lines = [
        "| Dataset | Trajectories | Iters | Search | Scrape | Python | Iters corr. / wrong |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for b in blocks:
        mean = b["mean"]
        cells = [_cell(mean[k]) for k in ("iters", "search", "scrape", "python")]
        split = f"{_cell(b['iters_correct'])} / {_cell(b['iters_wrong'])}"
        lines.append(f"| {b['benchmark']} | {b['trajectories']} | {' | '.join(cells)} | {split} |")
    notes = [f"{b['benchmark']}: {b['unscored_excluded']} unscored excluded" for b in blocks]
    notes += [f"{b['benchmark']}: {b['dropped_records']} malformed records dropped" for b in blocks]
    return "\n".join([*lines, "", DEFINITION + ". " + "; ".join(notes) + "."]) + "\n"


def read_items(paths: list[Path]) -> tuple[list[Any], int, str]:
    """Return the records of ``.items.jsonl`` files, the count of unreadable lines and the first one."""
    records: list[Any] = []
    bad, first = 0, ""
    for path in paths:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                bad += 1
                first = first or f"{path}:{n}: invalid JSON ({exc.msg})"
    return records, bad, first


def main(argv: list[str] | None = None) -> int:
    """CLI: print the pooled Table 19 row of the given item files; 2 when a file is missing."""
    ap = argparse.ArgumentParser(prog="python -m eval.harnesses.search_tool_usage", description=__doc__)
    ap.add_argument("--bench", required=True, help="The benchmark's name (the row label).")
    ap.add_argument("items", nargs="+", type=Path, help="search_bench's result.items.jsonl file(s).")
    args = ap.parse_args(argv)
    try:
        records, bad, first = read_items(args.items)
    except FileNotFoundError as exc:
        print(f"search_tool_usage: {exc.filename}: not found", file=sys.stderr)
        return 2
    print(usage_markdown([tool_usage(args.bench, records, bad, first)]), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
