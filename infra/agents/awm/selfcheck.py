"""Self-check of AWM-format tasks that come with gold actions: the verifier must separate gold from no-op.

For every task: the gold action sequence (``gold_actions.jsonl``: ``{scenario, task_idx, actions:
[{tool, arguments}], final_answer}``) is replayed through the sandboxed server on a fresh database and
must pass the verifier; the untouched database with an empty answer must fail it; both verdicts must
be the same when run again (determinism). A verifier that passes doing nothing, a gold call the server
rejects, or a verifier that crashes is reported as ``scenario/task_idx: reason``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infra.agents.awm.release import ReleaseError, load_release, normalize_scenario_name
from infra.agents.awm.server import AwmServerPool, VerifierRunner
from infra.agents.contract import EnvironmentFailure

GOLD = "gold_actions.jsonl"


def load_gold(folder: str | Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Return the gold records by (scenario, task_idx); errors name the file and line."""
    path = Path(folder) / GOLD
    if not path.is_file():
        raise ReleaseError(f"{path}: missing (the generator writes it beside the release files)")
    out = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            rec = json.loads(line)
            if not isinstance(rec.get("actions"), list):
                raise ReleaseError(f"{path}:{lineno}: key 'actions' must be a list")
            out[(normalize_scenario_name(rec["scenario"]), int(rec["task_idx"]))] = rec
    return out


def replay(pool: AwmServerPool, scenario: Any, actions: list[dict[str, Any]]) -> tuple[bytes, list[str]]:
    """Run ``actions`` on a fresh copy of the scenario's database; return (final db, rejected calls)."""
    rejected = []
    lease = pool.acquire(scenario)
    try:
        for k, action in enumerate(actions):
            reply = lease.call_tool(action["tool"], json.dumps(action.get("arguments") or {}))
            if reply["status"] >= 400:
                rejected.append(
                    f"action {k} {action['tool']} -> HTTP {reply['status']}: {reply['body'][:120]}"
                )
        return lease.snapshot(), rejected
    finally:
        pool.release(lease)


def self_check(folder: str | Path, *, workers: int = 1, unsafe_local: bool = False) -> list[str]:
    """Return every problem found in the release at ``folder`` (empty: every task checks out)."""
    scenarios, gold = load_release(folder), load_gold(folder)
    problems: list[str] = []
    pool = AwmServerPool(workers, unsafe_local=unsafe_local)
    verifier = VerifierRunner(1, unsafe_local=unsafe_local)
    try:
        for name, scenario in scenarios.items():
            for idx in range(len(scenario.tasks)):
                where = f"{name}/{idx}"
                code, record = scenario.verifiers.get(idx), gold.get((name, idx))
                if code is None or record is None:
                    problems.append(f"{where}: no {'verifier' if code is None else 'gold actions'}")
                    continue
                try:
                    final, rejected = replay(pool, scenario, record["actions"])
                except EnvironmentFailure as exc:
                    problems.append(f"{where}: server failed during the gold actions: {exc}")
                    continue
                problems += [f"{where}: gold {r}" for r in rejected]
                problems += _verdicts(where, verifier, code, scenario.database(), final, record)
    finally:
        pool.close()
        verifier.close()
    return problems


def _verdicts(
    where: str, verifier: VerifierRunner, code: str, initial: bytes, final: bytes, record: dict[str, Any]
) -> list[str]:
    answer = str(record.get("final_answer") or "")
    runs = [verifier.verify(code, initial, db, ans) for db, ans in ((final, answer), (initial, ""))]
    again = [verifier.verify(code, initial, db, ans) for db, ans in ((final, answer), (initial, ""))]
    gold, noop = runs
    out = []
    for label, res in (("gold", gold), ("no-op", noop)):
        if res.aborted:
            out.append(f"{where}: verifier failed on the {label} run: {res.details}")
    if out:
        return out
    if gold.score != 1.0:
        out.append(f"{where}: the gold action sequence fails its verifier")
    if noop.score != 0.0:
        out.append(f"{where}: doing nothing passes the verifier")
    if [r.score for r in runs] != [r.score for r in again]:
        out.append(f"{where}: verifier is not deterministic")
    return out
