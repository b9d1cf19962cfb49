"""The ``awm_verifier`` reward: an AWM task's own code verifier on the episode's final database, binary.

Stage 04's reward (paper §3.5: no judge, no format or step reward). Inside an episode the ``awm``
environment scores with the live episode database (:meth:`infra.agents.awm.env.AwmEnv.score`); called
directly, the request names the episode in ``metadata`` (``awm_release``: the release folder,
``scenario``, ``task_idx``) and gives its final state either as ``final_db_path`` (a SQLite file) or as
the episode ``transcript``, whose tool calls are replayed in order on a fresh copy of the scenario's
database in the sandboxed server (the servers are deterministic, so the replay ends in the episode's
state). The verifier runs in the sandbox on read-only copies with a timeout; anything that keeps it from
running is ``aborted``, never a 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.agents.contract import EnvironmentFailure
from rewards.contract import RewardRequest, RewardResult, register_reward

if TYPE_CHECKING:
    from infra.agents.awm.env import AwmRuntime
    from infra.agents.awm.release import Scenario


def _aborted(why: str) -> RewardResult:
    return RewardResult(score=0.0, aborted=True, failure="environment", details={"error": why})


@register_reward("awm_verifier")
def awm_verifier(request: RewardRequest) -> RewardResult:
    """Return 1.0 when the task's verifier says ``complete`` on the final database, else 0.0."""
    from infra.agents.awm.env import runtime

    meta = request.metadata
    missing = [k for k in ("awm_release", "scenario", "task_idx") if k not in meta]
    if "final_db_path" not in meta and request.transcript is None:
        missing.append("final_db_path (or a transcript)")
    if missing:
        return _aborted(f"awm_verifier needs metadata keys {missing} (the awm environment scores episodes)")
    try:
        rt = runtime(str(Path(str(meta["awm_release"])).resolve()))
        scenario = rt.scenario(str(meta["scenario"]))
        code = scenario.verifiers.get(int(meta["task_idx"]))
        if "final_db_path" in meta:
            final = Path(str(meta["final_db_path"])).read_bytes()
        else:
            final = replayed_database(rt, scenario, request.transcript or [])
    except (OSError, KeyError, ValueError, EnvironmentFailure) as exc:
        return _aborted(f"awm_verifier: {exc}")
    if code is None:
        return _aborted(f"scenario {scenario.name!r} task {meta['task_idx']} has no verifier")
    return rt.verifier().verify(code, scenario.database(), final, request.response)


def replayed_database(rt: AwmRuntime, scenario: Scenario, transcript: list[dict[str, Any]]) -> bytes:
    """Replay the transcript's tool calls (``tool_calls: [{name, input}]``) on a fresh database copy."""
    calls = [c for e in transcript if e.get("role") == "assistant" for c in e.get("tool_calls") or []]
    pool = rt.servers()
    lease = pool.acquire(scenario)
    try:
        for call in calls:
            lease.call_tool(str(call["name"]), json.dumps(call.get("input") or {}))
        return lease.snapshot()
    finally:
        pool.release(lease)
