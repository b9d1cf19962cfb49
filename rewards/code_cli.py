"""``rufus reward code``: score a JSONL of (problem, response) pairs with the sandboxed Coding-RL reward.

Input lines: ``{"id": str, "problem": {...}, "response": str}``; output lines: ``{"id", "reward", ...}``
in input order. Malformed lines are dropped, counted and named on stderr (file and line number).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from infra.sandbox import Limits, SandboxUnavailable
from rewards.code_reward import MAX_TESTS, CodeScorer, parse_problem

code_app = typer.Typer(help="Score code responses against unit tests in the sandbox.", add_completion=False)


def read_pairs(path: Path) -> tuple[list[dict], list[str]]:
    """Valid records of a pairs JSONL and one message per dropped line."""
    records, dropped = [], []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError("line is not a JSON object")
                for key, kind in (("id", str), ("response", str), ("problem", dict)):
                    if not isinstance(rec.get(key), kind):
                        raise ValueError(f"key {key!r} missing or not a {kind.__name__}")
                parse_problem(rec["problem"])
            except ValueError as exc:
                dropped.append(f"{path}:{lineno}: {exc}")
                continue
            records.append(rec)
    return records, dropped


def result_line(rec_id: str, result) -> dict:
    """The output record of one scored pair."""
    out = {"id": rec_id, "reward": result.score, "failure": result.failure, "aborted": result.aborted}
    out.update(result.details)
    return out


@code_app.command("code")
def score_pairs_cli(
    input: Path = typer.Option(..., "--input", exists=True, dir_okay=False, help="pairs.jsonl to score"),
    output: Path = typer.Option(..., "--output", help="scores.jsonl to write"),
    workers: int = typer.Option(0, help="sandbox workers (0: one per CPU)"),
    max_tests: int = typer.Option(MAX_TESTS, help="tests per problem (deterministic subsample)"),
    test_timeout: float = typer.Option(4.0, help="seconds per test"),
    wall: float = typer.Option(30.0, help="seconds per response, all tests together"),
    unsafe_local: bool = typer.Option(
        False, "--unsafe-local", help="NO ISOLATION: your own trusted code only"
    ),
) -> None:
    """Score every (problem, response) pair of INPUT and write one result line per pair to OUTPUT."""
    records, dropped = read_pairs(input)
    for msg in dropped:
        print(f"dropped {msg}", file=sys.stderr)
    limits = Limits(wall_s=wall, test_timeout_s=test_timeout)
    scorer = CodeScorer(
        workers=workers or None, limits=limits, max_tests=max_tests, unsafe_local=unsafe_local
    )
    try:
        scorer.pool  # noqa: B018 - start the sandbox now so a refusal is reported before any work
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    try:
        results = scorer.score_batch([(r["problem"], r["response"]) for r in records])
    finally:
        scorer.pool.close()
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as fh:
        for rec, result in zip(records, results, strict=True):
            fh.write(json.dumps(result_line(rec["id"], result), sort_keys=True) + "\n")
    passed = sum(r.score > 0 for r in results)
    print(
        f"scored {len(results)} pairs ({passed} passed), dropped {len(dropped)} malformed lines",
        file=sys.stderr,
    )


if __name__ == "__main__":
    code_app()
